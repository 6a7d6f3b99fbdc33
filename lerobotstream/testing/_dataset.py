"""Generate small LeRobotDataset v3.0 datasets whose frames carry their own identity.

The layout is LeRobot v3.0's: ``meta/info.json``, ``meta/episodes/chunk-XXX/file-XXX.parquet``
(one or several shards), ``meta/tasks.parquet`` (pandas-index form by default), ``meta/stats.json``,
``data/chunk-XXX/file-XXX.parquet`` and one MP4 per camera and file
``videos/<key>/chunk-XXX/file-XXX.mp4``. Like LeRobot's writer, each episode is encoded on its own
(ffmpeg CLI, raw RGB on stdin, ``yuv420p``), then a file's episodes are joined by a PyAV remux
(stream copy); an episode's ``from_timestamp`` is the summed duration (PyAV ``stream.duration *
time_base``, as LeRobot's ``get_video_duration_in_s``) of the episodes before it in its file.

Frames encode ``(episode_index, frame_index, camera_index)`` (:mod:`._identity`, read back by
:func:`read_identity`). The tabular features encode the same identity:
``observation.state[0] = episode_index``, ``[1] = frame_index``, ``[2] = index``;
``action[0] = episode_index``, ``[1] = frame_index + 0.5``.

LeRobot 0.6 features beside the RGB videos (all optional):

* depth video (``depth_cameras``): :func:`depth_frame_mm` quantised by LeRobot 0.6.1's log quantiser
  (:func:`quantize_depth`, ``DepthEncoderConfig`` defaults) to 12-bit codes, encoded as LeRobot's
  default depth encoder writes it (HEVC Rext ``gray12le``, x265 ``lossless=1``, ``g=2``);
  ``info.json`` records ``is_depth_map``, ``depth_unit: "mm"`` and the quantiser's
  ``video.depth_min/depth_max/shift/use_log``. Decoded codes equal :func:`expected_depth_codes`.
* image features (``image_cameras``): :func:`image_frame` as PNG (exact) or JPEG bytes in a
  ``{bytes, path}`` struct column, as LeRobot stores ``dtype: image``.
* depth images (``depth_image_cameras``): :func:`depth_frame_mm` as 16-bit TIFF (``I;16``) bytes.
* language columns (``language=True``): ``language_persistent`` / ``language_events`` as LeRobot
  0.6.1's annotation writer adds them (``dtype: language``, ``info["tools"]``);
  :func:`expected_language` gives each frame's rows as map-style returns them.

CLI of a checkout: ``python -m tools.make_dataset OUT_DIR --episodes 30,45,20 --codec av1
--cameras front:64x48,wrist:97x71`` (H.264/HEVC need even sizes).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa

from lerobotstream.testing._identity import (
    _CAM_BITS,
    DEPTH_QUANTIZER,
    SAY_TOOL_SCHEMA,
    _language_cells,
    _png_bytes,
    depth_frame_mm,
    identity_frame,
    image_frame,
    quantize_depth,
)
from lerobotstream.testing._media import (
    CODECS,
    DATA_PATH,
    EPISODES_PATH,
    VIDEO_PATH,
    _channel_stats,
    _depth_stats,
    _encode_depth_episode,
    _encode_episode,
    _encoder_args,
    _Roller,
    _stats,
    _tasks_table,
    _write_json,
    _write_parquet,
    _write_videos,
)


def make_dataset(
    root: str | os.PathLike,
    *,
    episode_lengths: Sequence[int] = (30, 45, 20),
    fps: int = 30,
    cameras: Sequence[tuple[str, int, int]] = (("observation.images.front", 64, 48),),
    codec: str = "av1",
    gop: int | None = None,
    video_file_size_mb: float = 200.0,
    episodes_per_video_file: int | None = None,
    chunks_size: int = 1000,
    data_file_size_mb: float = 100.0,
    episodes_per_data_file: int | None = None,
    episodes_meta_per_file: int | None = None,
    tasks: Sequence[str] = ("pick the cube",),
    state_dim: int = 6,
    action_dim: int = 6,
    faststart: bool = False,
    tasks_parquet_form: str = "pandas_index",
    repo_id: str = "lerobotstream/generated",
    seed: int = 0,
    depth_cameras: Sequence[tuple[str, int, int]] = (),
    depth_quantizer: Sequence = DEPTH_QUANTIZER,
    depth_pix_fmt: str = "gray12le",
    image_cameras: Sequence[tuple[str, int, int]] = (),
    image_format: str = "png",
    depth_image_cameras: Sequence[tuple[str, int, int]] = (),
    language: bool = False,
) -> Path:
    """Write a LeRobot v3.0 dataset whose frames and rows encode their identity.

    Args:
        root: output folder (created; must be empty or absent).
        episode_lengths: frames per episode; episode ``i`` has ``episode_lengths[i]`` frames.
        fps: frames per second (int).
        cameras: ``(key, width, height)`` per camera; camera ``j`` burns ``camera_index = j``.
        codec: ``"av1"`` (libsvtav1 g=2 crf=30 like LeRobot; libaom-av1 for frames under 64
            pixels or odd sizes), ``"h264"`` (libx264, 2 B-frames, GOP 30: ``ctts`` and an edit
            list) or ``"hevc"`` (libx265; ``hev1``). H.264/HEVC need even sizes.
        gop: keyframe interval in frames; None = the codec default above.
        video_file_size_mb / episodes_per_video_file: roll to the next video file (per camera)
            when the file would reach this size (MiB) / holds this many episodes.
        chunks_size: files per chunk folder (LeRobot: 1000).
        data_file_size_mb / episodes_per_data_file: same for ``data/`` Parquet files.
        episodes_meta_per_file: episode rows per ``meta/episodes`` shard (None: one shard).
        tasks: task strings; episode ``i`` does ``tasks[i % len(tasks)]``.
        state_dim / action_dim: widths of ``observation.state`` / ``action`` (>= 3 / >= 2).
        faststart: write ``moov`` before ``mdat`` in the concatenated MP4s.
        tasks_parquet_form: ``"pandas_index"`` (LeRobot's) or ``"column"`` (a ``task`` column).
        repo_id: stored in ``info.json`` under ``repo_id`` (not a LeRobot key; readers ignore it).
        seed: seeds the noise added to state/action columns beyond the identity entries.
        depth_cameras: ``(key, width, height)`` of depth video cameras (HEVC ``gray12le``, even
            sizes; camera indices continue after ``cameras``), see the module doc.
        depth_quantizer: ``(depth_min m, depth_max m, shift m, use_log)`` recorded and applied.
        depth_pix_fmt: the depth stream's pixel format (tests of refused encodings).
        image_cameras: ``(key, width, height)`` of ``image`` features (indices continue after the
            depth cameras); image_format: ``"png"`` (exact) or ``"jpeg"``.
        depth_image_cameras: ``(key, width, height)`` of 16-bit TIFF depth ``image`` features.
        language: add LeRobot 0.6.1's language columns, features and ``tools``.

    Returns:
        Path: ``root``.

    Raises:
        ValueError: bad options (unknown codec, odd size for H.264/HEVC, tiny dims).
        RuntimeError: ffmpeg failed (its stderr tail is in the message).
    """
    options = {k: v for k, v in locals().items() if k not in ("root", "tasks_parquet_form", "seed")}
    spec = _Spec(**(options | {"episode_lengths": tuple(int(n) for n in episode_lengths)}))
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise ValueError(f"output folder {root} is not empty")
    _check_options(spec)
    root.mkdir(parents=True, exist_ok=True)
    ep_rows, ep_tables = _episode_tables(spec, np.random.default_rng(seed))
    _write_data_files(root, spec, ep_rows, ep_tables)
    tmp_dir = root / ".make_dataset_tmp"
    tmp_dir.mkdir()
    camera_stats = {key: _write_rgb_videos(root, tmp_dir, spec, key, ep_rows) for key, _, _ in spec.cameras}
    camera_stats.update(
        {key: _write_depth_videos(root, tmp_dir, spec, key, ep_rows) for key, _, _ in spec.depth_cameras}
    )
    shutil.rmtree(tmp_dir)
    camera_stats.update(_image_feature_stats(spec))
    _write_episode_shards(root, spec, ep_rows)
    _write_parquet(_tasks_table(spec.tasks, tasks_parquet_form), root / "meta" / "tasks.parquet")
    _write_json(_dataset_stats(spec, ep_rows, camera_stats), root / "meta" / "stats.json")
    _write_json(_info(spec), root / "meta" / "info.json")
    return root


class _Spec(SimpleNamespace):
    """:func:`make_dataset`'s options (same names and units), with the per-camera index derived."""

    @property
    def all_cameras(self) -> list[tuple[str, int, int]]:
        """Every camera in ``camera_index`` order: RGB videos, depth videos, images, depth images."""
        return [*self.cameras, *self.depth_cameras, *self.image_cameras, *self.depth_image_cameras]

    def camera(self, key: str) -> tuple[int, int, int]:
        """``(camera_index, width, height)`` of camera ``key``."""
        j, (_, w, h) = next((j, c) for j, c in enumerate(self.all_cameras) if c[0] == key)
        return j, w, h

    @property
    def starts(self) -> np.ndarray:
        """int64 (num_episodes + 1,): global index of each episode's first frame, then the total."""
        return np.concatenate([[0], np.cumsum(self.episode_lengths)]).astype(np.int64)

    @property
    def total_frames(self) -> int:
        return int(sum(self.episode_lengths))


def _check_options(spec: _Spec) -> None:
    """Raises ValueError on an option :func:`make_dataset` cannot honour (before anything is written)."""
    if spec.codec not in CODECS:
        raise ValueError(f"unknown codec {spec.codec!r}; expected one of {CODECS}")
    if spec.state_dim < 3 or spec.action_dim < 2:
        raise ValueError("state_dim must be >= 3 and action_dim >= 2 (they carry the identity)")
    if not spec.episode_lengths or min(spec.episode_lengths) < 1:
        raise ValueError("episode_lengths must be non-empty and positive")
    if len(spec.all_cameras) > 1 << _CAM_BITS:
        raise ValueError(f"at most {1 << _CAM_BITS} cameras")
    for key, w, h in spec.depth_cameras:
        if w % 2 or h % 2:
            raise ValueError(f"depth camera {key}: HEVC needs an even width and height, got {w}x{h}")
    for _key, w, h in spec.cameras:
        _encoder_args(spec.codec, w, h, spec.gop)  # validate sizes early


def _image_column(spec: _Spec, key: str, ep: int, length: int, depth: bool) -> pa.Array:
    """One episode's ``{bytes, path}`` cells of image feature ``key``: PNG/JPEG of
    :func:`image_frame`, or (``depth``) 16-bit TIFF of :func:`depth_frame_mm`."""
    cam, w, h = spec.camera(key)
    ext = "tiff" if depth else ("png" if spec.image_format == "png" else "jpg")
    fmt = "tiff" if depth else spec.image_format
    frame = depth_frame_mm if depth else image_frame
    cells = [{"bytes": _png_bytes(frame(ep, i, cam, h, w), fmt), "path": f"frame-{i:06d}.{ext}"} for i in range(length)]
    return pa.array(cells, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))


def _episode_tables(spec: _Spec, rng: np.random.Generator) -> tuple[list[dict[str, Any]], list[pa.Table]]:
    """Each episode's data rows (identity-carrying state/action, image cells, indices) and its
    ``meta/episodes`` row so far (``_state`` / ``_action`` kept for the per-episode stats)."""
    starts = spec.starts
    ep_rows: list[dict[str, Any]] = []
    ep_tables: list[pa.Table] = []
    for ep, length in enumerate(spec.episode_lengths):
        frame_index = np.arange(length, dtype=np.int64)
        index = starts[ep] + frame_index
        state = rng.standard_normal((length, spec.state_dim)).astype(np.float32)
        state[:, 0], state[:, 1], state[:, 2] = ep, frame_index, index
        action = rng.standard_normal((length, spec.action_dim)).astype(np.float32)
        action[:, 0], action[:, 1] = ep, frame_index + 0.5
        task_index = ep % len(spec.tasks)
        image_cols = {key: _image_column(spec, key, ep, length, False) for key, _, _ in spec.image_cameras}
        image_cols.update({key: _image_column(spec, key, ep, length, True) for key, _, _ in spec.depth_image_cameras})
        table = pa.table(
            {
                "observation.state": pa.array(list(state), pa.list_(pa.float32())),
                "action": pa.array(list(action), pa.list_(pa.float32())),
                **image_cols,
                "timestamp": pa.array((frame_index / spec.fps).astype(np.float32), pa.float32()),
                "frame_index": pa.array(frame_index, pa.int64()),
                "episode_index": pa.array(np.full(length, ep, np.int64), pa.int64()),
                "index": pa.array(index, pa.int64()),
                "task_index": pa.array(np.full(length, task_index, np.int64), pa.int64()),
            }
        )
        ep_tables.append(table)
        ep_rows.append(
            {
                "episode_index": ep,
                "tasks": [spec.tasks[task_index]],
                "length": int(length),
                "dataset_from_index": int(starts[ep]),
                "dataset_to_index": int(starts[ep + 1]),
                "_state": state,
                "_action": action,
            }
        )
    return ep_rows, ep_tables


def _write_data_files(root: Path, spec: _Spec, ep_rows: list[dict], ep_tables: list[pa.Table]) -> None:
    """``data/`` Parquet files (LeRobot's roll-over), each episode's file recorded in its row;
    language columns added per file (one schema inference per file, as LeRobot's writer does)."""
    roller = _Roller(spec.data_file_size_mb, spec.episodes_per_data_file, spec.chunks_size)
    groups: dict[tuple[int, int], list[pa.Table]] = {}
    for ep, table in enumerate(ep_tables):
        c, f = roller.place(table.nbytes)
        ep_rows[ep]["data/chunk_index"], ep_rows[ep]["data/file_index"] = c, f
        groups.setdefault((c, f), []).append(table)
    for (c, f), tables in groups.items():
        table = pa.concat_tables(tables)
        if spec.language:
            cells = [
                _language_cells(e, i, spec.fps)
                for e, i in zip(table.column("episode_index").to_pylist(), table.column("frame_index").to_pylist())
            ]
            table = table.append_column("language_persistent", pa.array([x[0] for x in cells]))
            table = table.append_column("language_events", pa.array([x[1] for x in cells]))
        _write_parquet(table, root / DATA_PATH.format(chunk_index=c, file_index=f))


def _video_roller(spec: _Spec) -> _Roller:
    return _Roller(spec.video_file_size_mb, spec.episodes_per_video_file, spec.chunks_size)


def _write_rgb_videos(root: Path, tmp_dir: Path, spec: _Spec, key: str, ep_rows: list[dict]) -> dict[str, list]:
    """Camera ``key``'s identity-frame videos; returns its stats (per channel, in [0, 1],
    shaped (3, 1, 1) like LeRobot's), accumulated without holding every frame."""
    cam, width, height = spec.camera(key)
    pix_sum, pix_sq = np.zeros(3), np.zeros(3)
    pix_min, pix_max = np.full(3, 255.0), np.zeros(3)

    def encode(ep: int, length: int) -> Path:
        nonlocal pix_sum, pix_sq, pix_min, pix_max
        frames = np.stack([identity_frame(ep, i, cam, height, width) for i in range(length)])
        part = tmp_dir / f"{cam:02d}_{ep:06d}.mp4"
        _encode_episode(frames, spec.fps, spec.codec, spec.gop, part)
        flat = frames.reshape(-1, 3).astype(np.float64) / 255.0
        pix_sum += flat.sum(0)
        pix_sq += (flat**2).sum(0)
        pix_min = np.minimum(pix_min, flat.min(0) * 255)
        pix_max = np.maximum(pix_max, flat.max(0) * 255)
        return part

    parts = (encode(ep, length) for ep, length in enumerate(spec.episode_lengths))
    _write_videos(root, key, parts, ep_rows, _video_roller(spec), spec.faststart)
    n = spec.total_frames * width * height
    mean = pix_sum / n
    std = np.sqrt(np.maximum(pix_sq / n - mean**2, 0.0))
    return _channel_stats(pix_min / 255.0, pix_max / 255.0, mean, std, spec.total_frames)


def _write_depth_videos(root: Path, tmp_dir: Path, spec: _Spec, key: str, ep_rows: list[dict]) -> dict[str, list]:
    """Depth camera ``key``'s videos (quantised :func:`depth_frame_mm`); returns its stats in mm."""
    cam, width, height = spec.camera(key)
    values = []

    def encode(ep: int, length: int) -> Path:
        mm = np.stack([depth_frame_mm(ep, i, cam, height, width) for i in range(length)])
        values.append(mm.reshape(-1).astype(np.float64))
        part = tmp_dir / f"{cam:02d}_{ep:06d}.mp4"
        _encode_depth_episode(quantize_depth(mm, spec.depth_quantizer), spec.fps, part, spec.depth_pix_fmt)
        return part

    parts = (encode(ep, length) for ep, length in enumerate(spec.episode_lengths))
    _write_videos(root, key, parts, ep_rows, _video_roller(spec), spec.faststart)
    return _depth_stats(np.concatenate(values), spec.total_frames)


def _image_feature_stats(spec: _Spec) -> dict[str, dict[str, list]]:
    """Stats of the ``image`` features (depth images in mm, RGB images per channel in [0, 1])."""
    frames = [(ep, i) for ep, length in enumerate(spec.episode_lengths) for i in range(length)]
    out: dict[str, dict[str, list]] = {}
    for key, width, height in spec.depth_image_cameras:
        cam = spec.camera(key)[0]
        vals = [depth_frame_mm(ep, i, cam, height, width).reshape(-1).astype(np.float64) for ep, i in frames]
        out[key] = _depth_stats(np.concatenate(vals), spec.total_frames)
    for key, width, height in spec.image_cameras:
        cam = spec.camera(key)[0]
        flat = np.concatenate([image_frame(ep, i, cam, height, width).reshape(-1, 3) for ep, i in frames])
        flat = flat.astype(np.float64) / 255.0
        out[key] = _channel_stats(flat.min(0), flat.max(0), flat.mean(0), flat.std(0), spec.total_frames)
    return out


def _write_episode_shards(root: Path, spec: _Spec, ep_rows: list[dict[str, Any]]) -> None:
    """``meta/episodes`` shards: each episode's files, video windows, tasks and per-episode stats."""
    roller = _Roller(float("inf"), spec.episodes_meta_per_file, spec.chunks_size)
    shards: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for row in ep_rows:
        c, f = roller.place(0)
        row["meta/episodes/chunk_index"], row["meta/episodes/file_index"] = c, f
        shards.setdefault((c, f), []).append(row)
    int_columns = ["episode_index", "data/chunk_index", "data/file_index", "dataset_from_index", "dataset_to_index"]
    for (c, f), rows in shards.items():
        cols: dict[str, pa.Array] = {name: pa.array([r[name] for r in rows], pa.int64()) for name in int_columns}
        for key, _, _ in [*spec.cameras, *spec.depth_cameras]:
            for suffix in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
                name = f"videos/{key}/{suffix}"
                cols[name] = pa.array([r[name] for r in rows], pa.float64() if "time" in suffix else pa.int64())
        cols["tasks"] = pa.array([r["tasks"] for r in rows], pa.list_(pa.string()))
        for name in ("length", "meta/episodes/chunk_index", "meta/episodes/file_index"):
            cols[name] = pa.array([r[name] for r in rows], pa.int64())
        for feat, arr_key in (("observation.state", "_state"), ("action", "_action")):
            for stat in ("min", "max", "mean", "std"):
                cols[f"stats/{feat}/{stat}"] = pa.array(
                    [getattr(r[arr_key], stat)(axis=0).astype(np.float64).tolist() for r in rows],
                    pa.list_(pa.float64()),
                )
            cols[f"stats/{feat}/count"] = pa.array([[r["length"]] for r in rows], pa.list_(pa.int64()))
        _write_parquet(pa.table(cols), root / EPISODES_PATH.format(chunk_index=c, file_index=f))


def _dataset_stats(spec: _Spec, ep_rows: list[dict[str, Any]], camera_stats: dict[str, dict]) -> dict[str, Any]:
    """``meta/stats.json``: every feature's stats over the whole dataset."""
    frame_index_all = np.concatenate([np.arange(n, dtype=np.int64) for n in spec.episode_lengths])
    ep_all = np.concatenate([np.full(n, e, np.int64) for e, n in enumerate(spec.episode_lengths)])
    return {
        "observation.state": _stats(np.concatenate([r["_state"] for r in ep_rows])),
        "action": _stats(np.concatenate([r["_action"] for r in ep_rows])),
        "timestamp": _stats((frame_index_all / spec.fps).astype(np.float32)[:, None]),
        "frame_index": _stats(frame_index_all[:, None]),
        "episode_index": _stats(ep_all[:, None]),
        "index": _stats(np.arange(spec.total_frames, dtype=np.int64)[:, None]),
        "task_index": _stats((ep_all % len(spec.tasks))[:, None]),
        **camera_stats,
    }


def _video_feature(spec: _Spec, width: int, height: int, depth: bool) -> dict[str, Any]:
    """``info.json`` entry of a video camera: RGB ``yuv420p``, or LeRobot's default depth encoder
    (HEVC, lossless x265, ``g=2``) with its quantiser's parameters."""
    info: dict[str, Any] = {
        "video.height": height,
        "video.width": width,
        "video.codec": "hevc" if depth else spec.codec,
        "video.pix_fmt": spec.depth_pix_fmt if depth else "yuv420p",
        "video.is_depth_map": False,
        "video.fps": spec.fps,
        "video.channels": 1 if depth else 3,
        "has_audio": False,
    }
    if depth:
        del info["video.is_depth_map"]
        encoder = {"video.g": 2, "video.crf": 30, "video.preset": None, "video.fast_decode": 0}
        encoder |= {"video.video_backend": "pyav", "video.extra_options": {"x265-params": "lossless=1"}}
        quantizer = dict(
            zip(("video.depth_min", "video.depth_max", "video.shift", "video.use_log"), spec.depth_quantizer)
        )
        info = {"is_depth_map": True, "depth_unit": "mm", **info, **encoder, **quantizer}
    return {
        "dtype": "video",
        "shape": [height, width, 1 if depth else 3],
        "names": ["height", "width", "channels"],
        "info": info,
    }


def _info(spec: _Spec) -> dict[str, Any]:
    """``meta/info.json``: LeRobot v3.0's keys, every feature, ``tools`` with language."""
    features: dict[str, Any] = {}
    for key, letter, dim in (("observation.state", "s", spec.state_dim), ("action", "a", spec.action_dim)):
        features[key] = {"dtype": "float32", "shape": [dim], "names": [f"{letter}{i}" for i in range(dim)]}
    for key, width, height in spec.cameras:
        features[key] = _video_feature(spec, width, height, depth=False)
    for key, width, height in spec.depth_cameras:
        features[key] = _video_feature(spec, width, height, depth=True)
    hwc = ["height", "width", "channels"]
    for key, width, height in spec.image_cameras:
        features[key] = {"dtype": "image", "shape": [height, width, 3], "names": hwc}
    depth = {"is_depth_map": True, "depth_unit": "mm"}
    for key, width, height in spec.depth_image_cameras:
        features[key] = {"dtype": "image", "shape": [height, width, 1], "names": hwc, "info": depth}
    for name in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        features[name] = {"dtype": "float32" if name == "timestamp" else "int64", "shape": [1], "names": None}
    if spec.language:  # lerobot.datasets.language.language_feature_info()
        for name in ("language_persistent", "language_events"):
            features[name] = {"dtype": "language", "shape": [1], "names": None}
    num_episodes = len(spec.episode_lengths)
    info = {
        "codebase_version": "v3.0",
        "robot_type": "generated",
        "total_episodes": num_episodes,
        "total_frames": spec.total_frames,
        "total_tasks": len(spec.tasks),
        "chunks_size": spec.chunks_size,
        "data_files_size_in_mb": spec.data_file_size_mb,
        "video_files_size_in_mb": spec.video_file_size_mb,
        "fps": spec.fps,
        "splits": {"train": f"0:{num_episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if (spec.cameras or spec.depth_cameras) else None,
        "features": features,
        "repo_id": spec.repo_id,
    }
    if spec.language:
        info["tools"] = [SAY_TOOL_SCHEMA]
    return info
