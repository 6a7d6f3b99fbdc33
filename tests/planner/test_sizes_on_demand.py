"""Episode sizes on demand (``EpisodeSizes``): a planner sizes an episode only when admission
reaches it, in the very order and under the very budget the eager sizes give (issue 33 item 4)."""

from __future__ import annotations

import numpy as np
import pytest

from lerobotstream.errors import ByteBudgetError
from lerobotstream.planner import EpisodeSizes, Planner, PlanSettings
from tests._planners import make_mixture_for_datasets, make_partition_planner, make_planner, worker_plan

LENGTHS = {e: 5 + (7 * e) % 23 for e in range(40)}
SIZES = {e: 100 + (37 * e) % 400 for e in LENGTHS}


def _anchors(planner: Planner, epoch: int = 0) -> list[tuple[int, int]]:
    planner.set_epoch(epoch)
    return list(planner.iter_worker_anchors(None, 0))


@pytest.mark.parametrize("strategy", ["remaining", "round_robin", "sequential"])
@pytest.mark.parametrize("kind", ["episodes", "partitions"])
def test_on_demand_sizes_give_the_eager_order_and_size_only_what_is_admitted(strategy, kind):
    extra = {"partitions": 4} if kind == "partitions" else {}
    make = make_partition_planner if extra else make_planner
    kw = dict(seed=3, episode_pool_size=4, sampling_strategy=strategy, byte_budget=1200, **extra)
    eager = make(LENGTHS, episode_nbytes=SIZES.__getitem__, **kw)
    asked: list[int] = []
    sizes = EpisodeSizes(lambda e: asked.append(e) or SIZES[e])
    lazy = make(LENGTHS, episode_nbytes=sizes, **kw)
    plan = worker_plan(lazy, 0)
    assert asked == []  # building the plan sizes nothing
    pool = plan.pool(0)
    first = pool.resident().tolist()
    # the first admissions, and at most the next one in admission order (sized: it waits for room)
    assert set(first) <= set(asked) <= set(first) | set(pool.frontier(1).tolist())
    assert _anchors(lazy) == _anchors(eager)  # same admissions, same draws
    assert len(asked) == len(set(asked)) == len(LENGTHS)  # each once, kept over pools and epochs
    assert _anchors(lazy, 1) == _anchors(eager, 1) and len(asked) == len(LENGTHS)


def test_on_demand_pool_stays_within_the_budget():
    sizes = EpisodeSizes(SIZES.__getitem__)
    pool = worker_plan(make_planner(LENGTHS, episode_pool_size=8, byte_budget=900, episode_nbytes=sizes), 0).pool(0)
    while not pool.exhausted:
        assert pool.resident_bytes == sum(SIZES[e] for e in pool.resident().tolist()) <= 900
        pool.next_anchors(3)


def test_an_oversize_episode_fails_when_admission_reaches_it():
    sizes = {0: 3, 1: 11, 2: 3}
    p = make_planner(
        {0: 5, 1: 5, 2: 5},
        episode_pool_size=1,
        byte_budget=10,
        sampling_strategy="sequential",
        episode_nbytes=EpisodeSizes(sizes.__getitem__),
    )
    pool = worker_plan(p, 0).pool(0)  # episode 0 admitted; 1 is not sized yet
    assert pool.resident().tolist() == [0]
    with pytest.raises(ByteBudgetError, match=r"episode 1 needs 11 bytes.*byte budget of 10") as err:
        pool.next_anchors(5)  # episode 0's last frame evicts it: admission reaches episode 1
    assert err.value.episode_index == 1 and err.value.nbytes == 11
    with pytest.raises(ByteBudgetError, match="negative"):
        worker_plan(make_planner({0: 5}, byte_budget=10, episode_nbytes=EpisodeSizes(lambda e: -1)), 0).pool(0)


def test_a_mixture_names_the_dataset_of_an_oversize_episode():
    mix = make_mixture_for_datasets(
        [{0: 5, 1: 5}, {0: 5}],
        [1.0, 1.0],
        [0, 2],
        PlanSettings(seed=1, byte_budget=max(1, int(1e-7 * 2**30))),
        episode_nbytes=[EpisodeSizes(lambda e: 10**6)] * 2,
        mixture={"repo_ids": ["a/x", "b/y"]},
    )
    start = mix.worker_start(None, 0)
    plans = mix.worker_plans(start)  # nothing sized yet
    with pytest.raises(ByteBudgetError, match=r"dataset 0 \(a/x; its share"):
        next(iter(mix.worker_pools(start, plans)))
    with pytest.raises(ByteBudgetError, match=r"dataset 1 \(b/y"):
        plans[1].episode_size(0)  # what the byte cache reserves: the same check


def test_episode_sizes_compute_once_and_say_what_they_know():
    calls = []
    s = EpisodeSizes(lambda e: calls.append(e) or 10 * e)
    assert bool(s) and len(s) == 0
    assert s(3) == s[3] == 30 and s(np.int64(4)) == 40
    assert calls == [3, 4] and s.known() == {3: 30, 4: 40} and len(s) == 2
