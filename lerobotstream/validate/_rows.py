"""Checks of the per-row columns every LeRobot v3 data file has — ``episode_index``,
``frame_index``, ``index``, ``task_index``, ``timestamp`` — read projected (their column chunks only, a few
bytes per frame), and of each episode's timestamps against its video windows.

Per episode, in the order training meets them (the first that fails is the episode's one
problem): its rows (``parquet.episode_rows_problem``, the reader's own rule: row count, then
``frame_index`` exactly ``0..length-1``), its ``index`` values (``dataset_from_index +
frame_index``), its ``task_index`` values (each names a task of ``meta/tasks.parquet``), its timestamps (finite; the first 0 and each ``frame_index / fps`` within
``tolerance_s`` — LeRobot's writer), and per camera where ``from_timestamp + timestamp`` lands:
within ``tolerance_s`` of a frame (the decoder's rule, ``mp4.frames_within_tolerance``) that
is one of the episode's own. Problems of one kind become one finding listing every episode.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from lerobotstream.errors import LeRobotStreamError, Problem, SourceError
from lerobotstream.mp4._tolerance import frames_within_tolerance, within_tolerance
from lerobotstream.parquet import episode_rows_problem, index_problem, task_index_problem
from lerobotstream.validate._findings import Finding, finding, read_code

#: the small per-row columns the default run reads
ROW_COLUMNS = ("episode_index", "frame_index", "index", "task_index", "timestamp")
_LISTED = 8


def writer_timestamps(length: int, fps: float) -> np.ndarray:
    """LeRobot's writer's timestamps of an episode, as stored: ``float32(frame_index / fps)``."""
    return (np.arange(length, dtype=np.float64) / float(fps)).astype(np.float32)


def timestamp_problem(ts: np.ndarray, fps: float, tolerance_s: float) -> Problem | None:
    """What is wrong with an episode's ``timestamp`` values (rows in ``frame_index`` order), or None.

    ``data_timestamps``: a value is not finite, or not ``frame_index / fps`` within
    ``tolerance_s``; ``timestamp_shift``: the first is not 0 (the whole episode moved: LeRobot's
    map-style then reads other frames, training refuses it mid-epoch).
    """
    ts = np.asarray(ts, dtype=np.float64)
    n = int(ts.shape[0])
    if n == 0:
        return None
    finite = np.isfinite(ts)
    if not finite.all():
        k = int(np.flatnonzero(~finite)[0])
        return Problem("data_timestamps", f"{int((~finite).sum())} of {n} timestamps are not finite (row {k}: {ts[k]})")
    if not within_tolerance(ts[0], tolerance_s):
        reason = f"the timestamps start at {ts[0]:.6f} s, not 0 (shifted by {ts[0] * fps:+.3g} frame(s))"
        return Problem("timestamp_shift", reason)
    want = np.arange(n, dtype=np.float64) / float(fps)
    bad = np.flatnonzero(~within_tolerance(ts - want, tolerance_s))
    if bad.shape[0]:
        k = int(bad[0])
        return Problem(
            "data_timestamps",
            f"{bad.shape[0]} of {n} timestamps are not frame_index / fps within {tolerance_s} s; first: row "
            f"{k} has {ts[k]:.6f} s, frame_index {k} plays at {want[k]:.6f} s",
        )
    return None


def _column(table: Any, name: str) -> np.ndarray | None:
    if name not in table.column_names:
        return None
    return table.column(name).to_numpy(zero_copy_only=False)


def file_rows(
    reader: Any,
    path: str,
    episodes: Sequence[Any],
    fps: float,
    tolerance_s: float,
    full_file: bool,
    n_tasks: int | None = None,
) -> tuple[list[Problem], list[Finding], dict[int, np.ndarray | None]]:
    """The per-row problems of one data file and the timestamps of its good episodes.

    Returns ``(problems, findings, timestamps)``: one problem per episode (``episode_index`` None:
    the file's, ``episodes`` every episode it holds); findings that are no episode's problem (the
    file could not be decoded); the timestamps (float64 s) of each episode whose rows passed, None
    when they are exactly LeRobot's ``float32(frame_index / fps)``.

    Args:
        reader: ``parquet.EpisodeParquetReader`` (its projected read, ``read_columns``).
        episodes: ``EpisodeInfo`` of the selected episodes stored in ``path``.
        full_file: every episode of the file is selected: rows of no selected episode are then
            rows of no episode at all (reported with the file's row-count problems).
        n_tasks: how many tasks ``meta/tasks.parquet`` holds (None: ``task_index`` unchecked).
    """
    problems: list[Problem] = []
    timestamps: dict[int, np.ndarray | None] = {}
    eps = sorted(int(e.episode_index) for e in episodes)
    try:
        table = reader.read_columns(path, ROW_COLUMNS, episodes=None if full_file else eps)
    except (LeRobotStreamError, SourceError, OSError, ValueError) as e:
        return [], [finding(read_code(e, "data_unreadable"), f"{path}: {e}", file=path, episodes=eps)], {}
    ep_col = _column(table, "episode_index")
    if ep_col is None:
        return [], [], {}  # the footer check reports the missing column
    fi_col, ix_col, ti_col, ts_col = (_column(table, c) for c in ("frame_index", "index", "task_index", "timestamp"))
    order = np.argsort(ep_col, kind="stable")  # rows of each episode, in file order
    by_ep = ep_col[order]
    for info in sorted(episodes, key=lambda e: int(e.episode_index)):
        ep, length = int(info.episode_index), int(info.length)
        rows = order[np.searchsorted(by_ep, ep, "left") : np.searchsorted(by_ep, ep, "right")]
        problem = episode_rows_problem(ep_col[rows], None if fi_col is None else fi_col[rows], ep, length)
        if problem is not None and rows.shape[0] == 0:
            reason = f"meta/episodes says its rows are in {path}, but no row has episode_index {ep}"
            problem = Problem("data_episode_absent", reason, episode_index=ep)
        if problem is None and ix_col is not None:  # item assembly's rule, on every episode it reads
            problem = index_problem(ix_col[rows], int(info.dataset_from_index))
        if problem is None and ti_col is not None and n_tasks is not None:  # item assembly's rule too
            problem = task_index_problem(ti_col[rows], n_tasks, None if fi_col is None else fi_col[rows])
        if problem is None and ts_col is not None:
            problem = timestamp_problem(ts_col[rows], fps, tolerance_s)
        if problem is not None:
            problems.append(replace(problem, episode_index=ep, path=path))
            continue
        if ts_col is not None:
            ts = ts_col[rows]
            canonical = ts.dtype == np.float32 and np.array_equal(ts, writer_timestamps(length, fps))
            timestamps[ep] = None if canonical else np.asarray(ts, dtype=np.float64)
    if full_file:
        stray = ~np.isin(ep_col, np.asarray(eps, dtype=ep_col.dtype)) if eps else np.ones(ep_col.shape, bool)
        if stray.any():
            values = np.unique(ep_col[stray])
            shown = ", ".join(str(v) for v in values[:4].tolist()) + (" ..." if values.shape[0] > 4 else "")
            note = f"{int(stray.sum())} row(s) of the file have an episode_index no episode stored there has ({shown})"
            counts = [i for i, p in enumerate(problems) if p.code == "data_rows"]
            if counts:  # the same defect: rows moved off their episode
                problems[counts[0]] = replace(problems[counts[0]], message=f"{problems[counts[0]].message}; {note}")
            else:
                problems.append(Problem("data_rows", note, path=path, episodes=tuple(eps)))
    return problems, [], timestamps


def landing_problems(
    table: Any,
    checked: Sequence[tuple[Any, Any]],
    timestamps: dict[int, np.ndarray | None],
    fps: float,
    tolerance_s: float,
    camera: str,
    path: str,
    data_path: dict[int, str],
) -> list[Problem]:
    """Episodes of one MP4 whose ``from_timestamp + timestamp`` does not land on their own frames.

    Args:
        table: the file's sample table.
        checked: ``(EpisodeWindow, WindowCheck)`` of every window of the file (``validate_source``);
            windows with a problem of their own are skipped.
        timestamps: :func:`file_rows`' timestamps of the episodes (an episode absent: skipped).
        data_path: episode → its data file (named in the problem).
    """
    out = []
    pts, order = np.asarray(table.pts_s, dtype=np.float64), np.asarray(table.presentation_order, dtype=np.int64)
    for w, res in checked:
        ep = int(w.episode_index)
        if res.reason is not None or res.first_frame is None or ep not in timestamps:
            continue
        ts = timestamps[ep]
        ts = writer_timestamps(w.length, fps).astype(np.float64) if ts is None else ts
        q = float(w.from_timestamp) + ts
        frames, near, close = frames_within_tolerance(pts, order, q, tolerance_s)
        k0 = int(res.first_frame)
        ok = close & (frames >= k0) & (frames < k0 + w.length)
        if ok.all():
            continue
        k = int(np.flatnonzero(~ok)[0])
        f, gap = int(frames[k]), abs(float(near[k]) - float(q[k]))
        where = (
            f"frame {f} of the file, which is not one of the episode's frames [{k0}, {k0 + w.length})"
            if close[k]
            else f"no frame (the nearest, frame {f}, is {gap:.6f} s away)"
        )
        out.append(
            Problem(
                "timestamp_shift",
                f"camera {camera}, file {path}: {int((~ok).sum())} of {w.length} rows miss their own frames; first: "
                f"row {k}, from_timestamp + timestamp = {q[k]:.6f} s lands on {where}",
                episode_index=ep,
                path=data_path.get(ep, path),
            )
        )
    return out


def _short(values: Sequence[int]) -> str:
    shown = ", ".join(str(v) for v in values[:_LISTED])
    return f"[{shown}{', ...' if len(values) > _LISTED else ''}]"


def row_findings(problems: Sequence[Problem]) -> list[Finding]:
    """One finding per code, listing every episode with that problem (the first one's detail)."""
    by_code: dict[str, list[Problem]] = defaultdict(list)
    for p in problems:
        by_code[p.code].append(p)
    out = []
    for code, items in sorted(by_code.items()):
        items.sort(key=lambda p: (-1 if p.episode_index is None else p.episode_index, p.path or ""))
        eps = sorted({e for p in items for e in ((p.episode_index,) if p.episode_index is not None else p.episodes)})
        files = sorted({p.path for p in items})
        first = items[0]
        head = f"episode {first.episode_index} in {first.path}" if first.episode_index is not None else first.path
        count = len({p.episode_index for p in items if p.episode_index is not None})
        lead = f"{count} episodes {_short(eps)}; first: " if count > 1 else ""
        out.append(
            finding(
                code,
                f"{lead}{head}: {first.message}",
                file=files[0] if len(files) == 1 else None,
                episode_index=first.episode_index if count == 1 and len(items) == 1 else None,
                episodes=eps,
            )
        )
    return out
