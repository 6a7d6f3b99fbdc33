"""The identity pattern of generated frames, and the expected values of every generated feature.

Every frame's pixels encode ``(episode_index, frame_index, camera_index)`` as an 8x6 grid of
black/white cells (16 + 16 + 4 data bits and a 12-bit CRC), which survives AV1 crf 30, H.264
and HEVC down to 64x48; :func:`read_identity` reads it back. Depth maps, image features and
language cells of a generated dataset are functions of the same identity (see
:mod:`lerobotstream.testing._dataset`), so a test knows each value exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lerobotstream.features import DEFAULT_TOOLS

GRID_COLS = 8
GRID_ROWS = 6
_EP_BITS, _FRAME_BITS, _CAM_BITS, _CRC_BITS = 16, 16, 4, 12
_CRC_POLY = 0x80F  # CRC-12 (x^12 + x^11 + x^3 + x^2 + x + 1)
_CRC_XOR = 0xA5C  # so an all-black or all-white frame never passes the check


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
    if not (
        0 <= episode_index < 1 << _EP_BITS
        and 0 <= frame_index < 1 << _FRAME_BITS
        and 0 <= camera_index < 1 << _CAM_BITS
    ):
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
    if hasattr(frame, "detach"):  # torch tensors without importing torch here
        frame = frame.detach().cpu().numpy()
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
    word = 0  # the cells' bits, row by row, each read from the middle half of its cell
    for r in range(GRID_ROWS):
        y0, y1 = ys[r], ys[r + 1]
        my = (y1 - y0) // 4
        for c in range(GRID_COLS):
            x0, x1 = xs[c], xs[c + 1]
            mx = (x1 - x0) // 4
            cell = grey[y0 + my : max(y1 - my, y0 + my + 1), x0 + mx : max(x1 - mx, x0 + mx + 1)]
            word = (word << 1) | int(cell.mean() >= 127.5)
    ndata = _EP_BITS + _FRAME_BITS + _CAM_BITS
    data, crc = word >> _CRC_BITS, word & ((1 << _CRC_BITS) - 1)
    if _crc12(data, ndata) != crc:
        raise ValueError(f"identity checksum failed (read bits {word:012x}): not an intact generated frame")
    return (
        data >> (_CAM_BITS + _FRAME_BITS),
        (data >> _CAM_BITS) & ((1 << _FRAME_BITS) - 1),
        data & ((1 << _CAM_BITS) - 1),
    )


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


def expected_depth_codes(
    episode_index: int,
    frame_index: int,
    camera_index: int,
    height: int,
    width: int,
    quantizer: Sequence = DEPTH_QUANTIZER,
) -> np.ndarray:
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
    """``rgb`` encoded as PNG, JPEG or (uint16 depth, ``I;16``: LeRobot's raw depth image format) TIFF."""
    import io

    from PIL import Image

    options = {"png": {"compress_level": 1}, "jpeg": {"quality": 90}, "tiff": {"compression": "raw"}}
    if fmt not in options:
        raise ValueError(f"image format must be 'png', 'jpeg' or 'tiff', got {fmt!r}")
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format=fmt.upper(), **options[fmt])
    return buf.getvalue()


#: LeRobot 0.6.1's ``say`` tool schema (``lerobot.datasets.language.SAY_TOOL_SCHEMA``): the one
#: ``lerobotstream.features`` keeps as LeRobot's fallback tool list
SAY_TOOL_SCHEMA = DEFAULT_TOOLS[0]


def _language_cells(episode_index: int, frame_index: int, fps: int) -> tuple[list, list]:
    """(language_persistent, language_events) rows of a frame, as the annotation writer stores them."""

    def row(role: str, content: Any, style: Any, camera: Any = None, tool_calls: Any = None, **ts: float) -> dict:
        return {"role": role, "content": content, "style": style, **ts, "camera": camera, "tool_calls": tool_calls}

    persistent = [
        row("assistant", f"plan of episode {episode_index}", "plan", timestamp=0.0),
        row("assistant", "reach", "subtask", timestamp=0.1),
    ]
    events: list = []
    if frame_index % 5 == 2:
        say = {"type": "function", "function": {"name": "say", "arguments": {"text": f"frame {frame_index}"}}}
        events.append(row("assistant", None, None, tool_calls=[say]))
    if frame_index % 7 == 3:
        events.append(row("user", "what is left of the cube?", "vqa", camera="observation.images.front"))
    return persistent, events


def expected_language(episode_index: int, frame_index: int, fps: int) -> dict[str, list]:
    """Each language column's value of a generated frame as LeRobot 0.6.1's map-style returns it:
    the row fields in schema order, ``timestamp`` as float32."""
    persistent, events = _language_cells(episode_index, frame_index, fps)
    persistent = [{**r, "timestamp": float(np.float32(r["timestamp"]))} for r in persistent]
    return {"language_persistent": persistent, "language_events": events}
