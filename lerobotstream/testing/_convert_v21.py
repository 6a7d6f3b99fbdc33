"""Convert a local LeRobotDataset v2.1 folder (or the subset of its episodes present) to v3.0.

No re-encoding: each camera's episode MP4s are joined by stream copy; ``from_timestamp`` is the
summed real duration (PyAV, as LeRobot's ``get_video_duration_in_s``) of the episodes before it in
its file. The episodes' data Parquet files are merged (rolling over at ``data_file_size_mb``) with
``index`` renumbered from 0. Episodes whose data Parquet or videos are absent are skipped and the
kept ones **renumbered 0..N-1 in their original order** (v3 readers expect contiguous indices);
the mapping is written to ``meta/episode_index_map.json``. Episode metadata, tasks, per-episode
stats (``stats/<feature>/<stat>`` columns) and ``meta/stats.json`` follow LeRobot v3.0's layout.

CLI of a checkout: ``python -m tools.convert_v21_to_v30 data/testmedia/lerobot-v21-g1-subset data/g1_v30``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lerobotstream.testing._media import (
    DATA_PATH,
    EPISODES_PATH,
    VIDEO_PATH,
    _Roller,
    _tasks_table,
    _write_json,
    _write_parquet,
    _write_videos,
)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _aggregate(stats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Merge per-episode {min, max, mean, std, count} of one feature (count-weighted, like LeRobot)."""
    counts = np.array([np.asarray(s["count"], dtype=np.float64).reshape(-1)[0] for s in stats])
    means = np.stack([np.asarray(s["mean"], dtype=np.float64) for s in stats])
    stds = np.stack([np.asarray(s["std"], dtype=np.float64) for s in stats])
    w = counts.reshape((-1,) + (1,) * (means.ndim - 1))
    total = counts.sum()
    mean = (means * w).sum(0) / total
    var = ((stds**2 + (means - mean) ** 2) * w).sum(0) / total
    return {
        "min": np.min(np.stack([np.asarray(s["min"]) for s in stats]), axis=0).tolist(),
        "max": np.max(np.stack([np.asarray(s["max"]) for s in stats]), axis=0).tolist(),
        "mean": mean.tolist(),
        "std": np.sqrt(var).tolist(),
        "count": [int(total)],
    }


def convert(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    data_file_size_mb: float = 100.0,
    video_file_size_mb: float = 200.0,
) -> Path:
    """Convert the v2.1 dataset at ``src`` into a v3.0 dataset at ``dst`` (must not exist).

    Returns:
        Path: ``dst``.

    Raises:
        ValueError: ``src`` is not v2.1, or none of its episodes has its data Parquet.
        RuntimeError: ffmpeg failed.
    """
    src, dst = Path(src), Path(dst)
    info = json.loads((src / "meta/info.json").read_text())
    if info.get("codebase_version") != "v2.1":
        raise ValueError(f"{src}/meta/info.json: codebase_version {info.get('codebase_version')!r}, expected 'v2.1'")
    if dst.exists():
        raise ValueError(f"{dst} exists; remove it first")
    chunks_size = int(info.get("chunks_size", 1000))
    video_keys = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    episodes_meta = {e["episode_index"]: e for e in _read_jsonl(src / "meta/episodes.jsonl")}
    ep_stats = {e["episode_index"]: e["stats"] for e in _read_jsonl(src / "meta/episodes_stats.jsonl")}
    tasks_v21 = sorted(_read_jsonl(src / "meta/tasks.jsonl"), key=lambda t: t["task_index"])
    tasks = [t["task"] for t in tasks_v21]

    def v21_data(ep: int) -> Path:
        return src / info["data_path"].format(episode_chunk=ep // chunks_size, episode_index=ep)

    def v21_video(ep: int, key: str) -> Path:
        return src / info["video_path"].format(episode_chunk=ep // chunks_size, video_key=key, episode_index=ep)

    kept = [
        ep
        for ep in sorted(episodes_meta)
        if v21_data(ep).is_file() and all(v21_video(ep, k).is_file() for k in video_keys)
    ]
    if not kept:
        raise ValueError(f"{src}: no episode has both its data Parquet and its videos")
    new_of = {old: new for new, old in enumerate(kept)}
    tmp = dst.with_name(dst.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)

    rows = _copy_data(
        tmp, [v21_data(old) for old in kept], [episodes_meta[old] for old in kept], data_file_size_mb, chunks_size
    )
    for key in video_keys:  # stream copy
        parts = [v21_video(old, key) for old in kept]
        _write_videos(tmp, key, parts, rows, _Roller(video_file_size_mb, None, chunks_size), faststart=False)
    _write_episodes_meta(tmp, rows, video_keys, list(info["features"]), [ep_stats.get(old, {}) for old in kept])
    _write_parquet(_tasks_table(tasks, "pandas_index"), tmp / "meta/tasks.parquet")
    stats = {
        feat: _aggregate([ep_stats[old][feat] for old in kept])
        for feat in info["features"]
        if all(feat in ep_stats[o] for o in kept)
    }
    n_total = rows[-1]["dataset_to_index"]
    for feat, values in (("episode_index", np.arange(len(kept))), ("index", np.arange(n_total))):
        if feat in stats:
            stats[feat].update(min=[int(values.min())], max=[int(values.max())], mean=[float(values.mean())])
    _write_json(stats, tmp / "meta/stats.json")

    info3 = dict(info)
    for k in ("total_chunks", "total_videos"):
        info3.pop(k, None)
    info3.update(
        codebase_version="v3.0",
        total_episodes=len(kept),
        total_frames=n_total,
        total_tasks=len(tasks),
        chunks_size=chunks_size,
        data_files_size_in_mb=data_file_size_mb,
        video_files_size_in_mb=video_file_size_mb,
        splits={"train": f"0:{len(kept)}"},
        data_path=DATA_PATH,
        video_path=VIDEO_PATH if video_keys else None,
    )
    _write_json(info3, tmp / "meta/info.json")
    _write_json(
        {"new_to_original": {str(new_of[o]): o for o in kept}, "source_codebase_version": "v2.1"},
        tmp / "meta/episode_index_map.json",
    )
    os.replace(tmp, dst)
    return dst


def _copy_data(
    tmp: Path, paths: list[Path], episodes: list[dict], data_file_size_mb: float, chunks_size: int
) -> list[dict[str, Any]]:
    """Merge the kept episodes' data Parquet files (v2.1: one per episode, ``paths``) into v3.0
    files, ``episode_index`` and ``index`` renumbered from 0; returns each episode's
    ``meta/episodes`` row so far.

    Raises:
        ValueError: an episode's row count differs from its ``episodes.jsonl`` length.
    """
    rows: list[dict[str, Any]] = []
    roller = _Roller(data_file_size_mb, None, chunks_size)
    groups: dict[tuple[int, int], list[pa.Table]] = {}
    start = 0
    for new, (path, meta) in enumerate(zip(paths, episodes)):
        table = pq.read_table(path)
        n = table.num_rows
        if n != meta["length"]:
            raise ValueError(
                f"episode {meta['episode_index']}: {n} data rows but episodes.jsonl says length {meta['length']}"
            )
        table = table.replace_schema_metadata(None)
        table = table.set_column(
            table.schema.get_field_index("episode_index"), "episode_index", pa.array(np.full(n, new, np.int64))
        )
        table = table.set_column(
            table.schema.get_field_index("index"), "index", pa.array(np.arange(start, start + n, dtype=np.int64))
        )
        c, f = roller.place(table.nbytes)
        groups.setdefault((c, f), []).append(table)
        rows.append(
            {
                "episode_index": new,
                "data/chunk_index": c,
                "data/file_index": f,
                "dataset_from_index": start,
                "dataset_to_index": start + n,
                "tasks": list(meta["tasks"]),
                "length": n,
            }
        )
        start += n
    for (c, f), tables in groups.items():
        _write_parquet(pa.concat_tables(tables), tmp / DATA_PATH.format(chunk_index=c, file_index=f))
    return rows


def _write_episodes_meta(
    tmp: Path, rows: list[dict], video_keys: list[str], features: list[str], ep_stats: list[dict]
) -> None:
    """``meta/episodes`` (one shard), with the per-episode stats flattened (a feature's stat only
    when every kept episode has it)."""
    cols: dict[str, Any] = {}
    order = ["episode_index", "data/chunk_index", "data/file_index", "dataset_from_index", "dataset_to_index"]
    for key in video_keys:
        order += [f"videos/{key}/{s}" for s in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
    order += ["tasks", "length"]
    for name in order:
        cols[name] = [r[name] for r in rows]
    cols["meta/episodes/chunk_index"] = [0] * len(rows)
    cols["meta/episodes/file_index"] = [0] * len(rows)
    for feat in features:
        for stat in ("min", "max", "mean", "std", "count"):
            vals = [st[feat][stat] for st in ep_stats if feat in st]
            if len(vals) == len(rows):
                cols[f"stats/{feat}/{stat}"] = vals
    _write_parquet(pa.table(cols), tmp / EPISODES_PATH.format(chunk_index=0, file_index=0))
