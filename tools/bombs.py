"""Small inputs that declare huge sizes (allocation bombs), for ``tools/bomb_rss.py`` and the
untrusted-input tests (``tests/untrusted/test_mp4_bombs.py``): an MP4 header whose sample table
declares any number of samples, a file of tiny top-level boxes. Not a CLI."""

from __future__ import annotations

import struct


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", 8 + len(payload)) + kind + payload


def _full(kind: bytes, payload: bytes, version: int = 0) -> bytes:
    return _box(kind, struct.pack(">I", version << 24) + payload)


def mp4_header(
    num_samples: int, *, file_size: int, sample_size: int = 1, moov_pad: int = 0, lead: bytes = b""
) -> bytes:
    """``ftyp`` + ``moov`` + an ``mdat`` header of a faststart MP4 of ``file_size`` bytes whose one
    video track (``avc1``, 64x48, timescale 30) declares ``num_samples`` samples of ``sample_size``
    bytes in one chunk right after the ``mdat`` header (constant ``stsz``, one ``stts`` and one
    ``stsc`` entry: a few hundred bytes whatever the count). The rest of the file is ``mdat``
    payload (zeros: write it as a sparse file, or serve it from :func:`sparse_reader`).
    ``moov_pad`` adds a ``free`` box of that many bytes inside ``moov``; ``lead`` (whole boxes)
    goes between ``ftyp`` and ``moov``.
    """
    mvhd = _full(b"mvhd", struct.pack(">IIII", 0, 0, 30, num_samples) + b"\0" * 80)
    matrix = struct.pack(">9i", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)
    tkhd = _full(
        b"tkhd",
        struct.pack(">IIIII", 0, 0, 1, 0, num_samples) + b"\0" * 16 + matrix + struct.pack(">II", 64 << 16, 48 << 16),
    )
    mdhd = _full(b"mdhd", struct.pack(">IIII", 0, 0, 30, num_samples) + b"\0" * 4)
    hdlr = _full(b"hdlr", struct.pack(">I", 0) + b"vide" + b"\0" * 13)
    entry = _box(b"avc1", b"\0" * 6 + struct.pack(">H", 1) + b"\0" * 16 + struct.pack(">HH", 64, 48) + b"\0" * 50)
    stsd = _full(b"stsd", struct.pack(">I", 1) + entry)
    stts = _full(b"stts", struct.pack(">III", 1, num_samples, 1))
    stsc = _full(b"stsc", struct.pack(">IIII", 1, 1, num_samples, 1))
    stsz = _full(b"stsz", struct.pack(">II", sample_size, num_samples))
    ftyp = _box(b"ftyp", b"isom\0\0\0\0isomavc1")

    def moov_with(chunk_offset: int) -> bytes:
        stco = _full(b"stco", struct.pack(">II", 1, chunk_offset))
        stbl = _box(b"stbl", stsd + stts + stsc + stsz + stco)
        minf = _box(b"minf", stbl)
        mdia = _box(b"mdia", mdhd + hdlr + minf)
        pad = _box(b"free", b"\0" * moov_pad) if moov_pad else b""
        return _box(b"moov", mvhd + _box(b"trak", tkhd + mdia) + pad)

    size = len(ftyp) + len(lead) + len(moov_with(0)) + 8
    head = ftyp + lead + moov_with(size)
    if file_size < size:
        raise ValueError(f"file_size {file_size} is smaller than the header ({size} bytes)")
    return head + struct.pack(">I", min(file_size - len(head), 0xFFFFFFFF)) + b"mdat"


def tiny_boxes(num_boxes: int) -> bytes:
    """``num_boxes`` empty 8-byte ``free`` boxes."""
    return _box(b"free", b"") * num_boxes


def tiny_boxes_file(num_boxes: int) -> bytes:
    """``ftyp`` then ``num_boxes`` empty 8-byte ``free`` boxes (no ``moov``)."""
    return _box(b"ftyp", b"isom\0\0\0\0isom") + tiny_boxes(num_boxes)


def sparse_reader(head: bytes, file_size: int):
    """``(read, calls)``: ``read(offset, n)`` serves a virtual file of ``file_size`` bytes that
    starts with ``head`` and holds zeros after it; ``calls`` lists every ``(offset, n)`` asked."""
    calls: list[tuple[int, int]] = []

    def read(off: int, n: int) -> bytes:
        calls.append((off, n))
        n = max(0, min(n, file_size - off))
        part = head[off : off + n]
        return part + bytes(n - len(part))

    return read, calls
