"""Side-by-side loader benchmark: lerobotstream vs map-style vs LeRobot vs the decode limit, one run.

For every benchmark dataset (built once by ``tools/make_dataset.py`` and cached under
``--cache-dir``) and every transport (local disk; loopback HTTP through ``tests/_loopback_server.py``)
the methods run **interleaved** (rep 1: ours, map-style, LeRobot..., limit; rep 2: ...), each through
a real ``DataLoader`` with the same ``num_workers`` and batch size, for ``--steps`` batches:

- ``ours``: :class:`lerobotstream.StreamingLeRobotDataset` (profiled with
  :func:`lerobotstream.profile.profile_dataset`: bytes fetched / needed come with it);
- ``mapstyle``: the map-style baseline LeRobot uses: one torchcodec decoder per (worker, full video
  file, exact seek mode, which scans the whole file at open), one seek per sample, random sampler;
  over HTTP the decoder reads through a file object on the same byte source;
- ``lerobot`` / ``lerobot-streaming``: LeRobot's own ``LeRobotDataset`` / ``StreamingLeRobotDataset``
  run by ``.venv-lerobot/bin/python`` (LeRobot 0.4.4 cannot share our venv); local disk only;
  skipped with a note when that interpreter or LeRobot is missing;
- ``limit``: the decode limit: one sequential ``get_frames_in_range`` per (episode, camera) over
  the same files, same workers (uint8 frames, no item assembly).

The figure of merit is **steady frames/s** (decoded camera frames delivered per second after the
first batch; the first batch's latency is reported apart). Prints ratios ours / peer and
ours / limit, writes ``--json`` and ``--png``. Timings on a shared machine are noisy: repeat with
``--reps`` and read the median.

    python tools/bench.py                 # default datasets, a few minutes on 2 cores
    python tools/bench.py --quick         # one tiny dataset (the test runs this)
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LEROBOT_PYTHON = ROOT / ".venv-lerobot" / "bin" / "python"
REPO_ID = "lerobotstream/generated"

# name, codec, gop, cameras, (w, h), episodes, frames per episode
QUICK = [("av1-g2-1cam-64x48", "av1", 2, 1, (64, 48), 6, 20)]
DEFAULT = [
    ("av1-g2-1cam-320x240", "av1", 2, 1, (320, 240), 10, 60),
    ("av1-g2-3cam-320x240", "av1", 2, 3, (320, 240), 10, 60),
    ("av1-g2-1cam-640x480", "av1", 2, 1, (640, 480), 10, 60),
    ("h264-bf2-3cam-640x480", "h264", None, 3, (640, 480), 10, 60),
]
FULL = [(f"{c}-{'g2' if c == 'av1' else 'bf2'}-{n}cam-{w}x{h}", c, 2 if c == "av1" else None, n, (w, h), 10, 60)
        for c in ("av1", "h264") for n in (1, 3) for (w, h) in ((320, 240), (640, 480))]
CAMERA_NAMES = ("observation.images.front", "observation.images.wrist", "observation.images.top")


# --- datasets --------------------------------------------------------------------------------------
def ensure_dataset(cache_dir: Path, cfg: tuple) -> Path:
    """Build (once) the dataset of ``cfg`` under ``cache_dir/<name>`` atomically and return its path."""
    from tools.make_dataset import make_dataset

    name, codec, gop, ncam, (w, h), neps, length = cfg
    out = cache_dir / name
    if (out / "meta" / "info.json").exists():
        return out
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=cache_dir))
    make_dataset(tmp / "d", episode_lengths=[length] * neps, codec=codec, gop=gop,
                 cameras=tuple((CAMERA_NAMES[i], w, h) for i in range(ncam)), repo_id=REPO_ID)
    try:
        os.replace(tmp / "d", out)
    except OSError:  # another run built it first
        pass
    shutil.rmtree(tmp, ignore_errors=True)
    return out


# --- timing (shared by every method, also inside the LeRobot interpreter) --------------------------
def time_loader(loader: Any, steps: int, count: Callable[[Any], tuple[int, int]], *, max_frames: int | None = None) -> dict:
    """Draw up to ``steps`` batches (or until ``max_frames``); ``count(batch) -> (samples, frames)``.

    Returns ``first_batch_s`` (from ``iter``), ``wall_s``, ``samples``, ``frames`` and the steady
    rates ``steady_frames_per_s`` / ``steady_samples_per_s`` (after the first batch).
    """
    t0 = time.perf_counter()
    it = iter(loader)
    first = t_first = None
    samples = frames = s_after = f_after = 0
    for _ in range(steps):
        try:
            batch = next(it)
        except StopIteration:
            break
        s, f = count(batch)
        now = time.perf_counter()
        if first is None:
            first, t_first = now - t0, now
        else:
            s_after, f_after = s_after + s, f_after + f
        samples, frames = samples + s, frames + f
        if max_frames is not None and frames >= max_frames:
            break
    end = time.perf_counter()
    del it
    dt = (end - t_first) if t_first is not None else 0.0
    return {"first_batch_s": first, "wall_s": end - t0, "samples": samples, "frames": frames,
            "steady_frames_per_s": f_after / dt if dt > 0 and f_after else None,
            "steady_samples_per_s": s_after / dt if dt > 0 and s_after else None}


def _count_items(video_keys: list[str]) -> Callable[[Any], tuple[int, int]]:
    import math

    def count(batch):
        n = len(batch["index"]) if "index" in batch else len(next(iter(batch.values())))
        f = sum(math.prod(batch[k].shape[:-3]) for k in video_keys if k in batch)
        return n, f
    return count


# --- map-style baseline and decode limit -------------------------------------------------------------
class SourceFile(io.RawIOBase):
    """Seekable read-only file object over ``ByteSource.read`` (each read is one range request)."""

    def __init__(self, source: Any, path: str) -> None:
        self.source, self.path, self.pos, self.size = source, path, 0, source.size(path)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, off: int, whence: int = 0) -> int:
        self.pos = off if whence == 0 else self.pos + off if whence == 1 else self.size + off
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        if n <= 0:
            return b""
        data = self.source.read(self.path, self.pos, n)
        self.pos += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


class _PerProcess:
    """Source and decoders opened lazily per process (never inherited across a fork)."""

    def __init__(self, root: str) -> None:
        self.root, self._pid, self._src, self._dec = root, None, None, {}

    def decoder(self, path: str, seek_mode: str):
        from torchcodec.decoders import VideoDecoder

        from lerobotstream.sources import open_source

        if self._pid != os.getpid():
            self._pid, self._src, self._dec = os.getpid(), open_source(self.root), {}
        d = self._dec.get(path)
        if d is None:
            local = self._src.local_path(path)
            d = self._dec[path] = VideoDecoder(str(local) if local is not None else SourceFile(self._src, path),
                                               seek_mode=seek_mode)
        return d


def _rows(root: str):
    """Metadata and every row (episode_index, frame_index, index, timestamp, state, action) as numpy."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lerobotstream.meta import DatasetMeta
    from lerobotstream.sources import open_source

    src = open_source(root)
    meta = DatasetMeta.load(src)
    paths = sorted({e.data_path for e in meta.episodes})
    table = pa.concat_tables([pq.read_table(io.BytesIO(src.read_file(p))) for p in paths]).sort_by("index")
    cols = {c: table.column(c).to_numpy() for c in ("episode_index", "frame_index", "index", "timestamp")}
    for c in ("observation.state", "action"):
        cols[c] = __import__("numpy").array(table.column(c).to_pylist(), dtype="float32")
    return meta, cols


class MapStyleBaseline:
    """Map-style dataset: item ``i`` = row ``i``; each camera frame by one seek in a full-file decoder."""

    def __init__(self, root: str) -> None:
        self.meta, self.cols = _rows(root)
        self.video_keys = list(self.meta.video_keys)
        self.proc = _PerProcess(root)

    def __len__(self) -> int:
        return len(self.cols["index"])

    def __getitem__(self, i: int) -> dict:
        import torch

        ep = int(self.cols["episode_index"][i])
        info = self.meta.episode(ep)
        item = {k: torch.as_tensor(v[i]) for k, v in self.cols.items()}
        for cam in self.video_keys:
            v = info.videos[cam]
            ts = float(v.from_timestamp + self.cols["timestamp"][i])
            frames = self.proc.decoder(v.path, "exact").get_frames_played_at([ts]).data
            item[cam] = frames[0].to(torch.float32) / 255
        return item


class DecodeLimit:
    """Item ``k`` = every frame of one (episode, camera), one sequential range decode (uint8)."""

    def __init__(self, root: str) -> None:
        from lerobotstream.meta import DatasetMeta
        from lerobotstream.sources import open_source

        meta = DatasetMeta.load(open_source(root))
        self.pieces = [(v.path, round(v.from_timestamp * meta.fps), e.length)
                       for e in meta.episodes for v in e.videos.values()]
        self.proc = _PerProcess(root)

    def __len__(self) -> int:
        return len(self.pieces)

    def __getitem__(self, k: int):
        path, start, n = self.pieces[k]
        return self.proc.decoder(path, "approximate").get_frames_in_range(start, start + n).data


# --- methods -------------------------------------------------------------------------------------------
def run_ours(root: str, args) -> dict:
    from lerobotstream.dataset import StreamingLeRobotDataset
    from lerobotstream.profile import build_report, needed_bytes, profile_dataset

    ds = StreamingLeRobotDataset(root=root, decode_threads=args.decode_threads)
    raw = profile_dataset(ds, num_workers=args.num_workers, batch_size=args.batch_size, steps=args.steps)
    rep = build_report(raw, ds, needed=needed_bytes(ds, raw["anchors"]))
    th = rep["throughput"]
    return {"first_batch_s": rep["latency"]["first_batch_s"], "wall_s": th["wall_s"], "samples": th["samples"],
            "frames": th["frames"], "steady_frames_per_s": th["steady_frames_per_s"],
            "steady_samples_per_s": th["steady_samples_per_s"],
            "fetched_over_needed": rep["bytes"].get("fetched_over_needed"),
            "peak_pss_sum_bytes": rep["memory"].get("peak_pss_sum_bytes")}


def run_mapstyle(root: str, args) -> dict:
    import torch
    from torch.utils.data import DataLoader

    ds = MapStyleBaseline(root)
    loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.num_workers, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed))
    return time_loader(loader, args.steps, _count_items(ds.video_keys))


def run_limit(root: str, args, max_frames: int) -> dict:
    from torch.utils.data import DataLoader

    ds = DecodeLimit(root)
    loader = DataLoader(ds, batch_size=None, num_workers=args.num_workers)
    return time_loader(loader, len(ds), lambda b: (0, int(b.shape[0])), max_frames=max_frames)


def run_lerobot(root: str, args, kind: str) -> dict:
    """LeRobot's dataset in its own interpreter (``--lerobot-trial``); ``{"skipped": why}`` if unavailable."""
    if not LEROBOT_PYTHON.exists():
        return {"skipped": f"{LEROBOT_PYTHON} not found (make setup-lerobot)"}
    spec = {"root": root, "kind": kind, "steps": args.steps, "batch_size": args.batch_size,
            "num_workers": args.num_workers, "seed": args.seed}
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONPATH="")
    proc = subprocess.run([str(LEROBOT_PYTHON), __file__, "--lerobot-trial", json.dumps(spec)], capture_output=True,
                          text=True, env=env, timeout=args.trial_timeout_s, cwd=str(ROOT / "tools"))
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"skipped": f"LeRobot {kind} failed (rc {proc.returncode}): {proc.stderr.strip().splitlines()[-1:] or '?'}"}


def lerobot_trial(spec: dict) -> dict:
    """Runs inside ``.venv-lerobot``: LeRobot's dataset through a DataLoader, same timing."""
    try:
        import torch
        from torch.utils.data import DataLoader

        if spec["kind"] == "lerobot":
            from lerobot.datasets.lerobot_dataset import LeRobotDataset

            ds = LeRobotDataset(REPO_ID, root=spec["root"], video_backend="torchcodec")
            loader = DataLoader(ds, batch_size=spec["batch_size"], num_workers=spec["num_workers"], shuffle=True,
                                generator=torch.Generator().manual_seed(spec["seed"]))
        else:
            from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset

            ds = StreamingLeRobotDataset(REPO_ID, root=spec["root"], seed=spec["seed"])
            loader = DataLoader(ds, batch_size=spec["batch_size"], num_workers=spec["num_workers"])
        keys = list(ds.meta.video_keys)
        return time_loader(loader, spec["steps"], _count_items(keys))
    except Exception as exc:  # noqa: BLE001 - reported as a skip note by the parent
        return {"skipped": f"LeRobot {spec['kind']}: {type(exc).__name__}: {str(exc)[:300]}"}


# --- driver ----------------------------------------------------------------------------------------------
def _served_bytes(log: list[dict], base: Path) -> int:
    total = 0
    for e in log:
        if e.get("method") != "GET":
            continue
        if e.get("range"):
            a, b = e["range"].split("=")[1].split("-")
            total += int(b) - int(a) + 1
        else:
            p = base / e["path"].split("/static/", 1)[-1]
            total += p.stat().st_size if p.is_file() else 0
    return total


def _fmt(x, spec=".0f") -> str:
    return "-" if x is None else format(x, spec)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one tiny dataset, few steps (for tests)")
    ap.add_argument("--all", action="store_true", help="all 8 datasets (codec x cameras x size)")
    ap.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "lerobotstream" / "bench"))
    ap.add_argument("--num-workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=None, help="batches per run (default 25; quick 4)")
    ap.add_argument("--decode-threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--transports", default="local,http")
    ap.add_argument("--methods", default="ours,mapstyle,lerobot,lerobot-streaming,limit")
    ap.add_argument("--trial-timeout-s", type=float, default=300)
    ap.add_argument("--json", default="bench.json")
    ap.add_argument("--png", default="bench.png")
    ap.add_argument("--lerobot-trial", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.lerobot_trial:
        print(json.dumps(lerobot_trial(json.loads(args.lerobot_trial))))
        return 0
    args.steps = args.steps or (4 if args.quick else 25)
    configs = QUICK if args.quick else FULL if args.all else DEFAULT
    methods = [m for m in args.methods.split(",") if m]
    transports = [t for t in args.transports.split(",") if t]
    cache = Path(args.cache_dir)
    t_build = time.perf_counter()
    roots = {cfg[0]: ensure_dataset(cache, cfg) for cfg in configs}
    print(f"datasets ready in {time.perf_counter() - t_build:.1f} s under {cache}")
    from tests._loopback_server import LoopbackServer

    server = LoopbackServer.start({"static": str(cache)}) if "http" in transports else None
    results: list[dict] = []
    try:
        for rep in range(args.reps):
            for cfg in configs:
                for transport in transports:
                    root = str(roots[cfg[0]]) if transport == "local" else f"{server.static_url}{cfg[0]}/"
                    ours_frames = None
                    for method in methods:
                        row = {"dataset": cfg[0], "transport": transport, "method": method, "rep": rep}
                        if method.startswith("lerobot") and transport != "local":
                            row["skipped"] = "LeRobot reads local files (LeRobotDataset downloads first); local only"
                            results.append(row)
                            continue
                        if server is not None:
                            server.clear_log()
                        if method == "ours":
                            r = run_ours(root, args)
                            ours_frames = r["frames"]
                        elif method == "mapstyle":
                            r = run_mapstyle(root, args)
                        elif method == "limit":
                            r = run_limit(root, args, ours_frames or args.steps * args.batch_size * cfg[3])
                        elif method in ("lerobot", "lerobot-streaming"):
                            r = run_lerobot(root, args, method)
                        else:
                            raise SystemExit(f"unknown method {method!r}")
                        row.update(r)
                        if transport == "http" and server is not None and "skipped" not in r:
                            row["served_bytes"] = _served_bytes(server.log(), cache)
                        results.append(row)
                        print(f"  rep {rep} {cfg[0]:<24} {transport:<6} {method:<18} "
                              + (r["skipped"] if "skipped" in r else
                                 f"{_fmt(r.get('steady_frames_per_s'))} frames/s, first batch {_fmt(r.get('first_batch_s'), '.2f')} s"),
                              flush=True)
    finally:
        if server is not None:
            server.close()
    summary = summarize(results)
    print(format_summary(summary, args))
    out = {"args": {k: v for k, v in vars(args).items() if k != "lerobot_trial"}, "results": results, "summary": summary}
    tmp = Path(args.json + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(out, indent=1))
    os.replace(tmp, args.json)
    try:
        plot_summary(summary, args.png)
    except ImportError as exc:
        print(f"no PNG: {exc}")
    return 0


def summarize(results: list[dict]) -> list[dict]:
    """Median steady frames/s per (dataset, transport, method) and ratios ours / method."""
    import statistics

    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r["dataset"], r["transport"], r["method"]), []).append(r)
    rows = []
    for (d, t, m), rs in groups.items():
        fps = [r["steady_frames_per_s"] for r in rs if r.get("steady_frames_per_s")]
        first = [r["first_batch_s"] for r in rs if r.get("first_batch_s") is not None]
        served = [r["served_bytes"] / r["frames"] for r in rs if r.get("served_bytes") and r.get("frames")]
        rows.append({"dataset": d, "transport": t, "method": m, "runs": len(fps),
                     "steady_frames_per_s": statistics.median(fps) if fps else None,
                     "first_batch_s": statistics.median(first) if first else None,
                     "served_bytes_per_frame": statistics.median(served) if served else None,
                     "skipped": next((r["skipped"] for r in rs if "skipped" in r), None)})
    ours = {(r["dataset"], r["transport"]): r["steady_frames_per_s"] for r in rows if r["method"] == "ours"}
    for r in rows:
        o = ours.get((r["dataset"], r["transport"]))
        r["ours_over_this"] = o / r["steady_frames_per_s"] if o and r["steady_frames_per_s"] else None
    return rows


def format_summary(rows: list[dict], args) -> str:
    lines = [f"\nsteady frames/s (median of {args.reps} rep(s); num_workers={args.num_workers}, "
             f"batch_size={args.batch_size}, steps={args.steps}); ratio = ours / method",
             f"{'dataset':<24} {'transport':<9} {'method':<18} {'frames/s':>9} {'first s':>8} {'B/frame':>9} {'ours/x':>7}"]
    for r in rows:
        if r["skipped"] and not r["runs"]:
            lines.append(f"{r['dataset']:<24} {r['transport']:<9} {r['method']:<18} skipped: {r['skipped']}")
            continue
        lines.append(f"{r['dataset']:<24} {r['transport']:<9} {r['method']:<18} {_fmt(r['steady_frames_per_s']):>9} "
                     f"{_fmt(r['first_batch_s'], '.2f'):>8} {_fmt(r['served_bytes_per_frame']):>9} "
                     f"{_fmt(r['ours_over_this'], '.2f'):>7}")
    return "\n".join(lines)


def plot_summary(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({(r["dataset"], r["transport"]) for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(keys)), 4.5))
    width = 0.8 / max(1, len(methods))
    for j, m in enumerate(methods):
        vals = [next((r["steady_frames_per_s"] or 0 for r in rows if (r["dataset"], r["transport"]) == k and r["method"] == m), 0)
                for k in keys]
        ax.bar([i + j * width for i in range(len(keys))], vals, width, label=m)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(keys))])
    ax.set_xticklabels([f"{d}\n{t}" for d, t in keys], fontsize=7)
    ax.set_ylabel("steady frames/s (decoded camera frames)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path + f".tmp{os.getpid()}.png"
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, path)


if __name__ == "__main__":
    raise SystemExit(main())
