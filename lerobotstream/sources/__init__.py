"""Byte sources: bytes at (path, offset, length) from local disk, fsspec URLs, the Hub or buckets.

Every reader of the library goes through one :class:`ByteSource` (:func:`open_source` picks the
backend). Paths are POSIX paths relative to the dataset root (``meta/info.json``) that keep to the
path rule (``_paths.path_problem``): every source refuses one that could leave its root.
"""

from lerobotstream.sources._base import ByteSource
from lerobotstream.sources._open import open_source

__all__ = ["ByteSource", "open_source"]
