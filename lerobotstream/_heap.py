"""Give free heap pages back to the OS once too many are kept (glibc ``malloc_trim``).

Decoded frames are large, short-lived buffers allocated on the pipeline threads. glibc serves each
thread from its own malloc arena and, once its dynamic mmap threshold has risen past a frame
batch, from the arenas rather than ``mmap``; ``free()`` returns an arena's memory only from the top
of its heap. Each epoch's new threads reuse the last epoch's arenas, so free-but-resident memory
grows over the epochs (RSS 521 -> 1,293 MiB in 12 epochs with 120 MiB in use: docs/performance.md,
"Memory over epochs").

:func:`trim` (called when an episode is freed and when an iterator ends) estimates that memory
(RSS minus malloc's in-use bytes, ``mallinfo2``, minus the non-heap RSS measured after the last
trim) and calls ``malloc_trim(0)`` when it exceeds :data:`TRIM_SLACK_BYTES` (trimming costs CPU).

Process-wide and thread-safe. A no-op without ``malloc_trim``/``mallinfo2`` (not glibc >= 2.33) or
with ``LEROBOTSTREAM_MALLOC_TRIM=0``; ``LEROBOTSTREAM_MALLOC_TRIM_MIB`` sets the slack (MiB). Both
are read at import.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
import time

_DEFAULT_SLACK_MIB = 256


def _slack_bytes() -> int:
    """:data:`TRIM_SLACK_BYTES` from the environment (0: trimming disabled)."""
    if os.environ.get("LEROBOTSTREAM_MALLOC_TRIM", "1").strip().lower() in ("0", "false", "no", "off"):
        return 0
    try:
        mib = float(os.environ.get("LEROBOTSTREAM_MALLOC_TRIM_MIB", _DEFAULT_SLACK_MIB))
    except ValueError:
        mib = _DEFAULT_SLACK_MIB
    return max(1, int(mib * (1 << 20)))


#: free heap memory kept resident that triggers a trim (bytes); 0: never trim
TRIM_SLACK_BYTES = _slack_bytes()


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


def _load():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim_fn, info_fn = libc.malloc_trim, libc.mallinfo2
        open("/proc/self/statm").close()
    except (OSError, AttributeError):
        return None, None
    trim_fn.argtypes, trim_fn.restype = [ctypes.c_size_t], ctypes.c_int
    info_fn.argtypes, info_fn.restype = [], _MallInfo2
    return trim_fn, info_fn


_malloc_trim, _mallinfo2 = _load() if TRIM_SLACK_BYTES > 0 else (None, None)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_lock = threading.Lock()
_not_heap: int | None = None  # RSS minus malloc's in-use bytes right after the last trim
_pid = os.getpid()  # _not_heap belongs to this process (a forked child measures its own)
_trims = 0
_checks = 0
_trim_s = 0.0


def available() -> bool:
    """True when :func:`trim` can trim (glibc >= 2.33 on Linux, not disabled by the environment)."""
    return _malloc_trim is not None and _mallinfo2 is not None


def _rss_bytes(_open=open) -> int:  # ``open`` bound at import: builtins go first at interpreter exit
    with _open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def _in_use_bytes() -> int:
    m = _mallinfo2()
    return int(m.uordblks) + int(m.hblkhd)


def kept_free_bytes() -> int | None:
    """Estimated free heap memory held resident since the last trim (bytes; None before the
    first trim or when unavailable)."""
    if not available() or _not_heap is None:
        return None
    return _rss_bytes() - _in_use_bytes() - _not_heap


def trim(force: bool = False) -> bool:
    """``malloc_trim(0)`` when :func:`kept_free_bytes` exceeds :data:`TRIM_SLACK_BYTES` (or at the
    first call, or when ``force``); True when it trimmed. A concurrent call returns False at once.
    Never raises; does nothing while the interpreter exits."""
    global _not_heap, _pid, _trims, _checks, _trim_s
    if not available() or sys.is_finalizing() or not _lock.acquire(blocking=False):
        return False
    try:
        if _pid != os.getpid():
            _pid, _not_heap = os.getpid(), None
        _checks += 1
        in_use = _in_use_bytes()
        if not force and _not_heap is not None and _rss_bytes() - in_use - _not_heap < TRIM_SLACK_BYTES:
            return False
        t0 = time.perf_counter()
        _malloc_trim(0)
        _trim_s += time.perf_counter() - t0
        _trims += 1
        _not_heap = _rss_bytes() - in_use
        return True
    except OSError:
        return False
    finally:
        _lock.release()


def stats() -> dict[str, float]:
    """``trims`` (int) and ``checks`` (int, calls of :func:`trim`) made by this process,
    ``trim_s`` (float, seconds inside ``malloc_trim``), ``available`` (bool)."""
    return {"trims": _trims, "checks": _checks, "trim_s": _trim_s, "available": available()}
