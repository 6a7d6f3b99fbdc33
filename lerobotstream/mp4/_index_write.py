"""Conversion of a schema-4 sidecar NPZ into the derived index file (format 2, ``_index_format``).

Runs once per sidecar generation and node, under the index lock taken by
:meth:`~lerobotstream.mp4._index_file.Mp4Index.open`; only one source's arrays are in memory at a
time.
"""

from __future__ import annotations

import io
import json
import os
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
    encode_int_array,
    minimal_int_dtype,
    presentation_order_of,
    pts_seconds,
)
from lerobotstream.mp4._npz_schema import CANONICAL_FIELDS, SCALAR_KEYS, member_name, read_npz_member

__all__ = ["write_index"]


def write_index(zf: zipfile.ZipFile, manifest: dict[str, Any], generation: str, out: io.BufferedWriter,
                npz_path: str) -> None:
    """Write the derived index (format 2) for an open NPZ into the file object ``out``, source by
    source (only one source's arrays are in memory at a time)."""
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
        entry = {k: src.get(k) for k in ("path", "size", "fingerprint", "stsd_b64", "ftyp_b64", *SCALAR_KEYS)}
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
    rec_offsets = np.empty(len(records) + 1, dtype=U64)
    rec_offsets[0] = pos
    for i, entry in enumerate(records):
        blob = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode("utf-8")
        out.write(blob)
        pos += len(blob)
        rec_offsets[i + 1] = pos
    rec_table = put(rec_offsets)
    path_offsets = np.empty(len(paths) + 1, dtype=U64)
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
    out.write(TRAILER.pack(json_offset, len(blob), INDEX_MAGIC))
