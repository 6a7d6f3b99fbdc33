"""Mini-MP4 bytes → frames: torchcodec (CPU / NVDEC with counted fallback), PyAV fallback, LRU; depth
(``gray12le``) codes with PyAV and LeRobot's dequantiser."""

from lerobotstream.decode._cuda import (
    FALLBACK_STATUS,
    NVDEC_MIN_CAPABILITY,
    FallbackStatus,
    nvdec_capability,
    resolve_device,
)
from lerobotstream.decode._decoder import EpisodeDecoder, EpisodeVideo, frame_mappings_json
from lerobotstream.decode._depth import DepthDecoder, DepthDequantizer, dequantize_reference
from lerobotstream.decode._frames import frames_to_float_chw, frames_to_u8_chw
from lerobotstream.decode._lean import import_decoder_lean, import_in_worker
from lerobotstream.decode._open_decoders import OpenDecoderLRU

__all__ = [
    "OpenDecoderLRU",
    "DepthDecoder",
    "DepthDequantizer",
    "EpisodeDecoder",
    "EpisodeVideo",
    "FallbackStatus",
    "FALLBACK_STATUS",
    "NVDEC_MIN_CAPABILITY",
    "dequantize_reference",
    "frame_mappings_json",
    "frames_to_float_chw",
    "frames_to_u8_chw",
    "import_decoder_lean",
    "import_in_worker",
    "nvdec_capability",
    "resolve_device",
]
