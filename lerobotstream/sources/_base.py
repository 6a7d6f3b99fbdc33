"""The byte-source interface every backend implements."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class SourceStats:
    """Counters for profiling; per process (reset in a forked child)."""

    requests: int = 0
    """Number of read requests sent to the store (a coalesced group of ranges counts once)."""
    bytes_read: int = 0
    """Payload bytes returned by the store, bytes."""
    retries: int = 0
    """Requests repeated after a retryable failure."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, requests: int = 0, bytes_read: int = 0, retries: int = 0) -> None:
        with self._lock:
            self.requests += requests
            self.bytes_read += bytes_read
            self.retries += retries

    def as_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "bytes_read": self.bytes_read, "retries": self.retries}


class ByteSource:
    """Read-only access to the files of one dataset root.

    Implementations are thread-safe and fork-safe: a process that was forked from the one that
    opened a handle or connection never reuses it (handles are keyed by PID).

    Subclasses implement :meth:`size`, :meth:`_read_ranges` and :meth:`list`; the rest derives.
    """

    #: human-readable root (no credentials), used in error messages
    root_display: str = ""

    def __init__(self) -> None:
        self.stats = SourceStats()

    # --- to implement ------------------------------------------------------------------------
    def size(self, path: str) -> int:
        """Size of ``path`` in bytes. Raises SourceNotFoundError when it does not exist."""
        raise NotImplementedError

    def fingerprint(self, path: str) -> str | None:
        """A content fingerprint (ETag / xet hash; ``mtime_ns:size`` locally), or None when the
        store has no stable object identity."""
        return None

    def exists(self, path: str) -> bool:
        """True when ``path`` is a file under the root."""
        try:
            self.size(path)
        except FileNotFoundError:
            return False
        return True

    def list(self, prefix: str) -> list[str]:
        """Relative paths of every file under the folder ``prefix`` (recursive, sorted)."""
        raise NotImplementedError

    def _read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        raise NotImplementedError

    # --- derived -------------------------------------------------------------------------------
    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Read several ``(offset, length)`` byte ranges of ``path``; returns one bytes per range.

        Raises:
            SourceNotFoundError: the file does not exist.
            RangeReadError: a range lies outside the file or the store returned the wrong bytes.
        """
        return self._read_ranges(path, ranges)

    def read(self, path: str, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` of ``path``."""
        return self._read_ranges(path, [(offset, length)])[0]

    def read_file(self, path: str) -> bytes:
        """The whole file (for small metadata files only)."""
        return self.read(path, 0, self.size(path))

    def local_path(self, path: str) -> str | None:
        """A local filesystem path for ``path`` when the source is local, else None."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root_display!r})"
