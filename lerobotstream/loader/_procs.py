"""``StreamLoader``'s processes mode: worker processes over a ring of shared-memory slots.

Each worker process (``multiprocessing`` context of the caller's choice) iterates its shard of the
stream (``StreamCore.shard(p, N, ...)``: the shard a ``DataLoader`` worker p of N gets, with
the DataLoader's worker seeds and ``get_worker_info()``) and hands its batches over through its
**ring** (:class:`~lerobotstream.loader._ring.WorkerRing`): ``prefetch_batches`` shared-memory
storages made once, at the first batch (sized by it), and sent to the training process once
(``torch.multiprocessing``'s descriptor passing; the segment is unlinked at creation, so nothing is
left under ``/dev/shm`` even when a process is killed). From the ring's first batch on, batch b
uses slot ``b % prefetch_batches``; with ``default_collate`` or ``lerobot_collate_fn`` its frames
are written by the C de-interleave **straight into the slot**
(:class:`~lerobotstream.loader._ring.RingSlots`: the batch's first frame waits, on the pipeline's
assembly thread, for the slot's previous batch to be returned), and so are the small keys
(``BatchSlots(bulk=True)``): nothing is left to copy in when the batch is sent; with another collate each batch is assembled into fresh tensors
(:class:`~lerobotstream.loader._batch.BatchSlots`) and copied into its slot. Per batch only a small
message crosses: the slot, each tensor key's dtype, shape and offset, and the other keys' values
(strings, lists) pickled. The worker's return thread reads the slot returns (and the stop) from its
pipe; a stop wakes every slot wait (``RingStopped``), so a shutdown never hangs on one.

In the training process one background thread takes the workers' batches in the DataLoader's
turns, copies each out of its slot (into pinned memory with ``pin_memory=True``) and hands the
slot back to its worker explicitly (a message on the worker's pipe): the batch the caller gets
owns its memory, so a batch the caller keeps is never overwritten. A batch that does not fit the
ring's layout (a key the first batch lacked, or larger than it) is pickled through the pipe
instead (its slot-resident tensors cloned first; correct, slower).

Shutdown (end of the iterator, ``break``, an exception, ``KeyboardInterrupt``, the iterator
garbage-collected): the thread is stopped and joined, every worker is told to stop and joined
(terminated, then killed, if it does not exit), every pipe closed. A worker that dies raises
:class:`~lerobotstream.errors.LoaderWorkerError` naming the worker, its PID and exit code; an
exception in a worker is re-raised in the training process at that worker's turn. The copy-out
thread times each wait on a worker (:class:`~lerobotstream.loader._stall.StallWatch`): past
``timeout`` a ``LoaderWorkerError`` names the stalled worker, its PID and how long it stalled (the
worker is killed at shutdown, without the graceful wait); without one, a stall is named in one
warning. Every other wait of the training process is bounded (joins) or ends with a report.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import signal
import threading
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from typing import Any

import torch

from lerobotstream.errors import LoaderWorkerError
from lerobotstream.loader._batch import BatchSlots, collate_items, is_known_collate, item_chunks
from lerobotstream.loader._ring import RingSlots, RingStopped, WorkerRing, read_returns, slot_view
from lerobotstream.loader._stall import StallWatch
from lerobotstream.planner._turns import take_turns

__all__ = ["ProcessBatches"]

log = logging.getLogger("lerobotstream.loader")

_JOIN_S = 10.0
#: modules a ``forkserver`` imports once before it forks workers (torch, torchcodec the lean way,
#: the stream's modules): each worker then forks with them loaded
PRELOAD = ["lerobotstream.loader._startup_preload"]


def _worker_main(
    conn, dataset, wid: int, loader: Any, base_seed: int, epoch: int, samples: int, collate_fn: Callable, ring_size: int
) -> None:
    """A worker process: its shard's batches into the ring, made with ``loader``'s settings (a
    ``LoaderSettings``, handed to the shard; see the module doc)."""
    import random

    from torch.utils.data._utils import worker as dl_worker

    from lerobotstream.decode._lean import import_decoder_lean

    nw, batch_size, drop_last = loader.num_workers, loader.batch_size, loader.drop_last
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the training process handles ^C and stops us
    import_decoder_lean()  # torchcodec without torch._dynamo (spawn/forkserver: a fresh import)
    torch.set_num_threads(1)  # as DataLoader workers do
    seed = base_seed + wid
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(dl_worker._generate_state(base_seed, wid))
    except ImportError:
        pass
    dl_worker._worker_info = dl_worker.WorkerInfo(id=wid, num_workers=nw, seed=seed, dataset=dataset)
    wrapper = None
    if hasattr(dataset, "wrap_items"):  # a wrapper (``StreamLoader``'s ``dataset`` doc)
        wrapper, dataset = dataset, dataset.dataset
    ring = WorkerRing(ring_size)
    told_to_stop = threading.Event()  # None from the training process, or its end of the pipe
    threading.Thread(target=read_returns, args=(conn, ring, told_to_stop), name="lrs-ring-returns", daemon=True).start()
    # frames straight into the ring's slots with the collates whose batches are known (the frame
    # keys' batch is the slot's rows); any other collate gets fresh per-batch tensors (its batch may
    # hold the items' values themselves, which must not be views of a slot)
    direct = is_known_collate(collate_fn)
    slots = RingSlots(batch_size, ring) if direct else BatchSlots(batch_size)
    shard = None
    try:
        shard = dataset.shard(wid, loader, epoch=epoch, samples=samples, in_process=False, slots=slots)
        items = shard.items if wrapper is None else wrapper.wrap_items(shard.items, wid, nw, shard.source_stats)
        first = None  # the batch that made the ring
        for b, chunk in item_chunks(items, batch_size, drop_last):
            tensors = slots.take(b)
            slot = slots.take_slot(b) if direct else None
            batch = collate_items(chunk, collate_fn, tensors)
            n = len(chunk)
            del chunk, tensors
            if isinstance(batch, dict) and not ring.ready:
                first = b
                conn.send(("ring", ring.create(batch, b)))
            entries = ring.entries(batch) if isinstance(batch, dict) and ring.ready else None
            if entries is None:  # not a dict, or not the ring's layout: pickled through the pipe
                if first is not None:
                    batch = ring.detach(batch)
                    if slot is not None:
                        ring.release(slot)
                    else:
                        ring.skip(b)
                conn.send(("pickled", batch, n))
            else:
                if slot is None:
                    slot = ring.acquire(b)  # the slot's previous batch copied out and returned
                ring.write(slot, batch, entries)  # the keys not written in place (none, usually)
                conn.send(("batch", slot, entries, n))
            del batch
        _close(shard, ring)
        shard = None
        conn.send(("end",))
    except (BrokenPipeError, ConnectionResetError, RingStopped):
        return
    except BaseException as exc:  # noqa: BLE001 - re-raised in the training process
        try:
            conn.send(("error", _picklable(exc)))
        except Exception:  # noqa: BLE001
            return
    finally:
        if shard is not None:
            _close(shard, ring)
    # stay until the training process says stop (it may still be fetching the ring's descriptors)
    told_to_stop.wait()


def _close(shard: Any, ring: WorkerRing) -> None:
    """Stop the ring's waits (items assembled ahead of a pass limit or an error may wait for a
    slot no batch will return), then join the shard's pipeline threads."""
    ring.stop()
    shard.close()


def _picklable(exc: BaseException) -> BaseException:
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        exc.__traceback_text__ = traceback.format_exc()
        return exc
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")


class ProcessBatches:
    """The worker processes, the copy-out thread and the batches of one ``StreamLoader`` iterator.

    Iterate it for ``(batch, number of samples)`` in the DataLoader's order; :meth:`close` (also
    called at the end, on an exception and when garbage-collected) stops everything.
    """

    _END = object()

    def __init__(
        self,
        dataset: Any,
        loader: Any,
        epoch: int,
        samples: int,
        *,
        collate_fn: Callable,
        pin: bool,
        ring_size: int,
        context: Any = None,
        base_seed: int | None = None,
        watch: StallWatch | None = None,
    ) -> None:
        num_workers = loader.num_workers
        if isinstance(context, str) or context is None:
            context = multiprocessing.get_context(context)
        if context.get_start_method() == "forkserver":  # effective when its server has not started yet
            context.set_forkserver_preload(PRELOAD)
        self.context = context
        self.pin = pin
        self.num_workers = num_workers
        self._stop = threading.Event()
        self._out: queue.Queue = queue.Queue(maxsize=max(1, ring_size))
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)
        self._locks = [threading.Lock() for _ in range(num_workers)]
        self._rings: list[list[torch.UntypedStorage]] = [[] for _ in range(num_workers)]
        self.procs = []
        self.conns = []
        self._closed = False
        self._watch = watch or StallWatch()
        self._stalled: set[int] = set()  # workers past the timeout: killed at close, not waited for
        if base_seed is None:
            base_seed = int(torch.empty((), dtype=torch.int64).random_().item())
        try:
            for w in range(num_workers):
                parent, child = context.Pipe(duplex=True)
                p = context.Process(
                    target=_worker_main,
                    name=f"lrs-loader-worker-{w}",
                    daemon=True,
                    args=(child, dataset, w, loader, base_seed, epoch, samples, collate_fn, ring_size),
                )
                p.start()
                child.close()
                self.procs.append(p)
                self.conns.append(parent)
        except BaseException:
            self.close()
            raise
        self._thread = threading.Thread(target=self._run, name="lrs-loader-copy", daemon=True)
        self._thread.start()

    # --- the copy-out thread ------------------------------------------------------------------------
    def _recv(self, w: int) -> Any:
        conn, proc = self.conns[w], self.procs[w]
        self._watch.begin(f"worker {w}", w, proc.pid)
        try:
            return self._recv_timed(w, conn, proc)
        finally:
            self._watch.end()

    def _recv_timed(self, w: int, conn: Any, proc: Any) -> Any:
        while True:
            if self._stop.is_set():
                raise _Stopped
            if conn.poll():
                try:
                    return conn.recv()
                except (EOFError, OSError):
                    # the pipe closed, or a tensor's descriptor could not be fetched from a worker
                    # that died meanwhile (ConnectionResetError): report how the worker ended
                    proc.join(_JOIN_S)
                    if proc.exitcode is None:
                        raise
            elif proc.exitcode is None:
                stalled = self._watch.check()  # the warning, once; the error past the timeout
                if stalled is not None:
                    self._stalled.add(w)
                    raise stalled
                # until something arrives, the worker ends, the loader stops or a check is due
                wait([conn, proc.sentinel, self._wake_r], self._watch.remaining())
                continue
            proc.join(0)
            code = proc.exitcode
            how = (
                f"was killed by signal {signal.Signals(-code).name}"
                if code is not None and code < 0
                else f"exited with code {code}"
            )
            raise LoaderWorkerError(
                f"StreamLoader worker {w} (pid {proc.pid}) {how} before its shard ended",
                worker=w,
                pid=proc.pid,
                exitcode=code,
            )

    def _send(self, w: int, msg: Any) -> None:
        with self._locks[w]:
            try:
                self.conns[w].send(msg)
            except (OSError, ValueError):
                pass  # the worker is gone: its end is reported by _recv

    def _copy_out(self, w: int, slot: int, entries: list) -> dict[str, Any]:
        storage = self._rings[w][slot]
        out: dict[str, Any] = {}
        for key, e in entries:
            if e[0] == "t":
                dst = torch.empty(e[2], dtype=e[1], pin_memory=self.pin)
                dst.copy_(slot_view(storage, e[1], e[2], e[3]))
                out[key] = dst
            else:
                out[key] = e[1]
        return out

    def _put(self, x: Any) -> None:
        while not self._stop.is_set():
            try:
                self._out.put(x, timeout=0.2)
                return
            except queue.Full:
                continue
        raise _Stopped

    def _run(self) -> None:
        from lerobotstream.loader._threads import pin_batch

        def messages(w: int):
            """Worker ``w``'s messages, each read when its turn comes; it ends with the worker's."""
            while True:
                msg = self._recv(w)
                if msg[0] == "ring":
                    self._rings[w] = msg[1]
                elif msg[0] == "end":
                    return
                else:
                    yield w, msg

        try:
            # the DataLoader's turns (planner/_turns.py)
            for w, msg in take_turns([messages(w) for w in range(self.num_workers)]):
                kind = msg[0]
                if kind == "error":
                    self._put(("error", msg[1]))
                    return
                if kind == "batch":
                    _, slot, entries, n = msg
                    batch = self._copy_out(w, slot, entries)
                    self._send(w, slot)
                else:  # "pickled"
                    batch, n = msg[1], msg[2]
                    if self.pin:
                        batch = pin_batch(batch)
                self._put(("batch", batch, n))
            self._put(("end",))
        except _Stopped:
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the iterating thread
            try:
                self._put(("error", exc))
            except _Stopped:
                return

    # --- the iterating thread -------------------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[Any, int]]:
        try:
            while True:
                msg = self._next_message()
                if msg[0] == "end":
                    return
                if msg[0] == "error":
                    raise msg[1]
                yield msg[1], msg[2]
        finally:
            self.close()

    def _next_message(self) -> tuple:
        """The copy-out thread's next message; it always ends with ``end`` or ``error`` (its own
        waits are timed), so this waits on it, checking that it still runs."""
        while True:
            try:
                return self._out.get(timeout=_JOIN_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._out.empty():
                    raise LoaderWorkerError(
                        "StreamLoader's copy-out thread ended without a last message (a bug: please report it)"
                    ) from None

    def close(self) -> None:
        """Stop the thread and the workers, join them, close the pipes (idempotent). A stalled
        worker (past the timeout) is killed at once; a thread or process still alive after the
        joins is named in a warning."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        try:
            self._wake_w.send_bytes(b"x")
        except OSError:
            pass
        t = getattr(self, "_thread", None)
        if t is not None and t is not threading.current_thread():
            t.join(_JOIN_S)
            if t.is_alive():
                log.warning("StreamLoader: the copy-out thread did not stop within %.0f s", _JOIN_S)
        for w in range(len(self.conns)):
            self._send(w, None)
        for w, p in enumerate(self.procs):
            if w in self._stalled and p.exitcode is None:
                p.kill()  # stopped (SIGSTOP) or hung: it would not exit on its own
            p.join(_JOIN_S)
            if p.exitcode is None:
                p.terminate()
                p.join(_JOIN_S)
            if p.exitcode is None:
                p.kill()
                p.join(_JOIN_S)
            if p.exitcode is None:
                log.warning("StreamLoader: worker %d (pid %s) did not exit after SIGKILL", w, p.pid)
        for c in self.conns:
            c.close()
        for p in self.procs:
            if p.exitcode is not None:
                p.close()
        self._wake_r.close()
        self._wake_w.close()
        self._rings = [[] for _ in self._rings]
        while True:  # batches no one will take
            try:
                self._out.get_nowait()
            except queue.Empty:
                break

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


class _Stopped(Exception):
    """The loader iterator is closing: the copy-out thread leaves."""
