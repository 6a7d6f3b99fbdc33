# Cython declarations shared by the mp4 modules that read the derived index's views.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, int32_t, int64_t

# the integer dtypes of the derived index's arrays (mp4/_index_format.py: minimal_int_dtype)
ctypedef fused idx_t:
    uint8_t
    uint16_t
    uint32_t
    int32_t
    int64_t
