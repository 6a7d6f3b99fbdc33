"""One full epoch of StreamingLeRobotDataset equals the map-style reference, sample by sample."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from mapstyle_reference import MapStyleReference, assert_items_equal  # noqa: E402

from lerobotstream.dataset._dataset import StreamingLeRobotDataset  # noqa: E402

CAM1 = (("observation.images.front", 64, 48),)
CAM3 = (("observation.images.front", 64, 48), ("observation.images.wrist", 64, 48), ("observation.images.top", 64, 48))
WIN = {
    "observation.state": [-0.1, 0.0, 0.1],
    "action": [0.0, 1 / 30, 2 / 30],
    "observation.images.front": [-2 / 30, 0.0, 1 / 30],
}


def _epoch_parity(root, *, episodes=None, delta_timestamps=None, return_uint8=False, **kw):
    ds = StreamingLeRobotDataset(
        root=root, episodes=episodes, delta_timestamps=delta_timestamps, return_uint8=return_uint8, **kw
    )
    ref = MapStyleReference(root, episodes=episodes, delta_timestamps=delta_timestamps, return_uint8=return_uint8)
    seen = []
    for item in ds:
        key = (int(item["episode_index"]), int(item["frame_index"]))
        seen.append(key)
        assert_items_equal(item, ref.item(*key), f"{root.name} {key}")
    assert len(seen) == len(set(seen)), "a frame came twice"
    assert sorted(seen) == sorted(ref.anchors()), "an epoch must cover every selected frame exactly once"
    return ds


# Packed files (several episodes per MP4, concatenated like LeRobot) with episodes of 1-3 frames.
@pytest.mark.parametrize(
    "codec,cameras,episodes,windows,per_file,lengths",
    [
        ("av1", CAM1, None, None, 1, (7, 5, 9, 4)),
        ("av1", CAM3, [0, 2, 3, 4], WIN, 3, (7, 1, 9, 2, 3)),
        ("h264", CAM1, [1, 3, 4], WIN, 2, (7, 3, 9, 1, 5)),
        ("hevc", CAM3, None, WIN, 2, (7, 2, 9, 4)),
    ],
    ids=[
        "av1-1cam",
        "av1-3cam-packed-subset-windows",
        "h264-bframes-packed-subset-windows",
        "hevc-3cam-packed-windows",
    ],
)
def test_epoch_equals_mapstyle(make_generated_dataset, codec, cameras, episodes, windows, per_file, lengths):
    root = make_generated_dataset(
        episode_lengths=lengths, codec=codec, cameras=cameras, episodes_per_video_file=per_file
    )
    _epoch_parity(Path(root), episodes=episodes, delta_timestamps=windows, episode_pool_size=2, prefetch_episodes=1)


def test_uint8_and_small_pool(make_generated_dataset):
    root = make_generated_dataset(episode_lengths=(7, 5, 9, 4), codec="av1", cameras=CAM1, episodes_per_video_file=1)
    _epoch_parity(
        Path(root), return_uint8=True, episode_pool_size=1, prefetch_episodes=0, decode_threads=1, decoded_queue_size=1
    )


def test_real_dataset():
    """The bundled real G1 dataset (2 episodes, AV1, 480x640): both episodes, with windows."""
    root = Path(__file__).resolve().parents[2] / "data" / "g1_v30"
    assert (root / "meta" / "info.json").exists(), "bundled real dataset data/g1_v30 missing"
    _epoch_parity(
        root,
        episode_pool_size=2,
        decode_lookahead=16,
        delta_timestamps={"observation.state": [-1 / 30, 0.0], "action": [0.0, 1 / 30]},
    )
