"""Worker memory over many epochs with persistent DataLoader workers: what grows?

A bounded experiment: a small dataset, ``--epochs`` epochs through one persistent
worker; at the end of each epoch the worker records its RSS, its RSS after ``malloc_trim(0)``,
glibc's ``mallinfo2`` (bytes malloc holds **in use** vs **free but kept** in its arenas), the
pyarrow pool's allocated bytes, Python objects by type, threads and memory mappings, and with
``--tracemalloc`` the Python-traced bytes. The summary gives each one's growth per epoch after a
warm-up: a leak grows *in use*; allocator fragmentation grows *free but kept* and RSS only.

    python -m tools.rss_epochs --epochs 80                       # default glibc policy
    MALLOC_ARENA_MAX=1 python -m tools.rss_epochs --epochs 80    # one malloc arena
    python -m tools.rss_epochs --epochs 80 --mallopt-arena-max 2  # cap set inside the worker

Linux/glibc only (``/proc``, ``mallinfo2``). Not a benchmark: no timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FIELDS = ("rss_kb", "rss_trim_kb", "malloc_in_use_kb", "malloc_free_kept_kb", "arrow_kb", "python_objects",
          "threads", "maps", "traced_kb")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


def _libc():
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    return libc


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def measure() -> dict:
    """One reading of this process (see the module docstring)."""
    import tracemalloc

    import pyarrow as pa

    gc.collect()
    libc = _libc()
    rss = _rss_kb()
    libc.malloc_trim(0)
    m = libc.mallinfo2()
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    return {"rss_kb": rss, "rss_trim_kb": _rss_kb(), "malloc_in_use_kb": (m.uordblks + m.hblkhd) // 1024,
            "malloc_free_kept_kb": m.fordblks // 1024, "arrow_kb": pa.total_allocated_bytes() // 1024,
            "python_objects": len(gc.get_objects()), "threads": len(os.listdir("/proc/self/task")), "maps": maps,
            "traced_kb": tracemalloc.get_traced_memory()[0] // 1024 if tracemalloc.is_tracing() else None,
            "types": dict(Counter(type(o).__name__ for o in gc.get_objects()))}


def _probe_class():
    from torch.utils.data import IterableDataset

    class Probe(IterableDataset):
        """Iterates the dataset; after each epoch appends one JSON line of :func:`measure`."""

        def __init__(self, ds, out: str, tracemalloc_on: bool, arena_max: int) -> None:
            self.ds, self.out, self.tracemalloc_on, self.arena_max, self.epoch = ds, out, tracemalloc_on, arena_max, 0

        def __iter__(self):
            if self.epoch == 0:
                if self.tracemalloc_on:
                    import tracemalloc

                    tracemalloc.start(1)
                if self.arena_max:
                    _libc().mallopt(-8, self.arena_max)  # M_ARENA_MAX
            yield from self.ds
            rec = {"epoch": self.epoch, **measure()}
            with open(self.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            self.epoch += 1

    return Probe


def summarize(records: list[dict], warmup: int) -> dict:
    """Growth per epoch of each field between epoch ``warmup`` and the last (KB or count)."""
    if len(records) <= warmup + 1:
        warmup = 0
    a, b = records[warmup], records[-1]
    n = max(1, b["epoch"] - a["epoch"])
    out = {"from_epoch": a["epoch"], "to_epoch": b["epoch"]}
    for k in FIELDS:
        if a.get(k) is not None and b.get(k) is not None:
            out[k] = {"first": records[0][k], "at_warmup": a[k], "last": b[k], "per_epoch": (b[k] - a[k]) / n}
    grew = {t: b["types"].get(t, 0) - a["types"].get(t, 0) for t in set(a["types"]) | set(b["types"])}
    out["types_grown"] = {t: d for t, d in sorted(grew.items(), key=lambda kv: -kv[1])[:5] if d > 0}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=None, help="dataset folder (default: a generated 4-episode AV1 dataset)")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10, help="epochs left out of the growth rates")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--tracemalloc", action="store_true", help="also trace Python allocations (slower)")
    ap.add_argument("--mallopt-arena-max", type=int, default=0,
                    help="call mallopt(M_ARENA_MAX, N) in the worker before its first epoch (0: no)")
    ap.add_argument("--json", default=None, help="write the per-epoch records and the summary here")
    a = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="lrs-rss-") as tmp:
        os.environ.setdefault("HF_LEROBOT_HOME", str(Path(tmp) / "home"))  # read at import: set first
        import torch

        from lerobotstream.dataset import StreamingLeRobotDataset
        from lerobotstream.testing import make_dataset

        root = a.root or make_dataset(Path(tmp) / "ds", episode_lengths=(12, 10, 14, 8), codec="av1",
                                      cameras=(("observation.images.front", 64, 48),))
        out = str(Path(tmp) / "records.jsonl")
        ds = StreamingLeRobotDataset(root=root, max_num_shards=1, num_workers=1, batch_size=a.batch_size)
        probe = _probe_class()(ds, out, a.tracemalloc, a.mallopt_arena_max)
        loader = torch.utils.data.DataLoader(probe, batch_size=a.batch_size, num_workers=1, persistent_workers=True)
        for _ in range(a.epochs):
            for _batch in loader:
                pass
        del loader
        with open(out) as f:
            records = [json.loads(line) for line in f]
    summary = summarize(records, a.warmup)
    print(f"epochs {summary['from_epoch']}..{summary['to_epoch']} (after {a.warmup} warm-up epochs), one persistent worker")
    print(f"  {'':<20} {'epoch 0':>10} {'warm-up':>10} {'last':>10} {'per epoch':>10}")
    for k in FIELDS:
        if k in summary:
            s = summary[k]
            print(f"  {k:<20} {s['first']:>10} {s['at_warmup']:>10} {s['last']:>10} {s['per_epoch']:>10.1f}")
    print(f"  Python types grown: {summary['types_grown'] or 'none'}")
    if a.json:
        p = Path(a.json)
        tmp_p = p.with_name(p.name + f".tmp{os.getpid()}")
        tmp_p.write_text(json.dumps({"records": records, "summary": summary}, indent=1))
        os.replace(tmp_p, p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
