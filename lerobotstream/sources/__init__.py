"""Byte sources: bytes at (path, offset, length) from local disk, fsspec URLs, the Hub or buckets.

Every reader of the library (metadata, sidecar building, payload fetching) goes through one
:class:`ByteSource`. Paths are POSIX paths relative to the dataset root (``meta/info.json``,
``videos/observation.images.top/chunk-000/file-000.mp4``) that keep to the path rule
(:func:`path_problem`): every source refuses one that could leave its root. :func:`open_source`
picks the backend.
"""

from lerobotstream.sources._base import COALESCE_GAP_BYTES, ByteSource, SourceStats, coalesce_ranges
from lerobotstream.sources._fsspec import FsspecSource
from lerobotstream.sources._http import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    HttpSource,
    RetryPolicy,
)
from lerobotstream.sources._hub import HubSource
from lerobotstream.sources._local import LocalSource
from lerobotstream.sources._open import lerobot_local_copy, open_source, parse_hf_url
from lerobotstream.sources._paths import MAX_METADATA_FILE_NBYTES, MAX_PATH_CHARS, path_problem
from lerobotstream.sources._prefetch import PrefetchedReads

__all__ = [
    "ByteSource",
    "SourceStats",
    "LocalSource",
    "FsspecSource",
    "HttpSource",
    "HubSource",
    "RetryPolicy",
    "open_source",
    "lerobot_local_copy",
    "parse_hf_url",
    "coalesce_ranges",
    "COALESCE_GAP_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_READ_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "PrefetchedReads",
    "path_problem",
    "MAX_PATH_CHARS",
    "MAX_METADATA_FILE_NBYTES",
]
