# cython: language_level=3
# distutils: sources = csrc/mp4_synth.c
"""Mini-MP4 synthesis: ``ftyp`` + rebuilt ``moov`` + ``mdat`` holding the fetched bytes verbatim.

The C writer (csrc/mp4_synth.c) both counts and writes, so ``len(synthesize(...))`` always equals
``span.synth_nbytes`` computed by :func:`lerobotstream.mp4.spans.plan_span` before any fetch.
The tkhd and mvhd display matrices are the source's, verbatim (decoders rotate by their product).
Timing: the edit list starts at the span's first sync sample, so local PTS = source ``pts_ticks``
minus ``span.start_pts_ticks`` exactly (decoded frame 0 is the first presented frame).
"""

from libc.stdint cimport int64_t, int32_t, uint8_t, uint32_t

import numpy as np
cimport numpy as cnp

from lerobotstream.errors import Mp4Error
from lerobotstream.mp4._table import IDENTITY_MATRIX, sample_durations

cnp.import_array()

cdef extern from "mp4_synth.h":
    ctypedef struct lrs_synth_in:
        int64_t n
        const int64_t *size
        const int64_t *duration
        const int64_t *cts
        const int64_t *rel_offset
        const uint8_t *is_sync
        int64_t payload_len
        int64_t media_timescale
        int64_t track_id
        int64_t width
        int64_t height
        int64_t edit_media_time
        int64_t edit_duration
        const uint8_t *stsd
        int64_t stsd_len
        uint32_t brand
        int32_t movie_matrix[9]
        int32_t matrix[9]
    int64_t lrs_synth_header(const lrs_synth_in *inp, uint8_t *out, int *use_co64) nogil


cdef int _set_matrix(int32_t *dst, values, str name) except -1:
    vals = tuple(IDENTITY_MATRIX if values is None else values)
    if len(vals) != 9:
        raise Mp4Error(f"{name} must hold 9 values, got {len(vals)}")
    for i in range(9):
        v = int(vals[i])
        if not -2**31 <= v < 2**31:
            raise Mp4Error(f"{name}[{i}] = {v} does not fit a signed 32-bit field")
        dst[i] = <int32_t>v
    return 0


cdef uint32_t _brand(codec):
    c = (str(codec or "mp41") + "    ")[:4].encode("latin-1", "replace")
    return (c[0] << 24) | (c[1] << 16) | (c[2] << 8) | c[3]


cdef int64_t _run(table, span, uint8_t *out, int *co64) except? -9:
    cdef const int64_t[::1] size, dur, cts, rel
    cdef const uint8_t[::1] sync
    cdef lrs_synth_in inp
    cdef const uint8_t[::1] stsd
    cdef int64_t r
    s, e = span.sample_start, span.sample_stop
    size = np.ascontiguousarray(table.size[s:e], dtype=np.int64)
    dur = np.ascontiguousarray(sample_durations(table, s, e))
    cts = np.ascontiguousarray(np.asarray(table.cts_ticks[s:e], dtype=np.int64) + span.cts_shift)
    rel = np.ascontiguousarray(np.asarray(table.offset[s:e], dtype=np.int64) - span.byte_start)
    sync = np.ascontiguousarray(table.is_sync[s:e], dtype=np.uint8)
    stsd_b = bytes(table.stsd)
    if len(stsd_b) < 8:
        raise Mp4Error("stsd payload shorter than 8 bytes")
    stsd = stsd_b
    inp.n = size.shape[0]
    inp.size = &size[0]
    inp.duration = &dur[0]
    inp.cts = &cts[0]
    inp.rel_offset = &rel[0]
    inp.is_sync = &sync[0]
    inp.payload_len = span.byte_stop - span.byte_start
    inp.media_timescale = int(table.media_timescale)
    inp.track_id = int(getattr(table, "track_id", 1) or 1)
    inp.width = int(table.width)
    inp.height = int(table.height)
    inp.edit_media_time = span.edit_media_time
    inp.edit_duration = span.edit_duration
    inp.stsd = &stsd[0]
    inp.stsd_len = stsd.shape[0]
    inp.brand = _brand(getattr(table, "codec", None))
    _set_matrix(inp.matrix, getattr(table, "matrix", None), "matrix")
    _set_matrix(inp.movie_matrix, getattr(table, "movie_matrix", None), "movie_matrix")
    r = lrs_synth_header(&inp, out, co64)
    if r < 0:
        raise Mp4Error(f"cannot synthesize samples [{span.sample_start}, {span.sample_stop}): "
                       + ("a sample lies outside the payload" if r == -2 else
                          "a value does not fit the MP4 fields" if r == -1 else "internal size mismatch"))
    return r


def header_nbytes(table, span):
    """Exact byte length of ftyp + moov + mdat header for ``span``, and whether it uses co64.

    Counted arithmetically (no payload, no serialization). Returns ``(nbytes, use_co64)``.
    """
    cdef int co64 = 0
    cdef int64_t r = _run(table, span, NULL, &co64)
    return int(r), bool(co64)


def _write(table, span, int64_t extra):
    """``(bytearray of ftyp + moov + mdat header then extra zero bytes, header length)``."""
    cdef int co64 = 0
    cdef int64_t h = _run(table, span, NULL, &co64)
    buf = bytearray(h + extra)
    cdef uint8_t[::1] view = buf
    _run(table, span, &view[0], &co64)
    return buf, h


def synthesize_header(table, span):
    """The mini-MP4 without its payload: ftyp + moov + mdat header (bytes)."""
    return bytes(_write(table, span, 0)[0])


def synthesize(table, span, payload):
    """Build the mini-MP4 of ``span``.

    Args:
        table: the source's ``SampleTable`` (or index view).
        span: from :func:`plan_span` on the same table.
        payload: bytes-like of file bytes ``[span.byte_start, span.byte_stop)``.

    Returns:
        bytes: exactly ``span.synth_nbytes`` long.

    Raises:
        Mp4Error: payload of the wrong length, or values that do not fit the boxes.
    """
    pv = memoryview(payload).cast("B")
    plen = span.byte_stop - span.byte_start
    if len(pv) != plen:
        raise Mp4Error(f"payload is {len(pv)} bytes, span needs {plen} "
                       f"(bytes [{span.byte_start}, {span.byte_stop}))")
    buf, h = _write(table, span, plen)
    buf[h:] = pv
    if len(buf) != span.synth_nbytes:
        raise Mp4Error(f"synthesized {len(buf)} bytes, planned {span.synth_nbytes}")
    return bytes(buf)
