# distutils: sources = csrc/frame_convert.c
"""Decoded uint8 frames → the item's contiguous ``(C, H, W)`` / ``(T, C, H, W)`` tensor, in one pass.

torchcodec returns NCHW *views* of NHWC memory. :func:`frames_to_float_chw` de-interleaves and
converts them in one C pass through a 256-entry table of ``(float)x / 255.0f`` (bitwise what
map-style LeRobot's ``x.type(torch.float32) / 255`` gives, tested for all 256 values), GIL released:
0.35 vs torch's two passes 0.86 ms per 640x480 frame. :func:`frames_to_u8_chw` is the uint8 item's
copy (SSSE3 byte shuffles, 16 pixels a step): 0.06 vs torch's strided ``copy_`` 0.38 ms, same bytes.
"""

from libc.stdint cimport int64_t, uint8_t, uintptr_t

import numpy
import torch

__all__ = ["empty_frames", "frames_to_float_chw", "frames_to_u8_chw"]


cdef extern from "frame_convert.h":
    void lrs_frame_init() nogil
    void lrs_frame_to_chw_f32(const uint8_t *src, int64_t sc, int64_t sh, int64_t sw,
                              int64_t C, int64_t H, int64_t W, float *dst) nogil
    void lrs_u8_hwc3_to_chw(const uint8_t *src, int64_t sh, int64_t H, int64_t W, uint8_t *dst) nogil


lrs_frame_init()

_U8 = torch.uint8
_CPU = torch.device("cpu")


cdef object _common_u8_shape(views):
    """The ``(C, H, W)`` shape every frame of ``views`` has, when all are 3-D uint8 CPU tensors
    (and there is at least one); else None."""
    if len(views) == 0:
        return None
    first = views[0]
    if first.dtype != _U8 or first.device != _CPU or first.dim() != 3:
        return None
    shape = tuple(first.shape)
    for v in views[1:]:
        if v.dtype != _U8 or v.device != _CPU or tuple(v.shape) != shape:
            return None
    return shape


_NP_DTYPES = {torch.uint8: numpy.uint8, torch.float32: numpy.float32}


def empty_frames(shape, dtype):
    """A new contiguous CPU tensor of ``shape`` and ``dtype`` whose memory comes from ``malloc``
    (numpy's allocator), which reuses the block just freed, rather than torch's ``posix_memalign``,
    which rarely does: a fresh frame-sized block costs 225 minor page faults per ``(3, 480, 640)``
    uint8 frame written, ~2.5 µs each (``python -m tools.bench --loader``, "page faults"). The
    tensor is 16-byte aligned (the C passes use unaligned loads) and its storage not resizable."""
    np_dtype = _NP_DTYPES.get(dtype)
    if np_dtype is None:
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(numpy.empty(shape, dtype=np_dtype))


cdef object _target(out, shape, dtype):
    """``out`` when it is a contiguous CPU tensor of ``shape`` and ``dtype`` (e.g. a row of a batch
    tensor); a new tensor (:func:`empty_frames`) when ``out`` is None; None when it does not fit."""
    if out is None:
        return empty_frames(shape, dtype)
    if (out.dtype != dtype or out.device != _CPU or tuple(out.shape) != tuple(shape)
            or not out.is_contiguous()):
        return None
    return out


def frames_to_float_chw(views, bint squeeze=True, out=None):
    """T uint8 ``(C, H, W)`` CPU frames (any strides) → one new contiguous float32 tensor in [0, 1].

    Args:
        views: sequence of T >= 1 torch.uint8 tensors of one shape ``(C, H, W)``, on the CPU.
        squeeze: return ``(C, H, W)`` when T == 1 (else always ``(T, C, H, W)``).
        out: optional contiguous float32 CPU tensor of the result's shape to write into.

    Returns:
        torch.Tensor (``out`` when it fits), float32 ``(T, C, H, W)`` (or ``(C, H, W)``), bitwise
        ``x.to(torch.float32) / 255`` per frame; None when a frame is not a 3-D uint8 CPU tensor of
        the common shape (the caller then uses torch's path).
    """
    cdef Py_ssize_t T = len(views), t
    shape = _common_u8_shape(views)
    if shape is None:
        return None
    cdef int64_t C = shape[0], H = shape[1], W = shape[2]
    out = _target(out, shape if (T == 1 and squeeze) else (T, C, H, W), torch.float32)
    if out is None:
        return None
    cdef uintptr_t dst = out.data_ptr()
    cdef int64_t step = C * H * W * 4
    cdef uintptr_t src
    cdef int64_t sc, sh, sw
    for t in range(T):
        v = views[t]
        sc, sh, sw = v.stride()
        src = v.data_ptr()
        with nogil:
            lrs_frame_to_chw_f32(<const uint8_t *>src, sc, sh, sw, C, H, W, <float *>(dst + t * step))
    return out


def frames_to_u8_chw(views, bint squeeze=True, out=None):
    """T uint8 ``(3, H, W)`` CPU frames of interleaved memory (torchcodec's NCHW views of NHWC
    memory, strides ``(1, sh, 3)``) → one new contiguous uint8 tensor, de-interleaved in one C pass
    per frame with the GIL released (bitwise ``torch.empty(...).copy_(x)``).

    Args: as :func:`frames_to_float_chw` (``out``: uint8).

    Returns:
        torch.Tensor (``out`` when it fits), uint8 ``(T, 3, H, W)`` (or ``(3, H, W)``); None when a
        frame is not such a tensor (other channel counts or strides, CUDA frames: the caller then
        uses torch's copy), or ``out`` does not fit.
    """
    cdef Py_ssize_t T = len(views), t
    shape = _common_u8_shape(views)
    if shape is None:
        return None
    cdef int64_t C = shape[0], H = shape[1], W = shape[2]
    if C != 3:
        return None
    cdef int64_t sc, sh, sw
    for t in range(T):
        v = views[t]
        sc, sh, sw = v.stride()
        if sc != 1 or sw != 3 or sh < 3 * W:
            return None
    out = _target(out, shape if (T == 1 and squeeze) else (T, C, H, W), torch.uint8)
    if out is None:
        return None
    cdef uintptr_t dst = out.data_ptr()
    cdef int64_t step = C * H * W
    cdef uintptr_t src
    for t in range(T):
        v = views[t]
        sh = v.stride()[1]
        src = v.data_ptr()
        with nogil:
            lrs_u8_hwc3_to_chw(<const uint8_t *>src, sh, H, W, <uint8_t *>(dst + t * step))
    return out
