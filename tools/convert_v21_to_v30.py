"""CLI of :func:`lerobotstream.testing.convert_v21_to_v30` (a local LeRobotDataset v2.1 folder, or the
subset of its episodes present, to v3.0; stream copy). Run from the repository root::

    python -m tools.convert_v21_to_v30 data/testmedia/lerobot-v21-g1-subset data/g1_v30
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lerobotstream.testing import convert_v21_to_v30


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Convert a local LeRobotDataset v2.1 folder to v3.0 (no re-encoding).")
    p.add_argument("src", help="LeRobot v2.1 dataset folder")
    p.add_argument("dst", help="output v3.0 folder (must not exist)")
    p.add_argument("--data-file-size-mb", type=float, default=100.0)
    p.add_argument("--video-file-size-mb", type=float, default=200.0)
    args = p.parse_args(argv)
    out = convert_v21_to_v30(
        args.src, args.dst, data_file_size_mb=args.data_file_size_mb, video_file_size_mb=args.video_file_size_mb
    )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
