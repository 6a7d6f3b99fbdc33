"""Sample-exact resume through a real ``torch.utils.data.DataLoader`` (0, 1 and 2 workers).

``AnchorDataset`` is a tiny test double of the streaming dataset: an ``IterableDataset`` that asks
the planner, inside each DataLoader worker (``get_worker_info()``), for that worker's anchors and
yields them as tensors. The real dataset uses the same planner API.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._planner import Planner
from tests._planners import make_planner
from tests._streams import resigned

LENGTHS = {0: 4, 1: 7, 2: 2, 3: 5, 4: 3}  # 21 frames, uneven
BATCH = 3


class AnchorDataset(IterableDataset):
    """Yields int64 tensors ``[episode_index, frame_index]`` in the planner's order."""

    def __init__(self, planner: Planner):
        self.planner = planner

    def __iter__(self):
        info = get_worker_info()
        wid, n = (None, 0) if info is None else (info.id, info.num_workers)
        for ep, fr in self.planner.iter_worker_anchors(wid, n):
            yield torch.tensor([ep, fr], dtype=torch.int64)


def _batches(planner: Planner, max_batches: int | None = None) -> list[list[tuple[int, int]]]:
    loader = DataLoader(
        AnchorDataset(planner),
        batch_size=planner.settings.batch_size,
        num_workers=planner.settings.num_workers,
        drop_last=planner.settings.drop_last,
    )
    out = []
    it = iter(loader)
    try:
        for b in it:
            out.append([tuple(x) for x in b.tolist()])
            if max_batches is not None and len(out) >= max_batches:
                break
    finally:
        del it
    return out


def _flat(batches):
    return [a for b in batches for a in b]


def _kw(num_workers, **extra):
    return dict(
        episode_lengths=LENGTHS, num_workers=num_workers, batch_size=BATCH, episode_pool_size=2, seed=1000, **extra
    )


@pytest.mark.parametrize(
    ("num_workers", "strategy", "drop_last"),
    [
        (0, "remaining", False),
        (0, "round_robin", False),
        (1, "remaining", False),
        (1, "round_robin", False),
        (2, "remaining", False),
        (2, "round_robin", False),
        (2, "remaining", True),
    ],
)
def test_finite_resume_every_offset_real_dataloader(num_workers, strategy, drop_last):
    kw = _kw(num_workers, sampling_strategy=strategy, drop_last=drop_last)
    ref = make_planner(**kw)
    epochs = []
    for e in (0, 1):
        ref.set_epoch(e)
        epochs.append(_batches(ref))
    stream = _flat(epochs[0]) + _flat(epochs[1])
    for e in (0, 1):
        seen = Counter(_flat(epochs[e]))
        assert max(seen.values()) == 1
        if not drop_last:
            assert seen == Counter((k, f) for k, n in LENGTHS.items() for f in range(n))
    assert _flat(epochs[0]) != _flat(epochs[1])
    # offsets: every sample of epoch 0 (one stream) or every batch boundary (two workers), epoch 1 start
    bounds = np.cumsum([0] + [len(b) for b in epochs[0]]).tolist()
    if num_workers == 0:
        offsets = range(bounds[-1] + 1)
    elif num_workers == 1:
        offsets = range(bounds[-1] + 1)
    else:
        offsets = bounds
    for s in offsets:
        q = make_planner(**kw)
        q.load_state_dict(resigned(ref.state_dict(samples_consumed=s), epoch=0))
        cur, _ = q.position()
        got = _flat(_batches(q)) if cur == 0 else []
        q.set_epoch(1)
        got += _flat(_batches(q))
        assert got == stream[s:], s


@pytest.mark.parametrize("num_workers", [1, 2])
def test_endless_resume_across_epoch_boundaries_real_dataloader(num_workers):
    kw = _kw(num_workers, repeat=True, sampling_strategy="remaining")
    total = 20  # batches: about three epochs
    ref = _flat(_batches(make_planner(**kw), total))
    assert len(ref) == total * BATCH
    assert Counter(ref[:21]) == Counter((k, f) for k, n in LENGTHS.items() for f in range(n)) or num_workers > 1
    for b in (1, 5, 7, 8, 13):  # crosses worker epoch boundaries (each worker holds ~10 frames)
        q = make_planner(**kw)
        q.load_state_dict(q.state_dict(samples_consumed=b * BATCH))
        got = _flat(_batches(q, total - b))
        assert got == ref[b * BATCH :], b


def test_two_workers_refuse_a_mid_batch_offset():
    q = make_planner(**_kw(2))
    q.load_state_dict(q.state_dict(samples_consumed=4))
    with pytest.raises(ResumeStateError, match="inside a batch"):
        q.worker_start(0, 2)
