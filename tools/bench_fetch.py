"""Benchmark what a stream fetches from a remote store, and when: before/after in one run.

Serves a generated dataset (``--episodes`` episodes of ``--length`` frames, ``--cameras`` AV1
cameras of ``--size``; built once under ``--cache-dir``) from ``lerobotstream.testing.LoopbackServer``
at ``--latency-ms`` round trip and ``--bandwidth-mbit`` (all connections together), and runs each
contestant (a checkout: ``PATH`` first on ``sys.path``, its own process; ``.`` is this one) on it,
rounds interleaved, the sidecar warm:

- **first batch**: in-process (``num_workers=0``), ``--batch-size`` items, the default pool and a
  pool of 2: seconds from construction (modules imported before) to the first batch, the episodes whose fetch had finished
  by then (``stats()["episodes_fetched"]``) and the distinct episodes of that batch;
- **epochs**: ``repeat=True``, ``--epochs`` epochs' samples with ``num_workers`` 0 and 2 (a
  ``DataLoader``): bytes the store served (its request log, every GET) / bytes of the dataset's
  ``data/`` and ``videos/`` files (the dataset is smaller than its byte budget);
- **disk cache** (``--disk``, this checkout only): in-process, ``repeat=True``, a byte budget of a
  quarter of the MP4 bytes, ``cache_dir`` with a limit of twice the dataset, then of half of it:
  MP4 bytes from the store, the disk cache and memory per epoch (``stats()["bytes_by_epoch"]``)
  and the cache's size after the run.

    python -m tools.bench_fetch --before /tmp/before          # before/after (a copy of the old tree)
    python -m tools.bench_fetch --rounds 1 --epochs 2         # this checkout only, shorter
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAMERAS = ("observation.images.front", "observation.images.wrist", "observation.images.top", "observation.images.side")

CHILD = r"""
import json, sys, time
cfg = json.loads(sys.argv[1])
from lerobotstream.dataset._dataset import StreamingLeRobotDataset
kw = dict(root=cfg["url"], batch_size=cfg["batch"], seed=cfg["seed"])
if cfg["mode"] == "warm":
    StreamingLeRobotDataset(**kw)
    print(json.dumps({}))
elif cfg["mode"] == "first":
    import lerobotstream.decode._decoder, lerobotstream.parquet, lerobotstream.planner, torchcodec.decoders  # imports: not timed
    t0 = time.perf_counter()
    ds = StreamingLeRobotDataset(**kw, episode_pool_size=cfg["pool"])
    eps = []
    it = iter(ds)
    for item in it:
        eps.append(int(item["episode_index"]))
        if len(eps) == cfg["batch"]:  # measured here: closing the iterator waits for fetches in flight
            dt, t_first, st = time.perf_counter() - t0, time.time(), ds.stats()
            break
    print(json.dumps({"first_batch_s": dt, "t_first": t_first, "fetched": st["episodes_fetched"],
                      "started": st["cache"]["fetches"], "batch_episodes": len(set(eps))}))
elif cfg["mode"] == "disk":
    ds = StreamingLeRobotDataset(**kw, repeat=True, byte_budget_gb=cfg["budget"] / 2**30,
                                 cache_dir=cfg["cache_dir"], cache_limit_gb=cfg["limit"] / 2**30)
    for n, item in enumerate(ds, 1):
        if n == cfg["epochs"] * cfg["frames"]:
            st = ds.stats()
            break
    by = st["bytes_by_epoch"]
    print(json.dumps({"store_by_epoch": [by[e]["store_bytes"] for e in range(cfg["epochs"])],
                      "disk_by_epoch": [by[e]["disk_cache_bytes"] for e in range(cfg["epochs"])],
                      "reused_by_epoch": [by[e]["reused_bytes"] for e in range(cfg["epochs"])],
                      "needed": by[0]["needed_bytes"], "evictions": st["cache"]["evictions"]}))
else:
    from torch.utils.data import DataLoader
    nw = cfg["num_workers"]
    ds = StreamingLeRobotDataset(**kw, repeat=True, num_workers=nw)
    want = cfg["epochs"] * cfg["frames"]
    n = 0
    dl = DataLoader(ds, batch_size=cfg["batch"], num_workers=nw, collate_fn=lambda b: len(b))
    for k in dl:
        n += k
        if n >= want:
            break
    out = {"samples": n}
    if nw == 0:
        st = ds.stats()
        out.update(fetches=st["cache"]["fetches"], reuses=st["cache"].get("reuses"))
    print(json.dumps(out))
"""


def build(cache_dir: Path, a: argparse.Namespace) -> Path:
    """The generated dataset of these settings, built once (atomically) under ``cache_dir``."""
    from lerobotstream.testing import make_dataset

    w, h = a.size
    out = cache_dir / f"fetch-e{a.episodes}-l{a.length}-c{a.cameras}-{w}x{h}"
    if (out / "meta" / "info.json").exists():
        return out
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build.", dir=cache_dir))
    make_dataset(
        tmp / "d",
        episode_lengths=[a.length] * a.episodes,
        codec="av1",
        gop=2,
        cameras=tuple((CAMERAS[i], w, h) for i in range(a.cameras)),
        episodes_per_video_file=max(1, a.episodes // 4),
        repo_id="bench/fetch",
    )
    try:
        os.replace(tmp / "d", out)
    except OSError:  # another run built it first
        pass
    return out


def served_bytes(log: list[dict], folder: Path, until: float | None = None) -> int:
    """Body bytes of every logged GET (ranges as asked, whole files by size), up to ``until``."""
    total = 0
    for e in log:
        if e["method"] != "GET" or (until is not None and e["t"] > until):
            continue
        rel = e["path"].split("/static/", 1)[-1]
        size = (folder.parent / rel).stat().st_size if (folder.parent / rel).is_file() else 0
        if e["range"]:
            a, b = e["range"].split("=", 1)[1].split("-")
            total += (min(int(b), size - 1) if b else size - 1) - int(a) + 1
        else:
            total += size
    return total


def run_child(tree: Path, cfg: dict, timeout: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    p = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(cfg)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if p.returncode:
        raise RuntimeError(f"{tree}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=None, help="a checkout of the old code (run side by side with this one)")
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--length", type=int, default=24)
    ap.add_argument("--cameras", type=int, default=4)
    ap.add_argument("--size", type=int, nargs=2, default=(96, 72))
    ap.add_argument("--latency-ms", type=float, default=100.0)
    ap.add_argument("--bandwidth-mbit", type=float, default=16.0)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "lerobotstream-bench-fetch"))
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument("--disk", action="store_true", help="run the disk-cache trials (this checkout)")
    ap.add_argument("--no-first", action="store_true", help="skip the first-batch and epochs trials")
    a = ap.parse_args(argv)
    from lerobotstream.testing import LoopbackServer

    folder = build(Path(a.cache_dir), a)
    files = sum(f.stat().st_size for d in ("data", "videos") for f in (folder / d).rglob("*") if f.is_file())
    trees = {"after": ROOT, **({"before": Path(a.before).resolve()} if a.before else {})}
    server = LoopbackServer.start(
        {"static": str(folder.parent), "latency_s": a.latency_ms / 1e3, "bandwidth_bps": a.bandwidth_mbit * 1e6 / 8}
    )
    rows: list[dict] = []
    try:
        base = {"url": f"{server.static_url}{folder.name}/", "batch": a.batch_size, "seed": a.seed}
        for tree in trees.values():
            run_child(tree, {**base, "mode": "warm"}, a.timeout_s)  # the sidecar, built once
        for rnd in range(a.rounds):
            names = list(trees)[rnd % len(trees) :] + list(trees)[: rnd % len(trees)]
            for name in names if not a.no_first else []:
                for pool in (None, 2):
                    server.clear_log()
                    r = run_child(trees[name], {**base, "mode": "first", "pool": pool}, a.timeout_s)
                    r["store_bytes_before_first"] = served_bytes(server.log(), folder, r.pop("t_first"))
                    rows.append({"round": rnd, "tree": name, "trial": f"first pool={pool or 'default'}", **r})
                for nw in (0, 2):
                    server.clear_log()
                    cfg = {
                        **base,
                        "mode": "epochs",
                        "num_workers": nw,
                        "epochs": a.epochs,
                        "frames": a.episodes * a.length,
                    }
                    r = run_child(trees[name], cfg, a.timeout_s)
                    r["store_bytes"] = served_bytes(server.log(), folder)
                    r["store_per_file_byte"] = r["store_bytes"] / files
                    rows.append({"round": rnd, "tree": name, "trial": f"{a.epochs} epochs num_workers={nw}", **r})
                print(json.dumps(rows[-4:]), file=sys.stderr, flush=True)
        if a.disk:
            from lerobotstream.disk_cache import DiskCache

            mp4 = sum(f.stat().st_size for f in (folder / "videos").rglob("*") if f.is_file())
            for label, limit in (("limit 2x dataset", 2 * files), ("limit dataset/2", files // 2)):
                cache_dir = Path(tempfile.mkdtemp(prefix="bench-fetch-cache-"))
                cfg = {
                    **base,
                    "mode": "disk",
                    "epochs": a.epochs,
                    "frames": a.episodes * a.length,
                    "budget": mp4 // 4,
                    "cache_dir": str(cache_dir),
                    "limit": limit,
                }
                r = run_child(ROOT, cfg, a.timeout_s)
                r.update(
                    trial=f"disk cache, budget MP4/4, {label}",
                    limit=limit,
                    cache_bytes=DiskCache(cache_dir, limit).total_bytes(),
                )
                rows.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
    finally:
        server.close()
    print(
        f"dataset: {a.episodes} episodes x {a.length} frames, {a.cameras} cameras {a.size[0]}x{a.size[1]} AV1, "
        f"data+videos {files / 2**20:.2f} MiB; store {a.latency_ms:g} ms, {a.bandwidth_mbit:g} Mbit/s; "
        f"batch {a.batch_size}; medians of {a.rounds} rounds"
    )
    print("| code | trial | first batch s | episodes fetched by then | episodes in the batch | store bytes / files |")
    print("|---|---|---|---|---|---|")
    for name in trees:
        for trial in dict.fromkeys(r["trial"] for r in rows if "tree" in r):
            rs = [r for r in rows if r.get("tree") == name and r["trial"] == trial]
            if not rs:
                continue
            if trial.startswith("first"):
                med = {k: statistics.median(r[k] for r in rs) for k in ("first_batch_s", "fetched", "batch_episodes")}
                print(
                    f"| {name} | {trial} | {med['first_batch_s']:.2f} | {med['fetched']:g} | {med['batch_episodes']:g} | |"
                )
            else:
                ratio = statistics.median(r["store_per_file_byte"] for r in rs)
                print(f"| {name} | {trial} | | | | {ratio:.2f}x |")
    for r in rows:
        if r.get("trial", "").startswith("disk"):
            print(
                f"{r['trial']}: MP4 bytes per epoch from the store {r['store_by_epoch']}, from the disk cache "
                f"{r['disk_by_epoch']}, from memory {r['reused_by_epoch']} (needed {r['needed']} per epoch); "
                f"cache {r['cache_bytes']} bytes under a limit of {r['limit']}"
            )
    for name in trees if not a.no_first else []:
        fb = {
            p: statistics.median(r["first_batch_s"] for r in rows if r["tree"] == name and r["trial"] == p)
            for p in ("first pool=default", "first pool=2")
        }
        print(f"{name}: first batch, default pool / pool of 2 = {fb['first pool=default'] / fb['first pool=2']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
