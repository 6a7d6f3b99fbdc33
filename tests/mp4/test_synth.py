"""Mini-MP4 synthesis: exact precomputed size (incl. stco->co64 fixed point near 2^32 and 64-bit
mdat), box layout and table contents, ctts v0/v1, stss omission."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import numpy as np
import pytest

from lerobotstream.errors import Mp4Error
from lerobotstream.mp4.spans import plan_span
from lerobotstream.mp4.synth import header_nbytes, synthesize, synthesize_header

CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts", b"dinf"}


def boxes(buf, start=0, end=None, out=None, stop_at_mdat=True):
    """Flatten the box tree: {type: payload bytes}; returns (dict, mdat header length)."""
    end = len(buf) if end is None else end
    out = {} if out is None else out
    pos = start
    while pos + 8 <= end:
        size, typ = struct.unpack(">I4s", buf[pos : pos + 8])
        hdr = 8
        if size == 1:
            size = struct.unpack(">Q", buf[pos + 8 : pos + 16])[0]
            hdr = 16
        if typ == b"mdat":
            out[b"mdat"] = (pos, hdr, size)
            break
        out[typ] = buf[pos + hdr : pos + size]
        if typ in CONTAINERS:
            boxes(buf, pos + hdr, pos + size, out)
        pos += size
    return out


def table(n, *, cts=None, sync=None, sizes=None, offsets=None, durations=None):
    sizes = np.full(n, 10, np.int64) if sizes is None else np.asarray(sizes, np.int64)
    offsets = (100 + np.concatenate([[0], np.cumsum(sizes)[:-1]])) if offsets is None else np.asarray(offsets, np.int64)
    dur = np.full(n, 512, np.int64) if durations is None else np.asarray(durations, np.int64)
    dts = np.concatenate([[0], np.cumsum(dur)[:-1]])
    cts = np.zeros(n, np.int64) if cts is None else np.asarray(cts, np.int64)
    media_time = int(cts[0]) if n else 0
    pts = dts + cts - media_time
    return SimpleNamespace(
        offset=offsets,
        size=sizes,
        dts_ticks=dts,
        cts_ticks=cts,
        pts_ticks=pts,
        is_sync=np.ones(n, bool) if sync is None else np.asarray(sync, bool),
        pts_s=pts / 15360,
        presentation_order=np.argsort(pts, kind="stable"),
        media_timescale=15360,
        movie_timescale=1000,
        media_time=media_time,
        empty_edit_movie_ticks=0,
        edit_duration_movie_ticks=0,
        codec="avc1",
        stsd=b"\0\0\0\0\0\0\0\1" + b"\0\0\0\x10avc1" + b"\0" * 8,
        width=65,
        height=49,
        track_id=1,
        ctts_version=None,
        duration_ticks=dur,
    )


def payload_of(t, span):
    rng = np.random.default_rng(span.byte_start)
    return rng.integers(0, 256, span.byte_stop - span.byte_start, dtype=np.uint8).tobytes()


def test_size_matches_and_tables_are_rebased():
    t = table(
        12,
        cts=[1024, 2048, 512, 512] * 3,
        sync=[i % 4 == 0 for i in range(12)],
        sizes=np.arange(1, 13) * 7,
        durations=[512] * 5 + [500] * 7,
    )
    for a in range(12):
        for b in range(a + 1, 13):
            s = plan_span(t, a, b)
            pay = payload_of(t, s)
            out = synthesize(t, s, pay)
            assert len(out) == s.synth_nbytes
            bx = boxes(out)
            pos, hdr, size = bx[b"mdat"]
            assert out[pos + hdr :] == pay and size == hdr + len(pay)
            n = s.sample_stop - s.sample_start
            stco = bx[b"stco"]
            offs = struct.unpack(f">{n}I", stco[8 : 8 + 4 * n])
            rel = t.offset[s.sample_start : s.sample_stop] - s.byte_start
            assert list(offs) == list(pos + hdr + rel)
            stsz = bx[b"stsz"]
            assert list(struct.unpack(f">{n}I", stsz[12:])) == list(t.size[s.sample_start : s.sample_stop])
            assert b"ctts" in bx and bx[b"ctts"][0] == 0  # v0: offsets non-negative
            stss = bx[b"stss"]
            k = struct.unpack(">I", stss[4:8])[0]
            want = [i + 1 for i in range(n) if t.is_sync[s.sample_start + i]]
            assert list(struct.unpack(f">{k}I", stss[8:])) == want
            # stts run-length expands to the span's durations
            stts = bx[b"stts"]
            runs = struct.unpack(">I", stts[4:8])[0]
            exp = []
            for r in range(runs):
                c, d = struct.unpack(">II", stts[8 + 8 * r : 16 + 8 * r])
                exp += [d] * c
            assert exp == list(t.duration_ticks[s.sample_start : s.sample_stop])
            assert bx[b"stsd"] == t.stsd
            elst = bx[b"elst"]
            seg, mt = struct.unpack(">Qq", elst[8:24])
            assert mt == t.cts_ticks[s.sample_start] and seg == s.edit_duration


def test_no_ctts_and_no_stss_when_trivial():
    t = table(5)
    s = plan_span(t, 1, 3)
    bx = boxes(synthesize(t, s, payload_of(t, s)))
    assert b"ctts" not in bx and b"stss" not in bx and b"stco" in bx


def test_negative_offsets_write_ctts_v1_and_non_negative_edit():
    t = table(4, cts=[-512, 512, -1024, 0])
    s = plan_span(t, 0, 4)
    bx = boxes(synthesize(t, s, payload_of(t, s)))
    assert bx[b"ctts"][0] == 1
    seg, mt = struct.unpack(">Qq", bx[b"elst"][8:24])
    assert mt >= 0 and s.cts_shift == 512


@pytest.mark.parametrize("last_rel", [100, 2**32 - 1024, 2**32 - 100, 2**32, 2**32 + 100])
def test_offsets_near_2_32_exact_size_and_width(last_rel):
    base = 2**33  # absolute file offsets well past 32 bits
    n = 3
    offsets = [base, base + 50, base + last_rel]
    t = table(n, offsets=offsets, sizes=[10, 10, 10])
    s = plan_span(t, 0, n)
    hdr = synthesize_header(t, s)
    assert len(hdr) == s.header_nbytes
    assert s.synth_nbytes == len(hdr) + (last_rel + 10)
    bx = boxes(hdr)
    pos, mhdr, size = bx[b"mdat"]
    data_off = pos + mhdr
    assert data_off == len(hdr) and size == mhdr + last_rel + 10
    assert mhdr == (16 if last_rel + 10 + 8 > 0xFFFFFFFF else 8)
    if data_off + last_rel > 0xFFFFFFFF:
        assert s.use_co64 and b"co64" in bx
        offs = struct.unpack(f">{n}Q", bx[b"co64"][8:])
    else:
        assert not s.use_co64 and b"stco" in bx
        offs = struct.unpack(f">{n}I", bx[b"stco"][8:])
    assert list(offs) == [data_off + o - base for o in offsets]


def test_co64_switch_caused_by_the_header_itself_reaches_a_fixed_point():
    """Relative offsets fit 32 bits but relative offset + header does not: co64, sized right."""
    n = 2
    t = table(n, offsets=[0, 0], sizes=[10, 10])
    s = plan_span(t, 0, n)
    h32, _ = header_nbytes(t, s)
    last = 0xFFFFFFFF - h32 + 1  # + header overflows 32 bits by exactly one byte
    t = table(n, offsets=[0, last], sizes=[10, 10])
    s = plan_span(t, 0, n)
    hdr = synthesize_header(t, s)
    assert s.use_co64 and len(hdr) == s.header_nbytes == h32 + 4 * n
    assert s.synth_nbytes == len(hdr) + last + 10


def test_payload_length_checked():
    t = table(3)
    s = plan_span(t, 0, 3)
    with pytest.raises(Mp4Error):
        synthesize(t, s, b"\0" * (s.byte_stop - s.byte_start - 1))


def test_accepts_memoryview_and_bytearray_payloads():
    t = table(3)
    s = plan_span(t, 0, 3)
    p = payload_of(t, s)
    assert synthesize(t, s, bytearray(p)) == synthesize(t, s, memoryview(p)) == synthesize(t, s, p)


def test_display_matrices_written_verbatim_size_unchanged():
    """tkhd and mvhd carry the source's matrices (FFmpeg rotates by their product); 36 bytes each
    whatever the values, so the planned size does not depend on them."""
    from lerobotstream.mp4.parse import parse_mp4_bytes

    rot = (0, -65536, 0, 65536, 0, 0, 0, 0, 1 << 30)
    movie = (65536, 0, 0, 0, -65536, 0, 7 << 16, -3, 1 << 30)
    t = table(6, sync=[True, False, False, True, False, False])
    t_id = SimpleNamespace(**{**vars(t), "matrix": (65536, 0, 0, 0, 65536, 0, 0, 0, 1 << 30)})
    t.matrix, t.movie_matrix = rot, movie
    s = plan_span(t, 1, 5)
    pay = payload_of(t, s)
    out = synthesize(t, s, pay)
    assert len(out) == s.synth_nbytes == len(synthesize(t_id, plan_span(t_id, 1, 5), pay))
    bx = boxes(out)
    tkhd, mvhd = bx[b"tkhd"], bx[b"mvhd"]
    assert struct.unpack(">9i", tkhd[4 + 16 + 4 + 4 + 8 + 8 + 8 :][:36]) == rot  # v1 tkhd
    assert struct.unpack(">9i", mvhd[4 + 16 + 4 + 8 + 4 + 2 + 10 :][:36]) == movie  # v1 mvhd
    assert struct.unpack(">II", tkhd[-8:]) == (65 << 16, 49 << 16)  # width/height unchanged, not swapped
    back = parse_mp4_bytes(out)
    assert back.matrix == rot and back.movie_matrix == movie
    t.matrix = rot[:8]
    with pytest.raises(Mp4Error, match="9 values"):
        synthesize(t, s, pay)
    t.matrix = rot[:8] + (1 << 31,)
    with pytest.raises(Mp4Error, match="signed 32-bit"):
        synthesize(t, s, pay)
