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
from dataclasses import dataclass, field

__all__ = ["MemoryReading", "MemorySampler", "read_memory"]


@dataclass(frozen=True)
class MemoryReading:
    """One process's memory at one instant."""

    pid: int
    """Process id."""
    rss_bytes: int
    """Resident set size, bytes (shared pages counted fully)."""
    pss_bytes: int
    """Proportional set size, bytes (shared pages divided by their number of sharers)."""


def read_memory(pid: int) -> MemoryReading | None:
    """RSS and PSS of ``pid`` from ``/proc/<pid>/smaps_rollup``.

    Returns:
        MemoryReading, or None when the process is gone or the file is unreadable (not Linux,
        kernel < 4.14, other user's process).
    """
    try:
        with open(f"/proc/{int(pid)}/smaps_rollup", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rss = pss = None
    for line in text.splitlines():
        if line.startswith("Rss:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("Pss:"):
            pss = int(line.split()[1]) * 1024
    if rss is None or pss is None:
        return None
    return MemoryReading(int(pid), rss, pss)


@dataclass
class _Series:
    t_s: list[float] = field(default_factory=list)
    rss_sum_bytes: list[int] = field(default_factory=list)
    pss_sum_bytes: list[int] = field(default_factory=list)
    peak_rss_bytes: dict[int, int] = field(default_factory=dict)
    peak_pss_bytes: dict[int, int] = field(default_factory=dict)
    role: dict[int, str] = field(default_factory=dict)


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
        self._s = _Series()
        self._lock = threading.Lock()
        self.own_cpu_s = 0.0
        """CPU seconds the timer thread has used so far (the sampler's own cost: each reading walks
        page tables), to subtract from the process's CPU time over a measured interval."""

    def sample(self, *, unless_newer_than_s: float | None = None) -> None:
        """Take one sample now (also called by the thread).

        Args:
            unless_newer_than_s: skip when the last reading is younger than this many seconds
                (each reading costs a few ms of CPU per process: ``smaps_rollup`` walks the page
                tables), e.g. one reading per batch, never more often than the timer.
        """
        if unless_newer_than_s is not None:
            with self._lock:
                last = self._s.t_s[-1] if self._s.t_s else None
            if last is not None and time.perf_counter() - self.t0 - last < unless_newer_than_s:
                return
        readings = []
        for pid, role in dict(self._pids()).items():
            r = read_memory(pid)
            if r is not None:
                readings.append((r, role))
        if not readings:
            return
        with self._lock:  # called by the timer thread and at the caller's deterministic points
            s = self._s
            s.t_s.append(time.perf_counter() - self.t0)
            s.rss_sum_bytes.append(sum(r.rss_bytes for r, _ in readings))
            s.pss_sum_bytes.append(sum(r.pss_bytes for r, _ in readings))
            for r, role in readings:
                s.role[r.pid] = role
                s.peak_rss_bytes[r.pid] = max(s.peak_rss_bytes.get(r.pid, 0), r.rss_bytes)
                s.peak_pss_bytes[r.pid] = max(s.peak_pss_bytes.get(r.pid, 0), r.pss_bytes)

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
            s = self._s
            procs = [
                {
                    "pid": pid,
                    "role": s.role[pid],
                    "peak_rss_bytes": s.peak_rss_bytes[pid],
                    "peak_pss_bytes": s.peak_pss_bytes[pid],
                }
                for pid in sorted(s.role, key=lambda p: (s.role[p] != "main", s.role[p], p))
            ]
            return {
                "available": bool(s.t_s),
                "processes": procs,
                "peak_rss_sum_bytes": max(s.rss_sum_bytes, default=0),
                "peak_pss_sum_bytes": max(s.pss_sum_bytes, default=0),
                "series": {
                    "t_s": list(s.t_s),
                    "rss_sum_bytes": list(s.rss_sum_bytes),
                    "pss_sum_bytes": list(s.pss_sum_bytes),
                },
            }
