"""Verify on first use: a sidecar's tables of one MP4 are compared with that MP4's own ``moov``
before the first frame of the MP4 is served (a published or shared-cache sidecar could move one
episode's samples onto another's, which the metadata checks of ``sidecar._validate`` cannot see).

:class:`VerifiedTables` parses the source's ``moov`` (a probe of the file's start, plus one read of
the tail when ``moov`` follows ``mdat``; no payload) and compares it with the sidecar's table
(:func:`table_disagreement`). Agreement is recorded beside the derived index (``<index
stem>.verified``: one digest of path, size and fingerprint per line; a local build records all its
sources), so later processes of the node skip the parse; the record proves only what the derived
index itself does (docs/sidecars.md: who may write a shared cache). On a disagreement the MP4's
own table is served, spans planned on the sidecar's are planned again, one warning names the
source and ``<index stem>.rejected`` is written: the next start builds locally.
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
from lerobotstream._cachefile import NotRegularFileError, open_regular, read_regular
from lerobotstream.errors import LeRobotStreamError, SidecarSchemaError
from lerobotstream.mp4._index_file import Mp4Index, write_note
from lerobotstream.mp4._index_format import index_name
from lerobotstream.mp4._npz_schema import npz_generation

logger = logging.getLogger("lerobotstream.sidecar")

#: per-sample arrays compared (decode order), the derived ones too (the derived index stores them)
_ARRAYS = ("offset", "size", "dts_ticks", "cts_ticks", "is_sync", "pts_ticks", "presentation_order")
#: bytes of the record read at once (one line per source: 300,000 sources are 10 MB)
_MAX_RECORD_READ = 64 << 20
#: a rejection record is one short JSON object; read at most this much of it
_MAX_REJECTED_READ = 1 << 16
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
    """None when the ``sidecar``'s ``SampleTable`` of one source (any integer dtypes) says what
    ``parse_mp4``'s ``parsed`` table of the MP4 says, else the first difference (field, and for
    arrays the first sample that differs)."""
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
    """The sample tables a process plans spans on and serves frames from: the sidecar's (``index``),
    each verified against its MP4's own ``moov`` at ``source`` (None: not verified) before the first
    frame of that MP4 is served. Thread-safe. :meth:`table_for_path` (sizing, span planning) does
    not verify; :meth:`verify` (``EpisodeSpans.fetch_span``, before any payload read) does, once per
    source; a span planned on a replaced table is planned again (``EpisodeSpans.verified_span``)."""

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
        """The current ``SampleTable`` (decode order) of the MP4 at ``path``: the sidecar's, or the
        MP4's own once :meth:`verify` replaced it (or the derived index's table was damaged).

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
            tail = read_regular(_beside(self.index.index_path, ".verified"), _MAX_RECORD_READ, offset=self._record_pos)
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
        """Serve (and return) ``parsed`` for ``path`` from now on, warn once, mark the sidecar rejected."""
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
    lines do not interleave); best effort. Anything but a regular file at ``path`` (a FIFO, a
    symbolic link) is never opened through: it is removed (its name only) and the record started
    again."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    with contextlib.suppress(OSError):
        try:
            fd = open_regular(path, flags, follow_symlinks=False)
        except NotRegularFileError:
            logger.warning("%s is not a regular file: replacing it with a new verification record", path)
            os.unlink(path)
            fd = open_regular(path, flags | os.O_EXCL, follow_symlinks=False)
        try:
            os.write(fd, (line + "\n").encode("ascii"))
        finally:
            os.close(fd)


def rejected_reason(index_path: str | os.PathLike) -> str | None:
    """Why a first-use verification rejected this derived index's sidecar, or None when none did."""
    try:
        text = read_regular(_beside(index_path, ".rejected"), _MAX_REJECTED_READ).decode("utf-8", "replace")
    except (FileNotFoundError, NotRegularFileError):  # a FIFO or device there is no record
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
