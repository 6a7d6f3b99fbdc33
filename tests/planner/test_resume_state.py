"""Resume states that cannot be trusted are refused with ResumeStateError (issue 29, fault trial
items 1 and 5): states without an episodes digest, tampered or junk states, wrong-typed fields."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._state import StreamState
from tests._planners import make_mixture, make_planner
from tests._streams import resigned

LENGTHS = {0: 10, 1: 12, 2: 8}
OTHER = {0: 10, 1: 12, 3: 8, 4: 9}


def _planner(lengths=LENGTHS, **kw):
    return make_planner(lengths, seed=3, num_workers=2, batch_size=2, **kw)


def _mixture():
    ps = [make_planner(LENGTHS, seed=1, num_workers=2), make_planner(OTHER, seed=2, num_workers=2)]
    return make_mixture(
        ps, [1, 1], [0, 100], seed=5, repeat=False, batch_size=2, mixture={"repo_ids": ["a", "b"], "weights": [1, 1]}
    )


GOOD = _planner().state_dict(samples_consumed=4)


def test_a_state_without_episodes_digest_is_refused_not_trusted():
    """Bug: a digest-less state from one dataset loaded into another and silently skipped samples."""
    legacy = resigned({k: v for k, v in GOOD.items() if k != "episodes_digest"})
    for lengths in (LENGTHS, OTHER):
        with pytest.raises(ResumeStateError, match=r"missing fields \['episodes_digest'\]"):
            _planner(lengths).load_state_dict(legacy)
    with pytest.raises(ResumeStateError, match="episodes_digest=None"):
        _planner().load_state_dict(resigned(GOOD, episodes_digest=None))
    mixed = _mixture().state_dict(samples_consumed=4)
    with pytest.raises(ResumeStateError, match="episodes_digest=None"):
        _mixture().load_state_dict(resigned(mixed, episodes_digest=None))
    _mixture().load_state_dict(mixed)  # intact states still load
    _planner().load_state_dict(GOOD)


def test_foreign_dicts_say_what_is_wrong():
    with pytest.raises(ResumeStateError, match="not a lerobotstream stream state") as info:
        _planner().load_state_dict({"foo": 1})
    assert "state_dict()" in str(info.value) and "saved weights" in str(info.value)
    for junk in (None, [1, 2], "state", 3, {"epoch": 0, "offset": 8, "batch_size": 4}):
        with pytest.raises(ResumeStateError, match="not a lerobotstream stream state"):
            _planner().load_state_dict(junk)


@pytest.mark.parametrize(
    "key,value",
    [
        ("lerobotstream_planner_schema", 1),
        ("lerobotstream_planner_schema", 3),
        ("schema", "x/0"),
        ("schema", "lerobotstream.stream/0"),
        ("schema", "lerobotstream.stream/2"),
        ("schema", None),
        ("schema", ["lerobotstream.stream/1"]),
    ],
)
def test_a_state_of_another_schema_is_refused_naming_it(key, value):
    """One schema: a state of another — an earlier (unreleased) build's marker or schema, a later
    build's, None, a list — is refused, never converted; the error says plainly what it found and
    what this build reads (not "an earlier build" for every one, nor the key twice) and says to
    start over from the saved weights."""
    from lerobotstream.planner._state import SCHEMA

    old = {k: v for k, v in GOOD.items() if k != "schema"}
    old = resigned({**old, key: value})
    for load in (StreamState.from_dict, _planner().load_state_dict):
        with pytest.raises(ResumeStateError) as info:
            load(old)
        msg = str(info.value)
        assert f"has schema {value!r}" in msg and f"; this build reads {SCHEMA!r}" in msg
        assert "schema schema" not in msg and "schema=" not in msg
        assert ("earlier build" in msg) == (key == "lerobotstream_planner_schema")
        assert "new run from the saved weights" in msg


def test_the_state_names_its_fields_as_the_options():
    """The one schema: every field always present, the settings named as the options."""
    from lerobotstream.options import StreamOptions
    from lerobotstream.planner._state import ELASTIC_SETTINGS, REFUSED_SETTINGS, SCHEMA

    assert GOOD["schema"] == SCHEMA
    assert set(GOOD) == {"schema", "digest", *StreamState.__dataclass_fields__}
    options = set(StreamOptions.__dataclass_fields__) | {"byte_budget"}  # bytes: StreamOptions.byte_budget
    assert set(ELASTIC_SETTINGS) - {"world_size"} <= options and set(REFUSED_SETTINGS) <= options
    assert {"sampling_strategy", "episode_pool_size"} <= set(GOOD) and not {"strategy", "pool_size"} & set(GOOD)


@pytest.mark.parametrize(
    "field,value",
    [
        ("epoch", 3.7),
        ("epoch", 3.0),
        ("epoch", "3"),
        ("samples", math.nan),
        ("samples", None),
        ("batch_size", [2]),
        ("num_workers", True),
        ("episodes_digest", ["3:sha256:ab"]),
        ("episodes_digest", "junk"),
        ("repeat", 1),
        ("epoch", -1),
        ("batch_size", 0),
        ("mixture", "a,b"),
    ],
)
def test_wrong_typed_fields_name_the_field(field, value):
    with pytest.raises(ResumeStateError, match=field):
        StreamState.from_dict({**GOOD, field: value})
    with pytest.raises(ResumeStateError, match=field):
        _planner().load_state_dict({**GOOD, field: value})


_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.dictionaries(st.sampled_from(sorted(GOOD)), _JUNK, min_size=1, max_size=3),
    drop=st.sets(st.sampled_from(sorted(GOOD)), max_size=2),
)
def test_tampered_states_raise_only_resume_state_error(edits, drop):
    """Any tampering either loads (it left a valid state for this planner) or raises ResumeStateError
    — never TypeError/ValueError/AttributeError from inside the planner."""
    state = {k: v for k, v in {**GOOD, **edits}.items() if k not in drop}
    p = _planner()
    try:
        p.load_state_dict(state)
    except ResumeStateError:
        return
    st_ = StreamState.from_dict(state)  # it loaded: it must be a valid state of this planner
    assert st_.episodes_digest == p.specs[0].digest and isinstance(p.at.samples, int) and p.at.samples >= 0
    assert type(p.at.epoch) is int


@settings(max_examples=150, deadline=None)
@given(junk=st.one_of(_JUNK, st.dictionaries(st.text(max_size=6), _JUNK, max_size=4)))
def test_junk_states_raise_resume_state_error(junk):
    with pytest.raises(ResumeStateError):
        _planner().load_state_dict(junk)
    with pytest.raises(ResumeStateError):
        _mixture().load_state_dict(junk)
