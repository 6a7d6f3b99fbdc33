# cython: language_level=3
"""Structural spot-check of fetched sample bytes against the sample table (before synthesis).

Wrong sample offsets or sizes still yield a well-formed mini-MP4; what they cannot fake is the
codec's framing inside each sample, which :func:`check_sample_framing` walks (GIL released):

* H.264 ``avc1``/``avc3`` and HEVC ``hvc1``/``hev1`` (ISO/IEC 14496-15, 5.3.2 / 8.3.2 and
  5.3.3.1 / 8.3.3.1): a sample is a sequence of NAL units, each preceded by a big-endian length of
  ``lengthSizeMinusOne + 1`` bytes (from the sample entry's ``avcC`` / ``hvcC``). Every length is
  >= 1, the NAL units end exactly at the sample end — fewer trailing bytes than a length prefix
  are tolerated, as FFmpeg ignores them — and every NAL header's ``forbidden_zero_bit``
  (ITU-T H.264 7.4.1 / H.265 7.4.2.2) is 0.
* AV1 ``av01`` (AV1 spec 5.3 ``obu_header``/``leb128``, 7.5 ordering of OBUs; AV1-ISOBMFF 2.4
  samples): a sample is one temporal unit, a sequence of OBUs. ``obu_forbidden_bit`` is 0; with
  ``obu_has_size_field`` the ``leb128`` ``obu_size`` follows the header (after the optional
  extension byte) and the OBUs end exactly at the sample end; an OBU without a size field runs to
  the sample end (so it can only be the last one). A temporal unit holds one or more frame
  headers, so each sample contains an ``OBU_FRAME_HEADER`` (3) or ``OBU_FRAME`` (6).
* Any other codec (``mp4v``, encrypted entries...) or a sample entry without ``avcC``/``hvcC``:
  not checked. Empty samples (size 0) are not checked.

Cost: a few header bytes per NAL unit/OBU (~0.06 µs per sample).
"""

from libc.stdint cimport int64_t, uint8_t, uint64_t

import numpy as np

from lerobotstream.errors import Mp4InconsistentTablesError

cdef enum:
    KIND_NONE = 0
    KIND_NAL = 1
    KIND_OBU = 2

cdef enum:
    E_OUTSIDE = 1       # sample bytes outside the payload
    E_NAL_ZERO = 3      # NAL length 0
    E_NAL_PAST = 4      # NAL runs past the sample end
    E_NAL_FORBIDDEN = 5 # forbidden_zero_bit set
    E_OBU_FORBIDDEN = 6 # obu_forbidden_bit set
    E_OBU_EXT = 7       # extension byte missing
    E_OBU_LEB = 8       # leb128 obu_size truncated or over 2^32 - 1
    E_OBU_PAST = 9      # OBU runs past the sample end
    E_OBU_NOFRAME = 10  # no frame header / frame OBU in the sample

_NAL_CODECS = {"avc1": b"avcC", "avc3": b"avcC", "hvc1": b"hvcC", "hev1": b"hvcC"}


ctypedef struct _fail:
    int reason
    int64_t pos      # byte position inside the sample where the framing broke
    uint64_t value   # the offending length / size / header byte


cdef inline uint64_t _be(const uint8_t *p, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int k
    for k in range(n):
        v = (v << 8) | p[k]
    return v


cdef int _walk_nal(const uint8_t *p, int64_t n, int lsize, _fail *f) noexcept nogil:
    cdef int64_t pos = 0
    cdef uint64_t ln
    while pos < n:
        if n - pos < lsize:  # trailing bytes too short for a length prefix: FFmpeg ignores them
            return 0
        ln = _be(p + pos, lsize)
        if ln == 0:
            f.reason = E_NAL_ZERO; f.pos = pos; f.value = 0
            return 1
        if ln > <uint64_t>(n - pos - lsize):
            f.reason = E_NAL_PAST; f.pos = pos; f.value = ln
            return 1
        if p[pos + lsize] & 0x80:
            f.reason = E_NAL_FORBIDDEN; f.pos = pos + lsize; f.value = p[pos + lsize]
            return 1
        pos += lsize + <int64_t>ln
    return 0


cdef int _walk_obu(const uint8_t *p, int64_t n, _fail *f) noexcept nogil:
    cdef int64_t pos = 0, start
    cdef uint8_t h, b
    cdef uint64_t size
    cdef int i, typ, frames = 0
    while pos < n:
        start = pos
        h = p[pos]
        if h & 0x80:
            f.reason = E_OBU_FORBIDDEN; f.pos = pos; f.value = h
            return 1
        typ = (h >> 3) & 0x0F
        if typ == 3 or typ == 6:
            frames += 1
        pos += 1
        if h & 0x04:  # obu_extension_flag
            if pos >= n:
                f.reason = E_OBU_EXT; f.pos = start; f.value = h
                return 1
            pos += 1
        if h & 0x02:  # obu_has_size_field: leb128 obu_size (AV1 spec 4.10.5: at most 8 bytes)
            size = 0
            i = 0
            while True:
                if pos >= n:
                    f.reason = E_OBU_LEB; f.pos = start; f.value = size
                    return 1
                b = p[pos]
                pos += 1
                size |= (<uint64_t>(b & 0x7F)) << (7 * i)
                i += 1
                if not (b & 0x80) or i == 8:
                    break
            if size > 0xFFFFFFFFULL:
                f.reason = E_OBU_LEB; f.pos = start; f.value = size
                return 1
            if size > <uint64_t>(n - pos):
                f.reason = E_OBU_PAST; f.pos = start; f.value = size
                return 1
            pos += <int64_t>size
        else:
            pos = n  # no size field: the OBU runs to the sample end
    if frames == 0:
        f.reason = E_OBU_NOFRAME; f.pos = 0; f.value = 0
        return 1
    return 0


cdef Py_ssize_t _check(const uint8_t *buf, int64_t plen, const int64_t *rel, const int64_t *size, Py_ssize_t n,
                       int kind, int lsize, _fail *f) noexcept nogil:
    """Index of the first sample whose framing is broken (details in ``f``), or -1."""
    cdef Py_ssize_t i
    cdef int64_t o, s
    for i in range(n):
        o = rel[i]
        s = size[i]
        if o < 0 or s < 0 or o > plen or s > plen - o:
            f.reason = E_OUTSIDE; f.pos = 0; f.value = <uint64_t>plen
            return i
        if s == 0:
            continue
        if kind == KIND_NAL:
            if _walk_nal(buf + o, s, lsize, f):
                return i
        elif _walk_obu(buf + o, s, f):
            return i
    return -1


cdef int _nal_length_size(const uint8_t[::1] stsd, bytes want):
    """``lengthSizeMinusOne + 1`` from the ``avcC``/``hvcC`` box of every sample entry (ISO/IEC
    14496-15 5.3.3.1 / 8.3.3.1), 0 when absent, malformed or different between entries."""
    cdef Py_ssize_t n = stsd.shape[0], pos = 8, end, c, cend, hdr, count, k
    cdef uint64_t esz, csz
    cdef int found = 0, ls
    if n < 8:
        return 0
    count = <Py_ssize_t>_be(&stsd[4], 4)
    for k in range(count):
        if pos + 8 > n:
            return 0
        esz = _be(&stsd[pos], 4)
        if esz == 0:
            esz = n - pos
        if esz < 8 or esz > <uint64_t>(n - pos):
            return 0
        end = pos + <Py_ssize_t>esz
        ls = 0
        c = pos + 8 + 78  # VisualSampleEntry fields (ISO/IEC 14496-12 12.1.3) before its boxes
        while c + 8 <= end:
            csz = _be(&stsd[c], 4)
            hdr = 8
            if csz == 1:
                if c + 16 > end:
                    break
                csz = _be(&stsd[c + 8], 8)
                hdr = 16
            elif csz == 0:
                csz = end - c
            if csz < <uint64_t>hdr or csz > <uint64_t>(end - c):
                break
            cend = c + <Py_ssize_t>csz
            if bytes(stsd[c + 4:c + 8]) == want:
                if want == b"avcC" and cend - (c + hdr) >= 5:
                    ls = (stsd[c + hdr + 4] & 3) + 1
                elif want == b"hvcC" and cend - (c + hdr) >= 23:
                    ls = (stsd[c + hdr + 21] & 3) + 1
                break
            c = cend
        if ls == 0 or (found and ls != found):
            return 0
        found = ls
        pos = end
    return found


def sample_framing(table):
    """How :func:`check_sample_framing` walks this table's samples.

    Returns:
        ``("nal", length_size_bytes)`` for H.264/HEVC with an ``avcC``/``hvcC`` (length size 1..4
        bytes, ISO/IEC 14496-15), ``("obu", 0)`` for AV1, ``(None, 0)`` when not checked.
    """
    codec = str(getattr(table, "codec", "") or "")
    if codec == "av01":
        return "obu", 0
    want = _NAL_CODECS.get(codec)
    if want is None:
        return None, 0
    stsd = bytes(getattr(table, "stsd", b"") or b"")
    ls = _nal_length_size(stsd, want) if stsd else 0
    return ("nal", ls) if ls else (None, 0)


_REASONS = {
    E_OUTSIDE: "the sample lies outside the fetched bytes [{a}, {b})",
    E_NAL_ZERO: "NAL unit length 0 at byte {p}",
    E_NAL_PAST: "NAL unit of {v} bytes at byte {p} runs past the sample end",
    E_NAL_FORBIDDEN: "NAL header byte 0x{v:02x} at byte {p} has forbidden_zero_bit set",
    E_OBU_FORBIDDEN: "OBU header byte 0x{v:02x} at byte {p} has obu_forbidden_bit set",
    E_OBU_EXT: "OBU at byte {p} lacks its extension byte",
    E_OBU_LEB: "OBU at byte {p} has a truncated or oversized leb128 obu_size",
    E_OBU_PAST: "OBU at byte {p} of {v} payload bytes runs past the sample end",
    E_OBU_NOFRAME: "no frame header or frame OBU in the sample",
}


def check_sample_framing(table, span, payload, *, path=None):
    """Check that the codec framing (module doc) tiles every sample of ``span`` exactly.

    Args:
        table: the source's sample table (``SampleTable`` or the index view; any integer dtypes).
        span: from :func:`~lerobotstream.mp4.spans.plan_span` on ``table``.
        payload: bytes-like of the file bytes ``[span.byte_start, span.byte_stop)``; sample ``i``
            lies at ``table.offset[i] - span.byte_start`` (bytes) and is ``table.size[i]`` bytes.
        path: file named in the error (default ``table.path``).

    Raises:
        Mp4InconsistentTablesError: a sample lies outside the payload or its bytes do not frame as
            the codec requires; the message names the file, the sample (decode-order index in the
            source file), its offset and size (bytes), and says that the MP4 sidecar/index does not
            match the file or the file is damaged (attributes ``path``, ``sample``, ``offset``,
            ``size``).
    """
    kind_s, lsize = sample_framing(table)
    if kind_s is None:
        return None
    cdef int kind = KIND_NAL if kind_s == "nal" else KIND_OBU
    cdef int ls = lsize
    s, e = int(span.sample_start), int(span.sample_stop)
    if e <= s:
        return None
    size_np = np.ascontiguousarray(np.asarray(table.size[s:e], dtype=np.int64))
    rel_np = np.ascontiguousarray(np.asarray(table.offset[s:e], dtype=np.int64) - int(span.byte_start))
    cdef const int64_t[::1] size = size_np
    cdef const int64_t[::1] rel = rel_np
    cdef const uint8_t[::1] pv = memoryview(payload).cast("B")
    cdef const uint8_t *buf = &pv[0] if pv.shape[0] else NULL
    cdef int64_t plen = pv.shape[0]
    cdef Py_ssize_t n = size.shape[0], bad
    cdef _fail f
    f.reason = 0; f.pos = 0; f.value = 0
    with nogil:  # buf is only read inside samples that lie within the payload (never when plen == 0)
        bad = _check(buf, plen, &rel[0] if n else NULL, &size[0] if n else NULL, n, kind, ls, &f)
    if bad < 0:
        return None
    if path is None:
        path = getattr(table, "path", "") or "<mp4>"
    sample = s + bad
    off = int(table.offset[sample])
    sz = int(table.size[sample])
    why = _REASONS[f.reason].format(v=int(f.value), p=int(f.pos), a=span.byte_start, b=span.byte_stop)
    codec = str(getattr(table, "codec", ""))
    raise Mp4InconsistentTablesError(
        f"{path}: sample {sample} (decode order, offset {off}, size {sz} bytes) does not frame as "
        f"{codec} ({why}): either the MP4 sidecar/index does not match this file (delete the cached "
        f"sidecar, or republish it, so it is rebuilt from the file) or the file itself is damaged "
        f"(if a rebuilt sidecar fails the same way, re-encode or re-download the video)",
        path=path, sample=sample, offset=off, size=sz)
