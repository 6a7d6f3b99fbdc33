"""The timestamp-tolerance rule: which frame plays at a time, and whether it is close enough.

A frame plays at a requested time ``t`` when it is the nearest presented frame to ``t`` (ties go
to the earlier frame) **and** ``|pts_s - t| < tolerance_s`` (strict). This is LeRobot 0.6.1's rule
(``lerobot/datasets/video_utils.py``: ``decode_video_frames_torchcodec`` and
``decode_video_frames_pyav`` keep a frame only where ``min_ < tolerance_s``, else raise
``FrameTimestampError``). The decoder, sidecar validation and ``lerobotstream-validate`` all apply
it, so a dataset that validates never fails at a frame the decoder refuses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lerobotstream.mp4.index import nearest_frames


def within_tolerance(error_s: Any, tolerance_s: float) -> Any:
    """Whether a timestamp error is allowed: ``|error_s| < tolerance_s`` (strict; LeRobot's rule).

    ``error_s`` (seconds: a float, a ``fractions.Fraction`` or a float64 array of frame time minus
    requested time) gives a bool or a bool array shaped like it; NaN is never within tolerance.
    """
    return abs(error_s) < tolerance_s


def frames_within_tolerance(
    pts_s: np.ndarray, presentation_order: np.ndarray | None, times_s: np.ndarray, tolerance_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The frame playing at each time, by :func:`within_tolerance` over ``mp4.index.nearest_frames``.

    Args:
        pts_s: (num_samples,) float64 presentation times, seconds, in decode order (or already in
            presentation order when ``presentation_order`` is None).
        presentation_order: (num_samples,) decode-order index of the k-th presented frame, or None.
        times_s: (m,) float64 requested times on the same timeline, seconds.
        tolerance_s: the dataset's ``tolerance_s``, seconds.

    Returns:
        ``(frames, nearest_pts_s, ok)``: (m,) int64 presentation-order index of the nearest frame
        (ties go to the earlier frame), (m,) float64 its presentation time, (m,) bool whether it is
        within tolerance.

    Raises:
        IndexError: the track has no frames.
    """
    q = np.ascontiguousarray(times_s, dtype=np.float64).reshape(-1)
    pts = np.ascontiguousarray(pts_s, dtype=np.float64)
    order = np.arange(pts.shape[0], dtype=np.int64) if presentation_order is None else presentation_order
    frames, near = nearest_frames(pts, order, q)
    return frames, near, within_tolerance(near - q, tolerance_s)
