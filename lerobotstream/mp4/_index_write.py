"""Conversion of a sidecar NPZ (schema 5, or schema 4) into the derived index file (format 3,
``_index_format``).

Runs once per sidecar generation and node, under the index lock taken by
:meth:`~lerobotstream.mp4._index_file.Mp4Index.open`. Memory stays bounded in the number of
sources: one NPZ block of arrays at a time, each source's record serialised as soon as it is
encoded and spooled to a temporary file (shared blocks are named by number, so no record is
revisited), distinct stsd/ftyp blobs written once.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import tempfile
import zipfile
from typing import Any

import numpy as np

from lerobotstream.errors import SidecarSchemaError
from lerobotstream.mp4._index_format import (
    ALIGN,
    INDEX_FORMAT,
    INDEX_MAGIC,
    SHARED_MIN_SAMPLES,
    TRAILER,
    U64,
    encode_int_segments,
    minimal_int_dtype,
    pts_seconds,
    samples_problem,
)
from lerobotstream.mp4._npz_schema import BYTES_KEYS, SCALAR_KEYS, iter_source_blocks, read_source_table

__all__ = ["write_index"]

_RECORD_KEYS = ("size", "fingerprint", *SCALAR_KEYS)


def write_index(
    zf: zipfile.ZipFile, manifest: dict[str, Any], generation: str, out: io.BufferedWriter, npz_path: str
) -> None:
    """Write the derived index (format 3) for an open NPZ into the file object ``out``.

    Raises:
        SidecarSchemaError: a source's arrays are missing or of the wrong length (names it).
        zlib.error, zipfile.BadZipFile, EOFError, ValueError, KeyError: a damaged archive.
    """
    table = read_source_table(zf, manifest, npz_path)
    nsrc = len(table)
    out.write(INDEX_MAGIC)
    pos = len(INDEX_MAGIC)

    def pad_to_align() -> None:
        nonlocal pos
        pad = (-pos) % ALIGN
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

    # shared blocks: key -> (id, longest count); records name them by id, offsets go in the header
    shared_ids: dict[tuple, int] = {}
    shared_len: list[int] = []
    shared_keys: list[tuple] = []

    def share(key: tuple, spec: dict[str, Any]) -> None:
        k = shared_ids.get(key)
        if k is None:
            k = shared_ids[key] = len(shared_len)
            shared_len.append(0)
            shared_keys.append(key)
        shared_len[k] = max(shared_len[k], int(spec["count"]))
        spec["shared"] = k

    blobs: dict[str, list[int]] = {}  # base64 text -> [offset, nbytes] of its bytes in the data region

    def blob(b64: str | None) -> list[int] | None:
        if not b64:
            return None
        ref = blobs.get(b64)
        if ref is None:
            raw = base64.b64decode(b64)
            ref = blobs[b64] = [put(raw), len(raw)]
        return ref

    bounds = np.zeros((nsrc, 2), dtype=U64)  # record [start, stop) relative to the spool, then absolute
    spool_dir = os.path.dirname(getattr(out, "name", "") or "") or None
    with tempfile.TemporaryFile(dir=spool_dir) as spool:
        spooled = 0
        for sids, counts, barr in iter_source_blocks(zf, manifest, table, npz_path):
            entries = [table[sid] for sid in sids]
            media_time = np.array([int(e.get("media_time", 0) or 0) for e in entries], dtype=np.int64)
            dts_b = barr["dts_ticks"].astype(np.int64)
            cts_b = barr["cts_ticks"].astype(np.int64)
            pts_b = dts_b + cts_b - np.repeat(media_time, counts)
            seg = np.repeat(np.arange(len(sids), dtype=np.int64), counts)
            starts = np.cumsum(counts) - counts
            # presentation order of every source at once: stable by (source, pts), made local
            order_b = np.lexsort((pts_b, seg)) - np.repeat(starts, counts)
            enc = {
                f: encode_int_segments(v, counts)
                for f, v in (
                    ("offset", barr["offset"]),
                    ("size", barr["size"]),
                    ("dts_ticks", dts_b),
                    ("cts_ticks", cts_b),
                    ("pts_ticks", pts_b),
                    ("presentation_order", order_b),
                )
            }
            sync_b = barr["is_sync"].astype(bool)
            for i, (sid, src) in enumerate(zip(sids, entries)):
                n, s0 = int(counts[i]), int(starts[i])
                reason = samples_problem(barr["offset"][s0 : s0 + n], barr["size"][s0 : s0 + n], src.get("size"))
                if reason is not None:
                    raise SidecarSchemaError(f"{npz_path}: source {src.get('path')!r}: {reason}", path=npz_path)
                shared = n > SHARED_MIN_SAMPLES
                specs: dict[str, Any] = {}
                for f, per_source in enc.items():
                    spec, block = per_source[i]
                    spec = dict(spec)
                    if block is not None:
                        spec["offset"] = put(block)
                    elif spec["enc"] == "arith" and (shared or spec["first"] == 0):
                        # progressions from 0 (DTS, PTS, identity order) are shared at any length:
                        # a few keys per dataset, and no per-process copy for the many small sources
                        share(("int", spec["dtype"], spec["first"], spec["step"]), spec)
                    specs[f] = spec
                is_sync = sync_b[s0 : s0 + n]
                # sync samples stay dense: a bool per sample plus the sorted list of sync indices
                specs["is_sync"] = {"enc": "plain", "count": n, "dtype": "|u1", "offset": put(is_sync.view(np.uint8))}
                sync_idx = np.flatnonzero(is_sync)
                sdt = minimal_int_dtype(0, max(n - 1, 0))
                specs["sync_samples"] = {
                    "enc": "plain",
                    "count": int(sync_idx.shape[0]),
                    "dtype": sdt.str,
                    "offset": put(sync_idx.astype(sdt)),
                }
                pspec = specs["pts_ticks"]
                timing = (
                    int(src["media_timescale"]),
                    int(src.get("movie_timescale") or 1),
                    int(src.get("empty_edit_movie_ticks") or 0),
                )
                if pspec["enc"] == "plain":
                    pts_s = pts_seconds(pts_b[s0 : s0 + n], *timing)
                    specs["pts_s"] = {"enc": "plain", "count": n, "dtype": "<f8", "offset": put(pts_s)}
                elif pspec["enc"] == "arith" and "shared" in pspec:
                    specs["pts_s"] = {"enc": "derived", "count": n, "dtype": "<f8"}
                    share(("pts_s", pspec["first"], pspec["step"], *timing), specs["pts_s"])
                else:
                    specs["pts_s"] = {"enc": "derived", "count": n, "dtype": "<f8"}
                entry = {k: src.get(k) for k in _RECORD_KEYS}
                for k in BYTES_KEYS:
                    entry[k] = blob(src.get(k + "_b64"))
                entry["num_samples"] = n
                entry["arrays"] = specs
                rec = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode("utf-8")
                spool.write(rec)
                bounds[sid] = (spooled, spooled + len(rec))
                spooled += len(rec)
        # shared progression blocks: the longest progression of each key, once
        shared_off = []
        for key, count in zip(shared_keys, shared_len):
            if key[0] == "int":
                _, dt, first, step = key
                block = (np.arange(count, dtype=np.int64) * int(step) + int(first)).astype(np.dtype(dt))
            else:
                _, first, step, media_ts, movie_ts, empty = key
                block = pts_seconds(
                    np.arange(count, dtype=np.int64) * int(step) + int(first), media_ts, movie_ts, empty
                )
            shared_off.append(put(block))
        data_end = pos
        spool.seek(0)
        shutil.copyfileobj(spool, out, 1 << 20)
    bounds += np.uint64(pos)
    pos += spooled
    rec_table = put(bounds)
    paths, path_offsets = _path_table(table)
    path_offsets += np.uint64(pos)
    out.write(paths)
    pos += len(paths)
    path_table = put(path_offsets)
    pad_to_align()
    sorted_paths = _paths_sorted(table)
    header = {
        "format": INDEX_FORMAT,
        "generation": generation,
        "npz": os.path.basename(npz_path),
        "manifest": {k: v for k, v in manifest.items() if k != "sources"},
        "num_sources": nsrc,
        "data_end": data_end,
        "records": rec_table,
        "paths": path_table,
        "paths_sorted": sorted_paths,
        "shared": shared_off,
    }
    blob_ = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    json_offset = pos
    out.write(blob_)
    out.write(TRAILER.pack(json_offset, len(blob_), INDEX_MAGIC))


def _path_table(table: Any) -> tuple[bytes, np.ndarray]:
    """(UTF-8 paths concatenated, u64 (F+1) offsets relative to their start)."""
    n = len(table)
    col = getattr(table, "_columns", {}).get("path")
    if col is not None and col[0] == "str":
        arr = col[1]
        items = arr.tolist()  # bytes, trailing NULs stripped
    else:
        items = [str(table.get(i, "path")).encode("utf-8") for i in range(n)]
    offsets = np.zeros(n + 1, dtype=U64)
    offsets[1:] = np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=n))
    return b"".join(items), offsets


def _paths_sorted(table: Any) -> bool:
    col = getattr(table, "_columns", {}).get("path")
    if col is not None and col[0] == "str":
        return table._sorted_paths()
    paths = [str(table.get(i, "path")) for i in range(len(table))]
    return all(paths[i] < paths[i + 1] for i in range(len(paths) - 1))
