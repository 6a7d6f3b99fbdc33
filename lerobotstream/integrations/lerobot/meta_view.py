"""``dataset.meta`` as LeRobot's code reads it: a ``LeRobotDatasetMetadata``-shaped view over
:class:`lerobotstream.meta.DatasetMeta`.

What lerobot-train 0.6.1, its policy and processor factories, the model card
(``PreTrainedPolicy.push_model_to_hub``) and the reward models read from
``LeRobotDatasetMetadata`` (found by reading LeRobot 0.6.1's ``lerobot_train.py``, ``policies/``,
``processor/``, ``rewards/``, ``datasets/factory.py`` and ``datasets/dataset_metadata.py``):
``features``, ``fps``, ``stats`` (numpy arrays, mutable: LeRobot writes ImageNet stats into it),
``camera_keys`` / ``video_keys`` / ``image_keys`` / ``depth_keys``, ``has_language_columns``,
``tasks`` (a pandas DataFrame indexed by task string, column ``task_index``), ``episodes``
(columns by name, rows by episode index), ``total_episodes`` / ``total_frames`` / ``total_tasks``,
``robot_type``, ``repo_id``, ``root``, ``chunks_size``, ``data_path`` / ``video_path``,
``names`` / ``shapes``, ``get_task_index``, ``rescale_depth_stats``. Everything else falls
through to the underlying :class:`~lerobotstream.meta.DatasetMeta`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["LeRobotMetaView", "EpisodeTable", "LANGUAGE_COLUMNS", "DEPTH_UNITS"]

#: LeRobot 0.6.1's language columns (``lerobot.datasets.language.LANGUAGE_COLUMNS``)
LANGUAGE_COLUMNS = ("language_persistent", "language_events")
#: LeRobot 0.6.1's depth output units and the factor between them
DEPTH_UNITS = ("mm", "m")
_MM_PER_METRE = 1000.0


def _is_depth(feature: dict[str, Any]) -> bool:
    """LeRobot 0.6.1's rule: ``info.is_depth_map`` (or the legacy ``video.is_depth_map`` inside
    ``info`` or ``video_info``)."""
    info = feature.get("info") or {}
    video_info = feature.get("video_info") or {}
    return bool(info.get("is_depth_map", False) or info.get("video.is_depth_map", False)
                or video_info.get("video.is_depth_map", False))


class _EpisodeColumn(Sequence):
    """One column of :class:`EpisodeTable`: ``column[episode_index]`` and iteration in episode order."""

    def __init__(self, values: dict[int, Any]) -> None:
        self._values = values

    def __getitem__(self, episode_index):  # type: ignore[override]
        if isinstance(episode_index, slice):
            return list(self._values.values())[episode_index]
        try:
            return self._values[int(episode_index)]
        except KeyError:
            raise IndexError(f"episode {episode_index} is not in the streamed selection "
                             f"({len(self._values)} episodes)") from None

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values.values())

    def __repr__(self) -> str:
        return f"EpisodeColumn({list(self._values.values())!r})"


class EpisodeTable:
    """The selected episodes' ``meta/episodes`` rows, addressed like LeRobot's ``meta.episodes``
    (a ``datasets.Dataset``): ``table["dataset_from_index"][episode_index]``,
    ``table[episode_index]["length"]``, ``len(table)``, ``table.column_names``, ``to_pandas()``.

    Rows are keyed by ``episode_index`` (LeRobot loads every episode, so its row position is the
    episode index; here only the selection is held, and a row outside it raises IndexError).
    Columns: ``episode_index``, ``length``, ``dataset_from_index``, ``dataset_to_index``,
    ``data/chunk_index``, ``data/file_index``, ``tasks`` (list[str]) and per video key
    ``videos/<key>/{chunk_index,file_index,from_timestamp,to_timestamp}``.
    """

    def __init__(self, episodes: Sequence[Any]) -> None:
        self._rows: dict[int, dict[str, Any]] = {}
        for ep in episodes:
            row = {"episode_index": ep.episode_index, "length": ep.length,
                   "dataset_from_index": ep.dataset_from_index, "dataset_to_index": ep.dataset_to_index,
                   "data/chunk_index": ep.data_chunk_index, "data/file_index": ep.data_file_index,
                   "tasks": list(ep.tasks)}
            for key, v in ep.videos.items():
                row.update({f"videos/{key}/chunk_index": v.chunk_index, f"videos/{key}/file_index": v.file_index,
                            f"videos/{key}/from_timestamp": v.from_timestamp,
                            f"videos/{key}/to_timestamp": v.to_timestamp})
            self._rows[int(ep.episode_index)] = row
        self.column_names: list[str] = list(next(iter(self._rows.values()), {}))

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, str):
            if key not in self.column_names:
                raise KeyError(f"no episode column {key!r}; columns: {self.column_names}")
            return _EpisodeColumn({e: r.get(key) for e, r in self._rows.items()})
        try:
            return dict(self._rows[int(key)])
        except KeyError:
            raise IndexError(f"episode {key} is not in the streamed selection ({len(self._rows)} episodes)") from None

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (dict(r) for r in self._rows.values())

    def to_pandas(self):
        import pandas as pd

        return pd.DataFrame(list(self._rows.values()))


class LeRobotMetaView:
    """``LeRobotDatasetMetadata``'s surface over a :class:`~lerobotstream.meta.DatasetMeta`.

    Args:
        meta: the stream's metadata.
        root: the dataset's local root folder, or None for a remote one (``root`` attribute).

    ``stats`` is a private, mutable copy with numpy arrays (``np.ndarray``, float64 or as stored),
    like LeRobot's. Picklable (DataLoader workers under ``spawn``).
    """

    def __init__(self, meta: Any, root: str | Path | None = None) -> None:
        self._meta = meta
        self.features: dict[str, dict[str, Any]] = meta.features
        self.stats: dict[str, dict[str, np.ndarray]] = {
            k: {s: np.asarray(v) for s, v in d.items()} for k, d in (meta.stats or {}).items() if isinstance(d, dict)}
        self.root = None if root is None or "://" in str(root) else Path(root)
        self.episodes = EpisodeTable(meta.episodes)

    # --- keys -----------------------------------------------------------------------------------
    @property
    def camera_keys(self) -> list[str]:
        """Video and image keys, in ``info.json`` order (LeRobot's rule)."""
        return [k for k, ft in self.features.items() if ft.get("dtype") in ("video", "image")]

    @property
    def video_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft.get("dtype") == "video"]

    @property
    def image_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft.get("dtype") == "image"]

    @property
    def depth_keys(self) -> list[str]:
        """Keys whose feature ``info`` marks a depth map (``is_depth_map``)."""
        return [k for k, ft in self.features.items() if _is_depth(ft)]

    @property
    def has_language_columns(self) -> bool:
        """True when a language column (``language_persistent`` / ``language_events``) is a feature."""
        return any(col in self.features for col in LANGUAGE_COLUMNS)

    @property
    def names(self) -> dict[str, Any]:
        return {k: ft.get("names") for k, ft in self.features.items()}

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: tuple(ft.get("shape") or ()) for k, ft in self.features.items()}

    # --- counts and layout ----------------------------------------------------------------------
    @property
    def fps(self) -> int:
        return int(self._meta.fps)

    @property
    def repo_id(self) -> str:
        return self._meta.repo_id

    @property
    def robot_type(self) -> str | None:
        return self._meta.info.get("robot_type")

    @property
    def total_episodes(self) -> int:
        return int(self._meta.total_episodes)

    @property
    def total_frames(self) -> int:
        return int(self._meta.total_frames)

    @property
    def total_tasks(self) -> int:
        return len(self._meta.tasks)

    @property
    def chunks_size(self) -> int | None:
        return self._meta.info.get("chunks_size")

    @property
    def data_path(self) -> str:
        return self._meta.info["data_path"]

    @property
    def video_path(self) -> str | None:
        return self._meta.info.get("video_path")

    @property
    def data_files_size_in_mb(self) -> int | None:
        return self._meta.info.get("data_files_size_in_mb")

    @property
    def video_files_size_in_mb(self) -> int | None:
        return self._meta.info.get("video_files_size_in_mb")

    # --- tasks ----------------------------------------------------------------------------------
    @property
    def tasks(self):
        """pandas.DataFrame indexed by task string (index name ``task``), column ``task_index``."""
        import pandas as pd

        frame = pd.DataFrame({"task_index": np.arange(len(self._meta.tasks), dtype=np.int64)},
                             index=pd.Index(list(self._meta.tasks), name="task"))
        return frame

    def get_task_index(self, task: str) -> int | None:
        """``task_index`` of a task string, or None when the dataset has no such task (LeRobot's contract)."""
        index = self._meta.task_to_index.get(task)
        return None if index is None else int(index)

    # --- depth ----------------------------------------------------------------------------------
    def rescale_depth_stats(self, output_unit: str) -> None:
        """Rescale depth stats in place from ``info.depth_unit`` to ``output_unit`` (``"mm"``/``"m"``),
        as LeRobot 0.6.1's ``LeRobotDatasetMetadata.rescale_depth_stats`` does (``count`` kept).

        Raises:
            ValueError: an unknown ``output_unit``.
        """
        if output_unit not in DEPTH_UNITS:
            raise ValueError(f"depth output unit must be one of {DEPTH_UNITS}, got {output_unit!r}")
        for key in self.depth_keys:
            stored = (self.features[key].get("info") or {}).get("depth_unit")
            if stored is None or stored == output_unit or key not in self.stats:
                continue
            factor = _MM_PER_METRE if stored == "m" else 1.0 / _MM_PER_METRE
            self.stats[key] = {s: v if s == "count" else v * factor for s, v in self.stats[key].items()}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_meta":
            raise AttributeError(name)
        return getattr(self._meta, name)

    def __repr__(self) -> str:
        return f"LeRobotMetaView({self._meta!r})"
