"""Sampling strategies are one table (``planner._poolcore.STRATEGY_TABLE``): the option's names and
help, the ids in the seeds and what a plan asks of a strategy all come from it, and every entry
gives exact coverage (issue 42 item 2). A new strategy adds its own order test here."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from lerobotstream import constants
from lerobotstream.errors import StreamingConfigError
from lerobotstream.options import check_option, option_info
from lerobotstream.planner._poolcore import STRATEGIES, EpisodePool, strategy_info

LENGTHS = np.array([3, 5, 1, 4, 6, 2, 7], dtype=np.int64)


def _pool(strategy: str, pool_size: int = 3, order=None) -> EpisodePool:
    n = len(LENGTHS)
    order = np.arange(n, dtype=np.int64) if order is None else np.asarray(order, dtype=np.int64)
    words = np.array([1, 2, 3, 4], dtype=np.uint64)
    return EpisodePool(np.arange(10, 10 + n), LENGTHS, np.zeros(n, np.int64), order, pool_size, None, strategy, words)


def test_the_table_gives_the_option_names_help_and_ids():
    assert constants.SAMPLING_STRATEGIES == tuple(STRATEGIES)
    assert constants.DEFAULT_SAMPLING_STRATEGY in STRATEGIES
    assert [s.id for s in STRATEGIES.values()] == list(range(len(STRATEGIES)))  # position = id (in every seed)
    old = {"remaining": 0, "round_robin": 1, "sequential": 2}
    assert {k: STRATEGIES[k].id for k in old} == old  # ids are never renumbered (new entries are appended)
    assert STRATEGIES["sequential"].in_order and not STRATEGIES["remaining"].in_order
    info = {i.name: i for i in option_info()}["sampling_strategy"]
    assert info.want == f"one of {tuple(STRATEGIES)}"
    for name, s in STRATEGIES.items():
        assert f"{name!r} ({s.help})" in info.help
        check_option("sampling_strategy", name)
    with pytest.raises(StreamingConfigError, match="sampling_strategy must be one of"):
        check_option("sampling_strategy", "bogus")


def test_an_unknown_strategy_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown sampling strategy 'bogus'"):
        strategy_info("bogus")
    with pytest.raises(ValueError, match="unknown sampling strategy"):
        _pool("bogus")


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_emits_every_frame_once_and_says_what_is_left(strategy):
    pool = _pool(strategy, order=[3, 0, 6, 1, 5, 2, 4])
    first_ep, first_fr = pool.next_anchors(9)
    untouched, started, left = pool.remaining_state()
    seen = set(zip(first_ep.tolist(), first_fr.tolist()))
    for e, frames in zip(started.tolist(), left):
        assert sorted(frames.tolist()) == frames.tolist()
        assert {(e, f) for f in range(LENGTHS[e - 10])} - seen == {(e, f) for f in frames.tolist()}
    rest_ep, rest_fr = pool.next_anchors(100)
    got = Counter(zip(np.concatenate([first_ep, rest_ep]).tolist(), np.concatenate([first_fr, rest_fr]).tolist()))
    assert got == Counter((10 + e, f) for e, n in enumerate(LENGTHS.tolist()) for f in range(n))
    assert pool.remaining == 0 and set(untouched.tolist()) <= {10 + e for e in range(len(LENGTHS))}
    if STRATEGIES[strategy].in_order:  # each episode's frames ascending
        for e in range(len(LENGTHS)):
            frames = [
                f
                for x, f in zip(np.concatenate([first_ep, rest_ep]), np.concatenate([first_fr, rest_fr]))
                if x == 10 + e
            ]
            assert frames == sorted(frames)


def test_sequential_serves_the_earliest_admitted_resident_in_order():
    ep, fr = _pool("sequential").next_anchors(100)
    assert list(zip(ep.tolist(), fr.tolist())) == [
        (10 + e, f) for e, n in enumerate(LENGTHS.tolist()) for f in range(n)
    ]


def test_round_robin_takes_one_frame_of_each_resident_per_round():
    ep, _ = _pool("round_robin", pool_size=3).next_anchors(3)
    assert sorted(ep.tolist()) == [10, 11, 12]  # the first round: each of the 3 residents once
