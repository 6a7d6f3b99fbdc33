"""LeRobotDataset v3 metadata: ``meta/info.json``, every ``meta/episodes`` shard, tasks and stats.

Everything is read through a :class:`~lerobotstream.sources.ByteSource` (``read_file``, ``list``,
``exists``), so the same reader serves a local folder, an fsspec URL or the Hub. Layout (LeRobot
v3.0): ``meta/info.json``; ``meta/episodes/chunk-XXX/file-XXX.parquet`` (one row per episode,
**all** shards are read, in sorted order; their ``stats/*`` columns never); ``meta/tasks.parquet``
(pandas-index form with ``__index_level_0__`` or a plain ``task`` column, plus ``task_index``);
``meta/stats.json`` (optional). On a remote source, reads go out together
(``sources._prefetch.PrefetchedReads``): info, tasks, stats, the episodes listing and its usual
first shard; then the other shards; then the file checks.

A dataset is untrusted input: every failure is a :class:`~lerobotstream.errors.MetadataError`
naming the file (:class:`~lerobotstream.errors.MetadataReadError`, also an ``OSError``, for a file
that is there but cannot be read). Each ``info.json`` value is checked for its type, its range and,
for what becomes a path, the path rule of :mod:`lerobotstream.sources._paths` (:func:`info_problem`);
the episodes table is bounded from its footers before it is decoded and checked (lengths against
``[dataset_from_index, dataset_to_index)``, duplicates, gaps, overlaps, video windows, the files
each episode references).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import string
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lerobotstream.constants import EPISODES_DIR, FIRST_SHARD_PATH, INFO_PATH, STATS_PATH, TASKS_PATH
from lerobotstream.errors import (
    MetadataError,
    MetadataReadError,
    Problem,
    SourceError,
    SourceReadError,
    UnsupportedDatasetVersionError,
    os_reason,
)
from lerobotstream.features import (
    DEFAULT_TOOLS,
    LANGUAGE_COLUMNS,
    DepthQuantizer,
    depth_quantizer_of,
    depth_unit,
    feature_fields_problem,
    few,
    is_depth_feature,
    rescale_depth_stats,
)
from lerobotstream.parquet import FOOTER_MAX_ITEMS, declared_bytes
from lerobotstream.sources import ByteSource
from lerobotstream.sources._local import LocalSource
from lerobotstream.sources._paths import MAX_PATH_CHARS, path_problem
from lerobotstream.sources._prefetch import PrefetchedReads

# --- one meta/ file: bytes, JSON, Parquet ------------------------------------------------------------
#: largest ``meta/*.json`` file parsed, bytes (parsed JSON costs up to ~30x its text; LeRobot's hold KBs to MBs)
MAX_JSON_NBYTES = 16 * 1024 * 1024


def _where(source: ByteSource | PrefetchedReads, path: str) -> str:
    root = getattr(source, "root_display", "") or ""
    return f"{root.rstrip('/')}/{path}" if root else path


def _read_bytes(
    source: ByteSource | PrefetchedReads, path: str, *, what: str, missing_ok: bool = False
) -> bytes | None:
    """The file's bytes (None when missing and ``missing_ok``); else a MetadataError naming it."""
    try:
        return source.read_file(path)
    except FileNotFoundError as e:
        if missing_ok:
            return None
        hint = ""
        root = str(getattr(source, "root_display", "") or "").rstrip("/")
        if path == INFO_PATH and (root.endswith("/meta") or root == "meta"):
            parent = root.rsplit("/", 1)[0] if "/" in root else "."
            hint = f"; the root looks like the dataset's meta/ folder: give its parent folder as the root ({parent})"
        raise MetadataError(f"{what} is missing: {_where(source, path)}{hint}", path=path) from e
    except OSError as e:  # SourceError, or the local file system's own (a symlink loop, EACCES, EIO)
        raise _read_error(source, path, what, e) from e


def read_reason(e: OSError) -> str:
    """Why a file that is there could not be read: the operating system's text and errno name
    (``Permission denied (EACCES)``), without the path the message repeats; a store's own error text."""
    if isinstance(e, SourceReadError):
        return e.reason
    if isinstance(e, SourceError):
        return str(e)
    return os_reason(e)


def _read_error(source: ByteSource | PrefetchedReads, path: str, what: str, e: OSError) -> MetadataReadError:
    """The error for a ``meta/`` file (or folder) that exists but cannot be read: the file and the
    reason (:func:`read_reason`)."""
    return MetadataReadError(
        f"could not read {what} {_where(source, path)}: {read_reason(e)}", path=path, errno=getattr(e, "errno", None)
    )


def _parse_json(source: ByteSource | PrefetchedReads, path: str, raw: bytes) -> Any:
    """``json.loads(raw)`` of a ``meta/`` file; bad bytes or syntax, too deep nesting or more than
    :data:`MAX_JSON_NBYTES` bytes is a :class:`MetadataError` naming the file."""
    if len(raw) > MAX_JSON_NBYTES:
        raise MetadataError(
            f"{_where(source, path)} has {len(raw)} bytes, more than the {MAX_JSON_NBYTES} bytes a LeRobot "
            "metadata JSON file may have (they hold a few KB to a few MB); it is not parsed",
            path=path,
        )
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MetadataError(f"{_where(source, path)} is not valid JSON: {e}", path=path) from e
    except RecursionError as e:
        raise MetadataError(
            f"{_where(source, path)} nests arrays/objects deeper than the JSON parser allows "
            f"({e}); it is not a LeRobot metadata file: restore it",
            path=path,
        ) from None


def _read_parquet(
    source: ByteSource | PrefetchedReads,
    path: str,
    *,
    what: str,
    columns: Iterable[str] | None = None,
    check: Callable[[pq.FileMetaData], None] | None = None,
) -> pa.Table:
    """The table of a ``meta/`` Parquet file (``columns`` that exist, or all); ``check`` is called
    with its footer before anything is decoded (it raises to refuse the file)."""
    data = _read_bytes(source, path, what=what)
    try:
        pf = pq.ParquetFile(io.BytesIO(data), thrift_container_size_limit=FOOTER_MAX_ITEMS)
        if check is not None:
            check(pf.metadata)
        names = pf.schema_arrow.names
        cols = None if columns is None else [c for c in names if c in set(columns)]
        return pf.read(columns=cols, use_threads=False)  # small files; pyarrow threads + torch can abort at exit
    except MetadataError:
        raise
    except (pa.ArrowException, OSError, ValueError) as e:
        raise MetadataError(f"{what} {_where(source, path)} is not a readable Parquet file: {e}", path=path) from e


# --- meta/info.json -------------------------------------------------------------------------------
# the bounds of info.json's values: fps (high-speed cameras record at a few thousand), totals, a
# feature's shape (dimensions, values per frame), a path template's integer width (03d: 3)
MAX_FPS = 10_000
MAX_TOTAL_EPISODES = 10**9
MAX_TOTAL_FRAMES = 10**12
MAX_SHAPE_DIMS = 8
MAX_FEATURE_ELEMENTS = 1 << 28
MAX_TEMPLATE_WIDTH = 20
#: the fields the reader fills in ``data_path`` and ``video_path``
DATA_PATH_FIELDS = ("chunk_index", "file_index")
VIDEO_PATH_FIELDS = ("video_key", "chunk_index", "file_index")

CONVERT_HINT = (
    "Convert it to v3.0 first with LeRobot's converter: "
    "`python -m lerobot.scripts.convert_dataset_v21_to_v30 --repo-id=<repo_id>` "
    "(add `--root=<dataset folder> --push-to-hub=false` for a local copy; "
    "LeRobot 0.4.x: `python -m lerobot.datasets.v30.convert_dataset_v21_to_v30`)"
)

_INT_SPEC = re.compile(r"0?([0-9]{0,3})d?")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def template_problem(template: object, fields: Sequence[str]) -> str | None:
    """Why ``template`` is not a path template the reader can fill, or None: a string of at most
    ``MAX_PATH_CHARS`` characters using only ``fields``, without conversion; ``video_key`` without
    a format spec, the integer fields at most a zero-padded width of ``MAX_TEMPLATE_WIDTH``; filled
    in, a path that keeps to the path rule."""
    if not isinstance(template, str):
        return f"is a {type(template).__name__}, not a string"
    if len(template) > MAX_PATH_CHARS:
        return f"has {len(template)} characters (at most {MAX_PATH_CHARS})"
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        return f"is not a format template ({e})"
    for _literal, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in fields:
            return f"has the field {{{name}}}; it may use only {', '.join('{' + f + '}' for f in fields)}"
        if conversion:
            return f"converts the field {{{name}}} with !{conversion}"
        if name == "video_key":
            if spec:
                return f"formats {{video_key}} with {spec!r}"
            continue
        m = _INT_SPEC.fullmatch(spec or "")
        if m is None or int(m.group(1) or 0) > MAX_TEMPLATE_WIDTH:
            return (
                f"formats {{{name}}} with {spec!r}; an integer field takes at most a zero-padded width of "
                f"{MAX_TEMPLATE_WIDTH} (such as {{{name}:03d}})"
            )
    path = template.format(**{f: ("key" if f == "video_key" else 0) for f in fields})
    why = path_problem(path)
    return None if why is None else f"makes paths such as {_show(path)}, which {why}"


def _feature_problem(key: str, feat: Any) -> str | None:
    if not isinstance(feat, dict) or "dtype" not in feat:
        return "has no dtype"
    if not isinstance(feat["dtype"], str):
        return f"has the dtype {_show(feat['dtype'])}, not a string"
    shape = feat.get("shape")
    if shape is None:
        return feature_fields_problem(feat)
    if not isinstance(shape, (list, tuple)) or len(shape) > MAX_SHAPE_DIMS:
        return f"has the shape {_show(shape)}; a shape is a list of at most {MAX_SHAPE_DIMS} whole numbers"
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        return f"has the shape {_show(shape)}; its sizes must be whole numbers >= 0"
    if math.prod(shape) > MAX_FEATURE_ELEMENTS:
        return f"has the shape {_show(shape)}, more than {MAX_FEATURE_ELEMENTS} values per frame"
    if feat["dtype"] == "video":
        why = path_problem(key)
        if why is not None:
            return f"is a video key, which names its video folder, and it {why}"
    return feature_fields_problem(feat)


def info_problem(info: dict[str, Any]) -> tuple[str, str] | None:
    """The first problem of a parsed ``info.json`` as ``(field, why)`` (``"features.observation.images.top"``,
    ``"has no dtype"``), or None."""
    for key in ("fps", "features", "data_path"):
        if key not in info:
            return key, "is missing"
    fps = info["fps"]
    if (
        isinstance(fps, bool)
        or not isinstance(fps, (int, float))
        or not math.isfinite(fps)
        or fps != int(fps)
        or not 0 < fps <= MAX_FPS
    ):
        return "fps", f"must be a positive integer (frames per second, at most {MAX_FPS}), got {_show(fps)}"
    for key, top in (("total_episodes", MAX_TOTAL_EPISODES), ("total_frames", MAX_TOTAL_FRAMES)):
        value = info.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return key, f"must be a whole number, got {_show(value)}"
        if value is not None and not 0 <= value <= top:
            return key, f"must be in [0, {top}], got {value}"
    features = info["features"]
    if not isinstance(features, dict):
        return "features", "must be an object"
    for key, feat in features.items():
        why = _feature_problem(key, feat)
        if why is not None:
            return f"features.{key}", why
    why = template_problem(info["data_path"], DATA_PATH_FIELDS)
    if why is not None:
        return "data_path", why
    video_keys = [k for k, f in features.items() if f["dtype"] == "video"]
    video_tpl = info.get("video_path")
    if video_keys and not video_tpl:
        return "video_path", "is missing, but the dataset has video features"
    if video_tpl is not None:
        why = template_problem(video_tpl, VIDEO_PATH_FIELDS)
        if why is not None:
            return "video_path", why
        for key in video_keys:  # a key and the template's text around it make one path
            path = video_tpl.format(video_key=key, chunk_index=0, file_index=0)
            why = path_problem(path)
            if why is not None:
                return "video_path", f"makes the path {_show(path)} for the video key {_show(key)}, which {why}"
    repo_id = info.get("repo_id")
    if repo_id is not None:
        why = path_problem(repo_id)
        if why is not None:
            return "repo_id", f"names the dataset's cache folder, and it {why}"
    if info.get("splits") is not None and not isinstance(info["splits"], dict):
        return "splits", f"must be an object, got {_show(info['splits'])}"
    tools = info.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        return "tools", f"must be a list of objects, got {_show(tools)}"
    return None


def _load_info(src: PrefetchedReads) -> dict[str, Any]:
    """``meta/info.json``, parsed and checked (:func:`info_problem`); feature shapes become tuples.
    Raises UnsupportedDatasetVersionError (not v3.x) or MetadataError (names the ``field``)."""
    info = _parse_json(src, INFO_PATH, _read_bytes(src, INFO_PATH, what=INFO_PATH))
    if not isinstance(info, dict):
        raise MetadataError(f"{_where(src, INFO_PATH)} must hold a JSON object", path=INFO_PATH)
    version = info.get("codebase_version", "")
    version = version if isinstance(version, str) else _show(version)
    if not version.startswith("v3"):
        raise UnsupportedDatasetVersionError(
            f"{_where(src, INFO_PATH)}: codebase_version {version or '(missing)'!r} is not supported; "
            f"lerobotstream reads LeRobotDataset v3.x only. {CONVERT_HINT}",
            path=INFO_PATH,
            codebase_version=version,
        )
    problem = info_problem(info)
    if problem is not None:
        field, why = problem
        feat = info["features"].get(field[len("features.") :]) if field.startswith("features.") else None
        camera = (
            field[len("features.") :] if isinstance(feat, dict) and feat.get("dtype") in ("video", "image") else None
        )
        where = {"camera": camera} if camera is not None else {}
        raise MetadataError(f"{_where(src, INFO_PATH)}: {field} {why}", path=INFO_PATH, field=field, **where)
    for feat in info["features"].values():
        if isinstance(feat.get("shape"), list):
            feat["shape"] = tuple(feat["shape"])
    return info


# --- meta/episodes --------------------------------------------------------------------------------
_REQUIRED_EPISODE_COLUMNS = (
    "episode_index",
    "length",
    "dataset_from_index",
    "dataset_to_index",
    "data/chunk_index",
    "data/file_index",
)
_VIDEO_SUFFIXES = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
_COLUMN_TYPES = {"from_timestamp": pa.float64(), "to_timestamp": pa.float64()}  # else int64
#: most rows ``meta/episodes`` may hold (all shards), checked from the footers before decoding (the
#: largest public robot datasets hold under half a million episodes: language_table 442k)
EPISODES_MAX = 1 << 20
#: most bytes its columns may declare once decoded (all shards): ~100 bytes per episode at the cap
EPISODES_MAX_BYTES = 512 * 1024 * 1024
#: a problem naming more missing episodes than this carries their ranges in its message only
MAX_LISTED_EPISODES = 10_000


@dataclass(frozen=True)
class EpisodeVideo:
    """Where one episode of one camera lives inside a concatenated MP4."""

    path: str  # MP4 path relative to the dataset root (``videos/<key>/chunk-XXX/file-XXX.mp4``)
    chunk_index: int  # ``videos/<key>/chunk_index``
    file_index: int  # ``videos/<key>/file_index``
    from_timestamp: float  # start of the episode inside the MP4, seconds (float64, as stored)
    to_timestamp: float  # end of the episode inside the MP4, seconds (float64, as stored)


@dataclass(frozen=True)
class EpisodeInfo:
    """One row of ``meta/episodes`` (``stats/*`` dropped)."""

    episode_index: int  # episode id (``episode_index`` column)
    length: int  # number of frames; equals ``dataset_to_index - dataset_from_index``
    dataset_from_index: int  # global ``index`` of the episode's first frame (inclusive)
    dataset_to_index: int  # one past the global ``index`` of its last frame (half-open)
    data_path: str  # Parquet file holding its rows, relative to the root
    data_chunk_index: int  # ``data/chunk_index``
    data_file_index: int  # ``data/file_index``
    videos: dict[str, EpisodeVideo] = field(default_factory=dict)  # per camera: its window in an MP4
    tasks: tuple[str, ...] = ()  # task strings of the episode (``tasks`` column; empty when absent)
    shard: str = ""  # the ``meta/episodes`` shard this row came from (for messages)


def _selected(episodes: Iterable[Any], held: np.ndarray) -> tuple[list[int], list[Any]]:
    """(sorted selected episode indices, the requested ones the dataset lacks) of ``episodes``:
    ints, or ``range`` objects whose part outside ``[held[0], held[-1]]`` is reported as one
    ``"a..b"`` entry instead of being expanded. ``held``: the dataset's episode indices, sorted."""
    lo, hi = (int(held[0]), int(held[-1])) if held.size else (0, -1)

    def has(i: int) -> bool:
        k = int(np.searchsorted(held, i))
        return k < held.size and int(held[k]) == i

    wanted: set[int] = set()
    unknown: list[Any] = []
    for e in episodes:
        if isinstance(e, range):
            if e.step != 1:
                raise TypeError(f"episode ranges must have step 1, got {e!r}")
            for a, b in ((e.start, min(e.stop, lo)), (max(e.start, hi + 1), e.stop)):
                if a < b:
                    unknown.append(f"{a}..{b - 1}" if b - a > 1 else a)
            for i in range(max(e.start, lo), min(e.stop, hi + 1)):  # at most the dataset's episodes
                if has(i):
                    wanted.add(i)
                else:
                    unknown.append(i)
        elif has(int(e)):
            wanted.add(int(e))
        else:
            unknown.append(int(e))
    return sorted(wanted), unknown


@dataclass(frozen=True)
class _Columns:
    """The columns of every ``meta/episodes`` row (all shards, file order), as numpy arrays."""

    ints: dict[str, np.ndarray]  # int64 values of each required column (nulls read as 0; see ``null``)
    null: dict[str, np.ndarray]  # bool, per required column: the row's value is null
    # per camera: chunk_index, file_index (int64), from/to_timestamp (float64), any null (bool)
    videos: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    tasks: Any  # ``pyarrow`` list<string> array of each row's tasks (null: none)
    shard_id: np.ndarray  # int32, the shard (index into ``shards``) of each row
    shards: list[str]
    data_tpl: str
    video_tpl: str | None


class EpisodeRows(Sequence[EpisodeInfo]):
    """The ``meta/episodes`` rows of a selection, in ``episode_index`` order, kept as columns: an
    :class:`EpisodeInfo` is built when one is asked for (``rows[k]``, iteration), never kept, so
    a dataset of a million episodes costs its columns (~50 bytes per episode and camera), not a
    million Python objects. Slices and :meth:`take` give selections of it."""

    def __init__(self, cols: _Columns, rows: np.ndarray, video_ok: dict[str, np.ndarray]) -> None:
        self._cols = cols
        self._rows = np.asarray(rows, dtype=np.int64)
        self._video_ok = video_ok  # per camera, per raw row: its window is usable

    def __len__(self) -> int:
        return int(self._rows.shape[0])

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return self.take(np.arange(len(self))[k])
        n = len(self)
        k = int(k)
        if not -n <= k < n:
            raise IndexError(f"episode row {k} out of range ({n} rows)")
        return self._info(int(self._rows[k % n]))

    def __iter__(self):
        for i in self._rows.tolist():
            yield self._info(i)

    def __eq__(self, other: object) -> bool:
        """Equal to another sequence of the same :class:`EpisodeInfo` (an ``EpisodeRows`` or a list)."""
        if not isinstance(other, (EpisodeRows, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def take(self, positions: Sequence[int] | np.ndarray) -> EpisodeRows:
        """The rows at ``positions`` (indices into this selection), in that order."""
        return EpisodeRows(self._cols, self._rows[np.asarray(positions, dtype=np.int64)], self._video_ok)

    @property
    def episode_indices(self) -> np.ndarray:
        """int64 ``episode_index`` of each row (ascending)."""
        return self._cols.ints["episode_index"][self._rows]

    @property
    def lengths(self) -> np.ndarray:
        """int64 ``length`` of each row."""
        return self._cols.ints["length"][self._rows]

    def data_files(self) -> dict[str, np.ndarray]:
        """Each data Parquet path → the positions (into this selection) of the rows stored in it."""
        c = self._cols
        return self._groups(c.ints["data/chunk_index"], c.ints["data/file_index"], None, self._rows)

    def rows_per_file(self) -> dict[str, int]:
        """Rows each data Parquet file should hold: the lengths of its episodes, summed."""
        return {path: int(self.lengths[pos].sum()) for path, pos in self.data_files().items()}

    def video_files(self) -> dict[str, tuple[str, np.ndarray]]:
        """Each MP4 path → (its camera, the positions of the rows whose window is in it)."""
        out: dict[str, tuple[str, np.ndarray]] = {}
        for key, (vc, vf, _t0, _t1, _null) in self._cols.videos.items():
            ok = self._video_ok[key][self._rows]
            for path, pos in self._groups(vc, vf, key, self._rows[ok]).items():
                out.setdefault(path, (key, np.flatnonzero(ok)[pos]))
        return out

    def _groups(self, chunk: np.ndarray, file: np.ndarray, key: str | None, rows: np.ndarray) -> dict[str, np.ndarray]:
        if rows.size == 0:
            return {}
        ch, fi = chunk[rows], file[rows]
        order = np.lexsort((fi, ch))  # positions grouped by (chunk, file), ascending within a group
        cs, fs = ch[order], fi[order]
        starts = np.flatnonzero(np.concatenate([[True], (cs[1:] != cs[:-1]) | (fs[1:] != fs[:-1])]))
        stops = np.append(starts[1:], order.size)
        return {self._path(key, int(cs[a]), int(fs[a])): order[a:b] for a, b in zip(starts.tolist(), stops.tolist())}

    def _path(self, key: str | None, chunk: int, file: int) -> str:
        if key is None:
            return self._cols.data_tpl.format(chunk_index=chunk, file_index=file)
        return self._cols.video_tpl.format(video_key=key, chunk_index=chunk, file_index=file)  # type: ignore[union-attr]

    def _info(self, i: int) -> EpisodeInfo:
        c = self._cols
        ints = {name: int(col[i]) for name, col in c.ints.items()}
        videos: dict[str, EpisodeVideo] = {}
        for key, (vc, vf, t0, t1, _null) in c.videos.items():
            if self._video_ok[key][i]:
                ch, fi = int(vc[i]), int(vf[i])
                videos[key] = EpisodeVideo(self._path(key, ch, fi), ch, fi, float(t0[i]), float(t1[i]))
        tasks = c.tasks[i].as_py()
        return EpisodeInfo(
            episode_index=ints["episode_index"],
            length=ints["length"],
            dataset_from_index=ints["dataset_from_index"],
            dataset_to_index=ints["dataset_to_index"],
            data_path=self._path(None, ints["data/chunk_index"], ints["data/file_index"]),
            data_chunk_index=ints["data/chunk_index"],
            data_file_index=ints["data/file_index"],
            videos=videos,
            tasks=tuple(str(t) for t in tasks) if tasks is not None else (),
            shard=c.shards[int(c.shard_id[i])],
        )


def _load_episode_rows(src: PrefetchedReads, info: Mapping[str, Any]) -> _Columns:
    """The non-``stats/*`` columns of every shard, as columns; each shard's footer is checked
    (rows, declared bytes: :data:`EPISODES_MAX`, :data:`EPISODES_MAX_BYTES`) before it is decoded."""
    try:
        listed = src.list(EPISODES_DIR)
    except FileNotFoundError:
        listed = []
    except SourceError as e:  # a folder that cannot be listed (EACCES) is not "no episode metadata"
        raise _read_error(src, getattr(e, "path", None) or EPISODES_DIR, "the episode metadata folder", e) from e
    split = [p.split("/") for p in listed if p.endswith(".parquet")]  # meta/episodes/chunk-*/file-*
    shards = sorted(
        "/".join(q) for q in split if len(q) == 4 and q[2].startswith("chunk-") and q[3].startswith("file-")
    )
    src.prefetch(*(("read_file", p) for p in shards))
    if not shards:
        raise MetadataError(
            f"no episode metadata: {_where(src, EPISODES_DIR)}/chunk-*/file-*.parquet not found", path=EPISODES_DIR
        )
    video_keys = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    wanted = (
        list(_REQUIRED_EPISODE_COLUMNS) + ["tasks"] + [f"videos/{k}/{s}" for k in video_keys for s in _VIDEO_SUFFIXES]
    )
    types = {
        c: pa.list_(pa.string()) if c == "tasks" else _COLUMN_TYPES.get(c.rsplit("/", 1)[-1], pa.int64())
        for c in wanted
    }
    parts: dict[str, list] = {c: [] for c in wanted}
    shard_ids: list[np.ndarray] = []
    seen = {"rows": 0, "bytes": 0}

    def check_footer(shard: str, md: Any) -> None:
        seen["rows"] += int(md.num_rows)
        seen["bytes"] += declared_bytes(md, range(md.num_row_groups), wanted)
        if seen["rows"] > EPISODES_MAX or seen["bytes"] > EPISODES_MAX_BYTES:
            raise MetadataError(
                f"episode metadata shard {_where(src, shard)}: its footer declares {md.num_rows} rows, which "
                f"bring meta/episodes to {seen['rows']} rows and {seen['bytes']} bytes of columns once decoded; "
                f"at most {EPISODES_MAX} episodes and {EPISODES_MAX_BYTES} bytes are accepted (a damaged or "
                "hostile table): refused before decoding",
                path=shard,
                code="episodes_table_size",
            )

    for n_shard, shard in enumerate(shards):
        table = _read_parquet(
            src, shard, what="episode metadata shard", columns=wanted, check=lambda md, s=shard: check_footer(s, md)
        )
        missing = [c for c in wanted if c not in table.column_names and c != "tasks"]
        if missing:
            raise MetadataError(
                f"episode metadata shard {_where(src, shard)} lacks the columns {few(missing)}", path=shard
            )
        for c in wanted:
            col = table.column(c) if c in table.column_names else pa.chunked_array([pa.nulls(table.num_rows, types[c])])
            try:
                parts[c].extend(col.cast(types[c]).chunks)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise MetadataError(
                    f"episode metadata shard {_where(src, shard)}: column {c!r} is {col.type}, not {types[c]} ({e})",
                    path=shard,
                ) from e
        shard_ids.append(np.full(table.num_rows, n_shard, dtype=np.int32))
        del table

    def column(c: str) -> Any:
        return pa.chunked_array(parts.pop(c), type=types[c]).combine_chunks()

    def numpy(a: Any, dtype: Any = bool, fill: Any = None) -> np.ndarray:  # a's nulls, or its values (nulls: fill)
        return np.asarray((a.is_null() if fill is None else a.fill_null(fill)).to_numpy(zero_copy_only=False), dtype)

    ints: dict[str, np.ndarray] = {}
    null: dict[str, np.ndarray] = {}
    for c in _REQUIRED_EPISODE_COLUMNS:
        arr = column(c)
        null[c], ints[c] = numpy(arr), numpy(arr, np.int64, 0)
    videos = {}
    for k in video_keys:
        arrs = [column(f"videos/{k}/{s}") for s in _VIDEO_SUFFIXES]
        nulls = np.logical_or.reduce([numpy(a) for a in arrs])
        vc, vf = (numpy(a, np.int64, 0) for a in arrs[:2])
        t0, t1 = (numpy(a, np.float64, 0.0) for a in arrs[2:])
        videos[k] = (vc, vf, t0, t1, nulls)
    return _Columns(
        ints=ints,
        null=null,
        videos=videos,
        tasks=column("tasks"),
        shard_id=np.concatenate(shard_ids),
        shards=shards,
        data_tpl=info["data_path"],
        video_tpl=info.get("video_path"),
    )


def _missing_runs(indices: np.ndarray, stop: int) -> list[tuple[int, int]]:
    """The half-open runs ``[a, b)`` of ``[0, stop)`` that the sorted, unique ``indices`` lack
    (negative indices ignored); at most ``len(indices) + 1`` runs, whatever the values."""
    held = indices[indices >= 0]
    edges = np.concatenate(([-1], held, [stop])).astype(np.int64)
    gaps = np.flatnonzero(np.diff(edges) > 1)
    return [(int(edges[g]) + 1, int(edges[g + 1])) for g in gaps]


def _runs_text(runs: Sequence[tuple[int, int]], shown: int = 5) -> str:
    """``[2, 5..9, ...]`` for half-open runs ``[a, b)``: the first ``shown`` runs, then a count."""
    parts = [f"{a}" if b - a == 1 else f"{a}..{b - 1}" for a, b in runs[:shown]]
    more = f", ... ({len(runs) - shown} more ranges)" if len(runs) > shown else ""
    total = sum(b - a for a, b in runs)
    return f"[{', '.join(parts)}{more}] ({total} episode{'s' if total != 1 else ''})"


def _listed(runs: Sequence[tuple[int, int]]) -> list[int]:
    """The episodes of ``runs`` as a list (a problem's ``episodes``) when there are at most
    :data:`MAX_LISTED_EPISODES`; else ``[]`` (the message carries the ranges)."""
    if sum(b - a for a, b in runs) > MAX_LISTED_EPISODES:
        return []
    return [e for a, b in runs for e in range(a, b)]


def _report(problems: list | None, error: MetadataError | str, **fields: Any) -> None:
    """Raise ``error`` (a message: a ``MetadataError(error, **fields)``) when ``problems`` is None,
    else collect it as a :class:`~lerobotstream.errors.Problem` (its ``code``, else ``metadata``;
    its message, episode, camera, file, episodes and severity) and go on (the validator)."""
    if isinstance(error, str):
        error = MetadataError(error, **fields)
    if problems is None:
        raise error
    f = error.fields
    episodes = tuple(int(e) for e in f.get("episodes") or ())
    problems.append(
        Problem(
            f.get("code") or "metadata",
            error.message,
            f.get("episode_index"),
            f.get("camera"),
            f.get("path"),
            episodes=episodes,
            severity=f.get("severity"),
        )
    )


def _build_episodes(
    src: ByteSource, info: Mapping[str, Any], cols: _Columns, problems: list | None = None
) -> EpisodeRows:
    """Episode rows → :class:`EpisodeRows` (episode_index order), checked; ``problems`` as in
    :meth:`DatasetMeta.load` (collecting: a row that cannot be used is left out, once reported).
    The checks run on whole columns; only rows with a problem are visited one by one."""
    n = int(cols.shard_id.shape[0])  # rows of every shard
    shard_of = cols.shards
    sid = cols.shard_id
    if n == 0:
        raise MetadataError(
            f"the episode metadata shards under {_where(src, EPISODES_DIR)} hold no episodes", path=EPISODES_DIR
        )
    usable = np.ones(n, dtype=bool)
    for c in _REQUIRED_EPISODE_COLUMNS:
        bad = np.flatnonzero(cols.null[c])
        for i in bad[: 1 if problems is None else len(bad)].tolist():
            _report(
                problems,
                f"episode row {i} of {_where(src, shard_of[sid[i]])} has a null {c!r}",
                path=shard_of[sid[i]],
                code="episode_row_null",
            )
        usable &= ~cols.null[c]
    rows = np.flatnonzero(usable)
    no_videos: dict[str, np.ndarray] = {k: np.zeros(n, dtype=bool) for k in cols.videos}
    if rows.size == 0:
        return EpisodeRows(cols, rows, no_videos)
    ep_all = cols.ints["episode_index"]
    ep_idx = ep_all[rows]
    order = rows[np.argsort(ep_idx, kind="stable")]
    sorted_idx = ep_all[order]
    dup = np.nonzero(sorted_idx[1:] == sorted_idx[:-1])[0]
    for d in dup[: 1 if problems is None else len(dup)].tolist():
        a, b = int(order[d]), int(order[d + 1])
        e = int(sorted_idx[d])
        _report(
            problems,
            f"episode {e} appears twice in meta/episodes: in {_where(src, shard_of[sid[a]])} and "
            f"{_where(src, shard_of[sid[b]])}",
            episode_index=e,
            path=shard_of[sid[b]],
            code="duplicate_episode",
        )
        usable[b] = False
    order = order[usable[order]]
    sorted_idx = ep_all[order]
    n_ok = int(sorted_idx.shape[0])
    top = int(sorted_idx[-1]) + 1 if n_ok else 0
    runs = _missing_runs(sorted_idx, max(n_ok, top))
    if runs:
        _report(
            problems,
            f"meta/episodes under {_where(src, EPISODES_DIR)} is missing episodes {_runs_text(runs)} "
            f"(episode indices must be 0..N-1; found {n} rows, max index {top - 1}); a shard may be missing",
            episode_index=runs[0][0],
            path=EPISODES_DIR,
            code="missing_episodes",
            episodes=_listed(runs),
        )
    info_eps = info.get("total_episodes")
    if info_eps is not None and int(info_eps) > max(n, top):
        lo = max(n, top)
        _report(
            problems,
            f"{_where(src, INFO_PATH)} says total_episodes={info_eps} but the shards under {_where(src, EPISODES_DIR)} "
            f"hold only episodes 0..{lo - 1}: episodes {lo}..{int(info_eps) - 1} are missing "
            "(a shard may be missing)",
            episode_index=lo,
            path=EPISODES_DIR,
            code="missing_episodes",
            episodes=_listed([(lo, int(info_eps))]),
        )
    # per-row rules on whole columns: the index range, overlaps, each camera's window
    length = cols.ints["length"][order]
    lo = cols.ints["dataset_from_index"][order]
    hi = cols.ints["dataset_to_index"][order]
    bad_range = (length <= 0) | (hi - lo != length) | (lo < 0)
    kept = length > 0
    prev_to = np.maximum.accumulate(np.where(kept, hi, np.iinfo(np.int64).min))
    prev_to = np.concatenate([[np.iinfo(np.int64).min], prev_to[:-1]])
    overlap = kept & (lo < prev_to)
    video_ok = {}
    bad_video = {}
    for key, (_vc, _vf, t0, t1, vnull) in cols.videos.items():
        a, b = t0[order], t1[order]
        with np.errstate(invalid="ignore"):
            window_ok = (a >= 0.0) & (a < b) & np.isfinite(b)
        ok = np.zeros(n, dtype=bool)
        ok[order] = ~vnull[order] & window_ok
        video_ok[key] = ok
        bad_video[key] = (vnull[order], ~vnull[order] & ~window_ok)
    any_bad = bad_range | overlap
    for nul, win in bad_video.values():
        any_bad |= (nul | win) & kept
    for k in np.flatnonzero(any_bad).tolist():
        i = int(order[k])
        e = int(ep_all[i])
        shard = shard_of[sid[i]]
        if bad_range[k]:
            _report(
                problems,
                f"episode {e} in {_where(src, shard)}: length {int(length[k])} disagrees with "
                f"[dataset_from_index, dataset_to_index) = [{int(lo[k])}, {int(hi[k])})",
                episode_index=e,
                path=shard,
                code="index_range",
            )
            if not kept[k]:
                continue
        if overlap[k]:
            _report(
                problems,
                f"episode {e} in {_where(src, shard)}: [dataset_from_index, dataset_to_index) = [{int(lo[k])}, "
                f"{int(hi[k])}) overlaps the previous episode (ends at {int(prev_to[k])})",
                episode_index=e,
                path=shard,
                code="index_overlap",
            )
        for key, (nul, win) in bad_video.items():
            if nul[k] or win[k]:
                t0, t1 = float(cols.videos[key][2][i]), float(cols.videos[key][3][i])
                what = "null video location" if nul[k] else f"bad video window from_timestamp={t0} to_timestamp={t1}"
                where = dict(episode_index=e, camera=key, path=shard, code="video_location")
                _report(problems, f"episode {e}, camera {key!r}: {what} in {_where(src, shard)}", **where)
    return EpisodeRows(cols, order[kept], video_ok)


def _check_files(src: PrefetchedReads, episodes: EpisodeRows, problems: list | None = None) -> None:
    """Every data Parquet and MP4 the episodes use is a file; ``problems`` as in
    :meth:`DatasetMeta.load` (collecting: one error per file, ``episodes`` listing its users).

    A path ``exists()`` denies is asked once more, for its size, to tell why (only on this failure
    path): nothing there is ``file_missing``; something there that cannot be read (a symlink loop,
    a folder, a device) is ``file_unreadable`` (a :class:`MetadataReadError`) with the reason."""
    users: dict[str, tuple[str | None, np.ndarray]] = {p: (None, pos) for p, pos in episodes.data_files().items()}
    for path, (key, pos) in episodes.video_files().items():
        users.setdefault(path, (key, pos))
    src.prefetch(*(("exists", p) for p in sorted(users)))
    indices = episodes.episode_indices
    for path in sorted(users):
        unreadable: SourceReadError | None = None
        try:
            if src.exists(path):
                continue
            src.size(path)  # exists() said no: why? (a size that answers: missing all the same)
        except FileNotFoundError:
            pass
        except SourceReadError as e:
            unreadable = e
        key, pos = users[path]
        ep = episodes[int(pos[0])]
        what = f"camera {key!r} video" if key else "data file"
        fields = dict(episode_index=ep.episode_index, camera=key, path=path, episodes=np.unique(indices[pos]).tolist())
        referenced = f"(referenced by {_where(src, ep.shard)})"
        if unreadable is None:
            error = MetadataError(
                f"episode {ep.episode_index}: {what} {_where(src, path)} is missing {referenced}",
                code="file_missing",
                **fields,
            )
        else:
            error = MetadataReadError(
                f"episode {ep.episode_index}: {what} {_where(src, path)} is there but cannot be read: "
                f"{read_reason(unreadable)} {referenced}",
                code="file_unreadable",
                errno=unreadable.errno,
                reason=read_reason(unreadable),
                **fields,
            )
            error.__cause__ = unreadable
        _report(problems, error)


# --- the dataset's metadata -----------------------------------------------------------------------
def _as_source(source: ByteSource | str | os.PathLike) -> ByteSource:
    if isinstance(source, ByteSource):
        return source
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if "://" in text:
            from lerobotstream.sources import open_source

            return open_source(text)
        if not Path(text).is_dir():
            raise MetadataError(f"dataset root {text!r} is not a folder", path=text)
        return LocalSource(text)
    raise TypeError(f"source must be a ByteSource, str or Path, got {type(source).__name__}")


@dataclass(eq=False, repr=False, kw_only=True)
class DatasetMeta:
    """Metadata of one LeRobotDataset v3 root, for a selection of its episodes (build with :meth:`load`).

    - ``info`` (dict): ``meta/info.json`` as stored (feature shapes turned into tuples); ``fps``,
      ``features``, ``camera_keys`` (video + image keys, info order), ``video_keys``,
      ``image_keys``, ``shapes`` (key -> tuple), ``names``.
    - ``depth_keys``, ``has_language_columns``, ``tools``, :meth:`depth_quantizer`,
      :meth:`rescale_depth_stats`: LeRobot 0.6.1's ``LeRobotDatasetMetadata`` names and meanings.
    - ``tasks`` (by task_index), ``task_to_index``, ``stats`` (``{}`` without ``meta/stats.json``).
    - ``total_episodes`` / ``total_frames``: counted from the episode shards (all episodes); a
      mismatch with ``info["total_*"]`` lands in ``warnings`` (list[str]).
    - ``episodes`` (:class:`EpisodeRows` of the selection, episode_index order), ``episode_lengths``
      and ``episode_indices`` (np.int64), ``repo_id``, ``source``.
    - ``data_file_rows`` (path -> int): rows each data file should hold (the summed lengths of all
      its episodes), which the reader checks a footer against before decoding.
    """

    source: ByteSource
    info: dict[str, Any]
    tasks: list[str]
    stats: dict[str, Any]
    episodes: EpisodeRows
    total_episodes: int
    total_frames: int
    repo_id: str
    warnings: list[str]
    data_file_rows: dict[str, int] | None = None

    def __post_init__(self) -> None:
        info = self.info
        self.fps: int = int(info["fps"])
        self.features: dict[str, dict[str, Any]] = info["features"]
        self.video_keys: list[str] = [k for k, f in self.features.items() if f.get("dtype") == "video"]
        self.image_keys: list[str] = [k for k, f in self.features.items() if f.get("dtype") == "image"]
        self.camera_keys: list[str] = [k for k, f in self.features.items() if f.get("dtype") in ("video", "image")]
        self.shapes: dict[str, tuple[int, ...]] = {k: tuple(f.get("shape") or ()) for k, f in self.features.items()}
        self.names: dict[str, Any] = {k: f.get("names") for k, f in self.features.items()}
        self.task_to_index: dict[str, int] = {t: i for i, t in enumerate(self.tasks)}
        self.codebase_version: str = str(info.get("codebase_version"))
        self.episode_indices = self.episodes.episode_indices
        self.episode_lengths = self.episodes.lengths
        rows = self.data_file_rows
        self.data_file_rows = dict(rows) if rows is not None else self.episodes.rows_per_file()

    # --- conveniences ---------------------------------------------------------------------------
    @property
    def num_episodes(self) -> int:
        """Episodes in the selection."""
        return len(self.episodes)

    @property
    def num_frames(self) -> int:
        """Frames in the selection."""
        return int(self.episode_lengths.sum())

    # --- LeRobot 0.6 features: depth maps, language columns, tools --------------------------------
    @property
    def depth_keys(self) -> list[str]:
        """Keys of depth-map features (video or image), info order (:func:`~lerobotstream.features.is_depth_feature`)."""
        return [k for k, f in self.features.items() if is_depth_feature(f)]

    @property
    def has_language_columns(self) -> bool:
        """True when the features declare ``language_persistent`` or ``language_events`` (LeRobot
        0.6.1 then trains with its language-aware ``lerobot_collate_fn``)."""
        return any(c in self.features for c in LANGUAGE_COLUMNS)

    @property
    def tools(self) -> list[dict]:
        """Tool schemas of ``info["tools"]`` (copies), else LeRobot 0.6.1's default ``say`` tool."""
        declared = self.info.get("tools")
        return [dict(t) for t in (declared if declared else DEFAULT_TOOLS)]

    def depth_quantizer(self, key: str) -> DepthQuantizer:
        """The quantiser parameters of depth video ``key``: LeRobot 0.6.1's ``DepthEncoderConfig``
        from the feature's ``info`` (``video.depth_min`` / ``depth_max`` / ``shift``, metres, and
        ``video.use_log``; LeRobot's defaults where missing).

        Raises:
            MetadataError: ``key`` is no depth video key, its encoding is not lossless 12-bit gray
                (``gray12le``), or its parameters are invalid (names the camera).
        """
        return depth_quantizer_of(self.features, key, self.repo_id)

    def depth_unit(self, key: str) -> str | None:
        """:func:`~lerobotstream.features.depth_unit` of this dataset's feature ``key``."""
        return depth_unit(self.features, key)

    def rescale_depth_stats(self, output_unit: str) -> None:
        """Rescale the depth features' stats in place from their ``depth_unit`` to ``output_unit``
        (``"mm"`` / ``"m"``), as LeRobot 0.6.1's ``rescale_depth_stats``: every stat but ``count``
        times 1000 or 1/1000, in float64; a depth key without ``depth_unit`` is left as is (warned)."""
        rescale_depth_stats(self.stats, self.features, output_unit, self.repo_id)

    def episode(self, episode_index: int) -> EpisodeInfo:
        """The selected episode ``episode_index``. Raises MetadataError when it is not selected."""
        k = int(np.searchsorted(self.episode_indices, int(episode_index)))
        if k < len(self.episode_indices) and int(self.episode_indices[k]) == int(episode_index):
            return self.episodes[k]
        raise MetadataError(
            f"episode {episode_index} is not in the selection of {self.repo_id} ({self.num_episodes} episodes)",
            episode_index=int(episode_index),
        )

    def task_index(self, task: str) -> int:
        """``task_index`` of a task string. Raises MetadataError for an unknown task."""
        try:
            return self.task_to_index[task]
        except KeyError:
            raise MetadataError(f"unknown task {task!r} in {self.repo_id}") from None

    def video_paths(self) -> list[str]:
        """Sorted unique relative MP4 paths used by the selection."""
        return sorted(self.episodes.video_files())

    def data_paths(self) -> list[str]:
        """Sorted unique relative Parquet data paths used by the selection."""
        return sorted(self.episodes.data_files())

    def __len__(self) -> int:
        return len(self.episodes)

    def __repr__(self) -> str:
        return (
            f"DatasetMeta(repo_id={self.repo_id!r}, fps={self.fps}, episodes={self.num_episodes}/{self.total_episodes}, "
            f"frames={self.num_frames}, cameras={self.camera_keys})"
        )

    # --- loading -------------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        source: ByteSource | str | os.PathLike,
        *,
        episodes: Sequence[int] | None = None,
        repo_id: str | None = None,
        check_files: bool = True,
        problems: list | None = None,
    ) -> DatasetMeta:
        """Read and validate the metadata of a v3 dataset root.

        Args:
            source: a ByteSource, or a local folder path.
            episodes: episode indices to select (any order, duplicates ignored; None: all); an item
                may be a ``range``, checked against the dataset's indices before it is expanded.
            repo_id: name used in messages; default ``info["repo_id"]`` or the source root.
            check_files: also check that every data Parquet and MP4 the selection uses exists.
            problems: None raises the first inconsistency; a list collects each as a
                :class:`~lerobotstream.errors.Problem` (count notes: ``severity="warning"``) and
                loads what it can (``lerobotstream.validate``); unreadable files still raise.

        Raises:
            UnsupportedDatasetVersionError: ``codebase_version`` is not v3.x (says how to convert).
            MetadataError: a missing or unreadable file, a missing column, an episode whose
                ``length`` disagrees with ``[dataset_from_index, dataset_to_index)``, overlapping
                ranges, duplicate or missing episode indices, or an unknown episode in ``episodes``
                (names the episode and the file).
        """
        src = _as_source(source)
        with PrefetchedReads(src, speculative=[FIRST_SHARD_PATH], probe=INFO_PATH) as reads:
            reads.prefetch(
                ("read_file", INFO_PATH),
                ("read_file", TASKS_PATH),
                ("read_file", STATS_PATH),
                ("list", EPISODES_DIR),
                ("read_file", FIRST_SHARD_PATH),
            )
            info = _load_info(reads)
            name = repo_id or info.get("repo_id") or src.root_display or "dataset"
            notes: list[str] = []
            tasks = _load_tasks(reads)
            stats = _load_stats(reads)
            all_eps = _build_episodes(src, info, _load_episode_rows(reads, info), problems)
            total_frames = int(all_eps.lengths.sum())
            info_eps, info_frames = info.get("total_episodes"), info.get("total_frames")
            if info_eps is not None and int(info_eps) != len(all_eps):
                notes.append(
                    f"{_where(src, INFO_PATH)}: total_episodes={info_eps} but meta/episodes holds {len(all_eps)} episodes; using the episode shards"
                )
            if info_frames is not None and int(info_frames) != total_frames:
                notes.append(
                    f"{_where(src, INFO_PATH)}: total_frames={info_frames} but the episode lengths sum to {total_frames}; using the episode shards"
                )
            train = (info.get("splits") or {}).get("train")
            if isinstance(train, str) and train != f"0:{len(all_eps)}":
                notes.append(
                    f"{_where(src, INFO_PATH)}: splits.train={train!r} but meta/episodes holds {len(all_eps)} episodes; ignored"
                )
            import pyarrow.compute as pc

            named = pc.unique(pc.list_flatten(all_eps._cols.tasks.take(all_eps._rows))).to_pylist()  # first seen first
            unknown_tasks = [str(t) for t in named if t is not None and tasks and str(t) not in set(tasks)]
            for t in unknown_tasks[:10]:
                notes.append(f"task {t!r} of an episode is not in {_where(src, TASKS_PATH)}")
            if len(unknown_tasks) > 10:
                notes.append(f"{len(unknown_tasks)} task strings of episodes are not in {_where(src, TASKS_PATH)}")
            if episodes is None:
                selected = all_eps
            else:
                held = all_eps.episode_indices
                wanted, unknown = _selected(episodes, held)
                if unknown:
                    held = (
                        f"indices {all_eps[0].episode_index}..{all_eps[-1].episode_index}" if all_eps else "no episode"
                    )
                    raise MetadataError(
                        f"episodes {unknown[:10]}{'...' if len(unknown) > 10 else ''} are not in {name} "
                        f"(meta/episodes holds {len(all_eps)} episodes, {held})",
                        episode_index=unknown[0],
                        code="episodes_unknown",
                    )
                selected = all_eps.take(np.searchsorted(held, np.asarray(wanted, dtype=np.int64)))
            for note in notes:
                if problems is None:
                    warnings.warn(note, stacklevel=2)
                else:
                    problems.append(Problem("info_count", note, path=INFO_PATH, severity="warning"))
            if check_files:
                _check_files(reads, selected, problems)
        return cls(
            source=src,
            info=info,
            tasks=tasks,
            stats=stats,
            episodes=selected,
            total_episodes=len(all_eps),
            total_frames=total_frames,
            repo_id=str(name),
            warnings=notes,
            data_file_rows=all_eps.rows_per_file(),
        )


def _load_tasks(src: PrefetchedReads) -> list[str]:
    table = _read_parquet(src, TASKS_PATH, what="tasks file")
    names = table.column_names
    task_col = None
    if "task" in names:
        task_col = "task"
    elif "__index_level_0__" in names:
        task_col = "__index_level_0__"
    else:
        meta = (table.schema.metadata or {}).get(b"pandas")
        if meta:
            try:
                idx_cols = [c for c in json.loads(meta).get("index_columns", []) if isinstance(c, str)]
            except (ValueError, AttributeError, RecursionError):
                idx_cols = []
            task_col = next((c for c in idx_cols if c in names), None)
    if task_col is None or "task_index" not in names:
        raise MetadataError(
            f"{_where(src, TASKS_PATH)} needs a task_index column and the task strings (a 'task' column or the pandas index); "
            f"columns are {names}",
            path=TASKS_PATH,
        )
    idx = table.column("task_index").to_pylist()
    strings = table.column(task_col).to_pylist()
    if sorted(idx) != list(range(len(idx))):
        raise MetadataError(
            f"{_where(src, TASKS_PATH)}: task_index values {sorted(idx)[:10]} are not 0..{len(idx) - 1}",
            path=TASKS_PATH,
        )
    out = [""] * len(idx)
    for i, s in zip(idx, strings):
        out[i] = str(s)
    return out


def _load_stats(src: PrefetchedReads) -> dict[str, Any]:
    raw = _read_bytes(src, STATS_PATH, what=STATS_PATH, missing_ok=True)  # one read: a missing stats.json is no error
    stats = _parse_json(src, STATS_PATH, raw) if raw is not None else {}
    return stats if isinstance(stats, dict) else {}
