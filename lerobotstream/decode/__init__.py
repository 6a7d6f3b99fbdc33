"""Mini-MP4 bytes → frames: torchcodec (CPU / NVDEC with counted fallback), PyAV fallback, LRU."""

from lerobotstream.decode._cache import DecoderCache
from lerobotstream.decode._cuda import (
    FALLBACK_STATUS,
    NVDEC_MIN_CAPABILITY,
    FallbackStatus,
    nvdec_capability,
    resolve_device,
)
from lerobotstream.decode._decoder import EpisodeDecoder, EpisodeVideo, frame_mappings_json

__all__ = [
    "DecoderCache", "EpisodeDecoder", "EpisodeVideo", "FallbackStatus", "FALLBACK_STATUS",
    "NVDEC_MIN_CAPABILITY", "frame_mappings_json", "nvdec_capability", "resolve_device",
]
