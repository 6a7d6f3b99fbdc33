"""The schema-4 sidecar archive: an NPZ of canonical int64 sample arrays plus a JSON manifest.

Layout (a ZIP of ``.npy`` members, DEFLATE-compressed)::

    manifest.json.npy            uint8 (n,)  UTF-8 JSON (see below)
    s000000/offset.npy           int64 (num_samples,)  file byte offset of each sample
    s000000/size.npy             int64                 sample size, bytes
    s000000/dts_ticks.npy        int64                 decode time, media ticks
    s000000/cts_ticks.npy        int64                 composition offset (signed), media ticks
    s000000/is_sync.npy          uint8                 1 for a sync sample (keyframe)
    s000001/...                                        (sources sorted by path; id = position)

All arrays are in decode order. ``pts_ticks = dts_ticks + cts_ticks - media_time`` is derived.

Manifest: ``schema_version`` (4), ``repo_id``, ``repo_type``, ``revision`` (commit or null),
``data_root`` (never with credentials), ``subset`` (bool) and ``episodes`` (the selected episode
indices, null for a full build), ``total_episodes``, ``fps``, ``video_keys``, ``created_by``, and
``sources``: one object per source with ``path`` (relative), ``size`` (bytes), ``fingerprint``
(``ByteSource.fingerprint``, may be null), ``num_samples``, the track scalars of
``SampleTable`` (timescales, edit parameters, codec, width/height, track_id, ctts_version, ...,
and since schema 4 ``matrix``/``movie_matrix``: the tkhd/mvhd display matrices, 9 int32 each),
``stsd_b64`` (the stsd payload, base64) and ``ftyp_b64``.

Temporaries: an archive is written as ``.<output name>.<hex>.tmp.npz`` beside the output while its
writer holds an exclusive ``flock`` on it (the kernel drops the lock when the writer dies, even on
``kill -9``). Each new writer first removes the temporaries of ``output`` that nobody holds —
leftovers of dead builders — and never touches a live writer's. A write that fails for lack of
space, quota or permission raises :class:`~lerobotstream.errors.SidecarWriteError` naming the path
and what to do; the temporary is removed and an existing output stays as it was.
"""

from __future__ import annotations

import base64
import errno
import json
import logging
import os
import re
import uuid
import zipfile
from pathlib import Path
from typing import IO, Any, Iterator
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from lerobotstream.errors import LeRobotStreamError, SidecarSchemaError, SidecarWriteError
from lerobotstream.mp4._index_format import presentation_order_of, pts_seconds
from lerobotstream.mp4._npz_schema import (
    BYTES_KEYS,
    CANONICAL_FIELDS,
    MANIFEST_MEMBER,
    MATRIX_KEYS,
    SCALAR_KEYS,
    SIDECAR_SCHEMA_VERSION,
    member_name,
    read_manifest,
    read_npz_member,
)

__all__ = ["SidecarWriter", "load_manifest", "load_tables", "open_temporary", "remove_dead_temporaries",
           "safe_data_root", "source_entry", "write_error"]

logger = logging.getLogger("lerobotstream.sidecar")

try:
    import fcntl
except ImportError:  # not POSIX: temporaries are not locked, and none is removed as stale
    fcntl = None  # type: ignore[assignment]

#: errno values that mean "this folder cannot take the file" (the message says what to do)
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR}


def write_error(path: str | os.PathLike, e: OSError, *, what: str = "the MP4 sidecar",
                elsewhere: str = "--output for the CLI; LEROBOTSTREAM_SIDECAR_DIR or HF_LEROBOT_HOME "
                                 "for the dataset's sidecar cache") -> SidecarWriteError:
    """The typed error for an ``OSError`` raised while writing ``path``: names the path, the
    reason (``strerror``) and what to do (free space, permissions, or another folder)."""
    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    reason = e.strerror or str(e) or type(e).__name__
    if e.errno in _NO_ROOM:
        todo = f"free space on the disk holding {folder}, or write it elsewhere ({elsewhere})"
    elif e.errno in _NOT_WRITABLE:
        todo = f"make {folder} writable, or write it elsewhere ({elsewhere})"
    else:
        todo = f"check the disk holding {folder}, or write it elsewhere ({elsewhere})"
    name = errno.errorcode.get(e.errno, "") if e.errno is not None else ""
    return SidecarWriteError(f"cannot write {what} {path}: {reason}{f' ({name})' if name else ''}; {todo}",
                             path=path, errno=e.errno)


def _temporary_pattern(output: Path) -> str:
    return f".{output.name}.*.tmp.npz"


def open_temporary(output: str | os.PathLike) -> tuple[Path, IO[bytes]]:
    """A new temporary file ``.<output name>.<hex>.tmp.npz`` beside ``output``, opened ``w+b`` and
    exclusively ``flock``-ed for as long as the returned file stays open (so
    :func:`remove_dead_temporaries` in another process leaves it alone).

    Raises:
        OSError: the folder cannot take the file (callers turn it into :func:`write_error`).
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
    for tmp in output.parent.glob(_temporary_pattern(output)):
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
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def source_entry(table: Any, *, path: str, size: int, fingerprint: str | None) -> dict[str, Any]:
    """Manifest entry of one parsed source (scalars only; arrays go to NPZ members).

    Raises:
        SidecarSchemaError: the table has no display matrices (``matrix``/``movie_matrix``): a
            record without them would be refused when the index is opened, so fail here instead.
    """
    missing = [k for k in MATRIX_KEYS if getattr(table, k, None) is None]
    if missing:
        raise SidecarSchemaError(f"{path}: the sample table has no {' / '.join(missing)} (9 int32 display matrix)",
                                 path=path)
    entry: dict[str, Any] = {"path": path, "size": int(size), "fingerprint": fingerprint,
                             "num_samples": int(np.asarray(table.offset).shape[0])}
    for k in SCALAR_KEYS:
        if hasattr(table, k):
            entry[k] = _jsonable(getattr(table, k))
    for k in BYTES_KEYS:
        raw = getattr(table, k, b"") or b""
        entry[k + "_b64"] = base64.b64encode(bytes(raw)).decode("ascii")
    return entry


def canonical_arrays(table: Any) -> dict[str, np.ndarray]:
    """The table's canonical arrays: int64 (``is_sync`` uint8), decode order, equal lengths.

    Raises:
        SidecarSchemaError: arrays of different lengths or values that are not integers.
    """
    out = {}
    n = int(np.asarray(table.offset).shape[0])
    for f in CANONICAL_FIELDS:
        a = np.asarray(getattr(table, f))
        if a.ndim != 1 or a.shape[0] != n:
            raise SidecarSchemaError(f"{getattr(table, 'path', '')}: array {f} has shape {a.shape}, expected ({n},)")
        if f == "is_sync":
            out[f] = np.ascontiguousarray(a.astype(bool).astype(np.uint8))
        else:
            if a.dtype.kind not in "iub":
                raise SidecarSchemaError(f"{getattr(table, 'path', '')}: array {f} is {a.dtype}, not integer")
            out[f] = np.ascontiguousarray(a.astype(np.int64))
    return out


class SidecarWriter:
    """Writes a schema-4 sidecar source by source into a temporary archive next to ``output``;
    :meth:`commit` moves it into place with one ``os.replace``. Until then (and after
    :meth:`abort`, or an exception inside ``with``) an existing ``output`` is untouched.

    Args:
        output: the final ``.npz`` path.
        manifest: top-level manifest fields (repo_id, revision, data_root, subset, ...); the
            schema version and the ``sources`` list are filled in here.
    """

    def __init__(self, output: str | os.PathLike, manifest: dict[str, Any]) -> None:
        self.output = Path(output)
        self._manifest = dict(manifest)
        self._manifest["schema_version"] = SIDECAR_SCHEMA_VERSION
        self._sources: dict[int, dict[str, Any]] = {}
        self._file: IO[bytes] | None = None
        self._zf: zipfile.ZipFile | None = None
        self.tmp_path = self.output.with_name(f".{self.output.name}.tmp.npz")  # until open_temporary names it
        try:
            self.output.parent.mkdir(parents=True, exist_ok=True)
            remove_dead_temporaries(self.output)
            self.tmp_path, self._file = open_temporary(self.output)
            self._zf = zipfile.ZipFile(self._file, "w", zipfile.ZIP_DEFLATED, allowZip64=True)
        except OSError as e:
            self.abort()
            raise write_error(self.output, e) from e

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
            raise write_error(self.output, e) from e

    def add_source(self, source_id: int, table: Any, *, path: str, size: int, fingerprint: str | None) -> None:
        """Write one parsed source's arrays now (they can be dropped afterwards) and remember its
        manifest entry. ``source_id`` is the source's position in the sorted path list."""
        if self._zf is None:
            raise RuntimeError("sidecar writer is closed")
        if source_id in self._sources:
            raise ValueError(f"source id {source_id} written twice ({path})")
        for f, a in canonical_arrays(table).items():
            self._write_member(member_name(source_id, f), a)
        self._sources[source_id] = source_entry(table, path=path, size=size, fingerprint=fingerprint)

    def commit(self) -> Path:
        """Write the manifest, fsync and atomically replace ``output``. Returns ``output``."""
        if self._zf is None:
            raise RuntimeError("sidecar writer is closed")
        ids = sorted(self._sources)
        if ids != list(range(len(ids))):
            raise ValueError(f"sidecar sources are not numbered 0..{len(ids) - 1}: {ids[:10]}")
        manifest = dict(self._manifest)
        manifest["sources"] = [self._sources[i] for i in ids]
        blob = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode("utf-8")
        self._write_member(MANIFEST_MEMBER, np.frombuffer(blob, dtype=np.uint8))
        try:
            self._zf.close()  # writes the central directory
            self._zf = None
            assert self._file is not None
            self._file.flush()
            os.fsync(self._file.fileno())
            os.replace(self.tmp_path, self.output)  # still locked: no cleaner can take it before this
        except OSError as e:
            self.abort()
            raise write_error(self.output, e) from e
        self._file.close()  # releases the lock
        self._file = None
        try:
            dfd = os.open(self.output.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
        return self.output

    def abort(self) -> None:
        """Discard the temporary archive; ``output`` is left as it was."""
        if self._zf is not None:
            try:
                self._zf.close()
            except Exception:  # noqa: BLE001 - the archive is discarded anyway (a full disk fails here too)
                pass
            self._zf = None
        if self._file is not None:
            try:
                self.tmp_path.unlink()  # while still locked
            except FileNotFoundError:
                pass
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None

    def __enter__(self) -> "SidecarWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or self._zf is not None:
            self.abort()


def load_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """Read only the manifest of a sidecar NPZ (SidecarSchemaError when it is not schema 4)."""
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as zf:
            return read_manifest(zf, path)
    except (zipfile.BadZipFile, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise SidecarSchemaError(f"{path}: not a readable sidecar archive: {e}", path=path) from e


def load_tables(path: str | os.PathLike) -> Iterator[tuple[dict[str, Any], dict[str, np.ndarray]]]:
    """Yield ``(source_entry, arrays)`` per source straight from the NPZ (canonical int64 arrays
    plus derived ``pts_ticks``, ``pts_s`` and ``presentation_order``). For tools and tests;
    readers use the derived index."""
    path = os.fspath(path)
    with zipfile.ZipFile(path) as zf:
        manifest = read_manifest(zf, path)
        for sid, src in enumerate(manifest["sources"]):
            arrays = {f: read_npz_member(zf, member_name(sid, f)) for f in CANONICAL_FIELDS}
            pts = arrays["dts_ticks"] + arrays["cts_ticks"] - int(src.get("media_time") or 0)
            arrays["pts_ticks"] = pts
            arrays["pts_s"] = pts_seconds(pts, src["media_timescale"], src.get("movie_timescale") or 1,
                                          src.get("empty_edit_movie_ticks") or 0)
            arrays["presentation_order"] = presentation_order_of(pts)
            arrays["is_sync"] = arrays["is_sync"].astype(bool)
            yield src, arrays
