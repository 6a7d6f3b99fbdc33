"""Map-style oracle: the item LeRobot's ``LeRobotDataset.__getitem__`` builds, from a local root.

Independent of the library on purpose (only pyarrow, torch and torchcodec): metadata is read
straight from ``meta/``, rows from ``data/`` Parquet, and every frame comes from a **full
sequential torchcodec decode** of each source MP4 (decoded once, kept per file), matched to the
query timestamp by nearest PTS with the map-style tolerance test (strictly less than
``tolerance_s``).

Semantics reproduced (LeRobot v3 map-style):

* row fields go through the HF torch formatter: ``torch.tensor(python_value)`` per column, so
  floats become float32, ints int64, bools bool; strings stay strings;
* ``delta_timestamps``: frame deltas ``round(d*fps)``; window rows ``clamp(idx+k, from, to-1)``
  in absolute dataset indices; ``<key>_is_pad``; non-video keys stacked on a new leading axis;
* video query: the row's ``timestamp`` (or the window rows' ``timestamp``) plus
  ``videos/<key>/from_timestamp``; frames float32 in [0, 1] (uint8 with ``return_uint8``),
  ``(T, C, H, W)`` with the leading 1 squeezed;
* ``task`` = the task string at position ``task_index`` of ``meta/tasks.parquet``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch


def _tasks(root: Path) -> list[str]:
    table = pq.read_table(root / "meta" / "tasks.parquet")
    for name in ("task", "__index_level_0__"):
        if name in table.column_names:
            names = table.column(name).to_pylist()
            break
    else:
        names = next(c.to_pylist() for c in table.columns if pa.types.is_string(c.type))
    return list(names)


def _to_torch(value: Any) -> Any:
    """What ``hf_transform_to_torch`` makes of one python value."""
    if value is None or isinstance(value, str):
        return value
    return torch.tensor(value)


class FullDecode:
    """All frames of one MP4 (decode order → presentation, as torchcodec returns them)."""

    def __init__(self, path: Path) -> None:
        from torchcodec.decoders import VideoDecoder

        dec = VideoDecoder(str(path), seek_mode="exact")
        batch = dec.get_frames_in_range(0, len(dec))
        self.frames = batch.data  # (N, C, H, W) uint8
        self.pts_s = batch.pts_seconds.to(torch.float64).numpy()
        self.path = path

    def at(self, timestamps: Sequence[float], tolerance_s: float) -> tuple[torch.Tensor, np.ndarray]:
        q = np.asarray(timestamps, dtype=np.float64)
        dist = np.abs(q[:, None] - self.pts_s[None, :])
        nearest = dist.argmin(axis=1)
        d = dist[np.arange(len(q)), nearest]
        if not (d < tolerance_s).all():
            raise AssertionError(
                f"{self.path}: queried {q.tolist()} nearest pts {self.pts_s[nearest].tolist()} "
                f"violate tolerance {tolerance_s}"
            )
        return self.frames[torch.as_tensor(nearest)], nearest


class MapStyleReference:
    """Items of map-style LeRobot for a local v3 dataset root.

    Args:
        root: dataset folder.
        episodes: selected episode indices (None: all).
        delta_timestamps: ``{key: [seconds...]}`` or None.
        tolerance_s: frame timestamp tolerance.
        return_uint8: video frames as uint8 instead of float32 [0, 1].
        camera_keys: decode only these video keys (None: all).
    """

    def __init__(
        self,
        root: str | Path,
        *,
        episodes: Iterable[int] | None = None,
        delta_timestamps: dict[str, list[float]] | None = None,
        tolerance_s: float = 1e-4,
        return_uint8: bool = False,
        camera_keys: Sequence[str] | None = None,
    ) -> None:
        self.root = Path(root)
        self.info = json.loads((self.root / "meta" / "info.json").read_text())
        self.fps = self.info["fps"]
        self.features = self.info["features"]
        self.video_keys = [k for k, f in self.features.items() if f["dtype"] == "video"]
        if camera_keys is not None:
            self.video_keys = [k for k in self.video_keys if k in set(camera_keys)]
        self.tasks = _tasks(self.root)
        self.tolerance_s = tolerance_s
        self.return_uint8 = return_uint8
        ep_files = sorted((self.root / "meta" / "episodes").rglob("*.parquet"))
        table = pa.concat_tables([pq.read_table(p) for p in ep_files], promote_options="default")
        table = table.select([c for c in table.column_names if not c.startswith("stats/")])
        self.episodes = {r["episode_index"]: r for r in table.to_pylist()}
        sel = sorted(self.episodes) if episodes is None else sorted(set(int(e) for e in episodes))
        self.selected = sel
        # hf_dataset: rows of the selected episodes, in file order (= index order)
        data_paths = sorted(
            {
                self.info["data_path"].format(
                    chunk_index=self.episodes[e]["data/chunk_index"], file_index=self.episodes[e]["data/file_index"]
                )
                for e in sel
            }
        )
        rows = pa.concat_tables([pq.read_table(self.root / p) for p in data_paths])
        rows = rows.filter(pc.is_in(rows.column("episode_index"), pa.array(sel, pa.int64())))
        rows = rows.sort_by("index")
        self.columns = rows.column_names
        self.rows = rows.to_pylist()
        self.abs_to_rel = {r["index"]: i for i, r in enumerate(self.rows)}
        self.delta_indices = (
            None
            if delta_timestamps is None
            else {k: [round(d * self.fps) for d in v] for k, v in delta_timestamps.items()}
        )
        self._decodes: dict[Path, FullDecode] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def anchors(self) -> list[tuple[int, int]]:
        """Every (episode_index, frame_index) of the selection, in index order."""
        return [(r["episode_index"], r["frame_index"]) for r in self.rows]

    def _row(self, rel: int) -> dict[str, Any]:
        return {k: _to_torch(v) for k, v in self.rows[rel].items()}

    def _decode(self, path: Path) -> FullDecode:
        if path not in self._decodes:
            self._decodes[path] = FullDecode(path)
        return self._decodes[path]

    def video_path(self, ep: int, key: str) -> Path:
        e = self.episodes[ep]
        return self.root / self.info["video_path"].format(
            video_key=key, chunk_index=e[f"videos/{key}/chunk_index"], file_index=e[f"videos/{key}/file_index"]
        )

    def item(self, episode_index: int, frame_index: int) -> dict[str, Any]:
        """The map-style item of ``(episode_index, frame_index)``."""
        ep = self.episodes[episode_index]
        ep_start, ep_end = ep["dataset_from_index"], ep["dataset_to_index"]
        idx = ep_start + frame_index
        item = self._row(self.abs_to_rel[idx])
        query_indices = None
        if self.delta_indices is not None:
            query_indices = {
                key: [max(ep_start, min(ep_end - 1, idx + d)) for d in di] for key, di in self.delta_indices.items()
            }
            padding = {
                f"{key}_is_pad": torch.BoolTensor([(idx + d < ep_start) | (idx + d >= ep_end) for d in di])
                for key, di in self.delta_indices.items()
            }
            item = {**item, **padding}
            for key, q in query_indices.items():
                if key in self.video_keys or key not in self.columns:
                    continue
                item[key] = torch.stack([_to_torch(self.rows[self.abs_to_rel[i]][key]) for i in q])
        frames = {}
        current_ts = item["timestamp"].item()
        for key in self.video_keys:
            if query_indices is not None and key in query_indices:
                ts = [_to_torch(self.rows[self.abs_to_rel[i]]["timestamp"]).item() for i in query_indices[key]]
            else:
                ts = [current_ts]
            from_ts = ep[f"videos/{key}/from_timestamp"]
            shifted = [from_ts + t for t in ts]
            data, _ = self._decode(self.video_path(episode_index, key)).at(shifted, self.tolerance_s)
            if not self.return_uint8:
                data = data.type(torch.float32) / 255
            frames[key] = data.squeeze(0)
        item = {**frames, **item}
        item["task"] = self.tasks[item["task_index"].item()]
        return item


def assert_items_equal(got: dict[str, Any], want: dict[str, Any], where: str = "") -> None:
    """Same keys; every tensor equal in dtype, shape and value; strings equal."""
    assert set(got) == set(want), f"{where}: keys differ: extra {set(got) - set(want)}, missing {set(want) - set(got)}"
    for k, w in want.items():
        g = got[k]
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor), f"{where}: {k} is {type(g)}"
            assert g.dtype == w.dtype, f"{where}: {k} dtype {g.dtype} != {w.dtype}"
            assert tuple(g.shape) == tuple(w.shape), f"{where}: {k} shape {tuple(g.shape)} != {tuple(w.shape)}"
            assert torch.equal(g, w), f"{where}: {k} values differ"
        else:
            assert g == w, f"{where}: {k} {g!r} != {w!r}"
