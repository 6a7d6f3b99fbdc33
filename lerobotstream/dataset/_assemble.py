"""Item assembly: one anchor → the map-style item (keys, dtypes, shapes, windows, pads, frames).

An episode's row columns are converted once (:func:`episode_rows`) to the dtypes HF's torch
formatter gives map-style LeRobot (float32, int64, bool) of the dtype ``meta/info.json`` declares
(a column of numbers of another Arrow type is cast to it first, as LeRobot's loader does; one of
nulls or other values is refused); other columns (strings, language rows, undeclared ones) stay
Python values, converted per item (dicts and None pass through, as ``hf_transform_to_torch``
does). Each item owns its data (copies, never views of the cache).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from lerobotstream.dataset._images import LANGUAGE_COLUMNS, declared_chw, image_bytes, language_rows, to_output_unit
from lerobotstream.decode._frames import frames_to_float_chw, frames_to_u8_chw
from lerobotstream.errors import DeltaTimestampsError, EpisodeDataError
from lerobotstream.features import data_columns_problem, row_off_shape, row_shape_matches
from lerobotstream.parquet import (
    STANDARD_COLUMNS,
    data_column_problem,
    declared_values,
    index_problem,
    task_index_problem,
)

__all__ = ["DeltaWindows", "EpisodeRows", "SlotFn", "assemble_item", "episode_rows", "window_indices"]

_KIND_DTYPE = {"f": np.float32, "i": np.int64, "u": np.int64, "b": np.bool_}


# ``delta_timestamps`` windows, as map-style LeRobot: an offset ``d`` (seconds) must be on the frame
# grid (``|d*fps - round(d*fps)| / fps <= tolerance_s``); its frame delta is ``round(d*fps)``
# (half to even); the window frame of anchor ``i`` is ``clamp(i + k, 0, length - 1)`` in the
# complete episode (edge-repeat padding), padded where ``i + k`` falls outside it.


def check_delta_timestamps(
    delta_timestamps: Mapping[str, Sequence[float]],
    fps: float,
    tolerance_s: float,
    features: Mapping[str, object] | None = None,
) -> None:
    """Validate offsets against the frame grid (map-style rule).

    Raises:
        DeltaTimestampsError: an offset is off the grid by more than ``tolerance_s`` (lists every
            bad offset per key), a key is not a feature, or a key has no offsets.
    """
    if fps <= 0:
        raise DeltaTimestampsError(f"fps must be positive, got {fps}")
    outside: dict[str, list[float]] = {}
    for key, deltas in delta_timestamps.items():
        if features is not None and key not in features:
            raise DeltaTimestampsError(
                f"delta_timestamps key {key!r} is not a feature of the dataset (features: {sorted(features)})",
                key=key,
            )
        d = np.asarray(list(deltas), dtype=np.float64)
        if d.ndim != 1 or d.size == 0:
            raise DeltaTimestampsError(f"delta_timestamps[{key!r}] must be a non-empty list of seconds", key=key)
        if not np.all(np.isfinite(d)):
            raise DeltaTimestampsError(f"delta_timestamps[{key!r}] has non-finite offsets: {d.tolist()}", key=key)
        x = d * fps
        bad = np.abs(x - np.round(x)) / fps > tolerance_s
        if bad.any():
            outside[key] = d[bad].tolist()
    if outside:
        raise DeltaTimestampsError(
            f"delta_timestamps are not multiples of 1/fps (fps={fps}) within tolerance_s={tolerance_s}: {outside}",
            outside=outside,
        )


def window_indices(frame_index: np.ndarray | int, length: int, deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Episode-local window frames and pad flags of anchor(s) ``frame_index`` (int, or (N,)) of
    an episode of ``length`` (> 0) frames, for int64 ``deltas`` (K,): ``(indices, is_pad)``,
    int64 and bool, (K,) or (N, K); ``clamp(i + k, 0, length - 1)`` and ``i + k`` outside."""
    if length <= 0:
        raise ValueError(f"episode length must be positive, got {length}")
    i = np.asarray(frame_index, dtype=np.int64)
    raw = i[..., None] + np.asarray(deltas, dtype=np.int64)
    is_pad = (raw < 0) | (raw >= length)
    return np.clip(raw, 0, length - 1), is_pad


class DeltaWindows:
    """Validated windows of a dataset: ``frames[key]``, the frame deltas (int64 (K,)) of each
    windowed key (``delta_timestamps``: ``{key: [seconds, ...]}`` or None; ``fps`` in frames/s,
    ``tolerance_s`` in seconds, ``features`` the keys are checked against).

    Raises:
        DeltaTimestampsError: see :func:`check_delta_timestamps`.
    """

    def __init__(
        self,
        delta_timestamps: Mapping[str, Sequence[float]] | None,
        fps: float,
        tolerance_s: float,
        features: Mapping[str, object] | None = None,
    ) -> None:
        self.delta_timestamps = {k: list(v) for k, v in (delta_timestamps or {}).items()}
        if self.delta_timestamps:
            check_delta_timestamps(self.delta_timestamps, fps, tolerance_s, features)
        self.frames = {  # round(d*fps), half to even
            k: np.round(np.asarray(v, dtype=np.float64) * fps).astype(np.int64)
            for k, v in self.delta_timestamps.items()
        }

    def keys(self):
        return self.frames.keys()


@dataclass
class EpisodeRows:
    """An episode's rows, converted once."""

    episode_index: int
    length: int  # frames
    from_index: int  # ``dataset_from_index``
    numeric: dict[str, np.ndarray]  # fixed-shape columns, (length, ...) float32/int64/bool
    other: dict[str, list]  # other columns as Python values (length,)
    timestamp_s: np.ndarray  # float64 (length,) of the float32 ``timestamp`` column
    columns: list[str] = field(default_factory=list)
    images: dict[str, list] = field(default_factory=dict)  # ``image`` columns: each row's bytes (or None)
    #: ``image`` key -> the (C, H, W) its ``info.json`` feature declares (None: not checked)
    image_shapes: dict[str, tuple[int, int, int] | None] = field(default_factory=dict)


def _column_to_numpy(col: pa.ChunkedArray) -> np.ndarray | None:
    if col.null_count:
        return None
    base = col.type
    while pa.types.is_list(base) or pa.types.is_fixed_size_list(base) or pa.types.is_large_list(base):
        base = base.value_type
    if not (pa.types.is_integer(base) or pa.types.is_floating(base) or pa.types.is_boolean(base)):
        return None
    try:
        arr = np.array(col.to_pylist())
    except ValueError:  # ragged
        return None
    if arr.dtype.kind not in _KIND_DTYPE:
        return None
    return arr.astype(_KIND_DTYPE[arr.dtype.kind])


def episode_rows(
    table: pa.Table,
    episode_index: int,
    from_index: int,
    *,
    image_keys: Sequence[str] = (),
    path: str = "",
    features: Mapping[str, Mapping[str, Any]] | None = None,
    n_tasks: int | None = None,
) -> EpisodeRows:
    """Convert an episode's Parquet rows (sorted by ``frame_index``) once for assembly.

    ``image_keys``: the ``image`` features among the columns (only their bytes are kept).
    ``features``: ``meta/info.json`` features; when given, every declared non-video column must be
    present (``image`` columns only when in ``image_keys``) with the declared shape per row
    (:func:`~lerobotstream.features.row_off_shape`), and a column of a numeric dtype (the standard
    columns ``timestamp`` float32, ``*index`` int64 when undeclared) must hold numbers that dtype
    holds, with no null (:func:`lerobotstream.parquet.data_column_problem`). Every ``index`` must be ``from_index +
    frame_index`` (:func:`lerobotstream.parquet.index_problem`); with ``n_tasks`` every
    ``task_index`` must be in ``[0, n_tasks)`` (:func:`lerobotstream.parquet.task_index_problem`).

    Raises:
        EpisodeDataError: ``timestamp`` or ``task_index`` is missing, a declared column is missing,
            holds values other than numbers of its declared dtype (a null, strings, structs, a
            number the dtype cannot hold), a row's shape is not the declared one, or a row's
            ``index`` or ``task_index`` breaks its rule; the message names the episode, the file,
            the column and the row (and the declared dtype and found Arrow type).
    """
    ep = int(episode_index)
    where = f"episode {ep}, file {path}"
    problem = data_columns_problem(table.column_names, features, image_keys=image_keys)
    if problem is not None:
        raise EpisodeDataError(
            f"{where}: {problem.message}; the file does not match the dataset's metadata (a partial rewrite?): "
            "rewrite the file or fix meta/info.json",
            episode_index=ep,
            path=path,
            column=problem.column,
        )
    declared = {name: (features or {}).get(name) or STANDARD_COLUMNS.get(name) for name in table.column_names}
    declared = {k: f for k, f in declared.items() if features is not None and f is not None}
    for name, feat in declared.items():  # numbers of the declared dtype: Arrow types and null counts
        problem = data_column_problem(table.column(name), feat.get("dtype"), name)
        if problem is not None:
            raise EpisodeDataError(
                f"{where}: {problem.message}; the metadata does not describe this data: fix the file or meta/info.json",
                episode_index=ep,
                path=path,
                column=name,
            )
    checks = [(index_problem, from_index, "index", "meta/episodes", "the episode's dataset_from_index")]
    if n_tasks is not None:
        checks.append((task_index_problem, int(n_tasks), "task_index", "meta/tasks.parquet", "add the missing tasks"))
    for problem_of, arg, column, other, or_fix in checks:  # the rules lerobotstream.validate applies too
        problem = problem_of(table.column(column).to_numpy(), arg) if column in table.column_names else None
        if problem is not None:
            raise EpisodeDataError(
                f"{where}: {problem.message}; the data file's {column} column does not match {other}: "
                f"rewrite the file's {column} column (or {or_fix})",
                episode_index=ep,
                path=path,
                column=column,
            )
    numeric: dict[str, np.ndarray] = {}
    other: dict[str, list] = {}
    images: dict[str, list] = {}
    for name in table.column_names:
        if name in image_keys:
            images[name] = image_bytes(table.column(name), key=name, episode_index=ep, path=path)
            continue
        want = tuple((features or {}).get(name, {}).get("shape") or ())
        col = table.column(name)
        if name in declared:  # the declared dtype's numbers, as LeRobot's loader casts them (checked above)
            col = declared_values(col, declared[name].get("dtype"))
        off = row_off_shape(col, want) if want and not col.null_count else None
        if off is not None:
            row, axis, got = off
            along = f" along axis {axis}" if len(want) > 1 else ""
            raise EpisodeDataError(
                f"{where}: column {name!r} row {row} (frame_index {row}) holds {got} values{along} but meta/info.json "
                f"declares shape {list(want)}; the metadata does not describe this data (LeRobot refuses it too): fix "
                "meta/info.json or the file",
                episode_index=ep,
                path=path,
                column=name,
                frame_index=row,
            )
        arr = _column_to_numpy(col)
        if arr is None:
            other[name] = col.to_pylist()
        else:
            numeric[name] = arr
            got = arr.shape[1:]
            if not row_shape_matches(want, got):
                raise EpisodeDataError(
                    f"{where}: column {name!r} holds {list(got) or 'scalar'} values per row but meta/info.json "
                    f"declares shape {list(want)}; the metadata does not describe this data (LeRobot refuses it "
                    "too): fix meta/info.json or the file",
                    episode_index=ep,
                    path=path,
                    column=name,
                )
    ts = np.asarray(table.column("timestamp").to_numpy(), dtype=np.float64)
    shapes = {k: declared_chw((features or {}).get(k)) for k in images}
    return EpisodeRows(
        ep, table.num_rows, int(from_index), numeric, other, ts, list(table.column_names), images, shapes
    )


def _other_to_torch(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):  # structs: LeRobot's hf_transform_to_torch leaves dicts as they are
        return copy.deepcopy(value)
    return torch.tensor(value)


#: ``slot(key, shape, dtype) -> tensor | None``: where an item's value of ``key`` may be written (a
#: contiguous CPU tensor, e.g. its row of a batch tensor; None: a new tensor). A slot may also have
#: ``put(key, value: np.ndarray) -> marker | None``: the value written into the batch's array of
#: ``key``, the item carrying the marker instead (None: not taken).
SlotFn = Callable[[str, tuple, torch.dtype], "torch.Tensor | None"]


def _video_value(
    data: torch.Tensor | Sequence[torch.Tensor], return_uint8: bool, out: torch.Tensor | None = None
) -> torch.Tensor:
    """uint8 frames ((T,C,H,W) tensor or T views of (C,H,W)) → the item's owned, **contiguous**
    NCHW value ((C,H,W) when T == 1): CPU RGB frames in one C pass
    (:func:`~lerobotstream.decode._frames.frames_to_u8_chw` / ``frames_to_float_chw``, bitwise
    map-style's ``x.type(torch.float32) / 255``), others by ``copy_`` then ``.div_(255)``.
    """
    if isinstance(data, torch.Tensor):
        views = [data[0]] if data.shape[0] == 1 else list(data.unbind(0))
    else:
        views = list(data)
    if out is not None:
        got = frames_to_u8_chw(views, out=out) if return_uint8 else frames_to_float_chw(views, out=out)
        if got is not None:
            return got
    out = frames_to_u8_chw(views) if return_uint8 else frames_to_float_chw(views)
    if out is not None:
        return out
    dtype = torch.uint8 if return_uint8 else torch.float32
    shape = tuple(views[0].shape)
    if len(views) == 1:
        out = torch.empty(shape, dtype=dtype, device=views[0].device).copy_(views[0])
    else:
        out = torch.empty((len(views), *shape), dtype=dtype, device=views[0].device)
        for t, v in enumerate(views):
            out[t].copy_(v)
    return out if return_uint8 else out.div_(255)


#: ``frames(episode, camera, episode_frames) -> uint8 (T, C, H, W)`` tensor, or a list of T uint8
#: (C, H, W) views (never modified; the item gets its own copy)
FramesFn = Callable[[int, str, np.ndarray], torch.Tensor]


def _image_value(views: Sequence[torch.Tensor], windowed: bool) -> torch.Tensor:
    """Decoded image frames (``_images.decode_image``) → the item's owned value: 8-bit frames float32
    ``x / 255`` (bitwise ``ToTensor``), others copied; ``(T, ...)`` stacked when ``windowed``."""
    if views[0].dtype == torch.uint8:
        out = frames_to_float_chw(views, squeeze=not windowed)
        if out is None:  # frames of different shapes: torch.stack refuses them, as map-style's does
            vals = [v.to(torch.float32).div(255) for v in views]
            return torch.stack(vals) if windowed else vals[0]
        return out
    return torch.stack(list(views)) if windowed else views[0].clone()


def assemble_item(
    rows: EpisodeRows,
    frame_index: int,
    *,
    windows: DeltaWindows,
    video_keys: Sequence[str],
    frames: FramesFn,
    tasks: Sequence[str],
    return_uint8: bool = False,
    image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
    camera_keys: Sequence[str] = (),
    depth: Mapping[str, Callable[[Sequence[torch.Tensor]], torch.Tensor]] | None = None,
    images: Mapping[str, Mapping[int, torch.Tensor]] | None = None,
    image_depth: Mapping[str, str | None] | None = None,
    slot: SlotFn | None = None,
) -> dict[str, Any]:
    """Build the map-style item of ``(rows.episode_index, frame_index)``.

    Args: ``depth``: depth video keys → their ``DepthDequantizer`` (of int16 ``(1, H, W)`` codes);
    ``images``: ``image`` keys → ``{episode frame: decoded frame}``; ``image_depth``: depth image
    keys → unit conversion; ``camera_keys``: the keys ``image_transforms`` apply to; ``slot``:
    :data:`SlotFn` (None: new tensors).

    Returns:
        dict: row columns (tensors as the HF formatter makes them), windowed keys stacked to
        (K, ...), ``<key>_is_pad`` bool (K,), video float32 [0, 1] (uint8 with ``return_uint8``)
        (C, H, W) or (K, C, H, W), depth video float32 in the output unit, ``image`` keys as
        map-style (float32 [0, 1] for 8-bit images), language columns as lists of row dicts,
        ``task`` (str).
    """
    f = int(frame_index)
    n = rows.length
    depth = depth or {}
    images = images or {}
    image_depth = image_depth or {}
    put = getattr(slot, "put", None)
    item: dict[str, Any] = {}
    pads: dict[str, Any] = {}
    win: dict[str, np.ndarray] = {}
    for key in windows.keys():
        idx, pad = window_indices(f, n, windows.frames[key])
        win[key] = idx
        name = f"{key}_is_pad"
        got = None if put is None else put(name, pad)
        pads[name] = torch.from_numpy(pad.copy()) if got is None else got
    # video first (map-style builds {**video_frames, **item})
    for key in video_keys:
        idx = win[key] if key in win else np.array([f], dtype=np.int64)
        data = frames(rows.episode_index, key, idx)
        if key in depth:
            views = [data[0]] if isinstance(data, torch.Tensor) and data.shape[0] == 1 else list(data)
            item[key] = depth[key](views).squeeze(0)  # map-style: (1, H, W), or (T, 1, H, W) for T > 1
        else:
            out = None
            if slot is not None:
                t = data.shape[0] if isinstance(data, torch.Tensor) else len(data)
                shape = tuple(data[0].shape) if t == 1 else (t, *data[0].shape)
                out = slot(key, shape, torch.uint8 if return_uint8 else torch.float32)
            item[key] = _video_value(data, return_uint8, out)
    numeric, other = rows.numeric, rows.other
    for name in rows.columns:
        col = numeric.get(name)
        if col is not None:
            value = col[win[name]] if name in win else col[f]
            got = None if put is None else put(name, value)
            if got is not None:
                item[name] = got
            elif name in win:
                item[name] = torch.from_numpy(np.ascontiguousarray(value))
            else:
                item[name] = torch.from_numpy(np.array(value))
        elif name in rows.images:
            got = images[name]
            if name in win:
                value = _image_value([got[int(i)] for i in win[name]], True)
            else:
                value = _image_value([got[f]], False)
            item[name] = to_output_unit(value, image_depth.get(name))
        elif name in LANGUAGE_COLUMNS:
            item[name] = language_rows(name, other[name][f])
        else:
            col = other[name]
            if name in win:
                item[name] = torch.stack([_other_to_torch(col[i]) for i in win[name]])
            else:
                item[name] = _other_to_torch(col[f])
    item.update(pads)
    if image_transforms is not None:
        for key in camera_keys:
            if key in item:
                item[key] = image_transforms(item[key])
    ti = numeric.get("task_index")
    if ti is not None and "task_index" not in win:
        item["task"] = tasks[int(ti[f])]
    else:  # a windowed task_index: map-style's int() of the item's value (an error unless 1 element)
        value = item["task_index"] if ti is None else torch.from_numpy(np.ascontiguousarray(ti[win["task_index"]]))
        item["task"] = tasks[int(value)]
    return item
