"""``image`` features (PNG/JPEG/TIFF bytes embedded in the Parquet rows) and language columns, as
LeRobot 0.6.1's map-style items hold them.

Images: map-style decodes a cell with HF ``datasets.Image`` (PIL open, ``load()``, EXIF orientation
applied) and LeRobot's ``pil_to_chw_tensor``: 16-bit gray (``I;16*``) → float32 ``(1, H, W)`` in
stored units; else torchvision's ``ToTensor``: 8-bit modes → float32 ``(C, H, W)`` ``x / 255`` (``P``
gives palette indices, ``1`` gives 0/1), ``I`` → int32 ``(1, H, W)``, ``F`` → float32 ``(1, H, W)``.
:func:`decode_image` does the same on a decode thread; 8-bit images stay uint8 here and become
float32 at assembly (``frames_to_float_chw``, bitwise ``x.to(float32) / 255``).

Language columns: map-style returns the list of row dicts HF ``datasets`` decodes against
LeRobot's features (the row schema's fields in order, ``timestamp`` as float32, ``tool_calls``
JSON text parsed); :func:`language_rows` rebuilds that from the Parquet values.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from lerobotstream.errors import EpisodeDataError
from lerobotstream.meta import LANGUAGE_COLUMNS

__all__ = ["decode_image", "declared_chw", "image_bytes", "language_rows", "LANGUAGE_COLUMNS"]

_UINT16_MODES = frozenset({"I;16", "I;16B", "I;16L"})
_ORIENTATION = 0x0112  # EXIF Orientation tag (PIL.Image.ExifTags.Base.Orientation)
#: row fields of each language column (LeRobot 0.6.1 ``PERSISTENT_ROW_FIELDS`` / ``EVENT_ROW_FIELDS``)
LANGUAGE_ROW_FIELDS = {
    "language_persistent": ("role", "content", "style", "timestamp", "camera", "tool_calls"),
    "language_events": ("role", "content", "style", "camera", "tool_calls"),
}


def image_bytes(column, *, key: str, episode_index: int, path: str = "") -> list:
    """The ``bytes`` of each row of an ``image`` column (pyarrow ``struct<bytes, path>``).

    Raises:
        EpisodeDataError: the column is not a ``{bytes, path}`` struct.
    """
    from lerobotstream.features import is_image_column_type

    arr = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    if not is_image_column_type(arr.type):
        raise EpisodeDataError(
            f"episode {episode_index}, image feature {key!r}, file {path}: the Parquet column is "
            f"{arr.type}, not a {{bytes, path}} struct",
            episode_index=episode_index,
            camera=key,
            path=path,
        )
    return arr.field("bytes").to_pylist()


def declared_chw(feature: Mapping[str, Any] | None) -> tuple[int, int, int] | None:
    """The ``(C, H, W)`` an ``image`` feature of ``meta/info.json`` declares: its ``shape`` read
    through its ``names`` (``height``/``width``/``channel(s)`` in any order), else as LeRobot's
    ``(H, W, C)`` (or ``(C, H, W)`` when only the first entry is a channel count). None when the
    feature declares no usable 3-entry shape (then nothing is checked)."""
    shape = list((feature or {}).get("shape") or ())
    if len(shape) != 3 or not all(isinstance(v, int) and v > 0 for v in shape):
        return None
    names = [str(n).lower() for n in ((feature or {}).get("names") or [])]
    if len(names) == 3:
        pos = {n.rstrip("s"): i for i, n in enumerate(names)}
        if {"channel", "height", "width"} <= set(pos):
            return shape[pos["channel"]], shape[pos["height"]], shape[pos["width"]]
    if shape[-1] in (1, 2, 3, 4):
        return shape[2], shape[0], shape[1]
    if shape[0] in (1, 2, 3, 4):
        return shape[0], shape[1], shape[2]
    return None


def decode_image(
    data: bytes | None,
    *,
    key: str = "",
    episode_index: int = -1,
    frame_index: int = -1,
    path: str = "",
    shape: tuple[int, int, int] | None = None,
) -> torch.Tensor:
    """One Parquet image cell → map-style's tensor, checked against ``shape``, the ``(C, H, W)``
    the feature declares (:func:`declared_chw`; None: not checked).

    Returns:
        torch.Tensor: uint8 ``(C, H, W)`` (a view of a fresh HWC array) for 8-bit modes (the item
        value is its float32 ``/ 255``); float32 ``(1, H, W)`` for 16-bit gray and ``F``; int32
        ``(1, H, W)`` for ``I``.

    Raises:
        EpisodeDataError: no embedded bytes, bytes Pillow cannot decode, or an image whose size or
            channel count is not ``shape`` (checked from the header before decoding, and after EXIF
            orientation); the message names the episode, frame, feature and file.
    """
    where = f"episode {episode_index}, frame {frame_index}, image feature {key!r}, file {path}"
    if data is None:
        raise EpisodeDataError(
            f"{where}: the Parquet cell holds no embedded image bytes",
            episode_index=episode_index,
            camera=key,
            path=path,
        )
    try:
        from PIL import Image, ImageOps
    except ImportError as e:  # pragma: no cover - Pillow is a dependency of image features
        raise EpisodeDataError("image features need Pillow (pip install pillow)") from e
    try:
        img = Image.open(io.BytesIO(data))  # lazy: the header (PNG IHDR) only, nothing decoded
        if shape is not None:  # before decoding: a cell declaring a huge image is not decoded
            c, h, w = len(img.getbands()), img.size[1], img.size[0]
            if (c, h, w) != tuple(shape) and (c, w, h) != tuple(shape):  # EXIF may turn it by 90°
                raise _shape_error(where, img, shape, episode_index, key, path, frame_index)
        img.load()
        if img.getexif().get(_ORIENTATION) is not None:
            img = ImageOps.exif_transpose(img)
    except EpisodeDataError:
        raise
    except Exception as e:
        raise EpisodeDataError(
            f"{where}: Pillow cannot decode the image: {type(e).__name__}: {e}",
            episode_index=episode_index,
            camera=key,
            path=path,
        ) from e
    mode = img.mode
    if shape is not None and (len(img.getbands()), img.size[1], img.size[0]) != tuple(shape):
        raise _shape_error(where, img, shape, episode_index, key, path, frame_index)
    if mode in _UINT16_MODES or mode in ("I", "F"):  # one band, int32 for I, else float32
        return torch.from_numpy(np.array(img, dtype=np.int32 if mode == "I" else np.float32))[None, ...]
    arr = np.array(img, dtype=np.uint8)
    if mode == "1":
        arr = arr * np.uint8(255)
    channels = len(img.getbands())
    arr = arr.reshape(img.size[1], img.size[0], channels)
    return torch.from_numpy(arr).permute(2, 0, 1)


def _shape_error(
    where: str, img: Any, shape: tuple, episode_index: int, key: str, path: str, frame_index: int
) -> EpisodeDataError:
    got = (len(img.getbands()), img.size[1], img.size[0])
    return EpisodeDataError(
        f"{where}: the image is {img.mode} {img.size[0]}x{img.size[1]} (C, H, W) = {got}, but meta/info.json "
        f"declares {tuple(shape)}; every image of a feature must have its declared size and channel count "
        "(LeRobot stacks them into one tensor): re-encode the image or fix meta/info.json",
        episode_index=episode_index,
        camera=key,
        path=path,
        frame_index=frame_index,
    )


def language_rows(column: str, value: Any) -> Any:
    """A language cell (Python value of the Parquet list of row structs) → map-style's value."""
    if value is None:
        return None
    fields = LANGUAGE_ROW_FIELDS[column]
    out = []
    for row in value:
        if row is None:
            out.append(None)
            continue
        new: dict[str, Any] = {}
        for name in fields:
            v = row.get(name)
            if name == "timestamp" and v is not None:
                v = float(np.float32(v))
            elif name == "tool_calls" and v is not None:
                v = [json.loads(c) if isinstance(c, str) else c for c in v]
            new[name] = v
        out.append(new)
    return out


def to_output_unit(value: torch.Tensor, how: str | None) -> torch.Tensor:
    """A depth *image* converted as map-style does: ``how`` ``"mul"`` (m → mm, ``x * 1000``), ``"div"``
    (mm → m, ``x / 1000``) or None (as is)."""
    if how == "mul":
        return value * 1000.0
    if how == "div":
        return value / 1000.0
    return value
