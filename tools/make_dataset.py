"""CLI of the dataset generator :func:`lerobotstream.testing.make_dataset` (its docstring says what
the generated dataset holds). Run from the repository root::

    python -m tools.make_dataset OUT_DIR --episodes 30,45,20 --codec av1 --cameras front:64x48,wrist:97x71
    python -m tools.make_dataset OUT_DIR --episodes 30,45,20 --codec h264 --cameras front:64x48  # H.264/HEVC: even sizes
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lerobotstream.testing import CODECS, make_dataset


def _parse_cameras(text: str) -> list[tuple[str, int, int]]:
    out = []
    for item in text.split(","):
        name, size = item.split(":")
        w, h = size.lower().split("x")
        key = name if "." in name else f"observation.images.{name}"
        out.append((key, int(w), int(h)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Generate a small LeRobotDataset v3.0 whose frames carry their own identity."
    )
    p.add_argument("root")
    p.add_argument("--episodes", default="30,45,20", help="comma-separated episode lengths")
    p.add_argument("--fps", type=int, default=30)
    p.add_argument("--cameras", default="front:64x48", help="name:WxH,... (name gets observation.images. prefixed)")
    p.add_argument("--codec", choices=CODECS, default="av1")
    p.add_argument("--gop", type=int, default=None)
    p.add_argument("--episodes-per-video-file", type=int, default=None)
    p.add_argument("--episodes-per-data-file", type=int, default=None)
    p.add_argument("--episodes-meta-per-file", type=int, default=None)
    p.add_argument("--chunks-size", type=int, default=1000)
    p.add_argument(
        "--faststart",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="moov before mdat in each MP4, as LeRobot writes them (default: on; --no-faststart: moov at the end)",
    )
    p.add_argument("--depth-cameras", default="", help="name:WxH,... depth video cameras (HEVC gray12le)")
    p.add_argument("--image-cameras", default="", help="name:WxH,... image features (PNG in the Parquet rows)")
    p.add_argument("--language", action="store_true", help="add LeRobot 0.6.1's language columns")
    args = p.parse_args(argv)
    root = make_dataset(
        args.root,
        episode_lengths=[int(x) for x in args.episodes.split(",")],
        fps=args.fps,
        cameras=_parse_cameras(args.cameras),
        codec=args.codec,
        gop=args.gop,
        episodes_per_video_file=args.episodes_per_video_file,
        episodes_per_data_file=args.episodes_per_data_file,
        episodes_meta_per_file=args.episodes_meta_per_file,
        chunks_size=args.chunks_size,
        faststart=args.faststart,
        depth_cameras=_parse_cameras(args.depth_cameras) if args.depth_cameras else (),
        image_cameras=_parse_cameras(args.image_cameras) if args.image_cameras else (),
        language=args.language,
    )
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
