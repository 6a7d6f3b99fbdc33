"""Process memory from ``/proc/<pid>/smaps_rollup``: RSS and PSS, sampled over time for a process tree.

PSS (proportional set size) charges each shared page to the ``n`` processes mapping it as
``1/n`` page, so summing PSS over a DataLoader's main process and its workers counts the shared
mmap index, the shared libraries and copy-on-write pages of the parent **once**; summing RSS
counts them once per process. Linux only; elsewhere every reading is ``None``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["MemoryReading", "MemorySampler", "read_memory"]


class MemoryReading(NamedTuple):
    """One process's memory at one instant, bytes: RSS (shared pages counted fully) and PSS
    (shared pages divided by their number of sharers)."""

    pid: int
    rss_bytes: int
    pss_bytes: int


def read_memory(pid: int) -> MemoryReading | None:
    """RSS and PSS of ``pid`` from ``/proc/<pid>/smaps_rollup``; None when the process is gone or
    the file is unreadable (not Linux, kernel < 4.14, other user's process)."""
    try:
        with open(f"/proc/{int(pid)}/smaps_rollup", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    kb = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in text.splitlines() if line[:4] in ("Rss:", "Pss:")}
    return MemoryReading(int(pid), kb["Rss"], kb["Pss"]) if len(kb) == 2 else None


class MemorySampler:
    """Background thread sampling RSS/PSS of the main process and a changing set of worker pids.

    Args:
        pids: callable returning ``{pid: role}`` for the processes to sample now (roles such as
            ``"main"``, ``"worker 0"``); called at every tick.
        interval_s: seconds between timer samples (default 0.1); call :meth:`sample` at the
            points that must be measured whatever the timer does (a run can end between ticks).
        t0: ``time.perf_counter()`` origin of the time axis.

    Use as a context manager; :meth:`summary` gives per-process peaks and the time series of the
    summed RSS and PSS (the sum of PSS at one instant is the tree's true footprint).
    """

    def __init__(self, pids: Callable[[], dict[int, str]], *, interval_s: float = 0.1, t0: float | None = None) -> None:
        self._pids = pids
        self.interval_s = float(interval_s)
        self.t0 = time.perf_counter() if t0 is None else t0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._t_s: list[float] = []
        self._rss_sum: list[int] = []
        self._pss_sum: list[int] = []
        self._peaks: dict[int, tuple[str, int, int]] = {}  # pid -> (role, peak RSS, peak PSS)
        self.own_cpu_s = 0.0
        """CPU seconds the timer thread has used so far (each reading walks page tables), to
        subtract from the process's CPU time over a measured interval."""

    def sample(self, *, unless_newer_than_s: float | None = None) -> None:
        """Take one sample now (also called by the thread); ``unless_newer_than_s``: skip when the
        last reading is younger than this many seconds (a reading costs a few ms of CPU per process)."""
        if unless_newer_than_s is not None:
            with self._lock:
                last = self._t_s[-1] if self._t_s else None
            if last is not None and time.perf_counter() - self.t0 - last < unless_newer_than_s:
                return
        readings = [(r, role) for pid, role in dict(self._pids()).items() if (r := read_memory(pid)) is not None]
        if not readings:
            return
        with self._lock:  # called by the timer thread and at the caller's deterministic points
            self._t_s.append(time.perf_counter() - self.t0)
            self._rss_sum.append(sum(r.rss_bytes for r, _ in readings))
            self._pss_sum.append(sum(r.pss_bytes for r, _ in readings))
            for r, role in readings:
                _, rss, pss = self._peaks.get(r.pid, (role, 0, 0))
                self._peaks[r.pid] = (role, max(rss, r.rss_bytes), max(pss, r.pss_bytes))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()
            self.own_cpu_s = time.thread_time()

    def __enter__(self) -> MemorySampler:
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="lrs-profile-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self) -> dict:
        """``processes`` (pid, role, peak RSS/PSS bytes), ``peak_pss_sum_bytes``,
        ``peak_rss_sum_bytes`` and the series ``t_s``, ``rss_sum_bytes``, ``pss_sum_bytes``."""
        with self._lock:
            peaks = sorted(self._peaks.items(), key=lambda kv: (kv[1][0] != "main", kv[1][0], kv[0]))
            return {
                "available": bool(self._t_s),
                "processes": [
                    {"pid": pid, "role": role, "peak_rss_bytes": rss, "peak_pss_bytes": pss}
                    for pid, (role, rss, pss) in peaks
                ],
                "peak_rss_sum_bytes": max(self._rss_sum, default=0),
                "peak_pss_sum_bytes": max(self._pss_sum, default=0),
                "series": {
                    "t_s": list(self._t_s),
                    "rss_sum_bytes": list(self._rss_sum),
                    "pss_sum_bytes": list(self._pss_sum),
                },
            }
