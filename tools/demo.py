"""The main job: load the bundled LeRobot v3.0 dataset (data/g1_v30) and print its summary.

If ``data/g1_v30`` is absent it is rebuilt from ``../shared/testdata/lerobot-v21-g1-subset`` with
``tools/convert_v21_to_v30.py``. (Later issues grow this into the streaming training run.)

Usage::

    python tools/demo.py [DATASET_ROOT]
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lerobotstream.meta import DatasetMeta  # noqa: E402

BUNDLED = REPO / "data" / "g1_v30"
V21_SOURCE = REPO.parent / "shared" / "testdata" / "lerobot-v21-g1-subset"


def summary(meta: DatasetMeta) -> str:
    """A readable multi-line summary of a dataset's metadata."""
    lines = [
        f"dataset     {meta.repo_id}  ({meta.codebase_version}, robot {meta.info.get('robot_type')})",
        f"fps         {meta.fps}",
        f"episodes    {meta.num_episodes} selected of {meta.total_episodes}; lengths {meta.episode_lengths.tolist()}",
        f"frames      {meta.num_frames} selected of {meta.total_frames} ({meta.num_frames / meta.fps:.1f} s)",
        "cameras",
    ]
    for key in meta.camera_keys:
        feat = meta.features[key]
        vinfo = feat.get("info") or {}
        lines.append(
            f"  {key}: {feat['dtype']} {vinfo.get('video.codec', '?')} {vinfo.get('video.width', '?')}x{vinfo.get('video.height', '?')} "
            f"{vinfo.get('video.pix_fmt', '')} shape {meta.shapes[key]}"
        )
    other = [k for k in meta.features if k not in meta.camera_keys]
    lines.append("features    " + ", ".join(f"{k} {meta.features[k]['dtype']}{list(meta.shapes[k])}" for k in other))
    lines.append("tasks")
    lines += [f"  [{i}] {t}" for i, t in enumerate(meta.tasks)]
    lines.append("episodes")
    for ep in meta.episodes:
        cams = "; ".join(f"{k.split('.')[-1]} [{v.from_timestamp:.4f}, {v.to_timestamp:.4f}) s" for k, v in ep.videos.items())
        lines.append(f"  {ep.episode_index}: {ep.length} frames, index [{ep.dataset_from_index}, {ep.dataset_to_index}), {cams}")
    lines.append("files")
    for path in meta.data_paths() + meta.video_paths():
        lines.append(f"  {path}  {meta.source.size(path) / 1e6:.2f} MB")
    for note in meta.warnings:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else BUNDLED
    if not args and not (root / "meta" / "info.json").is_file():
        from tools.convert_v21_to_v30 import convert

        print(f">> {root} missing: converting {V21_SOURCE}")
        convert(V21_SOURCE, root)
    meta = DatasetMeta.load(root)
    print(summary(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
