"""Loading a resume state is bounded (issue 35 item 5): an impossible worker count is refused at
once, before any old run is rebuilt or any remainder computed (checked by what is called, not by
timing), and the elastic remainder of a possible but large one replays only the workers that hold
episodes (O(workers + episodes))."""

from __future__ import annotations

from collections import Counter

import pytest

from lerobotstream.constants import MAX_NUM_WORKERS
from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._layout import Layout
from lerobotstream.planner._planner import Planner
from lerobotstream.planner._state import StreamState
from tests._planners import iter_anchors, make_planner, worker_plan

LENGTHS = {e: 4 + e % 5 for e in range(12)}


def _forbid(monkeypatch):
    def nothing(*_a, **_k):
        raise AssertionError("the state was acted on before it was refused")

    monkeypatch.setattr(Planner, "_old_run", nothing)
    monkeypatch.setattr(Planner, "_remainder_pass", nothing)


@pytest.mark.parametrize("num_workers", [10**6, MAX_NUM_WORKERS + 1])
def test_an_impossible_worker_count_is_refused_before_anything_is_replanned(monkeypatch, num_workers):
    state = make_planner(LENGTHS, num_workers=2, batch_size=4).state_dict(samples_consumed=8)
    state["num_workers"] = num_workers
    _forbid(monkeypatch)
    with pytest.raises(ResumeStateError, match=rf"num_workers={num_workers} \(an int in \[0, {MAX_NUM_WORKERS}\]"):
        make_planner(LENGTHS, num_workers=2, batch_size=4).load_state_dict(state)
    with pytest.raises(ResumeStateError, match="num_workers"):
        StreamState.from_dict(state)
    with pytest.raises(ValueError, match=f"at most {MAX_NUM_WORKERS}"):
        make_planner(LENGTHS, num_workers=num_workers)  # no run has it, so no state_dict() writes it


def test_a_large_but_possible_worker_count_replays_only_the_workers_holding_episodes(monkeypatch):
    """1,024 workers over 12 episodes: 1,012 are idle; the remainder replays at most one pool per
    episode-holding old worker, whatever the worker count."""
    old = make_planner(LENGTHS, num_workers=MAX_NUM_WORKERS, batch_size=1)
    consumed = [a for w in range(12) for a in list(iter_anchors(worker_plan(old, w)))[:1]]
    state = old.state_dict(samples_consumed=len(consumed))
    plans = Counter()
    real = Layout.plan

    def counted(self, worker, rank):
        plans[(id(self), rank, worker)] += 1
        return real(self, worker, rank)

    monkeypatch.setattr(Layout, "plan", counted)
    new = make_planner(LENGTHS, num_workers=2, batch_size=3)
    new.load_state_dict(state)
    got = [a for w in range(2) for a in new.iter_worker_anchors(w, 2)]
    assert len(plans) <= len(LENGTHS) + 2 * 2  # old: the 12 workers with an episode; new: 2 x (remainder, plain)
    full = Counter((e, f) for e, n in LENGTHS.items() for f in range(n))
    assert Counter(consumed) + Counter(got) == full
