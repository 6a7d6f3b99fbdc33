"""Checks of one MP4 from its headers: presence, box layout, sample tables, stream format against
``info.json``, and every episode window that uses it (``sidecar._validate.validate_source``'s
window, fps and overlap checks, collected instead of raised).

Sample placement is checked from the bytes the parser already read (the ``moov``, the top-level box
headers): every sample inside an ``mdat``, none overlapping, and in a one-track file the sizes summing
to what ``mdat`` holds after its first sample, so a flipped ``stco``/``co64``/``stsz`` byte is named
before any payload is read (training meets it in ``check_sample_framing``). A cut file has a
top-level box that declares more bytes than the file has.
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
    """:class:`StreamFormat`: codec, pixel format."""
    nvdec: dict[str, str] = field(default_factory=dict)
    """:func:`nvdec_support` of the file."""
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
        cut = next((b for b in top_level_boxes(read, size)[0] if b.end > size), None)  # declares more than the file has
        if cut is not None or isinstance(e, Mp4TruncatedError):  # a cut file, whatever its box order
            what = ""
            if cut is not None:
                what = f"its {cut.kind} box at byte {cut.offset:,} declares {cut.size:,} bytes, {cut.end - size:,} more than the file has: "
            return [finding("video_truncated", f"{path} ({size:,} bytes): {what}{e}", **where)], None
        if isinstance(e, Mp4InconsistentTablesError):
            return [finding("video_tables", f"{path}: {e}", **where)], None
        return [finding(read_code(e, "video_unreadable"), f"{path}: {type(e).__name__}: {e}", **where)], None
    boxes, complete = top_level_boxes(read, size)
    tables_wrong = layout_problems(table, boxes, complete, num_tracks(read, table))
    read.chunks.clear()
    offsets, sizes = np.asarray(table.offset, dtype=np.int64), np.asarray(table.size, dtype=np.int64)
    n = int(offsets.shape[0])
    s = FileSummary(path, camera, frames=n, sample_bytes=int(sizes.sum()))
    s.faststart = bool(getattr(table, "faststart", False))
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
    s.nvdec = nvdec_support(fmt, depth_map=is_depth_feature(meta.features.get(camera) or {}))
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
        if p.code in ("fps_mismatch", "shape_mismatch"):  # the file's, every episode in it
            drift = drifting and p.code == "fps_mismatch"
            more = f"; {len(drifting)} episode window(s) drift as a result" if drift else ""
            out.append(finding(p.code, f"{path}: {p.message}{more}", **where))
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
        gaps = _gap_findings(table, checked, meta, camera, path, n)
        out.extend(f for f in gaps if not (overlap and f.code == "unclaimed_frames"))
    if keep_table:
        s.table, s.checked = table, checked
    return out, s


def _gap_findings(table: Any, checked: list, meta: Any, camera: str, path: str, n: int) -> list[Finding]:
    """Frames of the file no episode claims, and the shifted windows they reveal (full selection).

    A run of consecutive episodes whose windows all moved ``g`` frames on leaves ``g`` unclaimed
    frames before it and ends ``g`` frames into the next window (or past the end of the file); so
    does one episode whose ``from_timestamp`` alone moved (its ``to_timestamp - from_timestamp`` is
    short by the gap). Each such run is one ``window_shift`` error; other unclaimed frames warn.
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
    said_codec, said_pix = info.get("video.codec"), info.get("video.pix_fmt")
    want_codec = None if said_codec is None else str(said_codec).strip().lower()
    want_codec = _CODEC_ALIASES.get(want_codec, want_codec)  # av1/h264/hevc, or the lowercased name
    if want_codec is not None and fmt.fourcc in CODEC_NAMES and want_codec != fmt.codec:
        said = f"info.json says video.codec={info.get('video.codec')!r} for {camera}"
        found.append(("codec_mismatch", f"{said}, the file is {fmt.codec} ({fmt.fourcc})"))
    if is_depth_feature(feat) and fmt.pix_fmt is not None and fmt.pix_fmt not in DEPTH_PIX_FMTS:
        only = f"depth maps decode losslessly only as {', '.join(DEPTH_PIX_FMTS)}"
        found.append(("depth_unsupported", f"depth camera {camera} is encoded as {fmt.codec} {fmt.pix_fmt}; {only}"))
    # compared by what is stored: yuvj420p (full range) is yuv420p
    want_pix = None if said_pix is None else str(said_pix).strip().lower().replace("yuvj", "yuv")
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
            first = f"the last {tail:,} bytes of mdat, after sample {int(order[-1])}"
            if gaps.shape[0]:
                g = int(gaps[0])
                first = f"bytes [{int(se[g]):,}, {int(so[g + 1]):,}) between samples {int(order[g])} and {int(order[g + 1])}"
            out.append(
                f"the file's one track has samples summing to {int(size.sum()):,} bytes, but mdat holds "
                f"{held:,} bytes from its first sample on; uncovered: {first}"
            )
    return out


# --- the stream format from the sample description (SampleTable.stsd; never the payload) ---
#: sample-entry fourcc → codec name as LeRobot writes it in ``info.json`` (``video.codec``)
CODEC_NAMES = {"av01": "av1", "avc1": "h264", "avc3": "h264", "hev1": "hevc", "hvc1": "hevc"}
#: codec-name aliases found in ``info.json`` (FFmpeg encoder or long names)
_CODEC_ALIASES = {
    **dict.fromkeys(("libsvtav1", "libaom-av1", "av01"), "av1"),
    **dict.fromkeys(("libx264", "avc", "avc1", "h.264"), "h264"),
    **dict.fromkeys(("libx265", "h265", "h.265", "hev1", "hvc1"), "hevc"),
}
#: GPU families a training run commonly gets, and the codecs their NVDEC decodes (NVIDIA Video
#: Codec SDK 13 "NVDEC Hardware Capabilities": Turing/GA100/Hopper have no AV1 decode; GA10x,
#: Ada and Blackwell have it; H.264 High10/422 and HEVC 4:2:2 only on Blackwell).
GPU_FAMILIES = ("A100", "H100/H200", "A10/L4/L40/RTX 30-40", "Blackwell")


@dataclass(frozen=True)
class StreamFormat:
    """A video track's format from its sample description."""

    codec: str
    """``av1``/``h264``/``hevc``, or the fourcc of another codec."""
    fourcc: str
    pix_fmt: str | None
    """FFmpeg's name (``yuv420p``, ``yuv420p10le``, ``gray12le``...); None when not recognisable."""
    bit_depth: int | None
    chroma: str | None
    """``4:0:0``, ``4:2:0``, ``4:2:2`` or ``4:4:4``."""


def _child_boxes(data: bytes, start: int) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    pos = start
    while pos + 8 <= len(data):
        size, kind = struct.unpack_from(">I4s", data, pos)
        if size < 8 or pos + size > len(data):
            break
        out.setdefault(kind.decode("latin-1"), data[pos + 8 : pos + size])
        pos += size
    return out


_CHROMA = {0: "4:0:0", 1: "4:2:0", 2: "4:2:2", 3: "4:4:4"}


def _pix_fmt(chroma: str | None, depth: int | None) -> str | None:
    if chroma is None or depth is None:
        return None
    base = "gray" if chroma == "4:0:0" else "yuv" + chroma.replace(":", "")[:3] + "p"
    return base if depth == 8 else f"{base}{depth}le"


def stream_format(stsd: bytes, fourcc: str) -> StreamFormat:
    """The format of a track from its ``stsd`` payload (version/flags, entry count, first entry)."""
    codec = CODEC_NAMES.get(fourcc, fourcc)
    chroma = depth = None
    if fourcc not in CODEC_NAMES:  # an encrypted or other codec's entry: its boxes are not read
        return StreamFormat(codec, fourcc, None, None, None)
    entry = stsd[8:] if len(stsd) >= 16 else b""
    boxes = _child_boxes(entry, 8 + 78) if len(entry) >= 86 else {}  # sample entry header + VisualSampleEntry
    try:
        if "av1C" in boxes:
            b = boxes["av1C"]
            high, twelve, mono = (b[2] >> 6) & 1, (b[2] >> 5) & 1, (b[2] >> 4) & 1
            sx, sy = (b[2] >> 3) & 1, (b[2] >> 2) & 1
            depth = (12 if twelve else 10) if high else 8
            chroma = "4:0:0" if mono else {(1, 1): "4:2:0", (1, 0): "4:2:2", (0, 0): "4:4:4"}.get((sx, sy))
        elif "hvcC" in boxes:
            b = boxes["hvcC"]
            chroma, depth = _CHROMA.get(b[16] & 3), (b[17] & 7) + 8
        elif "avcC" in boxes:
            chroma, depth = _avc_format(boxes["avcC"])
    except (IndexError, ValueError, struct.error):  # a short configuration record: format unknown
        chroma = depth = None
    return StreamFormat(codec, fourcc, _pix_fmt(chroma, depth), depth, chroma)


_AVC_HIGH_PROFILES = (100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135)


def _sps_chroma_depth(nal: bytes) -> tuple[int, int]:
    """chroma_format_idc and luma bit depth of an H.264 SPS NAL unit (ITU-T H.264 7.3.2.1.1)."""
    rbsp = nal[1:].replace(b"\x00\x00\x03", b"\x00\x00")  # emulation prevention bytes
    bits = "".join(f"{x:08b}" for x in rbsp[3:40])  # after profile_idc, constraint flags, level_idc
    pos = 0

    def ue() -> int:
        nonlocal pos
        zeros = 0
        while bits[pos] == "0":
            zeros += 1
            pos += 1
        value = int(bits[pos : pos + zeros + 1], 2) - 1
        pos += zeros + 1
        return value

    ue()  # seq_parameter_set_id
    chroma = ue()
    if chroma == 3:
        pos += 1  # separate_colour_plane_flag
    return chroma, ue() + 8


def _avc_format(b: bytes) -> tuple[str | None, int | None]:
    """Chroma and bit depth from ``avcC``: its High-profile extension, else the first SPS."""
    profile = b[1]
    if profile not in _AVC_HIGH_PROFILES:
        return "4:2:0", 8  # Baseline/Main/Extended: always 8-bit 4:2:0
    pos = 5
    nsps = b[pos] & 0x1F
    pos += 1
    sps = []
    for _ in range(nsps):
        n = struct.unpack_from(">H", b, pos)[0]
        sps.append(b[pos + 2 : pos + 2 + n])
        pos += 2 + n
    npps = b[pos]
    pos += 1
    for _ in range(npps):
        pos += 2 + struct.unpack_from(">H", b, pos)[0]
    if pos + 2 <= len(b):
        return _CHROMA.get(b[pos] & 3), (b[pos + 1] & 7) + 8
    if sps:  # the extension is optional in practice (older writers omit it)
        chroma, depth = _sps_chroma_depth(sps[0])
        return _CHROMA.get(chroma), depth
    return None, None


def nvdec_support(fmt: StreamFormat, *, depth_map: bool = False) -> dict[str, str]:
    """Per GPU family (:data:`GPU_FAMILIES`): ``"nvdec"`` when its NVDEC decodes the stream,
    ``"cpu"`` when the decode falls back to the CPU."""
    if depth_map:  # depth maps decode with PyAV on the CPU (their 12-bit codes are kept exactly)
        return {g: "cpu" for g in GPU_FAMILIES}
    c, d = fmt.chroma, fmt.bit_depth or 8
    if fmt.codec == "h264":
        ok = {g: c in (None, "4:2:0") and d == 8 for g in GPU_FAMILIES}
        ok["Blackwell"] = c in (None, "4:2:0", "4:2:2") and d <= 10
    elif fmt.codec == "hevc":
        ok = {g: c in (None, "4:2:0", "4:4:4") and d <= 12 for g in GPU_FAMILIES}
        ok["Blackwell"] = c in (None, "4:2:0", "4:2:2", "4:4:4") and d <= 12
    elif fmt.codec == "av1":
        ok = {
            "A100": False,
            "H100/H200": False,
            "A10/L4/L40/RTX 30-40": c in (None, "4:2:0", "4:0:0") and d <= 10,
            "Blackwell": c in (None, "4:2:0", "4:0:0") and d <= 10,
        }
    else:
        ok = {g: False for g in GPU_FAMILIES}
    return {g: "nvdec" if v else "cpu" for g, v in ok.items()}
