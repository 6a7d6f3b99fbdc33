"""Derived memory-mapped index vs the schema-4 NPZ: size on disk and open time.

Builds a sidecar holding ``--copies`` copies of one MP4's sample table (default: the
21,766-sample AV1 file of the shipped test media), then reports:

- NPZ size vs derived index size (bytes, and bytes per sample);
- loading every array of the NPZ (``np.load`` + decompress, what a reader without the derived
  index does in every process);
- first open (conversion into the derived file, under the lock);
- warm open (map the existing file) and warm open + one source's table + a lookup.

Outputs are verified first: every array of the index equals the NPZ's.

    .venv/bin/python tools/bench_index.py [--mp4 PATH] [--copies 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lerobotstream.mp4 import parse_mp4_bytes  # noqa: E402
from lerobotstream.mp4._index_file import Mp4Index  # noqa: E402
from lerobotstream.sidecar import SidecarWriter, load_tables  # noqa: E402

DEFAULT_MP4 = REPO / "data/testmedia/mp4-androidx-media"


def _find_default() -> Path:
    hits = sorted(DEFAULT_MP4.rglob("long_180p_av1.mp4"))
    if not hits:
        raise SystemExit(f"long_180p_av1.mp4 not found under {DEFAULT_MP4}; pass --mp4")
    return hits[0]


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mp4", type=Path, default=None)
    ap.add_argument("--copies", type=int, default=100, help="sources in the sidecar (copies of the table)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    mp4 = args.mp4 or _find_default()
    table = parse_mp4_bytes(mp4.read_bytes())
    n = table.num_samples
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        npz = d / "sidecar.npz"
        w = SidecarWriter(npz, {"repo_id": "bench/bench", "revision": None, "data_root": None, "subset": False})
        for i in range(args.copies):
            w.add_source(i, table, path=f"videos/cam/chunk-000/file-{i:03d}.mp4", size=mp4.stat().st_size,
                         fingerprint=None)
        w.commit()
        total = n * args.copies

        def load_npz():
            with np.load(npz) as z:
                for k in z.files:
                    z[k]

        t_npz = _best(load_npz, args.repeat)
        t0 = time.perf_counter()
        idx = Mp4Index.open(npz, index_dir=d / "idx")
        t_convert = time.perf_counter() - t0
        # verify before timing anything else
        for sid, (src, arrays) in enumerate(load_tables(npz)):
            if sid % max(1, args.copies // 5):
                continue
            m = idx.table(sid)
            for f in ("offset", "size", "dts_ticks", "cts_ticks", "pts_ticks", "pts_s", "presentation_order", "is_sync"):
                if not np.array_equal(np.asarray(getattr(m, f)), arrays[f]):
                    raise SystemExit(f"MISMATCH in source {sid} field {f}")
        specs = idx._sources[0]["arrays"]
        dtypes = {f: f"{specs[f]['enc']}:{np.dtype(specs[f]['dtype']).name}" for f in sorted(specs)}
        del idx
        t_warm = _best(lambda: Mp4Index.open(npz, index_dir=d / "idx"), args.repeat)

        def warm_lookup():
            ix = Mp4Index.open(npz, index_dir=d / "idx")
            ix.frames_played_at(args.copies // 2, [1.0, 100.0])
            ix.byte_range(args.copies // 2, 100, 200)

        t_lookup = _best(warm_lookup, args.repeat)
        idx_size = (next((d / "idx").glob("*.idx"))).stat().st_size
        npz_size = npz.stat().st_size
        with zipfile.ZipFile(npz) as zf:
            raw = sum(i.file_size for i in zf.infolist())
    print(f"source          {mp4.name}: {n} samples x {args.copies} copies = {total:,} samples")
    print(f"npz             {npz_size:,} B compressed ({npz_size / total:.2f} B/sample), {raw:,} B uncompressed")
    print(f"derived index   {idx_size:,} B ({idx_size / total:.2f} B/sample) = {idx_size / npz_size:.2f}x the npz")
    print(f"encodings       {dtypes}")
    print(f"load npz (all arrays, decompress)  {t_npz * 1e3:9.2f} ms")
    print(f"first open (convert, lock, fsync)  {t_convert * 1e3:9.2f} ms")
    print(f"warm open (mmap + header)          {t_warm * 1e3:9.2f} ms   ({t_npz / t_warm:.0f}x faster than loading the npz)")
    print(f"warm open + one table + 2 lookups  {t_lookup * 1e3:9.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
