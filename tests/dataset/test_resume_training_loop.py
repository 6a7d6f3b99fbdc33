"""docs/pytorch.md's resumable training loop (``start_epoch, done = ds.epoch, ds.samples_consumed``
after ``load_state_dict``; ``set_epoch`` from the next epoch on), stopped mid-epoch, exactly at an
epoch's end and in the next epoch, resumed on the same and on another DataLoader worker count and
batch size, then stopped and resumed once more: every epoch plays each (episode, frame) exactly
once, each item's pixels its own (the generator's burned-in identity)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from lerobotstream import StreamingLeRobotDataset
from tests._streams import checked_anchors

CAM = "observation.images.front"
LENGTHS = (7, 5, 9, 4, 6, 8, 3, 10)
FULL = Counter((e, f) for e, n in enumerate(LENGTHS) for f in range(n))
EPOCHS = 2


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(
        make_generated_dataset(
            episode_lengths=LENGTHS, codec="av1", cameras=((CAM, 32, 24),), fps=10, episodes_per_video_file=3
        )
    )


def _stream(root, workers, batch):
    return StreamingLeRobotDataset(
        root=root,
        return_uint8=True,
        episode_pool_size=2,
        prefetch_episodes=1,
        max_num_shards=max(1, workers),
        num_workers=workers,
        batch_size=batch,
    )


def _loop(root, workers, batch, saved, stop=None):
    """The page's loop on one rank: (epoch, episode, frame) played, and the last state saved
    (after every batch) when it stops after ``stop`` batches."""
    ds = _stream(root, workers, batch)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers)
    start_epoch, done = 0, 0
    if saved is not None:
        ds.load_state_dict(saved["stream"])
        start_epoch, done = ds.epoch, ds.samples_consumed
    played, steps = [], 0
    for epoch in range(start_epoch, EPOCHS):
        if epoch != start_epoch or done == 0:
            ds.set_epoch(epoch)
            done = 0
        for b in loader:
            played += [(epoch, e, f) for e, f in checked_anchors(b)]
            done += len(b["index"])
            saved = {"stream": ds.state_dict(samples_consumed=done)}
            steps += 1
            if steps == stop:
                return played, saved
    return played, saved


# batches of 4 with 2 workers over 52 frames: 14 per epoch (13 + the two workers' short last ones)
@pytest.mark.parametrize("stop", [3, 14, 17])
@pytest.mark.parametrize("new", [(2, 4), (3, 3)])
def test_the_documented_loop_resumes_each_epoch_exactly_once(root, stop, new):
    first, saved = _loop(root, 2, 4, None, stop=stop)
    second, saved2 = _loop(root, *new, saved, stop=4)
    third, _ = _loop(root, 1, 5, saved2)  # a second resume, elastic again
    kept = first + second + third
    for epoch in range(EPOCHS):
        assert Counter((e, f) for ep, e, f in kept if ep == epoch) == FULL, epoch


@pytest.mark.parametrize("workers,batch", [(2, 4), (3, 3)])
def test_a_count_covering_the_epoch_or_the_remainder_resumes_as_the_next_epoch(root, workers, batch):
    """``ds.epoch`` / ``samples_consumed`` after loading a state whose count covers the whole epoch
    (same topology) or the whole elastic remainder are the next epoch's start, and the next
    iterator plays that epoch's own order (it used to report the old epoch: a loop labelled the
    next epoch's samples with it, then played that epoch again)."""
    played, saved = _loop(root, 2, 4, None, stop=3)
    ds = _stream(root, workers, batch)
    ds.load_state_dict(saved["stream"])
    base = ds.samples_consumed  # 12 on the same topology, 0 in an elastic remainder
    rest = [
        (e, f)
        for b in torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers)
        for e, f in zip(b["episode_index"].tolist(), b["frame_index"].tolist())
    ]
    assert Counter([(e, f) for _, e, f in played] + rest) == FULL
    whole = [ds.state_dict(samples_consumed=base + len(rest))]  # the epoch's end, or the remainder's
    ref = _stream(root, workers, batch)
    ref.set_epoch(1)
    epoch1 = [
        tuple(b["index"].tolist()) for b in torch.utils.data.DataLoader(ref, batch_size=batch, num_workers=workers)
    ]
    for state in whole:
        again = _stream(root, workers, batch)
        again.load_state_dict(state)
        assert (again.epoch, again.samples_consumed, again.resume_info()) == (1, 0, None)
        assert [
            tuple(b["index"].tolist())
            for b in torch.utils.data.DataLoader(again, batch_size=batch, num_workers=workers)
        ] == epoch1
