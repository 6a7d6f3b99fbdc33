"""The benchmark's datasets: each a recipe built once (atomically) under the cache folder, and the
facts the orchestrator reads of it (files, cameras, coded sizes, map-style's decode model).

- ``g1``: the bundled real G1 footage (``data/g1_v30``: 2 episodes, 736 frames, 640x480 AV1 g=2);
- ``g1-3cam``: the same footage as 3 cameras (:func:`copy_cameras`);
- ``g1-h264``: re-encoded as H.264 with 2 B-frames and GOP 30 (:func:`transcode_h264`);
- generated datasets (``lerobotstream.testing.make_dataset``) and mixtures of two (a folder of links).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tools.bench_common import ROOT, atomic_write

__all__ = [
    "BUILD_VERSION",
    "CAMERA_NAMES",
    "DATASETS",
    "DatasetFacts",
    "MIXTURE_FILE",
    "MixtureFacts",
    "copy_cameras",
    "dataset_facts",
    "delta_timestamps",
    "ensure_dataset",
    "mixture_of",
    "transcode_h264",
]

BUILD_VERSION = "1"  # bump when a dataset recipe changes (cached builds are keyed by it)

#: name -> (table label, recipe, default samples per trial)
DATASETS: dict[str, tuple[str, dict, int]] = {
    "g1": ("real G1 640x480 AV1 g=2, 1 camera (`data/g1_v30`)", {"kind": "g1"}, 640),
    "g1-3cam": ("the same footage as 3 cameras", {"kind": "g1", "camera_copies": 3}, 640),
    "g1-h264": ("the same re-encoded H.264, 2 B-frames, GOP 30", {"kind": "g1", "h264_gop": 30}, 640),
    "gen-h264": (
        "generated H.264, B-frames, GOP 12, 2 cameras, 128x96, 20 episodes",
        {
            "kind": "generated",
            "codec": "h264",
            "gop": 12,
            "cameras": 2,
            "size": (128, 96),
            "episodes": 20,
            "length": 80,
        },
        1280,
    ),
    "gen-av1": (
        "generated AV1 g=2, 2 cameras, 640x480, 8 episodes",
        {"kind": "generated", "codec": "av1", "gop": 2, "cameras": 2, "size": (640, 480), "episodes": 8, "length": 90},
        640,
    ),
    "gen96-dp": (
        "generated 96x96 AV1 g=2, 2 cameras, 40 episodes, diffusion-policy window (2 frames, 16 actions)",
        {
            "kind": "generated",
            "codec": "av1",
            "gop": 2,
            "cameras": 2,
            "size": (96, 96),
            "episodes": 40,
            "length": 120,
            "window": "diffusion",
        },
        1280,
    ),
    "tiny": (
        "generated AV1, 1 camera, 64x48 (smoke test)",
        {"kind": "generated", "codec": "av1", "gop": 2, "cameras": 1, "size": (64, 48), "episodes": 4, "length": 12},
        24,
    ),
    "tiny-h264": (
        "generated H.264, 1 camera, 64x48 (smoke test)",
        {"kind": "generated", "codec": "h264", "gop": 4, "cameras": 1, "size": (64, 48), "episodes": 3, "length": 10},
        24,
    ),
    # mixtures (StreamingMultiLeRobotDataset; LeRobot has no streaming mixture: ours and the limit only)
    "mix": (
        "mixture: G1 AV1 + G1 H.264 GOP 30, weights 0.5/0.5",
        {"kind": "mixture", "parts": ["g1", "g1-h264"], "weights": [0.5, 0.5]},
        640,
    ),
    "tiny-mix": (
        "mixture: tiny AV1 + tiny H.264, weights 0.7/0.3 (smoke test)",
        {"kind": "mixture", "parts": ["tiny", "tiny-h264"], "weights": [0.7, 0.3]},
        24,
    ),
}
CAMERA_NAMES = ("observation.images.front", "observation.images.wrist", "observation.images.top")
#: frames per second of the generated datasets (``make_dataset``'s default)
GENERATED_FPS = 30


def delta_timestamps(name: str) -> dict[str, list[float]] | None:
    """The ``delta_timestamps`` every contestant gets on dataset ``name`` (None: single frames).

    ``window: "diffusion"``: LeRobot's diffusion policy defaults (``n_obs_steps=2``, ``horizon=16``):
    every camera and ``observation.state`` at frames [-1, 0], ``action`` at frames [-1, 14]
    (LeRobot's ``observation_delta_indices`` / ``action_delta_indices``), in seconds at the
    dataset's fps."""
    recipe = DATASETS[name][1]
    if recipe.get("window") != "diffusion":
        return None
    fps = float(GENERATED_FPS)
    obs = [-1 / fps, 0.0]
    out = {CAMERA_NAMES[i]: list(obs) for i in range(recipe["cameras"])}
    out["observation.state"] = list(obs)
    out["action"] = [(i - 1) / fps for i in range(16)]
    return out


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
                    t = t.append_column(
                        pa.field(c.replace(f"/{k}/", f"/{k}_copy{j}/", 1), t.schema.field(c).type), t.column(c)
                    )
        pq.write_table(t, p)
    return dst


def transcode_h264(root: Path, gop: int) -> None:
    """Re-encode every MP4 under ``root/videos`` in place with libx264 (2 B-frames, closed GOPs of
    ``gop`` frames, same frame count and timestamps): the long-GOP case on real content."""
    for p in sorted((root / "videos").rglob("*.mp4")):
        tmp = p.with_suffix(".h264.mp4")
        subprocess.run(
            [
                "ffmpeg",
                "-hide_banner",
                "-loglevel",
                "error",
                "-y",
                "-i",
                str(p),
                "-an",
                "-c:v",
                "libx264",
                "-preset",
                "veryfast",
                "-bf",
                "2",
                "-g",
                str(gop),
                "-keyint_min",
                str(gop),
                "-sc_threshold",
                "0",
                "-pix_fmt",
                "yuv420p",
                str(tmp),
            ],
            check=True,
        )
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
        atomic_write(out / MIXTURE_FILE, json.dumps({"parts": len(parts), "weights": recipe["weights"]}))
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
            make_dataset(
                d,
                episode_lengths=[recipe["length"]] * recipe["episodes"],
                codec=recipe["codec"],
                gop=recipe["gop"],
                cameras=tuple((CAMERA_NAMES[i], w, h) for i in range(recipe["cameras"])),
                episodes_per_video_file=max(1, recipe["episodes"] // 2),
                repo_id=f"bench/{name}",
            )
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


def dataset_facts(root: Path) -> DatasetFacts | MixtureFacts:
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
        from lerobotstream.mp4.parse import parse_mp4_bytes

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
        from lerobotstream.profile._report import needed_bytes_of_tables

        return needed_bytes_of_tables(
            self.meta, self.video_keys, self.tables.__getitem__, anchors, fps=self.meta.fps, tolerance_s=1e-4
        )["needed_frame_bytes"]
