"""Span planning on synthetic sample tables: sync/GOP rules, local frame mapping, byte ranges,
small read-only dtypes (derived index views)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from lerobotstream.mp4.spans import Span, episode_frame_range, plan_span


def make_table(
    pts_order, sync, *, sizes=None, offsets=None, delta=512, timescale=15360, stsd=None, dtype=np.int64, readonly=False
):
    """A SampleTable-like view from presentation ranks per decode-order sample."""
    pts_rank = np.asarray(pts_order, dtype=np.int64)
    n = len(pts_rank)
    dts = np.arange(n, dtype=np.int64) * delta
    delay = int(max(0, np.max(np.arange(n) - pts_rank))) * delta
    pts = pts_rank * delta
    cts = pts + delay - dts
    sizes = np.full(n, 100, np.int64) if sizes is None else np.asarray(sizes, np.int64)
    offsets = (
        (1000 + np.concatenate([[0], np.cumsum(sizes)[:-1]])) if offsets is None else np.asarray(offsets, np.int64)
    )

    def arr(a, dt=dtype):
        a = np.asarray(a).astype(dt)
        if readonly:
            a.setflags(write=False)
        return a

    return SimpleNamespace(
        offset=arr(offsets, np.int64 if offsets.max() > 2**31 else dtype),
        size=arr(sizes),
        dts_ticks=arr(dts),
        cts_ticks=arr(cts, np.int64),
        pts_ticks=arr(pts),
        is_sync=arr(np.asarray(sync, bool), bool),
        pts_s=pts / timescale,
        presentation_order=arr(np.argsort(pts, kind="stable")),
        media_timescale=timescale,
        movie_timescale=1000,
        media_time=delay,
        empty_edit_movie_ticks=0,
        edit_duration_movie_ticks=0,
        codec="avc1",
        stsd=stsd or (b"\0\0\0\0\0\0\0\1" + b"\0" * 8),
        width=64,
        height=48,
        track_id=1,
        ctts_version=0,
        media_duration=n * delta,
    )


def test_all_sync_intra_span_is_exact():
    t = make_table(range(10), [True] * 10)
    s = plan_span(t, 4, 6)
    assert (s.sample_start, s.sample_stop, s.first_local_frame, len(s.local_pts_ticks)) == (4, 6, 0, 2)
    assert s.byte_start == 1400 and s.byte_stop == 1600
    assert s.contiguous and 5 - s.frame_offset == 1  # source frame 5 is local frame 1
    assert isinstance(s, Span) and s.synth_nbytes == s.header_nbytes + 200


def test_av1_like_g2_starts_at_previous_key():
    t = make_table(range(9), [i % 2 == 0 for i in range(9)])
    s = plan_span(t, 5, 6)
    assert (s.sample_start, s.sample_stop, s.first_local_frame) == (4, 6, 1)


CLOSED = [0, 3, 1, 2, 4, 7, 5, 6]  # decode order I0 P3 B1 B2 | I4 P7 B5 B6
CLOSED_SYNC = [True, False, False, False, True, False, False, False]


def test_bframes_end_at_gop_end_so_frames_stay_contiguous():
    t = make_table(CLOSED, CLOSED_SYNC)
    s = plan_span(t, 3, 4)  # P3 = sample 1, but B1/B2 decode after it
    assert (s.sample_start, s.sample_stop) == (0, 4)
    assert s.first_local_frame == 3 and len(s.local_pts_ticks) == 4 and s.contiguous
    s = plan_span(t, 4, 5)
    assert (s.sample_start, s.sample_stop, s.first_local_frame) == (4, 8, 0)
    assert s.local_sample.tolist() == [4, 6, 7, 5]


OPEN = [0, 3, 1, 2, 6, 4, 5, 9, 7, 8]  # I0 P3 B1 B2 | I6 B4 B5 P9 B7 B8 (B4/B5 lead I6)
OPEN_SYNC = [True, False, False, False, True, False, False, False, False, False]


def test_open_gop_leading_picture_steps_back_one_gop():
    t = make_table(OPEN, OPEN_SYNC)
    s = plan_span(t, 4, 5)  # B4 is decoded after I6 but references P3
    assert s.sample_start == 0 and s.first_local_frame == 4 and s.contiguous


def test_open_gop_span_from_cra_hides_its_leading_pictures():
    t = make_table(OPEN, OPEN_SYNC)
    s = plan_span(t, 6, 8)
    assert (s.sample_start, s.sample_stop) == (4, 10)
    # B4/B5 are decoded (references) but before the edit: local frame 0 is I6
    assert s.first_local_frame == 0 and s.local_sample.tolist() == [4, 8, 9, 7]
    assert s.local_key.tolist() == [True, False, False, False]
    assert s.frame_offset == 6 and s.contiguous


def test_open_gop_second_key_not_safe_seek_point():
    t = make_table(OPEN, OPEN_SYNC)
    s = plan_span(t, 0, 10)
    keys = dict(zip(s.local_sample.tolist(), s.local_key.tolist()))
    assert keys[0] is True and keys[4] is False  # I6 has leading pictures: not a seek point


def test_interleaved_bytes_give_the_min_max_payload():
    t = make_table(range(4), [True] * 4, offsets=[5000, 1000, 1100, 9000])
    s = plan_span(t, 0, 4)
    assert s.byte_start == 1000 and s.byte_stop == 9100


@pytest.mark.parametrize("dtype", [np.int32, np.uint16])
def test_small_readonly_dtypes_plan_the_same(dtype):
    ref = plan_span(make_table(OPEN, OPEN_SYNC), 5, 9)
    got = plan_span(make_table(OPEN, OPEN_SYNC, dtype=dtype, readonly=True), 5, 9)
    for k in ("sample_start", "sample_stop", "byte_start", "byte_stop", "first_local_frame", "synth_nbytes"):
        assert getattr(ref, k) == getattr(got, k), k
    assert np.array_equal(ref.local_pts_ticks, got.local_pts_ticks)


@pytest.mark.parametrize("bad", [(-1, 2), (3, 3), (0, 11), (5, 2)])
def test_bad_ranges_raise(bad):
    with pytest.raises(ValueError):
        plan_span(make_table(range(10), [True] * 10), *bad)


def test_episode_frame_range_uses_exact_times():
    t = make_table(range(100), [True] * 100, delta=512, timescale=15360)  # 30 fps
    assert episode_frame_range(t, 10 / 30, 5, 30) == (10, 15)
    with pytest.raises(ValueError):
        episode_frame_range(t, 200.0, 5, 30)


def test_span_pickles():
    import pickle

    s = plan_span(make_table(CLOSED, CLOSED_SYNC), 1, 6)
    s2 = pickle.loads(pickle.dumps(s))
    assert s2.synth_nbytes == s.synth_nbytes and np.array_equal(s2.local_sample, s.local_sample)
