"""Per-array reference for ``mp4._index_format.encode_int_segments``: the encoding of one integer
array, computed on its own (the converter encodes a whole NPZ block at once and must agree)."""

from __future__ import annotations

from typing import Any

import numpy as np

from lerobotstream.mp4._index_format import minimal_int_dtype


def encode_int_array(values: np.ndarray) -> tuple[dict[str, Any], np.ndarray | None]:
    """Choose the encoding of one integer array.

    Args:
        values: 1-D integer array (any int dtype; values must fit int64).

    Returns:
        ``(spec, block)``: ``spec`` is the JSON description (``enc``, ``count``, ``dtype`` and
        ``value`` / ``first``+``step`` when not plain); ``block`` is the array to store (minimal
        dtype, C-contiguous) or None for ``const``/``arith``.
    """
    a = np.ascontiguousarray(values, dtype=np.int64).reshape(-1)
    n = int(a.shape[0])
    if n == 0:
        return {"enc": "const", "count": 0, "dtype": "|u1", "value": 0}, None
    lo, hi = int(a.min()), int(a.max())
    dt = minimal_int_dtype(lo, hi)
    if lo == hi:
        return {"enc": "const", "count": n, "dtype": dt.str, "value": lo}, None
    if n >= 2:
        first, last = int(a[0]), int(a[-1])
        step = int(a[1]) - first
        # a progression has its ends at the extremes and last = first + (n-1)*step: checked
        # first, so plain arrays (offsets, sizes) skip the full comparison
        ends = (lo, hi) == ((first, last) if step > 0 else (last, first))
        if (
            step != 0
            and ends
            and last - first == step * (n - 1)
            and abs(step) <= int(np.iinfo(np.int64).max)
            and bool(np.all(np.diff(a) == step))
        ):
            return {"enc": "arith", "count": n, "dtype": dt.str, "first": int(a[0]), "step": step}, None
    return {"enc": "plain", "count": n, "dtype": dt.str}, a.astype(dt)
