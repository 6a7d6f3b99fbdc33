"""Canonical partitions (``partitions=P``): each partition's sample sequence is the same on
every topology (world size x DataLoader workers x batch size), and an elastic resume plays exactly
the tail of each partition's sequence (deterministic: DataLoader turns simulated)."""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import islice

import numpy as np
import pytest

from lerobotstream.errors import ResumeStateError, ShardingError, StreamingConfigError
from lerobotstream.planner._poolcore import STRATEGIES
from lerobotstream.planner._state import SCHEMA
from tests._planners import (
    make_partition_planner,
    make_planner,
    partition_episodes,
    stream_partitions,
    worker_plan,
    worker_pool,
)
from tests.planner.test_planner import _simulate_loader as _loader  # DataLoader turns, simulated

LENGTHS = {e: int(n) for e, n in enumerate(np.random.default_rng(11).integers(3, 40, size=29))}
FULL = Counter((e, f) for e, n in LENGTHS.items() for f in range(n))
P = 8
TOPOLOGIES = [(1, 0, 4), (1, 2, 4), (2, 2, 4), (4, 1, 3)]


def _planner(topo, rank, **kw):
    w, k, b = topo
    kw.setdefault("episode_pool_size", 3)
    return make_partition_planner(
        LENGTHS, partitions=kw.pop("partitions", P), rank=rank, world_size=w, num_workers=k, batch_size=b, **kw
    )


PART_OF = {int(e): q for q in range(P) for e in partition_episodes(_planner((1, 0, 1), 0), q)}


def _by_partition(anchors):
    out = defaultdict(list)
    for a in anchors:
        out[PART_OF[a[0]]].append(a)
    return dict(out)


def _run(topo, n=None, state=None, **kw):
    """Every rank consumes ``n`` batches (all when None); (anchors in order, rank 0's state)."""
    got, st = [], None
    for r in range(topo[0]):
        p = _planner(topo, r, **kw)
        if state is not None:
            p.load_state_dict(state)
        batches = _loader(p, n)
        got += [a for bt in batches for a in bt]
        if r == 0:
            st = p.state_dict(samples_consumed=sum(len(bt) for bt in batches))
    return got, st


@pytest.mark.parametrize("strategy", tuple(STRATEGIES))  # every strategy of the table
def test_each_partition_sequence_is_the_same_on_every_topology(strategy):
    ref = None
    for topo in TOPOLOGIES:
        got, _ = _run(topo, sampling_strategy=strategy)
        assert Counter(got) == FULL, topo
        seqs = _by_partition(got)
        if ref is None:
            ref = seqs
        assert seqs == ref, topo
    # another epoch has another order (seeded by the epoch), the same on every topology again
    one = _by_partition(
        a for r in range(2) for bt in _loader(_epoch(_planner((2, 2, 4), r, sampling_strategy=strategy), 1)) for a in bt
    )
    assert one == _by_partition(
        a for bt in _loader(_epoch(_planner((1, 0, 4), 0, sampling_strategy=strategy), 1)) for a in bt
    )
    if strategy != "sequential":
        assert one != ref


def _epoch(p, e):
    p.set_epoch(e)
    return p


def test_partitions_are_frame_balanced_and_do_not_depend_on_the_topology():
    a, b = _planner((1, 0, 1), 0), _planner((4, 2, 7), 3)
    frames = []
    for q in range(P):
        assert partition_episodes(a, q).tolist() == partition_episodes(b, q).tolist()
        frames.append(sum(LENGTHS[int(e)] for e in partition_episodes(a, q)))
    assert max(frames) - min(frames) <= max(LENGTHS.values())
    # stream w * W + r owns the partitions p with p mod (W * K) == w * W + r, in ascending order
    assert stream_partitions(b, 1, rank=3).tolist() == [7]
    c = _planner((2, 2, 4), 1, partitions=8)
    assert stream_partitions(c, 0).tolist() == [1, 5] and stream_partitions(c, 1).tolist() == [3, 7]


def test_partition_events_and_frontier_are_exact():
    """The chained pool admits an episode before its first anchor and evicts it right after its
    last, holds one partition (within its budget) at a time, and its frontier is the exact next
    admissions, across partitions."""
    nb = lambda e: 1000 + 37 * e  # noqa: E731
    p = _planner((1, 1, 4), 0, byte_budget=4000, episode_nbytes=nb, partitions=3)
    part_of = {int(e): q for q in range(3) for e in partition_episodes(p, q)}
    pool = worker_pool(worker_plan(p, 0))
    pool.drain_events()
    admitted = pool.resident().tolist()
    admit_at, evict_at, first, last = {e: 0 for e in admitted}, {}, {}, {}
    fronts, pos = [], 0
    while True:
        fronts.append((len(admitted), pool.frontier(4).tolist()))
        ep, _ = pool.next_anchors(5)
        for i, e in enumerate(ep.tolist()):
            first.setdefault(e, pos + i)
            last[e] = pos + i
        for ev in pool.drain_events():
            if ev.kind == "admit":
                admitted.append(ev.episode_index)
                admit_at[ev.episode_index] = ev.position
            else:
                evict_at[ev.episode_index] = ev.position
        live = pool.resident().tolist()
        assert sum(nb(e) for e in live) <= 4000 and len({part_of[e] for e in live}) <= 1
        pos += len(ep)
        if len(ep) < 5:
            break
    assert pos == sum(LENGTHS.values()) and sorted(admitted) == sorted(LENGTHS)
    for e in LENGTHS:
        assert admit_at[e] <= first[e] and evict_at[e] == last[e] + 1, e
    for n, front in fronts:
        assert front == admitted[n : n + len(front)]


@pytest.mark.parametrize("old,new", [((2, 2, 4), (3, 1, 5)), ((1, 0, 8), (2, 2, 4)), ((4, 1, 3), (1, 3, 6))])
@pytest.mark.parametrize("strategy", ["remaining", "round_robin"])
def test_elastic_resume_plays_the_tail_of_every_partition(old, new, strategy):
    ref = _by_partition(_run((1, 0, 4), sampling_strategy=strategy)[0])
    for n in (1, 3):
        consumed, state = _run(old, n, sampling_strategy=strategy)
        assert state["partitions"] == P and state["schema"] == SCHEMA
        got, _ = _run(new, state=state, sampling_strategy=strategy)
        assert Counter(consumed) + Counter(got) == FULL, (old, new, n)
        c, g = _by_partition(consumed), _by_partition(got)
        for q in range(P):
            assert c.get(q, []) + g.get(q, []) == ref[q], (q, n)
        p = _planner(new, 0, sampling_strategy=strategy)
        p.load_state_dict(state)
        info = p.remainder_info()
        assert p.resume_changes and info["samples_left"] == len(got) and info["consumed"] == len(consumed)
        rp = p.current_pass()
        per_rank = rp.samples_per_rank()  # the tails, LPT over the new ranks (whole partitions)
        assert per_rank.sum() == len(got) and per_rank.max() - per_rank.min() <= rp.layouts[0].part_left.max()
        # then plain epochs of the new topology: every partition's epoch-1 sequence, whole
        nxt = []
        for r in range(new[0]):
            nxt += [a for bt in _loader(_epoch(_planner(new, r, sampling_strategy=strategy), 1)) for a in bt]
        assert Counter(nxt) == FULL


def test_a_state_saved_in_the_remainder_resumes_again_and_keeps_each_order():
    ref = _by_partition(_run((1, 0, 4))[0])
    consumed, state = _run((2, 2, 4), 2)
    mid, state2 = _run((3, 1, 5), 1, state=state)
    assert state2["origin"] is not None and state2["partitions"] == P
    got, _ = _run((1, 2, 3), state=state2)
    assert Counter(consumed) + Counter(mid) + Counter(got) == FULL
    c, m, g = _by_partition(consumed), _by_partition(mid), _by_partition(got)
    for q in range(P):
        assert c.get(q, []) + m.get(q, []) + g.get(q, []) == ref[q]
    same, _ = _run((3, 1, 5), state=state2)  # the state's own topology: the same remainder continues
    assert Counter(same) == Counter(got)
    assert _planner((3, 1, 5), 0).remainder_info() is None


def test_pool_size_and_byte_budget_may_change_the_tails_keep_the_checkpoint_order():
    nb = lambda e: 1000 + 37 * e  # noqa: E731
    ref = _by_partition(_run((1, 0, 4), byte_budget=6000, episode_nbytes=nb)[0])
    consumed, state = _run((2, 2, 4), 2, byte_budget=6000, episode_nbytes=nb)
    got, _ = _run(
        (3, 1, 5),
        state=state,
        byte_budget=9000,
        episode_nbytes=nb,
        episode_pool_size=5,
        sampling_strategy="round_robin",
    )
    c, g = _by_partition(consumed), _by_partition(got)
    for q in range(P):
        assert c.get(q, []) + g.get(q, []) == ref[q]


def _endless_prefix(topo, state, then=None, **kw):
    """Per new rank and DataLoader worker: its remainder share (the first anchors of its stream);
    ``then``: a list that gets each worker's next plain epoch (the anchors after its share)."""
    out = []
    for r in range(topo[0]):
        p = _planner(topo, r, repeat=True, **kw)
        p.load_state_dict(state)
        rp, k = p.current_pass(), p.settings.num_workers
        for dl in range(max(1, k)):
            start = p.worker_start(dl if k else None, k)
            share = rp.worker_frames(p.settings.rank)[start.logical_worker] - start.offset
            it = p.iter_worker_anchors(dl if k else None, k)
            out += list(islice(it, share))
            if then is not None:
                then += list(islice(it, p.plain.worker_frames(p.settings.rank)[start.logical_worker]))
    return out


def test_endless_elastic_resume_plays_the_tail_of_every_partition_then_plain_epochs():
    ref = _by_partition(_run((1, 0, 4))[0])
    ref1 = _by_partition(a for bt in _loader(_epoch(_planner((1, 0, 4), 0), 1)) for a in bt)
    for n in (1, 3):
        consumed, state = _run((2, 2, 4), n, repeat=True)
        nxt: list = []
        got = _endless_prefix((3, 1, 5), state, nxt)
        assert Counter(consumed) + Counter(got) == FULL
        c, g = _by_partition(consumed), _by_partition(got)
        for q in range(P):
            assert c.get(q, []) + g.get(q, []) == ref[q]
        assert _by_partition(nxt) == ref1  # then epoch 1, each partition whole and in its order
    # a state saved inside the endless remainder resumes again elsewhere
    mid, state2 = _run((3, 1, 5), 2, state=state, repeat=True)
    got = _endless_prefix((1, 2, 3), state2)
    assert Counter(consumed) + Counter(mid) + Counter(got) == FULL
    c, m, g = _by_partition(consumed), _by_partition(mid), _by_partition(got)
    for q in range(P):
        assert c.get(q, []) + m.get(q, []) + g.get(q, []) == ref[q]


def test_same_topology_resume_continues_the_same_order():
    _, state = _run((2, 2, 4), 2)
    for r in range(2):
        full = [a for bt in _loader(_planner((2, 2, 4), r)) for a in bt]
        p = _planner((2, 2, 4), r)
        p.load_state_dict(state)
        assert p.resume_changes == []
        rest = [a for bt in _loader(p) for a in bt]
        assert rest == full[len(full) - len(rest) :] and len(full) - len(rest) == 2 * 4


def test_equalize_drop_gives_every_rank_the_same_batch_count():
    for state in (None, _run((2, 2, 4), 2)[1]):
        counts, seen = [], Counter()
        for r in range(3):
            p = _planner((3, 2, 5), r, equalize="drop", partitions=8)
            if state is not None:
                p.load_state_dict(state)
            b = _loader(p)
            counts.append(len(b))
            seen.update(a for bt in b for a in bt)
        assert len(set(counts)) == 1 and max(seen.values()) == 1


def test_refused_cases_name_the_difference():
    _, state = _run((2, 2, 4), 1)
    with pytest.raises(ResumeStateError, match="partitions: checkpoint 8, now None"):
        make_planner(LENGTHS, rank=0, world_size=2, num_workers=2, batch_size=4).load_state_dict(state)
    with pytest.raises(ResumeStateError, match="partitions: checkpoint 8, now 6"):
        _planner((2, 2, 4), 0, partitions=6).load_state_dict(state)
    plain = make_planner(LENGTHS, rank=0, world_size=2, num_workers=2, batch_size=4).state_dict(samples_consumed=8)
    assert plain["partitions"] is None
    with pytest.raises(ResumeStateError, match="partitions: checkpoint None, now 8"):
        _planner((2, 2, 4), 0).load_state_dict(plain)
    with pytest.raises(ResumeStateError, match="seed: .*partitions: checkpoint 8, now 4"):
        _planner((1, 1, 4), 0, partitions=4, seed=3).load_state_dict(state)
    with pytest.raises(StreamingConfigError, match="partitions=8 is fewer than the 9 streams") as e:
        _planner((3, 3, 4), 0)
    assert e.value.option == "partitions"
    with pytest.raises(StreamingConfigError, match="int >= 1"):
        _planner((1, 1, 4), 0, partitions=0)
    with pytest.raises(ShardingError, match="cannot fill partitions=30"):
        _planner((1, 1, 4), 0, partitions=30)
