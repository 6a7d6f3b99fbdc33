# cython: language_level=3
"""Span planning: a presentation-order frame range of one source MP4 → the decode-order sample
range, byte range and exact synthesized size of its mini-MP4.

Works on any sample-table view with the ``SampleTable`` fields (docs/ARCHITECTURE.md): arrays in
decode order, possibly small integer dtypes and read-only (the derived mmap index). Only the span's
slice (plus a bounded backward/forward search for sync samples) is converted to int64.

Rules (reference.md §6, with the decisions of issue 4):

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

import numpy as np

from lerobotstream.errors import Mp4InconsistentTablesError, Mp4Error

_SEARCH_WINDOW = 256


cdef inline object _i64(a):
    return np.asarray(a, dtype=np.int64)


def _last_sync_at_or_before(is_sync, Py_ssize_t i):
    """Decode-order index of the last sync sample ``<= i``, or -1."""
    cdef Py_ssize_t a
    while i >= 0:
        a = i - _SEARCH_WINDOW + 1
        if a < 0:
            a = 0
        w = np.flatnonzero(np.asarray(is_sync[a:i + 1]))
        if w.size:
            return a + int(w[-1])
        i = a - 1
    return -1


def _next_sync_after(is_sync, Py_ssize_t i, Py_ssize_t n):
    """Decode-order index of the first sync sample ``> i``, or ``n``."""
    cdef Py_ssize_t a = i + 1, b
    while a < n:
        b = a + _SEARCH_WINDOW
        if b > n:
            b = n
        w = np.flatnonzero(np.asarray(is_sync[a:b]))
        if w.size:
            return a + int(w[0])
        a = b
    return n


def sample_durations(table, Py_ssize_t start, Py_ssize_t stop):
    """Per-sample ``stts`` deltas (media ticks, int64, shape ``(stop-start,)``) of samples [start, stop).

    The last sample of the file takes ``table.duration_ticks[-1]`` when the table has per-sample
    durations, else ``media_duration - dts[-1]`` when positive, else the previous delta (or 1).
    """
    n = len(table.dts_ticks)
    dur_arr = getattr(table, "duration_ticks", None)
    if dur_arr is not None:
        return _i64(dur_arr[start:stop]).copy()
    end = min(stop + 1, n)
    dts = _i64(table.dts_ticks[start:end])
    out = np.empty(stop - start, dtype=np.int64)
    out[: len(dts) - 1] = np.diff(dts)
    if stop < n:  # the span ends before the file's last sample: delta to the next one
        return out
    last = 0
    media_duration = getattr(table, "media_duration", None)
    if media_duration is not None:
        last = int(media_duration) - int(table.dts_ticks[n - 1])
    if last <= 0:
        last = int(table.dts_ticks[n - 1]) - int(table.dts_ticks[n - 2]) if n >= 2 else 1
    out[-1] = max(last, 1)
    return out


class Span:
    """One source's decode-order sample range, byte range and mini-MP4 layout.

    Attributes:
        sample_start, sample_stop (int): decode-order samples [start, stop) to fetch.
        frame_start, frame_stop (int): the requested presentation-order frames of the source.
        byte_start, byte_stop (int): file bytes [start, stop) = the mdat payload.
        byte_ranges (tuple[(offset, length)]): merged runs actually referenced by the samples
            (several when other tracks' bytes are interleaved; the payload still spans them all).
        start_pts_ticks (int): source ``pts_ticks`` of local time 0 (the first sync sample).
        start_pts_s (float): the same in source seconds (``table.pts_s[sample_start]``).
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
                 "byte_stop", "byte_ranges", "start_pts_ticks", "start_pts_s", "media_timescale",
                 "local_pts_ticks", "local_sample", "local_key", "local_duration",
                 "first_local_frame", "frame_offset", "contiguous", "edit_media_time",
                 "edit_duration", "cts_shift", "synth_nbytes", "use_co64", "header_nbytes")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    @property
    def num_samples(self):
        return self.sample_stop - self.sample_start

    @property
    def num_local_frames(self):
        return len(self.local_pts_ticks)

    @property
    def payload_nbytes(self):
        return self.byte_stop - self.byte_start

    def local_frame(self, source_frame):
        """Local frame index of source presentation-order frame ``source_frame`` (contiguous spans)."""
        j = source_frame - self.frame_offset
        if not self.contiguous or j < 0 or j >= self.num_local_frames:
            raise IndexError(f"source frame {source_frame} is not in this span "
                             f"(frames {self.frame_offset}..{self.frame_offset + self.num_local_frames - 1})")
        return j

    def local_pts_s(self):
        """Local presentation times (float64 seconds, shape ``(num_local_frames,)``)."""
        return (self.local_pts_ticks - self.start_pts_ticks) / float(self.media_timescale)

    def __getstate__(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, st):
        for k, v in st.items():
            setattr(self, k, v)

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
    po = table.presentation_order
    pts = table.pts_ticks
    is_sync = table.is_sync
    need = _i64(po[frame_start:frame_stop])
    lo_need = int(need.min())
    hi_need = int(need.max())
    min_pts = int(pts[int(po[frame_start])])

    s = _last_sync_at_or_before(is_sync, lo_need)
    while s > 0 and int(pts[s]) > min_pts:
        s = _last_sync_at_or_before(is_sync, s - 1)
    if s < 0:
        s = 0  # no sync sample before: decode from the first sample
    e = hi_need + 1
    nxt = _next_sync_after(is_sync, hi_need, n)
    gop_pts = _i64(pts[s:nxt])
    if gop_pts.size > 1 and bool(np.any(np.diff(gop_pts) < 0)):
        e = nxt  # reordered: end at the end of the last GOP

    offs = _i64(table.offset[s:e])
    sizes = _i64(table.size[s:e])
    ends = offs + sizes
    byte_start = int(offs.min())
    byte_stop = int(ends.max())
    order = np.argsort(offs, kind="stable")
    runs = []
    cur_a = int(offs[order[0]])
    cur_b = int(ends[order[0]])
    for k in order[1:]:
        a = int(offs[k]); b = int(ends[k])
        if a <= cur_b:
            if b > cur_b:
                cur_b = b
        else:
            runs.append((cur_a, cur_b - cur_a))
            cur_a, cur_b = a, b
    runs.append((cur_a, cur_b - cur_a))

    span_pts = _i64(pts[s:e])
    span_sync = np.asarray(is_sync[s:e], dtype=bool)
    dur = sample_durations(table, s, e)
    start_pts = int(span_pts[0])
    kept = np.flatnonzero(span_pts >= start_pts)
    korder = kept[np.argsort(span_pts[kept], kind="stable")]
    local_pts = span_pts[korder]
    if local_pts.size > 1 and bool(np.any(np.diff(local_pts) <= 0)):
        raise Mp4InconsistentTablesError(
            f"{path or '<mp4>'}: samples {s}..{e} share a presentation time", path=path)
    # safe seek points: sync samples whose GOP (to the next sync) presents nothing before them
    key = np.zeros(local_pts.size, dtype=bool)
    sync_local = np.flatnonzero(span_sync)
    bounds = list(sync_local) + [e - s]
    safe = set()
    for gi in range(len(sync_local)):
        a0 = int(bounds[gi]); b0 = int(bounds[gi + 1])
        if gi == 0 or not bool(np.any(span_pts[a0:b0] < span_pts[a0])):
            safe.add(a0)
    for j in range(korder.size):
        key[j] = int(korder[j]) in safe
    first_local = int(np.searchsorted(local_pts, min_pts))
    frame_offset = frame_start - first_local
    contiguous = False
    if frame_offset >= 0 and frame_offset + local_pts.size <= n:
        src = np.asarray(pts)[_i64(po[frame_offset:frame_offset + local_pts.size])].astype(np.int64)
        contiguous = bool(np.array_equal(src, local_pts))

    span_cts = _i64(table.cts_ticks[s:e])
    cts_shift = max(0, -int(span_cts[0]))
    edit_media_time = int(span_cts[0]) + cts_shift  # local dts of sample s is 0
    edit_duration = int(np.max(span_pts[kept] + dur[kept]) - start_pts)
    span = Span(
        sample_start=s, sample_stop=e, frame_start=frame_start, frame_stop=frame_stop,
        byte_start=byte_start, byte_stop=byte_stop, byte_ranges=tuple(runs),
        start_pts_ticks=start_pts, start_pts_s=float(table.pts_s[s]),
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
    po = _i64(table.presentation_order)
    pts_s = np.asarray(table.pts_s, dtype=np.float64)[po]
    lo = from_timestamp - tolerance_s
    hi = from_timestamp + (length - 1) / float(fps) + tolerance_s
    a = int(np.searchsorted(pts_s, lo, side="right"))
    b = int(np.searchsorted(pts_s, hi, side="left"))
    if b <= a:
        raise ValueError(f"no frame in [{lo}, {hi}] s (source has {len(pts_s)} frames)")
    return a, b
