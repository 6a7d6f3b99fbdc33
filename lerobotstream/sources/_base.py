"""The byte-source interface every backend implements, and range coalescing."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from lerobotstream.errors import RangeReadError, SourceError
from lerobotstream.sources._paths import MAX_METADATA_FILE_NBYTES

#: Two requested ranges at most this many bytes apart are fetched with one request (the gap is read
#: and dropped): below one round-trip's worth of bytes at 300 MB/s, and below a GOP.
COALESCE_GAP_BYTES = 32 * 1024
#: A coalesced request never grows beyond this many bytes by merging (a single range may be larger).
COALESCE_MAX_BYTES = 64 * 1024 * 1024
_COUNTERS = ("requests", "bytes_read", "bytes_requested", "retries", "metadata_requests")


@dataclass
class SourceStats:
    """Counters for profiling, per process: ``requests`` (a coalesced group counts once),
    ``bytes_read`` (coalescing gaps included), ``bytes_requested`` (asked by callers), ``retries``,
    ``metadata_requests`` (listing, HEAD and revision requests)."""

    requests: int = 0
    bytes_read: int = 0
    bytes_requested: int = 0
    retries: int = 0
    metadata_requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _pid: int = field(default_factory=os.getpid, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                for key in _COUNTERS:
                    setattr(self, key, 0)
            for key, n in counts.items():
                setattr(self, key, getattr(self, key) + n)

    def as_dict(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in _COUNTERS}

    def __getstate__(self):
        return self.as_dict()

    def __setstate__(self, state):
        self.__init__(**state)


def check_ranges(path: str, ranges: Sequence[tuple[int, int]], size: int | None = None) -> None:
    """Raise RangeReadError for a negative offset/length or (when ``size`` is known) a range past EOF."""
    for offset, length in ranges:
        if offset < 0 or length < 0:
            raise RangeReadError(f"invalid range (offset={offset}, length={length}) for {path}", path=path)
        if size is not None and offset + length > size:
            raise RangeReadError(
                f"range [{offset}, {offset + length}) lies outside {path} ({size} bytes)", path=path, offset=offset
            )


def check_file_size(path: str, nbytes: int, where: str) -> None:
    """Raise SourceError when a metadata file of ``nbytes`` bytes exceeds :data:`MAX_METADATA_FILE_NBYTES`."""
    if nbytes > MAX_METADATA_FILE_NBYTES:
        raise SourceError(
            f"{path!r} at {where} has {nbytes} bytes, more than the {MAX_METADATA_FILE_NBYTES} bytes a metadata "
            "file may have; it is not read",
            path=path,
        )


def coalesce_ranges(
    ranges: Sequence[tuple[int, int]],
    gap_bytes: int = COALESCE_GAP_BYTES,
    max_bytes: int = COALESCE_MAX_BYTES,
) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
    """Merge overlapping, adjacent and near ``(offset, length)`` ranges into fewer requests.

    Args:
        ranges: requested byte ranges (any order, may overlap); zero-length ranges are allowed.
        gap_bytes: ranges at most this many bytes apart share one request.
        max_bytes: merging stops once a request would exceed this size.

    Returns:
        ``(groups, where)``: ``groups`` are the ``(offset, length)`` requests in file order;
        ``where[i] = (group_index, start_in_group, length)`` places requested range ``i``.
    """
    order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
    groups: list[list[int]] = []  # [start, stop]
    where: list[tuple[int, int, int]] = [(0, 0, 0)] * len(ranges)
    for i in order:
        off, n = int(ranges[i][0]), int(ranges[i][1])
        if n == 0:
            continue
        if groups:
            g = groups[-1]
            if off <= g[1] + gap_bytes and max(g[1], off + n) - g[0] <= max(max_bytes, n):
                g[1] = max(g[1], off + n)
                where[i] = (len(groups) - 1, off - g[0], n)
                continue
        groups.append([off, off + n])
        where[i] = (len(groups) - 1, 0, n)
    return [(g[0], g[1] - g[0]) for g in groups], where


class ByteSource:
    """Read-only access to the files of one dataset root: thread-safe, fork-safe (handles and
    connections keyed by PID) and picklable (the :attr:`_PROCESS_LOCAL` attributes re-created by
    :meth:`_init_process_state`). Subclasses implement :meth:`size`, :meth:`list` and
    :meth:`_read_ranges` or :meth:`_fetch` / :meth:`_fetch_groups` (ranges then coalesced)."""

    #: human-readable root (no credentials), used in error messages
    root_display: str = ""
    #: attributes that belong to one process (locks, descriptors): never pickled
    _PROCESS_LOCAL: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.stats = SourceStats()

    def _init_process_state(self) -> None:
        """Create the :attr:`_PROCESS_LOCAL` attributes empty (called after unpickling)."""

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for name in self._PROCESS_LOCAL:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_process_state()

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

    def _fetch(self, path: str, offset: int, length: int) -> bytes:
        """One request for bytes ``[offset, offset + length)``; exactly ``length`` bytes or a raise."""
        raise NotImplementedError

    def _fetch_groups(self, path: str, groups: list[tuple[int, int]]) -> list:
        """The bytes of each coalesced ``(offset, length)`` group (one :meth:`_fetch` each)."""
        return [self._fetch(path, off, n) for off, n in groups]

    def _read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        check_ranges(path, ranges, self.size(path))
        groups, where = coalesce_ranges(ranges)
        blobs = self._fetch_groups(path, groups)
        self.stats.add(bytes_requested=sum(int(n) for _, n in ranges))
        out = []
        for g, start, n in where:
            if n == 0:
                out.append(b"")
                continue
            blob = blobs[g]
            out.append(blob if (start == 0 and n == len(blob)) else bytes(memoryview(blob)[start : start + n]))
        return out

    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Read several ``(offset, length)`` byte ranges of ``path``; returns one bytes per range
        (near ranges fetched with one request on remote stores).

        Raises:
            SourceNotFoundError: the file does not exist.
            RangeReadError: a range lies outside the file or the store kept returning wrong bytes.
            SourceAuthError: the store refused the credentials.
            SourceError: any other failure once retries ran out.
        """
        return self._read_ranges(path, list(ranges))

    def read(self, path: str, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` of ``path``."""
        return self.read_ranges(path, [(offset, length)])[0]

    def read_file(self, path: str) -> bytes:
        """The whole file (for metadata files only).

        Raises:
            SourceError: the file is larger than :data:`MAX_METADATA_FILE_NBYTES` (not read); the
                other errors of :meth:`read_ranges`.
        """
        size = self.size(path)
        check_file_size(path, size, self.root_display)
        return self.read(path, 0, size)

    def local_path(self, path: str) -> str | None:
        """A local filesystem path for ``path`` when the source is local, else None."""
        return None

    def close(self) -> None:
        """Release handles and connections of this process (the source stays usable)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root_display!r})"
