"""Encoding and writing helpers of the dataset generator (and of the v2.1 converter): the ffmpeg
CLI encoders, the PyAV concatenation (stream copy), Parquet/JSON writers, stats, LeRobot's tasks
table and its file roll-over."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lerobotstream.constants import DEFAULT_DATA_PATH as DATA_PATH  # noqa: F401 (the testing modules' names)
from lerobotstream.constants import DEFAULT_EPISODES_PATH as EPISODES_PATH  # noqa: F401
from lerobotstream.constants import DEFAULT_VIDEO_PATH as VIDEO_PATH  # noqa: F401

MB = 1024 * 1024
CODECS = ("av1", "h264", "hevc")


def _encoder_args(codec: str, width: int, height: int, gop: int | None) -> list[str]:
    if codec == "av1":
        g = 2 if gop is None else gop
        if width >= 64 and height >= 64 and width % 2 == 0 and height % 2 == 0:
            # LeRobot's default: libsvtav1, g=2, crf=30 (preset 12 is mapped to 10 by SVT 1.4)
            return f"-c:v libsvtav1 -g {g} -crf 30 -preset 12 -svtav1-params verbosity=0".split()
        # SVT-AV1 refuses frames under 64 pixels or with odd sizes: libaom-av1 writes the same bitstream format
        return f"-c:v libaom-av1 -g {g} -crf 30 -b:v 0 -cpu-used 8 -row-mt 1 -usage realtime".split()
    if width % 2 or height % 2:
        raise ValueError(f"{codec} with yuv420p needs an even width and height, got {width}x{height} (use codec='av1')")
    if codec == "h264":
        g = 30 if gop is None else gop
        return f"-c:v libx264 -preset veryfast -bf 2 -g {g} -keyint_min {g} -sc_threshold 0".split()
    if codec == "hevc":
        params = "log-level=error"
        if gop is not None:
            params += f":keyint={gop}:min-keyint={gop}:scenecut=0"
        return ["-c:v", "libx265", "-x265-params", params]
    raise ValueError(f"unknown codec {codec!r}; expected one of {CODECS}")


def _run(cmd: list[str], stdin: bytes | None = None) -> None:
    proc = subprocess.run(cmd, input=stdin, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.decode(errors='replace')[-2000:]}"
        )


def _encode_episode(frames: np.ndarray, fps: int, codec: str, gop: int | None, out: Path) -> None:
    num_frames, height, width, _ = frames.shape
    cmd = [
        "ffmpeg", "-hide_banner", "-loglevel", "error", "-y",
        "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-framerate", str(fps), "-i", "-",
        *_encoder_args(codec, width, height, gop), "-pix_fmt", "yuv420p", "-an", str(out),
    ]  # fmt: skip
    _run(cmd, stdin=np.ascontiguousarray(frames).tobytes())


def _encode_depth_episode(codes: np.ndarray, fps: int, out: Path, pix_fmt: str = "gray12le") -> None:
    """12-bit codes ``(T, H, W)`` uint16 → HEVC as LeRobot 0.6.1's default depth encoder (x265
    ``lossless=1``, ``g=2``, crf 30; Rext ``gray12le``)."""
    num_frames, height, width = codes.shape
    cmd = [
        "ffmpeg", "-hide_banner", "-loglevel", "error", "-y",
        "-f", "rawvideo", "-pix_fmt", "gray12le", "-s", f"{width}x{height}", "-framerate", str(fps), "-i", "-",
        "-c:v", "libx265", "-g", "2", "-crf", "30", "-x265-params", "lossless=1:log-level=error",
        "-pix_fmt", pix_fmt, "-an", str(out),
    ]  # fmt: skip
    _run(cmd, stdin=np.ascontiguousarray(codes.astype("<u2")).tobytes())


def _concat(parts: Sequence[Path], out: Path, faststart: bool) -> None:
    """Join episode MP4s by stream copy, as LeRobot's ``concatenate_video_files`` does for its
    default AV1 (PyAV remux): each episode starts where the previous one ends, in the shared
    media timescale, so ``from_timestamp`` = summed PyAV stream durations is exact.

    Decode timestamps are laid out on one grid with the largest decode delay of any part: x264
    gives a 1–2 frame episode no B-frame delay but a longer one 2 frames, and a demuxer that
    kept each part's own delay would produce non-monotonic DTS at the boundary (the FFmpeg 5.1
    CLI's concat demuxer "fixes" that by shifting PTS by a fraction of a frame)."""
    import av

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.mp4")
    packets_per_part = []
    time_base = None
    for part in parts:
        with av.open(str(part)) as src:
            stream = src.streams.video[0]
            if time_base is None:
                time_base = stream.time_base
            elif stream.time_base != time_base:
                raise ValueError(f"{part}: time base {stream.time_base} differs from {time_base}")
            pkts = [(p.pts, p.dts, p.duration, p.is_keyframe, bytes(p)) for p in src.demux(stream) if p.dts is not None]
        packets_per_part.append(pkts)
    delays = [min(p[0] for p in pkts) - pkts[0][1] for pkts in packets_per_part]
    max_delay = max(delays)
    options = {"movflags": "faststart"} if faststart else {}
    with av.open(str(parts[0])) as template_src, av.open(str(tmp), "w", format="mp4", options=options) as dst:
        out_stream = dst.add_stream_from_template(template_src.streams.video[0], opaque=True)
        offset = 0
        for pkts in packets_per_part:
            min_pts, first_dts = min(p[0] for p in pkts), pkts[0][1]
            for pts, dts, duration, is_key, data in pkts:
                packet = av.Packet(data)
                packet.stream = out_stream
                packet.time_base = time_base
                packet.pts = offset + pts - min_pts
                packet.dts = offset + dts - first_dts - max_delay
                packet.duration = duration
                packet.is_keyframe = is_key
                dst.mux(packet)
            offset += sum(p[2] for p in pkts)
    os.replace(tmp, out)


def video_duration_s(path: str | os.PathLike) -> float:
    """Duration of an MP4's first video stream, seconds, as LeRobot's ``get_video_duration_in_s``
    (PyAV: ``stream.duration * stream.time_base``, else the container duration)."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if stream.duration is not None:
            return float(stream.duration * stream.time_base)
        return float(Fraction(container.duration, av.time_base))


# --- dataset --------------------------------------------------------------------------------------
def _write_parquet(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.parquet")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def _write_json(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.json")
    tmp.write_text(json.dumps(obj, indent=4))
    os.replace(tmp, path)


def _stats(values: np.ndarray) -> dict[str, list]:
    """min/max/mean/std/count over axis 0 of a (N, D) array."""
    out = {stat: getattr(values, stat)(axis=0).tolist() for stat in ("min", "max", "mean", "std")}
    return out | {"count": [int(values.shape[0])]}


def _channel_stats(lo: Any, hi: Any, mean: Any, std: Any, count: int) -> dict[str, list]:
    """Per-channel stats of a camera feature, each value shaped (1, 1) like LeRobot's."""
    per_channel = zip(("min", "max", "mean", "std"), (lo, hi, mean, std))
    return {stat: [[[v]] for v in values] for stat, values in per_channel} | {"count": [count]}


def _depth_stats(values_mm: np.ndarray, count: int) -> dict[str, list]:
    """Stats of a depth feature in its recorded unit (mm), shaped (1, 1, 1) like LeRobot's."""
    v = values_mm
    return _channel_stats([float(v.min())], [float(v.max())], [float(v.mean())], [float(v.std())], count)


def _tasks_table(tasks: Sequence[str], form: str) -> pa.Table:
    """``meta/tasks.parquet``: LeRobot's pandas-index form (the task string as the index) or a column."""
    idx = pa.array(list(range(len(tasks))), pa.int64())
    names = pa.array(list(tasks), pa.string())
    if form == "column":
        return pa.table({"task_index": idx, "task": names})
    if form != "pandas_index":
        raise ValueError(f"tasks_parquet_form must be 'pandas_index' or 'column', got {form!r}")
    unicode = {"pandas_type": "unicode", "numpy_type": "object"}
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [{"name": None, "field_name": None, **unicode, "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {"name": None, "field_name": "__index_level_0__", **unicode, "metadata": None},
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    table = pa.table({"task_index": idx, "__index_level_0__": names})
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


class _Roller:
    """LeRobot's file roll-over: the next file when the current one would reach the size limit
    (or hold ``per_file`` items); the next chunk folder after ``chunks_size`` files."""

    def __init__(self, limit_mb: float, per_file: int | None, chunks_size: int) -> None:
        self.limit_bytes = limit_mb * MB
        self.per_file = per_file
        self.chunks_size = chunks_size
        self.chunk_index = self.file_index = self.count = self.nbytes = 0

    def place(self, nbytes: int) -> tuple[int, int]:
        """(chunk_index, file_index) of the next item of ``nbytes`` bytes."""
        if self.count > 0:
            if self.per_file is not None:
                full = self.count >= self.per_file
            else:
                full = self.nbytes + nbytes >= self.limit_bytes
            if full:
                self.file_index += 1
                if self.file_index >= self.chunks_size:
                    self.chunk_index += 1
                    self.file_index = 0
                self.count = self.nbytes = 0
        self.count += 1
        self.nbytes += nbytes
        return self.chunk_index, self.file_index


def _write_videos(
    root: Path, key: str, parts: Iterable[Path], rows: list[dict], roller: _Roller, faststart: bool
) -> None:
    """Put each episode's MP4 (``parts``, in episode order; ``rows``: their ``meta/episodes`` rows)
    into camera ``key``'s video files by LeRobot's roll-over (``roller``), record each episode's
    chunk, file and ``[from_timestamp, to_timestamp)`` window (seconds) in its row, then join
    each file's episodes (:func:`_concat`)."""
    pending: dict[tuple[int, int], list[Path]] = {}
    elapsed: dict[tuple[int, int], float] = {}
    for part, row in zip(parts, rows):
        duration = video_duration_s(part)
        c, f = roller.place(part.stat().st_size)
        from_ts = elapsed.get((c, f), 0.0)
        elapsed[(c, f)] = from_ts + duration
        pending.setdefault((c, f), []).append(part)
        row[f"videos/{key}/chunk_index"] = c
        row[f"videos/{key}/file_index"] = f
        row[f"videos/{key}/from_timestamp"] = from_ts
        row[f"videos/{key}/to_timestamp"] = from_ts + duration
    for (c, f), paths in pending.items():
        _concat(paths, root / VIDEO_PATH.format(video_key=key, chunk_index=c, file_index=f), faststart)
