"""Generate small LeRobotDataset v3.0 datasets whose frames carry their own identity.

The dataset is laid out exactly as LeRobot v3.0 writes it: ``meta/info.json``,
``meta/episodes/chunk-XXX/file-XXX.parquet`` (one or several shards), ``meta/tasks.parquet``
(pandas-index form by default), ``meta/stats.json``, ``data/chunk-XXX/file-XXX.parquet`` and one
concatenated MP4 per camera and file ``videos/<key>/chunk-XXX/file-XXX.mp4``. Like LeRobot's
writer, each episode is encoded on its own (ffmpeg CLI, raw RGB frames on stdin, ``yuv420p``),
then the episode MP4s of one file are joined by a PyAV remux (stream copy); an
episode's ``from_timestamp`` is the summed duration (PyAV ``stream.duration * time_base``, as
LeRobot's ``get_video_duration_in_s``) of the episodes before it in the same file.

Every frame's pixels encode ``(episode_index, frame_index, camera_index)`` as an 8x6 grid of
black/white cells (16 + 16 + 4 data bits and a 12-bit CRC), which survives AV1 crf 30, H.264
and HEVC down to 64x48; :func:`read_identity` reads it back. The tabular features encode the
same identity: ``observation.state[0] = episode_index``, ``[1] = frame_index``, ``[2] = index``;
``action[0] = episode_index``, ``[1] = frame_index + 0.5``.

LeRobot 0.6 cameras beside the RGB videos (all optional):

* **depth video** (``depth_cameras``): a per-pixel depth map in millimetres
  (:func:`depth_frame_mm`, a function of episode, frame, camera and pixel) quantised with LeRobot
  0.6.1's log quantiser (:func:`quantize_depth`, ``DepthEncoderConfig`` defaults) to 12-bit codes
  and encoded as LeRobot's default depth encoder writes it: HEVC Rext ``gray12le``, x265
  ``lossless=1``, ``g=2``; ``info.json`` records ``is_depth_map``, ``depth_unit: "mm"`` and the
  quantiser's ``video.depth_min/depth_max/shift/use_log``. The decoded codes must equal
  :func:`expected_depth_codes` exactly.
* **image features** (``image_cameras``): :func:`image_frame` (the identity grid with a
  per-pixel texture, RGB) stored as PNG (or JPEG) bytes in a ``{bytes, path}`` struct column of
  the data Parquet, as LeRobot stores ``dtype: image`` features; PNG pixels are known exactly.
* **depth images** (``depth_image_cameras``): :func:`depth_frame_mm` as 16-bit TIFF (``I;16``)
  bytes in the rows (LeRobot's raw depth image path), ``depth_unit: "mm"``.
* **language columns** (``language=True``): ``language_persistent`` / ``language_events`` as
  LeRobot 0.6.1's annotation writer adds them (struct schema inferred by pyarrow, ``dtype:
  language`` features, ``info["tools"]``); :func:`expected_language` gives each frame's rows as
  map-style returns them.

From Python (``lerobotstream.testing`` re-exports every public name)::

    from lerobotstream.testing import make_dataset, read_identity
    root = make_dataset(tmp / "ds", episode_lengths=(30, 45, 20), codec="h264")

From a checkout, the CLI ``python -m tools.make_dataset`` (run from the repository root)::

    python -m tools.make_dataset OUT_DIR --episodes 30,45,20 --codec av1 --cameras front:64x48,wrist:97x71
    python -m tools.make_dataset OUT_DIR --episodes 30,45,20 --codec h264 --cameras front:64x48  # H.264/HEVC: even sizes
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
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
    _concat,
    _depth_stats,
    _encode_depth_episode,
    _encode_episode,
    _encoder_args,
    _Roller,
    _stats,
    _tasks_table,
    _write_json,
    _write_parquet,
    video_duration_s,
)


def _place_episode_video(part: Path, key: str, row: dict, roller: Any, pending: dict, elapsed: dict) -> None:
    """Put one episode's encoded ``part`` into the next video file of camera ``key`` (``roller``: the
    LeRobot writer's file roll-over), queue it for concatenation (``pending``) and record its chunk,
    file and ``[from_timestamp, to_timestamp)`` window (seconds, ``elapsed`` per file) in ``row``."""
    duration = video_duration_s(part)
    c, f, _ = roller.place(part.stat().st_size)
    from_ts = elapsed.get((c, f), 0.0)
    elapsed[(c, f)] = from_ts + duration
    pending.setdefault((c, f), []).append(part)
    row[f"videos/{key}/chunk_index"] = c
    row[f"videos/{key}/file_index"] = f
    row[f"videos/{key}/from_timestamp"] = from_ts
    row[f"videos/{key}/to_timestamp"] = from_ts + duration


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
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise ValueError(f"output folder {root} is not empty")
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}; expected one of {CODECS}")
    if state_dim < 3 or action_dim < 2:
        raise ValueError("state_dim must be >= 3 and action_dim >= 2 (they carry the identity)")
    if not episode_lengths or min(episode_lengths) < 1:
        raise ValueError("episode_lengths must be non-empty and positive")
    n_cams = len(cameras) + len(depth_cameras) + len(image_cameras) + len(depth_image_cameras)
    if n_cams > 1 << _CAM_BITS:
        raise ValueError(f"at most {1 << _CAM_BITS} cameras")
    for key, w, h in depth_cameras:
        if w % 2 or h % 2:
            raise ValueError(f"depth camera {key}: HEVC needs an even width and height, got {w}x{h}")
    cam_index = {
        key: j for j, (key, _, _) in enumerate([*cameras, *depth_cameras, *image_cameras, *depth_image_cameras])
    }
    for _key, w, h in cameras:
        _encoder_args(codec, w, h, gop)  # validate sizes early
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tmp_dir = root / ".make_dataset_tmp"
    tmp_dir.mkdir()
    num_episodes = len(episode_lengths)
    starts = np.concatenate([[0], np.cumsum(episode_lengths)]).astype(np.int64)
    total_frames = int(starts[-1])

    # --- per-frame tables ------------------------------------------------------------------
    ep_rows: list[dict[str, Any]] = []
    ep_tables: list[pa.Table] = []
    all_state, all_action = [], []
    for ep, length in enumerate(episode_lengths):
        frame_index = np.arange(length, dtype=np.int64)
        index = starts[ep] + frame_index
        state = rng.standard_normal((length, state_dim)).astype(np.float32)
        state[:, 0], state[:, 1], state[:, 2] = ep, frame_index, index
        action = rng.standard_normal((length, action_dim)).astype(np.float32)
        action[:, 0], action[:, 1] = ep, frame_index + 0.5
        task_index = ep % len(tasks)
        image_cols: dict[str, pa.Array] = {}
        image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        for key, w, h in image_cameras:
            cells = [
                {
                    "bytes": _png_bytes(image_frame(ep, i, cam_index[key], h, w), image_format),
                    "path": f"frame-{i:06d}.{'png' if image_format == 'png' else 'jpg'}",
                }
                for i in range(length)
            ]
            image_cols[key] = pa.array(cells, image_type)
        for key, w, h in depth_image_cameras:
            cells = [
                {
                    "bytes": _png_bytes(depth_frame_mm(ep, i, cam_index[key], h, w), "tiff"),
                    "path": f"frame-{i:06d}.tiff",
                }
                for i in range(length)
            ]
            image_cols[key] = pa.array(cells, image_type)
        table = pa.table(
            {
                "observation.state": pa.array(list(state), pa.list_(pa.float32())),
                "action": pa.array(list(action), pa.list_(pa.float32())),
                **image_cols,
                "timestamp": pa.array((frame_index / fps).astype(np.float32), pa.float32()),
                "frame_index": pa.array(frame_index, pa.int64()),
                "episode_index": pa.array(np.full(length, ep, np.int64), pa.int64()),
                "index": pa.array(index, pa.int64()),
                "task_index": pa.array(np.full(length, task_index, np.int64), pa.int64()),
            }
        )
        ep_tables.append(table)
        all_state.append(state)
        all_action.append(action)
        ep_rows.append(
            {
                "episode_index": ep,
                "tasks": [tasks[task_index]],
                "length": int(length),
                "dataset_from_index": int(starts[ep]),
                "dataset_to_index": int(starts[ep + 1]),
                "_state": state,
                "_action": action,
            }
        )

    # --- data files -------------------------------------------------------------------------
    roller = _Roller(data_file_size_mb, episodes_per_data_file, chunks_size)
    groups: dict[tuple[int, int], list[pa.Table]] = {}
    for ep, table in enumerate(ep_tables):
        c, f, _ = roller.place(table.nbytes)
        ep_rows[ep]["data/chunk_index"], ep_rows[ep]["data/file_index"] = c, f
        groups.setdefault((c, f), []).append(table)
    for (c, f), tables in groups.items():
        table = pa.concat_tables(tables)
        if language:  # one schema inference per file, as LeRobot's annotation writer does
            cells = [
                _language_cells(e, i, fps)
                for e, i in zip(table.column("episode_index").to_pylist(), table.column("frame_index").to_pylist())
            ]
            table = table.append_column("language_persistent", pa.array([x[0] for x in cells]))
            table = table.append_column("language_events", pa.array([x[1] for x in cells]))
        _write_parquet(table, root / DATA_PATH.format(chunk_index=c, file_index=f))

    # --- videos -------------------------------------------------------------------------------
    image_stats: dict[str, dict[str, list]] = {}
    for cam_idx, (key, width, height) in enumerate(cameras):
        roller = _Roller(video_file_size_mb, episodes_per_video_file, chunks_size)
        pending: dict[tuple[int, int], list[Path]] = {}
        elapsed: dict[tuple[int, int], float] = {}
        pix_sum = np.zeros(3)
        pix_sq = np.zeros(3)
        pix_min, pix_max = np.full(3, 255.0), np.zeros(3)
        for ep, length in enumerate(episode_lengths):
            frames = np.stack([identity_frame(ep, i, cam_idx, height, width) for i in range(length)])
            part = tmp_dir / f"{cam_idx:02d}_{ep:06d}.mp4"
            _encode_episode(frames, fps, codec, gop, part)
            _place_episode_video(part, key, ep_rows[ep], roller, pending, elapsed)
            flat = frames.reshape(-1, 3).astype(np.float64) / 255.0
            pix_sum += flat.sum(0)
            pix_sq += (flat**2).sum(0)
            pix_min = np.minimum(pix_min, flat.min(0) * 255)
            pix_max = np.maximum(pix_max, flat.max(0) * 255)
        for (c, f), parts in pending.items():
            _concat(parts, root / VIDEO_PATH.format(video_key=key, chunk_index=c, file_index=f), faststart)
        n = total_frames * width * height
        mean = pix_sum / n
        std = np.sqrt(np.maximum(pix_sq / n - mean**2, 0.0))
        image_stats[key] = {
            "min": [[[v / 255.0]] for v in pix_min],
            "max": [[[v / 255.0]] for v in pix_max],
            "mean": [[[v]] for v in mean],
            "std": [[[v]] for v in std],
            "count": [total_frames],
        }
    for key, width, height in depth_cameras:
        cam_idx = cam_index[key]
        roller = _Roller(video_file_size_mb, episodes_per_video_file, chunks_size)
        pending = {}
        elapsed = {}
        depth_vals = []
        for ep, length in enumerate(episode_lengths):
            mm = np.stack([depth_frame_mm(ep, i, cam_idx, height, width) for i in range(length)])
            depth_vals.append(mm.reshape(-1).astype(np.float64))
            part = tmp_dir / f"{cam_idx:02d}_{ep:06d}.mp4"
            _encode_depth_episode(quantize_depth(mm, depth_quantizer), fps, part, depth_pix_fmt)
            _place_episode_video(part, key, ep_rows[ep], roller, pending, elapsed)
        for (c, f), parts in pending.items():
            _concat(parts, root / VIDEO_PATH.format(video_key=key, chunk_index=c, file_index=f), faststart)
        image_stats[key] = _depth_stats(np.concatenate(depth_vals), total_frames)
    for key, width, height in depth_image_cameras:
        vals = [
            depth_frame_mm(ep, i, cam_index[key], height, width).reshape(-1).astype(np.float64)
            for ep, length in enumerate(episode_lengths)
            for i in range(length)
        ]
        image_stats[key] = _depth_stats(np.concatenate(vals), total_frames)
    for key, width, height in image_cameras:
        flat = (
            np.concatenate(
                [
                    image_frame(ep, i, cam_index[key], height, width).reshape(-1, 3)
                    for ep, length in enumerate(episode_lengths)
                    for i in range(length)
                ]
            ).astype(np.float64)
            / 255.0
        )
        image_stats[key] = {
            "min": [[[v]] for v in flat.min(0)],
            "max": [[[v]] for v in flat.max(0)],
            "mean": [[[v]] for v in flat.mean(0)],
            "std": [[[v]] for v in flat.std(0)],
            "count": [total_frames],
        }
    shutil.rmtree(tmp_dir)

    # --- meta/episodes shards -----------------------------------------------------------------
    roller = _Roller(float("inf"), episodes_meta_per_file, chunks_size)
    shards: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for row in ep_rows:
        c, f, _ = roller.place(0)
        row["meta/episodes/chunk_index"], row["meta/episodes/file_index"] = c, f
        shards.setdefault((c, f), []).append(row)
    for (c, f), rows in shards.items():
        cols: dict[str, pa.Array] = {}
        cols["episode_index"] = pa.array([r["episode_index"] for r in rows], pa.int64())
        cols["data/chunk_index"] = pa.array([r["data/chunk_index"] for r in rows], pa.int64())
        cols["data/file_index"] = pa.array([r["data/file_index"] for r in rows], pa.int64())
        cols["dataset_from_index"] = pa.array([r["dataset_from_index"] for r in rows], pa.int64())
        cols["dataset_to_index"] = pa.array([r["dataset_to_index"] for r in rows], pa.int64())
        for key, _, _ in [*cameras, *depth_cameras]:
            for suffix, typ in (
                ("chunk_index", pa.int64()),
                ("file_index", pa.int64()),
                ("from_timestamp", pa.float64()),
                ("to_timestamp", pa.float64()),
            ):
                name = f"videos/{key}/{suffix}"
                cols[name] = pa.array([r[name] for r in rows], typ)
        cols["tasks"] = pa.array([r["tasks"] for r in rows], pa.list_(pa.string()))
        cols["length"] = pa.array([r["length"] for r in rows], pa.int64())
        cols["meta/episodes/chunk_index"] = pa.array([r["meta/episodes/chunk_index"] for r in rows], pa.int64())
        cols["meta/episodes/file_index"] = pa.array([r["meta/episodes/file_index"] for r in rows], pa.int64())
        for feat, arr_key in (("observation.state", "_state"), ("action", "_action")):
            for stat in ("min", "max", "mean", "std"):
                cols[f"stats/{feat}/{stat}"] = pa.array(
                    [getattr(r[arr_key], stat)(axis=0).astype(np.float64).tolist() for r in rows],
                    pa.list_(pa.float64()),
                )
            cols[f"stats/{feat}/count"] = pa.array([[r["length"]] for r in rows], pa.list_(pa.int64()))
        _write_parquet(pa.table(cols), root / EPISODES_PATH.format(chunk_index=c, file_index=f))

    # --- tasks, stats, info ---------------------------------------------------------------------
    _write_parquet(_tasks_table(tasks, tasks_parquet_form), root / "meta" / "tasks.parquet")
    frame_index_all = np.concatenate([np.arange(n, dtype=np.int64) for n in episode_lengths])
    ep_all = np.concatenate([np.full(n, e, np.int64) for e, n in enumerate(episode_lengths)])
    stats: dict[str, Any] = {
        "observation.state": _stats(np.concatenate(all_state)),
        "action": _stats(np.concatenate(all_action)),
        "timestamp": _stats((frame_index_all / fps).astype(np.float32)[:, None]),
        "frame_index": _stats(frame_index_all[:, None]),
        "episode_index": _stats(ep_all[:, None]),
        "index": _stats(np.arange(total_frames, dtype=np.int64)[:, None]),
        "task_index": _stats((ep_all % len(tasks))[:, None]),
        **image_stats,
    }
    _write_json(stats, root / "meta" / "stats.json")
    codec_name = {"av1": "av1", "h264": "h264", "hevc": "hevc"}[codec]
    features: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": [state_dim], "names": [f"s{i}" for i in range(state_dim)]},
        "action": {"dtype": "float32", "shape": [action_dim], "names": [f"a{i}" for i in range(action_dim)]},
    }
    for key, width, height in cameras:
        features[key] = {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": height,
                "video.width": width,
                "video.codec": codec_name,
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "video.fps": fps,
                "video.channels": 3,
                "has_audio": False,
            },
        }
    depth_min, depth_max, shift, use_log = depth_quantizer
    for key, width, height in depth_cameras:
        features[key] = {
            "dtype": "video",
            "shape": [height, width, 1],
            "names": ["height", "width", "channels"],
            "info": {
                "is_depth_map": True,
                "depth_unit": "mm",
                "video.height": height,
                "video.width": width,
                "video.codec": "hevc",
                "video.pix_fmt": depth_pix_fmt,
                "video.fps": fps,
                "video.channels": 1,
                "has_audio": False,
                "video.g": 2,
                "video.crf": 30,
                "video.preset": None,
                "video.fast_decode": 0,
                "video.video_backend": "pyav",
                "video.extra_options": {"x265-params": "lossless=1"},
                "video.depth_min": depth_min,
                "video.depth_max": depth_max,
                "video.shift": shift,
                "video.use_log": use_log,
            },
        }
    for key, width, height in image_cameras:
        features[key] = {"dtype": "image", "shape": [height, width, 3], "names": ["height", "width", "channels"]}
    for key, width, height in depth_image_cameras:
        features[key] = {
            "dtype": "image",
            "shape": [height, width, 1],
            "names": ["height", "width", "channels"],
            "info": {"is_depth_map": True, "depth_unit": "mm"},
        }
    for name, dtype in (
        ("timestamp", "float32"),
        ("frame_index", "int64"),
        ("episode_index", "int64"),
        ("index", "int64"),
        ("task_index", "int64"),
    ):
        features[name] = {"dtype": dtype, "shape": [1], "names": None}
    if language:  # lerobot.datasets.language.language_feature_info()
        for name in ("language_persistent", "language_events"):
            features[name] = {"dtype": "language", "shape": [1], "names": None}
    info = {
        "codebase_version": "v3.0",
        "robot_type": "generated",
        "total_episodes": num_episodes,
        "total_frames": total_frames,
        "total_tasks": len(tasks),
        "chunks_size": chunks_size,
        "data_files_size_in_mb": data_file_size_mb,
        "video_files_size_in_mb": video_file_size_mb,
        "fps": fps,
        "splits": {"train": f"0:{num_episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if (cameras or depth_cameras) else None,
        "features": features,
        "repo_id": repo_id,
    }
    if language:
        info["tools"] = [SAY_TOOL_SCHEMA]
    _write_json(info, root / "meta" / "info.json")
    return root
