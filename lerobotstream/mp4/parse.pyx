# distutils: sources = csrc/mp4_parse.c
"""Parse an MP4's video sample table from header bytes only (moov), never the media payload."""

import logging

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t

from lerobotstream.errors import Mp4Error, Mp4InconsistentTablesError, Mp4TruncatedError, Mp4UnsupportedError
from lerobotstream.mp4._c cimport (
    LRS_E_BADBOX as E_BADBOX,
    LRS_E_INCONSISTENT,
    LRS_E_OVERFLOW as E_OVERFLOW,
    LRS_E_TRUNCATED as E_TRUNCATED,
    LRS_E_UNSUPPORTED as E_UNSUPPORTED,
    LRS_MAX_SAMPLES_PER_TRACK,
    lrs_err,
    lrs_mp4_fill,
    lrs_mp4_info,
    lrs_mp4_scan_moov,
)
from lerobotstream.mp4._table import SampleTable

cnp.import_array()

log = logging.getLogger(__name__)

PROBE_BYTES = 64 * 1024          # first read of the file's start; also the block read for small boxes' headers
TAIL_MAX_BYTES = 64 * 1024 * 1024  # read everything after mdat in one go when at most this much
#: Largest moov box read (bytes; its size field is untrusted and it is held in memory). At ~4-28
#: bytes of tables per sample, a track of MAX_SAMPLES_PER_TRACK samples fits in ~120 MB.
MOOV_MAX_BYTES = 128 * 1024 * 1024
#: Most top-level boxes walked before moov and the first mdat are found (a real MP4 has a handful):
#: bounds the reads a file of tiny boxes can cause.
MAX_TOP_LEVEL_BOXES = 256
#: Most samples one video track may declare (csrc/mp4_parse.h says why); checked, with "every
#: sample is at least 1 byte of the file outside moov", before the sample arrays are allocated.
MAX_SAMPLES_PER_TRACK = LRS_MAX_SAMPLES_PER_TRACK


#: the typed error of each C status code (csrc/lrs_status.h); any other code raises Mp4Error
_ERRORS = {
    E_TRUNCATED: Mp4TruncatedError,
    E_UNSUPPORTED: Mp4UnsupportedError,
    LRS_E_INCONSISTENT: Mp4InconsistentTablesError,
}


cdef _raise(int code, str path, str box, long long offset, str reason):
    """Raise the ``Mp4Error`` subclass of status ``code`` with fields ``path``, ``box`` (fourcc or
    ""), ``offset`` (bytes, -1 if unknown) and ``code``, the message naming them and the reason."""
    where = f" box '{box}'" if box else ""
    at = f" at offset {offset}" if offset >= 0 else ""
    msg = f"MP4 {path or '<bytes>'}:{where}{at}: {reason}"
    raise _ERRORS.get(code, Mp4Error)(msg, path=path, box=box, offset=offset, code=code)


cdef class _Reader:
    """Window over the file: serves header bytes from the last read, else reads (and counts)."""
    cdef object read
    cdef public long long file_size
    cdef bytes buf
    cdef long long buf_off
    cdef str path

    def __init__(self, read, long long file_size, str path):
        self.read = read
        self.file_size = file_size
        self.path = path
        self.buf = b""

    cdef bytes fetch(self, long long off, long long n):
        """Exactly n bytes at off (n > 0, off + n <= file_size), one read call."""
        data = bytes(self.read(off, n))
        if len(data) != n:
            _raise(E_TRUNCATED, self.path, "", off,
                   f"read({off}, {n}) returned {len(data)} bytes (file size {self.file_size})")
        return data

    cdef load(self, long long off, long long n):
        """Make bytes [off, off + n) the window (one read)."""
        self.buf = self.fetch(off, n)
        self.buf_off = off

    cdef bint holds(self, long long off, long long n):
        return off >= self.buf_off and off + n <= self.buf_off + len(self.buf)

    cdef bytes get(self, long long off, long long n):
        """n bytes at off, from the window when it holds them, else one read."""
        if self.holds(off, n):
            return self.buf[off - self.buf_off:off - self.buf_off + n]
        return self.fetch(off, n)


def _fourcc(b: bytes) -> str:
    return "".join(chr(c) if 32 <= c < 127 else "?" for c in b)


def parse_mp4(read, file_size, *, path="", track_id=None):
    """Parse the video sample table of an MP4 reading header bytes only.

    Reads a probe of the file's start; when ``moov`` is there it is used; when ``mdat`` comes
    first its payload is skipped by its header size and the trailing boxes are read in **one**
    range read. The media payload is never read (beyond what the first probe happens to cover).

    Args:
        read: callable ``read(offset, n) -> bytes`` returning exactly ``n`` bytes at ``offset``.
        file_size: size of the file in bytes.
        path: the file's path, named in every error message.
        track_id: tkhd track_id of the video track to use; ``None`` picks the first video track
            (a log line names the choice when there are several).

    Returns:
        SampleTable: arrays in decode order (see ``lerobotstream.mp4.SampleTable``).

    Raises:
        Mp4TruncatedError: a box runs past its parent or the file; a short read.
        Mp4InconsistentTablesError: stts/stsz/stsc/stco/ctts/stss disagree, sample bytes lie
            outside the file, or more samples are declared than the file has bytes outside moov.
        Mp4UnsupportedError: fragmented MP4 (moof/mvex), several/non-unit-rate/repeated media
            edits, no video track (or none with ``track_id``); past a plausible limit: a moov over
            :data:`MOOV_MAX_BYTES`, more than :data:`MAX_TOP_LEVEL_BOXES` top-level boxes, a
            track declaring more than :data:`MAX_SAMPLES_PER_TRACK` samples (all refused before
            they are read or allocated).
        Mp4Error: any other malformed box (bad size, zero timescale, absurd values).
    """
    cdef long long fsize = int(file_size)
    cdef long long pos = 0, size, hdr, nboxes = 0
    cdef long long moov_off = -1, moov_size = 0, mdat_off = -1, mdat_size = 0, prev_size = PROBE_BYTES
    path = str(path)
    if fsize < 8:
        _raise(E_TRUNCATED, path, "", 0, f"file of {fsize} bytes is too small for an MP4")
    r = _Reader(read, fsize, path)
    r.load(0, min(PROBE_BYTES, fsize))
    moov = None
    ftyp = b""
    seen_mdat = False
    while pos < fsize:
        nboxes += 1
        if nboxes > MAX_TOP_LEVEL_BOXES:
            _raise(E_UNSUPPORTED, path, "", pos,
                   f"more than {MAX_TOP_LEVEL_BOXES} top-level boxes before moov and mdat (an MP4 has a handful)")
        if fsize - pos < 8:
            if moov is not None:
                break
            _raise(E_TRUNCATED, path, "", pos, f"partial box header in the last {fsize - pos} bytes")
        if seen_mdat and moov is None and not r.holds(pos, 16) and fsize - pos <= TAIL_MAX_BYTES:
            r.load(pos, fsize - pos)  # after mdat: the whole tail (normally just moov) in one read
        if prev_size < PROBE_BYTES and not r.holds(pos, 16):
            # after a small box the next are likely small too: one block read for their headers
            r.load(pos, min(PROBE_BYTES, fsize - pos))
        head = r.get(pos, min(16, fsize - pos))
        size = int.from_bytes(head[0:4], "big")
        btype = head[4:8]
        hdr = 8
        if size == 1:
            if len(head) < 16:
                _raise(E_TRUNCATED, path, _fourcc(btype), pos, "64-bit box size runs past the end of the file")
            if int.from_bytes(head[8:16], "big") >= (1 << 62):
                _raise(E_OVERFLOW, path, _fourcc(btype), pos, "absurd 64-bit box size")
            size = int.from_bytes(head[8:16], "big")
            hdr = 16
        elif size == 0:
            size = fsize - pos
        if size < hdr:
            _raise(E_BADBOX, path, _fourcc(btype), pos, f"box size {size} is smaller than its header")
        if btype == b"moof":
            _raise(E_UNSUPPORTED, path, "moof", pos, "fragmented MP4 (moof) is not supported")
        if btype == b"mdat":
            if mdat_off < 0:
                mdat_off = pos
                mdat_size = min(size, fsize - pos)  # a truncated file: mdat claims more than exists
            seen_mdat = True
            if moov is not None:
                break
        elif btype == b"moov":
            if moov is not None:
                _raise(E_BADBOX, path, "moov", pos, "second moov box")
            if pos + size > fsize:
                _raise(E_TRUNCATED, path, "moov", pos,
                       f"moov of {size} bytes runs past the end of the file ({fsize - pos} bytes left)")
            if size > MOOV_MAX_BYTES:
                _raise(E_UNSUPPORTED, path, "moov", pos,
                       f"moov of {size} bytes is larger than the {MOOV_MAX_BYTES} bytes accepted")
            moov = r.get(pos, size)
            moov_off, moov_size = pos, size
            if seen_mdat:
                break
        elif btype == b"ftyp" and not ftyp and moov is None:
            if pos + size <= fsize and size <= 4096:
                ftyp = r.get(pos, size)
        elif pos + size > fsize and moov is None:
            _raise(E_TRUNCATED, path, _fourcc(btype), pos,
                   f"box of {size} bytes runs past the end of the file before any moov")
        pos += size
        prev_size = size
    if moov is None:
        _raise(E_BADBOX, path, "moov", -1, "no moov box in the file")
    return _parse_moov(moov, moov_off, fsize, path, track_id,
                       dict(moov_offset=moov_off, moov_size=moov_size, mdat_offset=mdat_off,
                            mdat_size=mdat_size, faststart=(mdat_off < 0 or moov_off < mdat_off),
                            ftyp=bytes(ftyp), file_size=fsize))


def parse_mp4_bytes(data, *, path="", track_id=None):
    """Parse a whole MP4 held in memory (bytes, bytearray or memoryview); same result, arguments
    and errors as :func:`parse_mp4`."""
    mv = memoryview(data).cast("B")

    def read(off, n):
        return bytes(mv[off:off + n])

    return parse_mp4(read, len(mv), path=path, track_id=track_id)


cdef object _parse_moov(bytes moov, long long moov_off, long long fsize, str path, object track_id, dict extra):
    cdef lrs_mp4_info info
    cdef lrs_err err
    cdef const uint8_t[::1] buf = moov
    cdef long long want = -1 if track_id is None else int(track_id)
    cdef int st
    cdef int64_t n
    if track_id is not None and want < 0:
        raise ValueError(f"track_id must be >= 0, got {track_id}")
    st = lrs_mp4_scan_moov(&buf[0], len(moov), moov_off, fsize, want, &info, &err)
    if st != 0:
        _raise(st, path, err.box.decode("ascii", "replace"), err.offset, err.reason.decode("utf-8", "replace"))
    n = info.num_samples
    # numpy gives even an empty array a valid data pointer
    cdef cnp.ndarray offset = np.empty(n, np.int64), size = np.empty(n, np.int64), dts = np.empty(n, np.int64)
    cdef cnp.ndarray cts = np.empty(n, np.int64), pts = np.empty(n, np.int64), sync = np.empty(n, np.bool_)
    cdef cnp.ndarray pts_s = np.empty(n, np.float64)
    cdef int64_t *p_off = <int64_t *>cnp.PyArray_DATA(offset)
    cdef int64_t *p_size = <int64_t *>cnp.PyArray_DATA(size)
    cdef int64_t *p_dts = <int64_t *>cnp.PyArray_DATA(dts)
    cdef int64_t *p_cts = <int64_t *>cnp.PyArray_DATA(cts)
    cdef int64_t *p_pts = <int64_t *>cnp.PyArray_DATA(pts)
    cdef uint8_t *p_sync = <uint8_t *>cnp.PyArray_DATA(sync)
    cdef double *p_ps = <double *>cnp.PyArray_DATA(pts_s)
    cdef const uint8_t *bp = &buf[0]
    cdef long long blen = len(moov)
    with nogil:
        st = lrs_mp4_fill(bp, blen, moov_off, fsize, &info, p_off, p_size, p_dts, p_cts, p_pts, p_sync, p_ps, &err)
    if st != 0:
        _raise(st, path, err.box.decode("ascii", "replace"), err.offset, err.reason.decode("utf-8", "replace"))
    order = np.argsort(pts, kind="stable").astype(np.int64, copy=False)
    ids = tuple(int(info.video_track_ids[i]) for i in range(min(info.num_video_tracks, 32)))
    if info.num_video_tracks > 1 and track_id is None:
        log.info("%s: %d video tracks %s; using the first (track_id %d)", path or "<bytes>",
                 info.num_video_tracks, ids, info.track_id)
    for a in (offset, size, dts, cts, pts, sync, pts_s, order):
        a.flags.writeable = False
    return SampleTable(
        offset=offset, size=size, dts_ticks=dts, cts_ticks=cts, pts_ticks=pts, is_sync=sync,
        pts_s=pts_s, presentation_order=order,
        media_timescale=int(info.media_timescale), movie_timescale=int(info.movie_timescale),
        media_time=int(info.media_time), empty_edit_movie_ticks=int(info.empty_edit_movie_ticks),
        edit_duration_movie_ticks=int(info.edit_duration_movie_ticks),
        codec=info.codec.decode("ascii", "replace"),
        stsd=moov[info.stsd_start:info.stsd_end],
        width=int(info.width), height=int(info.height), track_id=int(info.track_id),
        ctts_version=None if info.ctts_version < 0 else int(info.ctts_version),
        path=path, display_width=int(info.display_width), display_height=int(info.display_height),
        media_duration=int(info.media_duration), has_edit=bool(info.has_edit),
        video_track_ids=ids, matrix=tuple(int(info.matrix[i]) for i in range(9)),
        movie_matrix=tuple(int(info.movie_matrix[i]) for i in range(9)), **extra,
    )
