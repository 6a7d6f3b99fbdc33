"""Byte sources: bytes at (path, offset, length) from local disk, fsspec URLs, the Hub or buckets.

Every reader of the library (metadata, sidecar building, payload fetching) goes through one
:class:`ByteSource`. Paths are POSIX paths relative to the dataset root (``meta/info.json``,
``videos/observation.images.top/chunk-000/file-000.mp4``).
"""

from lerobotstream.sources._base import ByteSource, SourceStats
from lerobotstream.sources._local import LocalSource

__all__ = ["ByteSource", "SourceStats", "LocalSource"]
