# cython: language_level=3
"""Hot lookup on the derived MP4 index: times → the nearest presentation-order frame.

Takes the read-only views of one source's table (:meth:`lerobotstream.mp4._index_file.Mp4Index.table`:
any of uint8/uint16/uint32/int32/int64, possibly zero-stride broadcasts) and never copies them.
"""

import numpy as np


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
            k = first_after(pts_s, presentation_order, t, False)
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
