"""A slow, pure-Python ISO BMFF sample-table reader: the test oracle for lerobotstream.mp4.parse.

Written independently of csrc/mp4_parse.c, as plainly as possible: read the whole file, walk the
box tree, pick the first video track (or ``track_id``), expand every table sample by sample in
Python, and compute presentation times with ``fractions.Fraction``. It raises ``RefError`` where
the real parser must raise a typed error. Never used by the library.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts", b"mvex"}


class RefError(Exception):
    """The reference refuses the file (fragmented, malformed, inconsistent, unsupported)."""


@dataclass
class RefTable:
    offset: np.ndarray
    size: np.ndarray
    dts_ticks: np.ndarray
    cts_ticks: np.ndarray
    pts_ticks: np.ndarray
    is_sync: np.ndarray
    pts_s: np.ndarray
    presentation_order: np.ndarray
    media_timescale: int
    movie_timescale: int
    media_time: int
    empty_edit_movie_ticks: int
    edit_duration_movie_ticks: int
    codec: str
    stsd: bytes
    width: int
    height: int
    track_id: int
    ctts_version: int | None
    matrix: tuple
    movie_matrix: tuple


def boxes(data: bytes, start: int, end: int, *, top: bool = False):
    """Yield (type, payload_start, box_end) of the boxes in data[start:end]; at the ``top`` level
    a last ``mdat`` that claims more bytes than the file has is clamped."""
    pos = start
    while pos + 8 <= end:
        size, typ = struct.unpack_from(">I4s", data, pos)
        hdr = 8
        if size == 1:
            if pos + 16 > end:
                raise RefError("truncated largesize")
            (size,) = struct.unpack_from(">Q", data, pos + 8)
            hdr = 16
        elif size == 0:
            size = end - pos
        if size < hdr:
            raise RefError(f"bad box {typ!r} at {pos}")
        if pos + size > end:
            if not top or typ != b"mdat":
                raise RefError(f"truncated box {typ!r} at {pos}")
            size = end - pos
        yield typ, pos + hdr, pos + size
        pos += size


def tree(data: bytes, start: int, end: int) -> dict:
    """Nested dict: type -> list of (payload_start, end, children or None)."""
    out: dict = {}
    for typ, ps, pe in boxes(data, start, end):
        kids = tree(data, ps, pe) if typ in CONTAINERS else None
        out.setdefault(typ, []).append((ps, pe, kids))
    return out


def _one(t: dict, name: bytes):
    v = t.get(name) or []
    if len(v) > 1:
        raise RefError(f"duplicate {name!r}")
    return v[0] if v else None


def parse_reference(data: bytes, *, track_id: int | None = None, file_size: int | None = None) -> RefTable:
    """Parse ``data`` (a whole MP4). ``file_size`` (default len(data)) bounds sample bytes."""
    fsize = len(data) if file_size is None else file_size
    top = list(boxes(data, 0, len(data), top=True))
    types = [t for t, _, _ in top]
    if b"moof" in types:
        raise RefError("fragmented (moof)")
    moovs = [(s, e) for t, s, e in top if t == b"moov"]
    if len(moovs) != 1:
        raise RefError("need exactly one moov")
    moov = tree(data, *moovs[0])
    if b"mvex" in moov:
        raise RefError("fragmented (mvex)")
    mvhd = _one(moov, b"mvhd")
    if mvhd is None:
        raise RefError("no mvhd")
    v = data[mvhd[0]]
    movie_ts = struct.unpack_from(">I", data, mvhd[0] + (20 if v == 1 else 12))[0]
    # mvhd: version/flags, times (8|16), timescale, duration (4|8), rate, volume, reserved(10), matrix
    mvhd_matrix = struct.unpack_from(">9i", data, mvhd[0] + (4 + 16 + 4 + 8 if v == 1 else 4 + 8 + 4 + 4) + 4 + 2 + 10)
    if movie_ts == 0:
        raise RefError("zero movie timescale")
    trak, mdia, tkhd, tid, trak_start = _video_track(data, moov, track_id)
    tv = data[tkhd[0]]
    # version/flags, creation+modification (8|16), track_ID, reserved, duration (4|8), reserved(8),
    # layer/alternate_group/volume/reserved (8), matrix (36), then width, height
    wpos = tkhd[0] + (4 + 8 + 4 + 4 + 4 + 8 + 8 + 36 if tv == 0 else 4 + 16 + 4 + 4 + 8 + 8 + 8 + 36)
    matrix = struct.unpack_from(">9i", data, wpos - 36)
    # FFmpeg combines tkhd's matrix with the mvhd matrix read so far (zeros before any mvhd)
    movie_matrix = mvhd_matrix if mvhd[0] < trak_start else (0,) * 9
    tk_w, tk_h = (x >> 16 for x in struct.unpack_from(">II", data, wpos))
    mdhd = _one(mdia[2], b"mdhd")
    mv = data[mdhd[0]]
    media_ts = struct.unpack_from(">I", data, mdhd[0] + (20 if mv == 1 else 12))[0]
    if media_ts == 0:
        raise RefError("zero media timescale")
    stbl = _one(_one(mdia[2], b"minf")[2], b"stbl")[2]

    def payload(name):
        b = _one(stbl, name)
        return None if b is None else data[b[0] : b[1]]

    # stsd
    stsd = payload(b"stsd")
    esize, etype = struct.unpack_from(">I4s", stsd, 8)
    codec = etype.decode("latin-1")
    width, height = tk_w, tk_h
    if esize >= 36:
        width, height = struct.unpack_from(">HH", stsd, 8 + 32)

    media_time, empty, edit_dur = _edit_list(data, trak)

    sizes = _sample_sizes(payload(b"stsz"), payload(b"stz2"))
    nsamp = len(sizes)
    dts = _decode_times(payload(b"stts"), nsamp)
    ctts = payload(b"ctts")
    ctts_version = None if ctts is None else ctts[0]
    cts = _composition_offsets(ctts, nsamp)
    sync = _sync_flags(payload(b"stss"), nsamp)
    offsets = _sample_offsets(payload(b"stco"), payload(b"co64"), payload(b"stsc"), sizes, fsize)

    pts = [d + c - media_time for d, c in zip(dts, cts)]
    pts_s = [float(Fraction(p, media_ts) + Fraction(empty, movie_ts)) for p in pts]
    order = sorted(range(nsamp), key=lambda k: (pts[k], k))
    a = lambda x, dt=np.int64: np.asarray(x, dtype=dt).reshape(-1)  # noqa: E731
    return RefTable(
        offset=a(offsets),
        size=a(sizes),
        dts_ticks=a(dts),
        cts_ticks=a(cts),
        pts_ticks=a(pts),
        is_sync=a(sync, bool),
        pts_s=a(pts_s, np.float64),
        presentation_order=a(order),
        media_timescale=media_ts,
        movie_timescale=movie_ts,
        media_time=media_time,
        empty_edit_movie_ticks=empty,
        edit_duration_movie_ticks=edit_dur,
        codec=codec,
        stsd=bytes(stsd),
        width=width,
        height=height,
        track_id=tid,
        ctts_version=ctts_version,
        matrix=tuple(matrix),
        movie_matrix=tuple(movie_matrix),
    )


def _video_track(data: bytes, moov: dict, track_id: int | None) -> tuple:
    """``(trak, mdia, tkhd, track_id, trak start)`` of the first video track (or of ``track_id``).

    Raises:
        RefError: no such video track.
    """
    for ts, _te, trak in moov.get(b"trak", []):
        mdia = _one(trak, b"mdia")
        if mdia is None:
            continue
        hdlr = _one(mdia[2], b"hdlr")
        if hdlr is None or data[hdlr[0] + 8 : hdlr[0] + 12] != b"vide":
            continue
        tkhd = _one(trak, b"tkhd")
        tv = data[tkhd[0]]
        tid = struct.unpack_from(">I", data, tkhd[0] + (20 if tv == 1 else 12))[0]
        if track_id is None or tid == track_id:
            return trak, mdia, tkhd, tid, ts
    raise RefError("no video track")


def _edit_list(data: bytes, trak: dict) -> tuple[int, int, int]:
    """``(media_time media ticks, empty edits movie ticks, media edit duration movie ticks)``.

    Raises:
        RefError: an edit list this reader does not accept (non-unit rate, several media edits...).
    """
    media_time, empty, edit_dur, n_media = 0, 0, 0, 0
    edts = _one(trak, b"edts")
    elst = _one(edts[2], b"elst") if edts else None
    if not elst:
        return media_time, empty, edit_dur
    p = data[elst[0] : elst[1]]
    ev = p[0]
    (n,) = struct.unpack_from(">I", p, 4)
    off = 8
    for _ in range(n):
        if ev == 1:
            dur, mt, ri, rf = struct.unpack_from(">QqhH", p, off)
            off += 20
        else:
            dur, mt, ri, rf = struct.unpack_from(">IihH", p, off)
            off += 12
        if mt == -1:
            if n_media:
                raise RefError("empty edit after media edit")
            empty += dur
        else:
            if (ri, rf) != (1, 0):
                raise RefError("non-unit rate edit")
            if n_media:
                raise RefError("several media edits")
            n_media, media_time, edit_dur = 1, mt, dur
    if n and not n_media:
        raise RefError("no media edit")
    return media_time, empty, edit_dur


def _sample_sizes(stsz: bytes | None, stz2: bytes | None) -> list[int]:
    """Each sample's size in bytes, from ``stsz`` (or compact ``stz2``: 16, 8 or 4 bits)."""
    if stsz is not None:
        const, n = struct.unpack_from(">II", stsz, 4)
        return [const] * n if const else list(struct.unpack_from(f">{n}I", stsz, 12))
    fs = stz2[7]
    (n,) = struct.unpack_from(">I", stz2, 8)
    raw = stz2[12:]
    if fs == 16:
        return list(struct.unpack_from(f">{n}H", raw))
    if fs == 8:
        return list(raw[:n])
    return [(raw[k // 2] >> 4) if k % 2 == 0 else (raw[k // 2] & 15) for k in range(n)]


def _decode_times(stts: bytes, nsamp: int) -> list[int]:
    """Each sample's DTS in media ticks (``stts``). Raises RefError: not ``nsamp`` of them."""
    (ne,) = struct.unpack_from(">I", stts, 4)
    dts, t = [], 0
    for k in range(ne):
        cnt, delta = struct.unpack_from(">II", stts, 8 + 8 * k)
        for _ in range(cnt):
            dts.append(t)
            t += delta
    if len(dts) != nsamp:
        raise RefError("stts/stsz disagree")
    return dts


def _composition_offsets(ctts: bytes | None, nsamp: int) -> list[int]:
    """Each sample's CTS offset in media ticks (``ctts``; zeros without one). Raises RefError."""
    if ctts is None:
        return [0] * nsamp
    (ne,) = struct.unpack_from(">I", ctts, 4)
    cts = []
    for k in range(ne):
        cnt, val = struct.unpack_from(">Ii", ctts, 8 + 8 * k)
        cts.extend([val] * cnt)
    if len(cts) != nsamp:
        raise RefError("ctts/stsz disagree")
    return cts


def _sync_flags(stss: bytes | None, nsamp: int) -> list[bool]:
    """Whether each sample is a sync sample (``stss``; all are without one). Raises RefError."""
    if stss is None:
        return [True] * nsamp
    sync = [False] * nsamp
    (ne,) = struct.unpack_from(">I", stss, 4)
    for k in range(ne):
        (s,) = struct.unpack_from(">I", stss, 8 + 4 * k)
        if not 1 <= s <= nsamp:
            raise RefError("stss out of range")
        sync[s - 1] = True
    return sync


def _sample_offsets(stco: bytes | None, co64: bytes | None, stsc: bytes, sizes: list[int], fsize: int) -> list[int]:
    """Each sample's file offset in bytes (chunk offsets + ``stsc`` + sizes).

    Raises:
        RefError: ``stsc`` maps too many/few samples or past the chunks; a sample past ``fsize``.
    """
    nsamp = len(sizes)
    if stco is not None:
        (nc,) = struct.unpack_from(">I", stco, 4)
        chunks = list(struct.unpack_from(f">{nc}I", stco, 8))
    else:
        (nc,) = struct.unpack_from(">I", co64, 4)
        chunks = list(struct.unpack_from(f">{nc}Q", co64, 8))
    (ne,) = struct.unpack_from(">I", stsc, 4)
    entries = [struct.unpack_from(">III", stsc, 8 + 12 * k) for k in range(ne)]
    offsets = []
    for k, (first, spc, _sdi) in enumerate(entries):
        last = entries[k + 1][0] - 1 if k + 1 < ne else nc
        if first < 1 or first > nc or last < first - 1:
            raise RefError("stsc points past stco")
        for chunk in range(first, last + 1):
            off = chunks[chunk - 1]
            for _ in range(spc):
                s = len(offsets)
                if s >= nsamp:
                    raise RefError("stsc maps too many samples")
                offsets.append(off)
                off += sizes[s]
    if len(offsets) != nsamp:
        raise RefError("stsc maps too few samples")
    for o, sz in zip(offsets, sizes):
        if o + sz > fsize:
            raise RefError("sample outside the file")
    return offsets
