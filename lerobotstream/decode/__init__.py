"""Mini-MP4 bytes → frames: torchcodec (CPU / NVDEC with counted fallback), PyAV fallback, LRU; depth
(``gray12le``) codes with PyAV and LeRobot's dequantiser.

Internal: exports nothing. The library and its tests import from the module that defines a name
(``from lerobotstream.decode._decoder import EpisodeVideo``)."""

__all__: list[str] = []
