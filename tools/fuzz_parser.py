"""Long fuzz run of the MP4 sample-table parser: mutated/truncated headers must give typed errors.

Usage: python -m tools.fuzz_parser [--seconds 60] [--seed 0] [--out outputs/fuzz] [FILE ...]

Mutates the moov box of each input (bit flips, random bytes, interesting u32 values, box-size
edits, truncation) and parses with ``parse_mp4_bytes``. Anything other than a SampleTable or an
``Mp4Error`` (an unexpected exception, a table with bytes outside the file, a non-permutation
presentation order) is saved under ``--out`` and counted. A crash of the process is a bug too:
the last input is written to ``--out/last.mp4`` before each parse.
"""

from __future__ import annotations

import argparse
import struct
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from lerobotstream.errors import Mp4Error
from lerobotstream.mp4.parse import parse_mp4_bytes

DEFAULT_FILES = [
    "mp4-go-mp4/sample.mp4",
    "mp4-torchcodec/discard_first_keyframe.mp4",
    "mp4-androidx-media/sample_2_byte_NAL_length.mp4",
    "mp4-mp4parse-rust/white.mp4",
    "mp4-androidx-media/sample.mp4",
]
INTERESTING = [0, 1, 2, 7, 8, 15, 16, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE]


def _moov_range(data: bytes) -> tuple[int, int]:
    pos = 0
    while pos + 8 <= len(data):
        size, typ = struct.unpack_from(">I4s", data, pos)
        if size == 1:
            size = struct.unpack_from(">Q", data, pos + 8)[0]
        elif size == 0:
            size = len(data) - pos
        if typ == b"moov":
            return pos, size
        pos += max(size, 8)
    raise SystemExit("no moov")


def _box_size_fields(data: bytes, start: int, end: int) -> list[int]:
    """Offsets of every box size field inside [start, end) (a naive scan for plausible headers)."""
    out = []
    for pos in range(start, end - 8):
        typ = data[pos + 4 : pos + 8]
        if all(97 <= c <= 122 or 48 <= c <= 57 for c in typ):
            size = struct.unpack_from(">I", data, pos)[0]
            if 8 <= size <= end - pos:
                out.append(pos)
    return out


def mutate(rng: np.random.Generator, data: bytes, moov: tuple[int, int], sizes: list[int]) -> bytes:
    buf = bytearray(data)
    mpos, msize = moov
    for _ in range(int(rng.integers(1, 6))):
        kind = rng.integers(0, 5)
        at = int(rng.integers(mpos, mpos + msize - 4))
        if kind == 0:
            buf[at] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1:
            buf[at] = int(rng.integers(0, 256))
        elif kind == 2:
            struct.pack_into(">I", buf, at, INTERESTING[int(rng.integers(0, len(INTERESTING)))])
        elif kind == 3 and sizes:
            f = sizes[int(rng.integers(0, len(sizes)))]
            old = struct.unpack_from(">I", buf, f)[0]
            struct.pack_into(">I", buf, f, max(0, min(0xFFFFFFFF, old + int(rng.integers(-16, 17)))))
        else:
            struct.pack_into(">I", buf, at, int(rng.integers(0, 2**32)))
    if rng.random() < 0.2:
        buf = buf[: int(rng.integers(0, len(buf) + 1))]
    return bytes(buf)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "fuzz")
    args = ap.parse_args(argv)
    testdata = ROOT / "data" / "testmedia"
    files = [Path(f) for f in args.files] or [testdata / f for f in DEFAULT_FILES]
    corpus = []
    for f in files:
        data = f.read_bytes()
        moov = _moov_range(data)
        corpus.append((f.name, data, moov, _box_size_fields(data, moov[0], moov[0] + moov[1])))
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    n = ok = typed = bad = 0
    t_end = time.monotonic() + args.seconds
    slowest = 0.0
    while time.monotonic() < t_end:
        name, data, moov, sizes = corpus[int(rng.integers(0, len(corpus)))]
        case = mutate(rng, data, moov, sizes)
        (args.out / "last.mp4").write_bytes(case)
        t0 = time.perf_counter()
        try:
            t = parse_mp4_bytes(case, path=name)
            if np.any(t.offset + t.size > len(case)) or not np.array_equal(
                np.sort(t.presentation_order), np.arange(t.num_samples)
            ):
                raise AssertionError("table invariant broken")
            ok += 1
        except Mp4Error:
            typed += 1
        except Exception as e:  # noqa: BLE001 - this is what we hunt
            bad += 1
            p = args.out / f"bad-{n:07d}-{name}"
            p.write_bytes(case)
            print(f"UNTYPED {type(e).__name__}: {e} -> {p}", flush=True)
        slowest = max(slowest, time.perf_counter() - t0)
        n += 1
    print(
        f"{n} inputs in {args.seconds:.0f} s: {ok} parsed, {typed} typed Mp4Error, {bad} untyped; "
        f"slowest parse {slowest * 1e3:.2f} ms"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
