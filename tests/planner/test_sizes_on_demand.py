"""Episode sizes on demand: a planner sizes an episode only when admission reaches it, whatever
sizes callable it is given; ``EpisodeSizes`` keeps each size once computed (issue 33 item 4)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import lerobotstream.planner as planner_pkg
from lerobotstream.errors import ByteBudgetError, Mp4Error, Mp4TruncatedError, SourceReadError
from lerobotstream.planner._planner import Planner
from lerobotstream.planner._poolcore import STRATEGIES, EpisodePool
from lerobotstream.planner._sizes import EpisodeSizes
from lerobotstream.planner._streams import PlanSettings
from tests._planners import make_mixture_for_datasets, make_partition_planner, make_planner, worker_plan

LENGTHS = {e: 5 + (7 * e) % 23 for e in range(40)}
SIZES = {e: 100 + (37 * e) % 400 for e in LENGTHS}


def _anchors(planner: Planner, epoch: int = 0) -> list[tuple[int, int]]:
    planner.set_epoch(epoch)
    return list(planner.iter_worker_anchors(None, 0))


@pytest.mark.parametrize("strategy", tuple(STRATEGIES))  # every strategy of the table
@pytest.mark.parametrize("kind", ["episodes", "partitions"])
def test_kept_sizes_give_a_plain_callables_order_and_size_only_what_is_admitted(strategy, kind):
    extra = {"partitions": 4} if kind == "partitions" else {}
    make = make_partition_planner if extra else make_planner
    kw = dict(seed=3, episode_pool_size=4, sampling_strategy=strategy, byte_budget=1200, **extra)
    plain = make(LENGTHS, episode_nbytes=SIZES.__getitem__, **kw)
    asked: list[int] = []
    sizes = EpisodeSizes(lambda e: asked.append(e) or SIZES[e])
    lazy = make(LENGTHS, episode_nbytes=sizes, **kw)
    plan = worker_plan(lazy, 0)
    assert asked == []  # building the plan sizes nothing
    pool = plan.group_pool(0, 0)
    first = pool.resident().tolist()
    # the first admissions, and at most the next one in admission order (sized: it waits for room)
    assert set(first) <= set(asked) <= set(first) | set(pool.frontier(1).tolist())
    assert _anchors(lazy) == _anchors(plain)  # same admissions, same draws
    assert len(asked) == len(set(asked)) == len(LENGTHS)  # each once, kept over pools and epochs
    assert _anchors(lazy, 1) == _anchors(plain, 1) and len(asked) == len(LENGTHS)


def test_on_demand_pool_stays_within_the_budget():
    sizes = EpisodeSizes(SIZES.__getitem__)
    pool = worker_plan(make_planner(LENGTHS, episode_pool_size=8, byte_budget=900, episode_nbytes=sizes), 0).group_pool(
        0, 0
    )
    while pool.remaining:
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
    pool = worker_plan(p, 0).group_pool(0, 0)  # episode 0 admitted; 1 is not sized yet
    assert pool.resident().tolist() == [0]
    with pytest.raises(ByteBudgetError, match=r"episode 1 needs 11 bytes.*byte budget of 10") as err:
        pool.next_anchors(5)  # episode 0's last frame evicts it: admission reaches episode 1
    assert err.value.episode_index == 1 and err.value.nbytes == 11
    with pytest.raises(ByteBudgetError, match="negative"):
        worker_plan(make_planner({0: 5}, byte_budget=10, episode_nbytes=EpisodeSizes(lambda e: -1)), 0).group_pool(0, 0)


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
    assert bool(s) and len(s.known) == 0
    assert s(3) == s(3) == 30 and s(np.int64(4)) == 40
    assert calls == [3, 4] and s.known == {3: 30, 4: 40} and len(s.known) == 2


def test_a_provider_error_comes_out_of_the_admitting_call_typed_and_named():
    """The size provider is the planner's one impure edge: its typed error (naming episode, camera,
    file) comes out of the ``next_anchors`` whose admission asked for the size, unchanged; the
    episode stays unsized, so the next admission asks again."""
    calls = []

    def provider(e: int) -> int:
        calls.append(e)
        if e == 1:
            raise Mp4TruncatedError(
                "episode 1, camera 'top', file videos/top/0.mp4: moov box truncated",
                episode_index=1,
                camera="top",
                path="videos/top/0.mp4",
            )
        return 3

    p = make_planner(
        {0: 5, 1: 5},
        episode_pool_size=1,
        byte_budget=10,
        sampling_strategy="sequential",
        episode_nbytes=EpisodeSizes(provider),
    )
    pool = worker_plan(p, 0).group_pool(0, 0)
    assert calls == [0]
    with pytest.raises(Mp4TruncatedError, match=r"^episode 1, camera 'top', file videos/top/0.mp4: moov") as err:
        pool.next_anchors(6)
    assert (err.value.episode_index, err.value.camera, err.value.path) == (1, "top", "videos/top/0.mp4")
    with pytest.raises(Mp4TruncatedError):
        worker_plan(p, 0).group_pool(0, 0).next_anchors(6)  # nothing was kept for episode 1: asked again
    assert calls == [0, 1, 1]


def test_episode_sizes_name_the_episode_of_a_typed_error_that_does_not():
    def provider(e: int) -> int:
        raise SourceReadError("read of videos/a.mp4 failed: connection reset", path="videos/a.mp4")

    with pytest.raises(SourceReadError, match=r"^episode 7: read of videos/a.mp4 failed") as err:
        EpisodeSizes(provider)(7)
    assert err.value.episode_index == 7 and err.value.path == "videos/a.mp4"
    named = Mp4Error("episode 7, camera 'c', file f.mp4: bad", episode_index=7)
    with pytest.raises(Mp4Error, match=r"^episode 7, camera 'c'"):
        EpisodeSizes(lambda e: (_ for _ in ()).throw(named))(7)


def test_a_pool_with_unknown_sizes_and_no_provider_is_refused_at_construction():
    one = np.ones(2, np.int64)
    with pytest.raises(ValueError, match=r"unknown sizes \(-1\) under a byte budget and the pool has no size_of"):
        EpisodePool(one, one, -one, np.arange(2), 1, 10, "remaining", np.ones(4, np.uint64))
    EpisodePool(one, one, -one, np.arange(2), 1, None, "remaining", np.ones(4, np.uint64))  # no budget: sizes unused


@pytest.mark.parametrize("module", ["_poolcore.pyx", "_sizes.py", "_mixseq.py", "_layout.py", "_lpt.pyx"])
def test_the_pool_side_reads_no_file_and_knows_no_dataset(module):
    src = (Path(planner_pkg.__file__).parent / module).read_text()
    imported = set(re.findall(r"^\s*(?:from|import|cimport)\s+(lerobotstream[\w.]*)", src, flags=re.M))
    allowed = {"lerobotstream.errors", "lerobotstream.constants", "lerobotstream.planner._poolcore"}
    assert imported <= allowed | {"lerobotstream.planner._layout", "lerobotstream.planner._lpt"}, imported
    assert not re.search(r"\bopen\(|\bPath\(|\bmmap\b|\bos\.", src)
