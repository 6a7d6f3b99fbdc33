"""The derived index file (format 3): its layout, array encodings, exact time/order derivations
and the checks of a mapped file's framing.

A sidecar NPZ (schema 5) is converted once into this flat read-only file (``_index_write``) and
mapped by :class:`~lerobotstream.mp4._index_file.Mp4Index`; :func:`index_name` names it by schema,
format and the NPZ's generation, so versions coexist.

File layout (format 3; all integers little-endian)::

    [8  magic b"LRSIDX\x03\x03"] [pad to 64]
    [array blocks, stsd/ftyp blobs (each distinct one once), shared progression blocks;
     each 64-byte aligned]                                (absolute offsets in the records)
    [per-source records: one JSON object per source, in the NPZ's storage order]
    [u64 record_bounds (F, 2): [start, stop) of each source's record, by source id]
    [paths: UTF-8, concatenated] [u64 path_offsets (F+1)]
    [top JSON header, UTF-8]                              (format, generation, manifest, where
                                                           the tables above lie, the offsets of
                                                           the shared blocks; O(1) in F)
    [u64 json_offset] [u64 json_nbytes] [8 magic]         (trailer: the last 24 bytes)

Opening parses only the top header; a source's record (scalars, blob references
``[offset, nbytes]``, array specs) is parsed and validated when that source is used.

Array encodings:

``plain``  the values in the smallest exact integer dtype (uint8, uint16, uint32, int32, int64);
           ``pts_s`` is float64 and ``is_sync`` is a dense uint8 (viewed as bool).
``const``  every value equal: stored once in the record, exposed as a read-only
           ``np.broadcast_to`` view.
``arith``  ``first + i * step``. A source of more than ``SHARED_MIN_SAMPLES`` samples, or any
           progression starting at 0, names a **shared progression block**: one block per
           ``(dtype, first, step)`` holding the longest such progression, of which each source
           maps a prefix. Smaller sources keep ``first``/``step`` and materialise lazily.
``derived`` (``pts_s`` only) computed from ``pts_ticks`` by :func:`pts_seconds`; for a shared
           ``arith`` ``pts_ticks`` it is stored once per ``(first, step, timescales, empty edit)``
           in a shared float64 block.
"""

from __future__ import annotations

import json
import mmap
import struct
from fractions import Fraction
from typing import Any

import numpy as np

from lerobotstream.errors import SidecarSchemaError
from lerobotstream.mp4._npz_schema import SIDECAR_SCHEMA_VERSION

# --- file format ------------------------------------------------------------------------------
INDEX_MAGIC = b"LRSIDX\x03\x03"
INDEX_FORMAT = 3
#: sources with more samples than this map their ``arith``/``derived`` arrays from shared blocks
SHARED_MIN_SAMPLES = 4096
U64 = np.dtype("<u8")
ALIGN = 64
TRAILER = struct.Struct("<QQ8s")
#: candidate unsigned storage dtypes and their largest values, smallest first
_UNSIGNED_MAX = tuple((np.dtype(t), int(np.iinfo(t).max)) for t in (np.uint8, np.uint16, np.uint32))
_ALLOWED_DTYPES = {"|u1", "<u2", "<u4", "<i4", "<i8", "<f8"}
#: the arrays of every source record (``pts_s`` float64, the others integer)
INDEX_FIELDS = (
    "offset",
    "size",
    "dts_ticks",
    "cts_ticks",
    "pts_ticks",
    "is_sync",
    "sync_samples",
    "presentation_order",
    "pts_s",
)


def minimal_int_dtype(lo: int, hi: int) -> np.dtype:
    """Smallest of uint8/uint16/uint32/int32/int64 holding every integer in ``[lo, hi]`` exactly."""
    lo, hi = int(lo), int(hi)
    if lo >= 0:
        for dt, top in _UNSIGNED_MAX:
            if hi <= top:
                return dt
    return np.dtype(np.int32) if -(2**31) <= lo and hi < 2**31 else np.dtype(np.int64)


def encode_int_segments(values: np.ndarray, counts: np.ndarray) -> list[tuple[dict[str, Any], np.ndarray | None]]:
    """The encoding of each consecutive segment of ``values`` (1-D, int64-fitting, ``sum(counts)``
    long; segments: the sources of one NPZ block), reduced once for the whole block.

    Returns:
        per segment ``(spec, block)``: ``spec`` the JSON description (``enc``, ``count``, ``dtype``,
        and ``value`` or ``first``+``step`` when not plain); ``block`` the values to store (minimal
        dtype) or None for ``const``/``arith``.
    """
    a = np.ascontiguousarray(values, dtype=np.int64).reshape(-1)
    counts = np.asarray(counts, dtype=np.int64)
    if int(counts.sum()) != a.shape[0]:
        raise ValueError(f"segments of {int(counts.sum())} values over an array of {a.shape[0]}")
    starts = np.cumsum(counts) - counts
    out: list[tuple[dict[str, Any], np.ndarray | None]] = [
        ({"enc": "const", "count": 0, "dtype": "|u1", "value": 0}, None)
    ] * len(counts)
    nz = np.flatnonzero(counts > 0)
    if nz.shape[0] == 0:
        return list(out)
    idx, n_nz = starts[nz], counts[nz]
    lo = np.minimum.reduceat(a, idx)
    hi = np.maximum.reduceat(a, idx)
    first = a[idx]
    second = a[np.minimum(idx + 1, a.shape[0] - 1)]
    step = np.where(n_nz >= 2, second - first, 0)
    if a.shape[0] >= 2:
        eq = np.diff(a) == np.repeat(step, n_nz)[:-1]
        eq[(idx + n_nz - 1)[:-1]] = True  # the step across a segment boundary belongs to no segment
        ok = np.logical_and.reduceat(np.append(eq, True), idx)
    else:
        ok = np.ones(1, dtype=bool)
    out = list(out)
    for i, n, low, high, f, st, good in zip(
        nz.tolist(), n_nz.tolist(), lo.tolist(), hi.tolist(), first.tolist(), step.tolist(), ok.tolist()
    ):
        dt = minimal_int_dtype(low, high)
        if low == high:
            out[i] = ({"enc": "const", "count": n, "dtype": dt.str, "value": low}, None)
        elif n >= 2 and st != 0 and good:
            out[i] = ({"enc": "arith", "count": n, "dtype": dt.str, "first": f, "step": st}, None)
        else:
            s0 = int(starts[i])
            out[i] = ({"enc": "plain", "count": n, "dtype": dt.str}, a[s0 : s0 + n].astype(dt))
    return out


def pts_seconds(
    pts_ticks: np.ndarray, media_timescale: int, movie_timescale: int, empty_edit_movie_ticks: int
) -> np.ndarray:
    """Exact presentation times in seconds: ``pts_ticks / media_ts + empty_edit / movie_ts``, a
    float64 array shaped like ``pts_ticks``; each value is the float64 nearest the rational time
    (integer sum divided once; Python fractions where int64 would overflow).
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


def index_name(generation: str) -> str:
    """File name of the derived index of a generation (format-specific, so versions coexist)."""
    return f"mp4-s{SIDECAR_SCHEMA_VERSION}-f{INDEX_FORMAT}-{generation[:32]}.idx"


def parse_header(buf: mmap.mmap | bytes, path: str) -> dict[str, Any]:
    """Validate the derived file's framing and return its top JSON header (O(1) in sources).

    Raises:
        SidecarSchemaError: bad magic, trailer, JSON, format, or source tables outside the file.
    """
    total = len(buf)
    if total < len(INDEX_MAGIC) + TRAILER.size or bytes(buf[: len(INDEX_MAGIC)]) != INDEX_MAGIC:
        raise SidecarSchemaError(f"{path}: not a lerobotstream derived index (bad magic)", path=path)
    json_offset, json_nbytes, magic = TRAILER.unpack(bytes(buf[total - TRAILER.size :]))
    if magic != INDEX_MAGIC or json_nbytes == 0 or json_offset + json_nbytes != total - TRAILER.size:
        raise SidecarSchemaError(f"{path}: derived index trailer is damaged", path=path)
    try:
        header = json.loads(bytes(buf[json_offset : json_offset + json_nbytes]).decode("utf-8"))
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
    for off, nbytes in ((tables[0], 16 * nsrc), (tables[1], 8 * (nsrc + 1))):
        if off % 8 or off < data_end or off + nbytes > json_offset:
            raise SidecarSchemaError(f"{path}: derived index source table lies outside the file", path=path)
    shared = header.get("shared")
    if not isinstance(shared, list) or not all(
        isinstance(o, int) and len(INDEX_MAGIC) <= o <= data_end for o in shared
    ):
        raise SidecarSchemaError(f"{path}: derived index shared block table is damaged", path=path)
    header["_json_offset"] = json_offset
    return header


def check_record(src: dict[str, Any], data_end: int, path: str, shared: list[int] | None = None) -> None:
    """Validate one source record's array specs and blob references against the data region, and
    resolve each ``shared`` block reference into its ``offset`` (``shared``: the header's list).
    Raises SidecarSchemaError: a missing array, a bad dtype or length, or a block outside the data.
    """
    n = int(src["num_samples"])
    for key in ("stsd", "ftyp"):
        ref = src.get(key)
        if ref is not None:
            off, nbytes = int(ref[0]), int(ref[1])
            if off < len(INDEX_MAGIC) or nbytes < 0 or off + nbytes > data_end:
                raise SidecarSchemaError(f"{path}: {key} of {src.get('path')} lies outside the data", path=path)
    for name in INDEX_FIELDS:
        spec = src["arrays"].get(name)
        if spec is None or spec.get("dtype") not in _ALLOWED_DTYPES:
            raise SidecarSchemaError(f"{path}: array {name} of {src.get('path')} missing or bad dtype", path=path)
        if name != "sync_samples" and int(spec["count"]) != n:
            raise SidecarSchemaError(f"{path}: array {name} of {src.get('path')} has a wrong length", path=path)
        if spec["enc"] not in ("plain", "const", "arith", "derived"):
            raise SidecarSchemaError(f"{path}: unknown encoding {spec['enc']!r}", path=path)
        if "shared" in spec:
            k = int(spec.pop("shared"))
            if shared is None or not 0 <= k < len(shared):
                raise SidecarSchemaError(f"{path}: array {name} of {src.get('path')} names no shared block", path=path)
            spec["offset"] = shared[k]
        if "offset" in spec:
            off, itemsize = int(spec["offset"]), np.dtype(spec["dtype"]).itemsize
            if off % itemsize or off < len(INDEX_MAGIC) or off + itemsize * int(spec["count"]) > data_end:
                raise SidecarSchemaError(f"{path}: array {name} of {src.get('path')} lies outside the data", path=path)
        elif spec["enc"] == "plain" or name in ("is_sync", "sync_samples"):
            # is_sync is always stored (one byte per sample): the sample count is bounded by the file
            raise SidecarSchemaError(f"{path}: array {name} of {src.get('path')} has no offset", path=path)


def table_problem(arrays: dict[str, np.ndarray]) -> str | None:
    """None when one source's arrays can be indexed safely, else what is wrong with them.

    The Cython lookups (``mp4.index``, ``mp4.spans``) index with ``presentation_order`` values
    without bounds checks, so once per table build: every array has the sample count and every
    ``presentation_order`` and ``sync_samples`` value lies in ``[0, n)`` (the other arrays' pages
    are not read). Byte ranges are checked at conversion (:func:`samples_problem`), the values
    against the MP4's own ``moov`` before its first frame is served (``sidecar._verify``).

    ``arrays``: ``offset``, ``size``, ``pts_ticks``, ``pts_s``, ``is_sync``, ``presentation_order``
    (each ``(n,)``, decode order) and ``sync_samples`` (``(num_sync,)``) of one source.
    """
    po = arrays["presentation_order"]
    n = int(po.shape[0])
    for name in ("offset", "size", "pts_ticks", "pts_s", "is_sync"):
        if arrays[name].shape != (n,):
            return f"{name} has {arrays[name].shape[0]} values, presentation_order {n}"
    if n and (int(po.min()) < 0 or int(po.max()) >= n):
        return f"presentation_order holds values outside [0, {n})"
    ss = arrays["sync_samples"]
    if ss.shape[0] and (int(ss.min()) < 0 or int(ss.max()) >= n):
        return f"sync_samples hold values outside [0, {n})"
    return None


def samples_problem(offset: np.ndarray, size: np.ndarray, file_size: Any) -> str | None:
    """None when one source's sample byte ranges are plausible, else why not: offsets and sizes
    non-negative, below 2**62, and every sample ending inside the file (``file_size`` bytes, when
    it is an int). Checked once, when a sidecar is converted into its derived index.
    """
    if offset.shape[0] == 0:
        return None
    lo_off, lo_size = int(offset.min()), int(size.min())
    if lo_off < 0 or lo_size < 0:
        return f"a negative sample offset or size (offset {lo_off}, size {lo_size})"
    if int(offset.max()) >= 2**62 or int(size.max()) >= 2**62:
        return "a sample offset or size of 2**62 bytes or more"
    end = int((offset.astype(np.int64) + size.astype(np.int64)).max())
    if isinstance(file_size, int) and not isinstance(file_size, bool) and end > file_size:
        return f"a sample ends at byte {end}, past the end of the {file_size}-byte file"
    return None


def record_matrix(value: Any, name: str, source: Any, where: str) -> tuple[int, ...]:
    """A record's 3x3 display matrix as 9 signed int32 (SidecarSchemaError when absent or malformed)."""
    ok = (
        isinstance(value, (list, tuple))
        and len(value) == 9
        and all(isinstance(v, int) and not isinstance(v, bool) and -(2**31) <= v < 2**31 for v in value)
    )
    if not ok:
        raise SidecarSchemaError(
            f"{where}: source {source!r} has no valid {name} (9 int32); rebuild the sidecar", path=where
        )
    return tuple(int(v) for v in value)
