"""Resume states are untrusted input (a checkpoint may be edited, spliced or corrupted): a state is
loaded only as ``state_dict()`` wrote it — its digest covers every field, its elastic origins nest
boundedly, a count inside a batch is refused where batch boundaries fix the order — while genuine
states still round-trip (JSON, ``torch.save``, StreamLoader, the lerobotstream-train record) and
resume elastically on another topology."""

from __future__ import annotations

import json
from collections import Counter
from itertools import islice
from pathlib import Path

import pytest

from lerobotstream.constants import MAX_NUM_WORKERS
from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._planner import Planner
from lerobotstream.planner._state import MAX_ORIGIN_DEPTH, StreamState
from lerobotstream.planner._turns import take_turns
from tests._planners import make_planner
from tests._streams import resigned
from tests.planner.test_turns import worker_batches

G1 = Path(__file__).resolve().parents[2] / "data" / "g1_v30"
LENGTHS = {0: 9, 1: 14, 2: 6, 3: 11, 4: 7, 5: 12}
KW = dict(seed=3, num_workers=2, batch_size=4, episode_pool_size=2)


def _batches(p: Planner) -> list[list[tuple[int, int]]]:
    """The batches a DataLoader over ``p`` returns, in order (the take-turns rule)."""
    n = p.settings.num_workers
    its = [p.iter_worker_anchors(None, 0)] if n == 0 else [p.iter_worker_anchors(w, n) for w in range(n)]
    return list(take_turns([worker_batches(it, p.settings.batch_size, p.settings.drop_last) for it in its]))


def _flat(batches):
    return [a for b in batches for a in b]


def test_an_origin_nested_thousands_deep_is_refused_without_recursion():
    """Bug: an ``origin`` nested 3,000 deep gave a bare RecursionError."""
    good = make_planner(LENGTHS, **KW).state_dict(samples_consumed=8)
    state = good
    for _ in range(3000):
        state = {**good, "origin": state}
    with pytest.raises(ResumeStateError, match=f"nest more than {MAX_ORIGIN_DEPTH} deep"):
        make_planner(LENGTHS, **KW).load_state_dict(state)
    deep = {"a": 1}
    for _ in range(3000):
        deep = {"a": deep}
    with pytest.raises(ResumeStateError):  # deep junk in a dict field: typed too (the digest's JSON)
        StreamState.from_dict({**good, "mixture": deep})


@pytest.mark.parametrize(
    "edit",
    [
        dict(samples=12),
        dict(sampling_strategy="round_robin"),
        dict(episode_pool_size=3),
        dict(epoch=1),
        dict(world_size=2),
    ],
)
def test_a_well_typed_edit_is_refused_not_replayed(edit):
    """Bug: an edited ``sampling_strategy``, ``episode_pool_size`` or ``samples`` was accepted, and the resumed
    epoch held 8 duplicates and 8 misses. The digest covers every field, the origin included."""
    p = make_planner(LENGTHS, **KW)
    state = p.state_dict(samples_consumed=8)
    with pytest.raises(ResumeStateError, match="edited after state_dict"):
        make_planner(LENGTHS, **KW).load_state_dict({**state, **edit})
    with pytest.raises(ResumeStateError, match="no 'digest'"):
        make_planner(LENGTHS, **KW).load_state_dict({k: v for k, v in state.items() if k != "digest"})
    # as written it resumes exactly: the rest of the epoch, each sample once (the oracle: a full epoch)
    q = make_planner(LENGTHS, **KW)
    q.load_state_dict(state)
    full = _flat(_batches(make_planner(LENGTHS, **KW)))
    assert _flat(_batches(q)) == full[8:]


def test_an_edited_elastic_origin_is_refused():
    old = make_planner(LENGTHS, **KW)
    mid = make_planner(LENGTHS, **{**KW, "num_workers": 1})
    mid.load_state_dict(old.state_dict(samples_consumed=8))  # elastic: another worker count
    state = mid.state_dict(samples_consumed=4)
    assert state["origin"] is not None
    edited = {**state, "origin": {**state["origin"], "samples": 4}}
    with pytest.raises(ResumeStateError, match="edited after state_dict"):
        make_planner(LENGTHS, **{**KW, "num_workers": 1}).load_state_dict(edited)


def test_a_count_inside_a_batch_is_refused_where_batches_fix_the_order():
    """docs/errors.md: with several DataLoader workers (batches come from them in turn) or with
    drop_last, a count that ends inside a batch was never consumed by a training loop: refused at
    the first batch. One stream (num_workers 0 or 1) resumes at any count: its order does not
    depend on batch boundaries (``ds.state_dict()`` counts items with num_workers=0)."""
    state = make_planner(LENGTHS, **KW).state_dict(samples_consumed=7)  # written so by the caller
    q = make_planner(LENGTHS, **KW)
    q.load_state_dict(state)
    with pytest.raises(ResumeStateError, match="ends inside a batch"):
        _batches(q)
    one = {**KW, "num_workers": 0, "drop_last": True}
    q = make_planner(LENGTHS, **one)
    q.load_state_dict(make_planner(LENGTHS, **one).state_dict(samples_consumed=7))
    with pytest.raises(ResumeStateError, match="ends inside a batch"):
        _batches(q)
    one["drop_last"] = False
    q = make_planner(LENGTHS, **one)
    q.load_state_dict(make_planner(LENGTHS, **one).state_dict(samples_consumed=7))
    assert _flat(_batches(q)) == _flat(_batches(make_planner(LENGTHS, **one)))[7:]


def test_states_round_trip_through_json_and_torch_save(tmp_path):
    import torch

    p = make_planner(LENGTHS, **KW)
    state = p.state_dict(samples_consumed=8)
    torch.save(state, tmp_path / "s.pt")
    for copy in (json.loads(json.dumps(state)), torch.load(tmp_path / "s.pt", weights_only=True)):
        q = make_planner(LENGTHS, **KW)
        q.load_state_dict(copy)
        assert q.resume_changes == [] and q.state_dict(samples_consumed=8) == state


def test_elastic_resume_still_changes_the_topology_and_covers_the_epoch_once():
    """The digest covers the state as written, not what the resuming run may change: another
    worker count and batch size resume elastically, and the epoch's samples are each served once."""
    old = make_planner(LENGTHS, **KW)
    consumed = _flat(_batches(old))[:8]
    new_kw = {**KW, "num_workers": 3, "batch_size": 2}
    q = make_planner(LENGTHS, **new_kw)
    q.load_state_dict(json.loads(json.dumps(old.state_dict(samples_consumed=8))))
    assert q.resume_changes == ["batch_size: checkpoint 4, now 2", "num_workers: checkpoint 2, now 3"]
    rest = _flat(_batches(q))
    assert Counter(consumed + rest) == Counter((e, f) for e, n in LENGTHS.items() for f in range(n))
    again = q.state_dict(samples_consumed=4)  # saved inside the remainder: it carries its origin
    r = make_planner(LENGTHS, **new_kw)
    r.load_state_dict(json.loads(json.dumps(again)))
    assert _flat(_batches(r)) == rest[4:]


def test_the_dataset_and_stream_loader_states_round_trip_and_refuse_edits():
    from lerobotstream import StreamingLeRobotDataset
    from lerobotstream.loader import StreamLoader

    ds = StreamingLeRobotDataset(root=G1, batch_size=4, num_workers=2)
    state = json.loads(json.dumps(ds.state_dict(samples_consumed=8)))
    ds2 = StreamingLeRobotDataset(root=G1, batch_size=4, num_workers=2)
    ds2.load_state_dict(state)
    assert ds2.samples_consumed == 8 and ds2.resume_changes == []
    ds0 = StreamingLeRobotDataset(root=G1, batch_size=4, num_workers=0)
    ds0.load_state_dict(ds0.state_dict(samples_consumed=6))  # 0 and 1 workers: one stream, restated
    assert ds0.samples_consumed == 6
    with pytest.raises(ResumeStateError, match="edited after state_dict"):
        StreamingLeRobotDataset(root=G1, batch_size=4, num_workers=2).load_state_dict({**state, "samples": 12})
    loader = StreamLoader(StreamingLeRobotDataset(root=G1), batch_size=4, num_workers=2, mode="threads")
    saved = json.loads(json.dumps(loader.state_dict()))
    StreamLoader(StreamingLeRobotDataset(root=G1), batch_size=4, num_workers=2, mode="threads").load_state_dict(saved)
    with pytest.raises(ResumeStateError, match="not a lerobotstream stream state"):  # was a bare KeyError
        loader.load_state_dict({k: v for k, v in saved.items() if k != "stream"})
    saved["stream"]["seed"] = 4
    with pytest.raises(ResumeStateError, match="edited after state_dict"):
        StreamLoader(StreamingLeRobotDataset(root=G1), batch_size=4, num_workers=2, mode="threads").load_state_dict(
            saved
        )


def test_the_training_checkpoint_record_round_trips_and_refuses_edits(tmp_path):
    """lerobotstream-train's ``lerobotstream_stream.json``: its settings decide whether a resume is
    elastic, so an edited record (settings made to match the new run) is refused too."""
    from lerobotstream.integrations.lerobot.resume import STATE_FILE, read_checkpoint_state, write_checkpoint_state

    state = make_planner(LENGTHS, **KW).state_dict(samples_consumed=8)
    run = {"repo_id": "o/n", "episodes": None, "drop_n_last_frames": 0, "eval_split": 0.0, "streaming_weights": None}
    path = write_checkpoint_state(tmp_path, 2, run, state)
    doc = read_checkpoint_state(tmp_path)
    assert doc["stream"] == state and doc["run"] == run and doc["step"] == 2  # the stream's state, wrapped whole
    make_planner(LENGTHS, **KW).load_state_dict(doc["stream"])
    edited = resigned(state, world_size=2)  # a stream state re-signed to match the new run: the record's digest
    for edit in ({"stream": edited}, {"run": {**run, "eval_split": 0.1}}, {"step": 3}, {"digest": None}):
        path.write_text(json.dumps({**doc, **edit}))
        with pytest.raises(ResumeStateError, match=f"{STATE_FILE} was edited"):
            read_checkpoint_state(tmp_path)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ResumeStateError):
        read_checkpoint_state(tmp_path)


def test_the_worker_bound_still_holds():
    state = resigned(make_planner(LENGTHS, **KW).state_dict(samples_consumed=8), num_workers=MAX_NUM_WORKERS + 1)
    with pytest.raises(ResumeStateError, match="num_workers"):
        make_planner(LENGTHS, **KW).load_state_dict(state)


def test_many_genuine_elastic_resumes_nest_within_the_bound():
    """Three elastic resumes inside one epoch (1 -> 2 -> 3 -> 1 workers) nest three origins deep."""
    kw = {**KW, "num_workers": 1}
    state = make_planner(LENGTHS, **kw).state_dict(samples_consumed=4)
    for nw in (2, 3, 1):
        q = make_planner(LENGTHS, **{**kw, "num_workers": nw})
        q.load_state_dict(state)
        list(islice(_flat(_batches(q)), 1))
        state = q.state_dict(samples_consumed=4)
    depth, node = 0, state
    while node["origin"] is not None:
        node, depth = node["origin"], depth + 1
    assert depth == 3
    make_planner(LENGTHS, **kw).load_state_dict(state)


@pytest.mark.parametrize(
    "edit", [dict(samples=10**30, repeat=True), dict(epoch=2**64), dict(byte_budget=10**30), dict(world_size=2**40)]
)
def test_implausible_counts_are_refused_even_when_re_signed(edit):
    """The digest has no secret: a state re-signed after an edit is still held to each field's
    plausible maximum (``samples=10**30`` with ``repeat`` was a bare OverflowError in the replay)."""
    state = resigned(make_planner(LENGTHS, **KW).state_dict(samples_consumed=8), **edit)
    with pytest.raises(ResumeStateError, match=f"{next(iter(edit))}=.*must be at most"):
        make_planner(LENGTHS, **KW).load_state_dict(state)
