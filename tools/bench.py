"""The peer benchmark: lerobotstream vs LeRobot 0.6.1's own datasets vs the sequential decode limit.

One run, interleaved, the same data, DataLoader workers, batch size, item dtype (uint8 /
float32) and ``multiprocessing_context`` for every contestant:

- ``ours``: :class:`lerobotstream.StreamingLeRobotDataset`, run by this interpreter (``.venv``);
  ``ours@PATH`` runs another checkout's package (PATH first on ``sys.path``; e.g. a ``git
  worktree`` of the commit before a change: before/after in one run); ``ours@lerobot-venv`` runs
  the package installed in ``.venv-lerobot`` (``make setup-lerobot``); ``ours+k=v+...`` passes
  dataset options (``ours+decode_threads=1``) and ``+env.NAME=value`` sets an environment variable
  of that contestant's process (``ours+env.THP_MEM_ALLOC_ENABLE=1``), ``+sharing_strategy=file_system``
  torch.multiprocessing's sharing strategy, ``+collate=default`` the DataLoader's ``collate_fn``
  (torch's ``default_collate``; ours runs with ``lerobotstream.packed_collate`` otherwise, as
  ``lerobotstream-train`` does and the README recommends);
- ``lerobot``: LeRobot 0.6.1's map-style ``LeRobotDataset`` (``return_uint8`` as given, shuffled
  sampler: what ``lerobot-train`` 0.6 builds), run by ``.venv-lerobot/bin/python``; over the
  remote store it **downloads the dataset first** (8 parallel GETs of every file, as
  ``huggingface_hub.snapshot_download``; the download is part of its time to the first batch);
- ``lerobot-streaming``: LeRobot 0.6.1's ``StreamingLeRobotDataset`` (``max_num_shards`` = workers,
  as ``lerobot-train`` passes; its 1000-item shuffle buffer fills before the first item leaves),
  local disk only;
- ``limit``: the raw sequential decode limit, measured in each round on each dataset: every
  video file decoded front to back with torchcodec in 16-frame calls, nothing else, once with
  FFmpeg's own threads (``num_ffmpeg_threads=0``), once with one single-threaded decoder per
  usable CPU, each on its share of every file (the limit is the faster of the two in each round:
  the whole machine either way; FFmpeg's AV1 decoder barely threads on 640x480), and once on one
  thread (whose CPU time per frame prices the decode share of every contestant's CPU).

Each contestant is its own long-lived process (LeRobot's needs its own venv), fed one trial at a
time over a pipe, so imports are paid once, outside any timing; within a round the contestants
of a setting run back to back in rotating order. Per trial: a fresh dataset and DataLoader
(``persistent_workers=False``, ``prefetch_factor=4`` with workers, as ``lerobot-train``), drawn
until ``--samples`` samples (per dataset default). Reported, medians over the rounds:

- **steady samples/s**: samples after every worker's first batch / time after it;
- **first batch s**: from the trial's start (download, dataset construction, worker start-up
  under the context: ``spawn`` imports torch in every worker) to the first batch; ours' MP4
  sidecar is built once per dataset and transport before the rounds (``sidecar`` in the JSON),
  so ours starts with a warm sidecar;
- **CPU ms per sample**: CPU time of the contestant's process and its DataLoader workers (from
  ``/proc``) over the steady part, split into *decode* (frames decoded per sample x the limit's
  one-thread CPU per frame) and *the rest*; for ours also the profiler's stage seconds per item
  (``ds.stats()``, wall time summed over threads) in the JSON;
- **frames decoded per frame returned**: ours counts them (``ds.stats()``); map-style's is the
  model of one seek per sample (frames from the preceding keyframe to the target, averaged over
  the dataset's frames); streaming LeRobot reads each shard in order (~1);
- **peak PSS sum** (process + workers, sampled every 0.5 s), **bytes fetched / needed** (needed:
  the coded size of the distinct frames delivered; fetched: ours' source counters, the remote
  store's served bytes for the download);
- ratios (ours / peer, ours / limit): per round, then the median; the load average and each
  contestant's spread over the rounds say how noisy the machine was.

The remote store is ``lerobotstream.testing.LoopbackServer`` on loopback with ``--latency-ms`` (one round trip
per request and per new connection) and ``--bandwidth-mbit`` (all connections together).

    python -m tools.bench                       # the README table (3 rounds, ~15 min on 2 shared cores)
    python -m tools.bench --plan extended       # + 3 cameras, float32, generated H.264, the store in-process
    python -m tools.bench --datasets g1 --workers 0,2:spawn --items uint8 --rounds 3
    python -m tools.bench --contestants ours,ours@/tmp/before --datasets g1 --workers 0,2:spawn
    python -m tools.bench --quick               # tiny dataset, seconds (the smoke test runs this)
    python -m tools.bench --loader --workers 0,2 --steps none,gil:20,nogil:20   # StreamLoader rows

Writes ``--json`` (every trial and the summary; rewritten after every trial while the run goes, with
``"partial": true``) and ``--markdown`` (the README table, the full table, the performance goals met
or not).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tools.bench_common import LEROBOT_PYTHON, atomic_write, fmt, git_head, load_average, load_summary
from tools.bench_contestants import Contestant, contestant_env, make_contestants, warm_up
from tools.bench_datasets import DATASETS, DatasetFacts, dataset_facts, delta_timestamps, ensure_dataset, mixture_of
from tools.bench_limit import run_limits
from tools.bench_report import format_all, summarize

#: plans: (dataset, transport, items, [workers[:context], ...], contestants or None for all)
PLANS: dict[str, list[tuple[str, str, str, list[str], tuple[str, ...] | None]]] = {
    # the README table: the performance goals, sized for ~15 minutes on 2 shared cores (3 rounds)
    "readme": [
        ("g1", "local", "uint8", ["0", "2:spawn", "2:fork"], None),
        ("g1-h264", "local", "uint8", ["2:spawn"], ("ours", "lerobot")),
        ("g1", "http", "uint8", ["2:spawn", "2:fork"], ("ours", "lerobot")),
    ],
    # every dataset, float32 and the remote store in-process too (docs/performance.md; ~15 min a round)
    "extended": [
        ("g1", "local", "uint8", ["0", "2:spawn", "2:fork"], None),
        ("g1", "local", "float32", ["0", "2:spawn"], None),
        ("g1-3cam", "local", "uint8", ["0", "2:spawn"], None),
        ("g1-h264", "local", "uint8", ["0", "2:spawn"], None),
        ("gen-h264", "local", "uint8", ["0", "2:spawn"], None),
        ("g1", "http", "uint8", ["0", "2:spawn"], None),
    ],
}


def parse_workers(text: str) -> list[tuple[int, str | None]]:
    out = []
    for w in text.split(","):
        n, _, ctx = w.partition(":")
        out.append((int(n), (ctx or "spawn") if int(n) else None))
    return out


def _served_bytes(log: list[dict], base: Path) -> int:
    total = 0
    for e in log:
        if e.get("method") != "GET" or "/static/" not in e.get("path", ""):
            continue
        p = base / e["path"].split("/static/", 1)[1]
        if not p.is_file():
            continue
        if e.get("range"):
            a, b = e["range"].split("=")[1].split("-")
            total += min(int(b), p.stat().st_size - 1) - int(a) + 1
        else:
            total += p.stat().st_size
    return total


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--loader" in argv:  # StreamLoader rows beside the DataLoader path (tools/bench_loader.py)
        from tools import bench_loader

        return bench_loader.main([a for a in argv if a != "--loader"])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="the tiny dataset, 1 round, ours + limit (smoke test)")
    ap.add_argument(
        "--plan",
        default="readme",
        choices=sorted(PLANS),
        help="the settings to run when --datasets/--transports/--items/--workers are not given: readme "
        "(the README table, ~15 min) or extended (every dataset, float32, the store in-process)",
    )
    ap.add_argument("--datasets", default=None, help=f"comma-separated, of {', '.join(DATASETS)} (default: the plan's)")
    ap.add_argument("--transports", default=None, help="local,http (default: the plan's)")
    ap.add_argument("--items", default=None, help="uint8,float32 (default: the plan's)")
    ap.add_argument(
        "--workers",
        default=None,
        help="DataLoader settings, e.g. 0,2:spawn,2:fork (N:CONTEXT, context spawn|fork|forkserver; "
        "default: the plan's)",
    )
    ap.add_argument(
        "--contestants",
        default=None,
        help="ours[@PATH][+option=value...], lerobot, lerobot-streaming (default: all three)",
    )
    ap.add_argument("--no-limit", action="store_true", help="skip the decode-limit runs")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds, medians reported (default 3)")
    ap.add_argument("--samples", type=int, default=None, help="samples per trial (default: per dataset, 640 on G1)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument(
        "--prefetch-factor", type=int, default=4, help="DataLoader prefetch_factor with workers (LeRobot's 4)"
    )
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--latency-ms", type=float, default=50.0, help="remote store: round trip per request, ms")
    ap.add_argument("--bandwidth-mbit", type=float, default=400.0, help="remote store: shared bandwidth, Mbit/s")
    ap.add_argument(
        "--cache-dir",
        default=str(Path.home() / ".cache" / "lerobotstream" / "bench"),
        help="built datasets and ours' sidecars (an isolated HF_LEROBOT_HOME)",
    )
    ap.add_argument("--lerobot-python", default=str(LEROBOT_PYTHON))
    ap.add_argument("--trial-timeout-s", type=float, default=600)
    ap.add_argument("--json", default="bench.json")
    ap.add_argument("--markdown", default=None, help="write the tables and goals here too")
    ap.add_argument(
        "--from-json",
        default=None,
        metavar="JSON",
        help="no run: the tables of an earlier (or interrupted, partial) run's --json",
    )
    args = ap.parse_args(argv)
    if args.serve:  # what a contestant process runs (tools/bench_trial.py)
        from tools.bench_trial import serve

        return serve()
    if args.from_json:
        return _from_json(args)
    if threading.current_thread() is not threading.main_thread():
        return _run(args, argv)
    import signal

    def stop(signum, frame):  # SIGTERM: close the contestants and the store (_run's finally)
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        return _run(args, argv)
    finally:
        signal.signal(signal.SIGTERM, before)


def _run(args, argv) -> int:
    if args.quick:  # the smoke test's defaults; explicit flags still win
        args.datasets = args.datasets or "tiny"
        args.transports = args.transports or "local,http"
        args.workers = args.workers or "0"
        args.rounds = args.rounds or 1
        args.contestants = args.contestants or "ours"
    args.rounds = args.rounds or 3
    args.contestants = args.contestants or "ours,lerobot,lerobot-streaming"
    if args.datasets or args.transports or args.items or args.workers:
        plan = [
            (d, t, i, (args.workers or "0,2:spawn").split(","), None)
            for d in (args.datasets or "g1").split(",")
            for t in (args.transports or "local").split(",")
            for i in (args.items or "uint8").split(",")
        ]
    else:
        plan = PLANS[args.plan]
    for d, *_ in plan:
        if d not in DATASETS:
            raise SystemExit(f"unknown dataset {d!r}; one of {', '.join(DATASETS)}")
    cache = Path(args.cache_dir).expanduser()
    t_start = time.time()
    names = list(dict.fromkeys(p[0] for p in plan))
    t = time.perf_counter()
    roots = {n: ensure_dataset(cache, n) for n in names}
    facts = {n: dataset_facts(r) for n, r in roots.items()}
    print(f"datasets ready in {time.perf_counter() - t:.1f} s under {cache / 'datasets'}", file=sys.stderr, flush=True)

    logs = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    env = contestant_env(cache)
    contestants, notes = make_contestants(args.contestants.split(","), Path(args.lerobot_python), env, logs)
    ours_side = Contestant("limit", "limit", Path(sys.executable), env, logs / "limit.log")
    server = None
    if any(p[1] == "http" for p in plan):
        from lerobotstream.testing import LoopbackServer

        server = LoopbackServer.start(
            {
                "static": str(cache / "datasets"),
                "latency_s": args.latency_ms / 1e3,
                "bandwidth_bps": args.bandwidth_mbit * 1e6 / 8,
            }
        )
    trials: list[dict] = []
    setup: dict[str, Any] = {"notes": notes, "logs": str(logs)}
    try:
        warm_up([*contestants, *([] if args.no_limit else [ours_side])], setup, args.trial_timeout_s)
        for d, tr in dict.fromkeys((p[0], p[1]) for p in plan):
            root = str(roots[d]) if tr == "local" else f"{server.static_url}{roots[d].name}/"
            for c in contestants:
                if c.kind == "ours" and not c.error:
                    r = c.call({"kind": "prepare", "root": root, "mixture": mixture_of(roots[d])}, args.trial_timeout_s)
                    setup[f"prepare {c.label} {d} {tr}"] = r
                    print(f"  prepare {c.label} {d} {tr}: {r}", file=sys.stderr, flush=True)
        for rnd in range(args.rounds):
            if not args.no_limit:
                for d in names:
                    trials += run_limits(
                        ours_side, roots[d], facts[d], d, rnd, args.samples or DATASETS[d][2], args.trial_timeout_s
                    )
            for d, tr, items, workers, only in plan:
                for nw, ctx in [w for ws in workers for w in parse_workers(ws)]:
                    mine = [c for c in contestants if only is None or c.kind in only]
                    order = mine[rnd % max(1, len(mine)) :] + mine[: rnd % max(1, len(mine))]
                    for c in order:
                        row = {
                            "round": rnd,
                            "dataset": d,
                            "transport": tr,
                            "items": items,
                            "num_workers": nw,
                            "mp_context": ctx,
                            "contestant": c.label,
                        }
                        if c.error:
                            row["skipped"] = c.error
                            trials.append(row)
                            continue
                        if c.kind.startswith("lerobot") and mixture_of(roots[d]):
                            row["skipped"] = (
                                "LeRobot has no streaming mixture (its MultiLeRobotDataset needs every "
                                "dataset downloaded, has no weights, and lerobot-train refuses it)"
                            )
                            trials.append(row)
                            continue
                        if c.kind == "lerobot-streaming" and tr != "local":
                            row["skipped"] = (
                                "LeRobot's StreamingLeRobotDataset reads a local folder or the Hub; local only"
                            )
                            trials.append(row)
                            continue
                        spec = {
                            "kind": c.kind,
                            "num_workers": nw,
                            "mp_context": ctx,
                            "uint8": items == "uint8",
                            "batch_size": args.batch_size,
                            "samples": args.samples or DATASETS[d][2],
                            "seed": args.seed + rnd,
                            "repo_id": f"bench/{d}",
                            "options": c.options,
                            "prefetch_factor": args.prefetch_factor,
                            "root": str(roots[d]),
                            "mixture": mixture_of(roots[d]),
                            "delta_timestamps": delta_timestamps(d),
                        }
                        url = f"{server.static_url}{roots[d].name}/" if tr == "http" else None
                        if tr == "http" and c.kind == "ours":
                            spec["root"] = url
                        elif tr == "http":
                            spec.update(download_url=url, files=facts[d].files)
                        if server is not None:
                            server.clear_log()
                        la = load_average()
                        r = c.call(spec, args.trial_timeout_s)
                        row.update(r, load_before=la, load_after=load_average())
                        if server is not None and tr == "http":
                            row["served_bytes"] = _served_bytes(server.log(), cache / "datasets")
                        if r.get("anchors"):
                            row["needed_bytes"] = facts[d].needed_bytes(r["anchors"])
                            row["anchors"] = len(r["anchors"])
                        trials.append(row)
                        atomic_write(Path(args.json), json.dumps({"partial": True, "trials": trials}, default=str))
                        print(
                            f"round {rnd} {d:<9} {tr:<5} {items:<7} w{nw}{':' + ctx if ctx else '':<7} {c.label:<18} "
                            + (
                                row.get("error")
                                or f"{fmt(row.get('steady_samples_per_s'))} samples/s, first batch "
                                f"{fmt(row.get('first_batch_s'), '.2f')} s, {fmt(row.get('cpu_ms_per_sample'), '.1f')} "
                                f"CPU ms/sample, load {la:.1f}"
                            ),
                            file=sys.stderr,
                            flush=True,
                        )
    except BaseException:  # interrupted (SIGTERM, Ctrl-C) or failed: a trial may be running, do not wait for it
        for c in [*contestants, ours_side]:
            c.close(kill=True)
        raise
    finally:
        for c in [*contestants, ours_side]:
            c.close()
        if server is not None:
            server.close()
    if any("error" in t for t in trials) or any("error" in str(v) for v in setup.values()):
        notes.append(f"contestants' logs: {logs}")
    else:
        shutil.rmtree(logs, ignore_errors=True)
    ours = next((c.label for c in contestants if c.kind == "ours"), None)
    summary = summarize(trials, facts, ours)
    meta = {
        "command": "python -m tools.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(t_start)),
        "minutes": (time.time() - t_start) / 60,
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "rounds": args.rounds,
        "batch_size": args.batch_size,
        "prefetch_factor": args.prefetch_factor,
        "remote": {"latency_ms": args.latency_ms, "bandwidth_mbit": args.bandwidth_mbit},
        "load": load_summary(trials),
        "setup": setup,
        "git": git_head(),
    }
    print(format_all(summary, meta, ours or "ours"))
    out = {"meta": meta, "summary": summary, "trials": trials}
    atomic_write(Path(args.json), json.dumps(out, indent=1, default=str))
    if args.markdown:  # for docs/performance.md: no date, commit or goals
        atomic_write(Path(args.markdown), format_all(summary, meta, ours or "ours", for_docs=True))
    return 0


def _from_json(args) -> int:
    """Summary and tables of a saved run (a partial one too: its meta is rebuilt from the trials)."""
    saved = json.loads(Path(args.from_json).read_text())
    trials = saved["trials"]
    cache = Path(args.cache_dir).expanduser()
    facts = {d: DatasetFacts(ensure_dataset(cache, d)) for d in dict.fromkeys(t["dataset"] for t in trials)}
    ours = next((t["contestant"] for t in trials if t["contestant"].startswith("ours")), None)
    summary = summarize(trials, facts, ours)
    meta = saved.get("meta") or {
        "command": f"(partial run, tables from {args.from_json})",
        "date": "?",
        "minutes": float("nan"),
        "cpus": len(os.sched_getaffinity(0)),
        "rounds": 1 + max(t["round"] for t in trials),
        "batch_size": args.batch_size,
        "remote": {"latency_ms": args.latency_ms, "bandwidth_mbit": args.bandwidth_mbit},
        "load": load_summary(trials),
        "setup": {},
        "git": git_head(),
    }
    print(format_all(summary, meta, ours or "ours"))
    if args.markdown:
        atomic_write(Path(args.markdown), format_all(summary, meta, ours or "ours", for_docs=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
