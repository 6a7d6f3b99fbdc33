"""The stream core serves one dataset and a mixture with the same code: a mixture of one dataset
yields that dataset's frames in that dataset's order; a mixture's counters are each dataset's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lerobotstream import StreamingLeRobotDataset, StreamingMultiLeRobotDataset
from lerobotstream.testing import read_identity

FRONT = ("observation.images.front", 48, 32)
SPEC = dict(episode_lengths=(11, 7, 9, 5), codec="h264", gop=4, cameras=(FRONT,), episodes_per_video_file=2)


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(make_generated_dataset(repo_id="core/one", **SPEC))


def _stream(ds, num_workers):
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=num_workers)
    out = []
    for item in dl:
        ep, fr = int(item["episode_index"]), int(item["frame_index"])
        assert read_identity(item[FRONT[0]][-1])[:2] == (ep, fr)  # the window's last frame is the anchor
        out.append((ep, fr, item[FRONT[0]]))
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_mixture_of_one_dataset_yields_the_same_frames_in_the_same_order(root, num_workers):
    kw = dict(episode_pool_size=2, num_workers=num_workers, return_uint8=True, seed=7,
              delta_timestamps={FRONT[0]: [-2 / 30, 0.0]})
    single = _stream(StreamingLeRobotDataset(repo_id="core/one", root=root, **kw), num_workers)
    mixed = _stream(StreamingMultiLeRobotDataset(["core/one"], roots=[root], **kw), num_workers)
    assert [(e, f) for e, f, _ in single] == [(e, f) for e, f, _ in mixed]
    assert len(single) == sum(SPEC["episode_lengths"])
    for (_, _, a), (_, _, b) in zip(single, mixed):
        assert torch.equal(a, b)


def test_a_mixtures_stats_give_each_dataset_its_own_counters(make_generated_dataset, root):
    other = Path(make_generated_dataset(repo_id="core/two", episode_lengths=(6, 8), codec="av1", gop=2,
                                        cameras=(FRONT,)))
    ds = StreamingMultiLeRobotDataset(["core/one", "core/two"], roots=[root, other], weights=[0.5, 0.5])
    counts = [0, 0]
    for item in ds:
        counts[int(item["dataset_index"])] += 1
    st = ds.stats()
    per = st["datasets"]
    assert [p["items"] for p in per] == counts and all(counts)
    assert st["items"] == sum(counts) == sum(SPEC["episode_lengths"]) + 14
    assert [p["episodes_fetched"] for p in per] == [4, 2]
    assert all(p["frames_returned"] > 0 and p["bytes_needed"] > 0 for p in per)
    assert st["chunks"] >= 1 and "chunks" not in per[0]  # the worker's pipeline is shared: counted once


def test_a_mixture_of_one_state_from_before_the_seed_rule_is_refused(root):
    from lerobotstream.errors import ResumeStateError

    ds = StreamingMultiLeRobotDataset(["core/one"], roots=[root])
    state = ds.state_dict(samples_consumed=0)
    assert state["mixture"]["seed_rule"] == "dataset"
    old = {**state, "mixture": {k: v for k, v in state["mixture"].items() if k != "seed_rule"}}
    with pytest.raises(ResumeStateError, match="seed_rule"):
        StreamingMultiLeRobotDataset(["core/one"], roots=[root]).load_state_dict(old)
