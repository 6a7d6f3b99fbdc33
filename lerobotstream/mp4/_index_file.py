"""Derived memory-mapped index: :class:`Mp4Index` maps a sidecar's derived file read-only and
builds each source's sample table lazily, as views into the map.

Rather than decompress the NPZ in every process, the first open converts it (``_index_write``;
layout in ``_index_format``) into **one** file under ``$HF_LEROBOT_HOME/streaming-indexes/`` named
by the NPZ's content digest (its *generation*). Every process maps it read-only (ranks on one node
share the page cache) and checks each table's values before a lookup indexes with them. Views
keep their stored dtype (not necessarily int64).
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import hashlib
import json
import mmap
import os
import threading
import uuid
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from lerobotstream._cachefile import open_regular, read_regular
from lerobotstream.errors import LeRobotStreamError, SidecarLockTimeoutError, SidecarSchemaError, SidecarWriteError
from lerobotstream.mp4._index_format import (
    INDEX_FIELDS,
    U64,
    check_record,
    index_name,
    parse_header,
    pts_seconds,
    record_matrix,
    table_problem,
)
from lerobotstream.mp4._index_write import write_index as _convert
from lerobotstream.mp4._npz_schema import (
    BYTES_KEYS,
    MATRIX_KEYS,
    READABLE_SCHEMA_VERSIONS,
    SCALAR_KEYS,
    npz_generation,
    read_manifest,
)
from lerobotstream.mp4._table import SampleTable
from lerobotstream.mp4.index import nearest_frames

__all__ = ["Mp4Index"]

#: what converting a damaged or hostile archive can raise (a SidecarSchemaError names it)
_DAMAGED = (zlib.error, zipfile.BadZipFile, EOFError, ValueError, KeyError, TypeError, IndexError, OverflowError)


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


class Mp4Index:
    """A sidecar's derived index, memory-mapped read-only; per-source tables built lazily.

    Open with :meth:`open` (converts the NPZ on first use, under a file lock), or map an existing
    derived file with ``Mp4Index(path)``. Thread-safe.

    Attributes:
        generation (str): content digest of the sidecar NPZ (names the derived file).
        index_path (Path): the derived file that is mapped.
        manifest (dict): the sidecar's manifest without its per-source list (repo_id, revision,
            data_root, subset, episodes...).
        num_sources (int): number of source MP4 files.
        paths (list[str]): source paths (relative to the dataset root), by source id.
    """

    def __init__(self, index_path: str | os.PathLike) -> None:
        self.index_path = Path(index_path)
        with os.fdopen(open_regular(self.index_path), "rb") as f:  # a FIFO is refused, never waited on
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise SidecarSchemaError(f"{self.index_path}: empty derived index", path=str(self.index_path))
            self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._header = parse_header(self._mmap, str(self.index_path))
        self._buf = np.frombuffer(self._mmap, dtype=np.uint8)  # read-only: ACCESS_READ
        self.generation: str = self._header["generation"]
        self.manifest: dict[str, Any] = self._header["manifest"]
        if self.manifest.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
            raise SidecarSchemaError(
                f"{self.index_path}: derived index of a schema {self.manifest.get('schema_version')!r} sidecar "
                f"(this reader opens {READABLE_SCHEMA_VERSIONS}); rebuild the sidecar",
                path=str(self.index_path),
            )
        self.num_sources: int = int(self._header["num_sources"])
        self._data_end = int(self._header["data_end"])
        self._shared: list[int] = [int(o) for o in self._header["shared"]]
        n, n1 = self.num_sources, self.num_sources + 1
        self._rec_bounds = self._buf[self._header["records"] : self._header["records"] + 16 * n].view(U64).reshape(n, 2)
        self._path_off = self._buf[self._header["paths"] : self._header["paths"] + 8 * n1].view(U64)
        self._paths_sorted = bool(self._header.get("paths_sorted"))
        self._paths: list[str] | None = None
        self._ids: dict[str, int] | None = None
        self._tables: dict[int, Any] = {}
        self._lock = threading.Lock()

    # --- construction ----------------------------------------------------------------------------
    @classmethod
    def open(
        cls, npz_path: str | os.PathLike, *, index_dir: str | os.PathLike | None = None, lock_timeout_s: float = 1800.0
    ) -> Mp4Index:
        """Open a sidecar NPZ (schema 5) through its derived index, converting it on first use.

        Args:
            npz_path: the sidecar archive.
            index_dir: folder of derived files; defaults to ``constants.INDEX_DIR``
                (``$HF_LEROBOT_HOME/streaming-indexes``, read at call time).
            lock_timeout_s: how long to wait for another process converting the same sidecar.

        Returns:
            Mp4Index mapped from ``<index_dir>/mp4-s5-f3-<generation[:32]>.idx``; a warm open (NPZ
            path, inode, size, mtime unchanged) reads the generation from a ``.gen`` note.

        Raises:
            SidecarSchemaError: the NPZ is not a readable schema-5 sidecar.
            SidecarLockTimeoutError: another process held the conversion lock too long.
            SidecarWriteError: (also an ``OSError``) the derived index or its lock cannot be
                written; names the path, the reason and what to do.
        """
        npz_path = os.fspath(npz_path)
        if index_dir is None:
            from lerobotstream import constants  # config only; read at call time so tests can redirect it

            index_dir = constants.INDEX_DIR
        index_dir = Path(index_dir)
        known = _cached_generation(npz_path, index_dir)
        if known is not None:  # warm open: no ZIP central directory, no manifest read
            existing = cls._try_open(index_dir / index_name(known), known)
            if existing is not None:
                return existing
        try:
            zf = zipfile.ZipFile(npz_path)
        except FileNotFoundError:
            raise
        except (zipfile.BadZipFile, OSError) as e:
            raise SidecarSchemaError(f"{npz_path}: not a readable sidecar archive: {e}", path=npz_path) from e
        with zf:
            generation = npz_generation(zf)
            target = index_dir / index_name(generation)
            existing = cls._try_open(target, generation)
            if existing is not None:
                _remember_generation(npz_path, index_dir, generation)
                return existing
            manifest = read_manifest(zf, npz_path)
            try:
                index_dir.mkdir(parents=True, exist_ok=True)
                from filelock import FileLock, Timeout

                lock = FileLock(str(target) + ".lock")
                try:
                    lock.acquire(timeout=lock_timeout_s)
                except Timeout as e:
                    raise SidecarLockTimeoutError(
                        f"timed out after {lock_timeout_s}s waiting for the index lock {target}.lock", path=str(target)
                    ) from e
                try:
                    existing = cls._try_open(target, generation)  # converted while we waited
                    if existing is not None:
                        return existing
                    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
                    try:
                        with open(tmp, "wb") as out:
                            try:
                                _convert(zf, manifest, generation, out, npz_path)
                            except SidecarSchemaError:
                                raise
                            except _DAMAGED as e:
                                raise SidecarSchemaError(
                                    f"{npz_path}: corrupt sidecar archive ({type(e).__name__}: {e}); delete it so it "
                                    "is rebuilt",
                                    path=str(npz_path),
                                ) from e
                            out.flush()
                            os.fsync(out.fileno())
                        os.chmod(tmp, 0o444)
                        os.replace(tmp, target)
                    finally:
                        if tmp.exists():
                            tmp.unlink()
                finally:
                    lock.release()
            except OSError as e:
                if isinstance(e, LeRobotStreamError):  # the lock timeout (a TimeoutError) is already typed
                    raise
                raise SidecarWriteError.from_oserror(
                    target, e, what="the derived MP4 index", elsewhere="LEROBOTSTREAM_INDEX_DIR or HF_LEROBOT_HOME"
                ) from e
        _remember_generation(npz_path, index_dir, generation)
        return cls(target)

    @classmethod
    def _try_open(cls, target: Path, generation: str) -> Mp4Index | None:
        if not target.is_file():
            return None
        try:
            idx = cls(target)
        except (SidecarSchemaError, ValueError, KeyError, TypeError, OSError):
            return None  # damaged or foreign: rebuilt under the lock
        return idx if idx.generation == generation else None

    # --- lookups ---------------------------------------------------------------------------------
    @property
    def paths(self) -> list[str]:
        """Source paths (relative to the dataset root), by source id (built on first access)."""
        if self._paths is None:
            self._paths = [self._path(i) for i in range(self.num_sources)]
        return self._paths

    def _path(self, source_id: int) -> str:
        a, b = int(self._path_off[source_id]), int(self._path_off[source_id + 1])
        try:
            if not self._data_end <= a <= b <= self._header["_json_offset"]:
                raise ValueError(f"bytes [{a}, {b}) lie outside the path table")
            return bytes(self._mmap[a:b]).decode("utf-8")
        except ValueError as e:  # UnicodeDecodeError included
            where = str(self.index_path)
            raise SidecarSchemaError(f"{where}: path of source {source_id} is damaged: {e}", path=where) from e

    def _check_id(self, source_id: int) -> None:
        if not 0 <= source_id < self.num_sources:
            raise IndexError(f"source id {source_id} outside [0, {self.num_sources}) in {self.index_path}")

    def path(self, source_id: int) -> str:
        """Path of one source (relative to the dataset root); IndexError outside ``[0, num_sources)``."""
        self._check_id(source_id)
        return self._path(source_id)

    def _record(self, source_id: int) -> dict[str, Any]:
        """The parsed, validated record of one source (never cached: ~7 KB of Python objects)."""
        self._check_id(source_id)
        a, b = (int(x) for x in self._rec_bounds[source_id])
        where = str(self.index_path)
        if not self._data_end <= a <= b <= self._header["_json_offset"]:
            raise SidecarSchemaError(f"{where}: record of source {source_id} lies outside the file", path=where)
        try:
            rec = json.loads(bytes(self._mmap[a:b]).decode("utf-8"))
            rec["path"] = self._path(source_id)
            check_record(rec, self._data_end, where, self._shared)
        except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
            raise SidecarSchemaError(f"{where}: record of source {source_id} is damaged: {e}", path=where) from e
        return rec

    def source_id(self, path: str) -> int:
        """Source id of the MP4 at ``path`` (relative POSIX path). Raises KeyError naming it."""
        if self._paths_sorted:  # binary search over the mapped path table, no per-source objects
            lo = bisect.bisect_left(range(self.num_sources), path, key=self._path)
            if lo < self.num_sources and self._path(lo) == path:
                return lo
        else:
            if self._ids is None:
                self._ids = {p: i for i, p in enumerate(self.paths)}
            if path in self._ids:
                return self._ids[path]
        raise KeyError(f"{path!r} is not in the MP4 sidecar index {self.index_path}")

    def source_info(self, source_id: int) -> dict[str, Any]:
        """Manifest entry of a source (path, size, fingerprint, timescales, codec...,
        ``stsd_b64``/``ftyp_b64``), no arrays."""
        rec = self._record(source_id)
        info = {k: v for k, v in rec.items() if k not in ("arrays", *BYTES_KEYS)}
        for k in BYTES_KEYS:
            info[k + "_b64"] = base64.b64encode(self._blob(rec.get(k))).decode("ascii")
        return info

    def _blob(self, ref: Any) -> bytes:
        if not ref:
            return b""
        off, nbytes = int(ref[0]), int(ref[1])
        return bytes(self._mmap[off : off + nbytes])

    def nbytes_stored(self) -> int:
        """Size of the mapped file, bytes."""
        return len(self._mmap)

    def _array(self, spec: dict[str, Any]) -> np.ndarray:
        dt = np.dtype(spec["dtype"])
        n = int(spec["count"])
        enc = spec["enc"]
        if "offset" in spec:  # plain, or a prefix of a shared progression block: zero-copy view
            off = int(spec["offset"])
            return self._buf[off : off + n * dt.itemsize].view(dt)
        if enc == "const":
            return np.broadcast_to(np.array(spec["value"], dtype=dt), (n,))
        if enc == "arith":  # small source (<= SHARED_MIN_SAMPLES): materialised once per process
            a = np.arange(n, dtype=np.int64) * int(spec["step"]) + int(spec["first"])
            return _readonly(a.astype(dt))
        raise SidecarSchemaError(f"{self.index_path}: unknown array encoding {enc!r}")

    def table(self, source_id: int, *, cache: bool = True):
        """Read-only sample table of one source (decode order), built on first request and kept
        (``cache=False``: built afresh and not kept, for one-off passes over many sources).

        Returns:
            SampleTable: arrays are zero-copy views into the map or zero-stride broadcasts (only
            sources of at most ``SHARED_MIN_SAMPLES`` samples materialise ``arith``/``derived``
            arrays), in their stored dtypes; ``file_size`` is the manifest size.

        Raises:
            IndexError: ``source_id`` is not in ``[0, num_sources)``.
            SidecarSchemaError: the source's record or values are damaged (names the index and file).
        """
        t = self._tables.get(source_id)
        if t is not None:
            return t
        self._check_id(source_id)
        with self._lock:
            t = self._tables.get(source_id)
            if t is not None:
                return t
            src, where = self._record(source_id), str(self.index_path)
            try:
                t, arrays = self._views(src)
                reason = table_problem(arrays)
            except (ValueError, TypeError, OverflowError, ZeroDivisionError) as e:  # SidecarSchemaError included
                reason = f"{type(e).__name__}: {e}"
            if reason is not None:
                raise SidecarSchemaError(
                    f"{where}: the derived index's table of {src.get('path')!r} is damaged ({reason}); delete the "
                    "derived index so it is converted again, and its sidecar if that one holds the same values",
                    path=where,
                )
            if cache:
                self._tables[source_id] = t
            return t

    def _views(self, src: dict[str, Any]) -> tuple[SampleTable, dict[str, np.ndarray]]:
        """(the source's ``SampleTable`` of views, those views by name, ``sync_samples`` included)."""
        specs = src["arrays"]
        arrays = {name: self._array(specs[name]) for name in INDEX_FIELDS if name != "pts_s"}
        arrays["is_sync"] = arrays["is_sync"].view(bool)
        if specs["pts_s"]["enc"] == "derived" and "offset" not in specs["pts_s"]:
            timing = (src["media_timescale"], src.get("movie_timescale"), src.get("empty_edit_movie_ticks"))
            arrays["pts_s"] = _readonly(pts_seconds(arrays["pts_ticks"], *timing))
        else:
            arrays["pts_s"] = self._array(specs["pts_s"])
        scalars = {k: src.get(k) for k in SCALAR_KEYS if k in src}
        for k in ("media_time", "empty_edit_movie_ticks", "edit_duration_movie_ticks"):
            scalars[k] = int(scalars.get(k) or 0)
        if scalars.get("video_track_ids") is not None:
            scalars["video_track_ids"] = tuple(scalars["video_track_ids"])
        for k in MATRIX_KEYS:
            scalars[k] = record_matrix(src.get(k), k, src.get("path"), str(self.index_path))
        for k in BYTES_KEYS:
            scalars[k] = self._blob(src.get(k))
        fields = {k: v for k, v in arrays.items() if k != "sync_samples"}
        return SampleTable(path=src["path"], file_size=src.get("size"), **scalars, **fields), arrays

    def table_for_path(self, path: str) -> SampleTable:
        return self.table(self.source_id(path))

    def frames_played_at(self, source_id: int, times_s: Iterable[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Nearest presentation-order frame to each time (seconds, source timeline).

        Returns:
            ``(frames, pts_s)``: int64 frame indices and float64 presentation times of those frames.
        """
        t = self.table(source_id)
        return nearest_frames(t.pts_s, t.presentation_order, np.asarray(times_s, dtype=np.float64))

    def close(self) -> None:
        """Drop the per-source views; the mapping closes when no view refers to it any more."""
        self._tables.clear()

    def __repr__(self) -> str:
        return f"Mp4Index({str(self.index_path)!r}, num_sources={self.num_sources}, generation={self.generation[:12]})"


#: a generation note is a few hundred bytes; a larger one is foreign (not parsed whole)
_MAX_NOTE_BYTES = 1 << 16


def _npz_note(npz_path: str, index_dir: Path) -> tuple[Path, dict[str, Any] | None]:
    """The generation note of an NPZ and its identity (path, size, mtime, ctime, inode, device; None
    when it cannot be stat'ed)."""
    key = hashlib.sha256(os.path.realpath(npz_path).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    try:
        st = os.stat(npz_path)
    except OSError:
        return index_dir / f"npz-{key}.gen", None
    ident = {"path": os.path.realpath(npz_path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    ident.update(ctime_ns=st.st_ctime_ns, ino=st.st_ino, dev=st.st_dev)
    return index_dir / f"npz-{key}.gen", ident


def _cached_generation(npz_path: str, index_dir: Path) -> str | None:
    """The generation remembered for this NPZ when its identity is unchanged, else None."""
    note_path, ident = _npz_note(npz_path, index_dir)
    if ident is None:
        return None
    try:
        note = json.loads(read_regular(note_path, _MAX_NOTE_BYTES).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(note, dict) or {k: note.get(k) for k in ident} != ident:
        return None
    gen = note.get("generation")
    return gen if isinstance(gen, str) and len(gen) == 64 else None


def _remember_generation(npz_path: str, index_dir: Path, generation: str) -> None:
    """Write the NPZ identity → generation note (best effort)."""
    note_path, ident = _npz_note(npz_path, index_dir)
    if ident is not None:
        write_note(note_path, {**ident, "generation": generation})


def write_note(note: Path, doc: dict) -> None:
    """Atomically write ``doc`` as JSON to ``note`` through a temporary in the same folder, best
    effort: an ``OSError`` (a read-only index folder) leaves no temporary and is not raised."""
    tmp = note.with_name(f".{note.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_text(json.dumps(doc), "utf-8")
        os.replace(tmp, note)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
