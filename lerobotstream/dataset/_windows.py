"""``delta_timestamps`` → frame windows and ``<key>_is_pad`` masks, exactly as map-style LeRobot.

Map-style ``LeRobotDataset`` semantics reproduced here (vectorised with numpy):

* validation: every offset ``d`` (seconds) of every key must satisfy
  ``|d*fps - round(d*fps)| / fps <= tolerance_s``;
* frame deltas: ``round(d*fps)`` (Python/numpy round-half-to-even; both agree);
* for an anchor at episode-local frame ``i`` of an episode of ``length`` frames, the window frame
  of delta ``k`` is ``clamp(i + k, 0, length - 1)`` (edge-repeat padding, never zeros), and its pad
  flag is ``i + k < 0 or i + k >= length``. Windows never leave the complete episode, whatever
  ``episodes=`` subset is selected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from lerobotstream.errors import DeltaTimestampsError

__all__ = ["DeltaWindows", "check_delta_timestamps", "delta_frames", "window_indices"]


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


def delta_frames(delta_timestamps: Mapping[str, Sequence[float]], fps: float) -> dict[str, np.ndarray]:
    """Offsets in seconds → frame deltas ``round(d*fps)`` (int64 arrays, same order as given)."""
    return {
        key: np.round(np.asarray(list(deltas), dtype=np.float64) * fps).astype(np.int64)
        for key, deltas in delta_timestamps.items()
    }


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
        self.frames = delta_frames(self.delta_timestamps, fps)

    def keys(self):
        return self.frames.keys()

    def resolve(self, key: str, frame_index: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        """Window frames and pad flags of ``key`` for one anchor (see :func:`window_indices`)."""
        return window_indices(frame_index, length, self.frames[key])
