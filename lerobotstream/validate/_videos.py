"""Checks of one MP4 from its headers: presence, box layout, sample tables, format against
``info.json``, and every episode window that uses it — the sidecar's own window, fps and overlap
checks (``sidecar._validate.validate_source``), collected instead of raised.

Where the samples sit is checked from the ``moov`` and the top-level box headers alone (the bytes
the parser already read): every sample inside an ``mdat``, no two overlapping, and in a file of
one track the sizes summing to what ``mdat`` holds after its first sample. A byte flipped in an
``stco``/``co64`` or ``stsz`` entry moves samples; training meets it only when it fetches them
(``check_sample_framing``), here it is named before any payload is read. A file cut short, whatever
its box order, has a top-level box that declares more bytes than the file has.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobotstream.errors import (
    LeRobotStreamError,
    Mp4InconsistentTablesError,
    Mp4TruncatedError,
    Mp4UnsupportedError,
    SourceError,
)
from lerobotstream.features import DEPTH_PIX_FMTS, is_depth_feature
from lerobotstream.mp4.parse import parse_mp4
from lerobotstream.sidecar._validate import EpisodeWindow, displayed_size, validate_source
from lerobotstream.validate._codec import CODEC_NAMES, normalise_codec, normalise_pix_fmt, stream_format
from lerobotstream.validate._findings import Finding, finding, read_code

#: a window whose largest timestamp error exceeds this share of ``tolerance_s`` gets a warning
MARGIN_WARN_SHARE = 0.5


@dataclass
class FileSummary:
    """What one MP4's headers say (aggregated per camera into the report's summary)."""

    path: str
    camera: str
    width: int | None = None
    height: int | None = None
    frames: int = 0
    sample_bytes: int = 0
    gop_lengths: dict[int, int] = field(default_factory=dict)
    """GOP length (frames from one sync sample to the next, decode order) → how many."""
    reordered: bool = False
    """Presentation order differs from decode order (B-frames)."""
    edit_list: bool = False
    faststart: bool | None = None
    max_error_s: float | None = None
    fmt: Any = None
    """``_codec.StreamFormat``: codec, pixel format."""
    table: Any = None
    """The parsed sample table (kept only while ``--decode-sample`` or the timestamp check needs it)."""
    checked: list = field(default_factory=list)
    """``(EpisodeWindow, WindowCheck)`` of each window (kept with ``table``)."""


def check_video(
    source: Any,
    path: str,
    camera: str,
    windows: Sequence[EpisodeWindow],
    meta: Any,
    *,
    tolerance_s: float,
    full_selection: bool,
    keep_table: bool = False,
) -> tuple[list[Finding], FileSummary | None]:
    """Findings of one MP4 and its summary (None when the file could not be parsed).

    A file that is missing was reported by the metadata checks; here it is skipped.
    """
    eps = sorted({w.episode_index for w in windows})
    one = eps[0] if len(eps) == 1 else None
    where = dict(camera=camera, file=path, episodes=eps, episode_index=one)
    try:
        size = int(source.size(path))
    except FileNotFoundError:
        return [], None  # reported once as file_missing
    except (SourceError, OSError) as e:
        return [finding(read_code(e, "video_unreadable"), f"{path}: cannot be listed: {e}", **where)], None
    read = RecordingRead(lambda offset, n: source.read(path, offset, n))
    out: list[Finding] = []
    try:
        table = parse_mp4(read, size, path=path)  # the sidecar build's parser: headers only
    except Mp4UnsupportedError as e:
        return [finding("video_unsupported", f"{path}: {e}", **where)], None
    except (LeRobotStreamError, SourceError, OSError, ValueError) as e:
        cut = truncated_box(top_level_boxes(read, size)[0], size)
        if cut is not None or isinstance(e, Mp4TruncatedError):  # a cut file, whatever its box order
            what = (
                f"its {cut.kind} box at byte {cut.offset:,} declares {cut.size:,} bytes, "
                f"{cut.end - size:,} more than the file has: "
                if cut is not None
                else ""
            )
            return [finding("video_truncated", f"{path} ({size:,} bytes): {what}{e}", **where)], None
        if isinstance(e, Mp4InconsistentTablesError):
            return [finding("video_tables", f"{path}: {e}", **where)], None
        return [finding(read_code(e, "video_unreadable"), f"{path}: {type(e).__name__}: {e}", **where)], None
    boxes, complete = top_level_boxes(read, size)
    tables_wrong = layout_problems(table, boxes, complete, num_tracks(read, table))
    read.chunks.clear()
    s = FileSummary(path, camera)
    s.faststart = bool(getattr(table, "faststart", False))
    n = int(np.asarray(table.offset).shape[0])
    s.frames = n
    offsets, sizes = np.asarray(table.offset, dtype=np.int64), np.asarray(table.size, dtype=np.int64)
    s.sample_bytes = int(sizes.sum())
    end = int((offsets + sizes).max()) if n else 0
    if end > size:
        text = f"{path} ({size:,} bytes): its samples run to byte {end:,} — {end - size:,} bytes are missing"
        out.append(finding("video_truncated", text, **where))
    elif tables_wrong:
        more = f" (and {len(tables_wrong) - 1} more problem(s))" if len(tables_wrong) > 1 else ""
        out.append(finding("video_tables", f"{path}: {tables_wrong[0]}{more}", **where))
    sync = np.flatnonzero(np.asarray(table.is_sync, dtype=bool))
    lengths, counts = np.unique(np.diff(np.append(sync, n)), return_counts=True)  # none without a sync sample
    s.gop_lengths = {int(k): int(c) for k, c in zip(lengths, counts)}
    order = np.asarray(table.presentation_order, dtype=np.int64)
    s.reordered = bool(n and not np.array_equal(order, np.arange(n)))
    s.edit_list = bool(int(table.media_time or 0) or int(getattr(table, "empty_edit_movie_ticks", 0) or 0))
    fmt = stream_format(bytes(table.stsd), str(table.codec))
    s.fmt, (s.width, s.height) = fmt, displayed_size(table)
    out.extend(_format_findings(meta, camera, path, fmt, s.width, s.height, where))
    checked: list = []
    # the sidecar check: frame size against info.json's shape, fps, windows, overlaps
    problems = validate_source(
        table, windows, float(meta.fps), tolerance_s, path, checked=checked, features=meta.features
    )
    fps_wrong = any(p.code == "fps_mismatch" for p in problems)
    drifting = [p.episode_index for p in problems if p.code == "timestamp_drift"]
    for p in problems:
        if fps_wrong and p.code == "timestamp_drift":
            continue  # the wrong fps is the defect: its finding counts these windows
        if p.code == "fps_mismatch":
            more = f"; {len(drifting)} episode window(s) drift as a result" if drifting else ""
            out.append(finding("fps_mismatch", f"{path}: {p.message}{more}", **where))
            continue
        if p.code == "shape_mismatch":  # the file's, every episode in it
            out.append(finding("shape_mismatch", f"{path}: {p.message}", **where))
            continue
        text = str(p) if p.episode_index is not None else f"{path}: {p.message}"  # "episode 3, camera c, file f: "
        out.append(finding(p.code, text, episode_index=p.episode_index, camera=camera, file=path, episodes=p.episodes))
    margins = [(w_, r.max_error_s) for w_, r in checked if r.reason is None and r.max_error_s is not None]
    if margins:
        s.max_error_s = max(e for _, e in margins)
        near = [w_.episode_index for w_, e in margins if e > MARGIN_WARN_SHARE * tolerance_s]
        if near:
            text = (
                f"{path}: {len(near)} episode window(s) have a frame more than {MARGIN_WARN_SHARE:.0%} of "
                f"tolerance_s={tolerance_s} s from its timestamp (largest {s.max_error_s:.3g} s)"
            )
            out.append(finding("timestamp_margin", text, camera=camera, file=path, episodes=near))
    if full_selection and checked:  # the overlap message already lists the unclaimed frames
        overlap = any(p.code == "episode_overlap" for p in problems)
        out.extend(
            f
            for f in _gap_findings(table, checked, meta, camera, path, n)
            if not (overlap and f.code == "unclaimed_frames")
        )
    if keep_table:
        s.table, s.checked = table, checked
    return out, s


def _gap_findings(table: Any, checked: list, meta: Any, camera: str, path: str, n: int) -> list[Finding]:
    """Frames of the file no episode claims, and the shifted windows they reveal (full selection).

    A run of consecutive episodes whose windows were all moved ``g`` frames on leaves ``g``
    frames before it that no episode claims, and ends ``g`` frames into the next episode's window
    (or ``g`` frames past the end of the file): those episodes stream frames that are not their
    own. The same holds for one episode whose ``from_timestamp`` alone moved (its ``to_timestamp -
    from_timestamp`` is then short by the gap). Each such run is one ``window_shift`` error; other
    unclaimed frames are a warning.
    """
    pts = np.asarray(table.pts_s, dtype=np.float64)[np.asarray(table.presentation_order, dtype=np.int64)]
    fps = float(meta.fps)
    ranges = []  # (first frame, end (may pass n), window, window resolved)
    for w, r in checked:
        k = r.first_frame if r.first_frame is not None else int(np.clip(np.searchsorted(pts, w.from_timestamp), 0, n))
        ranges.append((k, k + w.length, w, r.reason is None))
    ranges.sort(key=lambda t: (t[0], t[1]))
    gaps, runs, singles, pos, run = [], [], [], 0, None  # run: (gap size, gap start, index of its first range)
    for idx, (a, b, w, good) in enumerate(ranges):
        if a > pos:
            gaps.append((pos, min(a, n)))
            run = (a - pos, pos, idx)
            ep = meta.episode(w.episode_index)
            video = ep.videos.get(camera)
            short = (ep.length / fps - (video.to_timestamp - video.from_timestamp)) * fps if video else 0.0
            if good and abs(short - (a - pos)) < 0.5:  # from_timestamp alone moved (unless a run covers it)
                why = f"to_timestamp - from_timestamp is {a - pos} frame(s) short of length/fps"
                singles.append((a - pos, pos, [w], why))
        elif a < pos and run is not None:
            if pos - a == run[0] and any(x[3] for x in ranges[run[2] : idx]):  # else their own errors say it
                nxt = f"ends {run[0]} frame(s) into episode {w.episode_index}'s window"
                runs.append((run[0], run[1], [x[2] for x in ranges[run[2] : idx]], f"the run {nxt}"))
            run = None
        pos = max(pos, b)
    if run is not None and pos - n == run[0] and any(x[3] for x in ranges[run[2] :]):
        why = f"the run ends {run[0]} frame(s) past the end of the file"
        runs.append((run[0], run[1], [x[2] for x in ranges[run[2] :]], why))
    if pos < n:
        gaps.append((pos, n))
    in_runs = {w.episode_index for *_g, ws, _why in runs for w in ws}
    runs += [r for r in singles if r[2][0].episode_index not in in_runs]
    out = []
    for g, start, ws, why in runs:
        eps = [w.episode_index for w in ws]
        first = ws[0]
        label = f"episode {eps[0]}" if len(eps) == 1 else f"{len(eps)} episodes {eps[0]}..{eps[-1]}"
        text = (
            f"{label}, camera {camera}, file {path}: window(s) start {g} frame(s) late — frames [{start}, "
            f"{start + g}) belong to no episode and {why}: the from_timestamp(s) were shifted by {g}/{meta.fps} s, "
            f"so each streams frames that are not its own (episode {first.episode_index}: frames [{start + g}, "
            f"{start + g + first.length}) instead of [{start}, {start + first.length}))"
        )
        out.append(finding("window_shift", text, episode_index=eps[0], camera=camera, file=path, episodes=eps))
    if gaps and not runs and all(good for *_r, good in ranges):  # a failed window's frames are not known
        nfree = sum(b - a for a, b in gaps)
        shown = ", ".join(f"[{a}, {b})" for a, b in gaps[:4]) + (" ..." if len(gaps) > 4 else "")
        after = [w.episode_index for a, _b, w, _ok in ranges if any(a == g1 for _g0, g1 in gaps)]
        text = f"{path}: {nfree} of its {n} frames belong to no episode: {shown}"
        text += f"; the episodes after the gaps: {after[:8]}" if after else ""
        out.append(finding("unclaimed_frames", text, camera=camera, file=path))
    return out


def _format_findings(meta: Any, camera: str, path: str, fmt: Any, w: int, h: int, where: dict) -> list[Finding]:
    """Codec, pixel format and frame size of the file against ``info.json`` (``where``: the
    finding fields naming the file and the episodes it holds)."""
    feat = meta.features.get(camera) or {}
    info = feat.get("info") or {}
    found: list[tuple[str, str]] = []
    if fmt.fourcc not in CODEC_NAMES:
        found.append(("codec_unsupported", f"codec {fmt.fourcc!r} cannot be decoded here (AV1, H.264 and HEVC can)"))
    want_codec = normalise_codec(info.get("video.codec"))
    if want_codec is not None and fmt.fourcc in CODEC_NAMES and want_codec != fmt.codec:
        said = f"info.json says video.codec={info.get('video.codec')!r} for {camera}"
        found.append(("codec_mismatch", f"{said}, the file is {fmt.codec} ({fmt.fourcc})"))
    if is_depth_feature(feat) and fmt.pix_fmt is not None and fmt.pix_fmt not in DEPTH_PIX_FMTS:
        only = f"depth maps decode losslessly only as {', '.join(DEPTH_PIX_FMTS)}"
        found.append(("depth_unsupported", f"depth camera {camera} is encoded as {fmt.codec} {fmt.pix_fmt}; {only}"))
    want_pix = normalise_pix_fmt(info.get("video.pix_fmt"))
    if want_pix is not None and fmt.pix_fmt is not None and want_pix != fmt.pix_fmt:
        said = f"info.json says video.pix_fmt={info.get('video.pix_fmt')!r} for {camera}"
        found.append(("pix_fmt_mismatch", f"{said}, the file is {fmt.pix_fmt}"))
    out = [finding(code, f"{path}: {text}", **where) for code, text in found]
    shape = tuple(int(x) for x in (feat.get("shape") or ()))  # a 3-d shape: validate_source's check
    for key, value in (("video.height", h), ("video.width", w)):
        if info.get(key) is not None and int(info[key]) != value and len(shape) != 3:
            text = f"{path}: {key}={info[key]} in info.json, the file's is {value} (training reads the file's)"
            out.append(finding("shape_mismatch", text, severity="warning", **where))  # training tolerates it
    return out


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
