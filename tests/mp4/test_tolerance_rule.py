"""One timestamp-tolerance rule (``mp4.within_tolerance``: strictly under ``tolerance_s``, LeRobot
0.6.1's decoders keep a frame where ``min_ < tolerance_s``), applied by the decoder, the sidecar
window check and ``validate``, pinned at the boundary: a frame exactly ``tolerance_s`` away.

Before, the decoder refused that frame (``<``) while the sidecar window check (and so
``validate``) accepted it (it rejected only ``>``): a dataset validated clean and then raised
``FrameTimestampError`` in training. The times below are dyadic (timescale 1024, fps 4, tolerance
2**-10 s = one tick), so every float is exact and the boundary is the boundary.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest

from lerobotstream.decode._decoder import EpisodeVideo
from lerobotstream.errors import FrameTimestampError
from lerobotstream.mp4._tolerance import frames_within_tolerance, within_tolerance
from lerobotstream.mp4.spans import plan_span
from lerobotstream.sidecar._validate import EpisodeWindow, check_window_detail, validate_source
from tests._sidecar_helpers import synth_table

FPS, TIMESCALE = 4, 1024
TOL = 2.0**-10  # one media tick
LENGTH = 4


def _table(shift_ticks: dict[int, int] | None = None):
    """Eight frames at 0, 0.25, ... 1.75 s (exactly); ``shift_ticks`` moves single frames later."""
    t = synth_table(8, fps=FPS, timescale=TIMESCALE, gop=4)
    if shift_ticks:
        pts = np.array(t.pts_ticks, dtype=np.int64)
        for k, d in shift_ticks.items():
            pts[k] += d
        t = dataclasses.replace(t, pts_ticks=pts, pts_s=pts / TIMESCALE)
    return t


def _video(table, from_timestamp: float) -> EpisodeVideo:
    return EpisodeVideo(
        table,
        plan_span(table, 0, 8),
        b"",
        episode_index=3,
        camera="cam",
        path="v.mp4",
        from_timestamp=from_timestamp,
        fps=FPS,
        tolerance_s=TOL,
    )


def test_the_rule_is_strict():
    assert within_tolerance(TOL / 2, TOL) and within_tolerance(-TOL / 2, TOL)
    assert not within_tolerance(TOL, TOL) and not within_tolerance(-TOL, TOL)
    assert not within_tolerance(Fraction(1, 1024), Fraction(TOL)) and within_tolerance(Fraction(1, 2048), TOL)
    assert within_tolerance(np.array([0.0, TOL, np.nan, -TOL / 4]), TOL).tolist() == [True, False, False, True]
    frames, near, ok = frames_within_tolerance(np.array([0.0, 0.25]), None, np.array([TOL, 0.25 - TOL / 2]), TOL)
    assert frames.tolist() == [0, 1] and near.tolist() == [0.0, 0.25] and ok.tolist() == [False, True]


@pytest.mark.parametrize("from_timestamp", [TOL, 0.25 + TOL, 0.25 - TOL])
def test_a_window_exactly_tolerance_off_is_refused_everywhere(from_timestamp):
    table = _table()
    # the decoder: no frame strictly within tolerance of from_timestamp + i / fps
    with pytest.raises(FrameTimestampError, match=r"^episode 3, camera 'cam', file 'v\.mp4': no frame within "):
        _video(table, from_timestamp).local_indices(np.array([from_timestamp]))
    # sidecar validation (at build and open) and validate (the same validate_source): refused too
    res = check_window_detail(table, from_timestamp, LENGTH, FPS, TOL)
    assert res.code == "window_off_frame" and res.first_frame is None
    problems = validate_source(table, [EpisodeWindow(3, "cam", "v.mp4", from_timestamp, LENGTH)], FPS, TOL, "v.mp4")
    assert [(p.code, p.episode_index) for p in problems] == [("window_off_frame", 3)]


@pytest.mark.parametrize("from_timestamp", [TOL / 2, 0.25 - TOL / 2, 0.0])
def test_a_window_just_inside_tolerance_is_accepted_everywhere(from_timestamp):
    table = _table()
    video = _video(table, from_timestamp)
    first = int(round(from_timestamp * FPS))
    assert video.local_indices(video.query_times(range(LENGTH))).tolist() == list(range(first, first + LENGTH))
    res = check_window_detail(table, from_timestamp, LENGTH, FPS, TOL)
    assert res.reason is None and res.first_frame == first
    assert validate_source(table, [EpisodeWindow(3, "cam", "v.mp4", from_timestamp, LENGTH)], FPS, TOL, "v.mp4") == []


def test_one_frame_exactly_tolerance_late_is_drift_everywhere():
    """The window starts on a frame, but its third frame plays one tick (= tolerance_s) late."""
    table = _table({2: 1})
    video = _video(table, 0.0)
    with pytest.raises(FrameTimestampError, match=r"nearest frame is at 0\.500977 s"):
        video.local_indices(video.query_times(range(LENGTH)))
    res = check_window_detail(table, 0.0, LENGTH, FPS, TOL)
    assert res.code == "timestamp_drift" and res.max_error_s == TOL
    assert "1 of 4 frames miss their timestamp by tolerance_s=0.0009765625 s or more" in res.reason
    on_time = _table()  # and on time: both agree it is fine
    assert check_window_detail(on_time, 0.0, LENGTH, FPS, TOL).reason is None
    assert _video(on_time, 0.0).local_indices(np.arange(LENGTH) / FPS).tolist() == [0, 1, 2, 3]


def test_validate_row_timestamps_use_the_rule():
    from lerobotstream.validate._tables import timestamp_problem

    good = np.arange(LENGTH) / FPS
    assert timestamp_problem(good + np.array([0, 0, TOL / 2, 0]), FPS, TOL) is None
    p = timestamp_problem(good + np.array([0, 0, TOL, 0]), FPS, TOL)
    assert p.code == "data_timestamps" and p.message.startswith("1 of 4 timestamps are not frame_index / fps within")
