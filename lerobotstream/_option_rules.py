"""The rules options are checked by: the value predicates of :class:`~lerobotstream.options.StreamOptions`'s
declarations (``is_int``, ``is_number``...) and :func:`require`, which raises the typed error naming the option.
One place each, so a loader's argument, a planner's setting and a resume state's field are held to the same rule."""

from __future__ import annotations

import math
import re
from collections import abc
from collections.abc import Callable
from typing import Any

from lerobotstream.errors import StreamingConfigError

__all__ = [
    "require",
    "is_int",
    "is_number",
    "is_bool",
    "int_at_least",
    "episodes_ok",
    "camera_keys_ok",
    "MAX_BUDGET_GB",
    "DEVICE_RE",
]


def require(name: str, value: Any, ok: bool, want: str) -> None:
    """Raise :class:`StreamingConfigError` naming the option and its value unless ``ok``."""
    if not ok:
        raise StreamingConfigError(f"{name} must be {want}, got {value!r}", option=name, value=value)


def is_int(v: Any) -> bool:
    import numpy as np

    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """A finite real number that fits a float64 (bools, strings, nan, inf and 10**400 are not)."""
    import numpy as np

    if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, (bool, np.bool_)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def is_bool(v: Any) -> bool:
    import numpy as np

    return isinstance(v, (bool, np.bool_))


#: the largest byte budget the C planner can hold (int64 bytes), in GiB
MAX_BUDGET_GB = float(2**62) / 2**30
DEVICE_RE = re.compile(r"cpu|cuda(:[0-9]+)?", re.ASCII)


def int_at_least(lo: int, none_ok: bool = False) -> Callable[[Any], bool]:
    return lambda v: (none_ok and v is None) or (is_int(v) and v >= lo)


def episodes_ok(v: Any) -> bool:
    if v is None:
        return True
    try:
        eps = list(v)
    except TypeError:
        return False
    return len(eps) > 0 and all(is_int(e) and e >= 0 for e in eps)


def camera_keys_ok(v: Any) -> bool:
    return v is None or (
        not isinstance(v, (str, bytes)) and isinstance(v, abc.Iterable) and all(isinstance(k, str) for k in v)
    )
