"""Planner: shards, exact coverage, pool bounds, seeds, finite/endless, resume (simulated loader).

The real-DataLoader resume tests live in tests/planner/test_resume_through_dataloader.py.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from itertools import islice

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lerobotstream.errors import ByteBudgetError, ResumeStateError, ShardingError
from lerobotstream.planner._planner import Planner
from lerobotstream.planner._poolcore import STRATEGIES as STRATEGY_TABLE
from lerobotstream.planner._state import SCHEMA, SCHEMA_KEY
from lerobotstream.planner._turns import replay_turns, take_turns
from tests._planners import admission_order, iter_anchors, make_planner, worker_episodes, worker_plan
from tests._streams import resigned
from tests.planner.test_turns import worker_batches

STRATEGIES = tuple(STRATEGY_TABLE)  # every strategy of the table (a new one is tested here too)


def _lengths(seed: int, n: int, lo: int = 1, hi: int = 200) -> np.ndarray:
    return np.random.default_rng(seed).integers(lo, hi + 1, size=n)


def _all_frames(lengths: dict[int, int]) -> Counter:
    return Counter((e, f) for e, n in lengths.items() for f in range(n))


def _epoch(planner_kw: dict, epoch: int = 0) -> tuple[Counter, dict]:
    """Union over ranks and workers of one epoch; per-rank / per-worker frame sets."""
    world = planner_kw.get("world_size", 1)
    seen: Counter = Counter()
    shards = {}
    for r in range(world):
        p = make_planner(**{**planner_kw, "rank": r})
        for w in range(p.settings.num_shards):
            got = list(iter_anchors(worker_plan(p, w), epoch))
            seen.update(got)
            shards[(r, w)] = {e for e, _ in got}
    return seen, shards


# --- exhaustive coverage ------------------------------------------------------------------------
DATASETS = {
    "uneven": dict(enumerate(_lengths(1, 13).tolist())),
    "subset_with_empty": {3: 17, 5: 0, 8: 200, 9: 1, 12: 44, 20: 90, 21: 1, 30: 133},
}


@pytest.mark.parametrize("name", sorted(DATASETS))
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_epoch_covers_every_selected_frame_exactly_once(name, strategy, num_workers, world_size):
    lengths = DATASETS[name]
    kw = dict(
        episode_lengths=lengths,
        world_size=world_size,
        num_workers=num_workers,
        sampling_strategy=strategy,
        episode_pool_size=3,
        seed=7,
    )
    seen, shards = _epoch(kw)
    expected = _all_frames(lengths)
    assert seen == expected  # every frame exactly once (Counter equality catches duplicates)
    # shards disjoint
    owners = Counter(e for eps in shards.values() for e in eps)
    assert all(c == 1 for c in owners.values())
    # frame balance: max - min <= max episode length (ranks, then workers inside each rank)
    maxlen = max(lengths.values())
    p0 = make_planner(**{**kw, "rank": 0})
    per_rank = p0.current_pass().samples_per_rank()
    assert per_rank.sum() == sum(lengths.values())
    assert per_rank.max() - per_rank.min() <= maxlen
    assert per_rank.max() <= per_rank.mean() + maxlen
    for r in range(world_size):
        p = make_planner(**{**kw, "rank": r})
        fr = [
            int(sum(lengths[e] for e in worker_episodes(p, w)))
            for w in range(len(p.current_pass().active_workers(p.settings.rank)))
        ]
        assert max(fr) - min(fr) <= max(lengths[e] for e in p.plain.layouts[0].rank_episodes(p.settings.rank))


def test_lpt_bound_reference_case():
    p = make_planner([100, 90, 20, 10, 5], world_size=2, rank=0)
    a, b = p.current_pass().samples_per_rank()
    assert abs(a - b) <= 15


def test_rank_without_episode_is_an_error():
    with pytest.raises(ShardingError, match="Lower the number of ranks"):
        make_planner({0: 5, 1: 0, 2: 3}, world_size=3, rank=0)


def test_idle_workers_yield_nothing_and_say_so_once(caplog, monkeypatch):
    """Said by DataLoader worker 0 where its stream starts, once per process; not by the other
    workers nor by planners built for bookkeeping (state_dict). Real DataLoaders: test_idle_worker_warning.py."""
    from lerobotstream.planner import _planner

    monkeypatch.setattr(_planner, "_IDLE_WARNED", set())
    caplog.set_level(logging.WARNING, logger="lerobotstream.planner")
    lengths = {0: 3, 1: 7, 2: 11}
    said = lambda: len([r for r in caplog.records if "yield nothing" in r.message])  # noqa: E731
    for _ in range(2):
        p = make_planner(lengths, world_size=2, rank=1, num_workers=4, seed=123)
        p.state_dict(samples_consumed=0)
    assert said() == 0
    for w in (3, 2, 1):
        p.worker_start(w, 4)
    assert said() == 0
    for _ in range(2):
        make_planner(lengths, world_size=2, rank=1, num_workers=4, seed=123).worker_start(0, 4)
    assert len(p.current_pass().active_workers(1)) == 2  # rank 1 owns episodes 1 and 0 (LPT: 11 | 7 + 3)
    assert said() == 1
    assert list(iter_anchors(worker_plan(p, 3), 0)) == []
    assert list(iter_anchors(worker_plan(p, 3), 0, repeat=True)) == []


def test_rank_discovery_from_env(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    p = make_planner({i: 5 for i in range(6)})
    assert (p.settings.rank, p.settings.world_size) == (2, 3)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    p = make_planner({i: 5 for i in range(6)})
    assert (p.settings.rank, p.settings.world_size) == (0, 1)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ShardingError):
        make_planner({i: 5 for i in range(6)})


def test_worker_resource_shares():
    p = make_planner(
        {i: 10 for i in range(8)},
        num_workers=3,
        byte_budget=900,
        episode_nbytes=lambda e: 100,
        video_decoder_cache_size=12,
    )
    wp = worker_plan(p, 1)
    assert (wp.byte_budget, wp.video_decoder_cache_size, wp.pool_size) == (300, 4, 32 // 3)
    assert worker_plan(make_planner({i: 10 for i in range(8)}, num_workers=3, episode_pool_size=5), 0).pool_size == 5


# --- pool invariants ------------------------------------------------------------------------------
def _check_pool(lengths, nbytes, pool_size, budget, strategy, seed, step=1):
    p = make_planner(
        lengths,
        episode_pool_size=pool_size,
        byte_budget=budget,
        sampling_strategy=strategy,
        seed=seed,
        episode_nbytes=(lambda e: nbytes[e]) if budget is not None else None,
    )
    pool = worker_plan(p, 0).group_pool(0, 0)
    resident: set[int] = set()
    size = dict(enumerate(nbytes))
    seen = Counter()
    while True:
        for ev in pool.drain_events():
            if ev.kind == "admit":
                assert ev.episode_index not in resident
                resident.add(ev.episode_index)
            else:
                resident.remove(ev.episode_index)
        assert set(pool.resident().tolist()) == resident
        assert len(resident) <= pool_size
        if budget is not None:
            assert sum(size[e] for e in resident) == pool.resident_bytes <= budget
        if pool.remaining == 0:
            break
        ep, fr = pool.next_anchors(step)
        for e, f in zip(ep.tolist(), fr.tolist()):
            seen[(e, f)] += 1
    assert seen == _all_frames(dict(enumerate(lengths)))
    assert pool.next_anchors(5)[0].size == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pool_bounds_and_exact_coverage_property(data):
    n = data.draw(st.integers(1, 12))
    lengths = data.draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    nbytes = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    pool_size = data.draw(st.integers(1, 6))
    budget = data.draw(st.one_of(st.none(), st.integers(max(max(nbytes), 1), 150)))
    strategy = data.draw(st.sampled_from(STRATEGIES))
    seed = data.draw(st.integers(0, 2**32))
    _check_pool(lengths, nbytes, pool_size, budget, strategy, seed, step=data.draw(st.sampled_from([1, 3])))


def test_anchor_always_from_a_resident_episode():
    lengths = [5, 3, 8, 1, 6, 4, 7, 2]
    for strategy in STRATEGIES:
        pool = worker_plan(make_planner(lengths, episode_pool_size=3, sampling_strategy=strategy), 0).group_pool(0, 0)
        resident = set(pool.resident().tolist())
        pool.drain_events()
        while pool.remaining:
            ep, fr = pool.next_anchors(1)
            assert int(ep[0]) in resident
            evs = pool.drain_events()
            for ev in evs:
                assert ev.position == pool.emitted
                (resident.add if ev.kind == "admit" else resident.remove)(ev.episode_index)
            if fr[0] >= 0 and any(ev.kind == "evict" for ev in evs):
                assert [ev.episode_index for ev in evs if ev.kind == "evict"] == [int(ep[0])]


def test_byte_aware_admission_and_frontier():
    sizes = {0: 7, 1: 6, 2: 4, 3: 3, 4: 2}
    p = make_planner({e: 5 for e in sizes}, episode_pool_size=4, byte_budget=10, episode_nbytes=sizes.__getitem__)
    plan = worker_plan(p, 0)
    order = admission_order(plan, 0).tolist()
    pool = plan.group_pool(0, 0)
    admitted = [ev.episode_index for ev in pool.drain_events()]
    assert admitted == order[: len(admitted)]  # strict seeded order
    assert pool.frontier(10).tolist() == order[len(admitted) :]
    assert pool.resident_bytes <= 10
    _check_pool([5] * 5, [sizes[e] for e in range(5)], 4, 10, "remaining", 3)


def test_episode_larger_than_budget_fails_before_any_fetch():
    """Sizes are asked as admission reaches an episode: the first pool (built before any fetch) raises."""
    plan = worker_plan(make_planner({0: 5, 1: 5}, byte_budget=10, episode_nbytes={0: 3, 1: 11}.__getitem__), 0)
    with pytest.raises(ByteBudgetError, match=r"episode 1 needs 11 bytes.*byte budget of 10"):
        plan.group_pool(0, 0)
    # binary units, like the budget option (GiB): issue 17.18
    with pytest.raises(ByteBudgetError, match=r"\(1\.500 GiB\) .*\(1\.000 GiB;"):
        worker_plan(make_planner({0: 5}, byte_budget=2**30, episode_nbytes={0: 3 << 29}.__getitem__), 0).group_pool(
            0, 0
        )
    # per-worker share: 2 workers of a 20-byte rank budget get 10 each
    with pytest.raises(ByteBudgetError, match="worker"):
        p = make_planner({0: 5, 1: 5}, num_workers=2, byte_budget=20, episode_nbytes={0: 3, 1: 11}.__getitem__)
        [worker_plan(p, w).group_pool(0, 0) for w in range(2)]


def test_every_budget_check_says_the_one_rule():
    """The plan's check and the pool's own admission check raise ``errors.over_budget``'s error (one
    rule, one message; the holder and how its budget was derived vary)."""
    from lerobotstream.errors import over_budget
    from lerobotstream.planner._poolcore import EpisodePool

    ones = np.ones(2, dtype=np.int64)
    with pytest.raises(ByteBudgetError) as pool_error:
        EpisodePool(
            np.arange(2),
            ones * 3,
            np.array([5, 50], dtype=np.int64),
            np.array([1, 0], dtype=np.int64),
            2,
            10,
            "remaining",
            np.arange(4, dtype=np.uint64) + 1,
        )
    rule = over_budget(1, 50, 10, holder="the pool", budget_is="episode 1 is the pool's local index")
    assert str(pool_error.value) == str(rule) and pool_error.value.nbytes == 50 and pool_error.value.byte_budget == 10
    with pytest.raises(ByteBudgetError) as plan_error:
        worker_plan(make_planner({0: 5, 1: 5}, byte_budget=10, episode_nbytes={0: 3, 1: 11}.__getitem__), 0).group_pool(
            0, 0
        )
    assert str(plan_error.value).startswith(
        str(over_budget(1, 11, 10, holder="worker 0 of rank 0")).split(" (0.000 GiB)")[0]
    )
    with pytest.raises(ByteBudgetError, match=r"reports a negative byte size \(-1\)"):
        worker_plan(make_planner({0: 5, 1: 5}, byte_budget=10, episode_nbytes={0: 3, 1: -1}.__getitem__), 0).group_pool(
            0, 0
        )


def test_round_robin_rounds_take_one_frame_per_resident():
    p = make_planner({e: 10 for e in range(6)}, episode_pool_size=6, sampling_strategy="round_robin", seed=5)
    ep, _ = worker_plan(p, 0).group_pool(0, 0).next_anchors(60)
    for r in range(10):
        assert sorted(ep[6 * r : 6 * r + 6].tolist()) == list(range(6))


def test_round_robin_newly_admitted_join_next_round():
    # pool 2: episode lengths 1 and 3; the 1-frame episode leaves in round 1, its replacement waits
    p = make_planner({0: 1, 1: 3, 2: 3}, episode_pool_size=2, sampling_strategy="round_robin", seed=0)
    plan = worker_plan(p, 0)
    for epoch in range(20):
        order = admission_order(plan, epoch).tolist()
        pool = plan.group_pool(0, epoch)
        ep, _ = pool.next_anchors(7)
        first_round = set(order[:2])
        assert set(ep[:2].tolist()) == first_round
        assert Counter(ep.tolist()) == Counter({0: 1, 1: 3, 2: 3})


def test_remaining_mixes_like_a_uniform_draw():
    p = make_planner({e: 100 for e in range(64)}, episode_pool_size=64, seed=1)
    ep, _ = worker_plan(p, 0).group_pool(0, 0).next_anchors(64)
    assert len(set(ep.tolist())) >= 30  # coupon collector: ~41 expected


def test_large_epoch_bounded_and_complete():
    lengths = {e: 90 for e in range(500)}
    pool = worker_plan(make_planner(lengths, episode_pool_size=64, seed=3), 0).group_pool(0, 0)
    ep, fr = pool.next_anchors(500 * 90 + 10)
    assert len(ep) == 45000
    assert len(set(zip(ep.tolist(), fr.tolist()))) == 45000


# --- seeds and global RNG -----------------------------------------------------------------------------
def _order(seed, epoch=0, **kw):
    p = make_planner(dict(enumerate(_lengths(4, 20, 1, 50).tolist())), seed=seed, episode_pool_size=4, **kw)
    plan = worker_plan(p, 0)
    return admission_order(plan, epoch).tolist(), list(iter_anchors(plan, epoch))


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if not STRATEGY_TABLE[s].in_order])  # in order: no draws
def test_seed_and_epoch_determine_the_order(strategy):
    a = _order(1000, sampling_strategy=strategy)
    assert a == _order(1000, sampling_strategy=strategy)
    b = _order(1001, sampling_strategy=strategy)
    assert a[0] != b[0] and a[1] != b[1]
    assert a[1] != _order(1000, epoch=1, sampling_strategy=strategy)[1]
    assert _order(None, sampling_strategy=strategy) == _order(42, sampling_strategy=strategy)
    assert make_planner({0: 1}).seed == 1000


def test_global_rng_independence():
    import torch

    lengths = dict(enumerate(_lengths(9, 16, 1, 60).tolist()))
    ref = {}
    for r in range(4):
        p = make_planner(lengths, world_size=4, rank=r, num_workers=2, episode_pool_size=3)
        ref[r] = [list(iter_anchors(worker_plan(p, w), e)) for e in (0, 1) for w in range(2)]
    for r in range(4):
        p = make_planner(lengths, world_size=4, rank=r, num_workers=2, episode_pool_size=3)
        got = []
        for e in (0, 1):
            for w in range(2):
                if r == 0:  # rank-asymmetric RNG use (BR-13)
                    torch.rand(7)
                    np.random.seed(r + e)
                    np.random.rand(3)
                    random.seed(e)
                    random.random()
                got.append(list(iter_anchors(worker_plan(p, w), e)))
        assert got == ref[r]
    for e in (0, 1):
        union = Counter(a for r in range(4) for w in range(2) for a in ref[r][e * 2 + w])
        assert union == _all_frames(lengths)


# --- finite epochs: equal batch counts -----------------------------------------------------------
def _simulate_loader(planner: Planner, n_batches: int | None = None) -> list[list[tuple[int, int]]]:
    """Batches in the order torch's DataLoader returns them for an IterableDataset: each worker's
    anchors cut into batches, taken in the DataLoader's turns (``planner._turns.take_turns``, the one rule;
    tests/planner/test_turns.py checks it against a real DataLoader)."""
    n = planner.settings.num_workers
    its = [planner.iter_worker_anchors(None, 0)] if n == 0 else [planner.iter_worker_anchors(p, n) for p in range(n)]
    return list(
        islice(
            take_turns([worker_batches(it, planner.settings.batch_size, planner.settings.drop_last) for it in its]),
            n_batches,
        )
    )


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_equalize_drop_gives_every_rank_the_same_batch_count(drop_last, num_workers):
    lengths = {0: 3, 1: 7, 2: 11, 3: 13, 4: 2}
    counts, seen = [], Counter()
    for r in range(2):
        kw = dict(world_size=2, rank=r, batch_size=4, drop_last=drop_last, num_workers=num_workers)
        p = make_planner(lengths, equalize="drop", **kw)
        batches = _simulate_loader(p)
        counts.append(len(batches))
        seen.update(a for b in batches for a in b)
        assert sum(map(len, batches)) == p.current_pass().epoch_samples()
        plain = make_planner(lengths, **kw)
        assert len(_simulate_loader(plain)) == plain.current_pass().batches_per_rank()[r]
    assert counts[0] == counts[1]
    assert max(seen.values()) == 1
    assert make_planner(lengths, world_size=2, rank=0).current_pass().samples_per_rank().tolist() == [
        sum(lengths[e] for e in make_planner(lengths, world_size=2, rank=r).plain.layouts[0].rank_episodes(r))
        for r in range(2)
    ]


# --- resume (simulated DataLoader; the real one is in test_resume_through_dataloader.py) ---------------
def test_replay_turns_reference_vectors():
    assert replay_turns([None] * 3, 1, batches=7)[:2] == ([3, 2, 2], 1)
    assert replay_turns([1, None], 1, batches=5)[:2] == ([1, 4], 1)
    assert replay_turns([0, None, 2], 1, batches=4)[:2] == ([0, 2, 2], 1)
    assert replay_turns([2, None, None], 1, batches=3)[:2] == ([1, 1, 1], 0)
    assert replay_turns([2, 3], 1, batches=10)[0] == [2, 3]
    assert replay_turns([10, 7], 4, samples=4 + 4 + 4 + 3)[:2] == ([8, 7], 0)
    with pytest.raises(ResumeStateError, match="inside a batch"):
        replay_turns([10, 7], 4, samples=5)


def _flat(batches):
    return [a for b in batches for a in b]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_resume_finite_at_every_offset_across_epochs(strategy, drop_last, num_workers):
    lengths = {0: 4, 1: 7, 2: 2, 3: 5, 4: 3, 6: 1}
    kw = dict(
        episode_lengths=lengths,
        num_workers=num_workers,
        batch_size=3,
        sampling_strategy=strategy,
        drop_last=drop_last,
        episode_pool_size=2,
        world_size=2,
        rank=1,
        seed=11,
    )
    p = make_planner(**kw)
    epochs = []
    for e in (0, 1, 2):
        p.set_epoch(e)
        epochs.append(_simulate_loader(p))
    stream = _flat(epochs[0]) + _flat(epochs[1]) + _flat(epochs[2])
    for e in (0, 1):
        bounds = np.cumsum([0] + [len(b) for b in epochs[e]]).tolist()
        before = sum(len(_flat(epochs[i])) for i in range(e))
        offsets = range(bounds[-1] + 1) if num_workers <= 1 and not drop_last else bounds
        for s in offsets:
            state = resigned(p.state_dict(), epoch=e, samples=s)
            q = make_planner(**kw)
            q.load_state_dict(state)
            cur, _ = q.position()
            got = _flat(_simulate_loader(q))
            for nxt in range(cur + 1, 3):
                q.set_epoch(nxt)
                got += _flat(_simulate_loader(q))
            assert got == stream[before + s :], (e, s)
    if num_workers >= 2:
        q = make_planner(**kw)
        st_ = q.state_dict(samples_consumed=1)
        q.load_state_dict(st_)
        with pytest.raises(ResumeStateError, match="inside a batch"):
            q.worker_start(0, num_workers)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_resume_endless_at_every_batch_across_epoch_boundaries(strategy, num_workers):
    lengths = {0: 4, 1: 7, 2: 2, 3: 5, 4: 3}
    kw = dict(
        episode_lengths=lengths,
        num_workers=num_workers,
        batch_size=4,
        sampling_strategy=strategy,
        episode_pool_size=2,
        repeat=True,
        seed=3,
    )
    total = 24  # batches: several epochs of every worker
    ref = _simulate_loader(make_planner(**kw), total)
    flat = _flat(ref)
    assert Counter(flat[:21]) == _all_frames(lengths) or num_workers >= 2  # one epoch when 1 stream
    step = 1 if num_workers <= 1 else 4
    for s in range(0, total * 4, step):
        q = make_planner(**kw)
        q.load_state_dict(q.state_dict(samples_consumed=s))
        got = _flat(_simulate_loader(q, (total * 4 - s) // 4))
        assert got == flat[s : s + len(got)] and len(got) == total * 4 - s - (total * 4 - s) % 4


def test_resume_random_offsets_larger_dataset():
    lengths = dict(enumerate(_lengths(2, 60, 1, 200).tolist()))
    kw = dict(episode_lengths=lengths, num_workers=3, batch_size=16, episode_pool_size=5, seed=8)
    p = make_planner(**kw)
    ref = _simulate_loader(p)
    bounds = np.cumsum([0] + [len(b) for b in ref]).tolist()
    flat = _flat(ref)
    assert Counter(flat) == _all_frames(lengths)
    rng = np.random.default_rng(0)
    for k in rng.choice(len(bounds), size=6, replace=False).tolist():
        q = make_planner(**kw)
        q.load_state_dict(q.state_dict(samples_consumed=bounds[k]))
        assert _flat(_simulate_loader(q)) == flat[bounds[k] :]


def test_resume_state_validation():
    p = make_planner({0: 5, 1: 6}, batch_size=4, num_workers=2)
    state = p.state_dict(samples_consumed=8)
    assert state[SCHEMA_KEY] == SCHEMA
    for change in (
        dict(batch_size=8),
        dict(num_workers=1),
        dict(sampling_strategy="round_robin"),
        dict(episode_pool_size=3),
    ):
        q = make_planner({0: 5, 1: 6}, **{**dict(batch_size=4, num_workers=2), **change})
        q.load_state_dict(state)  # another topology: elastic resume (tests/planner/test_elastic_planner.py)
        assert q.resume_changes and q.remainder_info()["samples_left"] == 3
    with pytest.raises(ResumeStateError, match="seed"):
        make_planner({0: 5, 1: 6}, batch_size=4, num_workers=2, seed=1).load_state_dict(state)
    q = make_planner({0: 5, 1: 6}, batch_size=4, num_workers=2, world_size=2, rank=0)
    q.load_state_dict(state)
    assert any(c.startswith("world_size") for c in q.resume_changes)
    with pytest.raises(ResumeStateError, match="saved weights"):
        p.load_state_dict({"epoch": 0, "offset": 8, "batch_size": 4})
    p.load_state_dict(state)
    assert p.at.samples == 8


def test_resume_refuses_a_different_episode_selection():
    """Bug: a state written for episodes {0,1,2} loaded silently into episodes {0,1,3}."""
    from lerobotstream.errors import ResumeStateError

    a = make_planner({0: 10, 1: 12, 2: 8}, rank=0, world_size=1, batch_size=2)
    st = a.state_dict(samples_consumed=4)
    assert st["episodes_digest"] == a.specs[0].digest
    make_planner({0: 10, 1: 12, 2: 8}, rank=0, world_size=1, batch_size=2).load_state_dict(st)  # same: accepted
    for other in ({0: 10, 1: 12, 3: 8}, {0: 10, 1: 12, 2: 9}, {0: 10, 1: 12}):
        with pytest.raises(ResumeStateError, match="episode selection"):
            make_planner(other, rank=0, world_size=1, batch_size=2).load_state_dict(st)
    legacy = resigned({k: v for k, v in st.items() if k != "episodes_digest"})  # no digest: cannot be checked
    for other in ({0: 10, 1: 12, 2: 8}, {0: 10, 1: 12, 3: 8}):  # refused, never trusted
        with pytest.raises(ResumeStateError, match=r"missing fields \['episodes_digest'\]"):
            make_planner(other, rank=0, world_size=1, batch_size=2).load_state_dict(legacy)


def test_sequential_strategy_is_ascending_and_the_same_every_epoch():
    lengths = {3: 4, 7: 2, 9: 3, 12: 1}
    for nw in (0, 2):
        p = make_planner(lengths, num_workers=nw, episode_pool_size=2, sampling_strategy="sequential", seed=5)
        for w in range(p.settings.num_shards):
            plan = worker_plan(p, w)
            want = [(e, f) for e in sorted(plan.episode_indices.tolist()) for f in range(lengths[e])]
            assert list(iter_anchors(plan, 0)) == want
            assert list(iter_anchors(plan, 3)) == want  # no draws: every epoch alike
            assert admission_order(plan, 1).tolist() == sorted(plan.episode_indices.tolist())
