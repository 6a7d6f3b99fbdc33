"""Elastic resume at the planner level: an old run of W ranks x K workers x batch B consumes N
batches per rank; rank 0's state is loaded by every rank of a new run W' x K' x B'; old + new is
every (episode, frame) of the epoch exactly once (deterministic: DataLoader turns simulated)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from itertools import islice

import numpy as np
import pytest

from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._mixseq import integer_weights
from lerobotstream.planner._poolcore import STRATEGIES
from lerobotstream.planner._turns import replay_turns
from tests._planners import make_mixture_for_datasets, make_planner
from tests._streams import resigned
from tests.planner.test_planner import _simulate_loader as _loader  # DataLoader turns, simulated

LENGTHS = {e: int(n) for e, n in enumerate(np.random.default_rng(7).integers(3, 40, size=23))}
FULL = Counter((e, f) for e, n in LENGTHS.items() for f in range(n))
TOPOLOGIES = [
    ((2, 2, 4), (1, 3, 6)),
    ((2, 2, 4), (4, 1, 4)),
    ((2, 2, 4), (3, 2, 5)),
    ((1, 0, 8), (2, 2, 4)),
    ((3, 2, 2), (1, 1, 7)),
    ((1, 1, 4), (5, 3, 1)),
]


def _planner(topo, rank, lengths=LENGTHS, **kw):
    w, k, b = topo
    return make_planner(lengths, rank=rank, world_size=w, num_workers=k, batch_size=b, **kw)


def _old_run(topo, n, lengths=LENGTHS, state=None, **kw):
    """Every rank consumes ``n`` batches (from ``state`` when given); (anchors consumed, rank 0's state)."""
    consumed, out = [], None
    for r in range(topo[0]):
        p = _planner(topo, r, lengths, **kw)
        if state is not None:
            p.load_state_dict(state)
        batches = _loader(p, n)
        consumed += [a for bt in batches for a in bt]
        if r == 0:
            out = p.state_dict(samples_consumed=p.at.samples + sum(len(bt) for bt in batches))
    return consumed, out


def _new_run(topo, state, lengths=LENGTHS, **kw):
    got, planners = [], []
    for r in range(topo[0]):
        p = _planner(topo, r, lengths, **kw)
        p.load_state_dict(state)
        got += [a for bt in _loader(p) for a in bt]
        planners.append(p)
    return got, planners


@pytest.mark.parametrize("strategy", tuple(STRATEGIES))  # every strategy of the table
@pytest.mark.parametrize("old,new", TOPOLOGIES)
def test_finite_elastic_resume_covers_the_epoch_exactly_once(old, new, strategy):
    for n in (1, 3):
        consumed, state = _old_run(old, n, sampling_strategy=strategy, episode_pool_size=3)
        got, planners = _new_run(new, state, sampling_strategy=strategy)
        assert Counter(consumed) + Counter(got) == FULL, (old, new, n)
        assert planners[0].resume_changes  # something changed: it was an elastic resume
        info = planners[0].remainder_info()
        assert info["samples_left"] == len(got) and info["epoch"] == 0
        # then ordinary exact-coverage epochs of the new topology
        nxt = Counter()
        for p in planners:
            p.set_epoch(1)
            nxt.update(a for bt in _loader(p) for a in bt)
        assert nxt == FULL


def test_byte_budget_pool_size_and_drop_last_change():
    nbytes = lambda e: 1000 + 37 * e  # noqa: E731
    consumed, state = _old_run((2, 2, 4), 2, byte_budget=6000, episode_nbytes=nbytes, episode_pool_size=2)
    got, _ = _new_run((3, 1, 3), state, byte_budget=4500, episode_nbytes=nbytes, episode_pool_size=5)
    assert Counter(consumed) + Counter(got) == FULL
    got, _ = _new_run((2, 2, 3), state, drop_last=True)  # each worker's short last batch dropped
    c = Counter(consumed) + Counter(got)
    assert max(c.values()) == 1 and len(FULL) - len(c) < 2 * 2 * 3


def test_remainder_is_frame_balanced_and_keeps_untouched_episodes_whole():
    consumed, state = _old_run((2, 2, 4), 3)
    seen = {e for e, _ in consumed}
    p = _planner((3, 2, 5), 0)
    p.load_state_dict(state)
    rp = p.current_pass()
    rem = rp.remainders[0]
    assert set(rem.frames) <= seen  # only episodes the old run started are partial
    untouched = set(LENGTHS) - seen
    for e in untouched:
        assert e in rem.episode_indices and e not in rem.frames
    per_rank = rp.samples_per_rank()
    assert per_rank.sum() == int(rem.lengths.sum())
    assert per_rank.max() - per_rank.min() <= rem.lengths.max()  # LPT bound over the new ranks
    owners = [set(rp.layouts[0].rank_episodes(r).tolist()) for r in range(3)]
    assert sum(len(o) for o in owners) == len(rem.episode_indices)  # every episode on exactly one rank


def test_equalize_drop_gives_every_new_rank_the_same_batch_count():
    consumed, state = _old_run((2, 2, 4), 2)
    counts, got = [], []
    for r in range(3):
        p = _planner((3, 2, 5), r, equalize="drop")
        p.load_state_dict(state)
        b = _loader(p)
        counts.append(len(b))
        got += [a for bt in b for a in bt]
    assert len(set(counts)) == 1
    c = Counter(consumed) + Counter(got)
    assert max(c.values()) == 1 and set(c) <= set(FULL)


def test_state_saved_inside_a_remainder_resumes_again_elsewhere():
    consumed, state = _old_run((2, 2, 4), 2, sampling_strategy="round_robin")
    mid, state2 = _old_run((3, 2, 5), 2, state=state, sampling_strategy="round_robin")
    assert state2["origin"] is not None
    got, _ = _new_run((1, 3, 6), state2, sampling_strategy="round_robin")
    assert Counter(consumed) + Counter(mid) + Counter(got) == FULL
    # the same topology as the state's continues that remainder's very order
    same, _ = _new_run((3, 2, 5), state2, sampling_strategy="round_robin")
    assert Counter(consumed) + Counter(mid) + Counter(same) == FULL
    p = _planner((3, 2, 5), 0, sampling_strategy="round_robin")
    p.load_state_dict(state)
    ref = [a for bt in _loader(p) for a in bt]
    p = _planner((3, 2, 5), 0, sampling_strategy="round_robin")
    p.load_state_dict(state2)
    assert p.resume_changes == []
    rest = [a for bt in _loader(p) for a in bt]
    assert rest == ref[len(ref) - len(rest) :]


def test_a_finished_epoch_resumes_as_the_next_plain_epoch():
    consumed, state = _old_run((2, 2, 4), 1000)  # every rank ran its epoch to the end
    assert Counter(consumed) == FULL
    p = _planner((3, 1, 5), 0)
    p.load_state_dict(state)
    assert p.at.epoch == 1 and p.remainder_info() is None


@pytest.mark.parametrize("old,new", [((1, 0, 4), (2, 2, 4)), ((2, 2, 4), (3, 1, 5))])
def test_a_count_past_the_finite_epoch_resumes_elastically_in_the_next_epoch(old, new):
    # a loop that never calls set_epoch counts on past the epoch: rank 0's count of epoch 0 past its
    # end is epoch 1 at the count's rest, on another topology as on the same one
    p = _planner(old, 0)
    p.set_epoch(1)
    consumed, state = _old_run(old, 2, state=p.state_dict())  # epoch 1, two batches in
    p = _planner(old, 0)
    p.set_epoch(0, p.current_pass().epoch_samples() + state["samples"])
    past = p.state_dict()
    got, planners = _new_run(new, past)
    assert planners[0].at.epoch == 1 and planners[0].remainder_info()["epoch"] == 1
    assert Counter(consumed) + Counter(got) == FULL
    assert got == _new_run(new, state)[0]


def _endless_prefix(planners, taken):
    """Per new rank and DataLoader worker: its remainder share (the first anchors of its stream)."""
    out = []
    for p in planners:
        rp = p.current_pass()
        for dl in range(max(1, p.settings.num_workers)):
            start = p.worker_start(dl if p.settings.num_workers else None, p.settings.num_workers)
            share = rp.worker_frames(p.settings.rank)[start.logical_worker] - start.offset
            it = p.iter_worker_anchors(dl if p.settings.num_workers else None, p.settings.num_workers)
            out += list(islice(it, share))
            taken.append((p, dl, it))
    return out


@pytest.mark.parametrize("old,new", TOPOLOGIES[:4])
def test_endless_elastic_resume_covers_the_epoch_in_progress(old, new):
    consumed, state = _old_run(old, 2, repeat=True)
    assert max(Counter(consumed).values()) == 1  # no old worker rolled over yet
    planners = []
    for r in range(new[0]):
        p = _planner(new, r, repeat=True)
        p.load_state_dict(state)
        planners.append(p)
    its: list = []
    got = _endless_prefix(planners, its)
    assert Counter(consumed) + Counter(got) == FULL
    # each worker then plays the new topology's epoch 1: together one exact epoch
    nxt = Counter()
    for p, dl, it in its:
        f = p.plain.worker_frames(p.settings.rank)[
            p.worker_start(dl if p.settings.num_workers else None, p.settings.num_workers).logical_worker
        ]
        nxt.update(islice(it, f))
    assert nxt == FULL


def test_endless_state_inside_the_remainder_resumes_again():
    consumed, state = _old_run((2, 2, 4), 2, repeat=True)
    mid, state2 = _old_run((3, 2, 2), 3, state=state, repeat=True)
    assert state2["origin"] is not None
    planners = []
    for r in range(2):
        p = _planner((2, 1, 3), r, repeat=True)
        p.load_state_dict(state2)
        planners.append(p)
    got = _endless_prefix(planners, [])
    assert Counter(consumed) + Counter(mid) + Counter(got) == FULL


def test_refused_cases_list_every_difference():
    _, state = _old_run((2, 2, 4), 1)
    with pytest.raises(ResumeStateError, match="seed") as e:
        _planner((1, 1, 4), 0, seed=5).load_state_dict(state)
    assert "world size, batch size" in str(e.value)
    other = dict(LENGTHS)
    other[3] += 1
    with pytest.raises(ResumeStateError, match="episode selection"):
        _planner((2, 2, 4), 0, other).load_state_dict(state)
    fewer = {e: n for e, n in LENGTHS.items() if e != 5}
    with pytest.raises(ResumeStateError, match="seed.*episode selection"):
        _planner((2, 2, 4), 0, fewer, seed=3).load_state_dict(state)
    mix = resigned(state, mixture={"repo_ids": ["a", "b"]})
    with pytest.raises(ResumeStateError, match="mixture"):
        _planner((2, 2, 4), 0).load_state_dict(mix)


def test_old_schema_1_states_still_load_and_report_what_changed():
    p = _planner((2, 2, 4), 0)
    st = p.state_dict(samples_consumed=8)
    assert st["origin"] is None
    q = _planner((2, 2, 4), 0)
    q.load_state_dict(st)
    assert q.resume_changes == [] and q.at.samples == 8
    q = _planner((2, 1, 4), 0)
    q.load_state_dict(st)
    assert q.resume_changes == ["num_workers: checkpoint 2, now 1"]
    assert q.state_dict(samples_consumed=4)["origin"] is not None


# --- mixtures (finite) ------------------------------------------------------------------------------
MIX = [{e: int(n) for e, n in enumerate(np.random.default_rng(s).integers(3, 30, size=k))} for s, k in ((1, 9), (2, 6))]
OFFSETS = [0, 1000]
MIX_FULL = Counter((OFFSETS[d] + e, f) for d, ls in enumerate(MIX) for e, n in ls.items() for f in range(n))


def _mixture(topo, rank, byte_budget_gb=1.0, weights=(0.7, 0.3), repeat=False):
    from lerobotstream.planner._streams import PlanSettings

    w, k, b = topo
    settings = PlanSettings(
        seed=11,
        num_workers=k,
        byte_budget=max(1, int(byte_budget_gb * 2**30)),
        repeat=repeat,
        batch_size=b,
        rank=rank,
        world_size=w,
    )
    return make_mixture_for_datasets(
        MIX,
        list(weights),
        OFFSETS,
        settings,
        episode_nbytes=[lambda e: 500 + e, lambda e: 700 + 3 * e],
        mixture={"repo_ids": ["a", "b"]},
    )


def _mix_run(topo, n=None, state=None, **kw):
    got, out = [], None
    for r in range(topo[0]):
        p = _mixture(topo, r, **kw)
        if state is not None:
            p.load_state_dict(state)
        batches = _loader(p, n)
        got += [a for bt in batches for a in bt]
        if r == 0:
            out = p.state_dict(samples_consumed=sum(len(bt) for bt in batches))
    return got, out


@pytest.mark.parametrize("old,new", TOPOLOGIES[:4])
def test_mixture_elastic_resume_covers_the_epoch_exactly_once(old, new):
    consumed, state = _mix_run(old, 2)
    got, _ = _mix_run(new, state=state, byte_budget_gb=0.5)
    assert Counter(consumed) + Counter(got) == MIX_FULL
    p = _mixture(new, 0, byte_budget_gb=0.5)
    p.load_state_dict(state)
    info = p.remainder_info()
    assert info["samples_left"] == len(got) and sum(info["samples_left_per_dataset"]) == len(got)


def test_mixture_state_inside_a_remainder_resumes_again():
    consumed, state = _mix_run((2, 2, 4), 2)
    mid, state2 = _mix_run((3, 1, 3), 2, state=state)
    assert state2["origin"] is not None
    got, _ = _mix_run((1, 2, 5), state=state2)
    assert Counter(consumed) + Counter(mid) + Counter(got) == MIX_FULL


def test_mixture_refuses_other_weights():
    _, state = _mix_run((2, 2, 4), 1)
    with pytest.raises(ResumeStateError, match="integer_weights"):
        _mixture((2, 2, 4), 0, weights=[0.5, 0.5]).load_state_dict(state)
    st = _mixture((2, 2, 4), 0, repeat=True).state_dict(samples_consumed=8)
    with pytest.raises(ResumeStateError, match="integer_weights"):
        _mixture((2, 1, 4), 0, weights=[0.5, 0.5], repeat=True).load_state_dict(st)


# --- endless streams (repeat=True): the pass in progress, then plain epochs, per dataset ---------------
def _dataset_of(anchor):
    return 1 if anchor[0] >= OFFSETS[1] else 0


def _frames(p, rank):
    """Frames per (dataset, logical worker) of ``rank`` in one pass of ``p``, int64 (datasets, workers)."""
    return p.dataset_worker_frames(rank)


def _endless_old(make, topo, n):
    """Every rank of an endless run consumes ``n`` batches (the DataLoader's turns: every worker is
    endless, so batch i comes from worker i % K); (anchors per (rank, worker), rank 0's state,
    the consumed anchors of each dataset's pass in progress)."""
    streams, state, plans = {}, None, {}
    for r in range(topo[0]):
        p = make(topo, r)
        k = max(1, topo[1])
        assert all(x is None for x in p.current_pass().turn_limits(r))
        its = [p.iter_worker_anchors(w if topo[1] else None, topo[1]) for w in range(k)]
        for w in range(k):
            streams[r, w] = []
        for i in range(n):
            streams[r, i % k] += islice(its[i % k], topo[2])
        plans[r] = _frames(p.plain, r)
        if r == 0:
            state = p.state_dict(samples_consumed=n * topo[2])
    # per dataset: the earliest pass any worker is in; what each worker consumed of that pass
    passed = Counter()
    for d in range(len(plans[0])):
        subs = {rw: [a for a in s if _dataset_of(a) == d] for rw, s in streams.items()}
        f = {rw: int(plans[rw[0]][d, rw[1]]) for rw in streams}
        k = min(len(subs[rw]) // f[rw] for rw in streams if f[rw])
        for rw, sub in subs.items():
            if f[rw]:
                passed.update(sub[k * f[rw] : (k + 1) * f[rw]])
    return streams, state, passed


def _endless_new(make, topo, state):
    """Every rank of ``topo`` loads ``state``; each logical worker's stream split per dataset at its
    share of the pass in progress and one plain epoch after it: (pass items, next-epoch items,
    planners)."""
    rem, nxt, planners = Counter(), Counter(), []
    for r in range(topo[0]):
        p = make(topo, r)
        p.load_state_dict(state)
        planners.append(p)
        first, then = _frames(p.current_pass(), r), _frames(p.plain, r)
        for w in range(max(1, topo[1])):
            it = p.iter_worker_anchors(w if topo[1] else None, topo[1])
            need = first[:, w] + then[:, w]
            subs: list[list] = [[] for _ in need]
            for a in it:
                subs[_dataset_of(a)].append(a)
                if all(len(s) >= k for s, k in zip(subs, need)):
                    break
            for d, s in enumerate(subs):
                assert len(s) >= need[d]
                rem.update(s[: first[d, w]])
                nxt.update(s[first[d, w] : need[d]])
    return rem, nxt, planners


def _mix_make(repeat=True, **kw):
    return lambda topo, r: _mixture(topo, r, repeat=repeat, **kw)


def _single_make(repeat=True, **kw):
    return lambda topo, r: _planner(topo, r, repeat=repeat, **kw)


@pytest.mark.parametrize("mixture", [False, True])
@pytest.mark.parametrize("old,new", TOPOLOGIES[:4])
@pytest.mark.parametrize("n", [2, 9])
def test_endless_resume_covers_each_datasets_pass_in_progress(old, new, n, mixture):
    """n=9: old workers rolled into later passes, at different times (per dataset in a mixture)."""
    make = _mix_make() if mixture else _single_make()
    full = MIX_FULL if mixture else FULL
    _, state, passed = _endless_old(make, old, n)
    rem, nxt, planners = _endless_new(make, new, state)
    assert passed + rem == full, (old, new, n)
    assert nxt == full
    if mixture:
        info = planners[0].remainder_info()
        assert sum(info["samples_left_per_dataset"]) == info["samples_left"] == sum(rem.values())


def test_endless_mixture_weights_hold_over_the_remainder():
    """The remainder mixes at the weights' rates: each new worker's dataset counts at every block
    boundary are the plain stream's, exactly (floor(w * 64 * b))."""
    _, state, _ = _endless_old(_mix_make(), (2, 2, 4), 2)
    p = _mixture((1, 2, 4), 0, repeat=True)
    p.load_state_dict(state)
    rp = p.current_pass()
    for w in range(2):
        assert rp.worker_weights(w) == p.plain.worker_weights(w) == integer_weights([0.7, 0.3])
        got = [_dataset_of(a) for a in islice(p.iter_worker_anchors(w, 2), 128)]
        assert Counter(got[:64]) == Counter({0: 45, 1: 19}) and Counter(got) == Counter({0: 90, 1: 38})


@pytest.mark.parametrize("mixture", [False, True])
def test_endless_state_saved_in_the_remainder_resumes_again(mixture):
    make = _mix_make() if mixture else _single_make()
    full = MIX_FULL if mixture else FULL
    _, state, passed = _endless_old(make, (2, 2, 4), 2)
    # the middle run: one batch per worker, inside each worker's share of the remainder
    mid, state2 = Counter(), None
    for r in range(3):
        p = make((3, 2, 2), r)
        p.load_state_dict(state)
        first = _frames(p.current_pass(), r).sum(axis=0)
        for w in range(2):
            got = list(islice(p.iter_worker_anchors(w, 2), 2))
            assert len(got) <= first[w]
            mid.update(got)
        if r == 0:
            state2 = p.state_dict(samples_consumed=4)
    assert state2["origin"] is not None
    rem, nxt, _ = _endless_new(make, (2, 1, 3), state2)
    assert passed + mid + rem == full and nxt == full
    for r in range(3):  # the same topology continues that very order
        a, b = make((3, 2, 2), r), make((3, 2, 2), r)
        a.load_state_dict(state)
        b.load_state_dict(state2)
        assert b.resume_changes == []
        for w in range(2):
            assert list(islice(b.iter_worker_anchors(w, 2), 60)) == list(islice(a.iter_worker_anchors(w, 2), 62))[2:]


def test_endless_and_finite_mixtures_resume_into_each_other():
    _, state, passed = _endless_old(_mix_make(), (2, 2, 4), 2)
    got, _ = _mix_run((3, 1, 5), state=state)  # endless -> finite: the remainder is that epoch
    assert passed + Counter(got) == MIX_FULL
    consumed, state = _mix_run((2, 2, 4), 2)  # finite -> endless: the epoch's remainder, then plain epochs
    rem, nxt, _ = _endless_new(_mix_make(), (1, 3, 2), state)
    assert Counter(consumed) + rem == MIX_FULL and nxt == MIX_FULL


def test_repeat_may_change_too():
    consumed, state = _old_run((2, 2, 4), 2, repeat=True)
    got, planners = _new_run((3, 1, 5), state)  # endless -> finite: the remainder is that epoch
    assert Counter(consumed) + Counter(got) == FULL and planners[0].remainder_info()["epoch"] == 0
    consumed, state = _old_run((2, 2, 4), 2)
    planners = []
    for r in range(2):
        p = _planner((2, 3, 2), r, repeat=True)
        p.load_state_dict(state)
        planners.append(p)
    assert Counter(consumed) + Counter(_endless_prefix(planners, [])) == FULL


def test_fewer_episodes_left_than_new_ranks():
    p = _planner((1, 1, 4), 0)
    nb = int(p.current_pass().batches_per_rank()[0])
    consumed, state = _old_run((1, 1, 4), nb - 1)  # one batch (<= 4 frames) left
    got, planners = _new_run((5, 3, 1), state)
    assert Counter(consumed) + Counter(got) == FULL and 0 < len(got) <= 4
    assert 0 in planners[0].current_pass().samples_per_rank()  # some new ranks own nothing this epoch
    got, planners = _new_run((5, 3, 1), state, equalize="drop")  # DDP-safe: every rank stops at 0 batches
    assert got == []


def test_an_endless_remainder_worker_without_plain_epochs_stops_after_its_share():
    """Rank 0 of 3 x 8 workers: worker 7 holds no episode in plain epochs but 3 frames of the
    remainder; the batch turns (state_dict(batches_consumed=...)) know it stops after them."""
    st = _planner((1, 1, 4), 0, repeat=True).state_dict(samples_consumed=4)
    p = _planner((3, 8, 4), 0, repeat=True)
    p.load_state_dict(st)
    limits = p.current_pass().turn_limits()
    assert limits == [None] * 7 + [3]
    batches = _loader(p, 20)
    assert [len(b) for b in batches[:8]] == [4] * 7 + [3] and all(len(b) == 4 for b in batches[8:])
    assert sum(map(len, batches)) == sum(replay_turns(limits, 4, batches=20)[0])


def test_a_shipped_remainder_is_taken_only_for_its_state_and_rank():

    from lerobotstream.planner import _pass

    consumed, state = _old_run((2, 2, 4), 2)
    p = _planner((3, 2, 5), 1)
    p.load_state_dict(state)
    shipped = p.rank_remainders()
    assert shipped[0].rank == 1 and shipped[0].episodes_started == p.remainders()[0].episodes_started
    assert set(shipped[0].frames) <= set(p.current_pass().layouts[0].rank_episodes(p.settings.rank).tolist())
    _pass._CACHE.clear()
    q = _planner((3, 2, 5), 1)
    q.load_state_dict(state)
    q.at = replace(q.at, remainders=shipped)
    assert q.remainders()[0] is shipped[0] and not _pass._CACHE  # taken, nothing computed
    for bad in (replace(shipped[0], key="another state"), replace(shipped[0], rank=2)):
        q = _planner((3, 2, 5), 1)
        q.load_state_dict(state)
        q.at = replace(q.at, remainders=[bad])
        assert q.remainders()[0] is not bad and q.remainders()[0].rank is None  # computed here (the fallback)
    got = []
    for r in range(3):  # each new rank plays from its shipped part
        q = _planner((3, 2, 5), r)
        q.load_state_dict(state)
        q.at = replace(q.at, remainders=_planner_loaded((3, 2, 5), r, state).rank_remainders())
        got += [a for bt in _loader(q) for a in bt]
    assert Counter(consumed) + Counter(got) == FULL


def _planner_loaded(topo, rank, state, **kw):
    p = _planner(topo, rank, **kw)
    p.load_state_dict(state)
    return p


def test_no_idle_worker_warning_for_a_worker_with_plain_epochs_but_no_remainder(caplog):
    """Endless: new worker 1 of rank 0 holds no remainder episode but plain-epoch ones; it yields."""
    lengths = dict(enumerate((7, 5, 9, 4, 6, 8, 3)))
    st = make_planner(lengths, rank=0, world_size=1, batch_size=8, repeat=True, episode_pool_size=2).state_dict(
        samples_consumed=32
    )
    p = make_planner(lengths, rank=0, world_size=2, num_workers=2, batch_size=4, repeat=True, episode_pool_size=2)
    p.load_state_dict(st)
    assert p.current_pass().worker_frames(0)[1] == 0 and p.plain.worker_frames(0)[1] > 0
    with caplog.at_level("WARNING", logger="lerobotstream.planner"):
        assert len(list(islice(p.iter_worker_anchors(1, 2), 5))) == 5
        p.worker_start(0, 2)
    assert "get no episode" not in caplog.text
