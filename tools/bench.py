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
- **peak PSS sum** (process + workers, sampled every 0.2 s), **bytes fetched / needed** (needed:
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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LEROBOT_PYTHON = ROOT / ".venv-lerobot" / "bin" / "python"
BUILD_VERSION = "1"  # bump when a dataset recipe changes (cached builds are keyed by it)
RESULT_PREFIX = "@@bench-result "
SNAPSHOT_KEY = "__bench_stats__"

# --- the datasets -----------------------------------------------------------------------------------
#: name -> (table label, recipe, default samples per trial)
DATASETS: dict[str, tuple[str, dict, int]] = {
    "g1": ("real G1 640x480 AV1 g=2, 1 camera (`data/g1_v30`)", {"kind": "g1"}, 640),
    "g1-3cam": ("the same footage as 3 cameras", {"kind": "g1", "camera_copies": 3}, 640),
    "g1-h264": ("the same re-encoded H.264, 2 B-frames, GOP 30", {"kind": "g1", "h264_gop": 30}, 640),
    "gen-h264": ("generated H.264, B-frames, GOP 12, 2 cameras, 128x96, 20 episodes",
                 {"kind": "generated", "codec": "h264", "gop": 12, "cameras": 2, "size": (128, 96),
                  "episodes": 20, "length": 80}, 1280),
    "gen-av1": ("generated AV1 g=2, 2 cameras, 640x480, 8 episodes",
                {"kind": "generated", "codec": "av1", "gop": 2, "cameras": 2, "size": (640, 480),
                 "episodes": 8, "length": 90}, 640),
    "tiny": ("generated AV1, 1 camera, 64x48 (smoke test)",
             {"kind": "generated", "codec": "av1", "gop": 2, "cameras": 1, "size": (64, 48),
              "episodes": 4, "length": 12}, 24),
    "tiny-h264": ("generated H.264, 1 camera, 64x48 (smoke test)",
                  {"kind": "generated", "codec": "h264", "gop": 4, "cameras": 1, "size": (64, 48),
                   "episodes": 3, "length": 10}, 24),
    # mixtures (StreamingMultiLeRobotDataset; LeRobot has no streaming mixture: ours and the limit only)
    "mix": ("mixture: G1 AV1 + G1 H.264 GOP 30, weights 0.5/0.5",
            {"kind": "mixture", "parts": ["g1", "g1-h264"], "weights": [0.5, 0.5]}, 640),
    "tiny-mix": ("mixture: tiny AV1 + tiny H.264, weights 0.7/0.3 (smoke test)",
                 {"kind": "mixture", "parts": ["tiny", "tiny-h264"], "weights": [0.7, 0.3]}, 24),
}
CAMERA_NAMES = ("observation.images.front", "observation.images.wrist", "observation.images.top")

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


def copy_cameras(src: Path, dst: Path, copies: int) -> Path:
    """A copy of the LeRobot v3 dataset ``src`` at ``dst`` where every camera also appears ``copies - 1``
    more times under new keys (``<key>_copy<j>``: the same MP4 files copied, the same episode
    columns): a multi-camera dataset of real content."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.copytree(src, dst)
    info_p = dst / "meta" / "info.json"
    info = json.loads(info_p.read_text())
    keys = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    stats_p = dst / "meta" / "stats.json"
    stats = json.loads(stats_p.read_text()) if stats_p.exists() else None
    for k in keys:
        for j in range(1, copies):
            new = f"{k}_copy{j}"
            shutil.copytree(dst / "videos" / k, dst / "videos" / new)
            info["features"][new] = info["features"][k]
            if stats is not None and k in stats:
                stats[new] = stats[k]
    info_p.write_text(json.dumps(info, indent=2))
    if stats is not None:
        stats_p.write_text(json.dumps(stats, indent=2))
    for p in sorted((dst / "meta" / "episodes").rglob("*.parquet")):
        t = pq.read_table(p)
        for k in keys:
            for c in [c for c in t.column_names if c.startswith(f"videos/{k}/") or c.startswith(f"stats/{k}/")]:
                for j in range(1, copies):
                    t = t.append_column(pa.field(c.replace(f"/{k}/", f"/{k}_copy{j}/", 1), t.schema.field(c).type),
                                        t.column(c))
        pq.write_table(t, p)
    return dst


def transcode_h264(root: Path, gop: int) -> None:
    """Re-encode every MP4 under ``root/videos`` in place with libx264 (2 B-frames, closed GOPs of
    ``gop`` frames, same frame count and timestamps): the long-GOP case on real content."""
    for p in sorted((root / "videos").rglob("*.mp4")):
        tmp = p.with_suffix(".h264.mp4")
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-i", str(p), "-an", "-c:v", "libx264",
                        "-preset", "veryfast", "-bf", "2", "-g", str(gop), "-keyint_min", str(gop),
                        "-sc_threshold", "0", "-pix_fmt", "yuv420p", str(tmp)], check=True)
        tmp.replace(p)


def ensure_dataset(cache_dir: Path, name: str) -> Path:
    """Build (once, atomically) the benchmark dataset ``name`` under ``cache_dir/datasets``."""
    _, recipe, _ = DATASETS[name]
    base = cache_dir / "datasets"
    out = base / f"{name}-v{BUILD_VERSION}"
    if recipe["kind"] == "mixture":  # a folder of links part0, part1, ... to the parts' builds
        parts = [ensure_dataset(cache_dir, part) for part in recipe["parts"]]
        out.mkdir(parents=True, exist_ok=True)
        for i, part in enumerate(parts):
            link = out / f"part{i}"
            if not link.exists():
                link.symlink_to(Path("..") / part.name)
        _atomic_write(out / MIXTURE_FILE, json.dumps({"parts": len(parts), "weights": recipe["weights"]}))
        return out
    if (out / "meta" / "info.json").exists():
        return out
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=base))
    try:
        d = tmp / "d"
        if recipe["kind"] == "g1":
            copy_cameras(ROOT / "data" / "g1_v30", d, recipe.get("camera_copies", 1))
            if recipe.get("h264_gop"):
                transcode_h264(d, recipe["h264_gop"])
        else:
            from lerobotstream.testing import make_dataset

            w, h = recipe["size"]
            make_dataset(d, episode_lengths=[recipe["length"]] * recipe["episodes"], codec=recipe["codec"],
                         gop=recipe["gop"], cameras=tuple((CAMERA_NAMES[i], w, h) for i in range(recipe["cameras"])),
                         episodes_per_video_file=max(1, recipe["episodes"] // 2), repo_id=f"bench/{name}")
        try:
            os.replace(d, out)
        except OSError:  # another run built it first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


MIXTURE_FILE = "bench-mixture.json"


def mixture_of(root: str | Path) -> dict | None:
    """``{"parts": n, "weights": [...]}`` when ``root`` is a mixture folder (part0, part1, ...)."""
    p = Path(root) / MIXTURE_FILE
    return json.loads(p.read_text()) if p.is_file() else None


def dataset_facts(root: Path) -> "DatasetFacts | MixtureFacts":
    return MixtureFacts(root) if mixture_of(root) else DatasetFacts(root)


class MixtureFacts:
    """:class:`DatasetFacts` of a mixture folder: its parts' facts, paths under ``part<i>/``."""

    def __init__(self, root: Path) -> None:
        mix = mixture_of(root)
        self.root, self.weights = root, mix["weights"]
        self.parts = [DatasetFacts(root / f"part{i}") for i in range(mix["parts"])]
        self.video_keys = self.parts[0].video_keys
        self.files = [f"part{i}/{p}" for i, f in enumerate(self.parts) for p in f.files]
        self.video_files = [f"part{i}/{p}" for i, f in enumerate(self.parts) for p in f.video_files]
        self.total_frames = sum(f.total_frames for f in self.parts)
        seek = [(f.seek_decoded_per_frame, f.total_frames) for f in self.parts if f.seek_decoded_per_frame]
        self.seek_decoded_per_frame = sum(a * n for a, n in seek) / sum(n for _, n in seek) if seek else None
        self.video_bytes = sum(f.video_bytes for f in self.parts)
        self.total_bytes = sum(f.total_bytes for f in self.parts)

    def needed_bytes(self, anchors: list[list[int]]) -> int:
        """``anchors`` are ``(dataset_index, episode, frame)``: each part's own coded bytes, summed."""
        return sum(f.needed_bytes([(e, fr) for d, e, fr in anchors if d == i]) for i, f in enumerate(self.parts))


class DatasetFacts:
    """What the orchestrator knows of a dataset: files, cameras, coded sizes, map-style's decode model."""

    def __init__(self, root: Path) -> None:
        import numpy as np

        from lerobotstream.meta import DatasetMeta
        from lerobotstream.mp4 import parse_mp4_bytes

        self.root = root
        self.meta = DatasetMeta.load(str(root))
        self.video_keys = list(self.meta.video_keys)
        self.files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        self.video_files = sorted({e.videos[k].path for e in self.meta.episodes for k in self.video_keys})
        self.total_frames = int(self.meta.num_frames)
        self.tables = {p: parse_mp4_bytes((root / p).read_bytes(), path=p) for p in self.video_files}
        # map-style: one seek per sample decodes from the preceding keyframe to the target
        cost = n = 0
        for t in self.tables.values():
            order = np.asarray(t.presentation_order, dtype=np.int64)
            sync = np.asarray(t.is_sync, dtype=bool)[order]
            keys = np.flatnonzero(sync)
            j = np.arange(len(order))
            k = keys[np.clip(np.searchsorted(keys, j, side="right") - 1, 0, None)]
            cost += int((j - k + 1).sum())
            n += len(order)
        self.seek_decoded_per_frame = cost / n if n else None
        self.video_bytes = sum((root / p).stat().st_size for p in self.video_files)
        self.total_bytes = sum((root / p).stat().st_size for p in self.files)

    def needed_bytes(self, anchors: list[list[int]]) -> int:
        """Coded bytes of the distinct (camera, episode, frame) samples delivered (the profiler's
        computation, over the tables parsed here)."""
        from lerobotstream.profile import needed_bytes_of_tables

        return needed_bytes_of_tables(self.meta, self.video_keys, self.tables.__getitem__, anchors, fps=self.meta.fps,
                                      tolerance_s=1e-4)["needed_frame_bytes"]


# --- inside a contestant process (stdlib at module level: this file also runs in LeRobot's venv) ----
_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def _cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK  # utime + stime
    except (OSError, IndexError, ValueError):
        return 0.0


def _tree_cpu_s() -> dict[int, float]:
    """CPU seconds of this process and of each live child (DataLoader workers), by pid."""
    me = os.getpid()
    return {p: _cpu_s(p) for p in (me, *_children(me))}


def _cpu_delta_s(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two :func:`_tree_cpu_s` readings (a process gone by the second
    reading counts up to the first; one started after the first counts fully)."""
    return sum(after.get(p, c) - c for p, c in before.items()) + sum(c for p, c in after.items() if p not in before)


def _profile_memory():
    """The profiler's PSS sampler (``lerobotstream/profile/_memory.py`` of this checkout), loaded by
    its path: the module is standard library only, so it runs in LeRobot's venv too, where this
    checkout's package (built for another Python) may not import."""
    import importlib.util

    name = "_lrs_bench_profile_memory"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "lerobotstream" / "profile" / "_memory.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # before running it: its dataclasses look their module up
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _pss_sampler(interval_s: float = 0.2):
    """A started ``MemorySampler`` of this process and its children (DataLoader workers); its
    ``own_cpu_s`` is its timer thread's CPU, ``summary()["peak_pss_sum_bytes"]`` the peak PSS sum."""
    me = os.getpid()
    sampler = _profile_memory().MemorySampler(lambda: {me: "main", **{c: "child" for c in _children(me)}},
                                              interval_s=interval_s)
    return sampler.__enter__()


try:  # a real IterableDataset subclass when torch is importable (both venvs have it)
    from torch.utils.data import IterableDataset as _IterableBase
except Exception:  # noqa: BLE001 - the orchestrator never builds one
    _IterableBase = object


class Snapshots(_IterableBase):
    """Iterate ``ds`` (ours) and put its ``stats()`` on an item every ``every_s`` (an empty string
    on the others): the counters of every worker reach the main process with the batches, at
    almost no cost per item (no per-item JSON, unlike the profiler's side channel)."""

    def __init__(self, ds: Any, every_s: float = 0.1) -> None:
        super().__init__()
        self.ds = ds
        self.every_s = every_s

    def __iter__(self):
        last = -1e9
        pid = os.getpid()
        for item in self.ds:
            now = time.monotonic()
            if now - last >= self.every_s:
                last = now
                item[SNAPSHOT_KEY] = json.dumps({"pid": pid, "stats": self.ds.stats()}, default=str)
            else:
                item[SNAPSHOT_KEY] = ""
            yield item


_STAGES = ("spans_s", "parquet_s", "fetch_s", "synthesize_s", "open_s", "decode_s", "decode_job_s", "assemble_s",
           "queue_wait_s", "admit_wait_s", "transforms_s")


def _sum_snapshots(snaps: dict[int, dict]) -> dict:
    """Sum the latest ``stats()`` of every process: counters, stage seconds and seconds per item."""
    out: dict[str, Any] = {}
    for k in ("items", "frames_decoded", "frames_returned", "decode_calls", "decoder_opens", "bytes_fetched",
              "bytes_needed", "requests", *_STAGES):
        out[k] = sum(float(s.get(k) or 0) for s in snaps.values())
    items = out["items"]
    out["stage_ms_per_item"] = {k[:-2]: 1e3 * out[k] / items for k in _STAGES} if items else {}
    out["frames_decoded_per_returned"] = (out["frames_decoded"] / out["frames_returned"]
                                          if out["frames_returned"] else None)
    out["processes"] = len(snaps)
    return out


def _download(url: str, files: list[str], dst: Path, threads: int = 8) -> int:
    """GET every file under ``url`` into ``dst`` with ``threads`` parallel requests (one listing
    request first, standing in for the Hub's file-list call); returns the bytes received."""
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    with urllib.request.urlopen(url, timeout=60) as r:
        r.read()

    def get(rel: str) -> int:
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url + rel, timeout=120) as r, open(out, "wb") as f:
            n = 0
            while True:
                chunk = r.read(1 << 20)
                if not chunk:
                    return n
                f.write(chunk)
                n += len(chunk)

    with ThreadPoolExecutor(threads) as ex:
        return sum(ex.map(get, files))


#: ``ours+NAME=VALUE`` options that set the DataLoader, not the dataset: ``sharing_strategy``
#: (torch.multiprocessing's), ``collate`` (``packed``: ``lerobotstream.packed_collate``, ours' default;
#: ``default``: torch's ``default_collate``)
_LOADER_OPTIONS = ("sharing_strategy", "collate")


def _make_dataset(spec: dict, root: str):
    kind, nw, uint8 = spec["kind"], int(spec["num_workers"]), bool(spec["uint8"])
    if kind == "ours":
        from lerobotstream import StreamingLeRobotDataset, StreamingMultiLeRobotDataset

        opts = {k: v for k, v in (spec.get("options") or {}).items()
                if not k.startswith("env.") and k not in _LOADER_OPTIONS}
        common = dict(return_uint8=uint8, max_num_shards=max(1, nw), batch_size=spec["batch_size"], seed=spec["seed"],
                      **opts)
        mix = spec.get("mixture")
        if mix:
            ds = StreamingMultiLeRobotDataset([f"bench/part{i}" for i in range(mix["parts"])],
                                              roots=_part_roots(root, mix["parts"]), weights=mix["weights"], **common)
        else:
            ds = StreamingLeRobotDataset(root=root, **common)
        return Snapshots(ds), ds
    if kind == "lerobot":
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        ds = LeRobotDataset(spec["repo_id"], root=root, return_uint8=uint8)
        return ds, ds
    if kind == "lerobot-streaming":
        from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset as LeRobotStreaming

        ds = LeRobotStreaming(spec["repo_id"], root=root, max_num_shards=max(1, nw), return_uint8=uint8,
                              seed=spec["seed"])
        return ds, ds
    raise ValueError(f"unknown contestant kind {kind!r}")


def _part_roots(root: str, n: int) -> list[str]:
    """The parts of a mixture folder (a local path or the store's URL)."""
    return [f"{str(root).rstrip('/')}/part{i}" + ("/" if "://" in str(root) else "") for i in range(n)]


def run_trial(spec: dict) -> dict:
    """One contestant run (inside its process): build, draw ``samples``, measure. See the module doc."""
    if spec["kind"] == "warmup":
        return _warmup(spec)
    if spec["kind"] == "limit":
        return _limit(spec)
    if spec["kind"] == "prepare":
        return _prepare(spec)
    if spec["kind"] == "step_alone":
        return _step_alone(spec)
    import torch
    from torch.utils.data import DataLoader

    if spec["kind"].startswith("lerobot"):
        from lerobot.datasets import video_utils

        video_utils._default_decoder_cache.clear()  # every trial opens its decoders afresh
    t0 = time.perf_counter()
    nw, bs = int(spec["num_workers"]), int(spec["batch_size"])
    root, download_s, downloaded, tmp = spec["root"], None, None, None
    if spec.get("download_url"):
        tmp = tempfile.mkdtemp(prefix="bench-download-")
        downloaded = _download(spec["download_url"], spec["files"], Path(tmp))
        download_s = time.perf_counter() - t0
        root = tmp
    try:
        loader_ds, ds = _make_dataset(spec, root)
        construct_s = time.perf_counter() - t0 - (download_s or 0.0)
        ctx = spec.get("mp_context") if nw else None
        kw: dict[str, Any] = dict(batch_size=bs, num_workers=nw, persistent_workers=False)
        if nw:
            kw.update(multiprocessing_context=ctx, prefetch_factor=int(spec.get("prefetch_factor", 4)))
        if spec["kind"] == "lerobot":
            kw.update(shuffle=True, generator=torch.Generator().manual_seed(int(spec["seed"])))
        collate = (spec.get("options") or {}).get("collate")
        if collate is None and spec["kind"] == "ours":  # ours as lerobotstream-train and the README run it
            try:
                from lerobotstream import packed_collate  # noqa: F401
                collate = "packed"
            except ImportError:  # ours@PATH of a checkout before it
                collate = "default"
        if collate == "packed":
            from lerobotstream import packed_collate

            kw["collate_fn"] = packed_collate
        elif collate not in (None, "default"):
            raise ValueError(f"collate must be packed or default, got {collate!r}")
        strategy = (spec.get("options") or {}).get("sharing_strategy")
        if strategy:  # torch.multiprocessing's, for this process and the workers it forks
            torch.multiprocessing.set_sharing_strategy(strategy)
        mode = spec.get("loader")  # ours: "threads" / "processes": lerobotstream.StreamLoader, else a DataLoader
        if mode in ("threads", "processes"):
            from lerobotstream import StreamLoader

            loader = StreamLoader(ds, bs, num_workers=nw, mode=mode, collate_fn=kw.get("collate_fn"),
                                  multiprocessing_context=ctx)
        else:
            loader = DataLoader(loader_ds, **kw)
        mem = _pss_sampler()
        try:
            # one in-process StreamLoader stream: its counters are this dataset's (shards have their own runs)
            own = ds.stats if mode in ("threads", "processes") and nw == 0 else None
            res = _drive(loader, spec, t0, mem, step=step_fn(spec.get("step") or "none"), stats=own)
        finally:
            mem.__exit__(None, None, None)
        summ = mem.summary()
        res.update(collate=collate or "default", construct_s=construct_s, download_s=download_s, downloaded_bytes=downloaded,
                   peak_pss_mib=summ["peak_pss_sum_bytes"] / 2**20, peak_rss_mib=summ["peak_rss_sum_bytes"] / 2**20)
        if mode in ("threads", "processes"):
            res["loader_mode"] = loader.mode
        if spec["kind"] == "ours":
            st = getattr(ds, "_setup", {})
            res["ours_setup_s"] = {k: v for k, v in st.items() if isinstance(v, float)}
        return res
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def gil_step(ms: float) -> None:
    """A training step whose Python holds the GIL: a pure-Python loop of ``ms`` ms (wall)."""
    end = time.perf_counter() + ms / 1000
    x = 0
    while time.perf_counter() < end:
        for i in range(200):
            x += i


def make_nogil_step(ms: float):
    """A step that releases the GIL: ``ms`` ms of 128x128 torch matmuls (each ~0.1-1 ms, the GIL
    released inside; the loop's Python between them holds it for microseconds), wall-time bounded
    like :func:`gil_step`, so no calibration (torch's OpenMP speed changes once a pipeline ran)."""
    import torch

    a = torch.randn(128, 128)

    def step() -> None:
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:
            a @ a
    return step


def step_fn(text: str):
    """``none`` (None), ``gil:MS`` or ``nogil:MS``: the synthetic training step run after each batch."""
    if text == "none":
        return None
    kind, _, ms = text.partition(":")
    if kind not in ("gil", "nogil") or not ms:
        raise ValueError(f"step must be none, gil:MS or nogil:MS, got {text!r}")
    return (lambda: gil_step(float(ms))) if kind == "gil" else make_nogil_step(float(ms))


def _step_alone(spec: dict) -> dict:
    """Seconds per call of each step in ``spec["steps"]`` with no loader running (20 calls after one)."""
    out = {}
    for text in spec["steps"]:
        fn = step_fn(text)
        if fn is None:
            continue
        fn()
        t = time.perf_counter()
        for _ in range(20):
            fn()
        out[text] = (time.perf_counter() - t) / 20
    return {"step_alone_s": out}


class GilProfile:
    """``py-spy record --gil --idle --nonblocking --format raw`` of this process for
    ``duration_s`` at ``rate`` Hz: the samples in which some thread of the process held the GIL,
    less those of the benchmark's own PSS sampler thread. ``held_s`` = those samples / rate
    (py-spy's "behind in sampling" warnings are kept: they mean the count is low);
    ``top_frames``: where the GIL was held (innermost frame, samples)."""

    def __init__(self, py_spy: str, rate: int, duration_s: float) -> None:
        self.rate, self.duration_s = int(rate), float(max(1, int(duration_s)))  # py-spy takes whole seconds
        fd, self.out = tempfile.mkstemp(prefix="bench-gil-", suffix=".txt")
        os.close(fd)
        self.started: float | None = None
        self.warnings: list[str] = []
        self.proc = subprocess.Popen([py_spy, "record", "--pid", str(os.getpid()), "--gil", "--idle", "--nonblocking",
                                      "--format", "raw", "--rate", str(self.rate), "--duration", str(int(self.duration_s)),
                                      "--output", self.out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if self.started is None and "Sampling process" in line:
                self.started = time.perf_counter()
            elif "behind" in line or "rror:" in line:
                self.warnings.append(line.strip())

    def running(self) -> bool:
        return self.proc.poll() is None

    def result(self) -> dict:
        self.proc.wait(60)
        self._reader.join(10)
        held = own = 0
        leaves: dict[str, int] = {}
        try:
            with open(self.out) as f:
                for line in f:
                    head, _, count = line.rstrip().rpartition(" ")
                    if head and count.isdigit():
                        held += int(count)
                        if "MemorySampler" in head:  # the benchmark's own PSS sampler thread
                            own += int(count)
                            continue
                        leaf = head.rsplit(";", 1)[-1]
                        leaves[leaf] = leaves.get(leaf, 0) + int(count)
            os.unlink(self.out)
        except OSError as exc:
            self.warnings.append(f"no py-spy output: {exc}")
        top = sorted(leaves.items(), key=lambda kv: -kv[1])[:10]
        return {"gil_samples": held - own, "sampler_gil_samples": own, "rate": self.rate,
                "duration_s": self.duration_s, "started": self.started, "held_s": (held - own) / self.rate, "warnings": self.warnings[:5], "exit_code": self.proc.returncode,
                "top_frames": top}


def _drive(loader, spec: dict, t0: float, mem, step=None, stats=None) -> dict:
    """Draw ``spec["samples"]`` samples (and, with ``spec["gil"]``, until the GIL profile of the
    steady part ended), calling ``step()`` after each batch; see the module doc for what it reports.
    ``stats``: this process's dataset counters (``ds.stats``) when the batches carry none (a
    StreamLoader), read after the warm-up and at the end."""
    import math

    nw, target = int(spec["num_workers"]), int(spec["samples"])
    warm_k = max(1, nw)  # every worker delivered its first batch
    snaps: dict[int, dict] = {}
    warm_snaps: dict[int, dict] = {}
    anchors: list[list[int]] = []
    n = k = 0
    first_s = t_w = n_w = cpu_w = own_w = None
    frames_per_sample = None
    waited = stepped = 0.0
    gil = None
    gil_window: list[tuple[float, int]] = []  # (time, samples) of each batch while the profile runs
    t_iter = time.perf_counter()
    it = iter(loader)
    while n < target or (gil is not None and gil.running()):
        a = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        now = time.perf_counter()
        k += 1
        if t_w is not None:
            waited += now - a
        for s in batch.pop(SNAPSHOT_KEY, None) or []:
            if s:
                d = json.loads(s)
                pid = int(d["pid"])
                snaps[pid] = d["stats"]
                if t_w is not None:
                    warm_snaps.setdefault(pid, d["stats"])  # each process's first reading after the warm-up
        b = int(batch["index"].shape[0])
        if frames_per_sample is None:
            frames_per_sample = sum(math.prod(v.shape[1:-3]) for v in batch.values()
                                    if hasattr(v, "shape") and v.ndim >= 4)
        if "dataset_index" in batch:  # a mixture: (dataset, episode, frame)
            anchors.extend(zip(batch["dataset_index"].tolist(), batch["episode_index"].tolist(),
                               batch["frame_index"].tolist()))
        else:
            anchors.extend(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist()))
        n += b
        if gil is not None and gil.started is not None and gil.running():
            gil_window.append((now, b))
        if k == 1:
            first_s, first_iter_s = now - t0, now - t_iter
            mem.sample()
        if k == warm_k:
            t_w, n_w, cpu_w, own_w = now, n, _tree_cpu_s(), mem.own_cpu_s
            if stats is not None:
                warm_snaps[os.getpid()] = stats()
            if spec.get("gil"):
                g = spec["gil"]
                gil = GilProfile(g["py_spy"], g.get("rate", 250), g.get("duration_s", 2.0))
        del batch
        if step is not None:
            s0 = time.perf_counter()
            step()
            if t_w is not None and k > warm_k:
                stepped += time.perf_counter() - s0
    t_end = time.perf_counter()
    cpu_end, own_end = _tree_cpu_s(), mem.own_cpu_s
    mem.sample()  # the workers' last reading, before the iterator stops them
    if stats is not None:
        snaps[os.getpid()] = stats()
    del it
    steady = steady_cpu = None
    steps = k - warm_k if t_w is not None else 0
    if t_w is not None and n > n_w and t_end > t_w:
        steady = (n - n_w) / (t_end - t_w)
        steady_cpu = 1e3 * max(0.0, _cpu_delta_s(cpu_w, cpu_end) - (own_end - own_w)) / (n - n_w)
    out = {"samples": n, "batches": k, "wall_s": t_end - t0, "first_batch_s": first_s,
           "first_batch_from_iter_s": first_iter_s if k else None, "steady_samples_per_s": steady,
           "cpu_ms_per_sample": steady_cpu, "frames_per_sample": frames_per_sample, "anchors": anchors}
    if t_w is not None and t_end > t_w:
        out.update(steps_per_s=steps / (t_end - t_w), wait_share=waited / (t_end - t_w),
                   step_s=stepped / steps if step is not None and steps else None)
    if gil is not None:
        g = gil.result()
        win = [m for t, m in gil_window if g["started"] is not None and t <= g["started"] + g["duration_s"]]
        g["window_samples"] = sum(win)
        g["gil_ms_per_sample"] = 1e3 * g["held_s"] / g["window_samples"] if g["window_samples"] else None
        out["gil"] = g
    if snaps:
        out["ours_stats"] = _sum_snapshots(snaps)
        steady = {pid: _diff(snaps[pid], w) for pid, w in warm_snaps.items() if pid in snaps}
        if steady and all(x.get("items", 0) > 0 for x in steady.values()):
            out["ours_stats_steady"] = _sum_snapshots(steady)
    return out


def _diff(last: dict, first: dict) -> dict:
    """Counters of ``last`` minus those of ``first`` (the same process's stats, later and earlier)."""
    out = {}
    for k, v in last.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(first.get(k), (int, float)):
            out[k] = v - first[k]
    return out


def _warmup(spec: dict) -> dict:
    t = time.perf_counter()
    import torch  # noqa: F401
    import torchcodec.decoders  # noqa: F401

    mods = {"ours": ["lerobotstream"], "lerobot": ["lerobot.datasets.lerobot_dataset",
                                                   "lerobot.datasets.streaming_dataset"]}[spec["side"]]
    import importlib

    for m in mods:
        importlib.import_module(m)
    ver = {}
    for m in ("torch", "torchcodec", "lerobot", "lerobotstream"):
        mod = sys.modules.get(m)
        if mod is not None:
            ver[m] = getattr(mod, "__version__", "?")
    return {"import_s": time.perf_counter() - t, "versions": ver, "python": sys.version.split()[0],
            "lerobotstream_file": getattr(sys.modules.get("lerobotstream"), "__file__", None)}


def _prepare(spec: dict) -> dict:
    """Ours' sidecar for this root, built (or found) before the rounds: trials start warm."""
    from lerobotstream import StreamingLeRobotDataset

    t = time.perf_counter()
    roots = _part_roots(spec["root"], spec["mixture"]["parts"]) if spec.get("mixture") else [spec["root"]]
    status = [StreamingLeRobotDataset(root=r).sidecar_status for r in roots]
    return {"sidecar": "+".join(status), "construct_s": time.perf_counter() - t}


def _limit(spec: dict) -> dict:
    """Sequential decode of the video files (16-frame calls, up to ``max_frames``), by
    ``decoders`` decoders at once (threads: torchcodec's decode releases the GIL), each on
    ``ffmpeg_threads`` FFmpeg threads (0 = FFmpeg's choice): ``decoders=1, ffmpeg_threads=0`` is
    FFmpeg's own threading, ``decoders=<CPUs>, ffmpeg_threads=1`` one decoder per core (each
    decodes a contiguous share of every file, from a seek)."""
    from torchcodec.decoders import VideoDecoder

    cap, parts, thr = int(spec.get("max_frames") or 0), max(1, int(spec.get("decoders") or 1)), int(spec["ffmpeg_threads"])
    lengths, left = [], cap or None
    for p in spec["files"]:  # how many frames of each file the cap takes, front to back
        n = len(VideoDecoder(p, seek_mode="approximate"))
        n = n if left is None else min(n, left)
        if n <= 0:
            break
        lengths.append((p, n))
        if left is not None:
            left -= n
    work = [[(p, n * i // parts, n * (i + 1) // parts) for p, n in lengths] for i in range(parts)]
    counts = [0] * parts

    def run(i: int) -> None:
        for p, a, b in work[i]:
            if a >= b:
                continue
            d = VideoDecoder(p, seek_mode="approximate", num_ffmpeg_threads=thr)
            for j in range(a, b, 16):
                counts[i] += int(d.get_frames_in_range(j, min(j + 16, b)).data.shape[0])
            del d

    c0, t0 = os.times(), time.perf_counter()
    if parts == 1:
        run(0)
    else:
        ts = [threading.Thread(target=run, args=(i,)) for i in range(parts)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    wall = time.perf_counter() - t0
    c1 = os.times()
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    frames = sum(counts)
    return {"frames": frames, "wall_s": wall, "frames_per_s": frames / wall if wall > 0 else None,
            "cpu_ms_per_frame": 1e3 * cpu / frames if frames else None, "decoders": parts, "ffmpeg_threads": thr,
            "cpu_per_wall": cpu / wall if wall > 0 else None}


#: the decode limit's variants: label -> (decoders, FFmpeg threads per decoder); ``None``
#: decoders = the usable CPUs. The limit is the faster of ``limit-ffmpeg`` and ``limit-cores``
#: per round (the whole machine either way); ``limit-1thread``'s CPU per frame prices decode.
LIMITS = {"limit-ffmpeg": (1, 0), "limit-cores": (None, 1), "limit-1thread": (1, 1)}


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def run_limits(side: "Contestant", root: Path, facts, dataset: str, rnd: int, samples: int, timeout_s: float) -> list[dict]:
    """One round of every :data:`LIMITS` variant on ``dataset`` (files under ``root``), as trial rows."""
    out = []
    for label, (decoders, thr) in LIMITS.items():
        spec = {"kind": "limit", "files": [str(root / p) for p in facts.video_files], "ffmpeg_threads": thr,
                "decoders": decoders or usable_cpus(), "max_frames": 2 * samples * len(facts.video_keys)}
        la = _load()
        r = side.call(spec, timeout_s)
        r.update(round=rnd, dataset=dataset, contestant=label, load_before=la, load_after=_load())
        out.append(r)
        print(f"round {rnd} {dataset:<9} {label} ({r.get('decoders')} decoder(s) x {thr or 'FFmpeg'} thread(s)): "
              f"{_fmt(r.get('frames_per_s'))} frames/s, {_fmt(r.get('cpu_ms_per_frame'), '.2f')} CPU ms/frame",
              file=sys.stderr, flush=True)
    return out


def best_limit(by_label: dict[str, dict | None]) -> float | None:
    """frames/s of the faster whole-machine limit (``limit-ffmpeg`` or ``limit-cores``) of one round."""
    xs = [(by_label.get(k) or {}).get("frames_per_s") for k in ("limit-ffmpeg", "limit-cores")]
    xs = [x for x in xs if x]
    return max(xs) if xs else None


def serve() -> int:
    """Contestant loop: one JSON trial spec per stdin line, one result line on the original stdout."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # libraries' prints go to stderr, never into the result channel
    parent = os.getppid()

    def orphaned() -> None:  # the orchestrator died (even kill -9): stop, also mid-trial
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=orphaned, daemon=True).start()
    for line in sys.stdin:
        if not line.strip():
            continue
        spec = json.loads(line)
        try:
            res = run_trial(spec)
        except BaseException as exc:  # noqa: BLE001 - reported to the orchestrator as the trial's error
            import traceback

            traceback.print_exc()
            lines = [x for x in str(exc).strip().splitlines() if x.strip()] or [""]
            where = " (in a DataLoader worker)" if len(lines) > 1 and "DataLoader worker" in lines[0] else ""
            res = {"error": f"{type(exc).__name__}: {lines[-1].strip()}{where}"[:1500]}  # a worker's: its last line
        out.write(RESULT_PREFIX + json.dumps(res) + "\n")
        out.flush()
    return 0


# --- the orchestrator -------------------------------------------------------------------------------
class Contestant:
    """A long-lived process that runs trials (``python -m tools.bench --serve``)."""

    def __init__(self, label: str, kind: str, python: Path, env: dict, log: Path, *, path: str | None = None,
                 options: dict | None = None, side: str = "ours") -> None:
        self.label, self.kind, self.options, self.side = label, kind, options or {}, side
        self.python, self.path, self.log_path = python, path, log
        self.proc: subprocess.Popen | None = None
        self.env = env
        self.error: str | None = None

    def start(self) -> None:
        env = dict(self.env)
        # plain ``ours`` (and the limit) run this checkout's package, not whichever one the venv
        # has installed (an editable install may point at another working tree)
        env["PYTHONPATH"] = self.path or (str(ROOT) if Path(self.python) == Path(sys.executable) else "")
        env.update({k[4:]: str(v) for k, v in self.options.items() if k.startswith("env.")})
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen([str(self.python), str(Path(__file__).resolve()), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, env=env, cwd=str(ROOT))

    def send(self, spec: dict) -> str | None:
        """Start the trial ``spec`` (the process starts on first use); an error text if it is gone."""
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin
        try:
            self.proc.stdin.write(json.dumps(spec) + "\n")
            self.proc.stdin.flush()
        except OSError as exc:
            return f"{self.label} process is gone ({exc}); see {self.log_path}"
        return None

    def call(self, spec: dict, timeout_s: float) -> dict:
        err = self.send(spec)
        return {"error": err} if err else self.receive(timeout_s)

    def receive(self, timeout_s: float) -> dict:
        """The result of the trial sent last (the process is killed after ``timeout_s``)."""
        assert self.proc is not None and self.proc.stdout
        result: list[dict] = []

        def read() -> None:
            for line in self.proc.stdout:
                if line.startswith(RESULT_PREFIX):
                    result.append(json.loads(line[len(RESULT_PREFIX):]))
                    return

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout_s)
        if not result:
            self.close(kill=True)
            return {"error": f"{self.label}: no result within {timeout_s:.0f} s or the process died; see {self.log_path}"}
        return result[0]

    def close(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        try:
            if kill:
                self.proc.kill()
            else:
                self.proc.stdin.close()
            self.proc.wait(20)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self.log.close()


def parse_contestant(text: str) -> tuple[str, str, str | None, dict]:
    """``ours[@PATH][+k=v...]`` / ``lerobot`` / ``lerobot-streaming`` → (label, kind, path, options)."""
    head, *opts = text.split("+")
    options: dict[str, Any] = {}
    for o in opts:
        k, v = o.split("=", 1)
        options[k] = v if k.startswith("env.") else json.loads(v) if v[:1].isdigit() or v in ("true", "false", "null") else v
    kind, _, path = head.partition("@")
    if kind not in ("ours", "lerobot", "lerobot-streaming"):
        raise SystemExit(f"unknown contestant {text!r} (ours[@PATH][+option=value...], lerobot, lerobot-streaming)")
    if path and kind != "ours":
        raise SystemExit(f"{text!r}: only ours takes @PATH")
    return text, kind, path or None, options


def contestant_env(cache: Path) -> dict:
    """The contestants' environment: offline, an isolated ``HF_LEROBOT_HOME`` under ``cache``, no
    sidecar/index directory of the caller's."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_LEROBOT_HOME=str(cache / "hf_lerobot"),
               TOKENIZERS_PARALLELISM="false")
    env.pop("LEROBOTSTREAM_SIDECAR_DIR", None)
    env.pop("LEROBOTSTREAM_INDEX_DIR", None)
    return env


def make_contestants(texts: list[str], lerobot_py: Path, env: dict, logs: Path) -> tuple[list["Contestant"], list[str]]:
    """A (not yet started) :class:`Contestant` per ``ours[@PATH][+k=v]`` / ``lerobot`` /
    ``lerobot-streaming`` text, and notes on those skipped (LeRobot's venv absent)."""
    contestants, notes = [], []
    for text in [c for c in texts if c]:
        label, kind, path, options = parse_contestant(text)
        if kind.startswith("lerobot") or path == "lerobot-venv":
            if not lerobot_py.exists():
                notes.append(f"{label}: skipped, {lerobot_py} not found (make setup-lerobot)")
                continue
            py, p = lerobot_py, None
        else:
            py, p = Path(sys.executable), (str(Path(path).resolve()) if path else None)
        contestants.append(Contestant(label, kind, py, env, logs / f"{label.replace('/', '_')}.log", path=p,
                                      options=options, side="lerobot" if kind.startswith("lerobot") else "ours"))
    return contestants, notes


def warm_up(procs: list["Contestant"], setup: dict, timeout_s: float) -> None:
    """Start every contestant and run its imports (side by side, outside any timing); one whose
    warm-up fails keeps the error (its trials are skipped)."""
    sent = {c.label: c.send({"kind": "warmup", "side": c.side}) for c in procs}
    for c in procs:
        r = {"error": sent[c.label]} if sent[c.label] else c.receive(timeout_s)
        setup[f"warmup {c.label}"] = r
        print(f"  {c.label}: {r}", file=sys.stderr, flush=True)
        if "error" in r:
            c.error = r["error"]


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


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--loader" in argv:  # StreamLoader rows beside the DataLoader path (tools/bench_loader.py)
        from tools import bench_loader

        return bench_loader.main([a for a in argv if a != "--loader"])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="the tiny dataset, 1 round, ours + limit (smoke test)")
    ap.add_argument("--plan", default="readme", choices=sorted(PLANS),
                    help="the settings to run when --datasets/--transports/--items/--workers are not given: readme "
                         "(the README table, ~15 min) or extended (every dataset, float32, the store in-process)")
    ap.add_argument("--datasets", default=None, help=f"comma-separated, of {', '.join(DATASETS)} (default: the plan's)")
    ap.add_argument("--transports", default=None, help="local,http (default: the plan's)")
    ap.add_argument("--items", default=None, help="uint8,float32 (default: the plan's)")
    ap.add_argument("--workers", default=None,
                    help="DataLoader settings, e.g. 0,2:spawn,2:fork (N:CONTEXT, context spawn|fork|forkserver; "
                         "default: the plan's)")
    ap.add_argument("--contestants", default=None,
                    help="ours[@PATH][+option=value...], lerobot, lerobot-streaming (default: all three)")
    ap.add_argument("--no-limit", action="store_true", help="skip the decode-limit runs")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds, medians reported (default 3)")
    ap.add_argument("--samples", type=int, default=None, help="samples per trial (default: per dataset, 640 on G1)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--prefetch-factor", type=int, default=4, help="DataLoader prefetch_factor with workers (LeRobot's 4)")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--latency-ms", type=float, default=50.0, help="remote store: round trip per request, ms")
    ap.add_argument("--bandwidth-mbit", type=float, default=400.0, help="remote store: shared bandwidth, Mbit/s")
    ap.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "lerobotstream" / "bench"),
                    help="built datasets and ours' sidecars (an isolated HF_LEROBOT_HOME)")
    ap.add_argument("--lerobot-python", default=str(LEROBOT_PYTHON))
    ap.add_argument("--trial-timeout-s", type=float, default=600)
    ap.add_argument("--json", default="bench.json")
    ap.add_argument("--markdown", default=None, help="write the tables and goals here too")
    ap.add_argument("--from-json", default=None, metavar="JSON",
                    help="no run: the tables of an earlier (or interrupted, partial) run's --json")
    args = ap.parse_args(argv)
    if args.serve:
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
        plan = [(d, t, i, (args.workers or "0,2:spawn").split(","), None)
                for d in (args.datasets or "g1").split(",") for t in (args.transports or "local").split(",")
                for i in (args.items or "uint8").split(",")]
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

        server = LoopbackServer.start({"static": str(cache / "datasets"), "latency_s": args.latency_ms / 1e3,
                                       "bandwidth_bps": args.bandwidth_mbit * 1e6 / 8})
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
                    trials += run_limits(ours_side, roots[d], facts[d], d, rnd, args.samples or DATASETS[d][2],
                                         args.trial_timeout_s)
            for d, tr, items, workers, only in plan:
                for nw, ctx in [w for ws in workers for w in parse_workers(ws)]:
                    mine = [c for c in contestants if only is None or c.kind in only]
                    order = mine[rnd % max(1, len(mine)):] + mine[:rnd % max(1, len(mine))]
                    for c in order:
                        row = {"round": rnd, "dataset": d, "transport": tr, "items": items, "num_workers": nw,
                               "mp_context": ctx, "contestant": c.label}
                        if c.error:
                            row["skipped"] = c.error
                            trials.append(row)
                            continue
                        if c.kind.startswith("lerobot") and mixture_of(roots[d]):
                            row["skipped"] = ("LeRobot has no streaming mixture (its MultiLeRobotDataset needs every "
                                              "dataset downloaded, has no weights, and lerobot-train refuses it)")
                            trials.append(row)
                            continue
                        if c.kind == "lerobot-streaming" and tr != "local":
                            row["skipped"] = "LeRobot's StreamingLeRobotDataset reads a local folder or the Hub; local only"
                            trials.append(row)
                            continue
                        spec = {"kind": c.kind, "num_workers": nw, "mp_context": ctx, "uint8": items == "uint8",
                                "batch_size": args.batch_size, "samples": args.samples or DATASETS[d][2],
                                "seed": args.seed + rnd, "repo_id": f"bench/{d}", "options": c.options,
                                "prefetch_factor": args.prefetch_factor, "root": str(roots[d]),
                                "mixture": mixture_of(roots[d])}
                        url = f"{server.static_url}{roots[d].name}/" if tr == "http" else None
                        if tr == "http" and c.kind == "ours":
                            spec["root"] = url
                        elif tr == "http":
                            spec.update(download_url=url, files=facts[d].files)
                        if server is not None:
                            server.clear_log()
                        la = _load()
                        r = c.call(spec, args.trial_timeout_s)
                        row.update(r, load_before=la, load_after=_load())
                        if server is not None and tr == "http":
                            row["served_bytes"] = _served_bytes(server.log(), cache / "datasets")
                        if r.get("anchors"):
                            row["needed_bytes"] = facts[d].needed_bytes(r["anchors"])
                            row["anchors"] = len(r["anchors"])
                        trials.append(row)
                        _atomic_write(Path(args.json), json.dumps({"partial": True, "trials": trials}, default=str))
                        print(f"round {rnd} {d:<9} {tr:<5} {items:<7} w{nw}{':' + ctx if ctx else '':<7} {c.label:<18} "
                              + (row.get("error") or f"{_fmt(row.get('steady_samples_per_s'))} samples/s, first batch "
                                 f"{_fmt(row.get('first_batch_s'), '.2f')} s, {_fmt(row.get('cpu_ms_per_sample'), '.1f')} "
                                 f"CPU ms/sample, load {la:.1f}"), file=sys.stderr, flush=True)
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
    meta = {"command": "python -m tools.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(t_start)), "minutes": (time.time() - t_start) / 60,
            "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "rounds": args.rounds, "batch_size": args.batch_size, "prefetch_factor": args.prefetch_factor,
            "remote": {"latency_ms": args.latency_ms, "bandwidth_mbit": args.bandwidth_mbit},
            "load": _load_summary(trials), "setup": setup, "git": _git_head()}
    text = format_all(summary, meta, ours or "ours")
    print(text)
    out = {"meta": meta, "summary": summary, "trials": trials}
    _atomic_write(Path(args.json), json.dumps(out, indent=1, default=str))
    if args.markdown:
        _atomic_write(Path(args.markdown), text)
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
        "command": f"(partial run, tables from {args.from_json})", "date": "?", "minutes": float("nan"),
        "cpus": len(os.sched_getaffinity(0)), "rounds": 1 + max(t["round"] for t in trials),
        "batch_size": args.batch_size, "remote": {"latency_ms": args.latency_ms, "bandwidth_mbit": args.bandwidth_mbit},
        "load": _load_summary(trials), "setup": {}, "git": _git_head()}
    text = format_all(summary, meta, ours or "ours")
    print(text)
    if args.markdown:
        _atomic_write(Path(args.markdown), text)
    return 0


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _git_head() -> str | None:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _load_summary(trials: list[dict]) -> dict:
    xs = [x for t in trials for x in (t.get("load_before"), t.get("load_after")) if isinstance(x, float)]
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)} if xs else {}


# --- summary and tables -------------------------------------------------------------------------------
def summarize(trials: list[dict], facts: dict[str, DatasetFacts], ours: str | None) -> list[dict]:
    """One row per setting: per contestant the medians, and per-round ratios ``ours`` (the label of
    the reference contestant) / peer and / limit."""
    limits: dict[tuple[str, int, str], dict] = {(t["dataset"], t["round"], t["contestant"]): t
                                                 for t in trials if t["contestant"].startswith("limit")}
    settings = list(dict.fromkeys((t["dataset"], t["transport"], t["items"], t["num_workers"], t["mp_context"])
                                  for t in trials if "transport" in t))
    rows = []
    for key in settings:
        d, tr, items, nw, ctx = key
        f = facts[d]
        cams = len(f.video_keys)
        mine = [t for t in trials if (t.get("dataset"), t.get("transport"), t.get("items"), t.get("num_workers"),
                                      t.get("mp_context")) == key]
        row: dict[str, Any] = {"dataset": d, "transport": tr, "items": items, "num_workers": nw, "mp_context": ctx,
                               "cameras": cams, "contestants": {}}
        rounds = sorted({t["round"] for t in mine})
        lim = {lab: [limits.get((d, r, lab)) for r in rounds] for lab in LIMITS}
        lim_sps = {lab: [x["frames_per_s"] / cams if x and x.get("frames_per_s") else None for x in v] for lab, v in lim.items()}
        best = [best_limit({lab: limits.get((d, r, lab)) for lab in LIMITS}) for r in rounds]
        lim_sps["best"] = [x / cams if x else None for x in best]
        cpu_frame = _median([x.get("cpu_ms_per_frame") for x in lim["limit-1thread"] if x])
        row["limit"] = {"samples_per_s": _median(lim_sps["best"]),
                        "samples_per_s_ffmpeg": _median(lim_sps["limit-ffmpeg"]),
                        "samples_per_s_cores": _median(lim_sps["limit-cores"]),
                        "samples_per_s_1thread": _median(lim_sps["limit-1thread"]),
                        "cpu_ms_per_frame_1thread": cpu_frame,
                        "cpu_ms_per_frame_ffmpeg": _median([x.get("cpu_ms_per_frame") for x in lim["limit-ffmpeg"] if x])}
        by_c: dict[str, dict[int, dict]] = {}
        for t in mine:
            by_c.setdefault(t["contestant"], {})[t["round"]] = t
        for lab, per_round in by_c.items():
            ok = [t for t in per_round.values() if "error" not in t and "skipped" not in t]
            if not ok:
                bad = next(iter(per_round.values()))
                why = [x for x in str(bad.get("skipped") or bad.get("error")).splitlines() if x.strip()] or ["?"]
                row["contestants"][lab] = {"skipped": why[-1].strip()}  # a worker's error: its last line
                continue
            sps = [t.get("steady_samples_per_s") for t in ok]
            st = [t.get("ours_stats") for t in ok if t.get("ours_stats")]
            st_steady = [t.get("ours_stats_steady") or t.get("ours_stats") for t in ok if t.get("ours_stats")]
            if lab == ours or lab.startswith("ours"):
                dpr = _median([s.get("frames_decoded_per_returned") for s in st])
            elif lab == "lerobot":
                dpr = f.seek_decoded_per_frame
            else:
                dpr = 1.0
            cpu = _median([t.get("cpu_ms_per_sample") for t in ok])
            dec = dpr * cams * cpu_frame if dpr is not None and cpu_frame is not None else None
            if lab == "lerobot-streaming":
                dec = None  # it decodes into its shuffle buffer before the first batch: no decode in the steady part
            needed = [t.get("needed_bytes") for t in ok]
            if tr == "http":
                fetched = [t.get("served_bytes") for t in ok]
            else:
                fetched = [t["ours_stats"]["bytes_fetched"] if t.get("ours_stats") else None for t in ok]
            ratio = [a / b for a, b in zip(fetched, needed) if a and b]
            c = {"runs": len(ok), "steady_samples_per_s": _median(sps),
                 "spread": (min(x for x in sps if x) / max(x for x in sps if x)) if any(sps) else None,
                 "first_batch_s": _median([t.get("first_batch_s") for t in ok]),
                 "construct_s": _median([t.get("construct_s") for t in ok]),
                 "download_s": _median([t.get("download_s") for t in ok]),
                 "cpu_ms_per_sample": cpu, "decode_cpu_ms_per_sample": dec,
                 "rest_cpu_ms_per_sample": (cpu - dec) if cpu is not None and dec is not None else None,
                 "frames_decoded_per_returned": dpr, "decoded_per_returned_counted": bool(st),
                 "peak_pss_mib": _median([t.get("peak_pss_mib") for t in ok]),
                 "fetched_over_needed": _median(ratio),
                 "samples": _median([t.get("samples") for t in ok])}
            if st_steady:  # after the warm-up when each process reported twice, else the whole run
                c["stage_ms_per_item"] = {k: _median([s["stage_ms_per_item"].get(k) for s in st_steady])
                                          for k in st_steady[0]["stage_ms_per_item"]}
            c["over_limit"] = _median([t.get("steady_samples_per_s") / lim_sps["best"][rounds.index(t["round"])]
                                       for t in ok if t.get("steady_samples_per_s")
                                       and lim_sps["best"][rounds.index(t["round"])]])
            row["contestants"][lab] = c
        if ours in by_c:
            for lab, per_round in by_c.items():
                if lab == ours or lab not in row["contestants"] or "skipped" in row["contestants"][lab]:
                    continue
                rs = [by_c[ours][r].get("steady_samples_per_s") / per_round[r].get("steady_samples_per_s")
                      for r in per_round if r in by_c[ours] and by_c[ours][r].get("steady_samples_per_s")
                      and per_round[r].get("steady_samples_per_s")]
                fb = [per_round[r].get("first_batch_s") / by_c[ours][r].get("first_batch_s")
                      for r in per_round if r in by_c[ours] and by_c[ours][r].get("first_batch_s")
                      and per_round[r].get("first_batch_s")]
                row["contestants"][lab]["ours_over_this"] = _median(rs)
                row["contestants"][lab]["this_first_over_ours_first"] = _median(fb)
        rows.append(row)
    return rows


def _fmt(x, spec=".0f") -> str:
    return "–" if x is None else format(x, spec)


def _setting(r: dict) -> str:
    return f"{r['num_workers']}" + (f" ({r['mp_context']})" if r["mp_context"] else "")


def readme_table(rows: list[dict], ours: str = "ours") -> str:
    """The README table: one line per setting."""
    head = ("| data | store | items | workers | ours samples/s | LeRobot map-style | LeRobot streaming | "
            "ours ÷ map-style | ours ÷ decode limit | first batch s: ours / map / streaming | "
            "CPU ms/sample: ours (decode + rest) / map-style | decoded per returned: ours / map | "
            "peak PSS MiB: ours / map / streaming | fetched ÷ needed: ours / map |")
    lines = [head, "|" + "---|" * 4 + "---:|" * 10]
    for r in rows:
        c = r["contestants"]
        o, m, s = c.get(ours, {}), c.get("lerobot", {}), c.get("lerobot-streaming", {})

        def sps(x):
            return "n/a" if "skipped" in x else _fmt(x.get("steady_samples_per_s"))

        label = DATASETS[r["dataset"]][0] if r["dataset"] in DATASETS else r["dataset"]
        store = "local" if r["transport"] == "local" else "remote"
        lines.append(
            f"| {label} | {store} | {r['items']} | {_setting(r)} | {sps(o)} | {sps(m)} | {sps(s)} | "
            f"{_fmt(m.get('ours_over_this'), '.2f')} | {_fmt(o.get('over_limit'), '.2f')} | "
            f"{_fmt(o.get('first_batch_s'), '.2f')} / {_fmt(m.get('first_batch_s'), '.2f')} / {_fmt(s.get('first_batch_s'), '.2f')} | "
            f"{_fmt(o.get('cpu_ms_per_sample'), '.1f')} ({_fmt(o.get('decode_cpu_ms_per_sample'), '.1f')} + "
            f"{_fmt(o.get('rest_cpu_ms_per_sample'), '.1f')}) / {_fmt(m.get('cpu_ms_per_sample'), '.1f')} | "
            f"{_fmt(o.get('frames_decoded_per_returned'), '.2f')} / {_fmt(m.get('frames_decoded_per_returned'), '.2f')} | "
            f"{_fmt(o.get('peak_pss_mib'))} / {_fmt(m.get('peak_pss_mib'))} / {_fmt(s.get('peak_pss_mib'))} | "
            f"{_fmt(o.get('fetched_over_needed'), '.2f')} / {_fmt(m.get('fetched_over_needed'), '.2f')} |")
    return "\n".join(lines)


def full_table(rows: list[dict]) -> str:
    """Every contestant of every setting, with the decode limit of the same rounds."""
    lines = ["| data | store | items | workers | contestant | runs | steady samples/s (spread) | ours ÷ this | "
             "÷ decode limit | first batch s (download) | CPU ms/sample (decode + rest) | decoded/returned | "
             "peak PSS MiB | fetched ÷ needed |", "|" + "---|" * 5 + "---:|" * 9]
    for r in rows:
        lim = r["limit"]
        lines.append(f"| {r['dataset']} | {r['transport']} | {r['items']} | {_setting(r)} | decode limit (best; FFmpeg threads / one decoder per core / 1 thread) | "
                     f"{r['cameras']} cam | {_fmt(lim['samples_per_s'])}; {_fmt(lim.get('samples_per_s_ffmpeg'))} / "
                     f"{_fmt(lim.get('samples_per_s_cores'))} / {_fmt(lim['samples_per_s_1thread'])} | | | | "
                     f"{_fmt(lim['cpu_ms_per_frame_1thread'], '.2f')} ms/frame (1 thread) | 1.00 | | |")
        for lab, c in r["contestants"].items():
            if "skipped" in c:
                lines.append(f"| | | | | {lab} | 0 | {c['skipped']} | | | | | | | |")
                continue
            dl = f" ({_fmt(c['download_s'], '.2f')})" if c.get("download_s") is not None else ""
            model = "" if c.get("decoded_per_returned_counted") or lab.startswith("ours") else " (model)"
            lines.append(
                f"| | | | | {lab} | {c['runs']} | {_fmt(c['steady_samples_per_s'])} ({_fmt(c['spread'], '.2f')}) | "
                f"{_fmt(c.get('ours_over_this'), '.2f')} | {_fmt(c.get('over_limit'), '.2f')} | "
                f"{_fmt(c['first_batch_s'], '.2f')}{dl} | {_fmt(c['cpu_ms_per_sample'], '.1f')} "
                f"({_fmt(c['decode_cpu_ms_per_sample'], '.1f')} + {_fmt(c['rest_cpu_ms_per_sample'], '.1f')}) | "
                f"{_fmt(c['frames_decoded_per_returned'], '.2f')}{model} | {_fmt(c['peak_pss_mib'])} | "
                f"{_fmt(c['fetched_over_needed'], '.2f')} |")
    return "\n".join(lines)


def stage_table(rows: list[dict], ours: str = "ours") -> str:
    """Ours' profiler stages per item (ms, wall time summed over threads and workers)."""
    stages = ("spans", "parquet", "fetch", "synthesize", "open", "decode", "assemble", "queue_wait", "decode_job")
    lines = ["| data | store | items | workers | " + " | ".join(stages) + " |", "|" + "---|" * 4 + "---:|" * len(stages)]
    for r in rows:
        for lab, c in r["contestants"].items():
            if not lab.startswith("ours") or "stage_ms_per_item" not in c:
                continue
            s = c["stage_ms_per_item"]
            name = r["dataset"] + ("" if lab == ours else f" [{lab}]")
            lines.append(f"| {name} | {r['transport']} | {r['items']} | {_setting(r)} | "
                         + " | ".join(_fmt(s.get(k), ".2f") for k in stages) + " |")
    return "\n".join(lines)


def goals(rows: list[dict], ours: str = "ours") -> list[tuple[str, str, str]]:
    """The performance goals on this machine (uint8 items): (goal, measured, "met" | "not met" | "not measured")."""
    def find(d, tr="local", items="uint8", nw=None, ctx=None):
        return [r for r in rows if r["dataset"] == d and r["transport"] == tr and r["items"] == items
                and (nw is None or r["num_workers"] == nw) and (ctx is None or r["mp_context"] == ctx)]

    def c(r, lab):
        return r["contestants"].get(lab, {})

    out = []

    def add(goal, vals, ok):
        if not vals:
            out.append((goal, "–", "not measured"))
        else:
            out.append((goal, "; ".join(vals), "met" if ok else "not met"))

    for nw in (0, 2):
        rs = find("g1", nw=nw)
        vals = [f"{_setting(r)}: {_fmt(c(r, ours).get('over_limit'), '.2f')}x" for r in rs]
        add(f"≥ 0.8x the raw decode limit, real AV1 g=2, uint8, {nw} workers", vals,
            rs and all((c(r, ours).get("over_limit") or 0) >= 0.8 for r in rs))
    for nw, want in ((2, 2.0), (0, 3.0)):
        rs = find("g1", nw=nw)
        vals = [f"{_setting(r)}: {_fmt(c(r, 'lerobot').get('ours_over_this'), '.2f')}x" for r in rs]
        add(f"≥ {want:.0f}x LeRobot 0.6.1 map-style, real AV1 g=2, uint8, {nw} workers", vals,
            rs and all((c(r, "lerobot").get("ours_over_this") or 0) >= want for r in rs))
    vals, ok = [], True
    for d in dict.fromkeys(r["dataset"] for r in rows):
        for tr in ("local", "http"):
            for items in ("uint8", "float32"):
                z = find(d, tr, items, 0)
                for r in find(d, tr, items, 2):
                    if z and c(z[0], ours).get("steady_samples_per_s") and c(r, ours).get("steady_samples_per_s"):
                        q = c(r, ours)["steady_samples_per_s"] / c(z[0], ours)["steady_samples_per_s"]
                        vals.append(f"{d} {tr} {items} {_setting(r)}: {q:.2f}x")
                        ok = ok and q >= 1.0
    add("2 workers never slower than 0 (ours, 2 workers ÷ 0 workers)", vals, ok)
    rs = find("g1-h264")
    vals = [f"{_setting(r)}: {_fmt(c(r, 'lerobot').get('ours_over_this'), '.2f')}x" for r in rs]
    add("≥ 4x LeRobot map-style on long-GOP H.264", vals,
        rs and all((c(r, "lerobot").get("ours_over_this") or 0) >= 4 for r in rs))
    rs = [r for r in rows if r["transport"] == "local" and r["num_workers"] == 2]
    vals = [f"{r['dataset']} {r['items']} {_setting(r)}: {_fmt(c(r, ours).get('first_batch_s'), '.2f')} vs "
            f"{_fmt(c(r, 'lerobot').get('first_batch_s'), '.2f')} s" for r in rs if c(r, "lerobot").get("first_batch_s")]
    add("first batch no slower than map-style's (warm sidecar), fork and spawn", vals,
        all((c(r, ours).get("first_batch_s") or 1e9) <= c(r, "lerobot")["first_batch_s"] for r in rs
            if c(r, "lerobot").get("first_batch_s")) and bool(vals))
    vals, ok, fb_ok, fb_vals = [], True, True, []
    for r in [r for r in rows if r["transport"] == "http"]:
        loc = find(r["dataset"], "local", r["items"], r["num_workers"], r["mp_context"])
        o = c(r, ours)
        if loc and o.get("steady_samples_per_s") and c(loc[0], ours).get("steady_samples_per_s"):
            q = o["steady_samples_per_s"] / c(loc[0], ours)["steady_samples_per_s"]
            vals.append(f"{r['dataset']} {_setting(r)}: {q:.2f}x")
            ok = ok and q >= 0.9
        if o.get("first_batch_s") is not None:
            fb_vals.append(f"{r['dataset']} {_setting(r)}: {o['first_batch_s']:.2f} s (map-style "
                           f"{_fmt(c(r, 'lerobot').get('first_batch_s'), '.2f')} s incl. download)")
            fb_ok = fb_ok and o["first_batch_s"] <= 2.0
    add("remote store: steady ≥ 0.9x our local figure", vals, ok)
    add("remote store: first batch within 2 s", fb_vals, fb_ok)
    return out


def format_all(rows: list[dict], meta: dict, ours: str = "ours") -> str:
    load = meta.get("load") or {}
    parts = [f"Measured {meta['date']} at {meta.get('git') or '?'} on {meta['cpus']} CPU(s), {meta['rounds']} "
             f"interleaved round(s), batch {meta['batch_size']}, load average during the run "
             f"{_fmt(load.get('min'), '.1f')}-{_fmt(load.get('max'), '.1f')} (median {_fmt(load.get('median'), '.1f')}); "
             f"{meta['minutes']:.1f} min in all. Remote store: {meta['remote']['latency_ms']:.0f} ms round trip, "
             f"{meta['remote']['bandwidth_mbit']:.0f} Mbit/s.", "", f"`{meta['command']}`", "", readme_table(rows, ours), "",
             "Goals:", ""]
    parts += [f"- {g}: **{v}** — {m}" for g, m, v in goals(rows, ours)]
    parts += ["", "Every contestant, with the decode limit of the same rounds (spread = slowest ÷ fastest round):", "",
              full_table(rows), "", "Ours' profiler stages, ms per item (wall time summed over threads and workers):",
              "", stage_table(rows, ours)]
    for n in meta.get("setup", {}).get("notes", []):
        parts.append(f"\nnote: {n}")
    return "\n".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
