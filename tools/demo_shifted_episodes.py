"""LeRobot's silent failure and what ``lerobotstream-validate`` says about it.

Writes a dataset with LeRobot's own writer (``LeRobotDataset.create`` / ``add_frame`` /
``save_episode``; frames carry their ``(episode, frame)`` identity, ``lerobotstream.testing``),
shifts the video windows of a run of episodes by one frame (``from_timestamp`` and
``to_timestamp``, as a faulty merge or edit leaves them), reads every item through LeRobot's
map-style ``LeRobotDataset`` and counts the frames that are not the item's own, then runs the
validator on both copies. Run it in the LeRobot venv; the validator runs with ``--validator-python``
(a Python that imports this checkout's lerobotstream)::

    .venv-lerobot/bin/python -m tools.demo_shifted_episodes --validator-python .venv/bin/python
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CAM = "observation.images.front"


def write(root: Path, episodes: int, length: int) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from lerobotstream.testing import identity_frame

    features = {
        CAM: {"dtype": "video", "shape": (64, 64, 3), "names": ["height", "width", "channels"]},
        "observation.state": {"dtype": "float32", "shape": (2,), "names": ["e", "f"]},
        "action": {"dtype": "float32", "shape": (2,), "names": ["e", "f"]},
    }
    ds = LeRobotDataset.create("local/shiftdemo", fps=30, root=root, features=features, use_videos=True)
    for e in range(episodes):
        for i in range(length):
            ds.add_frame(
                {
                    CAM: identity_frame(e, i, 0, 64, 64),
                    "observation.state": np.array([e, i], np.float32),
                    "action": np.array([e, i], np.float32),
                    "task": "t",
                }
            )
        ds.save_episode()
    ds.finalize()


def shift(src: Path, dst: Path, lo: int, hi: int, fps: int = 30) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.copytree(src, dst)
    for shard in sorted((dst / "meta" / "episodes").rglob("*.parquet")):
        t = pq.read_table(shard)
        cols = {c: t.column(c).to_pylist() for c in t.column_names}
        for r, e in enumerate(cols["episode_index"]):
            if lo <= e < hi:
                for k in ("from_timestamp", "to_timestamp"):
                    cols[f"videos/{CAM}/{k}"][r] += 1 / fps
        pq.write_table(pa.table({c: pa.array(v, t.schema.field(c).type) for c, v in cols.items()}), shard)


def wrong_items(root: Path) -> tuple[int, int, int]:
    """(items, items whose frame is not their own, items that raised) through LeRobot's map-style."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from tools.make_dataset import read_identity

    ds = LeRobotDataset("local/shiftdemo", root=root)
    wrong = raised = 0
    for k in range(len(ds)):
        try:
            item = ds[k]
        except Exception:  # noqa: BLE001 - counted
            raised += 1
            continue
        if read_identity(item[CAM])[:2] != (int(item["episode_index"]), int(item["frame_index"])):
            wrong += 1
    return len(ds), wrong, raised


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--length", type=int, default=8, help="frames per episode")
    ap.add_argument("--shift", default="10:89", help="episodes [lo:hi) to move one frame on (default 10:89)")
    ap.add_argument("--validator-python", default=sys.executable)
    a = ap.parse_args(argv)
    lo, hi = (int(x) for x in a.shift.split(":"))
    work = Path(tempfile.mkdtemp(prefix="lrs-shift-demo-"))
    try:
        write(work / "clean", a.episodes, a.length)
        shift(work / "clean", work / "shifted", lo, hi)
        for name in ("clean", "shifted"):
            n, wrong, raised = wrong_items(work / name)
            print(f"== {name}: LeRobot map-style: {n} items, {wrong} with another frame (silently), {raised} raised")
            p = subprocess.run(
                [
                    a.validator_python,
                    "-m",
                    "lerobotstream.validate",
                    "--root",
                    str(work / name),
                    "--no-progress",
                    "--examples",
                    "1",
                ],
                cwd=REPO,
                capture_output=True,
                text=True,
            )
            print(p.stdout.strip(), f"\n(exit status {p.returncode})\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
