"""StreamLoader's CPU per sample, split by thread CPU clocks, A/B across checkouts.

Per trial (a fresh interpreter running one checkout's ``lerobotstream``): a ``StreamLoader`` over
the bundled G1 data (uint8, ``repeat=True``), 2 warm-up batches, then ``--samples`` samples; the
CPU of the window (CPU clocks, so a thread the OS keeps descheduled costs nothing) split into:

- ``cpu``: the process (threads mode) or the process and its workers (processes mode, ``/proc``);
- ``decode``: torchcodec's decode calls (``VideoDecoder.get_frames_in_range`` / ``get_frames_at``,
  on the decode threads; threads mode only), ``beyond_decode`` = ``cpu`` minus that;
- ``copy``: the C de-interleave of frames into the batch tensors (``frames_to_u8_chw``);
- ``held``: the CPU of the training, assembly and decode threads outside those two calls — their
  Python with the GIL held plus the small torch/numpy calls it makes (an upper bound of the
  GIL-held CPU; a sampling profiler's count also includes GIL holders the OS descheduled).

Calls in flight at the window's edges are counted only for their part inside it. Rounds are
interleaved (each checkout once per row per round, alternating which goes first); medians::

    git worktree add /tmp/before main   # (and copy the compiled extensions in)
    python -m tools.loader_cpu_split --trees before=/tmp/before,after=. --rows threads/0,threads/2
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import threading
import time

from tools.bench_loader import _cpu_s as _proc_cpu  # CPU seconds of these PIDs (/proc)


def trial(row: str, samples: int, root: str, batch: int) -> dict:
    """One trial in this interpreter (see the module doc); ``row``: ``threads/N`` or ``processes/N``."""
    import torchcodec.decoders as tcd

    from lerobotstream import StreamingLeRobotDataset, StreamLoader
    from lerobotstream.dataset import _assemble

    acc: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()  # calls over the whole trial (warm-up included)
    inflight: dict[int, tuple[str, float]] = {}
    start: dict[int, float] = {}

    def clock(ident: int) -> float:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))

    def wrap(obj, name: str, label: str) -> None:
        fn = getattr(obj, name)

        def timed(*a, **k):
            ident = threading.get_ident()
            calls[label] += 1
            t = time.thread_time()
            inflight[ident] = (label, t)
            try:
                return fn(*a, **k)
            finally:
                inflight.pop(ident, None)
                acc[label] += time.thread_time() - max(t, start.get(ident, -1.0))

        setattr(obj, name, timed)

    for m in ("get_frames_in_range", "get_frames_at"):
        wrap(tcd.VideoDecoder, m, "decode")
    wrap(_assemble, "frames_to_u8_chw", "copy")
    kind, nw = row.split("/")
    nw = int(nw)
    ds = StreamingLeRobotDataset(
        root=root, repeat=True, batch_size=batch, num_workers=nw, max_num_shards=max(1, nw), return_uint8=True
    )
    loader = StreamLoader(
        ds, batch, num_workers=nw, mode=kind, multiprocessing_context="fork" if kind == "processes" else None
    )
    it = iter(loader)
    for _ in range(2):
        next(it)
    pids = list(loader.worker_pids)

    def threads() -> dict[int, float]:
        out = {}
        for t in threading.enumerate():
            if t.name.startswith(("lrs-decode", "lrs-assemble")) or t is threading.main_thread():
                try:
                    out[t.ident] = clock(t.ident)
                except (OSError, ProcessLookupError):
                    pass
        return out

    c0, w0 = time.process_time(), _proc_cpu(pids)  # the process window contains the threads' one
    th0 = threads()
    start.update(th0)
    acc.clear()
    n = 0
    while n < samples:
        n += len(next(it)["index"])
    th1 = threads()
    c1, w1 = time.process_time(), _proc_cpu(pids)
    got = collections.Counter(acc)
    for ident, (label, t) in list(inflight.items()):
        if ident in th1:
            got[label] += th1[ident] - max(t, start.get(ident, -1.0))
    it.close()
    cpu = (c1 - c0) + (w1 - w0)
    held = sum(v - th0.get(k, 0.0) for k, v in th1.items()) - got["decode"] - got["copy"]

    def ms(x: float) -> float:
        return round(1000 * x / n, 4)

    out = {"row": row, "samples": n, "cpu": ms(cpu)}
    if kind == "threads":  # (in processes mode the decode and the copy run in the workers)
        out.update(
            decode=ms(got["decode"]),
            beyond_decode=ms(cpu - got["decode"]),
            copy=ms(got["copy"]),
            held=ms(held),
            decode_calls=calls["decode"],
            copy_calls=calls["copy"],
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", default="this=.", help="name=checkout,... (each trial imports that checkout)")
    ap.add_argument("--rows", default="threads/0,threads/2", help="threads/N, processes/N (fork)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--root", default=None, help="dataset root (default: the checkout's data/g1_v30)")
    ap.add_argument("--trial", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.trial:
        import lerobotstream

        root = args.root or os.path.join(os.path.dirname(lerobotstream.__file__), "..", "data", "g1_v30")
        print(json.dumps(trial(args.trial, args.samples, root, args.batch)), flush=True)
        return 0
    trees = dict(t.split("=", 1) for t in args.trees.split(","))
    rows = args.rows.split(",")
    res: dict[tuple[str, str], list[dict]] = {}
    loads = [os.getloadavg()[0]]
    for r in range(args.rounds):
        names = list(trees) if r % 2 == 0 else list(trees)[::-1]
        for row in rows:
            for name in names:
                path = os.path.abspath(trees[name])
                cmd = [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--trial",
                    row,
                    "--samples",
                    str(args.samples),
                    "--batch",
                    str(args.batch),
                ] + (["--root", args.root] if args.root else [])
                p = subprocess.run(
                    cmd, cwd=path, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=600
                )
                lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
                if not lines:
                    print(f"{name} {row}: failed\n{p.stderr[-2000:]}", file=sys.stderr)
                    continue
                d = json.loads(lines[-1])
                print(json.dumps({"round": r, "tree": name, **d}), flush=True)
                res.setdefault((row, name), []).append(d)
        loads.append(os.getloadavg()[0])
    print(f"# medians over rounds, ms per sample; load average per round {[round(x, 2) for x in loads]}")
    for row in rows:
        for name in trees:
            rs = res.get((row, name), [])
            if rs:
                keys = [k for k in rs[0] if k not in ("row", "samples")]
                print(f"{row:12} {name:8} " + " ".join(f"{k}={statistics.median(x[k] for x in rs):.3f}" for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
