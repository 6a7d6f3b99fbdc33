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
    "int_in",
    "is_sequence",
    "path_ok",
    "episodes_ok",
    "camera_keys_ok",
    "check_tolerance",
    "check_epoch",
    "MAX_BUDGET_GB",
    "MAX_COUNT",
    "MAX_SECONDS",
    "MAX_SEED",
    "MAX_THREADS",
    "DEVICE_RE",
]


def require(name: str, value: Any, ok: bool, want: str) -> None:
    """Raise :class:`StreamingConfigError` naming the option and its value unless ``ok``."""
    if not ok:
        raise StreamingConfigError(f"{name} must be {want}, got {value!r}", option=name, value=value)


def is_int(v: Any) -> bool:
    import numpy as np

    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def check_epoch(epoch: Any) -> int:
    """The rule of an epoch number (``set_epoch``'s argument): an int >= 0; returns it as an int.

    Raises:
        StreamingConfigError: ``epoch must be an int >= 0, got -1`` (``option="epoch"``, a ValueError).
    """
    require("epoch", epoch, is_int(epoch) and epoch >= 0, "an int >= 0")
    return int(epoch)


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
#: plausible maxima of the int options, shown in their rules (a larger value is a typo or hostile,
#: and would overflow a C long, or a count, later): episodes, anchors, batches, frames, partitions
MAX_COUNT = 2**20
#: threads of one kind per DataLoader worker (decode threads, FFmpeg threads per decoder)
MAX_THREADS = 256
#: seeds are 64-bit
MAX_SEED = 2**64 - 1
#: the longest timeout, seconds (a week; Python's thread waits refuse about 9.2e9 s with OverflowError)
MAX_SECONDS = 7 * 24 * 3600.0
DEVICE_RE = re.compile(r"cpu|cuda(:[0-9]+)?", re.ASCII)


def int_in(lo: int, hi: int, none_ok: bool = False) -> Callable[[Any], bool]:
    """The rule "an int in [lo, hi]" (and None when ``none_ok``)."""
    return lambda v: (none_ok and v is None) or (is_int(v) and lo <= v <= hi)


def is_sequence(v: Any) -> bool:
    """``v`` is a collection of items where a sequence is meant: a list, tuple, range, numpy array,
    set or one-shot iterator — never a ``str``, ``bytes``, ``bytearray``, ``memoryview`` (iterating
    one gives characters or byte values: ``b"1"`` would be episode 49) or a mapping (its keys)."""
    return isinstance(v, abc.Iterable) and not isinstance(v, (str, bytes, bytearray, memoryview, abc.Mapping))


def path_ok(v: Any) -> bool:
    """None, a ``str`` path or URL, or an ``os.PathLike`` whose path is a ``str`` (not ``bytes``)."""
    import os

    if v is None or isinstance(v, str):
        return True
    if not hasattr(v, "__fspath__"):
        return False
    try:
        return isinstance(os.fspath(v), str)
    except Exception:  # noqa: BLE001 - a PathLike whose __fspath__ fails is no path
        return False


def episodes_ok(v: Any) -> bool:
    if v is None:
        return True
    if not is_sequence(v):
        return False
    try:
        eps = list(v)
    except TypeError:  # a 0-d numpy array
        return False
    return len(eps) > 0 and all(is_int(e) and 0 <= e < 2**63 for e in eps)


def camera_keys_ok(v: Any) -> bool:
    return v is None or (is_sequence(v) and all(isinstance(k, str) for k in v))


def check_tolerance(tolerance_s: float, fps: float, where: str = "") -> None:
    """The rule of ``tolerance_s`` once the dataset's ``fps`` is known: below half a frame interval
    (``0.5 / fps`` seconds), else a frame could match two timestamps.

    Raises:
        StreamingConfigError: ``tolerance_s >= 0.5 / fps`` (names the option, the value, the fps
            and the bound; ``where`` first, e.g. the dataset).
    """
    if not fps > 0:  # the metadata's own rule refuses it
        return
    bound = 0.5 / float(fps)
    if not tolerance_s < bound:
        raise StreamingConfigError(
            f"{where + ': ' if where else ''}tolerance_s must be below half a frame interval "
            f"(0.5 / fps = {bound:g} s at {fps:g} fps), got {tolerance_s!r}",
            option="tolerance_s",
            value=tolerance_s,
        )
