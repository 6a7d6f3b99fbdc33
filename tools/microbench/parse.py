"""Parse speed (samples/s) of lerobotstream's C parser vs the pure-Python reference, in one run.

Usage: python -m tools.microbench parse [FILE] [--repeat 20]

Default FILE is data/testmedia/mp4-androidx-media/long_180p_av1.mp4 (21,766 AV1 samples).
Both parsers get the whole file in memory; the tables are checked to agree before timing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

from lerobotstream.mp4.parse import parse_mp4, parse_mp4_bytes
from lerobotstream.testing import parse_reference
from tools.microbench import best_of

DEFAULT = ROOT / "data" / "testmedia" / "mp4-androidx-media" / "long_180p_av1.mp4"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    data = args.file.read_bytes()
    ours, ref = parse_mp4_bytes(data), parse_reference(data)
    for name in ("offset", "size", "pts_ticks", "is_sync", "pts_s"):
        assert np.array_equal(getattr(ours, name), getattr(ref, name)), name
    n = ours.num_samples
    t_ours = best_of(lambda: parse_mp4_bytes(data), args.repeat)
    t_ref = best_of(lambda: parse_reference(data), max(1, args.repeat // 5))
    calls = []

    def read(off, k):
        calls.append(k)
        return data[off : off + k]

    parse_mp4(read, len(data))
    print(f"file: {args.file.name}  samples: {n}  moov: {ours.moov_size} B  file: {len(data)} B")
    print(
        f"ours (C/Cython):    {t_ours * 1e3:8.2f} ms  {n / t_ours:14,.0f} samples/s  "
        f"(reads {len(calls)}, {sum(calls)} B)"
    )
    print(f"reference (Python): {t_ref * 1e3:8.2f} ms  {n / t_ref:14,.0f} samples/s")
    print(f"speed-up: {t_ref / t_ours:.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
