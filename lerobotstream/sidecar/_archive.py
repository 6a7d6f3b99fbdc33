"""The schema-5 sidecar archive: an NPZ of canonical int64 sample arrays plus JSON descriptions.

Layout (a ZIP of DEFLATE-compressed ``.npy`` members; their number does not grow with the sources)::

    manifest.json.npy            uint8 (n,)  UTF-8 JSON, dataset-level fields (below)
    sources.json.npy             uint8 (n,)  UTF-8 JSON: num_sources and one spec per column
    src/<key>.npy                (num_sources,) one per-source column: int64, fixed-width UTF-8
                                 bytes (``path``, ``fingerprint``; ``src/<key>.null.npy`` marks
                                 nulls), or uint32 codes into the column's ``distinct`` JSON values
    src/_block.npy, src/_block_start.npy   int64: the block holding the source's arrays and the
                                 index of its first sample there
    b000000/offset.npy           int64 (block samples,)  file byte offset of each sample
    b000000/size.npy             int64                   sample size, bytes
    b000000/dts_ticks.npy        int64                   decode time, media ticks
    b000000/cts_ticks.npy        int64                   composition offset (signed), media ticks
    b000000/is_sync.npy          uint8                   1 for a sync sample (keyframe)
    b000001/...                  (a block closes once it holds ``block_samples`` samples)

Source ids are positions in the sorted path list; a source's arrays are the slice
``[_block_start, _block_start + num_samples)`` of its block, in decode order.
``pts_ticks = dts_ticks + cts_ticks - media_time`` is derived.

Manifest: ``schema_version`` (5), ``repo_id``, ``repo_type``, ``revision`` (commit or null),
``data_root`` (never with credentials), ``subset`` (bool) and ``episodes`` (the selected episode
indices, null for a full build), ``total_episodes``, ``fps``, ``video_keys``, ``created_by``,
``num_sources``, ``num_samples``, ``num_blocks``. Per source (the columns): ``path`` (relative),
``size`` (bytes), ``fingerprint`` (``ByteSource.fingerprint``, may be null), ``num_samples``, the
track scalars of ``SampleTable`` (timescales, edit parameters, codec, width/height, track_id,
ctts_version, ..., ``matrix``/``movie_matrix``: the tkhd/mvhd display matrices, 9 int32 each),
``stsd_b64`` (the stsd payload, base64) and ``ftyp_b64``. :func:`load_manifest` returns them as
``manifest["sources"]``, a :class:`~lerobotstream.mp4._npz_schema.SourceTable`.

Temporaries: an archive is written as ``.<output name>.<hex>.tmp.npz`` beside the output while its
writer holds an exclusive ``flock`` on it (released by the kernel when the writer dies, even on
``kill -9``). Each new writer first removes the temporaries of ``output`` that nobody holds. A
write that fails for lack of space, quota or permission raises
:class:`~lerobotstream.errors.SidecarWriteError`; the temporary is removed and an existing output
stays as it was.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import uuid
import zipfile
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from lerobotstream.errors import LeRobotStreamError, SidecarSchemaError, SidecarWriteError
from lerobotstream.mp4._index_format import presentation_order_of, pts_seconds
from lerobotstream.mp4._npz_schema import (
    BYTES_KEYS,
    CANONICAL_FIELDS,
    ENTRY_KEYS,
    LAYOUT_KEYS,
    MANIFEST_MEMBER,
    MATRIX_KEYS,
    SCALAR_KEYS,
    SIDECAR_SCHEMA_VERSION,
    SOURCES_MEMBER,
    block_member,
    column_member,
    iter_source_arrays,
    read_manifest,
    read_source_table,
)

logger = logging.getLogger("lerobotstream.sidecar")

try:
    import fcntl
except ImportError:  # not POSIX: temporaries are not locked, and none is removed as stale
    fcntl = None  # type: ignore[assignment]


def _write_error(path: Path, e: OSError) -> SidecarWriteError:
    elsewhere = "--output for the CLI; LEROBOTSTREAM_SIDECAR_DIR or HF_LEROBOT_HOME for the dataset's sidecar cache"
    return SidecarWriteError.from_oserror(path, e, what="the MP4 sidecar", elsewhere=elsewhere)


def open_temporary(output: str | os.PathLike) -> tuple[Path, IO[bytes]]:
    """A new temporary file ``.<output name>.<hex>.tmp.npz`` beside ``output``, opened ``w+b`` and
    exclusively ``flock``-ed for as long as the returned file stays open (so
    :func:`remove_dead_temporaries` in another process leaves it alone).

    Raises:
        OSError: the folder cannot take the file.
    """
    output = Path(output)
    while True:
        tmp = output.with_name(f".{output.name}.{uuid.uuid4().hex}.tmp.npz")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # a cleaner may have taken it for a dead builder's between our open and our lock
                same = os.fstat(fd).st_ino == os.stat(tmp).st_ino
            except (BlockingIOError, FileNotFoundError):
                same = False
            if not same:
                os.close(fd)
                continue
        return tmp, os.fdopen(fd, "w+b")


def remove_dead_temporaries(output: str | os.PathLike) -> list[Path]:
    """Remove the temporaries of ``output`` (``.<name>.*.tmp.npz`` beside it) that no live
    process holds: partial archives of builders that died (``kill -9``, a crash, a reboot).
    Returns the removed paths (each logged at INFO). Without ``fcntl`` nothing is removed."""
    output = Path(output)
    removed: list[Path] = []
    if fcntl is None or not output.parent.is_dir():
        return removed
    for tmp in output.parent.glob(f".{output.name}.*.tmp.npz"):
        try:
            fd = os.open(tmp, os.O_RDONLY)
        except OSError:
            continue  # renamed into place or removed meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live writer holds it
            try:
                if os.fstat(fd).st_ino != os.stat(tmp).st_ino:
                    continue  # the name now belongs to another file
                tmp.unlink()
            except OSError:
                continue
            removed.append(tmp)
            logger.info("removed %s, a partial sidecar left by a builder that died", tmp)
        finally:
            os.close(fd)
    return removed


def safe_data_root(root: str | os.PathLike | None) -> str | None:
    """The data root as stored in a manifest: a URL without user info, query or fragment
    (tokens never reach the file), or an absolute local path."""
    if root is None:
        return None
    root = os.fspath(root)
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", root):
        parts = urlsplit(root)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        return urlunsplit((parts.scheme, netloc, parts.path, "", "")).rstrip("/")
    return str(Path(root).expanduser().resolve())


def _jsonable(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    return value.item() if isinstance(value, (np.integer, np.floating, np.bool_)) else value


def _source_record(table: Any, path: str, size: int, fingerprint: str | None) -> tuple[dict, dict[str, np.ndarray]]:
    """``(entry, arrays)`` of one parsed source: its scalars, and its canonical arrays (int64,
    ``is_sync`` uint8; decode order, equal lengths).

    Raises:
        SidecarSchemaError: arrays of different lengths or values that are not integers, or no
            display matrices (``matrix``/``movie_matrix``; the index would refuse the record).
    """
    out = {}
    n = int(np.asarray(table.offset).shape[0])
    for f in CANONICAL_FIELDS:
        a = np.asarray(getattr(table, f))
        if a.ndim != 1 or a.shape[0] != n:
            raise SidecarSchemaError(f"{getattr(table, 'path', '')}: array {f} has shape {a.shape}, expected ({n},)")
        if f != "is_sync" and a.dtype.kind not in "iub":
            raise SidecarSchemaError(f"{getattr(table, 'path', '')}: array {f} is {a.dtype}, not integer")
        out[f] = np.ascontiguousarray(a.astype(bool).astype(np.uint8) if f == "is_sync" else a.astype(np.int64))
    missing = [k for k in MATRIX_KEYS if getattr(table, k, None) is None]
    if missing:
        raise SidecarSchemaError(
            f"{path}: the sample table has no {' / '.join(missing)} (9 int32 display matrix)", path=path
        )
    entry: dict[str, Any] = {"path": path, "size": int(size), "fingerprint": fingerprint, "num_samples": n}
    for k in SCALAR_KEYS:
        if hasattr(table, k):
            entry[k] = _jsonable(getattr(table, k))
    for k in BYTES_KEYS:
        raw = getattr(table, k, b"") or b""
        entry[k + "_b64"] = base64.b64encode(bytes(raw)).decode("ascii")
    return entry, out


class _Column:
    """One per-source column while writing: int64 values, strings, or JSON values by code (a
    column turns to codes at its first value of another kind)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "int" | "str" | "json"
        self.values: Any = array("q") if kind == "int" else []  # json: array("I") of codes
        self.distinct: list[Any] = []
        self.lookup: dict[Any, int] = {}

    def _code(self, value: Any) -> int:
        # key by type and value (True, 1 and 1.0 stay apart); lists of scalars as tuples
        try:
            key: Any = (type(value), tuple(value) if type(value) is list else value)
            hash(key)
        except TypeError:
            key = json.dumps(value, sort_keys=True, separators=(",", ":"))
        code = self.lookup.get(key)
        if code is None:
            code = self.lookup[key] = len(self.distinct)
            self.distinct.append(value)
        return code

    def append(self, value: Any) -> None:
        if self.kind == "int":
            fits = isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
        else:
            fits = self.kind == "json" or value is None or isinstance(value, str)
        if not fits:
            self.kind, self.values = "json", array("I", [self._code(v) for v in self.values])
        self.values.append(self._code(value) if self.kind == "json" else value)

    def encode(self, order: np.ndarray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(spec, members)`` of the column with rows reordered by ``order``."""
        if self.kind == "int":
            return {"kind": "int"}, {"": np.frombuffer(self.values, dtype=np.int64)[order]}
        if self.kind == "str":
            raw = [s.encode("utf-8") if s is not None else b"" for s in self.values]
            arr = np.array(raw, dtype=f"S{max([1, *map(len, raw)])}")[order]
            null = np.fromiter((s is None for s in self.values), dtype=np.uint8, count=len(raw))[order]
            if null.any():
                return {"kind": "str", "nullable": True}, {"": arr, ".null": null}
            return {"kind": "str"}, {"": arr}
        return {"kind": "json", "distinct": self.distinct}, {"": np.frombuffer(self.values, dtype=np.uint32)[order]}


#: a block of concatenated sample arrays closes once it holds this many samples (33 B each)
BLOCK_SAMPLES = 1 << 20


class SidecarWriter:
    """Writes a schema-5 sidecar source by source into a temporary archive next to ``output``;
    :meth:`commit` moves it into place with one ``os.replace``. Until then (and after
    :meth:`abort`, or an exception inside ``with``) an existing ``output`` is untouched.

    Sources may be added in any order. Memory is bounded by one block of arrays plus the
    per-source columns (a few bytes per source).

    Args:
        output: the final ``.npz`` path.
        manifest: top-level manifest fields (repo_id, revision, data_root, subset, ...); the
            schema version and the source counts are filled in here.
        compresslevel: zlib level of the members, 0-9 (default 6; 1 is 4-6x faster at about the
            same size on sample tables).
        block_samples: samples per block of concatenated arrays (>= 1).
    """

    def __init__(
        self,
        output: str | os.PathLike,
        manifest: dict[str, Any],
        *,
        compresslevel: int = 6,
        block_samples: int = BLOCK_SAMPLES,
    ) -> None:
        if block_samples < 1:
            raise ValueError(f"block_samples must be >= 1, got {block_samples}")
        self.output = Path(output)
        self._manifest = {k: v for k, v in manifest.items() if k != "sources"} | {
            "schema_version": SIDECAR_SCHEMA_VERSION
        }
        self._block_samples = int(block_samples)
        self._ids = array("q")  # source ids in arrival order
        self._seen = bytearray()  # 1 at each added source id
        self._columns: dict[str, _Column] = {
            k: _Column("str" if k in ("path", "fingerprint") else "int") for k in (*ENTRY_KEYS, *LAYOUT_KEYS)
        }
        self._pending: list[dict[str, np.ndarray]] = []
        self._pending_samples = 0
        self._num_blocks = 0
        self._num_samples = 0
        self._file: IO[bytes] | None = None
        self._zf: zipfile.ZipFile | None = None
        self.tmp_path = self.output.with_name(f".{self.output.name}.tmp.npz")  # until open_temporary names it
        try:
            self.output.parent.mkdir(parents=True, exist_ok=True)
            remove_dead_temporaries(self.output)
            self.tmp_path, self._file = open_temporary(self.output)
            self._zf = zipfile.ZipFile(
                self._file, "w", zipfile.ZIP_DEFLATED, allowZip64=True, compresslevel=compresslevel
            )
        except OSError as e:
            self.abort()
            raise _write_error(self.output, e) from e

    def _write_member(self, name: str, array: np.ndarray) -> None:
        if self._zf is None:
            raise RuntimeError("sidecar writer is closed")
        try:
            with self._zf.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.ascontiguousarray(array), allow_pickle=False)
        except OSError as e:
            if isinstance(e, LeRobotStreamError):
                raise
            self.abort()
            raise _write_error(self.output, e) from e

    def _flush_block(self) -> None:
        if not self._pending:
            return
        for f in CANONICAL_FIELDS:
            self._write_member(block_member(self._num_blocks, f), np.concatenate([a[f] for a in self._pending]))
        self._num_blocks += 1
        self._pending = []
        self._pending_samples = 0

    def add_source(self, source_id: int, table: Any, *, path: str, size: int, fingerprint: str | None) -> None:
        """Take one parsed source's arrays and entry; ``source_id`` is its position in the sorted path list.

        Raises:
            ValueError: ``source_id`` was added before.
            SidecarSchemaError: the table's arrays or display matrices are malformed.
            SidecarWriteError: a block could not be written (names the path and what to do).
        """
        if self._zf is None:
            raise RuntimeError("sidecar writer is closed")
        if source_id < 0:
            raise ValueError(f"source id {source_id} is negative ({path})")
        if source_id < len(self._seen) and self._seen[source_id]:
            raise ValueError(f"source id {source_id} written twice ({path})")
        entry, arrays = _source_record(table, path, size, fingerprint)
        if source_id >= len(self._seen):
            self._seen.extend(bytes(source_id + 1 - len(self._seen)))
        self._seen[source_id] = 1
        self._ids.append(source_id)
        entry["_block"] = self._num_blocks
        entry["_block_start"] = self._pending_samples
        for k, col in self._columns.items():
            col.append(entry.get(k))
        self._pending.append(arrays)
        n = int(arrays["offset"].shape[0])
        self._pending_samples += n
        self._num_samples += n
        if self._pending_samples >= self._block_samples:
            self._flush_block()

    def commit(self) -> Path:
        """Write the last block, the columns and the manifest, fsync and atomically replace
        ``output``. Returns ``output``.

        Raises:
            ValueError: the added source ids are not exactly ``0..n-1``.
            SidecarWriteError: the archive could not be written or moved into place.
        """
        if self._zf is None:
            raise RuntimeError("sidecar writer is closed")
        n = len(self._ids)
        if n != len(self._seen) or (n and not all(self._seen)):
            missing = [i for i, v in enumerate(self._seen) if not v][:10]
            raise ValueError(f"sidecar sources are not numbered 0..{n - 1}: ids {missing} are missing")
        self._flush_block()
        order = np.argsort(np.frombuffer(self._ids, dtype=np.int64), kind="stable")
        specs: dict[str, Any] = {}
        for key, col in self._columns.items():
            spec, members = col.encode(order)
            specs[key] = spec
            for suffix, arr in members.items():
                self._write_member(column_member(key) + suffix, arr)
        self._write_member(SOURCES_MEMBER, _json_bytes({"num_sources": n, "columns": specs}))
        manifest = dict(self._manifest, num_sources=n, num_samples=self._num_samples, num_blocks=self._num_blocks)
        self._write_member(MANIFEST_MEMBER, _json_bytes(manifest))
        try:
            self._zf.close()  # writes the central directory
            self._zf = None
            assert self._file is not None
            self._file.flush()
            os.fsync(self._file.fileno())
            os.replace(self.tmp_path, self.output)  # still locked: no cleaner can take it before this
        except OSError as e:
            self.abort()
            raise _write_error(self.output, e) from e
        self._file.close()  # releases the lock
        self._file = None
        with contextlib.suppress(OSError):  # make the rename durable
            dfd = os.open(self.output.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        return self.output

    def abort(self) -> None:
        """Discard the temporary archive; ``output`` is left as it was."""
        self._pending = []
        if self._zf is not None:
            with contextlib.suppress(Exception):  # discarded anyway (a full disk fails here too)
                self._zf.close()
            self._zf = None
        if self._file is not None:
            self.tmp_path.unlink(missing_ok=True)  # while still locked
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def __enter__(self) -> SidecarWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or self._zf is not None:
            self.abort()


def _json_bytes(obj: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8"), dtype=np.uint8)


def load_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """Read the manifest of a sidecar NPZ, with its per-source entries as ``manifest["sources"]``
    (a :class:`~lerobotstream.mp4._npz_schema.SourceTable`). No sample array is read.

    Raises:
        SidecarSchemaError: not a sidecar, or a schema this reader does not open.
        FileNotFoundError: no file at ``path``.
    """
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as zf:
            manifest = read_manifest(zf, path)
            manifest["sources"] = read_source_table(zf, manifest, path)
            return manifest
    except (zipfile.BadZipFile, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise SidecarSchemaError(f"{path}: not a readable sidecar archive: {e}", path=path) from e


def load_tables(path: str | os.PathLike) -> Iterator[tuple[dict[str, Any], dict[str, np.ndarray]]]:
    """Yield ``(source_entry, arrays)`` per source, by source id, straight from the NPZ (canonical
    int64 arrays plus derived ``pts_ticks``, ``pts_s`` and ``presentation_order``), reading every
    block once. For tools and tests; readers use the derived index."""
    path = os.fspath(path)
    with zipfile.ZipFile(path) as zf:
        manifest = read_manifest(zf, path)
        table = read_source_table(zf, manifest, path)
        waiting: dict[int, dict[str, np.ndarray]] = {}
        nxt = 0
        for sid, arrays in iter_source_arrays(zf, manifest, table, path):
            waiting[sid] = {f: np.array(a) for f, a in arrays.items()}
            while nxt in waiting:
                src, arrays = table[nxt], waiting.pop(nxt)
                pts = arrays["dts_ticks"] + arrays["cts_ticks"] - int(src.get("media_time") or 0)
                arrays["pts_ticks"] = pts
                movie = (src.get("movie_timescale") or 1, src.get("empty_edit_movie_ticks") or 0)
                arrays["pts_s"] = pts_seconds(pts, src["media_timescale"], *movie)
                arrays["presentation_order"] = presentation_order_of(pts)
                arrays["is_sync"] = arrays["is_sync"].astype(bool)
                yield src, arrays
                nxt += 1
