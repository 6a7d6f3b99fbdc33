"""The DataLoader's batch turns (planner/_turns.py), checked against torch's DataLoader as the
oracle: which worker gives each batch (``take_turns``), what each worker gave after
any number of batches or samples (``replay_turns``), and where an endless stream's epoch boundary
lies in the loader's batches (``epoch_overlap``, issue 37 item 2)."""

from __future__ import annotations

from itertools import islice

import pytest
import torch

from lerobotstream.planner._planner import Planner
from lerobotstream.planner._turns import epoch_overlap, replay_turns, take_turns
from tests._planners import make_planner


def worker_batches(items, batch_size: int, drop_last: bool):
    """One DataLoader worker's batches of ``items`` (a short last batch, or none with ``drop_last``)."""
    it = iter(items)
    while True:
        batch = list(islice(it, batch_size))
        if not batch or (len(batch) < batch_size and drop_last):
            return
        yield batch
        if len(batch) < batch_size:
            return


class _Counts(torch.utils.data.IterableDataset):
    """DataLoader worker w yields ``(w, i)`` for ``i < lengths[w]``."""

    def __init__(self, lengths):
        super().__init__()
        self.lengths = list(lengths)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        w = 0 if info is None else info.id
        return iter([(w, i) for i in range(self.lengths[w])])


def _dataloader(lengths, batch_size, drop_last):
    dl = torch.utils.data.DataLoader(
        _Counts(lengths),
        batch_size=batch_size,
        num_workers=len(lengths),
        drop_last=drop_last,
        collate_fn=list,
        multiprocessing_context="fork",
    )
    return [[tuple(x) for x in b] for b in dl]


CASES = [
    ((5, 9, 2), 2, False),
    ((5, 9, 2), 2, True),
    ((0, 7, 3, 4), 3, False),
    ((4, 4), 4, True),
    ((1, 12, 6), 5, False),
    ((7,), 3, False),
]


@pytest.mark.parametrize("lengths,batch_size,drop_last", CASES)
def test_turns_are_the_dataloaders(lengths, batch_size, drop_last):
    oracle = _dataloader(lengths, batch_size, drop_last)
    ours = list(
        take_turns([worker_batches([(w, i) for i in range(n)], batch_size, drop_last) for w, n in enumerate(lengths)])
    )
    assert ours == oracle
    for k in range(len(oracle) + 1):  # the same rotation, counted: after every prefix of batches
        given, nxt, taken = replay_turns(list(lengths), batch_size, batches=k, drop_last=drop_last)
        want = [sum(1 for b in oracle[:k] for w, _ in b if w == x) for x in range(len(lengths))]
        assert given == want and taken == k
        assert nxt == (oracle[k][0][0] if k < len(oracle) else None)
        s = sum(map(len, oracle[:k]))
        assert replay_turns(list(lengths), batch_size, samples=s, drop_last=drop_last)[0] == want


def test_turn_order_leaves_and_wraps():
    asked = []

    def worker(w, n):
        for i in range(n):
            asked.append(w)
            yield (w, i)
        asked.append(w)  # asked once more: it has none left

    got = list(take_turns([worker(0, 3), worker(1, 1), worker(2, 2)]))
    # worker 1 ends in the second round (its turn): worker 2 goes next, then 0, which goes on alone
    assert got == [(0, 0), (1, 0), (2, 0), (0, 1), (2, 1), (0, 2)]
    assert asked == [0, 1, 2, 0, 1, 2, 0, 2, 0]


def _endless_epochs(planner: Planner, first: list[int], n_batches: int):
    """(epoch index per sample in the loader's order) of an endless planner whose logical worker w
    gives ``first[w]`` samples of the pass in progress before its next epoch (index 0, then 1)."""
    k = max(1, planner.settings.num_workers)
    tagged = []
    for w in range(k):
        it = planner.iter_worker_anchors(w if planner.settings.num_workers else None, planner.settings.num_workers)
        start = planner.worker_start(
            w if planner.settings.num_workers else None, planner.settings.num_workers
        ).logical_worker
        tagged.append(worker_batches(_tag(it, first[start]), planner.settings.batch_size, False))
    return [e for b in islice(take_turns(tagged), n_batches) for e in b]


def _tag(anchors, n: int):
    """0 for the first ``n`` anchors (the pass in progress), 1 after (the next epoch)."""
    for i, _ in enumerate(anchors):
        yield 0 if i < n else 1


def _overlap(epochs: list[int]) -> int:
    last = max(i for i, e in enumerate(epochs) if e == 0)
    return sum(1 for e in epochs[:last] if e == 1)


LENGTHS = {e: 3 + (11 * e) % 17 for e in range(14)}


@pytest.mark.parametrize("workers,batch", [(2, 4), (3, 5), (4, 1)])
def test_an_uninterrupted_endless_epoch_boundary_is_where_the_rule_says(workers, batch):
    p = make_planner(LENGTHS, num_workers=workers, batch_size=batch, repeat=True, episode_pool_size=2, seed=4)
    frames = p.current_pass().worker_frames()
    got = _overlap(_endless_epochs(p, frames, 2 * sum(frames) // batch))
    assert got == epoch_overlap(frames, batch) <= (workers - 1) * (max(frames) - min(frames) + batch - 1)


@pytest.mark.parametrize("old,new", [((2, 2, 4), (1, 3, 5)), ((1, 3, 2), (1, 2, 3))])
def test_the_boundary_after_an_elastic_resume_follows_the_same_rule(old, new):
    """Issue 37 item 2: resumed with another topology, each worker's share of the remainder ends at
    its own sample count; the loader's batches blur the boundary by exactly ``epoch_overlap`` of
    the remainder shares (``remainder_info()['overlap']``), at most (K - 1) x (spread + B - 1)."""
    st = make_planner(
        LENGTHS, world_size=old[0], rank=0, num_workers=old[1], batch_size=old[2], repeat=True, episode_pool_size=2
    ).state_dict(samples_consumed=old[2] * 6)
    p = make_planner(
        LENGTHS, world_size=new[0], rank=0, num_workers=new[1], batch_size=new[2], repeat=True, episode_pool_size=2
    )
    p.load_state_dict(st)
    shares = p.current_pass().worker_frames()
    info = p.remainder_info()
    got = _overlap(_endless_epochs(p, shares, 2 * info["rank_samples"] // new[2] + 8))
    assert got == epoch_overlap(shares, new[2]) == info["overlap"]
    assert got <= (new[1] - 1) * (max(shares) - min(shares) + new[2] - 1)
    assert sum(shares) == info["rank_samples"] and info["overlap_bound"] >= got


def test_epoch_overlap_reference_values():
    assert epoch_overlap([10], 4) == 0 and epoch_overlap([0, 0], 3) == 0
    assert epoch_overlap([4, 4], 4) == 0  # whole batches, equal shares: a sharp boundary
    # worker 0 gives (3 old + 1 new), worker 1 4 old, worker 0 4 new, worker 1 its last 4 old: 5 new before
    assert epoch_overlap([3, 8], 4) == 5
    assert epoch_overlap([8, 3], 4) == 1  # worker 1's first batch: 3 old + 1 new, before worker 0's 2nd batch
