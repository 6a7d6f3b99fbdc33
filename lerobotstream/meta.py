"""LeRobotDataset v3 metadata: ``meta/info.json``, every ``meta/episodes`` shard, tasks and stats.

Everything is read through a :class:`~lerobotstream.sources.ByteSource` (``read_file``, ``list``,
``exists``), so the same reader serves a local folder, an fsspec URL or the Hub. Layout (LeRobot
v3.0): ``meta/info.json``; ``meta/episodes/chunk-XXX/file-XXX.parquet`` (one row per episode,
**all** shards are read, in sorted order); ``meta/tasks.parquet`` (pandas-index form with
``__index_level_0__`` or a plain ``task`` column, plus ``task_index``); ``meta/stats.json``
(optional). ``stats/*`` columns of the episode shards are never read (column projection).

On a remote source, reads go out together (``sources._prefetch.PrefetchedReads``): info, tasks,
stats, the episodes listing and its usual first shard; then the other shards; then the file checks.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lerobotstream._meta_episodes import (
    EpisodeInfo,
    EpisodeRows,
    EpisodeVideo,
    _build_episodes,
    _check_files,
    _load_episode_rows,
    _selected,
)
from lerobotstream._meta_files import _parse_json, _read_error, _read_parquet, _where
from lerobotstream._meta_info import CONVERT_HINT, _load_info
from lerobotstream.constants import EPISODES_DIR, FIRST_SHARD_PATH, INFO_PATH, STATS_PATH, TASKS_PATH
from lerobotstream.errors import MetadataError, Problem
from lerobotstream.features import (
    DEFAULT_TOOLS,
    DEPTH_PIX_FMTS,
    LANGUAGE_COLUMNS,
    DepthQuantizer,
    depth_quantizer_of,
    is_depth_feature,
    rescale_depth_stats,
)
from lerobotstream.sources import ByteSource
from lerobotstream.sources._local import LocalSource
from lerobotstream.sources._prefetch import PrefetchedReads


def _as_source(source: ByteSource | str | os.PathLike) -> ByteSource:
    if isinstance(source, ByteSource):
        return source
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if "://" in text:
            try:
                from lerobotstream.sources import open_source  # type: ignore[attr-defined]
            except ImportError as e:  # pragma: no cover - sources is part of the package
                raise MetadataError(f"no byte source for {text!r}: remote roots need sources.open_source") from e
            return open_source(text)
        if not Path(text).is_dir():
            raise MetadataError(f"dataset root {text!r} is not a folder", path=text)
        return LocalSource(text)
    raise TypeError(f"source must be a ByteSource, str or Path, got {type(source).__name__}")


class DatasetMeta:
    """Metadata of one LeRobotDataset v3 root, for a selection of its episodes.

    Build with :meth:`load`. Attributes:

    - ``info`` (dict): ``meta/info.json`` as stored (feature shapes turned into tuples).
    - ``fps`` (int), ``features`` (dict), ``camera_keys`` (video + image keys, info order),
      ``video_keys``, ``image_keys``, ``shapes`` (key -> tuple), ``names`` (key -> names).
    - ``depth_keys`` (video or image keys whose ``info`` marks a depth map), ``has_language_columns``,
      ``tools``, :meth:`depth_quantizer`, :meth:`rescale_depth_stats`: the same names and meanings
      as LeRobot 0.6.1's ``LeRobotDatasetMetadata``.
    - ``tasks`` (list[str] by task_index), ``task_to_index`` (dict), ``stats`` (dict; ``{}`` when
      ``meta/stats.json`` is absent).
    - ``total_episodes`` / ``total_frames``: counted from the episode shards (all episodes, not
      the selection); ``info["total_*"]`` are only compared, and a mismatch lands in ``warnings``.
    - ``episodes`` (a sequence of EpisodeInfo: :class:`EpisodeRows`, the selection's rows kept as
      columns, each EpisodeInfo built when asked for; episode_index order), ``episode_lengths``
      (np.int64), ``episode_indices`` (np.int64), ``repo_id``, ``source``, ``warnings`` (list[str]).
    - ``data_file_rows`` (dict path -> int): rows each data Parquet file should hold, the summed
      lengths of all its episodes (selected or not); the reader checks a file's footer against it
      before decoding.
    """

    def __init__(
        self,
        *,
        source: ByteSource,
        info: dict[str, Any],
        tasks: list[str],
        stats: dict[str, Any],
        episodes: Sequence[EpisodeInfo],
        total_episodes: int,
        total_frames: int,
        repo_id: str,
        warnings_: list[str],
        data_file_rows: dict[str, int] | None = None,
    ) -> None:
        self.source = source
        self.info = info
        self.fps: int = int(info["fps"])
        self.features: dict[str, dict[str, Any]] = info["features"]
        self.video_keys: list[str] = [k for k, f in self.features.items() if f.get("dtype") == "video"]
        self.image_keys: list[str] = [k for k, f in self.features.items() if f.get("dtype") == "image"]
        self.camera_keys: list[str] = [k for k, f in self.features.items() if f.get("dtype") in ("video", "image")]
        self.shapes: dict[str, tuple[int, ...]] = {k: tuple(f.get("shape") or ()) for k, f in self.features.items()}
        self.names: dict[str, Any] = {k: f.get("names") for k, f in self.features.items()}
        self.tasks = tasks
        self.task_to_index: dict[str, int] = {t: i for i, t in enumerate(tasks)}
        self.stats = stats
        self.episodes = episodes
        self.total_episodes = total_episodes
        self.total_frames = total_frames
        self.repo_id = repo_id
        self.warnings = warnings_
        self.codebase_version: str = str(info.get("codebase_version"))
        if isinstance(episodes, EpisodeRows):
            self.episode_indices = episodes.episode_indices
            self.episode_lengths = episodes.lengths
        else:
            self.episode_indices = np.array([ep.episode_index for ep in episodes], dtype=np.int64)
            self.episode_lengths = np.array([ep.length for ep in episodes], dtype=np.int64)
        self.data_file_rows: dict[str, int] = (
            dict(data_file_rows) if data_file_rows is not None else _rows_per_file(episodes)
        )

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
        """Keys of depth-map features (video or image), info order, as LeRobot 0.6.1 defines them:
        the feature's ``info`` has ``is_depth_map: true`` (or the legacy ``video.is_depth_map`` in
        ``info`` or ``video_info``)."""
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
        """The quantiser parameters of depth video ``key`` (LeRobot 0.6.1's ``DepthEncoderConfig``
        read from the feature's ``info``: ``video.depth_min`` / ``video.depth_max`` / ``video.shift``
        (metres) and ``video.use_log``; a missing value takes LeRobot's default).

        Raises:
            MetadataError: ``key`` is not a depth video key, or its encoding is one this reader
                does not decode losslessly (only 12-bit gray ``gray12le`` is), or its parameters are
                invalid (``depth_min + shift <= 0`` with ``use_log``, ``depth_max <= depth_min``,
                non-numbers). The message names the camera and what is unsupported.
        """
        return depth_quantizer_of(self.features, key, self.repo_id)

    def depth_unit(self, key: str) -> str | None:
        """The unit a depth feature was recorded in (``info["depth_unit"]``: ``"mm"`` / ``"m"``), or None."""
        return ((self.features.get(key) or {}).get("info") or {}).get("depth_unit")

    def rescale_depth_stats(self, output_unit: str) -> None:
        """Rescale the depth features' stats in place from their recorded ``depth_unit`` to
        ``output_unit`` (``"mm"`` / ``"m"``), as LeRobot 0.6.1's ``rescale_depth_stats``: every
        stat but ``count`` is multiplied by 1000 (m → mm) or 1/1000 (mm → m), in float64; lists
        stay lists, arrays arrays. A depth key without ``depth_unit`` is left as is (a warning says
        so, as LeRobot's does)."""
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
        if isinstance(self.episodes, EpisodeRows):
            return sorted(self.episodes.video_files())
        return sorted({v.path for ep in self.episodes for v in ep.videos.values()})

    def data_paths(self) -> list[str]:
        """Sorted unique relative Parquet data paths used by the selection."""
        if isinstance(self.episodes, EpisodeRows):
            return sorted(self.episodes.data_files())
        return sorted({ep.data_path for ep in self.episodes})

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
            episodes: episode indices to select (any order, duplicates ignored); None = all. An
                item may also be a ``range`` (``range(0, 10)``): it is checked against the
                dataset's episode indices before it is expanded, so a huge range costs nothing.
            repo_id: name used in messages; default ``info["repo_id"]`` or the source root.
            check_files: also check that every data Parquet and MP4 the selection uses exists
                (one ``exists`` call per unique file).
            problems: None raises the first inconsistency below; a list collects each as a
                :class:`~lerobotstream.errors.Problem` (the ``MetadataError``'s code, message and
                fields; count notes: ``severity="warning"``) and loads what it can
                (``lerobotstream.validate``); unreadable files still raise.

        Returns:
            DatasetMeta: with ``episodes`` sorted by ``episode_index``.

        Raises:
            UnsupportedDatasetVersionError: ``codebase_version`` is not v3.x (v2.x: says how to convert).
            MetadataError: a missing or unreadable file (``info.json``, a shard, ``tasks.parquet``,
                a referenced data/video file), a missing column, an episode whose ``length``
                disagrees with ``[dataset_from_index, dataset_to_index)``, overlapping ranges,
                duplicate or missing episode indices, or an unknown episode in ``episodes``.
                Messages name the episode and the file.
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
            unknown_tasks = [t for t in all_eps.task_strings() if tasks and t not in set(tasks)]
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
            warnings_=notes,
            data_file_rows=_rows_per_file(all_eps),
        )


def _rows_per_file(episodes: Sequence[EpisodeInfo]) -> dict[str, int]:
    """Rows each data Parquet file should hold: the lengths of its episodes, summed."""
    if isinstance(episodes, EpisodeRows):
        lengths = episodes.lengths
        return {path: int(lengths[pos].sum()) for path, pos in episodes.data_files().items()}
    out: dict[str, int] = {}
    for ep in episodes:
        out[ep.data_path] = out.get(ep.data_path, 0) + int(ep.length)
    return out


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
    try:  # one read, no existence check first: a missing stats.json is no error
        raw = src.read_file(STATS_PATH)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise _read_error(src, STATS_PATH, STATS_PATH, e) from e
    stats = _parse_json(src, STATS_PATH, raw)
    return stats if isinstance(stats, dict) else {}


__all__ = [
    "DatasetMeta",
    "DepthQuantizer",
    "EpisodeInfo",
    "EpisodeRows",
    "EpisodeVideo",
    "CONVERT_HINT",
    "LANGUAGE_COLUMNS",
    "DEPTH_PIX_FMTS",
    "DEFAULT_TOOLS",
]
