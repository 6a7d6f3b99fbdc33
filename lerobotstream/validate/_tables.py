"""Checks of the tabular side: what the metadata says beyond ``DatasetMeta.load``'s own checks
(index gaps, ``to_timestamp``, depth encodings, ``meta/stats.json`` shapes), the ``data/`` Parquet
files from their footers and row-group statistics, and their per-row columns
(``episode_index``, ``frame_index``, ``index``, ``task_index``, ``timestamp``: their column chunks
only, a few bytes per frame) with each episode's timestamps against its video windows.

Per episode, in the order training meets them (the first that fails is the episode's problem): its
rows (``parquet.episode_rows_problem``: row count, then ``frame_index`` exactly ``0..length-1``),
``index`` (``parquet.index_problem``), ``task_index`` (``parquet.task_index_problem``), timestamps
(finite, the first 0, each ``frame_index / fps`` within ``tolerance_s``: LeRobot's writer), and per
camera where ``from_timestamp + timestamp`` lands: within ``tolerance_s`` of one of the episode's
own frames (``mp4.frames_within_tolerance``, the decoder's rule). Problems of one code become one
finding listing every episode.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lerobotstream.constants import INFO_PATH, STATS_PATH
from lerobotstream.errors import LeRobotStreamError, MetadataError, Problem, SourceError
from lerobotstream.features import REQUIRED_DATA_COLUMNS, data_columns_problem, frame_hwc
from lerobotstream.mp4._tolerance import frames_within_tolerance, within_tolerance
from lerobotstream.parquet import (
    NUMERIC_DTYPES,
    STANDARD_COLUMNS,
    _column_index,
    _short,
    data_column_problem,
    episode_rows_problem,
    index_problem,
    task_index_problem,
)
from lerobotstream.validate._findings import Finding, finding, read_code

_STAT_NAMES = ("min", "max", "mean", "std")


def index_gap_findings(meta: Any, full: bool) -> list[Finding]:
    """Warnings where consecutive episodes' global index ranges leave a gap (full selection only)."""
    if not full:
        return []
    out, prev = [], 0
    for ep in meta.episodes:
        if ep.dataset_from_index > prev:
            text = f"episode {ep.episode_index} starts at dataset_from_index={ep.dataset_from_index} but the episodes before it end at {prev}"
            out.append(finding("index_gap", text, episode_index=ep.episode_index, file=ep.shard or None))
        prev = max(prev, ep.dataset_to_index)
    return out


def _expected_stat_shapes(feat: dict) -> list[tuple[int, ...]]:
    """The shapes a feature's min/max/mean/std may have (LeRobot's compute_stats)."""
    shape = tuple(int(s) for s in (feat.get("shape") or ()))
    dtype = feat.get("dtype")
    if dtype in ("video", "image"):
        hwc = frame_hwc(feat)
        return [(hwc[2] if hwc else 3, 1, 1)]
    if dtype in ("string", "language"):
        return []
    return [shape] + ([(), (1,)] if shape in ((), (1,)) else [])


def stats_findings(meta: Any) -> list[Finding]:
    """``meta/stats.json`` against the features: each statistic's shape, ``min <= max``, ``std >= 0``."""
    out: list[Finding] = []

    def add(code: str, text: str) -> None:
        out.append(finding(code, f"{STATS_PATH}: {text}", file=STATS_PATH))

    for key, st in sorted((meta.stats or {}).items()):
        if not isinstance(st, dict):
            add("stats_shape", f"{key} is a {type(st).__name__}, not an object of statistics")
            continue
        feat = meta.features.get(key)
        if feat is None:
            add("stats_unknown_feature", f"statistics for {key!r}, which info.json's features do not declare")
            continue
        allowed = _expected_stat_shapes(feat)
        arrays: dict[str, np.ndarray] = {}
        for name in (n for n in _STAT_NAMES if n in st):
            try:
                arr = arrays[name] = np.asarray(st[name], dtype=np.float64)
            except (TypeError, ValueError):
                add("stats_shape", f"{key}/{name} is not a numeric array")
                continue
            if allowed and arr.shape not in allowed:
                want = f"the feature's shape {list(feat.get('shape') or [])} ({feat.get('dtype')}) needs {list(allowed[0])}"
                add("stats_shape", f"{key}/{name} has shape {list(arr.shape)} but {want}")
        for name, arr in arrays.items():
            if arr.size and not np.all(np.isfinite(arr)):
                add("stats_nonfinite", f"{key}/{name} holds NaN or infinite values")
        lo, hi, std = arrays.get("min"), arrays.get("max"), arrays.get("std")
        if lo is not None and hi is not None and lo.shape == hi.shape and np.any(lo > hi):
            add("stats_values", f"{key}: min exceeds max in {int(np.sum(lo > hi))} of {lo.size} entries")
        if std is not None and np.any(std < 0):
            add("stats_values", f"{key}/std is negative in {int(np.sum(std < 0))} of {std.size} entries")
    return out


def _bounds(md: Any, col: int | None) -> list[tuple[int, int, int] | None]:
    """Per row group ``(min, max, num_rows)`` of an integer column, None where it has no statistics."""
    out: list[tuple[int, int, int] | None] = []
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        st = rg.column(col).statistics if col is not None else None
        out.append((int(st.min), int(st.max), int(rg.num_rows)) if st is not None and st.has_min_max else None)
    return out


def _leaf_counts(md: Any, name: str) -> tuple[int, int] | None:
    """``(values, nulls)`` of column ``name`` over every row group, from the footer's column-chunk
    metadata (``num_values``, statistics ``null_count``); None unless the column has one leaf."""
    if md.num_row_groups == 0:
        return None
    rg0 = md.row_group(0)
    leaves = [
        j for j in range(rg0.num_columns) if (p := rg0.column(j).path_in_schema) == name or p.startswith(name + ".")
    ]
    if len(leaves) != 1:
        return None
    values, nulls = 0, 0
    for g in range(md.num_row_groups):
        c = md.row_group(g).column(leaves[0])
        values += int(c.num_values)
        st = c.statistics
        nulls += int(st.null_count) if st is not None and st.has_null_count else 0
    return values, nulls


def _shape_findings(md: Any, path: str, features: dict, eps: list[int], reader: Any = None) -> list[Finding]:
    """Each numeric column's per-row shape against info.json's (``features.row_shape_matches``, item
    assembly's rule), from the footer: the list nesting of the column's type and its leaf values per
    row (column-chunk ``num_values``); columns with nulls are skipped, as assembly skips them. Rows
    of different lengths, with ``reader``: the column is read to name the first row off the shape
    as training does (``features.row_off_shape``)."""
    from lerobotstream.features import row_shape_matches

    if md.num_row_groups == 0 or md.num_rows == 0:
        return []
    schema = md.schema.to_arrow_schema()
    out = []
    for name, feat in features.items():
        want = tuple(int(x) for x in (feat.get("shape") or ()))
        if not want or name not in schema.names:
            continue
        t, depth, fixed = schema.field(name).type, 0, []
        while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            fixed.append(t.list_size if pa.types.is_fixed_size_list(t) else None)
            t, depth = t.value_type, depth + 1
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
            continue
        counts = _leaf_counts(md, name)
        if counts is None or counts[1]:
            continue
        values = counts[0]
        per_row, rem = divmod(values, int(md.num_rows))
        got: tuple[int, ...] | None
        if rem:
            got = None  # rows of different lengths
        elif depth == 0:
            got = () if per_row == 1 else None
        elif depth == 1:
            got = (per_row,)
        elif all(f is not None for f in fixed):
            got = tuple(int(f) for f in fixed)
        else:  # nested variable lists: the leaf count and the nesting must agree
            got = want if (len(want) == depth and int(np.prod(want)) == per_row) else (per_row,) + (1,) * (depth - 1)
        if got is None or not row_shape_matches(want, got):
            held = "rows of different lengths" if got is None else f"{list(got) or 'scalar'} values per row"
            message = f"{path}: column {name!r} holds {held} but meta/info.json declares shape {list(want)}"
            row = _off_row(reader, path, name, want, eps) if got is None and reader is not None else None
            if row is not None:
                ep, fi, axis, n = row
                along = f" along axis {axis}" if len(want) > 1 else ""
                message = (
                    f"episode {ep}, file {path}: column {name!r} row {fi} (frame_index {fi}) holds {n} values{along} "
                    f"but meta/info.json declares shape {list(want)} (the first such row of the file)"
                )
            out.append(finding("data_shape", message, file=path, episodes=eps))
    return out


def _dtype_findings(md: Any, path: str, declared: dict, eps: list[int], skip: Sequence[str] = ()) -> list[Finding]:
    """Each column of a numeric dtype (info.json's, or a standard column's: ``parquet.STANDARD_COLUMNS``)
    but ``skip`` by training's rule (``parquet.data_column_problem``), from the footer: the column's
    Arrow type, and null values from its column-chunk statistics."""
    schema = md.schema.to_arrow_schema()
    out = []
    for name in [n for n in schema.names if n not in skip]:
        dtype = (declared.get(name) or STANDARD_COLUMNS.get(name) or {}).get("dtype")
        problem = data_column_problem(pa.array([], type=schema.field(name).type), dtype, name)
        if problem is None and dtype in NUMERIC_DTYPES and (counts := _leaf_counts(md, name)) is not None:
            nulls = counts[1]
            if nulls:
                problem = Problem(
                    "data_dtype",
                    f"column {name!r} holds {nulls} null value(s) where meta/info.json declares {dtype} values",
                )
        if problem is not None:
            out.append(finding("data_dtype", f"{path}: {problem.message}", file=path, episodes=eps))
    return out


def _image_type_findings(md: Any, path: str, images: Sequence[str], eps: list[int]) -> list[Finding]:
    """``image`` columns whose type is not the ``{bytes, path}`` struct item assembly reads
    (``features.is_image_column_type``), from the footer's schema."""
    from lerobotstream.features import is_image_column_type

    schema, out = md.schema.to_arrow_schema(), []
    for key in (k for k in images if k in schema.names):
        if not is_image_column_type(t := schema.field(key).type):
            text = f"{path}: image feature {key!r} is stored as {t}, not a {{bytes, path}} struct"
            out.append(finding("data_image", text, camera=key, file=path, episodes=eps))
    return out


def _off_row(reader: Any, path: str, name: str, want: tuple, eps: list[int]) -> tuple[int, int, int, int] | None:
    """The first row of ``path`` whose ``name`` is off the declared shape (``features.row_off_shape``,
    item assembly's rule), as ``(episode_index, frame_index, axis, values)``; None if it cannot be read."""
    from lerobotstream.features import row_off_shape

    try:
        table = reader.read_columns(path, [name, "episode_index", "frame_index"], episodes=eps)
    except (LeRobotStreamError, SourceError, OSError, ValueError):
        return None
    if not {name, "episode_index", "frame_index"} <= set(table.column_names):
        return None
    table = table.filter(
        pc.is_in(table.column("episode_index"), pa.array(eps, table.schema.field("episode_index").type))
    )
    off = row_off_shape(table.column(name), want)
    if off is None:
        return None
    k, axis, n = off
    return int(table.column("episode_index")[k].as_py()), int(table.column("frame_index")[k].as_py()), axis, n


def merged_findings(findings: Sequence[Finding], codes: Sequence[str] = ("data_shape", "data_image")) -> list[Finding]:
    """Findings of ``codes`` that say the same of several data files (a feature info.json
    declares wrongly is wrong in every file) as one, listing every episode; the others unchanged.
    Such a finding's message is ``"<file>: <what>"``."""
    groups: dict[tuple, list[Finding]] = {}
    out: list[Finding] = []
    for f in findings:
        if f.code in codes and f.file and f.message.startswith(f"{f.file}: "):
            groups.setdefault((f.code, f.severity, f.camera, f.message[len(f.file) + 2 :]), []).append(f)
        else:
            out.append(f)
    for (code, severity, camera, text), items in groups.items():
        if len(items) == 1:
            out.append(items[0])
            continue
        files, eps = sorted(f.file for f in items), sorted({e for f in items for e in f.episodes})
        text = f"{files[0]} and {len(files) - 1} more data file(s): {text}"
        out.append(Finding(severity, code, None, camera, None, text, eps))
    return out


def data_findings(
    reader: Any,
    path: str,
    episodes: Sequence[Any],
    declared: dict,
    full_file: bool,
    *,
    features: dict | None = None,
    images: Sequence[str] = (),
    rows: bool = False,
) -> list[Finding]:
    """One ``data/`` Parquet file from its footer: readable, the declared columns present with
    their per-row shapes, and (unless ``rows``: the per-row columns then say it exactly) the
    episodes' rows there (``episode_index`` statistics), row counts and the ``index`` range.

    Args:
        reader: ``parquet.EpisodeParquetReader`` (its footer read: the same code as training's).
        episodes: ``EpisodeInfo`` of the selected episodes stored in ``path``.
        declared: info.json's features (the columns a file must have: ``features.data_columns_problem``).
        full_file: every episode stored in the file is selected (row totals can be compared).
        features: info.json's numeric features (the shape check; None: skipped).
        images: info.json's ``image`` features (their column type is checked).
        rows: the per-row columns are checked too (:func:`file_rows`).
    """
    eps = sorted(int(e.episode_index) for e in episodes)
    try:
        md = reader.metadata(path, episodes=eps)
    except (LeRobotStreamError, SourceError, OSError, ValueError) as e:
        text = str(e) if path in str(e) else f"{path}: {e}"  # the reader's errors name the file
        one = eps[0] if len(eps) == 1 else None
        return [finding(read_code(e, "data_unreadable"), text, file=path, episodes=eps, episode_index=one)]
    out: list[Finding] = []
    required = ("episode_index", *REQUIRED_DATA_COLUMNS)  # the reader's column, then item assembly's
    problem = data_columns_problem(md.schema.to_arrow_schema().names, declared, required=required)
    if problem is not None:
        text = f"{path}: {problem.message} (episodes {_short(eps)})"
        out.append(finding(problem.code, text, file=path, episodes=eps))
    # with ``rows``, the row checks name an episode_index or frame_index column of another type
    out += _dtype_findings(md, path, declared, eps, ("episode_index", "frame_index") if rows else ())
    if features:
        out += _shape_findings(md, path, features, eps, reader if rows else None)
    if images:
        out += _image_type_findings(md, path, images, eps)
    if rows:
        return out
    ep_col, ix_col = _column_index(md, "episode_index"), _column_index(md, "index")
    ep_bounds, ix_bounds = _bounds(md, ep_col), _bounds(md, ix_col)
    lengths = {int(e.episode_index): int(e.length) for e in episodes}
    if md.num_row_groups and all(b is not None for b in ep_bounds):
        for e in eps:
            if not any(b[0] <= e <= b[1] for b in ep_bounds):  # type: ignore[index]
                text = f"episode {e}: meta/episodes says its rows are in {path}, but the file's episode_index statistics do not include it"
                out.append(finding("data_episode_absent", text, episode_index=e, file=path))
        if all(b[0] == b[1] for b in ep_bounds):  # type: ignore[index]  # one episode per row group: its rows exactly
            counts: Counter = Counter()
            for b in ep_bounds:
                counts[b[0]] += b[2]  # type: ignore[index]
            for e in eps:
                if e in counts and counts[e] != lengths[e]:
                    text = f"episode {e}: {path} holds {counts[e]} rows of it, meta/episodes says length {lengths[e]}"
                    out.append(finding("data_rows", text, episode_index=e, file=path))
    total = sum(lengths.values())
    if full_file and int(md.num_rows) != total and not any(f.code == "data_rows" for f in out):
        text = f"{path} holds {md.num_rows} rows but its episodes {_short(eps)} have {total} frames in meta/episodes"
        out.append(finding("data_rows", text, file=path, episodes=eps))
    rows_off = any(f.code == "data_rows" for f in out)  # the index range follows the rows: reported once
    if not rows_off and md.num_row_groups and ix_col is not None and all(b is not None for b in ix_bounds):
        lo, hi = min(b[0] for b in ix_bounds), max(b[1] for b in ix_bounds)  # type: ignore[index]
        want_lo, want_hi = min(e.dataset_from_index for e in episodes), max(e.dataset_to_index for e in episodes) - 1
        if (full_file and (lo, hi) != (want_lo, want_hi)) or lo > want_lo or hi < want_hi:
            text = (
                f"{path}: its `index` column spans [{lo}, {hi}] but the episodes {_short(eps)} it holds have "
                f"dataset_from_index/dataset_to_index [{want_lo}, {want_hi + 1})"
            )
            out.append(finding("data_index_range", text, file=path, episodes=eps))
    return out


def depth_findings(meta: Any) -> list[Finding]:
    """Depth cameras whose declared encoding cannot be decoded: the construction's own check
    (``DatasetMeta.depth_quantizer``, which raises ``MetadataError``)."""
    out = []
    for key in meta.depth_keys:
        if key not in meta.video_keys:
            continue
        try:
            meta.depth_quantizer(key)
        except MetadataError as e:
            out.append(finding("depth_unsupported", str(e), camera=key, file=INFO_PATH))
    return out


def to_timestamp_findings(meta: Any, tolerance_s: float, skip: set = frozenset()) -> list[Finding]:
    """One warning per camera listing the episodes whose ``to_timestamp - from_timestamp`` is off
    ``length / fps`` by more than half a frame (or ``tolerance_s``, whichever is larger); ``skip``:
    ``(episode, camera)`` pairs a ``window_shift`` finding already names."""
    limit = max(tolerance_s, 0.5 / float(meta.fps))
    bad: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for ep in meta.episodes:
        for cam, v in ep.videos.items():
            d = (v.to_timestamp - v.from_timestamp) - ep.length / float(meta.fps)
            if abs(d) > limit and (int(ep.episode_index), cam) not in skip:
                bad[cam].append((int(ep.episode_index), d))
    out = []
    for cam, items in sorted(bad.items()):
        (e0, d0), one = items[0], items[0][0] if len(items) == 1 else None
        text = f"camera {cam}: {len(items)} episode(s) have to_timestamp - from_timestamp off length/fps (first: episode {e0}, by {d0:+.6f} s)"
        out.append(
            finding("to_timestamp_mismatch", text, camera=cam, episode_index=one, episodes=[e for e, _ in items])
        )
    return out


# --- the per-row columns ------------------------------------------------------------------------
#: the small per-row columns the default run reads
ROW_COLUMNS = ("episode_index", "frame_index", "index", "task_index", "timestamp")
_LISTED = 8  # episodes a row finding lists


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
        text = f"{bad.shape[0]} of {n} timestamps are not frame_index / fps within {tolerance_s} s; first: row {k}"
        return Problem("data_timestamps", f"{text} has {ts[k]:.6f} s, frame_index {k} plays at {want[k]:.6f} s")
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
    if ep_col.dtype.kind not in "iuf":  # no row can be matched to an episode (training: episode_rows_problem)
        kind = table.column("episode_index").type
        reason = f"the episode_index column is {kind}, not integers (LeRobot writes int64)"
        return [Problem("data_rows", reason, path=path, episodes=tuple(eps), column="episode_index")], [], {}
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


def landing_problems(summary: Any, timestamps: dict, fps: float, tolerance_s: float, data_path: dict) -> list[Problem]:
    """Episodes of one MP4 whose ``from_timestamp + timestamp`` does not land on their own frames.

    Args:
        summary: the file's ``_videos.FileSummary`` with its sample table and ``checked`` windows
            (``validate_source``'s; windows with a problem of their own are skipped).
        timestamps: :func:`file_rows`' timestamps of the episodes (an episode absent: skipped).
        data_path: episode → its data file (named in the problem).
    """
    out, table, camera, path = [], summary.table, summary.camera, summary.path
    pts, order = np.asarray(table.pts_s, dtype=np.float64), np.asarray(table.presentation_order, dtype=np.int64)
    for w, res in summary.checked:
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
        where = f"no frame (the nearest, frame {f}, is {gap:.6f} s away)"
        if close[k]:
            where = f"frame {f} of the file, which is not one of the episode's frames [{k0}, {k0 + w.length})"
        text = (
            f"camera {camera}, file {path}: {int((~ok).sum())} of {w.length} rows miss their own frames; first: "
            f"row {k}, from_timestamp + timestamp = {q[k]:.6f} s lands on {where}"
        )
        out.append(Problem("timestamp_shift", text, episode_index=ep, path=data_path.get(ep, path)))
    return out


def _listed(values: Sequence[int]) -> str:
    shown = ", ".join(str(v) for v in values[:_LISTED])
    return f"[{shown}{', ...' if len(values) > _LISTED else ''}]"


def row_findings(problems: Sequence[Problem]) -> list[Finding]:
    """One finding per code, listing every episode with that problem (the first one's detail)."""
    out = []
    for code in sorted({p.code for p in problems}):
        items = [p for p in problems if p.code == code]
        items.sort(key=lambda p: (-1 if p.episode_index is None else p.episode_index, p.path or ""))
        eps = sorted({e for p in items for e in ((p.episode_index,) if p.episode_index is not None else p.episodes)})
        files = sorted({p.path for p in items})
        first = items[0]
        head = f"episode {first.episode_index} in {first.path}" if first.episode_index is not None else first.path
        count = len({p.episode_index for p in items if p.episode_index is not None})
        lead = f"{count} episodes {_listed(eps)}; first: " if count > 1 else ""
        one = first.episode_index if count == 1 and len(items) == 1 else None
        file = files[0] if len(files) == 1 else None
        out.append(finding(code, f"{lead}{head}: {first.message}", file=file, episode_index=one, episodes=eps))
    return out
