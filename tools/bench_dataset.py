"""Dataset benchmark on one generated dataset, in one run (SPEC: issue 10 "Must show"):

(a) ours: ``StreamingLeRobotDataset`` through a DataLoader (``num_workers``), one epoch;
(b) map-style baseline (LeRobot's algorithm): a map-style ``Dataset`` with one torchcodec decoder per
    full source video file per worker (exact mode), one ``get_frames_played_at`` seek per sample and
    camera, shuffled sampler, same ``num_workers`` and batch size;
(c) raw decode limit (``limit``): every frame of every video file decoded in one sequential pass,
    through the same DataLoader (the files split over its workers; samples/s = frames/s / cameras);
    it yields one tiny tensor per 64 frames, so it pays no per-item conversion and no batch transfer;
(d) decode+item limit (``limit_items``): the same sequential pass, but yielding the items a training
    loop needs — per sample every camera's frame as a contiguous float32 (C,H,W) in [0, 1] (ours'
    conversion function) plus the index columns — collated into batches by the same DataLoader. This
    is the fair ceiling for ``ours`` (same item tensors, same collate/transfer); the goals are stated
    against it, and the raw limit is reported beside it.

Also CPU seconds per sample (this process + its reaped DataLoader workers, from ``getrusage``): the
machine is shared, so wall-clock rates swing with other jobs while CPU cost per sample is steadier.

All three run through the same DataLoader settings, interleaved (the first one rotates), ``--repeats``
times; medians are reported. One-time costs are kept apart: the torchcodec import is paid once in
the parent before anything is timed (workers fork from it), the dataset construction (metadata +
sidecar build/open) is ``setup_s``; per run, ``first_batch_s`` and ``warmup_s`` (until every worker
delivered a batch) are reported separately from the steady-state rate (samples after warm-up / time
after warm-up) and the total rate. Also: peak RSS and PSS per process (main and DataLoader workers,
sampled every 50 ms from /proc), frames decoded per frame returned (ours: ``ds.stats()``; map-style:
per sample, seek point to target frame).

    python tools/bench_dataset.py --codec av1 --cameras 2 --size 640x480 --num-workers 0,2
    python tools/bench_dataset.py --codec h264 --cameras 1 --size 640x480 --num-workers 0,2

``--depth-cameras N`` / ``--image-cameras N`` add LeRobot 0.6 depth video cameras (HEVC ``gray12le``)
and ``image`` features (PNG in the rows) of the same size; map-style then decodes depth as LeRobot
0.6.1 does (PyAV: open the file, seek, decode to the frame, ``gray12le`` codes, dequantise) and
images per sample with Pillow (HF ``Image`` + ``ToTensor``); compare with ``--only ours,map_style``
(the sequential limits cover the RGB cameras only).

``--map-layout contiguous`` makes the map-style items contiguous too (LeRobot's ``x.type(float32) / 255``
keeps torchcodec's channels-last strides; that is the default here, as LeRobot users get it).
"""

from __future__ import annotations

import argparse
import atexit
import glob
import json
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lerobotstream.dataset import StreamingLeRobotDataset  # noqa: E402
from lerobotstream.dataset._assemble import _image_value, _video_value  # noqa: E402
from lerobotstream.dataset._images import decode_image  # noqa: E402
from tools.make_dataset import make_dataset  # noqa: E402


class _Mem:
    """Peak RSS / PSS (KiB) of this process and its children, sampled from /proc."""

    def __init__(self) -> None:
        self.peak: dict[int, dict[str, int]] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self, pid: int) -> None:
        try:
            txt = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            return
        vals = {ln.split(":")[0]: int(ln.split()[1]) for ln in txt.splitlines()[1:] if ln.split()[0] in ("Rss:", "Pss:")}
        p = self.peak.setdefault(pid, {"rss_kib": 0, "pss_kib": 0})
        p["rss_kib"] = max(p["rss_kib"], vals.get("Rss", 0))
        p["pss_kib"] = max(p["pss_kib"], vals.get("Pss", 0))

    def _children(self) -> list[int]:
        try:
            return [int(x) for x in Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()]
        except OSError:
            return []

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in [os.getpid(), *self._children()]:
                self._sample(pid)
            time.sleep(0.05)

    def __enter__(self):
        self.peak.clear()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._stop.clear()
        self._t.start()
        return self

    def __exit__(self, *a):
        self._stop.set()
        self._t.join()

    def summary(self) -> dict[str, list[int]]:
        return {"rss_mib": [v["rss_kib"] // 1024 for v in self.peak.values()],
                "pss_mib": [v["pss_kib"] // 1024 for v in self.peak.values()]}


class _StatsDataset(StreamingLeRobotDataset):
    """Writes each process's ``stats()`` to ``stats_dir`` when its iterator ends."""

    stats_dir = ""

    def __iter__(self):
        try:
            yield from super().__iter__()
        finally:
            with open(os.path.join(self.stats_dir, f"{os.getpid()}.json"), "w") as f:
                json.dump(self.stats(), f, default=str)


class MapStyle(torch.utils.data.Dataset):
    """LeRobot's map-style algorithm: decoder per full file (opened lazily per worker), seek per sample."""

    def __init__(self, root: Path, cameras: list[str], layout: str = "lerobot", uint8: bool = False) -> None:
        import pyarrow.parquet as pq

        from lerobotstream.meta import DatasetMeta

        self.root, self.layout, self.uint8 = root, layout, uint8
        self.meta = DatasetMeta.load(str(root))
        self.depth = {k: self.meta.depth_quantizer(k) for k in cameras if k in self.meta.depth_keys}
        self.images = [k for k in cameras if k in self.meta.image_keys]
        self.cameras = [k for k in cameras if k not in self.depth and k not in self.images]
        tables = [pq.read_table(p) for p in sorted(glob.glob(str(root / "data" / "*" / "*.parquet")))]
        import pyarrow as pa

        t = pa.concat_tables(tables).sort_by("index")
        self.ep = t.column("episode_index").to_numpy()
        self.fr = t.column("frame_index").to_numpy()
        self.ts = t.column("timestamp").to_numpy().astype(np.float64)
        self.state = torch.from_numpy(np.stack(t.column("observation.state").to_numpy(zero_copy_only=False)).astype(np.float32))
        self.image_cells = {k: t.column(k).combine_chunks().field("bytes") for k in self.images}  # Arrow, like HF
        self._dec: dict[str, object] = {}
        self._pid = None
        self.decoded = self.returned = 0

    def __len__(self) -> int:
        return len(self.ep)

    def _decoder(self, path: str):
        from torchcodec.decoders import VideoDecoder

        if self._pid != os.getpid():
            self._dec, self._pid = {}, os.getpid()
        d = self._dec.get(path)
        if d is None:
            d = self._dec[path] = VideoDecoder(str(self.root / path), seek_mode="exact")
        return d

    def __getitem__(self, i: int) -> dict:
        info = self.meta.episode(int(self.ep[i]))
        item = {"episode_index": torch.tensor(int(self.ep[i])), "frame_index": torch.tensor(int(self.fr[i])),
                "observation.state": self.state[i]}
        for cam in self.cameras:
            v = info.videos[cam]
            frames = self._decoder(v.path).get_frames_played_at([v.from_timestamp + float(self.ts[i])])
            x = frames.data[0]
            if self.uint8:
                item[cam] = x  # map-style with return_uint8: torchcodec's uint8 frame as is
            elif self.layout == "contiguous":
                item[cam] = torch.empty(x.shape, dtype=torch.float32).copy_(x).div_(255)
            else:
                item[cam] = x.type(torch.float32) / 255  # LeRobot's conversion (channels-last strides)
        for cam, q in self.depth.items():  # LeRobot 0.6.1: PyAV per sample, gray12le codes, dequantised
            item[cam] = self._depth(info.videos[cam].path, info.videos[cam].from_timestamp + float(self.ts[i]), q)
        for cam in self.images:  # HF Image decode (Pillow) + ToTensor, per sample
            item[cam] = _image_value([decode_image(self.image_cells[cam][i].as_py())], False)
        return item

    def _depth(self, path: str, ts: float, q) -> torch.Tensor:
        import av

        from lerobotstream.decode import dequantize_reference

        with av.open(str(self.root / path)) as container:
            stream = container.streams.video[0]
            container.seek(round(ts / stream.time_base) - 1, backward=True, any_frame=False, stream=stream)
            best = None
            for frame in container.decode(stream):
                cur = float(frame.pts * stream.time_base)
                if best is None or abs(cur - ts) < best[0]:
                    best = (abs(cur - ts), frame.to_ndarray(format="gray12le"))
                if cur >= ts:
                    break
        codes = torch.from_numpy(best[1].astype(np.int32))[None, None]
        return dequantize_reference(codes, q.depth_min, q.depth_max, q.shift, q.use_log, "mm").squeeze(0)


def _map_style_cost(root: Path, cams: list[str], meta) -> dict[tuple[int, int], int]:
    """Frames a seek-per-sample decoder decodes for each (episode, frame) (seek point → target)."""
    from lerobotstream.mp4 import parse_mp4_bytes

    out: dict[tuple[int, int], int] = {}
    tables = {}
    for e in meta.episode_indices.tolist():
        info = meta.episode(e)
        for cam in cams:
            p = info.videos[cam].path
            if p not in tables:
                t = parse_mp4_bytes((root / p).read_bytes())
                po = np.asarray(t.presentation_order)
                tables[p] = (np.asarray(t.pts_s)[po], np.asarray(t.is_sync)[po])
            pts, sync = tables[p]
            keys = np.flatnonzero(sync)
            for f in range(info.length):
                j = int(np.argmin(np.abs(pts - (info.videos[cam].from_timestamp + f / meta.fps))))
                k = keys[np.searchsorted(keys, j, side="right") - 1]
                out[(e, f)] = out.get((e, f), 0) + (j - int(k) + 1)
    return out


class SeqLimit(torch.utils.data.IterableDataset):
    """Decode limit through the same DataLoader: each worker decodes its share of the video files
    sequentially (64-frame ranges) and yields one tiny tensor per range (no per-sample work)."""

    def __init__(self, paths: list[str], cameras: int) -> None:
        self.paths, self.cameras = paths, cameras

    def __iter__(self):
        from torchcodec.decoders import VideoDecoder

        info = torch.utils.data.get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        for p in self.paths[wid::nw]:
            d = VideoDecoder(p, seek_mode="approximate")
            for i in range(0, len(d), 64):
                n = d.get_frames_in_range(i, min(i + 64, len(d))).data.shape[0]
                yield torch.tensor([n / self.cameras])  # samples' worth of frames


class SeqItems(torch.utils.data.IterableDataset):
    """Decode+item limit: episodes split over the workers, each camera's frames decoded sequentially
    (64-frame ranges, one decoder per file per worker), yielded as map-style-like items (every
    camera's frame as contiguous float32 (C,H,W) in [0, 1], plus index columns)."""

    def __init__(self, root: Path, cameras: list[str], meta, uint8: bool = False) -> None:
        self.root, self.cameras, self.uint8 = root, cameras, uint8
        self.eps = [(int(e), meta.episode(int(e))) for e in meta.episode_indices.tolist()]
        self.fps = meta.fps

    def __iter__(self):
        from torchcodec.decoders import VideoDecoder

        info = torch.utils.data.get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        decs: dict[str, object] = {}
        for e, ep in self.eps[wid::nw]:
            for a in range(0, ep.length, 64):
                b = min(a + 64, ep.length)
                blocks = {}
                for cam in self.cameras:
                    v = ep.videos[cam]
                    d = decs.get(v.path)
                    if d is None:
                        d = decs[v.path] = VideoDecoder(str(self.root / v.path), seek_mode="approximate")
                    s0 = int(round(v.from_timestamp * self.fps))
                    blocks[cam] = d.get_frames_in_range(s0 + a, s0 + b).data
                for f in range(a, b):
                    item = {"episode_index": torch.tensor(e), "frame_index": torch.tensor(f)}
                    for cam, blk in blocks.items():
                        item[cam] = _video_value(blk[f - a:f - a + 1], self.uint8)  # ours' conversion
                    yield item


def _copy_cameras(src: Path, dst: Path, copies: int) -> Path:
    """A copy of the LeRobot v3 dataset ``src`` at ``dst`` where every camera also appears ``copies - 1``
    more times under new keys (``<key>_copy<j>``, same MP4 files copied, same episode columns): a
    multi-camera dataset with real content (e.g. ``data/g1_v30``) for ``--root ... --camera-copies 2``."""
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


def _transcode_h264(root: Path, gop: int) -> None:
    """Re-encode every MP4 under ``root/videos`` in place with libx264 (2 B-frames, closed GOPs of
    ``gop`` frames, same frame count and timestamps): the long-GOP case on real content."""
    import subprocess

    for p in sorted((root / "videos").rglob("*.mp4")):
        tmp = p.with_suffix(".h264.mp4")
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-i", str(p), "-an", "-c:v", "libx264",
                        "-preset", "veryfast", "-bf", "2", "-g", str(gop), "-keyint_min", str(gop),
                        "-sc_threshold", "0", "-pix_fmt", "yuv420p", str(tmp)], check=True)
        tmp.replace(p)


def _cpu_s() -> float:
    """CPU seconds of this process and its reaped children (DataLoader workers)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def _run_loader(ds, nw: int, bs: int, warm_batches: int, mp_context: str | None = None) -> dict:
    """One pass through a DataLoader; warm-up = until ``warm_batches`` batches arrived.
    ``mp_context``: the DataLoader's ``multiprocessing_context`` (workers only; under ``spawn`` and
    ``forkserver`` every worker imports torch/torchcodec afresh: that start-up is in ``first_batch_s``)."""
    limit = isinstance(ds, SeqLimit)
    mapstyle = isinstance(ds, MapStyle)
    dl = torch.utils.data.DataLoader(ds, batch_size=None if limit else bs, num_workers=nw, shuffle=mapstyle,
                                     generator=torch.Generator().manual_seed(0) if mapstyle else None,
                                     persistent_workers=False, multiprocessing_context=mp_context if nw else None)
    n = n_warm = 0.0
    t0 = time.perf_counter()
    first = t_warm = None
    k = 0
    c0 = _cpu_s()
    with _Mem() as mem:
        for batch in dl:
            n += float(batch.sum()) if limit else len(batch["episode_index"])
            k += 1
            if first is None:
                first = time.perf_counter() - t0
            if k == warm_batches:
                t_warm, n_warm = time.perf_counter() - t0, n
        del dl  # workers joined (reaped) before the CPU time is read
    total = time.perf_counter() - t0
    cpu_ms = (_cpu_s() - c0) / max(n, 1) * 1e3
    steady = (n - n_warm) / (total - t_warm) if t_warm is not None and total > t_warm and n > n_warm else None
    return {"samples": n, "total_s": total, "first_batch_s": first or 0.0, "warmup_s": t_warm,
            "samples_per_s": n / total, "steady_samples_per_s": steady, "cpu_ms_per_sample": cpu_ms,
            "mem": mem.summary()}


def _median(xs):
    xs = [x for x in xs if x is not None]
    return round(float(np.median(xs)), 3) if xs else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codec", default="av1")
    ap.add_argument("--gop", type=int, default=None, help="default: the generator's (AV1 g=2, H.264 30)")
    ap.add_argument("--cameras", type=int, default=2)
    ap.add_argument("--size", default="640x480")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--length", type=int, default=90)
    ap.add_argument("--num-workers", default="0,2", help="comma-separated DataLoader worker counts")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repetitions (median reported)")
    ap.add_argument("--pool", type=int, default=4, help="episode_pool_size per rank (split over workers)")
    ap.add_argument("--lookahead", type=int, default=64)
    ap.add_argument("--decode-threads", type=int, default=None, help="ours (default: the dataset's, 2)")
    ap.add_argument("--decoded-cache-gb", type=float, default=1.0)
    ap.add_argument("--ffmpeg-threads", type=int, default=1, help="ours: torchcodec num_ffmpeg_threads per decoder")
    ap.add_argument("--first-lookahead", type=int, default=None, help="ours: first decode chunk (default batch size)")
    ap.add_argument("--depth-cameras", type=int, default=0, help="depth video cameras (HEVC gray12le) to add")
    ap.add_argument("--image-cameras", type=int, default=0, help="image features (PNG in the rows) to add")
    ap.add_argument("--uint8", action="store_true",
                    help="uint8 items everywhere (ours: return_uint8=True; limits: contiguous uint8 frames)")
    ap.add_argument("--map-layout", default="lerobot", choices=("lerobot", "contiguous"))
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch intra-op threads in the main process (DataLoader workers always use 1); 0 = "
                         "torch's default. Default 1: on a loaded 2-core machine torch's OpenMP team makes a "
                         "3.7 MB copy in the main thread ~10x slower, which would penalise whoever converts or "
                         "collates there")
    ap.add_argument("--only", default="ours,map_style,limit,limit_items", help="contestants to run")
    ap.add_argument("--root", default=None, help="reuse a generated dataset, or a real one (e.g. data/g1_v30)")
    ap.add_argument("--transcode-h264", type=int, default=0, metavar="GOP",
                    help="with --root: re-encode a copy of its videos as H.264 with this GOP (e.g. 30)")
    ap.add_argument("--camera-copies", type=int, default=1,
                    help="with --root: each camera appears this many times (a multi-camera dataset of real content)")
    ap.add_argument("--json", default=None, help="also write the result here")
    ap.add_argument("--mp-context", default="fork",
                    help="comma-separated DataLoader multiprocessing contexts for runs with workers "
                         "(fork, spawn, forkserver; LeRobot 0.6's lerobot-train uses spawn)")
    a = ap.parse_args(argv)
    if a.torch_threads > 0:
        torch.set_num_threads(a.torch_threads)
    w, h = (int(x) for x in a.size.split("x"))
    cams = [(f"observation.images.cam{j}", w, h) for j in range(a.cameras)]
    tmp = tempfile.mkdtemp(prefix="bench_dataset_")
    atexit.register(shutil.rmtree, tmp, True)  # generated/copied datasets and stats files
    root = Path(a.root) if a.root else Path(tmp) / "ds"
    if a.root and (a.camera_copies > 1 or a.transcode_h264):
        root = _copy_cameras(root, Path(tmp) / "ds", a.camera_copies)
        if a.transcode_h264:
            _transcode_h264(root, a.transcode_h264)
    if not a.root:
        t = time.perf_counter()
        make_dataset(root, episode_lengths=[a.length] * a.episodes, cameras=cams, codec=a.codec, gop=a.gop,
                     episodes_per_video_file=max(1, a.episodes // 2),
                     depth_cameras=[(f"observation.images.depth{j}", w, h) for j in range(a.depth_cameras)],
                     image_cameras=[(f"observation.images.img{j}", w, h) for j in range(a.image_cameras)])
        print(f"generated {root} in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    # one-time costs, paid once in the parent before anything is timed (workers fork from it)
    t = time.perf_counter()
    import torchcodec.decoders  # noqa: F401
    warm = {"torchcodec_import_s": round(time.perf_counter() - t, 3)}
    keys = [c[0] for c in cams] if not a.root else None
    meta_probe = MapStyle(root, [])
    keys = keys or list(meta_probe.meta.video_keys)
    rgb_keys = [k for k in keys if k not in meta_probe.meta.depth_keys]
    keys = keys + [k for k in meta_probe.meta.camera_keys if k not in keys]  # depth and image features
    stats_dir = Path(tmp) / "stats"
    stats_dir.mkdir(exist_ok=True)
    _StatsDataset.stats_dir = str(stats_dir)
    paths = sorted({str(root / v.path) for e in meta_probe.meta.episode_indices.tolist()
                    for k, v in meta_probe.meta.episode(e).videos.items() if k in rgb_keys})
    cost = _map_style_cost(root, rgb_keys, meta_probe.meta)
    results = []
    settings = [(nw, ctx) for nw in [int(x) for x in a.num_workers.split(",")]
                for ctx in (a.mp_context.split(",") if nw else ["-"])]
    for nw, ctx in settings:
        mp_context = None if ctx == "-" else ctx
        t = time.perf_counter()
        ds = _StatsDataset(root=root, episode_pool_size=a.pool, prefetch_episodes=2, max_num_shards=max(1, nw),
                           decode_lookahead=a.lookahead,
                           **({} if a.decode_threads is None else {"decode_threads": a.decode_threads}),
                           decoded_cache_gb=a.decoded_cache_gb, ffmpeg_threads=a.ffmpeg_threads,
                           first_lookahead=a.first_lookahead, batch_size=a.batch_size, return_uint8=a.uint8)
        setup_s = time.perf_counter() - t  # metadata + sidecar (built on the first construction, then cached)
        ms = MapStyle(root, keys, a.map_layout, a.uint8)
        lim = SeqLimit(paths, len(rgb_keys))
        lim_items = SeqItems(root, rgb_keys, meta_probe.meta, a.uint8)
        only = a.only.split(",")
        order = [(n, d) for n, d in (("ours", ds), ("map_style", ms), ("limit", lim), ("limit_items", lim_items))
                 if n in only]
        runs: dict[str, list[dict]] = {n: [] for n, _ in order}
        ours_stats = []
        warm_batches = max(1, nw)
        for r in range(a.repeats):
            for name, d in order[r % len(order):] + order[:r % len(order)]:  # rotate who goes first
                for p in stats_dir.glob("*.json"):
                    p.unlink()
                runs[name].append(_run_loader(d, nw, a.batch_size, warm_batches, mp_context))
                if name == "ours":
                    ours_stats.append([json.loads(p.read_text()) for p in stats_dir.glob("*.json")])
        st = ours_stats[-1] if ours_stats else []
        dec = sum(s.get("frames_decoded", 0) for s in st)
        ret = sum(s.get("frames_returned", 0) for s in st)
        ratios = {f"ours_vs_{o}_{m}": _median([x[m] / y[m] if x[m] and y[m] else None
                                               for x, y in zip(runs["ours"], runs[o])])
                  for o in ("map_style", "limit", "limit_items") if o in runs and "ours" in runs
                  for m in ("steady_samples_per_s", "samples_per_s", "cpu_ms_per_sample")}
        res = {
            "num_workers": nw, "mp_context": mp_context, "batch_size": a.batch_size, "repeats": a.repeats,
            "setup_s": round(setup_s, 3),
            **{f"{n}_steady_samples_per_s": _median([x["steady_samples_per_s"] for x in v]) for n, v in runs.items()},
            **{f"{n}_total_samples_per_s": _median([x["samples_per_s"] for x in v]) for n, v in runs.items()},
            **{f"{n}_cpu_ms_per_sample": _median([x["cpu_ms_per_sample"] for x in v]) for n, v in runs.items()},
            **ratios,
            "first_batch_s": {n: _median([x["first_batch_s"] for x in v]) for n, v in runs.items()},
            "warmup_s": {n: _median([x["warmup_s"] for x in v]) for n, v in runs.items()},
            "frames_decoded_per_returned": {k: v for k, v in {
                "ours": round(dec / ret, 3) if ret else None,
                "map_style": round(sum(cost.values()) / (len(cost) * len(keys)), 3),
                "limit": 1.0, "limit_items": 1.0}.items() if k in runs},
            "peak_memory_mib_per_process": {n: v[-1]["mem"] for n, v in runs.items()},
            "ours_stats_per_process": [{k: s.get(k) for k in (
                "items", "first_item_s", "index_open_s", "decode_s", "open_s", "fetch_s", "assemble_s", "queue_wait_s",
                "bytes_fetched", "decoder_opens", "gop_cache_peak_bytes", "gop_cache_evictions")} for s in st],
            "runs": {n: [{k: (round(x[k], 3) if isinstance(x[k], float) else x[k]) for k in
                          ("samples_per_s", "steady_samples_per_s", "first_batch_s", "cpu_ms_per_sample")} for x in v]
                     for n, v in runs.items()},
        }
        print(json.dumps(res), file=sys.stderr, flush=True)
        results.append(res)
    name = (f"{a.root} ({len(keys)} cam{f', H.264 GOP {a.transcode_h264}' if a.transcode_h264 else ''})" if a.root else
            f"{a.codec} gop={a.gop or 'default'} {len(keys)} cam {a.size}, {a.episodes}x{a.length} frames")
    out = {"dataset": name + (", uint8 items" if a.uint8 else ", float32 items"),
           "one_time": warm, "torch_threads_main": torch.get_num_threads(), "command": "python tools/bench_dataset.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "results": results}
    print(json.dumps(out, indent=1))
    print(f"\n{out['dataset']}: steady samples/s (CPU ms per sample), medians of {a.repeats}", file=sys.stderr)
    for r in results:
        names = [n for n in ("ours", "map_style", "limit_items", "limit") if f"{n}_steady_samples_per_s" in r]
        cells = "  ".join(f"{n} {r[f'{n}_steady_samples_per_s']:.0f} ({r[f'{n}_cpu_ms_per_sample']:.1f})" for n in names)
        ratios = "  ".join(f"ours/{o} {r[f'ours_vs_{o}_steady_samples_per_s']:.2f}" for o in names[1:]
                           if f"ours_vs_{o}_steady_samples_per_s" in r)
        fb = "  ".join(f"{n} {r['first_batch_s'][n]:.2f}" for n in names if r["first_batch_s"].get(n) is not None)
        ctx = f" ({r['mp_context']})" if r.get("mp_context") else ""
        print(f"  num_workers={r['num_workers']}{ctx}: {cells}  |  {ratios}  |  first batch s: {fb}", file=sys.stderr)
    if a.json:
        tmp_json = Path(f"{a.json}.tmp{os.getpid()}")
        tmp_json.write_text(json.dumps(out, indent=1))
        os.replace(tmp_json, a.json)  # atomic: never a half-written result file
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
