"""Memory soak: RSS per epoch over a bounded number of epochs, with a pass/fail slope.

A bounded experiment, not a timed test: a small dataset (by default generated, 640x480 AV1, so
decoded frames are as large as a real camera's), ``--epochs`` epochs through a DataLoader —
in-process (``--workers 0``, the default) or through persistent workers (``--workers N``, measured
in the first worker). After each epoch the process iterating the dataset records its RSS and PSS,
the highest RSS sampled during the epoch, glibc's ``mallinfo2`` (bytes malloc holds **in use** vs
**free but kept** in its arenas), the pyarrow pool, Python objects by type, threads, memory
mappings, lerobotstream's heap trims and, with ``--tracemalloc``, the Python-traced bytes. Nothing
here trims the heap itself, so the readings are what training sees.

The verdict is a robust line (Theil-Sen) through the epochs after ``--warmup``: PASS when both the
end-of-epoch RSS and the in-epoch peak RSS grow by at most ``--max-slope-mib`` MiB per epoch
(exit 0), else FAIL (exit 1). A leak grows *in use*; allocator retention grows *free but kept* and
RSS only.

``--variant NAME:ENV=VALUE,...[:FLAGS]`` (repeatable) runs the same soak once per variant, one
after the other in child processes with those environment variables (and extra flags of this
tool), on the same dataset, and prints them side by side (exit 1 when any variant fails)::

    python -m tools.rss_epochs --epochs 40                                   # in-process, 640x480
    python -m tools.rss_epochs --epochs 40 --workers 1                       # one persistent worker
    python -m tools.rss_epochs --epochs 40 --variant before:LEROBOTSTREAM_MALLOC_TRIM=0 \\
        --variant after: --variant arena1:LEROBOTSTREAM_MALLOC_TRIM=0,MALLOC_ARENA_MAX=1 \\
        --variant gops0:LEROBOTSTREAM_MALLOC_TRIM=0:"--decoded-cache-gb 0"
    python -m tools.rss_epochs --root data/g1_v30 --epochs 20 --video-decoder-cache-size 2

Linux/glibc only (``/proc``, ``mallinfo2``).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from torch.utils.data import IterableDataset

ROOT = Path(__file__).resolve().parents[1]

FIELDS = (
    "rss_kb",
    "rss_peak_kb",
    "pss_kb",
    "malloc_in_use_kb",
    "malloc_free_kept_kb",
    "arrow_kb",
    "python_objects",
    "threads",
    "maps",
    "heap_trims",
    "traced_kb",
)
#: items between two RSS samples inside an epoch (the in-epoch peak)
SAMPLE_EVERY = 8


def _libc():
    from lerobotstream._heap import _MallInfo2  # imported late: HF_LEROBOT_HOME is set first (main)

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    return libc


def rss_kb() -> int:
    """This process's resident set (KiB, ``VmRSS``)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def pss_kb() -> int | None:
    """This process's proportional set (KiB, ``smaps_rollup``; None where the kernel lacks it)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return None


def measure() -> dict:
    """One reading of this process (see the module docstring); never trims the heap."""
    import tracemalloc

    import pyarrow as pa

    from lerobotstream import _heap

    gc.collect()
    m = _libc().mallinfo2()
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    objs = gc.get_objects()
    return {
        "rss_kb": rss_kb(),
        "pss_kb": pss_kb(),
        "malloc_in_use_kb": (m.uordblks + m.hblkhd) // 1024,
        "malloc_free_kept_kb": m.fordblks // 1024,
        "arrow_kb": pa.total_allocated_bytes() // 1024,
        "python_objects": len(objs),
        "threads": len(os.listdir("/proc/self/task")),
        "maps": maps,
        "heap_trims": _heap.stats()["trims"],
        "heap_trim_s": round(_heap.stats()["trim_s"], 4),
        "traced_kb": tracemalloc.get_traced_memory()[0] // 1024 if tracemalloc.is_tracing() else None,
        "types": dict(Counter(type(o).__name__ for o in objs)),
    }


class Probe(IterableDataset):
    """Iterates the dataset (sampling RSS every few items); after each epoch appends one JSON line
    of :func:`measure` to ``out``. Module-level, so spawned DataLoader workers can unpickle it."""

    def __init__(self, ds, out: str, tracemalloc_on: bool) -> None:
        self.ds, self.out, self.tracemalloc_on, self.epoch = ds, out, tracemalloc_on, 0

    def __iter__(self):
        if self.epoch == 0 and self.tracemalloc_on:
            import tracemalloc

            tracemalloc.start(1)
        t0, c0 = time.perf_counter(), time.process_time()
        peak = rss_kb()
        for i, item in enumerate(self.ds):
            if i % SAMPLE_EVERY == 0:
                peak = max(peak, rss_kb())
            yield item
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        rec = {"epoch": self.epoch, "pid": os.getpid(), **measure(), "epoch_s": round(dt, 3), "cpu_s": round(cpu, 3)}
        rec["rss_peak_kb"] = max(peak, rec["rss_kb"])
        with open(self.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        self.epoch += 1


def slope(xs: list[float], ys: list[float]) -> float:
    """Theil-Sen slope of ``ys`` over ``xs``: the median of the slopes between every two points
    (0.0 with fewer than two). Robust to a sawtooth (RSS that rises, is trimmed, rises again) and
    to a few outlying epochs, where a least-squares line follows them."""
    pairs = sorted(
        (ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]
    )
    if not pairs:
        return 0.0
    m = len(pairs) // 2
    return pairs[m] if len(pairs) % 2 else (pairs[m - 1] + pairs[m]) / 2


def summarize(records: list[dict], warmup: int, max_slope_mib: float = 3.0) -> dict:
    """Per field: first, at warm-up and last value, and the fitted growth per epoch (KiB or count)
    over the epochs from ``warmup`` on; the verdict against ``max_slope_mib`` (MiB per epoch)."""
    if len(records) <= warmup + 1:
        warmup = 0
    fit = records[warmup:]
    a, b = fit[0], records[-1]
    out: dict = {"from_epoch": a["epoch"], "to_epoch": b["epoch"], "max_slope_mib": max_slope_mib}
    xs = [r["epoch"] for r in fit]
    for k in FIELDS:
        if all(r.get(k) is not None for r in fit):
            out[k] = {
                "first": records[0][k],
                "at_warmup": a[k],
                "last": b[k],
                "per_epoch": slope(xs, [r[k] for r in fit]),
            }
    grew = {t: b["types"].get(t, 0) - a["types"].get(t, 0) for t in set(a["types"]) | set(b["types"])}
    out["types_grown"] = {t: d for t, d in sorted(grew.items(), key=lambda kv: -kv[1])[:5] if d > 0}
    worst = max(out[k]["per_epoch"] for k in ("rss_kb", "rss_peak_kb") if k in out) / 1024
    out["slope_mib"] = worst
    out["verdict"] = "PASS" if worst <= max_slope_mib else "FAIL"
    return out


def _print_summary(summary: dict, warmup: int, workers: int) -> None:
    where = "in-process" if workers == 0 else f"first of {workers} persistent worker(s)"
    print(f"epochs {summary['from_epoch']}..{summary['to_epoch']} fitted (after {warmup} warm-up epochs), {where}")
    print(f"  {'':<20} {'epoch 0':>10} {'warm-up':>10} {'last':>10} {'per epoch':>10}")
    for k in FIELDS:
        if k in summary:
            s = summary[k]
            print(f"  {k:<20} {s['first']:>10} {s['at_warmup']:>10} {s['last']:>10} {s['per_epoch']:>10.1f}")
    print(f"  Python types grown: {summary['types_grown'] or 'none'}")
    print(f"{summary['verdict']}: RSS grows {summary['slope_mib']:.2f} MiB/epoch (limit {summary['max_slope_mib']:g})")


def _write_json(path: str, obj: dict) -> None:
    p = Path(path)
    tmp_p = p.with_name(p.name + f".tmp{os.getpid()}")
    tmp_p.write_text(json.dumps(obj, indent=1))
    os.replace(tmp_p, p)


def _make_default(root: Path, size: str, lengths: str) -> Path:
    from lerobotstream.testing import make_dataset

    w, h = (int(v) for v in size.lower().split("x"))
    return make_dataset(
        root,
        episode_lengths=tuple(int(x) for x in lengths.split(",")),
        codec="av1",
        cameras=(("observation.images.front", w, h),),
    )


def _soak(a, root: str) -> list[dict]:
    import torch

    from lerobotstream.dataset._dataset import StreamingLeRobotDataset

    kw: dict = {"return_uint8": True}
    if a.video_decoder_cache_size is not None:
        kw["video_decoder_cache_size"] = a.video_decoder_cache_size
    if a.decoded_cache_gb is not None:
        kw["decoded_cache_gb"] = a.decoded_cache_gb
    if a.decode_threads is not None:
        kw["decode_threads"] = a.decode_threads
    if a.episodes:
        kw["episodes"] = [int(x) for x in a.episodes.split(",")]
    with tempfile.TemporaryDirectory(prefix="lrs-soak-") as tmp:
        out = str(Path(tmp) / "records.jsonl")
        ds = StreamingLeRobotDataset(root=root, max_num_shards=1, num_workers=a.workers, batch_size=a.batch_size, **kw)
        probe = Probe(ds, out, a.tracemalloc)
        extra = {"persistent_workers": True, "multiprocessing_context": "spawn"} if a.workers else {}
        loader = torch.utils.data.DataLoader(probe, batch_size=a.batch_size, num_workers=a.workers, **extra)
        for _ in range(a.epochs):
            for _batch in loader:
                pass
        del loader
        with open(out) as f:
            records = [json.loads(line) for line in f]
    if a.workers:  # every worker appends its own line: keep the first worker's (the lowest PID's)
        pid_first = min(r["pid"] for r in records)
        records = [r for r in records if r["pid"] == pid_first]
    return records


def _run_variants(a, argv: list[str], root: str) -> int:
    """Run the soak once per ``--variant`` (child processes, one at a time) and tabulate them."""
    rest, skip = [], False
    for x in argv:  # the same arguments without the variants (a child runs one soak)
        if skip:
            skip = False
            continue
        if x == "--variant":
            skip = True
            continue
        if x.startswith("--variant=") or x.startswith("--json") or x.startswith("--root"):
            skip = x in ("--json", "--root")
            continue
        rest.append(x)
    results = []
    with tempfile.TemporaryDirectory(prefix="lrs-soak-v-") as tmp:
        for spec in a.variant:
            name, _, envs = spec.partition(":")
            envs, _, flags = envs.partition(":")
            env = dict(os.environ)
            for kv in filter(None, envs.split(",")):
                k, _, v = kv.partition("=")
                env[k.strip()] = v.strip()
            js = str(Path(tmp) / f"{len(results)}.json")
            print(f"--- variant {name} ({' '.join(filter(None, (envs, flags))) or 'defaults'})", flush=True)
            rc = subprocess.call(
                [sys.executable, __file__, *rest, *flags.split(), "--root", root, "--json", js], env=env
            )
            r = json.loads(Path(js).read_text()) if Path(js).exists() else None
            results.append((name, envs, rc, r))
    print(f"\nside by side ({a.epochs} epochs, slope fitted after {a.warmup}, limit {a.max_slope_mib:g} MiB/epoch):")
    print(
        f"  {'variant':<12} {'RSS ep0':>8} {'warm-up':>8} {'last':>8} {'peak':>8} {'PSS':>8} {'in use':>8} "
        f"{'free kept':>9} {'MiB/epoch':>9} {'CPU s/ep':>8} {'trims':>5}  verdict"
    )
    failed = False
    for name, _envs, rc, r in results:
        if r is None:
            print(f"  {name:<12} (exit {rc}, no result)")
            failed = True
            continue
        s, recs = r["summary"], r["records"]
        mib = lambda k, at, s=s: f"{s[k][at] / 1024:8.0f}" if k in s else f"{'-':>8}"  # noqa: E731
        cpu = sum(x.get("cpu_s", 0) for x in recs[a.warmup :] or recs) / max(1, len(recs[a.warmup :] or recs))
        print(
            f"  {name:<12} {mib('rss_kb', 'first')} {mib('rss_kb', 'at_warmup')} {mib('rss_kb', 'last')} "
            f"{mib('rss_peak_kb', 'last')} {mib('pss_kb', 'last')} {mib('malloc_in_use_kb', 'last')} "
            f"{s['malloc_free_kept_kb']['last'] / 1024:9.0f} {s['slope_mib']:9.2f} {cpu:8.2f} "
            f"{recs[-1]['heap_trims']:>5}  {s['verdict']}"
        )
        failed |= s["verdict"] != "PASS"
    print(
        "  (MiB; 'peak': highest RSS sampled in the last epoch; 'free kept': malloc's free-but-kept bytes;\n"
        "   CPU s/ep: the measured process's CPU seconds per epoch after the warm-up, all its threads)"
    )
    if a.json:
        _write_json(a.json, {"variants": [{"name": n, "env": e, "rc": rc, **(r or {})} for n, e, rc, r in results]})
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=None, help="dataset folder (default: a generated AV1 dataset, see --frame-size)")
    ap.add_argument("--frame-size", default="640x480", help="WxH of the generated dataset's camera")
    ap.add_argument("--episode-lengths", default="20,20,20,20,20,20,20,20", help="of the generated dataset")
    ap.add_argument("--episodes", default=None, help="comma-separated episode subset of the dataset")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10, help="epochs left out of the fitted growth")
    ap.add_argument("--max-slope-mib", type=float, default=3.0, help="PASS limit of RSS growth, MiB per epoch")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader workers (0: in-process)")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--video-decoder-cache-size", type=int, default=None)
    ap.add_argument("--decoded-cache-gb", type=float, default=None)
    ap.add_argument("--decode-threads", type=int, default=None)
    ap.add_argument("--tracemalloc", action="store_true", help="also trace Python allocations (slower)")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:ENV=VALUE,...[:FLAGS]",
        help="run the soak once per variant with these environment variables, side by side",
    )
    ap.add_argument("--json", default=None, help="write the per-epoch records and the summary here")
    a = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="lrs-rss-") as tmp:
        os.environ.setdefault("HF_LEROBOT_HOME", str(Path(tmp) / "home"))  # read at import: set first
        root = a.root or str(_make_default(Path(tmp) / "ds", a.frame_size, a.episode_lengths))
        if a.variant:
            return _run_variants(a, argv, root)
        records = _soak(a, root)
    summary = summarize(records, a.warmup, a.max_slope_mib)
    print("  epoch RSS MiB: " + " ".join(str(r["rss_kb"] // 1024) for r in records))
    _print_summary(summary, a.warmup, a.workers)
    if a.json:
        _write_json(a.json, {"records": records, "summary": summary})
    return 0 if summary["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
