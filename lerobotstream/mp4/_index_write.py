"""Conversion of a sidecar NPZ (schema 5) into the derived index file (format 3, ``_index_format``).

Runs once per sidecar generation and node, under the lock taken by ``Mp4Index.open``. Memory stays
bounded in the number of sources: one NPZ block of arrays at a time, each source's record spooled
to a temporary file as soon as it is encoded, distinct stsd/ftyp blobs written once.
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

    Layout: magic, the data region (aligned array blocks, stsd/ftyp blobs, shared progressions),
    the source records (JSON, spooled while the blocks are written), the record bounds, the path
    table, then the JSON header and the trailer.

    Raises:
        SidecarSchemaError: a source's arrays are missing or of the wrong length (names it).
        zlib.error, zipfile.BadZipFile, EOFError, ValueError, KeyError: a damaged archive.
    """
    table = read_source_table(zf, manifest, npz_path)
    w = _DataRegion(out)
    bounds = np.zeros((len(table), 2), dtype=U64)  # record [start, stop) relative to the spool, then absolute
    spool_dir = os.path.dirname(getattr(out, "name", "") or "") or None
    with tempfile.TemporaryFile(dir=spool_dir) as spool:
        spooled = 0
        for sids, counts, barr in iter_source_blocks(zf, manifest, table, npz_path):
            for sid, rec in _block_records(w, [table[sid] for sid in sids], sids, counts, barr, npz_path):
                spool.write(rec)
                bounds[sid] = (spooled, spooled + len(rec))
                spooled += len(rec)
        shared_off = w.write_shared()
        data_end = w.pos
        spool.seek(0)
        shutil.copyfileobj(spool, out, 1 << 20)
    bounds += np.uint64(w.pos)
    w.pos += spooled
    rec_table = w.put(bounds)
    n = len(table)
    col = table._columns.get("path")
    if col is not None and col[0] == "str":
        items, paths_sorted = col[1].tolist(), table._sorted_paths()  # bytes, trailing NULs stripped
    else:
        paths = [str(table.get(i, "path")) for i in range(n)]
        items = [p.encode("utf-8") for p in paths]
        paths_sorted = all(paths[i] < paths[i + 1] for i in range(n - 1))
    path_offsets = np.zeros(n + 1, dtype=U64)  # UTF-8 paths concatenated, (F+1) offsets
    path_offsets[1:] = np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=n)) + w.pos
    path_offsets[0] = w.pos
    out.write(b"".join(items))
    w.pos += int(path_offsets[-1] - path_offsets[0])
    path_table = w.put(path_offsets)
    w.pad_to_align()
    header = {
        "format": INDEX_FORMAT,
        "generation": generation,
        "npz": os.path.basename(npz_path),
        "manifest": {k: v for k, v in manifest.items() if k != "sources"},
        "num_sources": len(table),
        "data_end": data_end,
        "records": rec_table,
        "paths": path_table,
        "paths_sorted": paths_sorted,
        "shared": shared_off,
    }
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    out.write(text)
    out.write(TRAILER.pack(w.pos, len(text), INDEX_MAGIC))


class _DataRegion:
    """The index file's data region as it is written: aligned blocks (``put`` returns the byte
    offset), distinct stsd/ftyp blobs once (``blob``), and the shared progression blocks that
    records name by id (``share``; written last by ``write_shared``, each at its longest count)."""

    def __init__(self, out: io.BufferedWriter) -> None:
        self.out = out
        out.write(INDEX_MAGIC)
        self.pos = len(INDEX_MAGIC)
        self.shared_ids: dict[tuple, int] = {}
        self.shared_len: list[int] = []
        self.shared_keys: list[tuple] = []
        self.blobs: dict[str, list[int]] = {}  # base64 text -> [offset, nbytes] of its bytes

    def pad_to_align(self) -> None:
        pad = (-self.pos) % ALIGN
        if pad:
            self.out.write(b"\0" * pad)
            self.pos += pad

    def put(self, block: np.ndarray | bytes) -> int:
        self.pad_to_align()
        start = self.pos
        data = block if isinstance(block, bytes) else np.ascontiguousarray(block).tobytes()
        self.out.write(data)
        self.pos += len(data)
        return start

    def share(self, key: tuple, spec: dict[str, Any]) -> None:
        k = self.shared_ids.get(key)
        if k is None:
            k = self.shared_ids[key] = len(self.shared_len)
            self.shared_len.append(0)
            self.shared_keys.append(key)
        self.shared_len[k] = max(self.shared_len[k], int(spec["count"]))
        spec["shared"] = k

    def blob(self, b64: str | None) -> list[int] | None:
        if not b64:
            return None
        ref = self.blobs.get(b64)
        if ref is None:
            raw = base64.b64decode(b64)
            ref = self.blobs[b64] = [self.put(raw), len(raw)]
        return ref

    def write_shared(self) -> list[int]:
        """Write each shared progression block once (the longest of its key); their offsets."""
        offsets = []
        for key, count in zip(self.shared_keys, self.shared_len):
            ramp = np.arange(count, dtype=np.int64)
            if key[0] == "int":
                _, dt, first, step = key
                block = (ramp * int(step) + int(first)).astype(np.dtype(dt))
            else:
                _, first, step, media_ts, movie_ts, empty = key
                block = pts_seconds(ramp * int(step) + int(first), media_ts, movie_ts, empty)
            offsets.append(self.put(block))
        return offsets


def _block_records(
    w: _DataRegion, entries: list[dict], sids: Any, counts: np.ndarray, barr: dict[str, np.ndarray], npz_path: str
) -> Any:
    """Encode one NPZ block of sources (arrays concatenated, ``counts`` samples each) into ``w``;
    yields ``(source id, record JSON bytes)`` per source.

    Raises:
        SidecarSchemaError: a source's sample offsets/sizes do not fit its file (names it).
    """
    media_time = np.array([int(e.get("media_time", 0) or 0) for e in entries], dtype=np.int64)
    dts_b = barr["dts_ticks"].astype(np.int64)
    cts_b = barr["cts_ticks"].astype(np.int64)
    pts_b = dts_b + cts_b - np.repeat(media_time, counts)
    seg = np.repeat(np.arange(len(sids), dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    # presentation order of every source at once: stable by (source, pts), made local
    order_b = np.lexsort((pts_b, seg)) - np.repeat(starts, counts)
    columns = (
        ("offset", barr["offset"]),
        ("size", barr["size"]),
        ("dts_ticks", dts_b),
        ("cts_ticks", cts_b),
        ("pts_ticks", pts_b),
        ("presentation_order", order_b),
    )
    enc = {f: encode_int_segments(v, counts) for f, v in columns}
    sync_b = barr["is_sync"].astype(bool)
    for i, (sid, src) in enumerate(zip(sids, entries)):
        n, s0 = int(counts[i]), int(starts[i])
        reason = samples_problem(barr["offset"][s0 : s0 + n], barr["size"][s0 : s0 + n], src.get("size"))
        if reason is not None:
            raise SidecarSchemaError(f"{npz_path}: source {src.get('path')!r}: {reason}", path=npz_path)
        specs: dict[str, Any] = {}
        for f, per_source in enc.items():
            spec, block = per_source[i]
            spec = dict(spec)
            if block is not None:
                spec["offset"] = w.put(block)
            elif spec["enc"] == "arith" and (n > SHARED_MIN_SAMPLES or spec["first"] == 0):
                # progressions from 0 are shared at any length: few keys, no per-process copy
                w.share(("int", spec["dtype"], spec["first"], spec["step"]), spec)
            specs[f] = spec
        # sync samples stay dense: a bool per sample plus the sorted sync indices
        is_sync = sync_b[s0 : s0 + n]
        sync_idx = np.flatnonzero(is_sync)
        sdt = minimal_int_dtype(0, max(n - 1, 0))
        specs["is_sync"] = {"enc": "plain", "count": n, "dtype": "|u1", "offset": w.put(is_sync.view(np.uint8))}
        specs["sync_samples"] = {
            "enc": "plain",
            "count": int(sync_idx.shape[0]),
            "dtype": sdt.str,
            "offset": w.put(sync_idx.astype(sdt)),
        }
        # seconds: stored when the ticks are, shared with shared ticks, else derived on open
        pspec = specs["pts_ticks"]
        timing = (
            int(src["media_timescale"]),
            int(src.get("movie_timescale") or 1),
            int(src.get("empty_edit_movie_ticks") or 0),
        )
        if pspec["enc"] == "plain":
            pts_s = pts_seconds(pts_b[s0 : s0 + n], *timing)
            specs["pts_s"] = {"enc": "plain", "count": n, "dtype": "<f8", "offset": w.put(pts_s)}
        else:
            specs["pts_s"] = {"enc": "derived", "count": n, "dtype": "<f8"}
            if pspec["enc"] == "arith" and "shared" in pspec:
                w.share(("pts_s", pspec["first"], pspec["step"], *timing), specs["pts_s"])
        entry = {k: src.get(k) for k in _RECORD_KEYS}
        for k in BYTES_KEYS:
            entry[k] = w.blob(src.get(k + "_b64"))
        entry["num_samples"] = n
        entry["arrays"] = specs
        yield sid, json.dumps(entry, sort_keys=True, separators=(",", ":")).encode("utf-8")
