"""Validation of a sidecar against the dataset metadata (at build and at open).

For every selected episode and camera, the window ``[from_timestamp, from_timestamp + length/fps)``
must resolve to exactly ``length`` frames of the video, each strictly within ``tolerance_s`` of
``from_timestamp + i/fps`` (and be the frames ``mp4.episode_frame_range`` streams); ``info.json``'s
fps must agree with the sample durations; the frames' displayed size must be the camera's declared
``shape``; and the selected episodes' frame ranges inside one file must be disjoint. Presentation
times stay in media ticks and ``fps`` is a rational: only the final difference becomes a float.
Problems are collected and raised once as :class:`~lerobotstream.errors.SidecarValidationError`
naming episode, camera and file.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from lerobotstream.errors import Problem, SidecarStaleError, SidecarValidationError

#: relative disagreement allowed between info.json fps and the video's median frame rate
FPS_RELATIVE_TOLERANCE = 1e-3
_MAX_LISTED = 8


@dataclass(frozen=True)
class EpisodeWindow:
    """One (episode, camera) use of a source MP4, from the metadata."""

    episode_index: int
    camera: str
    path: str
    from_timestamp: float  # episode start inside the concatenated video, seconds (metadata, float64)
    length: int  # frames of the episode (metadata)


def fps_fraction(fps: float | int) -> Fraction:
    """``fps`` as an exact rational (30 → 30/1, 29.97002997 → 30000/1001)."""
    return Fraction(fps).limit_denominator(100_000)


def episode_windows(meta: Any) -> list[EpisodeWindow]:
    """Every (episode, camera) window of the metadata's selected episodes, episode order."""
    return [
        EpisodeWindow(int(ep.episode_index), cam, video.path, float(video.from_timestamp), int(ep.length))
        for ep in meta.episodes
        for cam, video in sorted(ep.videos.items())
    ]


def _presented_ticks(table: Any) -> np.ndarray:
    order = np.asarray(table.presentation_order, dtype=np.int64)
    return np.asarray(table.pts_ticks, dtype=np.int64)[order]


def _frame_time(ticks: int, table: Any) -> Fraction:
    """Exact presentation time of a frame (seconds) from its PTS ticks."""
    t = Fraction(int(ticks), int(table.media_timescale))
    empty = int(getattr(table, "empty_edit_movie_ticks", 0) or 0)
    if empty:
        t += Fraction(empty, int(getattr(table, "movie_timescale", 1) or 1))
    return t


def check_fps(table: Any, fps: float, path: str) -> str | None:
    """None when the median frame duration of the video agrees with ``fps``, else the reason."""
    p = _presented_ticks(table)
    if p.shape[0] < 2:
        return None
    d = np.diff(p)
    d = d[d > 0]
    if d.shape[0] == 0:
        return "every frame has the same presentation time"
    median = int(np.median(d))
    ts = int(table.media_timescale)
    video_fps = Fraction(ts, median)
    want = fps_fraction(fps)
    if abs(float(video_fps - want)) > FPS_RELATIVE_TOLERANCE * float(want):
        return (
            f"info.json fps={fps} but the video plays at {float(video_fps):.6g} fps "
            f"(median frame duration {median}/{ts} s)"
        )
    return None


@dataclass(frozen=True)
class WindowCheck:
    """What :func:`check_window_detail` found for one episode window: ``reason`` (None when good),
    ``code`` (the kind of problem, see :func:`validate_source`), ``first_frame`` (in presentation
    order; None when bad) and ``max_error_s`` (largest |frame PTS - (from_timestamp + i/fps)|,
    seconds; None when unknown)."""

    reason: str | None
    code: str | None
    first_frame: int | None
    max_error_s: float | None = None


def check_window_detail(table: Any, from_timestamp: float, length: int, fps: float, tolerance_s: float) -> WindowCheck:
    """Whether the episode window resolves to exactly ``length`` frames within tolerance (by the
    decoder's rule, ``mp4.within_tolerance``: strictly under ``tolerance_s``, LeRobot's); the reason
    names frame counts and timestamps in seconds."""
    from lerobotstream.mp4._tolerance import within_tolerance

    p = _presented_ticks(table)
    n = int(p.shape[0])
    if length <= 0:
        return WindowCheck(f"episode length {length} is not positive", "bad_length", None)
    if n == 0:
        return WindowCheck("the video has no frames", "no_frames", None)
    start = Fraction(from_timestamp)  # the exact float64 value of the metadata
    first_s, last_s = float(_frame_time(p[0], table)), float(_frame_time(p[-1], table))
    # nearest frame to from_timestamp (exact comparison around the float search)
    pts_s = np.asarray(table.pts_s, dtype=np.float64)[np.asarray(table.presentation_order, dtype=np.int64)]
    k = int(np.searchsorted(pts_s, float(from_timestamp)))
    cands = [c for c in (k - 1, k) if 0 <= c < n] or [n - 1]
    k0 = min(cands, key=lambda c: (abs(_frame_time(p[c], table) - start), c))
    off0 = _frame_time(p[k0], table) - start  # exact, seconds
    if not within_tolerance(off0, Fraction(tolerance_s)):  # the decoder's rule (strictly under tolerance_s)
        where = (
            "past the end of the video"
            if start > _frame_time(p[-1], table)
            else "before the first frame"
            if start < _frame_time(p[0], table)
            else "between frames"
        )
        return WindowCheck(
            f"from_timestamp={from_timestamp!r} s lies {where} (nearest frame {k0} at {float(off0 + start):.6f} s, "
            f"off by {float(off0):.6f} s; video PTS range [{first_s:.6f}, {last_s:.6f}] s, {n} frames) — "
            "is it shifted by a previous file's duration?",
            "window_off_frame" if where == "between frames" else "window_outside_file",
            None,
        )
    if k0 + length > n:
        return WindowCheck(
            f"the video is shorter than the metadata says: the episode needs frames [{k0}, {k0 + length}) "
            f"({length} frames from {from_timestamp!r} s at {fps} fps) but the file has {n} frames "
            f"ending at {last_s:.6f} s",
            "video_short",
            None,
        )
    fr = fps_fraction(fps)
    ts = int(table.media_timescale)
    # err_i = pts(k0+i) - (start + i/fps) = off0 + (dticks_i/ts - i*den/num)
    #       = off0 + (dticks_i*num - i*den*ts) / (num*ts)       (integers)
    i = np.arange(length, dtype=np.int64)
    dticks = p[k0 : k0 + length] - p[k0]
    num, den = fr.numerator, fr.denominator
    bound = max(int(np.abs(dticks).max()) * num, (length - 1) * den * ts)
    if bound < 2**62:
        numer = dticks * num - i * (den * ts)
        err = float(off0) + numer.astype(np.float64) / float(num * ts)
    else:  # pathological scales: exact Python integers
        err = np.array(
            [float(off0 + Fraction(int(d) * num - int(j) * den * ts, num * ts)) for d, j in zip(dticks, i)],
            dtype=np.float64,
        )
    bad = np.flatnonzero(~within_tolerance(err, tolerance_s))
    if bad.shape[0]:
        j = int(bad[0])
        want = float(start + j * Fraction(den, num))
        return WindowCheck(
            f"{bad.shape[0]} of {length} frames miss their timestamp by tolerance_s={tolerance_s} s or more; first: "
            f"frame {j} of the episode should play at {want:.6f} s, the video's frame {k0 + j} plays at "
            f"{want + float(err[j]):.6f} s (off by {float(err[j]):+.6f} s)",
            "timestamp_drift",
            None,
            float(np.abs(err).max()),
        )
    return WindowCheck(None, None, k0, float(np.abs(err).max()))


def displayed_size(table: Any) -> tuple[int, int]:
    """``(width, height)`` of a video track's frames as decoders return them: the sample entry's
    size, swapped by a 90° display matrix (decoders rotate by it; the mini-MP4 keeps it)."""
    w, h = int(table.width), int(table.height)
    m = list(getattr(table, "matrix", None) or [])
    rotated = len(m) == 9 and m[0] == 0 and m[4] == 0 and (m[1] != 0 or m[3] != 0)
    return (h, w) if rotated else (w, h)


def check_frame_size(table: Any, feature: Mapping[str, Any] | None, camera: str) -> str | None:
    """None when the video's frames (:func:`displayed_size`, from the track's sample entry: no
    frame is decoded) have the height and width of the camera's declared ``shape`` in
    ``info.json`` (LeRobot's ``[height, width, channels]``; channel-first is read too:
    :func:`~lerobotstream.features.frame_hwc`), or when no 3-d shape is declared; else the reason."""
    from lerobotstream.features import frame_hwc

    hwc = frame_hwc(feature or {})
    w, h = displayed_size(table)
    if hwc is None or hwc[:2] == (h, w):
        return None
    return (
        f"the video's frames are {w}x{h} (width x height) but meta/info.json declares shape "
        f"{[int(x) for x in feature['shape']]} for {camera} (height {hwc[0]}, width {hwc[1]}); the "
        "stream would return frames of another shape than its features say: fix the shape in meta/info.json "
        "([height, width, channels]) or re-encode the video"
    )


def validate_source(
    table: Any,
    windows: Sequence[EpisodeWindow],
    fps: float,
    tolerance_s: float,
    path: str,
    *,
    checked: list | None = None,
    features: Mapping[str, Any] | None = None,
) -> list[Problem]:
    """Problems of one source MP4: its frame size against the camera's declared shape, its fps,
    every episode window that uses it, then whether those windows' frame ranges overlap
    (:func:`check_disjoint`). The sidecar build and open raise them (:func:`raise_problems`),
    ``lerobotstream.validate`` reports each.

    Each is a :class:`~lerobotstream.errors.Problem` whose ``code`` names its kind:
    ``shape_mismatch`` (``episodes``: every episode of the file), ``fps_mismatch``,
    ``window_outside_file``, ``window_off_frame``, ``video_short``, ``timestamp_drift``,
    ``window_frames``, ``bad_length``, ``no_frames``, ``episode_overlap`` (``episodes``: both).

    Args:
        checked: when a list, ``(window, WindowCheck)`` of every window is appended to it
            (the validator's frame ranges and timestamp margins).
        features: ``info.json``'s features (the camera is the windows'); None: the frame size is
            not checked.
    """
    from lerobotstream.mp4.spans import episode_frame_range

    problems = []
    first = windows[0] if windows else None
    if first is not None and features is not None:
        reason = check_frame_size(table, features.get(first.camera), first.camera)
        if reason is not None:
            eps = tuple(sorted({w.episode_index for w in windows}))
            problems.append(Problem("shape_mismatch", reason, first.episode_index, first.camera, path, episodes=eps))
    reason = check_fps(table, fps, path)
    if reason is not None:
        ep, cam = (first.episode_index, first.camera) if first else (None, None)
        problems.append(Problem("fps_mismatch", reason, ep, cam, path))
    claimed: list[tuple[int, int, EpisodeWindow]] = []
    for w in windows:
        res = check_window_detail(table, w.from_timestamp, w.length, fps, tolerance_s)
        reason, code, k0 = res.reason, res.code, res.first_frame
        if reason is None:
            a, b = episode_frame_range(table, w.from_timestamp, w.length, fps, tolerance_s)
            if (a, b) != (k0, k0 + w.length):
                code = "window_frames"
                reason = (
                    f"the episode's window holds {b - a} frame(s) [{a}, {b}) of the video, not its "
                    f"{w.length} frames [{k0}, {k0 + w.length})"
                )
        if checked is not None:
            checked.append((w, res))
        if reason is not None:
            problems.append(Problem(code or "window_frames", reason, w.episode_index, w.camera, path))
        else:
            claimed.append((k0, k0 + w.length, w))
    problems.extend(check_disjoint(claimed, len(table.presentation_order), path))
    return problems


def _ranges(ranges: Sequence[tuple[int, int]]) -> str:
    shown = ", ".join(f"[{a}, {b})" for a, b in ranges[:_MAX_LISTED])
    return shown + (f" and {len(ranges) - _MAX_LISTED} more" if len(ranges) > _MAX_LISTED else "")


def check_disjoint(claimed: Sequence[tuple[int, int, EpisodeWindow]], num_frames: int, path: str) -> list[Problem]:
    """One problem per pair of episodes whose frame ranges overlap inside the video ``path`` of
    ``num_frames`` frames, naming both episodes, the frames both claim and the frames no selected
    episode claims. ``claimed``: ``(frame_start, frame_stop, window)`` per good window of the file
    (presentation order, half-open)."""
    if len(claimed) < 2:
        return []
    order = sorted(claimed, key=lambda c: (c[0], c[1], c[2].episode_index))
    overlaps = []
    reach = order[0]  # the range reaching furthest so far
    for cur in order[1:]:
        if cur[0] < reach[1]:
            overlaps.append((reach, cur))
        if cur[1] > reach[1]:
            reach = cur
    if not overlaps:
        return []
    unclaimed, pos = [], 0
    for a, b, _w in order:
        if a > pos:
            unclaimed.append((pos, a))
        pos = max(pos, b)
    if pos < num_frames:
        unclaimed.append((pos, num_frames))
    gaps = (
        f"; frames no selected episode claims: {_ranges(unclaimed)}"
        if unclaimed
        else "; every frame of the file is claimed"
    )
    out = []
    for (a0, a1, wa), (b0, b1, wb) in overlaps:
        lo, hi = b0, min(a1, b1)
        out.append(
            Problem(
                "episode_overlap",
                f"episodes {wa.episode_index} and {wb.episode_index} overlap in this file: episode {wa.episode_index} "
                f"claims frames [{a0}, {a1}) (from_timestamp={wa.from_timestamp!r} s) and episode {wb.episode_index} "
                f"frames [{b0}, {b1}) (from_timestamp={wb.from_timestamp!r} s), so {hi - lo} frame(s) [{lo}, {hi}) "
                f"would be streamed as both{gaps} — is one episode's from_timestamp/to_timestamp shifted?",
                wa.episode_index,
                wa.camera,
                path,
                episodes=(wa.episode_index, wb.episode_index),
            )
        )
    return out


def raise_problems(problems: Sequence[Problem], *, sidecar: str = "") -> None:
    """Raise one SidecarValidationError listing the problems (no-op when there are none); its
    ``episode_index``, ``camera``, ``path`` are the first one's, ``problems`` holds all."""
    if not problems:
        return
    head = problems[0]
    lines = [f"  - {p}" for p in problems[:_MAX_LISTED]]
    more = f"\n  ... and {len(problems) - _MAX_LISTED} more" if len(problems) > _MAX_LISTED else ""
    where = f" ({sidecar})" if sidecar else ""
    raise SidecarValidationError(
        f"MP4 sidecar{where} disagrees with the dataset metadata in {len(problems)} place(s):\n"
        + "\n".join(lines)
        + more,
        episode_index=head.episode_index,
        camera=head.camera,
        path=head.path,
        problems=[str(p) for p in problems],
    )


def group_windows(windows: Iterable[EpisodeWindow]) -> dict[str, list[EpisodeWindow]]:
    out: dict[str, list[EpisodeWindow]] = defaultdict(list)
    for w in windows:
        out[w.path].append(w)
    return dict(out)


def validate_index(index: Any, meta: Any, *, tolerance_s: float) -> None:
    """Validate the selected episodes of ``meta`` against an opened :class:`Mp4Index`, reading
    only the sources they use, one at a time, none kept in the index.

    Raises:
        SidecarStaleError: an episode's video is not in the sidecar.
        SidecarValidationError: a window, frame count or fps disagrees (names episode, camera, file).
    """
    problems: list[Problem] = []
    for path, windows in sorted(group_windows(episode_windows(meta)).items()):
        try:
            sid = index.source_id(path)
        except KeyError:
            w = windows[0]
            raise SidecarStaleError(
                f"the MP4 sidecar {index.index_path} has no entry for {path} (episode {w.episode_index}, "
                f"camera {w.camera}); rebuild the sidecar",
                episode_index=w.episode_index,
                camera=w.camera,
                path=path,
            ) from None
        table = index.table(sid, cache=False)
        features = getattr(meta, "features", None)
        problems.extend(validate_source(table, windows, float(meta.fps), tolerance_s, path, features=features))
    raise_problems(problems, sidecar=str(getattr(index, "index_path", "")))


def validate_sidecar_file(
    npz_path: Any, meta: Any, *, tolerance_s: float, index_dir: Any = None, lock_timeout_s: float
) -> None:
    """Open a sidecar NPZ through its derived index, :func:`validate_index` it against ``meta``,
    close it (before a published copy is installed, and before one is published).

    Raises:
        SidecarSchemaError: not a readable sidecar.
        SidecarLockTimeoutError: another process held the conversion lock over ``lock_timeout_s``.
        SidecarStaleError, SidecarValidationError: from :func:`validate_index`, or the sidecar was
            rejected by a first-use verification on this node (``sidecar._verify``).
    """
    from lerobotstream.mp4._index_file import Mp4Index
    from lerobotstream.sidecar._verify import rejected_reason

    index = Mp4Index.open(npz_path, index_dir=index_dir, lock_timeout_s=lock_timeout_s)
    try:
        rejected = rejected_reason(index.index_path)
        if rejected is not None:
            raise SidecarValidationError(
                f"{npz_path}: this sidecar disagreed with an MP4's own moov when it was first used: {rejected}",
                path=str(npz_path),
            )
        validate_index(index, meta, tolerance_s=tolerance_s)
    finally:
        index.close()


def validation_note(index: Any, meta: Any, source: Any, used: Sequence[str] | None, tolerance_s: float) -> Path | None:
    """Where a successful validation of exactly these inputs is recorded beside the derived index:
    ``<index stem>.valid-<digest>``, over the library version, the index generation,
    ``tolerance_s``, the fps, the declared video shapes, every (episode, camera) window of ``meta``
    and each used video's current size and fingerprint. None when there is nothing to validate.

    Raises:
        SourceError: a used video cannot be listed (from ``source.size`` / ``source.fingerprint``).
    """
    if meta is None and source is None:
        return None
    from lerobotstream._version import __version__

    h = hashlib.sha256()
    h.update(f"lerobotstream-sidecar-validated-v1\0{__version__}\0{index.generation}\0{tolerance_s!r}\0".encode())
    if meta is not None:
        h.update(f"fps={float(meta.fps)!r}\0".encode())
        for key, feat in sorted((getattr(meta, "features", None) or {}).items()):
            if feat.get("dtype") == "video":  # the frame-size check reads the declared shapes
                h.update(f"{key}\0{feat.get('shape')!r}\0{feat.get('names')!r}\n".encode())
        for w in episode_windows(meta):
            h.update(f"{w.episode_index}\0{w.camera}\0{w.path}\0{w.from_timestamp!r}\0{w.length}\n".encode())
    if source is not None:
        h.update(b"sources\0")
        for path in used if used is not None else index.paths:
            h.update(f"{path}\0{int(source.size(path))}\0{source.fingerprint(path)}\n".encode())
    path = Path(index.index_path)
    return path.with_name(f"{path.stem}.valid-{h.hexdigest()[:32]}")
