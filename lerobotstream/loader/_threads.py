"""``StreamLoader``'s threads mode, and the stall watch both modes time their waits with.

With ``num_workers=N`` the stream is cut into the shards N ``DataLoader`` workers would get and
their batches are taken in the DataLoader's turns; with 0, the one in-process stream.

:class:`StallWatch` times one wait at a time: an error past ``timeout``, one warning without one.
Processes mode checks between waits on the worker's pipe (:meth:`~StallWatch.check`); threads
mode waits inside the shard's pipeline, so :meth:`~StallWatch.watch` checks on a helper thread
and aborts the stalled shard (its waits then raise).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data._utils.pin_memory import pin_memory

from lerobotstream.errors import LoaderWorkerError
from lerobotstream.loader._batch import BatchSlots, collate_items, is_known_collate, item_chunks
from lerobotstream.planner._turns import take_turns

__all__ = ["STALL_WARNING_S", "StallWatch", "shard_batches", "thread_batches", "watched"]

log = logging.getLogger("lerobotstream.loader")

#: without a timeout, a shard or worker that has delivered no batch for this long is named in one
#: warning (seconds; ``StreamLoader.stall_warning_s`` sets it per loader)
STALL_WARNING_S = 60.0


class StallWatch:
    """The current wait of one loader iterator: it may last ``timeout`` seconds (0: no limit, the
    DataLoader's default) and is named in a warning after ``warn_after_s`` (once per shard or
    worker); ``clock``: monotonic seconds."""

    def __init__(
        self, timeout: float = 0.0, warn_after_s: float = STALL_WARNING_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.timeout = float(timeout or 0.0)
        self.warn_after_s = float(warn_after_s)
        self.clock = clock
        self._cond = threading.Condition(threading.RLock())
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
            if self._wait is None:
                return None
            what, _, _, since = self._wait
            waited = self.clock() - since
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
            if self._wait is None:
                return None
            what, worker, pid, since = self._wait
            waited = self.clock() - since
            if self.timeout > 0 and waited >= self.timeout:
                self.expired = LoaderWorkerError(
                    f"StreamLoader {what} (pid {pid}) delivered no batch for {waited:.1f} s (timeout={self.timeout:g} "
                    "s): it is stalled (a stopped or overloaded process, a hung read or decode); the loader stops",
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

    def watch(self, on_timeout: Callable[[int | None], None]) -> threading.Thread:
        """Check every wait on a daemon thread (started here) until :meth:`close`; past the timeout
        it calls ``on_timeout(worker)`` once for that wait (outside the watch's lock)."""

        def run() -> None:
            while True:
                with self._cond:
                    while not self._closed:
                        r = self.remaining()
                        if r is None:
                            self._cond.wait()  # woken by begin, end and close
                        elif r > 0:
                            self._cond.wait(r)
                        else:
                            err = self.check()
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


_JOIN_S = 10.0


def shard_batches(
    items: Iterator[dict[str, Any]], slots: BatchSlots, batch_size: int, drop_last: bool, collate_fn: Callable
) -> Iterator[tuple[Any, int]]:
    """``(batch, number of samples)`` of one shard's items, in order (a short last batch unless
    ``drop_last``)."""
    for b, chunk in item_chunks(items, batch_size, drop_last):
        tensors = slots.take(b)
        batch = collate_items(chunk, collate_fn, tensors)
        n = len(chunk)
        del chunk
        slots.recycle(tensors)  # the batch holds views of them now: reused once the caller lets go
        del tensors
        yield batch, n
        del batch


def watched(batches: Iterator[Any], watch: StallWatch, what: str, worker: int | None) -> Iterator[Any]:
    """``batches`` with each ``next`` timed by ``watch`` (a wait on shard ``what``): past the timeout
    the watch's :class:`~lerobotstream.errors.LoaderWorkerError` is raised (from the aborted wait's error)."""
    pid = os.getpid()
    while True:
        watch.begin(what, worker, pid)
        try:
            x = next(batches)
        except StopIteration:
            return
        except BaseException as exc:
            if watch.expired is not None:
                raise watch.expired from exc
            raise
        finally:
            watch.end()
        if watch.expired is not None:  # the wait ended on its own, after the timeout
            raise watch.expired
        yield x


def thread_batches(
    dataset: Any,
    loader: Any,
    epoch: int,
    samples: int,
    *,
    collate_fn: Callable,
    pin: bool,
    wrapper: Any,
    watch: StallWatch,
    opened: list[Any],
) -> Iterator[tuple[Any, int]]:
    """Every batch of the stream from (``epoch``, ``samples``) in the DataLoader's order, made in
    this process (``loader``: the ``LoaderSettings`` handed to each shard), each shard's waits
    timed by ``watch``; the shards are appended to ``opened`` as they open (for their counters)."""
    num_workers, batch_size, drop_last = loader.num_workers, loader.batch_size, loader.drop_last
    shards = [(None, 0)] if num_workers == 0 else [(p, num_workers) for p in range(num_workers)]
    sources = []
    watcher = watch.watch(lambda w: opened[0 if w is None else w].abort())
    try:
        for wid, nw in shards:
            slots = BatchSlots(batch_size, pin=pin, bulk=is_known_collate(collate_fn), recycle=True)
            shard = dataset.shard(wid, loader, epoch=epoch, samples=samples, in_process=True, slots=slots)
            opened.append(shard)
            items = (
                shard.items
                if wrapper is None
                else wrapper.wrap_items(shard.items, -1 if wid is None else wid, nw, shard.source_stats)
            )
            what = "stream (threads mode)" if wid is None else f"shard {wid} of {nw} (threads mode)"
            sources.append(watched(shard_batches(items, slots, batch_size, drop_last, collate_fn), watch, what, wid))
        for batch, n in take_turns(sources):
            yield (pin_memory(batch) if pin else batch), n  # the DataLoader's pinning (pinned tensors kept)
    finally:
        watch.close()
        for src in sources:
            src.close()
        for shard in opened:  # joins each pipeline's threads and closes its cache
            shard.close()
        if not watch.aborting:  # (aborting, it waits for the stalled shard's reads: a daemon, left to end)
            watcher.join(_JOIN_S)
