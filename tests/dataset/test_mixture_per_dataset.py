"""StreamingMultiLeRobotDataset per dataset: a dataset smaller than the worker count keeps its
weight, per-dataset windows and camera keys must give one item layout, and errors name their dataset.

The bugs a first-time user hit (all fixed):

1. A dataset with fewer episodes than DataLoader workers silently loses part of its weight: the
   workers that own none of its episodes never sample it, so the observed share drifts far from
   the weights (README: "in every rank and worker, the share of samples from each dataset follows
   the weights"). Nothing is logged or raised.
2. Per-dataset ``delta_timestamps`` whose windows differ in length (or a window on one dataset
   only) are accepted at construction and crash in the DataLoader's collate with a bare torch
   ``RuntimeError: stack expects each tensor to be equal size``.
3. Per-dataset ``camera_keys`` that pick different cameras are accepted; items of one dataset lack
   a key ``ds.camera_keys`` lists, so batches silently miss the camera or the collate raises
   ``KeyError``.
4. A child dataset's error is meant to name the dataset of the mixture, but the check is a
   substring test (``rid in exc.message``): a short repo id such as ``c`` occurs in almost any
   message, so the error is re-raised without naming the dataset.
"""

from __future__ import annotations

import collections
import itertools
from pathlib import Path

import pytest
import torch

from lerobotstream import StreamingMultiLeRobotDataset
from lerobotstream.errors import LeRobotStreamError

FRONT = ("observation.images.front", 48, 32)
WRIST = ("observation.images.wrist", 32, 32)


@pytest.fixture(scope="module")
def big(make_generated_dataset) -> Path:  # 6 episodes, 30 fps, two cameras
    return Path(
        make_generated_dataset(
            repo_id="nu/big",
            episode_lengths=(9, 8, 10, 7, 9, 8),
            codec="av1",
            gop=2,
            cameras=(FRONT, WRIST),
            tasks=("big",),
        )
    )


@pytest.fixture(scope="module")
def small(make_generated_dataset) -> Path:  # 2 episodes, 15 fps
    return Path(
        make_generated_dataset(
            repo_id="nu/small",
            episode_lengths=(12, 10),
            fps=15,
            codec="h264",
            gop=4,
            cameras=(FRONT,),
            tasks=("small",),
        )
    )


def test_a_dataset_with_fewer_episodes_than_workers_keeps_its_weight(big, small):
    """weights [0.5, 0.5], 4 workers, the small dataset has 2 episodes: today it gets ~0.25 of
    the samples (workers 2 and 3 own none of its episodes and never sample it)."""
    nw, bs = 4, 8
    ds = StreamingMultiLeRobotDataset(
        ["nu/big", "nu/small"],
        roots=[big, small],
        weights=[0.5, 0.5],
        repeat=True,
        return_uint8=True,
        batch_size=bs,
        num_workers=nw,
    )
    dl = torch.utils.data.DataLoader(ds, batch_size=bs, num_workers=nw)
    seen = collections.Counter()
    for batch in itertools.islice(dl, 16 * nw):  # 128 samples per worker
        seen.update(batch["dataset_index"].tolist())
    share = seen[1] / sum(seen.values())
    assert abs(share - 0.5) < 0.05, f"dataset 1 got {share:.3f} of the samples for a weight share of 0.5"


@pytest.mark.parametrize(
    "windows",
    [
        {"nu/big": {"action": [0.0, 0.2]}, "nu/small": {"action": [0.0, 0.2, 0.4]}},
        {"nu/big": {"action": [0.0, 0.2]}},
    ],
)
def test_per_dataset_windows_of_different_lengths_are_refused_at_construction(big, small, windows):
    with pytest.raises(LeRobotStreamError, match="action"):
        ds = StreamingMultiLeRobotDataset(
            ["nu/big", "nu/small"],
            roots=[big, small],
            weights=[1, 1],
            repeat=True,
            return_uint8=True,
            delta_timestamps=windows,
        )
        for _ in itertools.islice(torch.utils.data.DataLoader(ds, batch_size=4), 20):
            pass


def test_per_dataset_camera_keys_give_items_of_one_key_set(big, small):
    try:
        ds = StreamingMultiLeRobotDataset(
            ["nu/big", "nu/small"],
            roots=[big, small],
            weights=[1, 1],
            repeat=True,
            return_uint8=True,
            camera_keys={"nu/big": [WRIST[0]], "nu/small": [FRONT[0]]},
        )
    except LeRobotStreamError:
        return  # refused at construction: fine
    keys = {tuple(sorted(item)) for item in itertools.islice(iter(ds), 30)}
    assert len(keys) == 1, f"items of the two datasets have different keys: {keys}"
    assert all(k in next(iter(keys)) for k in ds.camera_keys)


def test_the_camera_error_names_the_cameras_each_dataset_decodes(big, small):
    """Bug: ``camera_keys={"nu/big": [wrist]}`` (the small dataset has no wrist camera) said
    ``decode different cameras: [] in dataset 0 (nu/big)``: the message showed only the cameras
    common to every dataset, not the wrist camera dataset 0 decodes."""
    from lerobotstream.errors import MixtureFeatureError

    with pytest.raises(MixtureFeatureError) as info:
        StreamingMultiLeRobotDataset(["nu/big", "nu/small"], roots=[big, small], camera_keys={"nu/big": [WRIST[0]]})
    msg = str(info.value)
    assert f"[{WRIST[0]!r}] in dataset 0 (nu/big) but [{FRONT[0]!r}] in dataset 1 (nu/small)" in msg, msg
    assert f"no item has [{WRIST[0]!r}] (not a camera of every dataset)" in msg, msg
    assert info.value.option == "camera_keys"
    with pytest.raises(MixtureFeatureError) as info:  # both common: the sets as asked
        StreamingMultiLeRobotDataset(["nu/big", "nu/small"], roots=[big, big], camera_keys={"nu/small": [FRONT[0]]})
    assert f"{sorted([FRONT[0], WRIST[0]])} in dataset 0 (nu/big) but [{FRONT[0]!r}] in dataset 1" in str(info.value)
    assert "no item has" not in str(info.value)


def test_a_child_error_names_its_dataset_even_with_a_short_repo_id(big, small):
    """Repo id ``c`` for the 15 fps dataset: a 0.1 s window it cannot meet."""
    with pytest.raises(LeRobotStreamError) as info:
        StreamingMultiLeRobotDataset(["b", "c"], roots=[big, small], delta_timestamps={"action": [0.0, 0.1]})
    assert "dataset 1 (c)" in str(info.value), str(info.value)


def test_a_sharding_error_of_one_dataset_names_it(big, small, monkeypatch):
    """3 ranks, the small dataset has 2 episodes: the ShardingError (raised when iterating) says
    "2 non-empty selected episode(s) ..." without naming which dataset of the mixture has 2."""
    from lerobotstream.errors import ShardingError

    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    ds = StreamingMultiLeRobotDataset(["nu/big", "nu/small"], roots=[big, small])
    with pytest.raises(ShardingError, match="nu/small"):
        next(iter(ds))


def test_a_byte_budget_error_of_one_dataset_names_it(big, small):
    """The ByteBudgetError says "episode 0 needs N bytes" without naming the dataset (and calls
    that dataset's share of the budget the "rank budget")."""
    from lerobotstream.errors import ByteBudgetError

    ds = StreamingMultiLeRobotDataset(["nu/big", "nu/small"], roots=[big, small], byte_budget_gb=1e-6)
    with pytest.raises(ByteBudgetError, match="nu/(big|small)"):
        next(iter(ds))
