"""StreamLoader and elastic resume as users combine them (docs/loader.md "Resume and epochs",
docs/resume.md): a loader restored on another worker count and batch size, twice in a row; a
dataset that loaded a state *before* a StreamLoader with other settings wrapped it (the loader sets
the dataset's batch_size / num_workers / drop_last: the state is replanned for them, also for
``state_dict()`` before the first batch); the training-loop bookkeeping of docs/pytorch.md across an
elastic resume and a second resume. Coverage is counted on (episode_index, frame_index) and every
item's pixels are checked against the generator's burned-in identity."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from lerobotstream import StreamingLeRobotDataset, StreamLoader
from tests._streams import checked_anchors

CAM = "observation.images.front"
LENGTHS = (7, 5, 9, 4, 6, 8, 3, 10, 2, 6)
FULL = Counter((e, f) for e, n in enumerate(LENGTHS) for f in range(n))


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(
        make_generated_dataset(
            episode_lengths=LENGTHS,
            codec="av1",
            cameras=((CAM, 32, 24),),
            fps=10,
            episodes_per_video_file=3,
            episodes_per_data_file=4,
        )
    )


def _ds(root, **kw):
    return StreamingLeRobotDataset(
        root=root, return_uint8=True, episode_pool_size=2, prefetch_episodes=1, decode_lookahead=5, **kw
    )


def _take(loader, n=None) -> list[tuple[int, int]]:
    got = []
    for j, batch in enumerate(loader):
        got += checked_anchors(batch)
        if n is not None and j + 1 == n:
            break
    return got


def test_streamloader_resumes_on_other_workers_and_batch_sizes_twice(root):
    first = StreamLoader(_ds(root), batch_size=4, num_workers=2, mode="threads")
    got = _take(first, 3)
    second = StreamLoader(_ds(root), batch_size=3, num_workers=3, mode="threads")
    second.load_state_dict(first.state_dict())
    assert sorted(second.stream.resume_changes) == [
        "batch_size: checkpoint 4, now 3",
        "num_workers: checkpoint 2, now 3",
    ]
    before = second.state_dict()  # before any batch: the same position, resumable as such
    got += _take(second, 2)
    third = StreamLoader(_ds(root), batch_size=5, num_workers=1, mode="threads")
    third.load_state_dict(second.state_dict())  # a state written inside the remainder, elastic again
    assert Counter(got + _take(third)) == FULL
    again = StreamLoader(_ds(root), batch_size=3, num_workers=3, mode="threads")
    again.load_state_dict(before)
    assert Counter(got[:12] + _take(again)) == FULL


@pytest.mark.parametrize("batch_size,workers", [(6, 2), (4, 3), (4, 2)])
def test_dataset_loaded_before_a_loader_with_other_settings_wraps_it(root, batch_size, workers):
    """ds.load_state_dict(state) on a dataset built with the checkpoint's settings, then
    StreamLoader(ds, other batch size / workers): the rest of the epoch exactly once (the state was
    adopted for batch 4 / 2 workers; the loader's settings used to replay it with the wrong turns),
    and the loader's state_dict() before its first batch resumes the same position."""
    first = StreamLoader(_ds(root), batch_size=4, num_workers=2, mode="threads")
    got = _take(first, 3)
    state = first.state_dict()["stream"]
    ds = _ds(root, batch_size=4, num_workers=2, max_num_shards=2)
    ds.load_state_dict(state)
    loader = StreamLoader(ds, batch_size=batch_size, num_workers=workers, mode="threads")
    before = loader.state_dict()
    assert Counter(got + _take(loader)) == FULL
    other = StreamLoader(_ds(root), batch_size=batch_size, num_workers=workers, mode="threads")
    other.load_state_dict(before)
    assert Counter(got + _take(other)) == FULL


def test_dataset_loaded_before_a_loader_with_the_checkpoints_settings_continues_the_same_order(root):
    """A dataset built without batch_size / num_workers loads the state (elastic for 0 workers),
    then a StreamLoader with the checkpoint's own settings wraps it: the uninterrupted order."""
    full = _take(StreamLoader(_ds(root), batch_size=4, num_workers=2, mode="threads"))
    first = StreamLoader(_ds(root), batch_size=4, num_workers=2, mode="threads")
    got = _take(first, 3)
    ds = _ds(root)
    ds.load_state_dict(first.state_dict()["stream"])
    assert got + _take(StreamLoader(ds, batch_size=4, num_workers=2, mode="threads")) == full


def test_training_loop_counts_from_the_loaded_position(root):
    """docs/pytorch.md's loop: after load_state_dict the samples consumed are counted from
    ``ds.samples_consumed`` (the checkpoint's count on the same topology, 0 in an elastic
    remainder), so a state saved after an elastic resume resumes again exactly."""

    def segment(workers, state, batches):
        ds = _ds(root, batch_size=4, num_workers=workers, max_num_shards=max(1, workers))
        if state is not None:
            ds.load_state_dict(state)
        done = ds.samples_consumed
        got, k = [], 0
        for batch in torch.utils.data.DataLoader(ds, batch_size=4, num_workers=workers):
            got += checked_anchors(batch)
            k += 1
            if k == batches:
                break
        return got, (ds.state_dict(samples_consumed=done + 4 * k) if batches else None)

    a, s1 = segment(2, None, 2)
    assert s1["samples"] == 8
    b, s2 = segment(3, s1, 2)  # elastic: counted from 0 in the remainder
    assert s2["samples"] == 8 and s2["origin"]["samples"] == 8
    c, s3 = segment(3, s2, 1)  # the same topology inside the remainder: the count goes on
    assert s3["samples"] == 12
    d, _ = segment(3, s3, None)
    assert Counter(a + b + c + d) == FULL


def test_drop_last_drops_at_most_a_short_batch_per_new_worker_of_the_remainder(root):
    first = StreamLoader(_ds(root), batch_size=4, num_workers=2, mode="threads", drop_last=True)
    got = _take(first, 3)
    second = StreamLoader(_ds(root), batch_size=5, num_workers=3, mode="threads", drop_last=True)
    second.load_state_dict(first.state_dict())
    rest = []
    for batch in second:
        assert len(batch["index"]) == 5  # never a short batch
        rest += checked_anchors(batch)
    seen = Counter(got + rest)
    assert max(seen.values()) == 1 and not seen - FULL
    assert 0 <= sum((FULL - seen).values()) <= 3 * (5 - 1)


def test_a_dataloader_worker_count_other_than_the_datasets_warns(root):
    """A DataLoader worker (simulated: the stream asked to fit 3 workers) of a dataset built with
    num_workers=2 resumes the loaded state elastically, but the training process's state_dict()
    still describes 2 workers: it says so (a RuntimeWarning naming both counts and the fix)."""
    first = StreamLoader(_ds(root), batch_size=4, num_workers=2, mode="threads")
    _take(first, 2)
    ds = _ds(root, batch_size=4, num_workers=2, max_num_shards=2)
    ds.load_state_dict(first.state_dict()["stream"])
    with pytest.warns(RuntimeWarning, match="DataLoader runs 3 worker.*num_workers=2.*pass num_workers=3"):
        ds.prepare(3)


@pytest.mark.parametrize("batch_size,workers", [(3, 3), (3, 2), (2, 4)])
def test_resume_info_describes_the_loaders_settings(root, batch_size, workers):
    """After ``StreamLoader(ds, other batch size / workers).load_state_dict(state)`` (repeat), or a
    loader wrapping a dataset that loaded the state, the dataset's ``resume_info()`` describes the
    remainder for the loader's settings, the ones ``resume_changes`` names: the planner's own
    figures for them, overlap included."""
    first = StreamLoader(_ds(root, repeat=True), batch_size=4, num_workers=2, mode="threads")
    _take(first, 3)
    state = first.state_dict()
    ds = _ds(root, repeat=True)
    loader = StreamLoader(ds, batch_size=batch_size, num_workers=workers, mode="threads")
    loader.load_state_dict(state)
    planner = ds._planner(loader.settings)
    planner.load_state_dict(state["stream"])
    expected = planner.remainder_info()
    assert ds.resume_changes and expected["overlap"] > 0
    assert ds.resume_info() == expected
    wrapped = _ds(root, repeat=True)  # a dataset that loaded the state before the loader wrapped it
    wrapped.load_state_dict(state["stream"])
    StreamLoader(wrapped, batch_size=batch_size, num_workers=workers, mode="threads")
    assert wrapped.resume_info() == expected and wrapped.resume_changes == ds.resume_changes
