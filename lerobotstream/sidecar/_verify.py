"""Verify on first use: a sidecar's tables of one MP4 are compared with that MP4's own ``moov``
before the first frame of the MP4 is served.

A published sidecar, or one in a cache other users can write, could move one episode's sample
positions onto another's or change a display matrix; the metadata checks at start
(``sidecar._validate``) cannot see that. So the first time a process fetches from a source (or
decodes what it fetched before serving its first item: ``EpisodeSpans.fetch_span``),
:class:`VerifiedTables` parses the source's ``moov`` (a probe of the file's start, plus one read
of the tail when ``moov`` follows ``mdat``; no payload) and compares it with the sidecar's table
(:func:`table_disagreement`).

- A local build parsed every MP4 itself: all its sources are recorded when it is installed.
- They agree: the agreement is recorded beside the derived index (``<index stem>.verified``: one
  line per source, a digest of its path, size and fingerprint), so later processes of the node
  skip the parse. The record is cache content, proving only what the derived index itself does
  (docs/sidecars.md: who may write a shared cache).
- They disagree: the MP4's own table is used for that source and spans planned on the sidecar's
  table are planned again; one warning names the source and the difference, and ``<index
  stem>.rejected`` is written, so the next dataset start builds locally (a published copy of the
  same file is refused too).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from lerobotstream import constants
from lerobotstream.errors import LeRobotStreamError, SidecarSchemaError
from lerobotstream.mp4._index_file import Mp4Index, write_note
from lerobotstream.mp4._index_format import index_name
from lerobotstream.mp4._npz_schema import npz_generation

logger = logging.getLogger("lerobotstream.sidecar")

#: per-sample arrays compared (decode order), the derived ones too (the derived index stores them)
_ARRAYS = ("offset", "size", "dts_ticks", "cts_ticks", "is_sync", "pts_ticks", "presentation_order")
#: bytes of the record read at once (one line per source: 300,000 sources are 10 MB)
_MAX_RECORD_READ = 64 << 20
#: scalars compared (what the mini-MP4 and the timestamps are made of)
_SCALARS = (
    "media_timescale",
    "movie_timescale",
    "media_time",
    "empty_edit_movie_ticks",
    "codec",
    "width",
    "height",
    "track_id",
    "stsd",
    "matrix",
    "movie_matrix",
)


def _beside(index_path: str | os.PathLike, suffix: str) -> Path:
    """``<stem>.rejected`` (the derived index disagreed with an MP4's own ``moov``) or
    ``<stem>.verified`` (the record of verified sources) beside a derived index."""
    p = Path(index_path)
    return p.with_name(p.stem + suffix)


def _norm(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    return value


def _shown(v: Any) -> str:
    return f"{len(v)} bytes" if isinstance(v, bytes) else repr(v)


def table_disagreement(sidecar: Any, parsed: Any) -> str | None:
    """None when a sidecar's table of one source says what the MP4's own ``moov`` says, else the
    first difference (field, and for arrays the first sample that differs).

    Args:
        sidecar: the sidecar's ``SampleTable`` (views of the derived index, any integer dtypes).
        parsed: ``parse_mp4``'s ``SampleTable`` of the same file.
    """
    n, m = int(np.asarray(sidecar.offset).shape[0]), int(np.asarray(parsed.offset).shape[0])
    if n != m:
        return f"the sidecar lists {n} samples, the MP4 {m}"
    for name in _ARRAYS:
        a = np.asarray(getattr(sidecar, name)).astype(np.int64, copy=False)
        b = np.asarray(getattr(parsed, name)).astype(np.int64, copy=False)
        diff = np.flatnonzero(a != b)
        if diff.shape[0]:
            k = int(diff[0])
            return (
                f"{name} of sample {k} is {int(a[k])} in the sidecar, {int(b[k])} in the MP4 "
                f"({diff.shape[0]} samples differ)"
            )
    if not np.array_equal(np.asarray(sidecar.pts_s, dtype=np.float64), np.asarray(parsed.pts_s, dtype=np.float64)):
        return "pts_s differ"
    for name in _SCALARS:
        a, b = _norm(getattr(sidecar, name, None)), _norm(getattr(parsed, name, None))
        if a != b:
            return f"{name} is {_shown(a)} in the sidecar, {_shown(b)} in the MP4"
    return None


class VerifiedTables:
    """The sample tables a process plans spans on and serves frames from: the sidecar's, each
    verified against its MP4's own ``moov`` before the first frame of that MP4 is served. Thread-safe.

    :meth:`table_for_path` (sizing, span planning) does not verify; :meth:`verify` (called before
    any payload is read or frame decoded: ``EpisodeSpans.fetch_span``) does, once per source. A span
    planned on a table that :meth:`verify` replaced is planned again (``EpisodeSpans.verified_span``).

    Args:
        index: the sidecar's ``Mp4Index``.
        source: ``ByteSource`` of the dataset root (``size``, ``fingerprint``, ``read``); None:
            tables are not verified (tools that have no sources).
    """

    def __init__(self, index: Any, source: Any) -> None:
        self.index = index
        self.source = source
        self._tables: dict[str, Any] = {}
        self._checked: set[str] = set()  # paths verified (or replaced) in this process
        self._lock = threading.Lock()
        self._path_locks: dict[str, threading.Lock] = {}  # one verification of a source at a time
        self._recorded: set[str] = set()  # sources recorded as verified, read from the record so far
        self._record_pos = 0
        self.verified = 0  # sources parsed and compared by this process
        self.replaced = 0  # sources whose sidecar table disagreed (the MP4's own table is served)

    def table_for_path(self, path: str) -> Any:
        """The current table of the MP4 at ``path`` (decode order; ``SampleTable`` fields): the
        sidecar's, its values checked, or the MP4's own once :meth:`verify` replaced it (or the
        derived index's table was damaged).

        Raises:
            KeyError: ``path`` is not in the sidecar.
            SidecarSchemaError: the derived index's table of ``path`` is damaged and there is no source.
            Mp4Error, SourceError: the MP4 cannot be read or parsed (names the file).
        """
        t = self._tables.get(path)
        if t is not None:
            return t
        try:
            table = self.index.table(self.index.source_id(path))
        except SidecarSchemaError as e:  # a damaged derived index: the MP4's own table, as on a mismatch
            if self.source is None:
                raise
            return self._replace(path, self._parse(path), str(e))
        with self._lock:
            return self._tables.setdefault(path, table)

    def verify(self, path: str) -> None:
        """Compare the table of ``path`` with the MP4's own ``moov`` unless that was done already (by
        this process, or recorded on this node); on a difference the MP4's table replaces it.

        Raises:
            Mp4Error, SourceError: the MP4 cannot be read or parsed (names the file).
        """
        if self.source is None or path in self._checked:
            return
        with self._lock:
            path_lock = self._path_locks.setdefault(path, threading.Lock())
        with path_lock:  # one parse per source: other threads wait for it (its reads have time limits)
            if path in self._checked:
                return
            table = self.table_for_path(path)
            key = self._key(path)
            if self._is_recorded(key):
                self._checked.add(path)
                return
            parsed = self._parse(path)
            with self._lock:
                self.verified += 1
            reason = table_disagreement(table, parsed)
            if reason is None:
                _append_line(_beside(self.index.index_path, ".verified"), key)
                self._checked.add(path)
                return
            self._replace(path, parsed, reason)

    def _key(self, path: str) -> str:
        return _record_key(path, int(self.source.size(path)), self.source.fingerprint(path))

    def _is_recorded(self, key: str) -> bool:
        if key in self._recorded:
            return True
        # another process of the node may have verified it since: read what was appended
        try:
            with open(_beside(self.index.index_path, ".verified"), "rb") as f:
                f.seek(self._record_pos)
                tail = f.read(_MAX_RECORD_READ)
        except OSError:
            return False
        cut = tail.rfind(b"\n") + 1  # whole lines only (a writer may be mid-line)
        self._record_pos += cut
        self._recorded.update(line for line in tail[:cut].decode("ascii", "replace").split("\n") if len(line) == 32)
        return key in self._recorded

    def _parse(self, path: str) -> Any:
        from lerobotstream.mp4.parse import parse_mp4

        size = int(self.source.size(path))
        return parse_mp4(lambda offset, n: self.source.read(path, offset, n), size, path=path)

    def _replace(self, path: str, parsed: Any, reason: str) -> Any:
        """Serve ``parsed`` (the MP4's own table) for ``path`` from now on; one warning per path and
        process; the sidecar is marked rejected. Returns the table now served."""
        with self._lock:
            if path in self._checked and path in self._tables:
                return self._tables[path]  # another thread replaced it first
            self._tables[path] = parsed
            self._checked.add(path)
            self.replaced += 1
        logger.warning(
            "the MP4 sidecar (%s) disagrees with %s's own moov: %s; serving that file from its own tables "
            "and rebuilding the sidecar locally at the next start",
            self.index.index_path,
            path,
            reason,
        )
        write_note(_beside(self.index.index_path, ".rejected"), {"source": path, "reason": reason})
        return parsed


def _record_key(path: str, size: int, fingerprint: Any) -> str:
    """The record's line for one MP4 at one state (its path, size and fingerprint)."""
    return hashlib.sha256(f"{path}\0{size}\0{fingerprint}".encode("utf-8", "surrogateescape")).hexdigest()[:32]


def record_local_build(
    npz_path: str | os.PathLike, files: Any, index_dir: Any = None, lock_timeout_s: float = 1800.0
) -> None:
    """A local build parsed every MP4 itself: record its sources as verified beside its derived
    index (converting it now rather than at the open that follows), so no process of the node
    parses them again. ``files``: ``[(path, size, fingerprint)]`` of the built sources. Best effort."""
    try:
        index = Mp4Index.open(npz_path, index_dir=index_dir, lock_timeout_s=lock_timeout_s)
    except (LeRobotStreamError, OSError):
        return
    index.close()
    _append_line(_beside(index.index_path, ".verified"), "\n".join(_record_key(p, int(n), fp) for p, n, fp in files))


def _append_line(path: Path, line: str) -> None:
    """Append ``line`` (one or more lines) with one ``O_APPEND`` ``write`` (concurrent writers'
    lines do not interleave); best effort."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode("ascii"))
        finally:
            os.close(fd)


def rejected_reason(index_path: str | os.PathLike) -> str | None:
    """Why a first-use verification rejected this derived index's sidecar, or None when none did."""
    try:
        text = _beside(index_path, ".rejected").read_text("utf-8")
    except FileNotFoundError:
        return None
    except OSError:
        text = ""
    try:
        doc = json.loads(text)
        return f"{doc['source']!s} disagrees with its own moov: {doc['reason']!s}"[:500]
    except (ValueError, TypeError, KeyError):
        return "an MP4 disagreed with its own moov"


def forget_rejection(npz_path: str | os.PathLike, index_dir: str | os.PathLike | None = None) -> None:
    """A locally built sidecar is trusted: remove a rejection of its generation and the derived
    index it was made from (a damaged derived index of an identical archive), so it is converted
    again. Best effort."""
    try:
        with zipfile.ZipFile(npz_path) as zf:
            idx = Path(index_dir if index_dir is not None else constants.INDEX_DIR) / index_name(npz_generation(zf))
    except (OSError, zipfile.BadZipFile):
        return
    if not _beside(idx, ".rejected").exists():
        return
    for p in (idx, _beside(idx, ".verified"), _beside(idx, ".rejected")):
        with contextlib.suppress(OSError):
            p.unlink(missing_ok=True)
