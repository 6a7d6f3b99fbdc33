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

Usage (CLI)::

    python tools/make_dataset.py OUT_DIR --episodes 30,45,20 --codec av1 --cameras front:64x48,wrist:97x71
    python tools/make_dataset.py OUT_DIR --episodes 30,45,20 --codec h264 --cameras front:64x48  # H.264/HEVC: even sizes
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MB = 1024 * 1024
GRID_COLS = 8
GRID_ROWS = 6
_EP_BITS, _FRAME_BITS, _CAM_BITS, _CRC_BITS = 16, 16, 4, 12
_CRC_POLY = 0x80F  # CRC-12 (x^12 + x^11 + x^3 + x^2 + x + 1)
_CRC_XOR = 0xA5C  # so an all-black or all-white frame never passes the check
CODECS = ("av1", "h264", "hevc")

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"


# --- identity pattern ---------------------------------------------------------------------------
def _crc12(value: int, nbits: int) -> int:
    crc = 0
    for i in reversed(range(nbits)):
        bit = (value >> i) & 1
        top = (crc >> 11) & 1
        crc = (crc << 1) & 0xFFF
        if top ^ bit:
            crc ^= _CRC_POLY & 0xFFF
    return crc ^ _CRC_XOR


def _identity_bits(episode_index: int, frame_index: int, camera_index: int) -> np.ndarray:
    if not (0 <= episode_index < 1 << _EP_BITS and 0 <= frame_index < 1 << _FRAME_BITS and 0 <= camera_index < 1 << _CAM_BITS):
        raise ValueError(
            f"identity out of range: episode {episode_index} (<{1 << _EP_BITS}), frame {frame_index} "
            f"(<{1 << _FRAME_BITS}), camera {camera_index} (<{1 << _CAM_BITS})"
        )
    data = (episode_index << (_FRAME_BITS + _CAM_BITS)) | (frame_index << _CAM_BITS) | camera_index
    ndata = _EP_BITS + _FRAME_BITS + _CAM_BITS
    word = (data << _CRC_BITS) | _crc12(data, ndata)
    total = ndata + _CRC_BITS
    return np.array([(word >> (total - 1 - i)) & 1 for i in range(total)], dtype=np.uint8)


def _cell_edges(n: int, cells: int) -> list[int]:
    return [(i * n) // cells for i in range(cells + 1)]


def identity_frame(episode_index: int, frame_index: int, camera_index: int, height: int, width: int) -> np.ndarray:
    """The RGB frame that encodes an identity.

    Returns:
        np.ndarray: uint8 (H, W, 3), black (0) / white (255) cells of an 8x6 grid (grey: R = G = B).

    Raises:
        ValueError: an index does not fit its field (episode, frame < 65536; camera < 16) or the
            frame is smaller than 16x12 pixels.
    """
    if height < 12 or width < 16:
        raise ValueError(f"frame {width}x{height} too small for the identity grid (min 16x12)")
    bits = _identity_bits(episode_index, frame_index, camera_index).reshape(GRID_ROWS, GRID_COLS)
    ys, xs = _cell_edges(height, GRID_ROWS), _cell_edges(width, GRID_COLS)
    row_idx = np.searchsorted(ys, np.arange(height), side="right") - 1
    col_idx = np.searchsorted(xs, np.arange(width), side="right") - 1
    grey = bits[row_idx[:, None], col_idx[None, :]] * np.uint8(255)
    return np.repeat(grey[:, :, None], 3, axis=2)


def _to_grey_hw(frame: Any) -> np.ndarray:
    try:  # torch tensors without importing torch here
        if hasattr(frame, "detach"):
            frame = frame.detach().cpu().numpy()
    except Exception as e:  # pragma: no cover - defensive
        raise ValueError(f"cannot read frame of type {type(frame)!r}") from e
    arr = np.asarray(frame)
    if arr.ndim == 2:
        grey = arr.astype(np.float64)
    elif arr.ndim == 3:
        if arr.shape[0] in (1, 3, 4) and arr.shape[-1] not in (1, 3, 4):
            chw = arr
        elif arr.shape[-1] in (1, 3, 4):
            chw = np.moveaxis(arr, -1, 0)
        else:
            raise ValueError(f"frame shape {arr.shape} is neither (C, H, W) nor (H, W, C) with C in 1, 3, 4")
        grey = chw[:3].astype(np.float64).mean(axis=0)
    else:
        raise ValueError(f"frame must be 2-D or 3-D, got shape {arr.shape}")
    if np.issubdtype(arr.dtype, np.floating):
        grey = grey * 255.0
    return grey


def read_identity(frame: Any) -> tuple[int, int, int]:
    """Read the (episode_index, frame_index, camera_index) burned into a generated frame.

    Args:
        frame: a decoded frame, torch tensor or numpy array, uint8 in [0, 255] or float in
            [0, 1], shaped (C, H, W), (H, W, C) or (H, W).

    Returns:
        tuple[int, int, int]: ``(episode_index, frame_index, camera_index)``.

    Raises:
        ValueError: the shape is unusable or the checksum fails (not a generated frame, a blend
            of two frames, or damaged beyond recovery).
    """
    grey = _to_grey_hw(frame)
    height, width = grey.shape
    ys, xs = _cell_edges(height, GRID_ROWS), _cell_edges(width, GRID_COLS)
    bits = []
    for r in range(GRID_ROWS):
        y0, y1 = ys[r], ys[r + 1]
        my = (y1 - y0) // 4
        for c in range(GRID_COLS):
            x0, x1 = xs[c], xs[c + 1]
            mx = (x1 - x0) // 4
            cell = grey[y0 + my : max(y1 - my, y0 + my + 1), x0 + mx : max(x1 - mx, x0 + mx + 1)]
            bits.append(1 if cell.mean() >= 127.5 else 0)
    word = 0
    for b in bits:
        word = (word << 1) | b
    ndata = _EP_BITS + _FRAME_BITS + _CAM_BITS
    data, crc = word >> _CRC_BITS, word & ((1 << _CRC_BITS) - 1)
    if _crc12(data, ndata) != crc:
        raise ValueError(f"identity checksum failed (read bits {word:012x}): not an intact generated frame")
    camera_index = data & ((1 << _CAM_BITS) - 1)
    frame_index = (data >> _CAM_BITS) & ((1 << _FRAME_BITS) - 1)
    episode_index = data >> (_CAM_BITS + _FRAME_BITS)
    return int(episode_index), int(frame_index), int(camera_index)


# --- LeRobot 0.6 cameras: depth, images, language ---------------------------------------------
#: LeRobot 0.6.1's DepthEncoderConfig defaults: (depth_min m, depth_max m, shift m, use_log)
DEPTH_QUANTIZER = (0.01, 10.0, 3.5, True)
DEPTH_QMAX = 4095


def depth_frame_mm(episode_index: int, frame_index: int, camera_index: int, height: int, width: int) -> np.ndarray:
    """The depth map (uint16 millimetres, ``(H, W)``, values 10..9999) of a generated depth camera."""
    y = np.arange(height, dtype=np.int64)[:, None]
    x = np.arange(width, dtype=np.int64)[None, :]
    v = 10 + (x * 37 + y * 101 + frame_index * 53 + episode_index * 997 + camera_index * 5003) % 9990
    return v.astype(np.uint16)


def quantize_depth(depth_mm: np.ndarray, quantizer: Sequence = DEPTH_QUANTIZER) -> np.ndarray:
    """LeRobot 0.6.1's ``quantize_depth`` for millimetre input (numpy path, op for op): uint16 codes 0..4095."""
    import math

    depth_min, depth_max, shift, use_log = quantizer
    depth_f = np.asarray(depth_mm).astype(np.float32)
    dmin, dmax, sh = np.float32(depth_min * 1000.0), np.float32(depth_max * 1000.0), np.float32(shift * 1000.0)
    if use_log:
        log_min = math.log(float(dmin + sh))
        log_max = math.log(float(dmax + sh))
        norm = (np.log(depth_f + sh) - log_min) / (log_max - log_min)
    else:
        norm = (depth_f - dmin) / (dmax - dmin)
    return np.rint(norm * DEPTH_QMAX).clip(0, DEPTH_QMAX).astype(np.uint16)


def expected_depth_codes(episode_index: int, frame_index: int, camera_index: int, height: int, width: int,
                         quantizer: Sequence = DEPTH_QUANTIZER) -> np.ndarray:
    """The 12-bit codes (uint16 ``(H, W)``) a lossless decode of a generated depth frame gives."""
    return quantize_depth(depth_frame_mm(episode_index, frame_index, camera_index, height, width), quantizer)


def image_frame(episode_index: int, frame_index: int, camera_index: int, height: int, width: int) -> np.ndarray:
    """The RGB image (uint8 ``(H, W, 3)``) of a generated ``image`` feature: the identity grid of
    :func:`identity_frame` (so :func:`read_identity` reads it) with a per-pixel, per-channel texture
    of 0..47 (black cells brightened, white cells darkened)."""
    grid = identity_frame(episode_index, frame_index, camera_index, height, width)
    y = np.arange(height, dtype=np.int64)[:, None, None]
    x = np.arange(width, dtype=np.int64)[None, :, None]
    c = np.arange(3, dtype=np.int64)[None, None, :]
    t = ((x * 3 + y * 5 + c * 11 + frame_index * 7 + episode_index) % 48).astype(np.uint8)
    return np.where(grid == 255, 255 - t, t).astype(np.uint8)


def _png_bytes(rgb: np.ndarray, fmt: str) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    if fmt == "png":
        Image.fromarray(rgb).save(buf, format="PNG", compress_level=1)
    elif fmt == "jpeg":
        Image.fromarray(rgb).save(buf, format="JPEG", quality=90)
    elif fmt == "tiff":  # uint16 depth (I;16), LeRobot's raw depth image format
        Image.fromarray(rgb).save(buf, format="TIFF", compression="raw")
    else:
        raise ValueError(f"image format must be 'png', 'jpeg' or 'tiff', got {fmt!r}")
    return buf.getvalue()


#: LeRobot 0.6.1's ``say`` tool schema (``lerobot.datasets.language.SAY_TOOL_SCHEMA``)
SAY_TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": "say",
        "description": "Speak a short utterance to the user via the TTS executor.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string", "description": "The verbatim text to speak."}},
                       "required": ["text"]},
    },
}


def _language_cells(episode_index: int, frame_index: int, fps: int) -> tuple[list, list]:
    """(language_persistent, language_events) rows of a frame, as the annotation writer stores them."""
    persistent = [
        {"role": "assistant", "content": f"plan of episode {episode_index}", "style": "plan", "timestamp": 0.0,
         "camera": None, "tool_calls": None},
        {"role": "assistant", "content": "reach", "style": "subtask", "timestamp": 0.1, "camera": None,
         "tool_calls": None},
    ]
    events: list = []
    if frame_index % 5 == 2:
        events.append({"role": "assistant", "content": None, "style": None, "camera": None,
                       "tool_calls": [{"type": "function", "function": {"name": "say", "arguments": {"text": f"frame {frame_index}"}}}]})
    if frame_index % 7 == 3:
        events.append({"role": "user", "content": "what is left of the cube?", "style": "vqa",
                       "camera": "observation.images.front", "tool_calls": None})
    return persistent, events


def expected_language(episode_index: int, frame_index: int, fps: int) -> dict[str, list]:
    """Each language column's value of a generated frame as LeRobot 0.6.1's map-style returns it:
    the row fields in schema order, ``timestamp`` as float32."""
    persistent, events = _language_cells(episode_index, frame_index, fps)
    persistent = [{**r, "timestamp": float(np.float32(r["timestamp"]))} for r in persistent]
    return {"language_persistent": persistent, "language_events": events}


# --- encoding -------------------------------------------------------------------------------------
def _encoder_args(codec: str, width: int, height: int, gop: int | None) -> list[str]:
    if codec == "av1":
        g = 2 if gop is None else gop
        if width >= 64 and height >= 64 and width % 2 == 0 and height % 2 == 0:
            # LeRobot's default: libsvtav1, g=2, crf=30 (preset 12 is mapped to 10 by SVT 1.4)
            return ["-c:v", "libsvtav1", "-g", str(g), "-crf", "30", "-preset", "12", "-svtav1-params", "verbosity=0"]
        # SVT-AV1 refuses frames under 64 pixels or with odd sizes: libaom-av1 writes the same bitstream format
        return ["-c:v", "libaom-av1", "-g", str(g), "-crf", "30", "-b:v", "0", "-cpu-used", "8", "-row-mt", "1", "-usage", "realtime"]
    if width % 2 or height % 2:
        raise ValueError(f"{codec} with yuv420p needs an even width and height, got {width}x{height} (use codec='av1')")
    if codec == "h264":
        g = 30 if gop is None else gop
        return ["-c:v", "libx264", "-preset", "veryfast", "-bf", "2", "-g", str(g), "-keyint_min", str(g), "-sc_threshold", "0"]
    if codec == "hevc":
        params = "log-level=error"
        if gop is not None:
            params += f":keyint={gop}:min-keyint={gop}:scenecut=0"
        return ["-c:v", "libx265", "-x265-params", params]
    raise ValueError(f"unknown codec {codec!r}; expected one of {CODECS}")


def _run(cmd: list[str], stdin: bytes | None = None) -> None:
    proc = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.decode(errors='replace')[-2000:]}")


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
    return {
        "min": values.min(axis=0).tolist(),
        "max": values.max(axis=0).tolist(),
        "mean": values.mean(axis=0).tolist(),
        "std": values.std(axis=0).tolist(),
        "count": [int(values.shape[0])],
    }


def _depth_stats(values_mm: np.ndarray, count: int) -> dict[str, list]:
    """Stats of a depth feature in its recorded unit (mm), shaped (1, 1, 1) like LeRobot's."""
    return {
        "min": [[[float(values_mm.min())]]], "max": [[[float(values_mm.max())]]],
        "mean": [[[float(values_mm.mean())]]], "std": [[[float(values_mm.std())]]], "count": [count],
    }


def _tasks_table(tasks: Sequence[str], form: str) -> pa.Table:
    idx = pa.array(list(range(len(tasks))), pa.int64())
    names = pa.array(list(tasks), pa.string())
    if form == "column":
        return pa.table({"task_index": idx, "task": names})
    if form != "pandas_index":
        raise ValueError(f"tasks_parquet_form must be 'pandas_index' or 'column', got {form!r}")
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64", "metadata": None},
            {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
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
        self.chunk_index = 0
        self.file_index = 0
        self.count = 0
        self.nbytes = 0

    def place(self, nbytes: int) -> tuple[int, int, bool]:
        """(chunk_index, file_index, is_new_file) of the next item of ``nbytes`` bytes."""
        new = False
        if self.count > 0:
            full = self.per_file is not None and self.count >= self.per_file
            if self.per_file is None and self.nbytes + nbytes >= self.limit_bytes:
                full = True
            if full:
                self.file_index += 1
                if self.file_index >= self.chunks_size:
                    self.chunk_index += 1
                    self.file_index = 0
                self.count = 0
                self.nbytes = 0
                new = True
        self.count += 1
        self.nbytes += nbytes
        return self.chunk_index, self.file_index, new or self.count == 1


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
    cam_index = {key: j for j, (key, _, _) in enumerate([*cameras, *depth_cameras, *image_cameras, *depth_image_cameras])}
    for key, w, h in cameras:
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
            cells = [{"bytes": _png_bytes(image_frame(ep, i, cam_index[key], h, w), image_format),
                      "path": f"frame-{i:06d}.{'png' if image_format == 'png' else 'jpg'}"} for i in range(length)]
            image_cols[key] = pa.array(cells, image_type)
        for key, w, h in depth_image_cameras:
            cells = [{"bytes": _png_bytes(depth_frame_mm(ep, i, cam_index[key], h, w), "tiff"),
                      "path": f"frame-{i:06d}.tiff"} for i in range(length)]
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
            cells = [_language_cells(e, i, fps) for e, i in zip(table.column("episode_index").to_pylist(),
                                                                table.column("frame_index").to_pylist())]
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
            duration = video_duration_s(part)
            c, f, _ = roller.place(part.stat().st_size)
            from_ts = elapsed.get((c, f), 0.0)
            elapsed[(c, f)] = from_ts + duration
            pending.setdefault((c, f), []).append(part)
            ep_rows[ep][f"videos/{key}/chunk_index"] = c
            ep_rows[ep][f"videos/{key}/file_index"] = f
            ep_rows[ep][f"videos/{key}/from_timestamp"] = from_ts
            ep_rows[ep][f"videos/{key}/to_timestamp"] = from_ts + duration
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
            duration = video_duration_s(part)
            c, f, _ = roller.place(part.stat().st_size)
            from_ts = elapsed.get((c, f), 0.0)
            elapsed[(c, f)] = from_ts + duration
            pending.setdefault((c, f), []).append(part)
            ep_rows[ep][f"videos/{key}/chunk_index"] = c
            ep_rows[ep][f"videos/{key}/file_index"] = f
            ep_rows[ep][f"videos/{key}/from_timestamp"] = from_ts
            ep_rows[ep][f"videos/{key}/to_timestamp"] = from_ts + duration
        for (c, f), parts in pending.items():
            _concat(parts, root / VIDEO_PATH.format(video_key=key, chunk_index=c, file_index=f), faststart)
        image_stats[key] = _depth_stats(np.concatenate(depth_vals), total_frames)
    for key, width, height in depth_image_cameras:
        vals = [depth_frame_mm(ep, i, cam_index[key], height, width).reshape(-1).astype(np.float64)
                for ep, length in enumerate(episode_lengths) for i in range(length)]
        image_stats[key] = _depth_stats(np.concatenate(vals), total_frames)
    for key, width, height in image_cameras:
        flat = np.concatenate([image_frame(ep, i, cam_index[key], height, width).reshape(-1, 3)
                               for ep, length in enumerate(episode_lengths) for i in range(length)]).astype(np.float64) / 255.0
        image_stats[key] = {
            "min": [[[v]] for v in flat.min(0)], "max": [[[v]] for v in flat.max(0)],
            "mean": [[[v]] for v in flat.mean(0)], "std": [[[v]] for v in flat.std(0)], "count": [total_frames],
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
            for suffix, typ in (("chunk_index", pa.int64()), ("file_index", pa.int64()), ("from_timestamp", pa.float64()), ("to_timestamp", pa.float64())):
                name = f"videos/{key}/{suffix}"
                cols[name] = pa.array([r[name] for r in rows], typ)
        cols["tasks"] = pa.array([r["tasks"] for r in rows], pa.list_(pa.string()))
        cols["length"] = pa.array([r["length"] for r in rows], pa.int64())
        cols["meta/episodes/chunk_index"] = pa.array([r["meta/episodes/chunk_index"] for r in rows], pa.int64())
        cols["meta/episodes/file_index"] = pa.array([r["meta/episodes/file_index"] for r in rows], pa.int64())
        for feat, arr_key in (("observation.state", "_state"), ("action", "_action")):
            for stat in ("min", "max", "mean", "std"):
                cols[f"stats/{feat}/{stat}"] = pa.array(
                    [getattr(r[arr_key], stat)(axis=0).astype(np.float64).tolist() for r in rows], pa.list_(pa.float64())
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
                "is_depth_map": True, "depth_unit": "mm", "video.height": height, "video.width": width,
                "video.codec": "hevc", "video.pix_fmt": depth_pix_fmt, "video.fps": fps, "video.channels": 1,
                "has_audio": False, "video.g": 2, "video.crf": 30, "video.preset": None, "video.fast_decode": 0,
                "video.video_backend": "pyav", "video.extra_options": {"x265-params": "lossless=1"},
                "video.depth_min": depth_min, "video.depth_max": depth_max, "video.shift": shift, "video.use_log": use_log,
            },
        }
    for key, width, height in image_cameras:
        features[key] = {"dtype": "image", "shape": [height, width, 3], "names": ["height", "width", "channels"]}
    for key, width, height in depth_image_cameras:
        features[key] = {"dtype": "image", "shape": [height, width, 1], "names": ["height", "width", "channels"],
                         "info": {"is_depth_map": True, "depth_unit": "mm"}}
    for name, dtype in (("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"), ("index", "int64"), ("task_index", "int64")):
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


def _parse_cameras(text: str) -> list[tuple[str, int, int]]:
    out = []
    for item in text.split(","):
        name, size = item.split(":")
        w, h = size.lower().split("x")
        key = name if "." in name else f"observation.images.{name}"
        out.append((key, int(w), int(h)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root")
    p.add_argument("--episodes", default="30,45,20", help="comma-separated episode lengths")
    p.add_argument("--fps", type=int, default=30)
    p.add_argument("--cameras", default="front:64x48", help="name:WxH,... (name gets observation.images. prefixed)")
    p.add_argument("--codec", choices=CODECS, default="av1")
    p.add_argument("--gop", type=int, default=None)
    p.add_argument("--episodes-per-video-file", type=int, default=None)
    p.add_argument("--episodes-per-data-file", type=int, default=None)
    p.add_argument("--episodes-meta-per-file", type=int, default=None)
    p.add_argument("--chunks-size", type=int, default=1000)
    p.add_argument("--faststart", action="store_true")
    p.add_argument("--depth-cameras", default="", help="name:WxH,... depth video cameras (HEVC gray12le)")
    p.add_argument("--image-cameras", default="", help="name:WxH,... image features (PNG in the Parquet rows)")
    p.add_argument("--language", action="store_true", help="add LeRobot 0.6.1's language columns")
    args = p.parse_args(argv)
    root = make_dataset(
        args.root,
        episode_lengths=[int(x) for x in args.episodes.split(",")],
        fps=args.fps,
        cameras=_parse_cameras(args.cameras),
        codec=args.codec,
        gop=args.gop,
        episodes_per_video_file=args.episodes_per_video_file,
        episodes_per_data_file=args.episodes_per_data_file,
        episodes_meta_per_file=args.episodes_meta_per_file,
        chunks_size=args.chunks_size,
        faststart=args.faststart,
        depth_cameras=_parse_cameras(args.depth_cameras) if args.depth_cameras else (),
        image_cameras=_parse_cameras(args.image_cameras) if args.image_cameras else (),
        language=args.language,
    )
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
