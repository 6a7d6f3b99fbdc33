"""StreamLoader beside the DataLoader path, with and without a synthetic training step
(``python -m tools.bench --loader ...``, or this file directly).

Rows (one process, rounds interleaved: every row once per round, in rotating order, so the
machine's load hits them alike; medians over rounds, ratios per round then the median):

- ``dataloader/N``: ``torch.utils.data.DataLoader(ds, B, num_workers=N, collate_fn=packed_collate)``
  (what ``lerobotstream-train`` builds with ``--dataset.streaming_loader=dataloader``);
- ``threads/N``, ``processes/N``: ``StreamLoader(ds, B, num_workers=N, mode=...)``;

each with ``--step``: ``none`` (the loader alone), ``gil:MS`` (a pure-Python loop of MS ms per
batch: the training step's Python holds the GIL) and ``nogil:MS`` (a torch CPU matmul of about MS
ms, calibrated first: the step releases the GIL). Per trial: a fresh dataset and loader, ``--samples``
samples drawn; reported: steady samples/s (after the first batch), steps/s, first batch s, the share
of time waiting for data (in ``next()``), the step's own time against the step alone (its slowdown
by the loader's threads/processes), CPU ms per sample (this process and its workers, ``/proc``).

Also ``alloc``: a fresh ``torch.empty`` batch tensor per batch written by the C de-interleave vs
one recycled tensor (what recycling would save; StreamLoader allocates per batch).

    python -m tools.bench --loader --workers 0,2 --steps none,gil:20,nogil:20 --rounds 3
    python -m tools.bench --loader --startup --rounds 3      # a spawn worker's imports, lean or not
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

CLK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pids) -> float:
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK
        except (OSError, IndexError):
            pass
    return total


def _self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def gil_step(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    x = 0
    while time.perf_counter() < end:
        for i in range(200):
            x += i


def make_nogil_step(ms: float):
    """``ms`` ms of 128x128 torch matmuls (each ~0.1-1 ms, the GIL released inside; the loop's
    Python between them holds it for microseconds): wall-time bounded like :func:`gil_step`, so no
    calibration (torch's OpenMP speed changes once a pipeline has run in the process)."""
    a = torch.randn(128, 128)

    def step() -> None:
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:
            a @ a
    return step


def _step_fn(spec: str):
    if spec == "none":
        return None
    kind, ms = spec.split(":")
    return (lambda: gil_step(float(ms))) if kind == "gil" else make_nogil_step(float(ms))


def _dataset(root: str, nw: int, batch: int, u8: bool):
    from lerobotstream import StreamingLeRobotDataset

    return StreamingLeRobotDataset(root=root, repeat=True, batch_size=batch, num_workers=nw,
                                   max_num_shards=max(1, nw), return_uint8=u8)


def trial(row: str, root: str, batch: int, samples: int, step, u8: bool) -> dict:
    from lerobotstream import StreamLoader, packed_collate

    kind, nw = row.split("/")
    nw, _, ctx = nw.partition(":")  # processes/2:spawn
    nw, ctx = int(nw), (ctx or None) if int(nw) else None
    ds = _dataset(root, nw, batch, u8)
    if kind == "dataloader":
        loader = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=nw, collate_fn=packed_collate,
                                             prefetch_factor=2 if nw else None, multiprocessing_context=ctx)
    else:
        loader = StreamLoader(ds, batch, num_workers=nw, mode=kind, multiprocessing_context=ctx)
    t0 = time.perf_counter()
    it = iter(loader)
    got = waited = stepped = 0.0
    first = None
    n = steps = 0
    pids: list[int] = []
    cpu0 = None
    t_first = None
    while n < samples:
        a = time.perf_counter()
        b = next(it)
        c = time.perf_counter()
        k = len(b["index"])
        if first is None:
            first = c - t0
            t_first = c
            pids = list(getattr(loader, "worker_pids", []) or [w.pid for w in getattr(it, "_workers", [])])
            cpu0 = _self_cpu() + _cpu_s(pids)
        else:
            waited += c - a
            n += k
            steps += 1
        if step is not None:
            s0 = time.perf_counter()
            step()
            if first is not None and steps:
                stepped += time.perf_counter() - s0
        del b
    t_end = time.perf_counter()
    cpu = _self_cpu() + _cpu_s(pids) - cpu0
    del it
    steady = t_end - t_first
    return {"row": row, "first_batch_s": first, "samples_per_s": n / steady, "steps_per_s": steps / steady,
            "wait_share": waited / steady, "step_s": stepped / max(1, steps), "cpu_ms_per_sample": 1000 * cpu / n}


def alloc_rows(batch: int, h: int = 480, w: int = 640, reps: int = 30) -> dict:
    """ms per batch: fresh ``torch.empty`` + C de-interleave of every frame vs a recycled tensor."""
    from lerobotstream.decode._frames import frames_to_u8_chw

    frames = [torch.randint(0, 255, (h, w, 3), dtype=torch.uint8).permute(2, 0, 1) for _ in range(batch)]
    out = {}
    for mode in ("fresh", "recycled", "fresh", "recycled"):
        keep = torch.empty((batch, 3, h, w), dtype=torch.uint8)
        t0 = time.perf_counter()
        for _ in range(reps):
            t = torch.empty((batch, 3, h, w), dtype=torch.uint8) if mode == "fresh" else keep
            for i, f in enumerate(frames):
                frames_to_u8_chw([f], out=t[i])
        out.setdefault(mode, []).append(1000 * (time.perf_counter() - t0) / reps)
    return {k: min(v) for k, v in out.items()}


_IMPORTS = {
    "torch": "import torch",
    "torchcodec": "import torch, torchcodec.decoders",
    "torchcodec-lean": "import torch; from lerobotstream.loader._startup import import_decoder_lean; "
                       "import_decoder_lean(); import torchcodec.decoders",
}


def startup_rows(rounds: int) -> dict:
    """Seconds to import what a spawn worker imports, each in a fresh interpreter, interleaved:
    torch alone, torch + torchcodec, torch + torchcodec without ``torch._dynamo`` (ours); and
    whether ``torch._dynamo`` ended up imported."""
    import subprocess

    out: dict[str, list[float]] = {}
    dyn: dict[str, bool] = {}
    for r in range(rounds):
        names = list(_IMPORTS)
        for name in names[r % len(names):] + names[:r % len(names)]:
            code = ("import sys, time; t = time.perf_counter(); " + _IMPORTS[name] +
                    "; print(time.perf_counter() - t, 'torch._dynamo' in sys.modules)")
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
            secs, d = res.stdout.split()
            out.setdefault(name, []).append(float(secs))
            dyn[name] = d == "True"
    return {k: {"median_s": statistics.median(v), "runs": v, "dynamo_imported": dyn[k]} for k, v in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(ROOT / "data" / "g1_v30"))
    ap.add_argument("--rows", default="dataloader,threads,processes")
    ap.add_argument("--workers", default="0,2", help="e.g. 0,1,2,4 or 2:spawn,2:forkserver (processes rows skip 0)")
    ap.add_argument("--steps", default="none,gil:20,nogil:20")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--samples", type=int, default=240)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--float32", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--startup", action="store_true", help="only the worker import rows (fresh interpreters)")
    args = ap.parse_args(argv)
    if args.startup:
        res = startup_rows(args.rounds)
        base = res["torchcodec"]["median_s"]
        for k, v in res.items():
            print(f"startup {k:16} {v['median_s']:6.2f} s (x{v['median_s'] / base:.2f} of torch + torchcodec), "
                  f"torch._dynamo imported: {v['dynamo_imported']}; runs {[round(x, 2) for x in v['runs']]}")
        print(f"load average {os.getloadavg()[0]:.1f}")
        return 0
    rows = [f"{k}/{n}" for k in args.rows.split(",") for n in args.workers.split(",")
            if not (k == "processes" and n.split(":")[0] == "0")]
    steps = args.steps.split(",")
    fns = {s: _step_fn(s) for s in steps}
    alone: dict[str, list[float]] = {}

    def time_alone() -> None:
        """The step alone (what a loader that is never waited on leaves), measured after each round:
        torch's OpenMP threads behave differently once a pipeline has run in the process (libgomp
        spins far less once it manages more threads than CPUs), so a baseline from before the first
        trial is not comparable (measured here: a 20 ms matmul step took 1.2 ms after one)."""
        for s, fn in fns.items():
            if fn is not None:
                fn()
                t0 = time.perf_counter()
                for _ in range(20):
                    fn()
                alone.setdefault(s, []).append((time.perf_counter() - t0) / 20)

    results: dict[tuple[str, str], list[dict]] = {}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        order = rows[r % len(rows):] + rows[:r % len(rows)]
        for s in steps:
            for row in order:
                res = trial(row, args.root, args.batch, args.samples, fns[s], not args.float32)
                results.setdefault((row, s), []).append(res)
                print(json.dumps({"round": r, "step": s, **res}), flush=True)
        time_alone()
        load.append(os.getloadavg()[0])
    summary = []
    for s in steps:
        base = {}
        for row in rows:
            rs = results[(row, s)]
            med = {k: statistics.median(x[k] for x in rs) for k in rs[0] if k != "row"}
            if s in alone:
                med["step_slowdown"] = med["step_s"] / statistics.median(alone[s]) - 1
            base[row] = rs
            summary.append({"step": s, "row": row, **{k: round(v, 4) for k, v in med.items()}})
        ref = [row for row in rows if row.startswith("dataloader/")]
        for row in rows:
            if row.startswith("dataloader/"):
                continue
            same = f"dataloader/{row.split('/')[1]}"  # the DataLoader at the same workers (and context)
            if same in base:
                ratio = statistics.median(a["samples_per_s"] / b["samples_per_s"] for a, b in zip(base[row], base[same]))
                summary.append({"step": s, "row": row, f"x_{same}": round(ratio, 3)})
        del ref
    print("\n# summary (medians over rounds; load average %s)" % [round(x, 1) for x in load])
    print(f"{'step':10} {'row':14} {'samples/s':>9} {'steps/s':>8} {'wait':>6} {'first s':>7} {'cpu ms/s':>8} "
          f"{'step +%':>7}  ratio")
    for e in summary:
        if "samples_per_s" in e:
            slow = e.get("step_slowdown")
            print(f"{e['step']:10} {e['row']:14} {e['samples_per_s']:9.1f} {e['steps_per_s']:8.2f} "
                  f"{100 * e['wait_share']:5.1f}% {e['first_batch_s']:7.2f} {e['cpu_ms_per_sample']:8.2f} "
                  f"{'' if slow is None else f'{100 * slow:6.1f}%':>7}")
        else:
            k = next(k for k in e if k.startswith("x_"))
            print(f"{e['step']:10} {e['row']:14} {'':54} {e[k]:.3f} {k[2:]}")
    al = alloc_rows(args.batch)
    print(f"alloc: fresh batch tensor {al['fresh']:.2f} ms vs recycled {al['recycled']:.2f} ms per batch of "
          f"{args.batch} 640x480 uint8 frames (best of 2)")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "alloc": al, "load": load, "step_alone_s": alone,
                                               "trials": {f"{k[0]}|{k[1]}": v for k, v in results.items()}},
                                              indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
