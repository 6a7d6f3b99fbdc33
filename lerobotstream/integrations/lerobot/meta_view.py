"""``dataset.meta`` as LeRobot's code reads it: a ``LeRobotDatasetMetadata``-shaped view over
:class:`lerobotstream.meta.DatasetMeta`.

What LeRobot 0.6.1's ``lerobot_train.py``, ``policies/``, ``processor/``, ``rewards/`` and
``datasets/`` read from ``LeRobotDatasetMetadata``: ``features``, ``fps``, ``stats`` (numpy, mutable:
LeRobot writes ImageNet stats into it), ``camera_keys`` / ``video_keys`` / ``image_keys`` /
``depth_keys``, ``has_language_columns``, ``tools``, ``tasks`` (a DataFrame indexed by task,
column ``task_index``), ``episodes`` (columns by name, rows by episode index), ``total_*``,
``robot_type``, ``repo_id``, ``root``, ``chunks_size``, ``data_path`` / ``video_path``, ``names`` /
``shapes``, ``get_task_index``. This view adds the LeRobot-shaped ones; the others are
:class:`~lerobotstream.meta.DatasetMeta`'s own, with LeRobot's names and meanings.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["LeRobotMetaView", "EpisodeTable"]

#: ``info.json`` fields the view answers as LeRobot's metadata attributes of the same names
_INFO_FIELDS = "robot_type chunks_size data_path video_path data_files_size_in_mb video_files_size_in_mb".split()


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
            raise IndexError(
                f"episode {episode_index} is not in the streamed selection ({len(self._values)} episodes)"
            ) from None

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
            row = {
                "episode_index": ep.episode_index,
                "length": ep.length,
                "dataset_from_index": ep.dataset_from_index,
                "dataset_to_index": ep.dataset_to_index,
                "data/chunk_index": ep.data_chunk_index,
                "data/file_index": ep.data_file_index,
                "tasks": list(ep.tasks),
            }
            for key, v in ep.videos.items():
                for field in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
                    row[f"videos/{key}/{field}"] = getattr(v, field)
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
    like LeRobot's, taken when the view is made: depth stats are already in the dataset's
    ``depth_output_unit`` (the dataset rescales them at construction, as LeRobot's does).
    Picklable (DataLoader workers under ``spawn``).
    """

    def __init__(self, meta: Any, root: str | Path | None = None) -> None:
        self._meta = meta
        self.features: dict[str, dict[str, Any]] = meta.features
        self.stats: dict[str, dict[str, np.ndarray]] = {
            k: {s: np.asarray(v) for s, v in d.items()} for k, d in (meta.stats or {}).items() if isinstance(d, dict)
        }
        self.root = None if root is None or "://" in str(root) else Path(root)
        self.episodes = EpisodeTable(meta.episodes)

    @property
    def total_tasks(self) -> int:
        return len(self._meta.tasks)

    @property
    def tasks(self):
        """pandas.DataFrame indexed by task string (index name ``task``), column ``task_index``."""
        import pandas as pd

        return pd.DataFrame(
            {"task_index": np.arange(len(self._meta.tasks), dtype=np.int64)},
            index=pd.Index(list(self._meta.tasks), name="task"),
        )

    def get_task_index(self, task: str) -> int | None:
        """``task_index`` of a task string, or None when the dataset has no such task (LeRobot's contract)."""
        index = self._meta.task_to_index.get(task)
        return None if index is None else int(index)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_meta":
            raise AttributeError(name)
        if name in _INFO_FIELDS:  # None when info.json lacks it (data_path never does)
            return self._meta.info.get(name)
        if name == "rescale_depth_stats":  # would rescale the dataset's copy, not this one
            raise AttributeError("rescale_depth_stats: the stats are already in the dataset's depth_output_unit")
        return getattr(self._meta, name)

    def __repr__(self) -> str:
        return f"LeRobotMetaView({self._meta!r})"
