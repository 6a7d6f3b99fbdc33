# cython: language_level=3
"""Hot lookups on the derived MP4 index, without Python loops over samples.

Every function takes the read-only views of one source's table in the derived index
(:meth:`lerobotstream.mp4.Mp4Index.table`: any of uint8/uint16/uint32/int32/int64, possibly
zero-stride broadcasts) and never copies them.

- :func:`frames_to_samples`: presentation-order frame → decode-order sample.
- :func:`sample_range_of_frames`: frames ``[f0, f1)`` → decode-order ``[s0, s1)`` holding them.
- :func:`byte_bounds`: decode-order samples ``[s0, s1)`` → file bytes ``[b0, b1)``.
- :func:`pts_of_frames`: presentation-order frames → PTS seconds.
- :func:`nearest_frames`: times (seconds) → nearest presentation-order frame and its PTS.
- :func:`sync_at_or_before`: decode-order sample → the sync sample where decoding starts.

``Mp4Index`` itself (mapping, conversion, per-source tables) lives in ``_index_file`` (import it
from ``lerobotstream.mp4``); it calls these functions, so this module does not import it back.
"""

from libc.stdint cimport uint8_t, uint16_t, uint32_t, int32_t, int64_t

import numpy as np

ctypedef fused idx_t:
    uint8_t
    uint16_t
    uint32_t
    int32_t
    int64_t

ctypedef fused idx2_t:
    uint8_t
    uint16_t
    uint32_t
    int32_t
    int64_t


def frames_to_samples(const idx_t[:] presentation_order, const int64_t[:] frames):
    """Decode-order sample of each presentation-order frame.

    Args:
        presentation_order: (num_samples,) decode-order index of the k-th presented frame.
        frames: (m,) int64 frame indices, 0-based in presentation order.

    Returns:
        (m,) int64 sample indices.

    Raises:
        IndexError: a frame outside ``[0, num_samples)``.
    """
    cdef Py_ssize_t n = presentation_order.shape[0], m = frames.shape[0], i
    cdef int64_t f
    out = np.empty(m, dtype=np.int64)
    cdef int64_t[::1] o = out
    for i in range(m):
        f = frames[i]
        if f < 0 or f >= n:
            raise IndexError(f"frame {f} outside [0, {n})")
        o[i] = <int64_t>presentation_order[f]
    return out


def sample_range_of_frames(const idx_t[:] presentation_order, int64_t frame_start, int64_t frame_stop):
    """Decode-order ``(sample_start, sample_stop)``: the smallest contiguous sample range holding
    every presentation-order frame in ``[frame_start, frame_stop)`` (half-open, non-empty).

    Raises:
        IndexError: an empty or out-of-range frame range.
    """
    cdef Py_ssize_t n = presentation_order.shape[0], k
    cdef int64_t lo, hi, s
    if frame_start < 0 or frame_stop > n or frame_start >= frame_stop:
        raise IndexError(f"frame range [{frame_start}, {frame_stop}) is empty or outside [0, {n})")
    lo = <int64_t>presentation_order[frame_start]
    hi = lo
    for k in range(frame_start + 1, frame_stop):
        s = <int64_t>presentation_order[k]
        if s < lo:
            lo = s
        elif s > hi:
            hi = s
    return lo, hi + 1


def byte_bounds(const idx_t[:] offset, const idx2_t[:] size, int64_t sample_start, int64_t sample_stop):
    """File byte range ``(byte_start, byte_stop)`` covering decode-order samples ``[start, stop)``:
    the lowest sample offset and the highest ``offset + size`` (bytes).

    Raises:
        IndexError: an empty or out-of-range sample range.
    """
    cdef Py_ssize_t n = offset.shape[0], i
    cdef int64_t lo, hi, o, e
    if size.shape[0] != n:
        raise ValueError("offset and size differ in length")
    if sample_start < 0 or sample_stop > n or sample_start >= sample_stop:
        raise IndexError(f"sample range [{sample_start}, {sample_stop}) is empty or outside [0, {n})")
    lo = <int64_t>offset[sample_start]
    hi = lo + <int64_t>size[sample_start]
    for i in range(sample_start + 1, sample_stop):
        o = <int64_t>offset[i]
        e = o + <int64_t>size[i]
        if o < lo:
            lo = o
        if e > hi:
            hi = e
    return lo, hi


def total_size(const idx_t[:] size, int64_t sample_start, int64_t sample_stop):
    """Sum of sample sizes over decode-order ``[start, stop)``, bytes."""
    cdef Py_ssize_t n = size.shape[0], i
    cdef int64_t acc = 0
    if sample_start < 0 or sample_stop > n or sample_start > sample_stop:
        raise IndexError(f"sample range [{sample_start}, {sample_stop}) outside [0, {n})")
    for i in range(sample_start, sample_stop):
        acc += <int64_t>size[i]
    return acc


def pts_of_frames(const double[:] pts_s, const idx_t[:] presentation_order, const int64_t[:] frames):
    """PTS (float64 seconds) of presentation-order frames. Raises IndexError when out of range."""
    cdef Py_ssize_t n = presentation_order.shape[0], m = frames.shape[0], i
    cdef int64_t f
    out = np.empty(m, dtype=np.float64)
    cdef double[::1] o = out
    for i in range(m):
        f = frames[i]
        if f < 0 or f >= n:
            raise IndexError(f"frame {f} outside [0, {n})")
        o[i] = pts_s[<Py_ssize_t>presentation_order[f]]
    return out


cdef inline Py_ssize_t _lower_bound(const double[:] pts_s, const idx_t[:] order, double t) noexcept nogil:
    # first presentation-order k with pts(k) >= t (pts non-decreasing in presentation order)
    cdef Py_ssize_t lo = 0, hi = order.shape[0], mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if pts_s[<Py_ssize_t>order[mid]] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef Py_ssize_t c_lower_bound_pts(const double[:] pts_s, const int64_t[:] order, double t) noexcept nogil:
    """C entry for other Cython modules: first presentation-order frame with pts >= t."""
    return _lower_bound(pts_s, order, t)


def nearest_frames(const double[:] pts_s, const idx_t[:] presentation_order, const double[:] times_s):
    """Nearest presentation-order frame to each time (ties go to the earlier frame).

    Args:
        pts_s: (num_samples,) float64 seconds, decode order.
        presentation_order: (num_samples,) decode-order index of the k-th presented frame.
        times_s: (m,) float64 seconds on the source timeline.

    Returns:
        ``(frames, nearest_pts_s)``: (m,) int64 and (m,) float64.

    Raises:
        IndexError: the track has no samples.
    """
    cdef Py_ssize_t n = presentation_order.shape[0], m = times_s.shape[0], i, k
    cdef double t, before, after
    if n == 0:
        raise IndexError("the track has no frames")
    frames = np.empty(m, dtype=np.int64)
    near = np.empty(m, dtype=np.float64)
    cdef int64_t[::1] fo = frames
    cdef double[::1] po = near
    with nogil:
        for i in range(m):
            t = times_s[i]
            k = _lower_bound(pts_s, presentation_order, t)
            if k >= n:
                k = n - 1
            elif k > 0:
                before = pts_s[<Py_ssize_t>presentation_order[k - 1]]
                after = pts_s[<Py_ssize_t>presentation_order[k]]
                if t - before <= after - t:
                    k -= 1
            fo[i] = k
            po[i] = pts_s[<Py_ssize_t>presentation_order[k]]
    return frames, near


def sync_at_or_before(const idx_t[:] sync_samples, int64_t sample):
    """Last sync sample ``<= sample`` (decode order).

    Raises:
        IndexError: no sync sample at or before ``sample`` (a track must start with one).
    """
    cdef Py_ssize_t lo = 0, hi = sync_samples.shape[0], mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if <int64_t>sync_samples[mid] <= sample:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        raise IndexError(f"no sync sample at or before sample {sample}")
    return <int64_t>sync_samples[lo - 1]


def is_sorted_presentation(const double[:] pts_s, const idx_t[:] presentation_order):
    """True when PTS are non-decreasing along ``presentation_order``."""
    cdef Py_ssize_t n = presentation_order.shape[0], k
    for k in range(1, n):
        if pts_s[<Py_ssize_t>presentation_order[k]] < pts_s[<Py_ssize_t>presentation_order[k - 1]]:
            return False
    return True
