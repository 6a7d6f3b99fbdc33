# Cython declarations of the derived-index accessors, for other Cython modules (e.g. spans).
from libc.stdint cimport int64_t

# first presentation-order frame k with pts_s[order[k]] >= t (binary search; order: int64 view)
cdef Py_ssize_t c_lower_bound_pts(const double[:] pts_s, const int64_t[:] order, double t) noexcept nogil
