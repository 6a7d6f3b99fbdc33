"""Where an MP4's samples sit, from the ``moov`` and the top-level box headers alone (the bytes
the parser already read; nothing more is fetched): every sample inside an ``mdat`` box, no two
samples overlapping (a chunk's samples do not run into the next chunk), and in a file of one
track the sizes summing to what ``mdat`` holds after its first sample. A byte flipped in an
``stco``/``co64`` entry moves a chunk onto its neighbour or out of ``mdat``; one flipped in an
``stsz`` entry moves the rest of its chunk. Training meets these only when it fetches the
samples (``check_sample_framing``); here they are named before any payload is read.

Also what a file cut short looks like, whatever its box order: a top-level box (``mdat`` with
``moov`` first, ``moov`` with ``mdat`` first) that declares more bytes than the file has.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


class RecordingRead:
    """``read(offset, n)`` over one file of a ByteSource that keeps what it returned, so the box
    headers the parser read can be walked again without another request."""

    def __init__(self, read: Callable[[int, int], bytes]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self.chunks: list[tuple[int, bytes]] = []

    def __call__(self, offset: int, n: int) -> bytes:
        data = self._read(offset, n)
        with self._lock:
            self.chunks.append((int(offset), bytes(data)))
        return data

    def get(self, offset: int, n: int) -> bytes | None:
        """``n`` bytes at ``offset`` from what was read, or None when no read covered them."""
        for start, data in self.chunks:
            if start <= offset and offset + n <= start + len(data):
                return data[offset - start : offset - start + n]
        return None


@dataclass(frozen=True)
class Box:
    """A top-level box whose header was read."""

    kind: str
    offset: int
    size: int
    """Declared size, header included (may run past the end of a truncated file)."""
    header: int

    @property
    def end(self) -> int:
        return self.offset + self.size


def top_level_boxes(read: RecordingRead, file_size: int) -> tuple[list[Box], bool]:
    """The top-level boxes whose headers are among the bytes read, in file order, and whether
    they reach the end of the file (the layout is then known completely)."""
    boxes: list[Box] = []
    pos = 0
    while pos + 8 <= file_size:
        head = read.get(pos, 16 if pos + 16 <= file_size else 8) or read.get(pos, 8)
        if head is None:
            return boxes, False
        size, kind = struct.unpack_from(">I4s", head, 0)
        hdr = 8
        if size == 1:
            if len(head) < 16:
                return boxes, False
            size, hdr = struct.unpack_from(">Q", head, 8)[0], 16
        elif size == 0:
            size = file_size - pos
        if size < hdr:
            return boxes, False
        boxes.append(Box(kind.decode("latin-1"), pos, int(size), hdr))
        pos += int(size)
    return boxes, pos >= file_size


def truncated_box(boxes: list[Box], file_size: int) -> Box | None:
    """The first top-level box that declares more bytes than the file has (a cut file), or None."""
    return next((b for b in boxes if b.end > file_size), None)


def num_tracks(read: RecordingRead, table: Any) -> int | None:
    """``trak`` boxes in the ``moov`` (None when its bytes were not read)."""
    moov = read.get(int(table.moov_offset), int(table.moov_size)) if int(table.moov_offset) >= 0 else None
    if moov is None:
        return None
    count, pos = 0, 8
    while pos + 8 <= len(moov):
        size, kind = struct.unpack_from(">I4s", moov, pos)
        if size == 1 and pos + 16 <= len(moov):
            size = struct.unpack_from(">Q", moov, pos + 8)[0]
        if size < 8:
            break
        count += kind == b"trak"
        pos += size
    return count


def layout_problems(table: Any, boxes: list[Box], complete: bool, tracks: int | None) -> list[str]:
    """What is wrong with where the samples sit (empty when nothing is): samples outside every
    ``mdat`` (or past the boxes that were read), overlapping samples, and in a one-track file
    bytes of ``mdat`` after its first sample that no sample covers. Each reason names samples
    (decode order) and byte offsets."""
    off = np.asarray(table.offset, dtype=np.int64)
    size = np.asarray(table.size, dtype=np.int64)
    n = int(off.shape[0])
    if n == 0:
        return []
    out: list[str] = []
    mdats = [b for b in boxes if b.kind == "mdat"]
    regions = [(b.offset + b.header, min(b.end, int(table.file_size) or b.end)) for b in mdats]
    if not complete:  # the boxes after those read are unknown: samples may sit there
        regions.append((boxes[-1].end if boxes else 0, int(table.file_size) or int((off + size).max())))
    if regions:
        starts = np.asarray([a for a, _ in regions], dtype=np.int64)
        stops = np.asarray([b for _, b in regions], dtype=np.int64)
        r = np.clip(np.searchsorted(starts, off, side="right") - 1, 0, len(regions) - 1)
        outside = np.flatnonzero((off < starts[r]) | (off + size > stops[r]))
        if outside.shape[0]:
            k = int(outside[0])
            where = ", ".join(f"[{a:,}, {b:,})" for a, b in regions[: min(len(mdats), 3)])
            out.append(
                f"{outside.shape[0]} of {n} samples lie outside the mdat payload ({where or 'none read'}); "
                f"first: sample {k}, bytes [{int(off[k]):,}, {int(off[k] + size[k]):,})"
            )
    order = np.argsort(off, kind="stable")
    so, se = off[order], off[order] + size[order]
    over = np.flatnonzero(se[:-1] > so[1:])
    if over.shape[0]:
        k = int(over[0])
        a, b = int(order[k]), int(order[k + 1])
        out.append(
            f"{over.shape[0]} sample(s) overlap the next one in the file; first: sample {a}, bytes "
            f"[{int(off[a]):,}, {int(off[a] + size[a]):,}), runs into sample {b} at byte {int(off[b]):,}"
        )
    if not out and tracks == 1 and complete and len(mdats) == 1:
        m = mdats[0]
        payload_end = min(m.end, int(table.file_size) or m.end)
        gaps = np.flatnonzero(se[:-1] < so[1:])
        tail = payload_end - int(se[-1])
        if gaps.shape[0] or tail > 0:
            held = payload_end - int(so[0])
            first = (
                f"bytes [{int(se[gaps[0]]):,}, {int(so[gaps[0] + 1]):,}) between samples {int(order[gaps[0]])} "
                f"and {int(order[gaps[0] + 1])}"
                if gaps.shape[0]
                else f"the last {tail:,} bytes of mdat, after sample {int(order[-1])}"
            )
            out.append(
                f"the file's one track has samples summing to {int(size.sum()):,} bytes, but mdat holds "
                f"{held:,} bytes from its first sample on; uncovered: {first}"
            )
    return out
