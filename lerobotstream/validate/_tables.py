"""Checks of the tabular side: what the metadata says beyond ``DatasetMeta.load``'s own checks
(index gaps, ``to_timestamp``, depth encodings, ``meta/stats.json`` shapes), and the ``data/``
Parquet files from their footers and row-group statistics (no column data is read)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from lerobotstream.constants import STATS_PATH
from lerobotstream.errors import LeRobotStreamError, SourceError
from lerobotstream.features import REQUIRED_DATA_COLUMNS, data_columns_problem, frame_hwc
from lerobotstream.parquet import _column_index, _short  # the reader's own helpers
from lerobotstream.validate._findings import Finding, finding, read_code

_STAT_NAMES = ("min", "max", "mean", "std")


def index_gap_findings(meta: Any, full: bool) -> list[Finding]:
    """Warnings where consecutive episodes' global index ranges leave a gap (full selection only)."""
    if not full:
        return []
    out, prev = [], 0
    for ep in meta.episodes:
        if ep.dataset_from_index > prev:
            out.append(
                finding(
                    "index_gap",
                    f"episode {ep.episode_index} starts at dataset_from_index="
                    f"{ep.dataset_from_index} but the episodes before it end at {prev}",
                    episode_index=ep.episode_index,
                    file=ep.shard or None,
                )
            )
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
                shape = list(feat.get("shape") or [])
                add(
                    "stats_shape",
                    f"{key}/{name} has shape {list(arr.shape)} but the feature's shape {shape} "
                    f"({feat.get('dtype')}) needs {list(allowed[0])}",
                )
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


def _shape_findings(md: Any, path: str, features: dict, eps: list[int], reader: Any = None) -> list[Finding]:
    """Each numeric column's per-row shape against info.json's (``features.row_shape_matches``,
    the rule item assembly applies to the rows it reads), from the footer: the list nesting of the
    column's type and its leaf values per row (column-chunk ``num_values``). Columns with nulls are
    skipped, as assembly skips them. Rows of different lengths, with ``reader`` (the per-row run):
    the column is read to name the first row off the declared shape as training does (episode,
    ``row k (frame_index k)``: ``features.row_off_shape``)."""
    import pyarrow as pa

    from lerobotstream.features import row_shape_matches

    if md.num_row_groups == 0 or md.num_rows == 0:
        return []
    schema = md.schema.to_arrow_schema()
    rg0 = md.row_group(0)
    leaf_of = {rg0.column(j).path_in_schema: j for j in range(rg0.num_columns)}
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
        leaves = [j for p, j in leaf_of.items() if p == name or p.startswith(name + ".")]
        if len(leaves) != 1:
            continue
        values, nulls = 0, 0
        for g in range(md.num_row_groups):
            c = md.row_group(g).column(leaves[0])
            values += int(c.num_values)
            st = c.statistics
            nulls += int(st.null_count) if st is not None and st.has_null_count else 0
        if nulls:
            continue
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


def _image_type_findings(md: Any, path: str, images: Sequence[str], eps: list[int]) -> list[Finding]:
    """``image`` columns whose type is not the ``{bytes, path}`` struct item assembly reads
    (``features.is_image_column_type``), from the footer's schema."""
    from lerobotstream.features import is_image_column_type

    schema = md.schema.to_arrow_schema()
    return [
        finding(
            "data_image",
            f"{path}: image feature {key!r} is stored as {schema.field(key).type}, not a {{bytes, path}} struct",
            camera=key,
            file=path,
            episodes=eps,
        )
        for key in images
        if key in schema.names and not is_image_column_type(schema.field(key).type)
    ]


def _off_row(reader: Any, path: str, name: str, want: tuple, eps: list[int]) -> tuple[int, int, int, int] | None:
    """The first row of ``path`` whose ``name`` is off the declared shape (``features.row_off_shape``,
    item assembly's rule), as ``(episode_index, frame_index, axis, values)``; None if it cannot be read."""
    import pyarrow as pa
    import pyarrow.compute as pc

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


def merged_file_findings(
    findings: Sequence[Finding], codes: Sequence[str] = ("data_shape", "data_image")
) -> list[Finding]:
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
        files = sorted(f.file for f in items)
        out.append(
            Finding(
                severity,
                code,
                None,
                camera,
                None,
                f"{files[0]} and {len(files) - 1} more data file(s): {text}",
                sorted({e for f in items for e in f.episodes}),
            )
        )
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
        declared: info.json's features (the columns a data file must have:
            ``features.data_columns_problem``, item assembly's rule, and ``episode_index``).
        full_file: every episode stored in the file is selected (row totals can be compared).
        features: info.json's numeric features (the shape check; None: skipped).
        images: info.json's ``image`` features (their column type is checked).
        rows: the per-row columns are checked too (``validate._rows``).
    """
    eps = sorted(int(e.episode_index) for e in episodes)
    try:
        md = reader.metadata(path, episodes=eps)
    except (LeRobotStreamError, SourceError, OSError, ValueError) as e:
        return [
            finding(
                read_code(e, "data_unreadable"),
                str(e) if path in str(e) else f"{path}: {e}",  # the reader's errors name the file
                file=path,
                episodes=eps,
                episode_index=eps[0] if len(eps) == 1 else None,
            )
        ]
    out: list[Finding] = []
    required = ("episode_index", *REQUIRED_DATA_COLUMNS)  # the reader's column, then item assembly's
    problem = data_columns_problem(md.schema.to_arrow_schema().names, declared, required=required)
    if problem is not None:
        text = f"{path}: {problem.message} (episodes {_short(eps)})"
        out.append(finding(problem.code, text, file=path, episodes=eps))
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
        lo = min(b[0] for b in ix_bounds)  # type: ignore[index]
        hi = max(b[1] for b in ix_bounds)  # type: ignore[index]
        want_lo = min(int(e.dataset_from_index) for e in episodes)
        want_hi = max(int(e.dataset_to_index) for e in episodes) - 1
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
    from lerobotstream.constants import INFO_PATH
    from lerobotstream.errors import MetadataError

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
        e0, d0 = items[0]
        out.append(
            finding(
                "to_timestamp_mismatch",
                f"camera {cam}: {len(items)} episode(s) have to_timestamp - "
                f"from_timestamp off length/fps (first: episode {e0}, by {d0:+.6f} s)",
                camera=cam,
                episode_index=e0 if len(items) == 1 else None,
                episodes=[e for e, _ in items],
            )
        )
    return out
