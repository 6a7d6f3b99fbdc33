"""Derived memory-mapped index: a schema-4 sidecar NPZ converted once into a flat read-only file.

The NPZ keeps canonical int64 arrays per source MP4 (``s000000/offset.npy`` ...). Decompressing it in
every process (rank, DataLoader worker) costs time and private memory, so on first open it is
converted into **one** file under ``$HF_LEROBOT_HOME/streaming-indexes/`` whose name is the NPZ's
content digest (its *generation*). Every process maps that file read-only, so ranks on one node
share the page cache, and only the pages of the sources a process touches are ever faulted in.

File layout (format 2; all integers little-endian)::

    [8  magic b"LRSIDX\x03\x02"] [pad to 64]
    [array blocks, each 64-byte aligned]                  (absolute offsets in the records)
    [per-source records: one JSON object per source, concatenated]
    [u64 record_offsets (F+1)] [paths: UTF-8, concatenated] [u64 path_offsets (F+1)]
    [top JSON header, UTF-8]                              (format, generation, manifest, where
                                                           the tables above lie; O(1) in F)
    [u64 json_offset] [u64 json_nbytes] [8 magic]         (trailer: the last 24 bytes)

Opening parses only the small top header; a source's record (scalars and array specs) is parsed
and validated the first time that source is used, so opening costs O(1) in the number of sources.

Each array of a source is stored in one of these encodings:

``plain``  the values in the smallest exact integer dtype (uint8, uint16, uint32, int32, int64);
           ``pts_s`` is float64 and ``is_sync`` is a dense uint8 (viewed as bool).
``const``  every value equal: the value is stored once (in the record) and exposed as a
           read-only ``np.broadcast_to`` view of the logical length (constant composition offset,
           constant size...).
``arith``  an arithmetic progression ``first + i * step`` (constant sample duration → DTS; a constant
           byte stride → offsets; identity presentation order). For a source of more than
           ``SHARED_MIN_SAMPLES`` samples the record names a **shared progression block**: one block
           per ``(dtype, first, step)`` holding the longest such progression, of which every source
           with that key maps a prefix (zero-copy, page cache shared by every process of a node).
           Smaller sources keep only ``first``/``step`` and materialise the array lazily (at most
           ``SHARED_MIN_SAMPLES`` values per used source and process).
``derived`` (``pts_s`` only) computed from ``pts_ticks`` with the same exact formula as a stored one;
           for an ``arith`` ``pts_ticks`` of a large source it is stored once per
           ``(first, step, timescales, empty edit)`` in a shared float64 block (a prefix view).

Consumers must not assume int64: every view is read-only and its dtype is the stored one.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import io
import json
import mmap
import os
import struct
import threading
import uuid
import zipfile
import zlib
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from lerobotstream.errors import SidecarError, SidecarSchemaError

# --- schema-4 NPZ naming (the sidecar package writes it, this module reads it) ----------------
#: 4: per-source ``matrix``/``movie_matrix`` (tkhd/mvhd display matrices; a schema-3 sidecar lacks
#: them and would decode rotated videos unrotated, so it is rebuilt under its new name)
SIDECAR_SCHEMA_VERSION = 4
MANIFEST_MEMBER = "manifest.json"
#: canonical per-source arrays of the NPZ (int64, except ``is_sync`` uint8), decode order
CANONICAL_FIELDS = ("offset", "size", "dts_ticks", "cts_ticks", "is_sync")


def member_name(source_id: int, field: str) -> str:
    """NPZ member (without ``.npy``) holding ``field`` of source ``source_id``."""
    return f"s{source_id:06d}/{field}"


# --- derived file format ----------------------------------------------------------------------
INDEX_MAGIC = b"LRSIDX\x03\x02"
INDEX_FORMAT = 2
#: sources with more samples than this map their ``arith``/``derived`` arrays from shared blocks
SHARED_MIN_SAMPLES = 4096
_U64 = np.dtype("<u8")
_ALIGN = 64
_TRAILER = struct.Struct("<QQ8s")
#: candidate storage dtypes, smallest first (the brief's exact list)
_UNSIGNED = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32))
_SIGNED = (np.dtype(np.int32),)
_INT64 = np.dtype(np.int64)
_ALLOWED_DTYPES = {"|u1", "<u2", "<u4", "<i4", "<i8", "<f8"}
_INDEX_FIELDS = ("offset", "size", "dts_ticks", "cts_ticks", "pts_ticks", "is_sync", "sync_samples",
                 "presentation_order", "pts_s")


def minimal_int_dtype(lo: int, hi: int) -> np.dtype:
    """Smallest of uint8/uint16/uint32/int32/int64 holding every integer in ``[lo, hi]`` exactly."""
    lo, hi = int(lo), int(hi)
    if lo >= 0:
        for dt in _UNSIGNED:
            if hi <= np.iinfo(dt).max:
                return dt
    for dt in _SIGNED:
        info = np.iinfo(dt)
        if lo >= info.min and hi <= info.max:
            return dt
    return _INT64


def encode_int_array(values: np.ndarray) -> tuple[dict[str, Any], np.ndarray | None]:
    """Choose the encoding of one integer array.

    Args:
        values: 1-D integer array (any int dtype; values must fit int64).

    Returns:
        ``(spec, block)``: ``spec`` is the JSON description (``enc``, ``count``, ``dtype`` and
        ``value`` / ``first``+``step`` when not plain); ``block`` is the array to store (minimal
        dtype, C-contiguous) or None for ``const``/``arith``.
    """
    a = np.ascontiguousarray(values, dtype=np.int64).reshape(-1)
    n = int(a.shape[0])
    if n == 0:
        return {"enc": "const", "count": 0, "dtype": "|u1", "value": 0}, None
    lo, hi = int(a.min()), int(a.max())
    dt = minimal_int_dtype(lo, hi)
    if lo == hi:
        return {"enc": "const", "count": n, "dtype": dt.str, "value": lo}, None
    if n >= 2:
        step = int(a[1]) - int(a[0])
        if step != 0 and abs(step) <= np.iinfo(np.int64).max and bool(np.all(np.diff(a) == step)):
            return {"enc": "arith", "count": n, "dtype": dt.str, "first": int(a[0]), "step": step}, None
    return {"enc": "plain", "count": n, "dtype": dt.str}, a.astype(dt)


def pts_seconds(pts_ticks: np.ndarray, media_timescale: int, movie_timescale: int,
                empty_edit_movie_ticks: int) -> np.ndarray:
    """Exact presentation times in seconds: ``pts_ticks / media_ts + empty_edit / movie_ts``.

    The sum is formed over integers and divided once, so each value is the float64 nearest the
    rational time (one rounding). Falls back to Python fractions if int64 would overflow.

    Returns:
        float64 array, same shape as ``pts_ticks``.
    """
    ticks = np.asarray(pts_ticks, dtype=np.int64)
    media_ts, movie_ts, empty = int(media_timescale), int(movie_timescale or 1), int(empty_edit_movie_ticks or 0)
    if media_ts <= 0:
        raise SidecarSchemaError(f"media timescale must be positive, got {media_ts}")
    if empty == 0:
        if ticks.size == 0 or int(np.abs(ticks).max()) <= 2**53:
            return ticks.astype(np.float64) / float(media_ts)
        return np.array([float(Fraction(int(t), media_ts)) for t in ticks], dtype=np.float64)
    den = media_ts * movie_ts
    bias = empty * media_ts
    big = (int(np.abs(ticks).max()) if ticks.size else 0) * movie_ts + abs(bias)
    if big <= 2**53 and den <= 2**53:
        return (ticks * movie_ts + bias).astype(np.float64) / float(den)
    return np.array([float(Fraction(int(t) * movie_ts + bias, den)) for t in ticks], dtype=np.float64)


def presentation_order_of(pts_ticks: np.ndarray) -> np.ndarray:
    """Decode-order index of each frame in presentation order (stable argsort of PTS), int64."""
    return np.argsort(np.asarray(pts_ticks, dtype=np.int64), kind="stable").astype(np.int64)


# --- the per-source view ------------------------------------------------------------------------
class MappedSampleTable:
    """One source's sample table as read-only views into the mapped index (decode order).

    Same field names as the parser's ``SampleTable``: ``offset`` (bytes), ``size`` (bytes),
    ``dts_ticks``, ``cts_ticks``, ``pts_ticks`` (media ticks), ``is_sync`` (bool), ``pts_s``
    (float64 seconds, exact), ``presentation_order`` (decode-order index of the k-th presented
    frame); plus ``sync_samples`` (decode-order indices of sync samples, ascending) and the
    scalars ``media_timescale``, ``movie_timescale``, ``media_time``, ``empty_edit_movie_ticks``,
    ``edit_duration_movie_ticks``, ``codec``, ``stsd`` (bytes), ``width``, ``height``,
    ``track_id``, ``ctts_version``, ``path``, ``source_id``, ``file_size``, ``fingerprint``.
    Integer arrays may be uint8/uint16/uint32/int32/int64 or zero-stride broadcasts.
    """

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    @property
    def num_samples(self) -> int:
        """Number of samples (= frames) in the track."""
        return int(self.offset.shape[0])

    @property
    def num_frames(self) -> int:
        return self.num_samples

    def __repr__(self) -> str:
        return (f"MappedSampleTable(path={self.path!r}, num_samples={self.num_samples}, "
                f"codec={self.codec!r}, media_timescale={self.media_timescale})")


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


# --- opening ------------------------------------------------------------------------------------
def npz_generation(zf: zipfile.ZipFile) -> str:
    """Content digest of a sidecar NPZ from its ZIP central directory (names, CRC32s, sizes) and
    its manifest bytes: two different sidecars never share a generation, reading it is cheap."""
    h = hashlib.sha256()
    h.update(b"lerobotstream-sidecar-generation-v1\0")
    for info in sorted(zf.infolist(), key=lambda i: i.filename):
        h.update(f"{info.filename}\0{info.CRC}\0{info.file_size}\0".encode())
    try:
        h.update(zf.read(MANIFEST_MEMBER + ".npy"))
    except KeyError:
        pass
    return h.hexdigest()


def read_npz_member(zf: zipfile.ZipFile, name: str) -> np.ndarray:
    """Load one ``.npy`` member of the NPZ (no pickles)."""
    with zf.open(name + ".npy") as f:
        return np.lib.format.read_array(f, allow_pickle=False)


def read_manifest(zf: zipfile.ZipFile, path: str = "") -> dict[str, Any]:
    """The schema-4 JSON manifest of an open NPZ.

    Raises:
        SidecarSchemaError: no manifest, not JSON, or a schema version other than 4.
    """
    try:
        raw = read_npz_member(zf, MANIFEST_MEMBER)
        manifest = json.loads(raw.astype(np.uint8).tobytes().decode("utf-8"))
    except KeyError as e:
        raise SidecarSchemaError(f"{path}: not a lerobotstream sidecar (no {MANIFEST_MEMBER})", path=path) from e
    except (ValueError, UnicodeDecodeError) as e:
        raise SidecarSchemaError(f"{path}: unreadable sidecar manifest: {e}", path=path) from e
    if not isinstance(manifest, dict) or manifest.get("schema_version") != SIDECAR_SCHEMA_VERSION:
        got = manifest.get("schema_version") if isinstance(manifest, dict) else None
        raise SidecarSchemaError(
            f"{path}: unsupported MP4 sidecar schema {got!r} (this reader needs {SIDECAR_SCHEMA_VERSION}); "
            "rebuild it with `python -m lerobotstream.sidecar build`", path=path)
    if not isinstance(manifest.get("sources"), list):
        raise SidecarSchemaError(f"{path}: sidecar manifest has no 'sources' list", path=path)
    return manifest


#: per-source scalars of ``SampleTable`` kept in the manifest (bytes fields go as ``<name>_b64``)
SCALAR_KEYS = ("media_timescale", "movie_timescale", "media_time", "empty_edit_movie_ticks",
               "edit_duration_movie_ticks", "codec", "width", "height", "track_id", "ctts_version",
               "display_width", "display_height", "media_duration", "has_edit", "video_track_ids",
               "moov_offset", "moov_size", "mdat_offset", "mdat_size", "faststart", "matrix", "movie_matrix")
#: scalars every schema-4 record must hold (a missing display matrix would silently unrotate frames)
MATRIX_KEYS = ("matrix", "movie_matrix")
BYTES_KEYS = ("stsd", "ftyp")
_SCALAR_KEYS = SCALAR_KEYS


def _convert(zf: zipfile.ZipFile, manifest: dict[str, Any], generation: str, out: io.BufferedWriter,
             npz_path: str) -> None:
    """Write the derived index (format 2) for an open NPZ into the file object ``out``, source by
    source (only one source's arrays are in memory at a time)."""
    out.write(INDEX_MAGIC)
    pos = len(INDEX_MAGIC)

    def pad_to_align() -> None:
        nonlocal pos
        pad = (-pos) % _ALIGN
        if pad:
            out.write(b"\0" * pad)
            pos += pad

    def put(block: np.ndarray | bytes) -> int:
        nonlocal pos
        pad_to_align()
        start = pos
        data = block if isinstance(block, bytes) else np.ascontiguousarray(block).tobytes()
        out.write(data)
        pos += len(data)
        return start

    # shared blocks: key -> longest count; specs that refer to a key get their offset at the end
    shared_len: dict[tuple, int] = {}
    shared_refs: dict[tuple, list[dict[str, Any]]] = {}

    def share(key: tuple, spec: dict[str, Any]) -> None:
        shared_len[key] = max(shared_len.get(key, 0), int(spec["count"]))
        shared_refs.setdefault(key, []).append(spec)

    records: list[bytes] = []
    paths: list[str] = []
    for sid, src in enumerate(manifest["sources"]):
        arrays = {}
        for f in CANONICAL_FIELDS:
            try:
                arrays[f] = read_npz_member(zf, member_name(sid, f))
            except KeyError as e:
                raise SidecarSchemaError(
                    f"{npz_path}: source {sid} ({src.get('path')}) has no array {f!r}", path=npz_path) from e
        n = int(src.get("num_samples", arrays["offset"].shape[0]))
        for f, a in arrays.items():
            if a.ndim != 1 or a.shape[0] != n:
                raise SidecarSchemaError(
                    f"{npz_path}: source {src.get('path')}: array {f} has shape {a.shape}, expected ({n},)",
                    path=npz_path)
        media_time = int(src.get("media_time", 0) or 0)
        dts = arrays["dts_ticks"].astype(np.int64)
        cts = arrays["cts_ticks"].astype(np.int64)
        pts_ticks = dts + cts - media_time
        is_sync = arrays["is_sync"].astype(bool)
        shared = n > SHARED_MIN_SAMPLES
        specs: dict[str, Any] = {}
        for f, a in (("offset", arrays["offset"]), ("size", arrays["size"]), ("dts_ticks", dts),
                     ("cts_ticks", cts), ("pts_ticks", pts_ticks),
                     ("presentation_order", presentation_order_of(pts_ticks))):
            spec, block = encode_int_array(a)
            if block is not None:
                spec["offset"] = put(block)
            elif spec["enc"] == "arith" and shared:
                share(("int", spec["dtype"], spec["first"], spec["step"]), spec)
            specs[f] = spec
        # sync samples stay dense: a bool per sample plus the sorted list of sync indices
        specs["is_sync"] = {"enc": "plain", "count": n, "dtype": "|u1", "offset": put(is_sync.astype(np.uint8))}
        sync_idx = np.flatnonzero(is_sync)
        sdt = minimal_int_dtype(0, max(n - 1, 0))
        specs["sync_samples"] = {"enc": "plain", "count": int(sync_idx.shape[0]), "dtype": sdt.str,
                                 "offset": put(sync_idx.astype(sdt))}
        pspec = specs["pts_ticks"]
        timing = (int(src["media_timescale"]), int(src.get("movie_timescale") or 1),
                  int(src.get("empty_edit_movie_ticks") or 0))
        if pspec["enc"] == "plain":
            pts_s = pts_seconds(pts_ticks, *timing)
            specs["pts_s"] = {"enc": "plain", "count": n, "dtype": "<f8", "offset": put(pts_s)}
        elif pspec["enc"] == "arith" and shared:
            specs["pts_s"] = {"enc": "derived", "count": n, "dtype": "<f8"}
            share(("pts_s", pspec["first"], pspec["step"], *timing), specs["pts_s"])
        else:
            specs["pts_s"] = {"enc": "derived", "count": n, "dtype": "<f8"}
        entry = {k: src.get(k) for k in ("path", "size", "fingerprint", "stsd_b64", "ftyp_b64", *_SCALAR_KEYS)}
        entry["num_samples"] = n
        entry["arrays"] = specs
        records.append(entry)  # type: ignore[arg-type]  (serialised after the shared blocks)
        paths.append(str(src.get("path")))
    # shared progression blocks: the longest progression of each key, once
    for key, count in shared_len.items():
        if key[0] == "int":
            _, dt, first, step = key
            block = (np.arange(count, dtype=np.int64) * int(step) + int(first)).astype(np.dtype(dt))
        else:
            _, first, step, media_ts, movie_ts, empty = key
            block = pts_seconds(np.arange(count, dtype=np.int64) * int(step) + int(first), media_ts, movie_ts, empty)
        off = put(block)
        for spec in shared_refs[key]:
            spec["offset"] = off
            spec["shared"] = True
    data_end = pos
    rec_offsets = np.empty(len(records) + 1, dtype=_U64)
    rec_offsets[0] = pos
    for i, entry in enumerate(records):
        blob = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode("utf-8")
        out.write(blob)
        pos += len(blob)
        rec_offsets[i + 1] = pos
    rec_table = put(rec_offsets)
    path_offsets = np.empty(len(paths) + 1, dtype=_U64)
    path_offsets[0] = pos
    for i, p in enumerate(paths):
        b = p.encode("utf-8")
        out.write(b)
        pos += len(b)
        path_offsets[i + 1] = pos
    path_table = put(path_offsets)
    pad_to_align()
    header = {"format": INDEX_FORMAT, "generation": generation, "npz": os.path.basename(npz_path),
              "manifest": {k: v for k, v in manifest.items() if k != "sources"},
              "num_sources": len(records), "data_end": data_end, "records": rec_table, "paths": path_table,
              "paths_sorted": all(paths[i] < paths[i + 1] for i in range(len(paths) - 1))}
    blob = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    json_offset = pos
    out.write(blob)
    out.write(_TRAILER.pack(json_offset, len(blob), INDEX_MAGIC))


def _parse_header(buf: mmap.mmap | bytes, path: str) -> dict[str, Any]:
    """Validate the derived file's framing and return its top JSON header (O(1) in sources).

    Raises:
        SidecarSchemaError: bad magic, trailer, JSON, format, or source tables outside the file.
    """
    total = len(buf)
    if total < len(INDEX_MAGIC) + _TRAILER.size or bytes(buf[: len(INDEX_MAGIC)]) != INDEX_MAGIC:
        raise SidecarSchemaError(f"{path}: not a lerobotstream derived index (bad magic)", path=path)
    json_offset, json_nbytes, magic = _TRAILER.unpack(bytes(buf[total - _TRAILER.size:]))
    if magic != INDEX_MAGIC or json_nbytes == 0 or json_offset + json_nbytes != total - _TRAILER.size:
        raise SidecarSchemaError(f"{path}: derived index trailer is damaged", path=path)
    try:
        header = json.loads(bytes(buf[json_offset: json_offset + json_nbytes]).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise SidecarSchemaError(f"{path}: derived index header is not JSON: {e}", path=path) from e
    if not isinstance(header, dict) or header.get("format") != INDEX_FORMAT:
        got = header.get("format") if isinstance(header, dict) else None
        raise SidecarSchemaError(f"{path}: derived index format {got!r} unsupported", path=path)
    try:
        nsrc = int(header["num_sources"])
        data_end = int(header["data_end"])
        tables = (int(header["records"]), int(header["paths"]))
    except (KeyError, TypeError, ValueError) as e:
        raise SidecarSchemaError(f"{path}: derived index header lacks its source tables", path=path) from e
    if nsrc < 0 or not len(INDEX_MAGIC) <= data_end <= json_offset:
        raise SidecarSchemaError(f"{path}: derived index header is inconsistent", path=path)
    for off in tables:
        if off % 8 or off < data_end or off + 8 * (nsrc + 1) > json_offset:
            raise SidecarSchemaError(f"{path}: derived index source table lies outside the file", path=path)
    header["_json_offset"] = json_offset
    return header


def _check_record(src: dict[str, Any], data_end: int, path: str) -> None:
    """Validate one source record's array specs against the data region.

    Raises:
        SidecarSchemaError: a missing array, a bad dtype or length, or a block outside the data.
    """
    n = int(src["num_samples"])
    for name in _INDEX_FIELDS:
        spec = src["arrays"].get(name)
        if spec is None or spec.get("dtype") not in _ALLOWED_DTYPES:
            raise SidecarSchemaError(f"{path}: array {name} of {src.get('path')} missing or bad dtype", path=path)
        if name != "sync_samples" and int(spec["count"]) != n:
            raise SidecarSchemaError(f"{path}: array {name} of {src.get('path')} has a wrong length", path=path)
        if spec["enc"] not in ("plain", "const", "arith", "derived"):
            raise SidecarSchemaError(f"{path}: unknown encoding {spec['enc']!r}", path=path)
        if "offset" in spec:
            off, itemsize = int(spec["offset"]), np.dtype(spec["dtype"]).itemsize
            if off % itemsize or off < len(INDEX_MAGIC) or off + itemsize * int(spec["count"]) > data_end:
                raise SidecarSchemaError(f"{path}: array {name} of {src.get('path')} lies outside the data", path=path)
        elif spec["enc"] == "plain":
            raise SidecarSchemaError(f"{path}: array {name} of {src.get('path')} has no offset", path=path)


class Mp4Index:
    """A sidecar's derived index, memory-mapped read-only; per-source tables built lazily.

    Open with :meth:`open` (converts the NPZ on first use, under a file lock) or
    :meth:`open_index_file` (an existing derived file). Thread-safe.

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
        with open(self.index_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise SidecarSchemaError(f"{self.index_path}: empty derived index", path=str(self.index_path))
            self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._header = _parse_header(self._mmap, str(self.index_path))
        self._buf = np.frombuffer(self._mmap, dtype=np.uint8)  # read-only: ACCESS_READ
        self.generation: str = self._header["generation"]
        self.manifest: dict[str, Any] = self._header["manifest"]
        if self.manifest.get("schema_version") != SIDECAR_SCHEMA_VERSION:
            raise SidecarSchemaError(
                f"{self.index_path}: derived index of a schema {self.manifest.get('schema_version')!r} sidecar "
                f"(this reader needs {SIDECAR_SCHEMA_VERSION}); rebuild the sidecar", path=str(self.index_path))
        self._num_sources = int(self._header["num_sources"])
        self._data_end = int(self._header["data_end"])
        n1 = self._num_sources + 1
        self._rec_off = self._buf[self._header["records"]: self._header["records"] + 8 * n1].view(_U64)
        self._path_off = self._buf[self._header["paths"]: self._header["paths"] + 8 * n1].view(_U64)
        self._paths_sorted = bool(self._header.get("paths_sorted"))
        self._paths: list[str] | None = None
        self._ids: dict[str, int] | None = None
        self._records: dict[int, dict[str, Any]] = {}
        self._tables: dict[int, Any] = {}
        self._lock = threading.Lock()

    # --- construction ----------------------------------------------------------------------------
    @classmethod
    def open(cls, npz_path: str | os.PathLike, *, index_dir: str | os.PathLike | None = None,
             lock_timeout_s: float = 1800.0) -> "Mp4Index":
        """Open a schema-4 sidecar NPZ through its derived index, converting it on first use.

        Args:
            npz_path: the sidecar archive.
            index_dir: folder of derived files; defaults to ``constants.INDEX_DIR``
                (``$HF_LEROBOT_HOME/streaming-indexes``, read at call time).
            lock_timeout_s: how long to wait for another process converting the same sidecar.

        Returns:
            Mp4Index mapped from ``<index_dir>/mp4-s4-f2-<generation[:32]>.idx``. A warm open
            (derived file present, NPZ unchanged since: same path, inode, size and mtime) reads
            the generation from a small ``.gen`` note next to it instead of the NPZ's central
            directory.

        Raises:
            SidecarSchemaError: the NPZ is not a readable schema-4 sidecar.
            SidecarLockTimeoutError: another process held the conversion lock too long.
            SidecarError: the index folder is not writable or the disk is full (says which).
        """
        npz_path = os.fspath(npz_path)
        if index_dir is None:
            from lerobotstream import constants  # config only; read at call time so tests can redirect it

            index_dir = constants.INDEX_DIR
        index_dir = Path(index_dir)
        known = _cached_generation(npz_path, index_dir)
        if known is not None:  # warm open: no ZIP central directory, no manifest read
            existing = cls._try_open(index_dir / _index_name(known), known)
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
            target = index_dir / _index_name(generation)
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
                    from lerobotstream.errors import SidecarLockTimeoutError

                    raise SidecarLockTimeoutError(
                        f"timed out after {lock_timeout_s}s waiting for the index lock {target}.lock",
                        path=str(target)) from e
                try:
                    existing = cls._try_open(target, generation)  # converted while we waited
                    if existing is not None:
                        return existing
                    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
                    try:
                        with open(tmp, "wb") as out:
                            try:
                                _convert(zf, manifest, generation, out, npz_path)
                            except (zlib.error, zipfile.BadZipFile, EOFError, ValueError, KeyError) as e:
                                raise SidecarSchemaError(
                                    f"{npz_path}: corrupt sidecar archive ({type(e).__name__}: {e}); delete it so it "
                                    "is rebuilt", path=str(npz_path)) from e
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
                if e.errno in (errno.EACCES, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EPERM):
                    raise SidecarError(
                        f"cannot write the derived MP4 index in {index_dir}: {e.strerror}; check permissions and "
                        "free space in HF_LEROBOT_HOME (or set LEROBOTSTREAM_INDEX_DIR)", path=str(index_dir)) from e
                raise
        _remember_generation(npz_path, index_dir, generation)
        return cls(target)

    @classmethod
    def _try_open(cls, target: Path, generation: str) -> "Mp4Index | None":
        if not target.is_file():
            return None
        try:
            idx = cls(target)
        except (SidecarSchemaError, ValueError, KeyError, TypeError, OSError):
            return None  # damaged or foreign: rebuilt under the lock
        return idx if idx.generation == generation else None

    @classmethod
    def open_index_file(cls, index_path: str | os.PathLike) -> "Mp4Index":
        """Map an existing derived index file (no conversion)."""
        return cls(index_path)

    # --- lookups ---------------------------------------------------------------------------------
    @property
    def num_sources(self) -> int:
        return self._num_sources

    @property
    def paths(self) -> list[str]:
        """Source paths (relative to the dataset root), by source id (built on first access)."""
        if self._paths is None:
            self._paths = [self._path(i) for i in range(self._num_sources)]
        return self._paths

    @property
    def _sources(self) -> "_Records":
        """Per-source records by id, parsed on access (for tools that inspect array specs)."""
        return _Records(self)

    def _path(self, source_id: int) -> str:
        a, b = int(self._path_off[source_id]), int(self._path_off[source_id + 1])
        return bytes(self._mmap[a:b]).decode("utf-8")

    def _record(self, source_id: int) -> dict[str, Any]:
        """The parsed, validated record of one source (cached)."""
        rec = self._records.get(source_id)
        if rec is not None:
            return rec
        if not 0 <= source_id < self._num_sources:
            raise IndexError(f"source id {source_id} outside [0, {self._num_sources}) in {self.index_path}")
        a, b = int(self._rec_off[source_id]), int(self._rec_off[source_id + 1])
        where = str(self.index_path)
        if not self._data_end <= a <= b <= self._header["_json_offset"]:
            raise SidecarSchemaError(f"{where}: record of source {source_id} lies outside the file", path=where)
        try:
            rec = json.loads(bytes(self._mmap[a:b]).decode("utf-8"))
            _check_record(rec, self._data_end, where)
        except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
            raise SidecarSchemaError(f"{where}: record of source {source_id} is damaged: {e}", path=where) from e
        self._records[source_id] = rec
        return rec

    def source_id(self, path: str) -> int:
        """Source id of the MP4 at ``path`` (relative POSIX path). Raises KeyError naming it."""
        if self._paths_sorted:  # binary search over the mapped path table, no per-source objects
            lo, hi = 0, self._num_sources
            while lo < hi:
                mid = (lo + hi) >> 1
                if self._path(mid) < path:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < self._num_sources and self._path(lo) == path:
                return lo
        else:
            if self._ids is None:
                self._ids = {p: i for i, p in enumerate(self.paths)}
            if path in self._ids:
                return self._ids[path]
        raise KeyError(f"{path!r} is not in the MP4 sidecar index {self.index_path}")

    def source_info(self, source_id: int) -> dict[str, Any]:
        """Manifest entry of a source (path, size, fingerprint, timescales, codec...), no arrays."""
        return {k: v for k, v in self._record(source_id).items() if k != "arrays"}

    def nbytes_stored(self) -> int:
        """Size of the mapped file, bytes."""
        return len(self._mmap)

    def _array(self, spec: dict[str, Any]) -> np.ndarray:
        dt = np.dtype(spec["dtype"])
        n = int(spec["count"])
        enc = spec["enc"]
        if "offset" in spec:  # plain, or a prefix of a shared progression block: zero-copy view
            off = int(spec["offset"])
            return self._buf[off: off + n * dt.itemsize].view(dt)
        if enc == "const":
            return np.broadcast_to(np.array(spec["value"], dtype=dt), (n,))
        if enc == "arith":  # small source (<= SHARED_MIN_SAMPLES): materialised once per process
            a = np.arange(n, dtype=np.int64) * int(spec["step"]) + int(spec["first"])
            return _readonly(a.astype(dt))
        raise SidecarSchemaError(f"{self.index_path}: unknown array encoding {enc!r}")

    def table(self, source_id: int):
        """Read-only sample table of one source (decode order), built on first request.

        Every array is a zero-copy view into the map (plain blocks, shared progression blocks) or a
        zero-stride broadcast (constants); only sources of at most ``SHARED_MIN_SAMPLES`` samples
        materialise their ``arith``/``derived`` arrays (small, once per process).

        Returns:
            SampleTable: the parser's class (``mp4._table.SampleTable``) whose arrays are views into
            the map, in their stored dtypes (no int64 promise); ``file_size`` is the manifest size.

        Raises:
            IndexError: ``source_id`` is not in ``[0, num_sources)``.
            SidecarSchemaError: the source's record is damaged.
        """
        t = self._tables.get(source_id)
        if t is not None:
            return t
        if not 0 <= source_id < self._num_sources:
            raise IndexError(f"source id {source_id} outside [0, {self._num_sources}) in {self.index_path}")
        with self._lock:
            t = self._tables.get(source_id)
            if t is not None:
                return t
            src = self._record(source_id)
            specs = src["arrays"]
            arrays = {name: self._array(specs[name]) for name in _INDEX_FIELDS if name != "pts_s"}
            arrays["is_sync"] = arrays["is_sync"].view(bool)
            if specs["pts_s"]["enc"] == "derived" and "offset" not in specs["pts_s"]:
                arrays["pts_s"] = _readonly(pts_seconds(arrays["pts_ticks"], src["media_timescale"],
                                                        src.get("movie_timescale") or 1,
                                                        src.get("empty_edit_movie_ticks") or 0))
            else:
                arrays["pts_s"] = self._array(specs["pts_s"])
            scalars = {k: src.get(k) for k in _SCALAR_KEYS if k in src}
            for k in ("media_time", "empty_edit_movie_ticks", "edit_duration_movie_ticks"):
                scalars[k] = int(scalars.get(k) or 0)
            if scalars.get("video_track_ids") is not None:
                scalars["video_track_ids"] = tuple(scalars["video_track_ids"])
            for k in MATRIX_KEYS:
                scalars[k] = _matrix(src.get(k), k, src.get("path"), str(self.index_path))
            for k in BYTES_KEYS:
                scalars[k] = base64.b64decode(src[k + "_b64"]) if src.get(k + "_b64") else b""
            t = _make_table(path=src["path"], file_size=src.get("size"), **scalars, **arrays)
            self._tables[source_id] = t
            return t

    def sync_samples(self, source_id: int) -> np.ndarray:
        """Decode-order indices of the sync samples of a source (dense, ascending, read-only view)."""
        return self._array(self._record(source_id)["arrays"]["sync_samples"])

    def table_for_path(self, path: str) -> MappedSampleTable:
        return self.table(self.source_id(path))

    # --- hot accessors (Cython) --------------------------------------------------------------------
    def frames_to_samples(self, source_id: int, frames: Sequence[int] | np.ndarray) -> np.ndarray:
        """Decode-order sample index (int64) of each presentation-order frame. Raises IndexError."""
        return _c().frames_to_samples(self.table(source_id).presentation_order, np.asarray(frames, dtype=np.int64))

    def sample_range_of_frames(self, source_id: int, frame_start: int, frame_stop: int) -> tuple[int, int]:
        """Smallest decode-order ``[sample_start, sample_stop)`` holding frames ``[frame_start, frame_stop)``."""
        return _c().sample_range_of_frames(self.table(source_id).presentation_order, frame_start, frame_stop)

    def byte_range(self, source_id: int, sample_start: int, sample_stop: int) -> tuple[int, int]:
        """File bytes ``[byte_start, byte_stop)`` covering decode-order samples ``[start, stop)``."""
        t = self.table(source_id)
        return _c().byte_bounds(t.offset, t.size, sample_start, sample_stop)

    def frames_played_at(self, source_id: int, times_s: Iterable[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Nearest presentation-order frame to each time (seconds, source timeline).

        Returns:
            ``(frames, pts_s)``: int64 frame indices and float64 presentation times of those frames.
        """
        t = self.table(source_id)
        return _c().nearest_frames(t.pts_s, t.presentation_order, np.asarray(times_s, dtype=np.float64))

    def sync_sample_at_or_before(self, source_id: int, sample: int) -> int:
        """Last sync sample ``<= sample`` (decode order), i.e. where decoding must start."""
        return _c().sync_at_or_before(self.sync_samples(source_id), sample)

    def close(self) -> None:
        """Drop the per-source views; the mapping closes when no view refers to it any more."""
        self._tables.clear()

    def __repr__(self) -> str:
        return f"Mp4Index({str(self.index_path)!r}, num_sources={self.num_sources}, generation={self.generation[:12]})"


class _Records(Sequence):
    """Read-only sequence of an index's per-source records, parsed lazily."""

    def __init__(self, index: "Mp4Index") -> None:
        self._index = index

    def __len__(self) -> int:
        return self._index.num_sources

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self._index._record(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return self._index._record(i)


def _index_name(generation: str) -> str:
    """File name of the derived index of a generation (format-specific, so versions coexist)."""
    return f"mp4-s{SIDECAR_SCHEMA_VERSION}-f{INDEX_FORMAT}-{generation[:32]}.idx"


def _npz_identity(npz_path: str) -> dict[str, Any] | None:
    try:
        st = os.stat(npz_path)
    except OSError:
        return None
    return {"path": os.path.realpath(npz_path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns, "ino": st.st_ino, "dev": st.st_dev}


def _generation_note(npz_path: str, index_dir: Path) -> Path:
    key = hashlib.sha256(os.path.realpath(npz_path).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return index_dir / f"npz-{key}.gen"


def _cached_generation(npz_path: str, index_dir: Path) -> str | None:
    """The generation remembered for this NPZ when its identity (path, inode, size, mtime, ctime)
    is unchanged, else None."""
    ident = _npz_identity(npz_path)
    if ident is None:
        return None
    try:
        note = json.loads(_generation_note(npz_path, index_dir).read_text("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(note, dict) or {k: note.get(k) for k in ident} != ident:
        return None
    gen = note.get("generation")
    return gen if isinstance(gen, str) and len(gen) == 64 else None


def _remember_generation(npz_path: str, index_dir: Path, generation: str) -> None:
    """Atomically write the NPZ identity → generation note (best effort: a read-only index folder
    only costs the slow path next time)."""
    ident = _npz_identity(npz_path)
    if ident is None:
        return
    note = _generation_note(npz_path, index_dir)
    tmp = note.with_name(f".{note.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_text(json.dumps({**ident, "generation": generation}), "utf-8")
        os.replace(tmp, note)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def _matrix(value: Any, name: str, source: Any, where: str) -> tuple[int, ...]:
    """A record's 3x3 display matrix as 9 signed int32 (SidecarSchemaError when absent or malformed)."""
    ok = isinstance(value, (list, tuple)) and len(value) == 9 and all(
        isinstance(v, int) and not isinstance(v, bool) and -2**31 <= v < 2**31 for v in value)
    if not ok:
        raise SidecarSchemaError(f"{where}: source {source!r} has no valid {name} (9 int32); rebuild the sidecar",
                                 path=where)
    return tuple(int(v) for v in value)


def _make_table(**fields: Any):
    """A parser ``SampleTable`` (read-only views) when that class is available, else a
    :class:`MappedSampleTable` with the same field names."""
    try:
        import dataclasses

        from lerobotstream.mp4._table import SampleTable
    except ImportError:
        return MappedSampleTable(**fields)
    names = {f.name for f in dataclasses.fields(SampleTable)}
    return SampleTable(**{k: v for k, v in fields.items() if k in names})


def _c():
    from lerobotstream.mp4 import index

    return index
