# Cython declarations shared by the mp4 modules that read the derived index's views.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, int32_t, int64_t

# the integer dtypes of the derived index's arrays (mp4/_index_format.py: minimal_int_dtype)
ctypedef fused idx_t:
    uint8_t
    uint16_t
    uint32_t
    int32_t
    int64_t


cdef inline Py_ssize_t first_after(const double[:] pts_s, const idx_t[:] order, double x, bint strict) noexcept nogil:
    # first presentation-order k with pts(k) > x (strict) or pts(k) >= x; pts non-decreasing in k
    cdef Py_ssize_t lo = 0, hi = order.shape[0], mid
    cdef double v
    while lo < hi:
        mid = (lo + hi) >> 1
        v = pts_s[<Py_ssize_t>order[mid]]
        if (v <= x) if strict else (v < x):
            lo = mid + 1
        else:
            hi = mid
    return lo
