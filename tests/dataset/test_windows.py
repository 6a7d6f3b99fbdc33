"""delta_timestamps windows and *_is_pad masks match map-style LeRobot (incl. BR-04, BR-05)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lerobotstream.dataset._assemble import DeltaWindows, check_delta_timestamps, window_indices
from lerobotstream.errors import DeltaTimestampsError


def _mapstyle(idx_abs, ep_start, ep_end, delta_idx):
    """Literal transcription of map-style ``_get_query_indices`` (absolute dataset indices)."""
    q = [max(ep_start, min(ep_end - 1, idx_abs + d)) for d in delta_idx]
    pad = [(idx_abs + d < ep_start) | (idx_abs + d >= ep_end) for d in delta_idx]
    return q, pad


def test_validation_rule_and_rounding():
    fps = 10
    check_delta_timestamps({"a": [-0.2, -0.1, 0.0, 0.1]}, fps, 1e-4)
    check_delta_timestamps({"a": [0.10009]}, fps, 1e-4)  # |1.0009-1|/10 = 9e-5 <= 1e-4
    with pytest.raises(DeltaTimestampsError, match="0.1002"):
        check_delta_timestamps({"a": [0.0, 0.1002]}, fps, 1e-4)
    with pytest.raises(DeltaTimestampsError, match="not a feature"):
        check_delta_timestamps({"nope": [0.0]}, fps, 1e-4, features={"a": {}})
    with pytest.raises(ValueError):  # typed error is also a ValueError, like map-style
        check_delta_timestamps({"a": [0.05]}, fps, 1e-4)
    # round() semantics equal Python's for every offset on the grid
    ds = [k / 30 for k in range(-40, 41)]
    assert DeltaWindows({"x": ds}, 30, 1e-4).frames["x"].tolist() == [round(d * 30) for d in ds]


def test_br04_subset_delta_zero_never_pads():
    # two episodes, only episode 1 selected; dataset_from_index of episode 1 is 12
    ep_start, ep_end = 12, 20
    w = DeltaWindows({"observation.image": [0.0]}, 10, 1e-4)
    for f in range(ep_end - ep_start):
        idx, pad = window_indices(f, ep_end - ep_start, w.frames["observation.image"])
        assert not pad.any() and idx.tolist() == [f]


def test_br05_future_deltas_beyond_short_episode_pad_without_error():
    w = DeltaWindows({"observation.state": [0, 1, 2]}, 10, 1e-4)
    assert w.frames["observation.state"].tolist() == [0, 10, 20]
    idx, pad = window_indices(np.arange(5), 5, w.frames["observation.state"])
    assert idx.shape == (5, 3) and (idx[:, 1:] == 4).all() and pad[:, 1:].all() and not pad[:, 0].any()


@settings(max_examples=200, deadline=None)
@given(
    length=st.integers(1, 40),
    start=st.integers(0, 1000),
    deltas=st.lists(st.integers(-50, 50), min_size=1, max_size=8),
)
def test_matches_mapstyle_transcription(length, start, deltas):
    d = np.asarray(deltas, dtype=np.int64)
    idx, pad = window_indices(np.arange(length), length, d)
    for f in range(length):
        q, p = _mapstyle(start + f, start, start + length, deltas)
        assert (idx[f] + start).tolist() == q
        assert pad[f].tolist() == p
    i1, p1 = window_indices(length - 1, length, d)
    assert i1.shape == (len(deltas),) and (i1 == idx[-1]).all() and (p1 == pad[-1]).all()
