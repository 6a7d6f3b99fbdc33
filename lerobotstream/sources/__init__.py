"""Byte sources: bytes at (path, offset, length) from local disk, fsspec URLs, the Hub or buckets.

Every reader of the library (metadata, sidecar building, payload fetching) goes through one
:class:`ByteSource`. Paths are POSIX paths relative to the dataset root (``meta/info.json``,
``videos/observation.images.top/chunk-000/file-000.mp4``) that keep to the path rule
(:func:`path_problem`): every source refuses one that could leave its root. :func:`open_source`
picks the backend.
"""

from lerobotstream.sources._base import ByteSource
from lerobotstream.sources._open import open_source

__all__ = ["ByteSource", "open_source"]
