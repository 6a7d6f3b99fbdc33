"""Episodes whose frame ranges overlap inside one video file are refused at index time.

Bug (issue 17.7): moving one episode's ``from_timestamp``/``to_timestamp`` a few frames later inside
its file, onto the next episode's frames, streamed that episode with its neighbour's frames and no
error. The sidecar validation (at build and at every open) now checks, per file and camera, that the
selected episodes' frame ranges are disjoint and that each holds exactly ``length`` frames; the
typed error names both episodes, the camera and the file, and the frames no selected episode claims.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerobotstream.dataset._dataset import StreamingLeRobotDataset
from lerobotstream.errors import SidecarValidationError
from lerobotstream.sidecar._validate import EpisodeWindow, check_disjoint

FRONT, WRIST = "observation.images.front", "observation.images.wrist"
LENGTHS = (6, 5, 7)
FPS = 30


@pytest.fixture(scope="module")
def three_in_one_file(make_generated_dataset):
    return Path(
        make_generated_dataset(
            episode_lengths=LENGTHS,
            codec="av1",
            fps=FPS,
            cameras=((FRONT, 32, 24), (WRIST, 32, 24)),
            episodes_per_video_file=3,
        )
    )


def _shift(root: Path, episode: int, camera: str, frames: int) -> None:
    """Move one episode's window of one camera by ``frames`` frames (from and to timestamps)."""
    (path,) = sorted((root / "meta" / "episodes").rglob("*.parquet"))
    t = pq.read_table(path)
    row = t.column("episode_index").to_pylist().index(episode)
    for end in ("from_timestamp", "to_timestamp"):
        name = f"videos/{camera}/{end}"
        vals = t.column(name).to_pylist()
        vals[row] += frames / FPS
        t = t.set_column(t.column_names.index(name), name, pa.array(vals, type=t.schema.field(name).type))
    pq.write_table(t, path)


def test_shifted_episode_overlapping_its_neighbour_is_an_error(three_in_one_file, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(three_in_one_file, root)
    _shift(root, 0, FRONT, 3)  # episode 0 now claims frames [3, 9): 3 of episode 1's
    with pytest.raises(SidecarValidationError) as ei:
        StreamingLeRobotDataset(root=root)
    msg = str(ei.value)
    assert "episodes 0 and 1 overlap in this file" in msg
    assert f"camera {FRONT}" in msg and f"videos/{FRONT}/chunk-000/file-000.mp4" in msg
    assert "episode 0 claims frames [3, 9)" in msg and "episode 1 frames [6, 11)" in msg
    assert "3 frame(s) [6, 9) would be streamed as both" in msg
    assert "frames no selected episode claims: [0, 3)" in msg
    assert WRIST not in msg  # the other camera's windows are untouched
    assert ei.value.episode_index == 0 and ei.value.camera == FRONT


def test_shifted_episode_overlapping_its_predecessor_is_an_error(three_in_one_file, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(three_in_one_file, root)
    _shift(root, 2, WRIST, -2)  # episode 2 starts inside episode 1 and leaves the file's last 2 frames
    with pytest.raises(SidecarValidationError, match=r"episodes 1 and 2 overlap.*\[16, 18\)"):
        StreamingLeRobotDataset(root=root)


def test_disjoint_windows_and_selections_pass(three_in_one_file):
    ds = StreamingLeRobotDataset(root=three_in_one_file, episodes=[0, 2])  # frames [6, 11) unclaimed: fine
    assert ds.num_episodes == 2
    assert StreamingLeRobotDataset(root=three_in_one_file).num_episodes == 3


def _w(ep: int) -> EpisodeWindow:
    return EpisodeWindow(ep, FRONT, "v.mp4", 0.0, 1)


def test_check_disjoint_pairs():
    assert check_disjoint([(0, 5, _w(0)), (5, 9, _w(1)), (9, 12, _w(2))], 12, "v.mp4") == []
    assert check_disjoint([(0, 5, _w(0))], 12, "v.mp4") == []
    # a long range covering two later ones overlaps both; the gap list shows the frames left over
    probs = check_disjoint([(2, 10, _w(0)), (3, 5, _w(1)), (6, 8, _w(2)), (12, 14, _w(3))], 16, "v.mp4")
    assert [(p.episode_index, p.message.split(":")[0]) for p in probs] == [
        (0, "episodes 0 and 1 overlap in this file"),
        (0, "episodes 0 and 2 overlap in this file"),
    ]
    assert "frames no selected episode claims: [0, 2), [10, 12), [14, 16)" in probs[0].message
    assert str(probs[0]).startswith(f"episode 0, camera {FRONT}, file v.mp4: episodes 0 and 1 overlap")
    # the same range twice
    (p,) = check_disjoint([(0, 4, _w(5)), (0, 4, _w(6))], 4, "v.mp4")
    assert "episodes 5 and 6 overlap" in p.message and "every frame of the file is claimed" in p.message
