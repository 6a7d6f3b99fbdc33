"""A mixture's planner (pure): exact shares per block, exact-once finite passes, endless rates, the
budget each dataset's pool keeps inside the mixed stream, and sample-exact resume."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._mixseq import MixSequence, integer_weights, mixture_shares
from tests._planners import make_mixture, make_planner, stream_planners, worker_plan

A = {e: 10 + 3 * e for e in range(6)}
B = {e: 7 + e for e in range(9)}
C = {e: 4 for e in range(3)}
OFFSETS = [0, 100, 200]


def _planner(
    datasets=(A, B),
    weights=None,
    *,
    repeat=False,
    num_workers=2,
    seed=5,
    world=(0, 1),
    nbytes=None,
    budgets=None,
    pool=2,
    batch_size=4,
):
    ps = [
        make_planner(
            lengths,
            seed=11 + i,
            num_workers=num_workers,
            repeat=repeat,
            episode_pool_size=pool,
            rank=world[0],
            world_size=world[1],
            byte_budget=None if budgets is None else budgets[i],
            episode_nbytes=None if nbytes is None else nbytes[i],
        )
        for i, lengths in enumerate(datasets)
    ]
    w = weights or [sum(d.values()) for d in datasets]
    return make_mixture(
        ps,
        w,
        OFFSETS[: len(datasets)],
        seed=seed,
        repeat=repeat,
        batch_size=batch_size,
        mixture={"repo_ids": [f"d{i}" for i in range(len(datasets))], "weights": list(w)},
    )


def _anchors(mp, dl_worker, nw, n=None, step=37, events=None):
    start = mp.worker_start(dl_worker, nw)
    plans = [worker_plan(p, start.logical_worker) for p in stream_planners(mp)]
    out = []
    for pool in mp.worker_pools(start, plans):
        if events is not None:
            pool.drain_events()
            events.append(("start", pool.emitted, pool.resident().tolist()))
        while True:
            want = step if n is None else min(step, n - len(out))
            if start.limit is not None:
                want = min(want, start.limit - pool.emitted)
            if want <= 0:
                break
            e, f = pool.next_anchors(want)
            if events is not None:
                events.append(("anchors", pool.emitted - len(e), e.tolist()))
                events.append(("events", pool.drain_events()))
            out += list(zip(e.tolist(), f.tolist()))
            if len(e) < want:
                break
    return out


def _all_frames(datasets):
    return {(OFFSETS[d] + e, f) for d, lengths in enumerate(datasets) for e, n in lengths.items() for f in range(n)}


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
@pytest.mark.parametrize("weights", [None, [0.7, 0.2, 0.1], [1, 1, 50]])
def test_finite_pass_is_exact_once(num_workers, weights):
    ds = (A, B, C)
    mp = _planner(ds, weights, num_workers=num_workers)
    got = [a for w in range(max(1, num_workers)) for a in _anchors(mp, w if num_workers else None, num_workers)]
    assert collections.Counter(got).most_common(1)[0][1] == 1
    assert set(got) == _all_frames(ds)


def test_two_ranks_union_is_one_pass():
    ds = (A, B)
    got = []
    for rank in (0, 1):
        mp = _planner(ds, [0.5, 0.5], world=(rank, 2))
        got += [a for w in range(2) for a in _anchors(mp, w, 2)]
    assert sorted(got) == sorted(_all_frames(ds))


@pytest.mark.parametrize("weights", [[0.7, 0.3], [0.9, 0.1], [0.5, 0.5]])
def test_endless_shares_follow_weights_in_every_worker(weights):
    mp = _planner((A, B), weights, repeat=True)
    for w in (0, 1):
        got = _anchors(mp, w, 2, n=3000)
        share = np.mean([e >= 100 for e, _ in got])
        assert abs(share - weights[1] / sum(weights)) < 0.01


def test_mix_sequence_blocks_are_exact():
    seq = MixSequence(integer_weights([0.7, 0.2, 0.1]), [None] * 3, [1, 2])  # endless: one phase
    for r in (0, 1, 63, 64, 65, 640, 6401):
        counts = seq.counts(r)
        assert counts.sum() == r
        assert np.all(np.abs(counts - np.array([0.7, 0.2, 0.1]) * r) <= 3)
    choices = seq.choices(0, 6401)
    assert np.array_equal(np.bincount(choices, minlength=3), seq.counts(6401))
    for d in range(3):
        for m in (1, 5, 100):
            r = seq.position_of(d, m)
            assert seq.counts(r)[d] == m and seq.counts(r - 1)[d] == m - 1


@settings(max_examples=40, deadline=None)
@given(w=st.lists(st.integers(1, 1000), min_size=1, max_size=5), r=st.integers(0, 5000))
def test_mix_sequence_counts_match_choices(w, r):
    seq = MixSequence(integer_weights(w), [None] * len(w), [9])
    assert np.array_equal(np.bincount(seq.choices(0, r), minlength=len(w)), seq.counts(r))


def test_integer_weights_and_shares():
    iw = integer_weights([0.7, 0.3])
    assert sum(iw) == 1 << 40 and iw[0] > iw[1]
    with pytest.raises(ValueError):
        integer_weights([0, 0])
    s = mixture_shares([3, 1])
    assert s.sum() == pytest.approx(1) and s[0] == pytest.approx(0.25 + 0.375)


@pytest.mark.parametrize("pool", [1, 2])
@pytest.mark.parametrize("repeat", [False, True])
def test_events_keep_each_dataset_within_its_budget(repeat, pool):
    """Replaying the mixed pool's events: every anchor's episode is resident when drawn, and each
    dataset's resident bytes stay within its share (so the sum stays within the worker's budget)."""
    sizes = [{e: 100 + 7 * e for e in A}, {e: 60 + 5 * e for e in B}]
    budgets = [2 * max(sizes[0].values()) * 2 + 1, 2 * max(sizes[1].values()) + 1]  # rank budgets (2 workers)
    mp = _planner(
        (A, B),
        [0.6, 0.4],
        repeat=repeat,
        nbytes=[sizes[0].__getitem__, sizes[1].__getitem__],
        budgets=budgets,
        pool=pool,
    )
    for w in (0, 1):
        events = []
        got = _anchors(mp, w, 2, n=600 if repeat else None, step=13, events=events)
        assert len({e for e, _ in got}) > pool * 2  # admissions happen inside the stream
        resident: set[int] = set()
        plans = [worker_plan(p, w) for p in stream_planners(mp)]
        for ev in events:
            if ev[0] == "start":
                resident = set(ev[2])
            elif ev[0] == "anchors":
                pending = ev
            else:
                start, eps = pending[1], pending[2]
                evs = ev[1]
                for i, e in enumerate(eps):
                    pos = start + i
                    for x in evs:
                        if x.kind == "admit" and x.position == pos:
                            resident.add(x.episode_index)
                    assert e in resident, (pos, e)
                    for x in evs:
                        if x.kind == "evict" and x.position == pos + 1:
                            resident.discard(x.episode_index)
                    for d in (0, 1):
                        used = sum(sizes[d][g - OFFSETS[d]] for g in resident if (g >= 100) == bool(d))
                        assert used <= plans[d].byte_budget
                for x in evs:
                    if x.kind == "admit" and x.position == start + len(eps):
                        resident.add(x.episode_index)


@pytest.mark.parametrize("repeat", [False, True])
@pytest.mark.parametrize("consumed", [0, 8, 24, 52])
def test_resume_continues_each_worker_exactly(repeat, consumed):
    full = {w: _anchors(_planner(repeat=repeat), w, 2, n=150 if repeat else None) for w in (0, 1)}
    mp = _planner(repeat=repeat)
    mp.load_state_dict(_planner(repeat=repeat).state_dict(samples_consumed=consumed))
    for dl in (0, 1):
        start = mp.worker_start(dl, 2)
        got = _anchors(mp, dl, 2, n=40 if repeat else None)
        assert got == full[start.logical_worker][start.offset : start.offset + len(got)]
        assert got


def test_resume_refuses_another_mixture():
    state = _planner(weights=[0.7, 0.3]).state_dict(samples_consumed=8)
    with pytest.raises(ResumeStateError, match="weights"):
        _planner(weights=[0.5, 0.5]).load_state_dict(state)
    with pytest.raises(ResumeStateError, match="mixture"):
        _planner((A, B, C)).load_state_dict(_planner((A, B)).state_dict())
    single = make_planner(A, seed=1, num_workers=2, batch_size=4)
    with pytest.raises(ResumeStateError, match="single-dataset"):
        _planner().load_state_dict(single.state_dict())
    with pytest.raises(ResumeStateError, match="mixture"):
        single.load_state_dict(state)
    assert single.state_dict()["mixture"] is None


def test_endless_datasets_each_run_exact_epochs():
    """repeat=True: each dataset's anchors in a worker are consecutive exact-coverage epochs of
    its worker shard, whatever the mixing rate."""
    mp = _planner((A, B, C), [0.6, 0.3, 0.1], repeat=True)
    for w in (0, 1):
        got = _anchors(mp, w, 2, n=2000)
        for d, lo in enumerate(OFFSETS):
            mine = [a for a in got if lo <= a[0] < lo + 100]
            plan = worker_plan(stream_planners(mp)[d], w)
            shard = {(lo + int(e), f) for e, n in zip(plan.episode_indices, plan.lengths) for f in range(int(n))}
            f = len(shard)
            assert len(mine) >= 2 * f
            for k in range(len(mine) // f):
                assert set(mine[k * f : (k + 1) * f]) == shard, (d, k)


@pytest.mark.parametrize("num_workers", [3, 4, 6])
def test_endless_rank_shares_follow_weights_when_a_dataset_misses_workers(num_workers):
    """C has 3 episodes: with more workers some hold none of it; the others draw it more often so
    the rank's share still follows the weights."""
    weights = [0.5, 0.3, 0.2]
    mp = _planner((A, B, C), weights, repeat=True, num_workers=num_workers)
    counts = np.zeros(3)
    for w in range(num_workers):
        for e, _ in _anchors(mp, w, num_workers, n=1200):
            counts[e // 100] += 1
    share = counts / counts.sum()
    np.testing.assert_allclose(share, weights, atol=0.01)


def test_impossible_shares_warn(caplog):
    weights = [0.1, 0.1, 0.8]  # C in 2 of 6 workers cannot give 80% of the rank's samples
    mp = _planner((A, B, C), weights, repeat=True, num_workers=6)
    with caplog.at_level("WARNING", logger="lerobotstream.planner"):
        mp.plain.worker_weights(0)
    assert "cannot follow the weights" in caplog.text and "d2" in caplog.text
