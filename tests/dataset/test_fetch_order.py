"""Fetch order of first need: a pool's episodes are fetched in the order its first anchors need
them, so the first batch waits for its own episodes only. Checked on the order of fetch calls with
one fetch thread (deterministic), never timed (tests/planner/test_golden_orders.py pins the sample
order)."""

from __future__ import annotations

from collections import Counter

import pytest

from lerobotstream.dataset._reader import DatasetReader
from lerobotstream.testing import read_identity
from tests._streams import CAMERA

LENGTHS = (3,) * 16
BATCH = 4


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return make_generated_dataset(
        episode_lengths=LENGTHS, codec="av1", cameras=((CAMERA, 32, 24),), episodes_per_video_file=4
    )


@pytest.mark.parametrize("strategy", ["remaining", "round_robin"])
def test_the_first_batch_episodes_are_fetched_before_any_other(root, strategy, monkeypatch):
    from lerobotstream.dataset._dataset import StreamingLeRobotDataset

    calls: list[int] = []
    fetch = DatasetReader.fetch

    def recording(self, ep):
        calls.append(ep)
        return fetch(self, ep)

    monkeypatch.setattr(DatasetReader, "fetch", recording)
    # the whole dataset is one pool; one fetch thread: fetches run in the order they were asked for
    ds = StreamingLeRobotDataset(
        root=root, batch_size=BATCH, sampling_strategy=strategy, prefetch_episodes=0, seed=3, decode_lookahead=8
    )
    items = list(ds)
    anchors = [(int(it["episode_index"]), int(it["frame_index"])) for it in items]
    for it, (e, f) in zip(items, anchors):
        assert read_identity(it[CAMERA])[:2] == (e, f)
    assert Counter(anchors) == Counter((e, f) for e, n in enumerate(LENGTHS) for f in range(n))
    first = list(dict.fromkeys(e for e, _ in anchors[:BATCH]))
    assert calls[: len(first)] == first, "the first batch's episodes must be fetched first, in order of need"
    assert sorted(calls) == list(range(len(LENGTHS)))  # each episode fetched once
