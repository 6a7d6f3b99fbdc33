"""Time to the first training batch over a remote store, and the requests it takes.

Serves a dataset (default: the bundled ``data/g1_v30``) from ``lerobotstream.testing.LoopbackServer`` with a
round trip per request and per new connection (``--latency-ms``, default 50) and a shared
bandwidth cap (``--bandwidth-mbit``, default 400), then for each build of lerobotstream
(``--variant LABEL=PYTHONPATH``; default: this checkout) and each DataLoader setting
(``--workers 0,2:fork,2:spawn``) runs trials, interleaved, each in a fresh process that has
already imported torch, torchcodec and lerobotstream (as a training script has):

- *construct s*: ``StreamingLeRobotDataset(root=URL)`` (metadata, warm sidecar, imports);
- *first batch s*: from the constructor's start to the first DataLoader batch;
- *worker start s* (workers only): from ``iter(loader)`` to the last worker's ``worker_init_fn``
  (process start, imports, unpickling the dataset);
- requests the store logged, by kind (``HEAD``, listing ``GET``s of folders, ``GET``s of
  ``meta/``, ``data/`` and ``videos/``), during construction and up to the first batch, and the
  number of round trips on the critical path (requests that were not overlapped by another).

Medians over ``--rounds``. Counts come from the server's log, never from timing. Example::

    python -m tools.microbench first-batch                                   # this checkout
    python -m tools.microbench first-batch --variant before=/tmp/before --variant after=.
    python -m tools.microbench first-batch --workers 2:spawn --importtime /tmp/imports.txt

``--importtime FILE`` runs one extra spawn trial with ``PYTHONPROFILEIMPORTTIME=1`` and writes the
workers' import profile (``python -X importtime`` format) to ``FILE``, plus a summary of the
largest top-level imports on stdout.
"""

from __future__ import annotations

# Only the standard library at module level: a trial runs this file by path (the variant's
# lerobotstream first on PYTHONPATH, whatever ``tools/`` that checkout has), a spawned DataLoader
# worker re-imports it (it is the trial's __main__), and its start-up must not pay for anything here.
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULT_PREFIX = "@@first-batch "


def _control(url: str, what: str):
    import urllib.request

    with urllib.request.urlopen(f"{url}/__control__/{what}", timeout=30) as r:
        return json.loads(r.read() or b"null")


def classify(entry: dict) -> str:
    """``HEAD``, ``list`` (a folder page), ``GET meta`` / ``GET data`` / ``GET videos`` / ``GET other``."""
    if entry["method"] == "HEAD":
        return "HEAD"
    path = entry["path"]
    if path.endswith("/"):
        return "list"
    for part in ("meta", "data", "videos"):
        if f"/{part}/" in path:
            return f"GET {part}"
    return "GET other"


def critical_round_trips(entries: list[dict], latency_s: float) -> int:
    """Requests not overlapped by an earlier one: a request counts when it arrived later than one
    round trip after the previous counted one (the server logs arrival times after its latency)."""
    n, last = 0, None
    for e in sorted(entries, key=lambda e: e["t"]):
        if last is None or e["t"] - last >= 0.5 * latency_s:
            n += 1
            last = e["t"]
    return n


def _worker_init(worker_id: int) -> None:
    path = os.environ.get("BENCH_FIRST_BATCH_MARKS")
    if path:
        with open(os.path.join(path, f"w{worker_id}-{os.getpid()}"), "w") as f:
            f.write(repr(time.time()))


class _FirstItemStats:
    """Iterates a dataset; its first item (in each process) carries ``ds.stats()`` as JSON under
    ``__stats__`` (a DataLoader worker's setup times come back with the first batch)."""

    def __init__(self, ds) -> None:
        self.ds = ds

    def __iter__(self):
        first = True
        t_iter = time.time()
        for item in self.ds:
            if first:
                st = {k: v for k, v in self.ds.stats().items() if isinstance(v, (int, float))}
                st["iter_to_first_item_s"] = time.time() - t_iter
                st["pid"] = os.getpid()
                item["__stats__"] = json.dumps(st)
                first = False
            else:
                item["__stats__"] = ""
            yield item


def __getattr__(name: str):
    """``FirstItemStats``: :class:`_FirstItemStats` as a torch ``IterableDataset``, made on first use
    (so that this module imports no torch), and found by name when a spawned worker unpickles it."""
    if name == "FirstItemStats":
        from torch.utils.data import IterableDataset

        cls = type("FirstItemStats", (_FirstItemStats, IterableDataset), {"__module__": __name__})
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def trial(spec: dict) -> dict:
    """One run inside a fresh process: imports first (not timed), then construct + first batch."""
    import torch  # noqa: F401
    import torchcodec.decoders  # noqa: F401
    from torch.utils.data import DataLoader

    import lerobotstream
    from lerobotstream import StreamingLeRobotDataset

    nw, ctx = int(spec["num_workers"]), spec.get("context")
    marks = tempfile.mkdtemp(prefix="first-batch-marks-")
    os.environ["BENCH_FIRST_BATCH_MARKS"] = marks
    _control(spec["server"], "clear_log")
    t0_wall, t0 = time.time(), time.perf_counter()
    ds = StreamingLeRobotDataset(
        root=spec["root"], return_uint8=True, max_num_shards=max(1, nw), batch_size=spec["batch_size"], seed=0
    )
    t_construct = time.perf_counter() - t0
    t_construct_wall = time.time()
    kw = dict(batch_size=spec["batch_size"], num_workers=nw)
    if spec.get("importtime"):
        os.environ["PYTHONPROFILEIMPORTTIME"] = "1"  # the workers' imports only (the parent's are done)
    if nw:
        kw.update(multiprocessing_context=ctx, worker_init_fn=_worker_init, persistent_workers=False)
    loader = DataLoader(__getattr__("FirstItemStats")(ds), **kw)
    t_iter_wall = time.time()
    it = iter(loader)
    batch = next(it)
    t_first = time.perf_counter() - t0
    t_first_wall = time.time()
    n = int(batch["index"].shape[0])
    worker_stats = [json.loads(x) for x in batch.get("__stats__", []) if x]
    del batch, it, loader
    log = [e for e in _control(spec["server"], "log") if e["t"] <= t_first_wall]
    starts = sorted(float(Path(marks, f).read_text()) for f in os.listdir(marks))
    shutil.rmtree(marks, ignore_errors=True)
    by_phase: dict[str, dict[str, int]] = {"construct": {}, "first_batch": {}}
    for e in log:
        phase = "construct" if e["t"] <= t_construct_wall else "first_batch"
        k = classify(e)
        by_phase[phase][k] = by_phase[phase].get(k, 0) + 1
    lat = float(spec["latency_s"])
    setup = {k: v for k, v in (getattr(ds, "_setup", {}) or {}).items() if isinstance(v, float)}
    return {
        "construct_s": t_construct,
        "first_batch_s": t_first,
        "items": n,
        "worker_start_s": (starts[-1] - t_iter_wall) if starts else None,
        "requests": by_phase,
        "requests_construct": sum(by_phase["construct"].values()),
        "requests_total": len(log),
        "round_trips_construct": critical_round_trips([e for e in log if e["t"] <= t_construct_wall], lat),
        "round_trips_total": critical_round_trips(log, lat),
        "setup_s": setup,
        "lerobotstream_file": lerobotstream.__file__,
        "worker_stats": worker_stats,
        "log": [{"t": round(e["t"] - t0_wall, 4), "m": e["method"], "p": e["path"], "r": e["range"]} for e in log],
    }


def _run_child(python: str, pythonpath: str, spec: dict, stderr_path: str | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(ROOT)) if p)
    err = open(stderr_path, "w") if stderr_path else subprocess.PIPE
    try:
        p = subprocess.run(
            [python, str(Path(__file__).resolve()), "--trial", json.dumps(spec)],
            cwd=str(ROOT),
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=600,
        )
    finally:
        if stderr_path:
            err.close()
    for line in p.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    return {"error": f"rc={p.returncode}: {(p.stderr or '')[-2000:]}"}


def summarize_importtime(path: str, top: int = 15) -> list[tuple[str, float]]:
    """Largest top-level imports in a ``-X importtime`` log: (module, cumulative ms summed over the
    processes that wrote it)."""
    rows: dict[str, float] = {}
    for line in Path(path).read_text().splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:") :].split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2][1:]
        if name.startswith(" "):
            continue  # imported by another module: inside its parent's cumulative time
        rows[name] = rows.get(name, 0.0) + int(parts[1]) / 1e3
    return sorted(rows.items(), key=lambda kv: -kv[1])[:top]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default=str(ROOT / "data" / "g1_v30"), help="a local v3 dataset folder")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="LABEL=PYTHONPATH of a lerobotstream build (repeatable; default: this checkout)",
    )
    ap.add_argument("--workers", default="0,2:fork,2:spawn", help="N[:context],...")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--bandwidth-mbit", type=float, default=400.0)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", help="write every trial here")
    ap.add_argument("--log", action="store_true", help="print the request log of each setting's last trial")
    ap.add_argument("--importtime", help="also profile a spawn trial's imports into this file")
    ap.add_argument("--trial", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.trial:
        res = trial(json.loads(args.trial))
        print(RESULT_PREFIX + json.dumps(res), flush=True)
        return 0
    from lerobotstream.testing import LoopbackServer  # the orchestrator: this checkout's (python -m, repo root)

    variants = [v.split("=", 1) for v in args.variant] or [["this", str(ROOT)]]
    variants = [(label, str(Path(p).resolve())) for label, p in variants]
    settings = []
    for w in args.workers.split(","):
        n, _, ctx = w.partition(":")
        settings.append((int(n), (ctx or "spawn") if int(n) else None))
    tmp = Path(tempfile.mkdtemp(prefix="bench-first-batch-"))
    static = tmp / "static"
    name = Path(args.dataset).name
    shutil.copytree(args.dataset, static / name)
    env_home = {"HF_LEROBOT_HOME": str(tmp / "home")}
    os.environ.update(env_home)
    server = LoopbackServer.start(
        {"static": str(static), "latency_s": args.latency_ms / 1e3, "bandwidth_bps": args.bandwidth_mbit * 1e6 / 8}
    )
    trials: list[dict] = []
    try:
        base = {
            "server": server.url,
            "root": f"{server.static_url}{name}/",
            "batch_size": args.batch_size,
            "latency_s": args.latency_ms / 1e3,
        }
        for label, path in variants:  # warm sidecar: built once per variant, before the rounds
            r = _run_child(args.python, path, {**base, "num_workers": 0})
            print(f"warm-up {label}: {r.get('error') or 'ok ({:.2f} s)'.format(r['first_batch_s'])}", file=sys.stderr)
        for rnd in range(args.rounds):
            for nw, ctx in settings:
                order = variants if rnd % 2 == 0 else variants[::-1]
                for label, path in order:
                    r = _run_child(args.python, path, {**base, "num_workers": nw, "context": ctx})
                    r.update(variant=label, workers=f"{nw}:{ctx}" if nw else "0", round=rnd)
                    trials.append(r)
                    print(
                        f"  round {rnd} {label} workers={r['workers']}: "
                        + (
                            r.get("error")
                            or f"construct {r['construct_s']:.2f} s, first batch "
                            f"{r['first_batch_s']:.2f} s, {r['requests_total']} requests"
                        ),
                        file=sys.stderr,
                    )
        if args.importtime:
            label, path = variants[-1]
            r = _run_child(
                args.python,
                path,
                {**base, "num_workers": 2, "context": "spawn", "importtime": True},
                stderr_path=args.importtime,
            )
            print(
                f"importtime trial ({label}): "
                + (
                    r.get("error")
                    or f"first batch {r['first_batch_s']:.2f} s, worker start {r['worker_start_s']:.2f} s"
                ),
                file=sys.stderr,
            )
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"\nremote store: {args.latency_ms:g} ms round trip, {args.bandwidth_mbit:g} Mbit/s; {args.rounds} rounds, "
        f"medians; batch {args.batch_size}; dataset {name}\n"
    )
    print(
        "| variant | workers | construct s | first batch s | worker start s | requests: construct / to first batch"
        " | round trips: construct / to first batch | requests by kind (to first batch) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for nw, ctx in settings:
        wl = f"{nw}:{ctx}" if nw else "0"
        for label, _ in variants:
            rs = [t for t in trials if t.get("variant") == label and t.get("workers") == wl and "error" not in t]
            if not rs:
                print(f"| {label} | {wl} | failed | | | | | |")
                continue
            med = lambda k, rs=rs: statistics.median(t[k] for t in rs)  # noqa: E731
            ws = [t["worker_start_s"] for t in rs if t["worker_start_s"] is not None]
            kinds: dict[str, int] = {}
            last = rs[-1]
            for ph in last["requests"].values():
                for k, v in ph.items():
                    kinds[k] = kinds.get(k, 0) + v
            kinds_s = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
            print(
                f"| {label} | {wl} | {med('construct_s'):.2f} | {med('first_batch_s'):.2f} | "
                f"{statistics.median(ws) if ws else float('nan'):.2f} | {last['requests_construct']} / "
                f"{last['requests_total']} | {last['round_trips_construct']} / {last['round_trips_total']} | {kinds_s} |"
            )
            if args.log:
                for e in last["log"]:
                    print(f"    {e['t']:7.3f} {e['m']:4} {e['p']} {e['r'] or ''}")
    if args.importtime:
        print(
            f"\nspawn workers' imports (-X importtime, {args.importtime}), top-level cumulative ms, summed over "
            "the processes:"
        )
        for mod, ms in summarize_importtime(args.importtime):
            print(f"  {mod:40s} {ms:8.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(trials, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
