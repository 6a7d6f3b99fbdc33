"""Stalls of a ``StreamLoader`` iterator: how long the shard (threads mode) or worker (processes
mode) the loader waits on has delivered no batch, torch DataLoader's ``timeout`` past which that is
an error, and the one warning when there is no timeout.

:class:`StallWatch` times one wait at a time (the loader waits on one shard or worker at a time,
in the batch turns): :meth:`~StallWatch.begin` when the wait starts, :meth:`~StallWatch.end` when
a batch (or any message) arrives. :meth:`~StallWatch.check` logs the warning (once per shard or
worker and iterator) and returns the :class:`~lerobotstream.errors.LoaderWorkerError` past the
timeout; :meth:`~StallWatch.remaining` bounds the caller's wait until the next check is due.
processes mode checks on its copy-out thread, between waits on the worker's pipe; threads mode
waits inside the shard's pipeline on the iterating thread, so :meth:`~StallWatch.watch` checks on
a helper thread and, past the timeout, calls back to abort the stalled shard (its waits then raise).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from lerobotstream.errors import LoaderWorkerError

__all__ = ["STALL_WARNING_S", "StallWatch"]

log = logging.getLogger("lerobotstream.loader")

#: without a timeout, a shard or worker that has delivered no batch for this long is named in one
#: warning (seconds; ``StreamLoader.stall_warning_s`` sets it per loader)
STALL_WARNING_S = 60.0


class StallWatch:
    """The current wait of one loader iterator (see the module doc).

    Args:
        timeout (float): seconds a wait may last (0: no limit, the DataLoader's default).
        warn_after_s (float): seconds after which a wait is named in a warning, once per shard or
            worker.
        clock: seconds, monotonic (``time.monotonic``).
    """

    def __init__(
        self, timeout: float = 0.0, warn_after_s: float = STALL_WARNING_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.timeout = float(timeout or 0.0)
        self.warn_after_s = float(warn_after_s)
        self.clock = clock
        self._cond = threading.Condition(threading.Lock())
        self._wait: tuple[str, int | None, int, float] | None = None  # (what, worker, pid, since)
        self._warned: set[str] = set()
        self._closed = False
        #: the error of the wait that passed the timeout (None until one did)
        self.expired: LoaderWorkerError | None = None
        #: the :meth:`watch` thread is running its ``on_timeout`` (it may wait for a hung read)
        self.aborting = False

    def begin(self, what: str, worker: int | None, pid: int) -> None:
        """A wait on ``what`` (``"worker 1"``, ``"shard 0 of 2"``; DataLoader worker id ``worker``,
        process ``pid``) starts now."""
        with self._cond:
            self._wait = (what, worker, int(pid), self.clock())
            self._cond.notify_all()

    def end(self) -> None:
        """The current wait ended (something arrived, or the wait was left)."""
        with self._cond:
            self._wait = None
            self._cond.notify_all()

    def remaining(self) -> float | None:
        """Seconds until the current wait's warning or timeout is due (0 when it is), None when
        nothing is due (no wait, or warned already and no timeout)."""
        with self._cond:
            return self._remaining()

    def _waited(self) -> tuple[str, int | None, int, float] | None:
        """``(what, worker, pid, seconds waited)`` of the current wait, or None."""
        if self._wait is None:
            return None
        what, worker, pid, since = self._wait
        return what, worker, pid, self.clock() - since

    def _remaining(self) -> float | None:
        current = self._waited()
        if current is None:
            return None
        what, _, _, waited = current
        due = [self.timeout - waited] if self.timeout > 0 else []
        if what not in self._warned:
            due.append(self.warn_after_s - waited)
        return max(0.0, min(due)) if due else None

    def check(self) -> LoaderWorkerError | None:
        """The current wait's :class:`LoaderWorkerError` once it lasted the timeout (naming the
        shard or worker, its PID and the seconds it stalled; fields ``worker``, ``pid``,
        ``stalled_s``), also kept as :attr:`expired`; else None, after logging the warning if the
        wait lasted ``warn_after_s`` (once per shard or worker)."""
        with self._cond:
            return self._check()

    def _check(self) -> LoaderWorkerError | None:
        current = self._waited()
        if current is None:
            return None
        what, worker, pid, waited = current
        if self.timeout > 0 and waited >= self.timeout:
            self.expired = LoaderWorkerError(
                f"StreamLoader {what} (pid {pid}) delivered no batch for {waited:.1f} s (timeout={self.timeout:g} s): "
                "it is stalled (a stopped or overloaded process, a hung read or decode); the loader stops",
                worker=worker,
                pid=pid,
                stalled_s=waited,
            )
            return self.expired
        if what not in self._warned and waited >= self.warn_after_s:
            self._warned.add(what)
            log.warning(
                "StreamLoader %s (pid %d) has delivered no batch for %.1f s (no timeout: still waiting; "
                "StreamLoader(timeout=...) or --dataset.streaming_loader_timeout_s makes this an error)",
                what,
                pid,
                waited,
            )
        return None

    # --- threads mode: checks on a helper thread --------------------------------------------------
    def watch(self, on_timeout: Callable[[int | None], None]) -> threading.Thread:
        """Check every wait on a daemon thread (started here) until :meth:`close`; past the timeout
        it calls ``on_timeout(worker)`` once for that wait (outside the watch's lock)."""

        def run() -> None:
            while True:
                with self._cond:
                    while not self._closed:
                        r = self._remaining()
                        if r is None:
                            self._cond.wait()  # woken by begin, end and close
                        elif r > 0:
                            self._cond.wait(r)
                        else:
                            err = self._check()
                            if err is not None:
                                worker = self._wait[1]
                                self._wait = None  # this wait is over for the watch
                                break
                    else:
                        return
                    self.aborting = True
                try:
                    on_timeout(worker)
                finally:
                    self.aborting = False

        thread = threading.Thread(target=run, name="lrs-loader-stall-watch", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        """Stop the :meth:`watch` thread (idempotent)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
