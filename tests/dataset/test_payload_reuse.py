"""Payload reuse over epochs (``repeat=True``): a kept episode is admitted again without a fetch,
each selected frame still comes exactly once per epoch with its own pixels, the budget holds.
Counted from the cache and source counters, never timed."""

from __future__ import annotations

from collections import Counter

import pytest

from lerobotstream.testing import read_identity
from tests._streams import CAMERA, SMALL_DATASET, small_stream

FRAMES = sum(SMALL_DATASET["episode_lengths"])
EPOCHS = 3


@pytest.fixture(scope="module")
def root(small_dataset):
    return small_dataset


def _epochs(ds, stats_after=()):
    """``EPOCHS`` epochs of an in-process endless stream, each checked (exact coverage, pixels);
    ``ds.stats()`` taken after the epochs named in ``stats_after`` (1-based)."""
    it = iter(ds)
    snaps = {}
    for epoch in range(1, EPOCHS + 1):
        seen = Counter()
        for _ in range(FRAMES):
            item = next(it)
            e, f = int(item["episode_index"]), int(item["frame_index"])
            assert read_identity(item[CAMERA])[:2] == (e, f)
            seen[(e, f)] += 1
            st = ds.stats()
            assert st["reserved_bytes"] <= st["byte_budget"]
        want = Counter((e, f) for e, n in enumerate(SMALL_DATASET["episode_lengths"]) for f in range(n))
        assert seen == want, f"epoch {epoch} does not cover every frame once"
        if epoch in stats_after:
            snaps[epoch] = ds.stats()
    return snaps


@pytest.mark.parametrize("strategy", ["remaining", "sequential"])
def test_a_dataset_within_its_budget_is_fetched_once(root, strategy):
    ds = small_stream(root, 0, repeat=True, sampling_strategy=strategy, prefetch_episodes=1)
    snaps = _epochs(ds, stats_after=(1, EPOCHS))
    first, last = snaps[1], snaps[EPOCHS]
    n_eps = len(SMALL_DATASET["episode_lengths"])
    assert last["cache"]["fetches"] == n_eps  # every episode once, for the whole run
    assert last["cache"]["reuses"] >= (EPOCHS - 1) * n_eps
    assert last["bytes_fetched"] <= 1.1 * first["bytes_fetched"]
    by = last["bytes_by_epoch"]
    assert by[0]["store_bytes"] == by[0]["needed_bytes"] > 0 and by[0]["reused_bytes"] == 0
    for e in range(1, EPOCHS):  # later epochs: every episode from memory, nothing from the store
        assert by[e] == {
            "store_bytes": 0,
            "disk_cache_bytes": 0,
            "reused_bytes": by[0]["needed_bytes"],
            "needed_bytes": by[0]["needed_bytes"],
        }, (e, by)


def test_a_budget_smaller_than_the_dataset_evicts_kept_episodes_and_stays_right(root):
    # room for about two episodes: kept episodes must be evicted to admit the next ones
    ds = small_stream(root, 0, repeat=True, byte_budget_gb=4500 / 2**30, prefetch_episodes=1)
    snaps = _epochs(ds, stats_after=(EPOCHS,))
    c = snaps[EPOCHS]["cache"]
    assert c["evictions"] > 0 and c["peak_reserved_bytes"] <= snaps[EPOCHS]["byte_budget"]
    by = snaps[EPOCHS]["bytes_by_epoch"]
    # each epoch needs every episode's bytes; whatever was not still in memory came from the store (a
    # fetch counts in the epoch being admitted when it ran: compare the totals of the finished epochs)
    done = [by[e] for e in range(EPOCHS)]
    assert sum(r["reused_bytes"] + r["store_bytes"] for r in done) >= sum(r["needed_bytes"] for r in done)
    for e in range(EPOCHS):
        assert by[e]["needed_bytes"] == by[0]["needed_bytes"]


def test_after_a_mid_epoch_resume_bytes_count_in_the_epoch_they_serve(root):
    full = _epochs(small_stream(root, 0, repeat=True), stats_after=(1,))[1]["bytes_by_epoch"][0]["needed_bytes"]
    src = small_stream(root, 0, repeat=True)
    state = src.state_dict(samples_consumed=12)  # inside epoch 0: some episodes are already done
    ds = small_stream(root, 0, repeat=True)
    ds.load_state_dict(state)
    it = iter(ds)
    for _ in range(FRAMES - 12 + FRAMES):  # the rest of epoch 0, then epoch 1 whole
        next(it)
    by = ds.stats()["bytes_by_epoch"]
    assert 0 < by[0]["needed_bytes"] < full  # only the episodes epoch 0 still had
    assert (
        by[1]["needed_bytes"] == full and by[1]["store_bytes"] + by[1]["reused_bytes"] >= full - by[0]["needed_bytes"]
    )
