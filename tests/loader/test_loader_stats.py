"""``StreamLoader.stats()``: in threads mode the stream's counters summed over the shards (each
shard's own under ``shards``; the source counters and the set-up seconds, which the shards share,
counted once); empty before the first iterator."""

from __future__ import annotations

from pathlib import Path

import pytest

from lerobotstream import StreamingLeRobotDataset, StreamLoader
from lerobotstream.loader._loader import sum_stats

CAM = (("observation.images.front", 32, 24),)
LENGTHS = (7, 5, 9, 4, 6)


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(make_generated_dataset(episode_lengths=LENGTHS, codec="av1", cameras=CAM, episodes_per_video_file=2))


@pytest.mark.parametrize("nw", [0, 2])
def test_threads_mode_counters_summed_over_the_shards(root, nw):
    ds = StreamingLeRobotDataset(root=root, episode_pool_size=2, prefetch_episodes=1)
    loader = StreamLoader(ds, batch_size=4, num_workers=nw, mode="threads")
    assert loader.stats() == {}
    samples = sum(len(b["index"]) for b in loader)
    st = loader.stats()
    assert len(st["shards"]) == max(1, nw)
    assert st["items"] == samples == sum(LENGTHS)  # one epoch, every frame once
    assert st["frames_returned"] == sum(s["frames_returned"] for s in st["shards"]) == samples
    # the shards of one process share its source: its counters once, not once per shard
    assert st["bytes_fetched"] == st["shards"][0]["bytes_fetched"] == st["shards"][-1]["bytes_fetched"] > 0
    assert st["source"]["requests"] == st["shards"][0]["source"]["requests"]
    assert st["sidecar"] in ("cache", "published", "built")


SETUP_KEYS = ("metadata_s", "sidecar_s", "torchcodec_import_s")


def test_threads_mode_set_up_seconds_once_not_once_per_shard(root):
    """Six shards over five episodes (one idle at least): the dataset's construction seconds, which
    every shard of the process reports, count once; the shards' work is still summed."""
    ds = StreamingLeRobotDataset(root=root, episode_pool_size=2, prefetch_episodes=1)
    loader = StreamLoader(ds, batch_size=2, num_workers=6, mode="threads")
    samples = sum(len(b["index"]) for b in loader)
    st = loader.stats()
    shards = st["shards"]
    assert len(shards) == 6 and min(s["items"] for s in shards) == 0  # an idle shard reports too
    assert st["items"] == samples == sum(LENGTHS)
    for k in SETUP_KEYS:
        assert all(s[k] == shards[0][k] for s in shards)
        assert st[k] == shards[0][k] > 0, k


def test_sum_stats_sums_numbers_and_number_dicts_and_keeps_the_rest():
    a = {
        "pid": 1,
        "items": 2,
        "first_item_s": 0.5,
        "source": {"requests": 1},
        "sidecar": "built",
        "frames_decoded": 4,
        "frames_returned": 2,
        "frames_decoded_per_returned": 2.0,
    }
    b = {
        "pid": 2,
        "items": 3,
        "first_item_s": 0.2,
        "source": {"requests": 4},
        "sidecar": "built",
        "frames_decoded": 2,
        "frames_returned": 2,
        "frames_decoded_per_returned": 1.0,
    }
    out = sum_stats([a, b])
    assert out == {
        "items": 5,
        "first_item_s": 0.2,
        "source": {"requests": 5},
        "sidecar": "built",
        "frames_decoded": 6,
        "frames_returned": 4,
        "frames_decoded_per_returned": 1.5,
    }
    # two shards of one process: its source counters (shared) once, the shards' own summed
    one = sum_stats([{**a, "metadata_s": 0.25}, {**b, "pid": 1, "metadata_s": 0.25}])
    assert one["source"] == {"requests": 1} and one["items"] == 5 and one["metadata_s"] == 0.25
    assert sum_stats([{**a, "metadata_s": 0.25}, {**b, "metadata_s": 0.5}])["metadata_s"] == 0.75


def test_a_mixtures_counters_are_summed_too(make_generated_dataset):
    from lerobotstream import StreamingMultiLeRobotDataset

    front = (("observation.images.front", 32, 24),)
    roots = [
        make_generated_dataset(repo_id="st/a", episode_lengths=(6, 9, 4), cameras=front),
        make_generated_dataset(repo_id="st/b", episode_lengths=(5, 7), cameras=front),
    ]
    ds = StreamingMultiLeRobotDataset(["st/a", "st/b"], roots=roots, episode_pool_size=2, prefetch_episodes=1)
    loader = StreamLoader(ds, batch_size=4, num_workers=2, mode="threads")
    samples = sum(len(b["index"]) for b in loader)
    st = loader.stats()
    assert st["items"] == samples and len(st["shards"]) == 2
    assert st["mixture"]["repo_ids"] == ["st/a", "st/b"] and st["bytes_fetched"] > 0
