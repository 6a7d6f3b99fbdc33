# cython: language_level=3
"""Span planning: a presentation-order frame range of one source MP4 → the decode-order sample
range, byte range and exact synthesized size of its mini-MP4.

Works on any sample-table view with the ``SampleTable`` fields (docs/ARCHITECTURE.md): arrays in
decode order, possibly small integer dtypes and read-only (the derived mmap index). Only the span's
slice (plus a bounded backward/forward search for sync samples) is converted to int64.

Rules:

* start at the last sync sample ``s`` with ``s <= min(needed samples)`` and
  ``pts[s] <= pts(first needed frame)`` — a needed open-GOP leading picture (decoded after its sync
  sample but presented before it) therefore steps back one more GOP;
* stop after the last needed sample; for reordered video (B-frames) stop at the next sync sample
  (end of the last GOP) so the decoded presentation sequence has no holes;
* the mini-MP4 presents from ``pts[s]``: its edit list starts at sample ``s``, so samples of the
  span decoded after ``s`` but presented before it (leading pictures whose references were not
  fetched) are decoded for reference only and never shown; local frame 0 is sample ``s``;
* bytes: ``min(offset) .. max(offset + size)`` over the selected samples;
* ``synth_nbytes`` is counted arithmetically (no payload, no serialization), iterating the
  ``stco``/``co64`` choice to a fixed point.
"""

from libc.stdint cimport uint8_t, int64_t

import numpy as np

from lerobotstream.errors import Mp4InconsistentTablesError, Mp4Error
from lerobotstream.mp4._table import sample_durations
from lerobotstream.mp4.index cimport first_after, idx_t

_IDX_DTYPES = frozenset(np.dtype(d) for d in (np.uint8, np.uint16, np.uint32, np.int32, np.int64))


cdef inline object _i64(a):
    return np.asarray(a, dtype=np.int64)


cdef object _idx_view(a):
    """``a`` as an ndarray in one of the fused index dtypes: the same buffer (no copy) for the
    index's minimal-int views and broadcasts, an int64 copy for anything else."""
    a = np.asarray(a)
    if a.dtype.kind == "b":
        return a.view(np.uint8)
    if a.dtype not in _IDX_DTYPES:
        return a.astype(np.int64)
    return a


def _frame_window(const double[:] pts_s, const idx_t[:] order, double lo, double hi):
    """``(a, b)``: ``a`` = first frame with pts > lo, ``b`` = first frame with pts >= hi
    (``np.searchsorted`` right/left on the presentation-order PTS, without building it)."""
    return first_after(pts_s, order, lo, True), first_after(pts_s, order, hi, False)


def _min_max(const idx_t[:] a, Py_ssize_t start, Py_ssize_t stop):
    """(min, max) of ``a[start:stop]`` as Python ints (non-empty range)."""
    cdef int64_t lo = <int64_t>a[start], hi = lo, v
    cdef Py_ssize_t i
    for i in range(start + 1, stop):
        v = <int64_t>a[i]
        if v < lo:
            lo = v
        elif v > hi:
            hi = v
    return lo, hi


def _safe_keys(const int64_t[::1] span_pts, const uint8_t[::1] span_sync, const int64_t[::1] korder):
    """Safe seek points per local frame: a sync sample whose GOP (up to the next sync sample)
    presents nothing before it; the span's first sync sample is always one."""
    cdef Py_ssize_t m = span_pts.shape[0], j, g, first = 1
    cdef int64_t p0
    cdef bint ok
    safe_np = np.zeros(m, dtype=np.uint8)
    cdef uint8_t[::1] safe = safe_np
    j = 0
    while j < m:
        if not span_sync[j]:
            j += 1
            continue
        p0 = span_pts[j]
        g = j + 1
        ok = 1
        while g < m and not span_sync[g]:
            if span_pts[g] < p0:
                ok = 0
            g += 1
        if first or ok:
            safe[j] = 1
        first = 0
        j = g
    key_np = np.zeros(korder.shape[0], dtype=bool)
    cdef uint8_t[::1] key = key_np.view(np.uint8)
    for j in range(korder.shape[0]):
        key[j] = safe[korder[j]]
    return key_np


cdef Py_ssize_t _sync_before(const uint8_t[:] is_sync, Py_ssize_t i) noexcept nogil:
    while i >= 0 and not is_sync[i]:
        i -= 1
    return i


cdef Py_ssize_t _sync_after(const uint8_t[:] is_sync, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    i += 1
    while i < n and not is_sync[i]:
        i += 1
    return i


class Span:
    """One source's decode-order sample range, byte range and mini-MP4 layout.

    Attributes:
        sample_start, sample_stop (int): decode-order samples [start, stop) to fetch.
        frame_start, frame_stop (int): the requested presentation-order frames of the source.
        byte_start, byte_stop (int): file bytes [start, stop) = the mdat payload (other tracks'
            bytes interleaved in it included).
        start_pts_ticks (int): source ``pts_ticks`` of local time 0 (the first sync sample).
        media_timescale (int): ticks per second of the track.
        local_pts_ticks (np.int64[num_local_frames]): source ``pts_ticks`` of the presented frames
            of the mini-MP4, in presentation order (local frame j).
        local_sample (np.int64[num_local_frames]): decode-order source sample of local frame j.
        local_key (np.bool_[num_local_frames]): safe seek points (sync samples without leading
            pictures) of local frame j.
        local_duration (np.int64[num_local_frames]): duration (ticks) of local frame j.
        first_local_frame (int): local frame index of source frame ``frame_start``.
        frame_offset (int): source frame index of local frame 0 (``frame_start - first_local_frame``).
        contiguous (bool): local frames are source frames ``frame_offset + j`` (no holes).
        edit_media_time, edit_duration, cts_shift (int): edit list of the mini-MP4 (media ticks).
        synth_nbytes (int): exact byte length of ``synthesize(table, span, payload)``.
        use_co64 (bool): chunk offsets are 64-bit.
    """

    __slots__ = ("sample_start", "sample_stop", "frame_start", "frame_stop", "byte_start",
                 "byte_stop", "start_pts_ticks", "media_timescale",
                 "local_pts_ticks", "local_sample", "local_key", "local_duration",
                 "first_local_frame", "frame_offset", "contiguous", "edit_media_time",
                 "edit_duration", "cts_shift", "synth_nbytes", "use_co64", "header_nbytes")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    def __repr__(self):
        return (f"Span(samples=[{self.sample_start},{self.sample_stop}), frames=[{self.frame_start},"
                f"{self.frame_stop}), bytes=[{self.byte_start},{self.byte_stop}), "
                f"first_local_frame={self.first_local_frame}, synth_nbytes={self.synth_nbytes})")


def plan_span(table, frame_start, frame_stop, *, path=""):
    """Plan the mini-MP4 of source presentation-order frames [frame_start, frame_stop).

    Args:
        table: a ``SampleTable`` (or index view) of the source track.
        frame_start, frame_stop (int): presentation-order frame range, ``0 <= start < stop <= n``.
        path: the source file (for error messages).

    Returns:
        Span: see :class:`Span`; ``span.synth_nbytes`` is exact.

    Raises:
        ValueError: an empty or out-of-range frame range.
        Mp4InconsistentTablesError: tables that cannot describe a decodable span (no sync sample).
    """
    from lerobotstream.mp4.synth import header_nbytes

    cdef Py_ssize_t n = len(table.dts_ticks)
    frame_start = int(frame_start)
    frame_stop = int(frame_stop)
    if n == 0:
        raise Mp4Error(f"{path or '<mp4>'}: the video track has no samples", path=path)
    if not (0 <= frame_start < frame_stop <= n):
        raise ValueError(f"{path or '<mp4>'}: frame range [{frame_start}, {frame_stop}) outside "
                         f"[0, {n}) or empty")
    po = _idx_view(table.presentation_order)
    pts = table.pts_ticks
    sync_np = _idx_view(table.is_sync).astype(np.uint8, copy=False)
    cdef const uint8_t[:] sync_v = sync_np
    if po.shape[0] != n or sync_v.shape[0] != n:
        raise Mp4InconsistentTablesError(f"{path or '<mp4>'}: sample table arrays differ in length", path=path)
    lo_need, hi_need = _min_max(po, frame_start, frame_stop)
    min_pts = int(pts[int(po[frame_start])])

    cdef Py_ssize_t s = _sync_before(sync_v, lo_need)
    while s > 0 and int(pts[s]) > min_pts:
        s = _sync_before(sync_v, s - 1)
    if s < 0:
        s = 0  # no sync sample before: decode from the first sample
    cdef Py_ssize_t e = hi_need + 1
    cdef Py_ssize_t nxt = _sync_after(sync_v, hi_need, n)
    gop_pts = _i64(pts[s:nxt])
    if gop_pts.size > 1 and bool((gop_pts[1:] < gop_pts[:-1]).any()):
        e = nxt  # reordered: end at the end of the last GOP

    offs = _i64(table.offset[s:e])
    ends = offs + _i64(table.size[s:e])
    byte_start = int(offs.min())
    byte_stop = int(ends.max())

    span_pts = np.ascontiguousarray(gop_pts[: e - s])  # e <= nxt
    dur = sample_durations(table, s, e)
    start_pts = int(span_pts[0])
    kept = np.flatnonzero(span_pts >= start_pts)
    korder = kept[np.argsort(span_pts[kept], kind="stable")]
    local_pts = span_pts[korder]
    if local_pts.size > 1 and bool((local_pts[1:] <= local_pts[:-1]).any()):
        raise Mp4InconsistentTablesError(
            f"{path or '<mp4>'}: samples {s}..{e} share a presentation time", path=path)
    # safe seek points: sync samples whose GOP (to the next sync) presents nothing before them
    key = _safe_keys(span_pts, np.ascontiguousarray(sync_np[s:e]), korder)
    first_local = int(np.searchsorted(local_pts, min_pts))
    frame_offset = frame_start - first_local
    contiguous = False
    if frame_offset >= 0 and frame_offset + local_pts.size <= n:
        src = _i64(np.asarray(pts)[np.asarray(po[frame_offset:frame_offset + local_pts.size])])
        contiguous = bool(np.array_equal(src, local_pts))

    span_cts = _i64(table.cts_ticks[s:e])
    cts_shift = max(0, -int(span_cts[0]))
    edit_media_time = int(span_cts[0]) + cts_shift  # local dts of sample s is 0
    edit_duration = int(np.max(span_pts[kept] + dur[kept]) - start_pts)
    span = Span(
        sample_start=s, sample_stop=e, frame_start=frame_start, frame_stop=frame_stop,
        byte_start=byte_start, byte_stop=byte_stop, start_pts_ticks=start_pts,
        media_timescale=int(table.media_timescale),
        local_pts_ticks=local_pts, local_sample=korder + s, local_key=key,
        local_duration=dur[korder], first_local_frame=first_local, frame_offset=frame_offset,
        contiguous=contiguous, edit_media_time=edit_media_time, edit_duration=edit_duration,
        cts_shift=cts_shift)
    hdr, co64 = header_nbytes(table, span)
    span.header_nbytes = hdr
    span.use_co64 = co64
    span.synth_nbytes = hdr + (byte_stop - byte_start)
    return span


def episode_frame_range(table, double from_timestamp, Py_ssize_t length, fps, double tolerance_s=1e-4):
    """Presentation-order frames of the source covering an episode's timestamps.

    The episode's frame ``i`` is at source time ``from_timestamp + i / fps`` (float64).

    Returns:
        (frame_start, frame_stop): frames whose ``pts_s`` lie in
        ``(from_timestamp - tolerance_s, from_timestamp + (length - 1) / fps + tolerance_s)``.

    Raises:
        ValueError: no frame of the source lies in that window.
    """
    po = _idx_view(table.presentation_order)
    pts_s = np.asarray(table.pts_s, dtype=np.float64)
    lo = from_timestamp - tolerance_s
    hi = from_timestamp + (length - 1) / float(fps) + tolerance_s
    a, b = _frame_window(pts_s, po, lo, hi)
    if b <= a:
        raise ValueError(f"no frame in [{lo}, {hi}] s (source has {len(po)} frames)")
    return a, b
