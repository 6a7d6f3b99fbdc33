"""``StreamLoader``'s processes mode: worker processes over a ring of shared-memory slots.

Each worker process iterates its shard (a ``DataLoader`` worker's shard, seeds and
``get_worker_info()``) and hands its batches over through its ring (:class:`WorkerRing`):
``prefetch_batches`` shared-memory slots made at its first dict batch and sized by it (the
**layout**: its tensor keys at 64-byte aligned offsets), sent once, their segments unlinked at
creation. Batch ``b`` uses slot ``b % size`` once batch ``b - size`` left it and the training
process returned it: waiting only on an *earlier* batch of the same worker keeps the ring
deadlock-free. With the known collates the frames and small keys are written straight into the
slot (:class:`RingSlots`); with another the batch is copied in; one that does not fit the layout
is pickled through the pipe. Per batch only a small message crosses.

In the training process one thread takes the batches in the DataLoader's turns, copies each out
(pinned with ``pin_memory=True``) and returns the slot. Shutdown (end, ``break``, an exception,
the iterator collected) stops and joins the thread and every worker (terminated, then killed). A
worker that dies raises :class:`~lerobotstream.errors.LoaderWorkerError` naming it, its PID and
exit code; a worker's exception is re-raised at its turn.
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

import numpy as np
import torch
from torch.utils.data._utils.pin_memory import pin_memory

from lerobotstream.errors import LoaderWorkerError
from lerobotstream.loader._batch import BatchSlots, collate_items, is_known_collate, item_chunks
from lerobotstream.loader._threads import StallWatch
from lerobotstream.planner._turns import take_turns

__all__ = ["ProcessBatches"]

log = logging.getLogger("lerobotstream.loader")

_JOIN_S = 10.0
#: modules a ``forkserver`` imports once before it forks workers
PRELOAD = ["lerobotstream.loader._startup_preload"]

ALIGN = 64
_PENDING = object()  # a batch whose slot is being taken (another thread of it waits)
_FRESH = object()  # a batch that asked before the ring existed: fresh tensors


class RingStopped(Exception):
    """The loader is stopping: a worker waiting for a ring slot, or the copy-out thread, leaves."""


def slot_view(storage: torch.UntypedStorage, dtype: torch.dtype, shape: tuple, offset: int) -> torch.Tensor:
    """A contiguous ``shape`` tensor of ``dtype`` over ``storage`` from byte ``offset`` (a multiple
    of the dtype's size)."""
    t = torch.empty(0, dtype=dtype)
    return t.set_(storage, offset // t.element_size(), shape)


def _slot_tensor(v: Any) -> bool:
    return type(v) is torch.Tensor and v.device.type == "cpu" and v.layout == torch.strided and not v.requires_grad


class WorkerRing:
    """``size`` shared-memory slots of one worker and their turns (see the module doc).

    Args:
        size: slots (``prefetch_batches``), >= 1.
    """

    def __init__(self, size: int) -> None:
        self.size = max(1, int(size))
        self.storages: list[torch.UntypedStorage] = []
        #: key → (dtype, shape, offset, bytes reserved) of the first batch's tensor keys
        self.layout: dict[str, tuple[torch.dtype, tuple, int, int]] = {}
        self._cond = threading.Condition()
        self._free = [True] * self.size
        self._turn = list(range(self.size))  # the batch that may take slot s next
        self._stopped = False

    def create(self, batch: dict[str, Any], first: int) -> list[torch.UntypedStorage]:
        """Make the slots, sized by ``batch`` (the worker's batch ``first``, which uses slot
        ``first % size``); returns the storages (sent to the training process once)."""
        end = 0
        self.layout = {}
        for key, v in batch.items():
            if _slot_tensor(v):  # each at a 64-byte aligned offset
                nbytes = -(-(v.numel() * v.element_size()) // ALIGN) * ALIGN
                self.layout[key] = (v.dtype, tuple(v.shape), end, nbytes)
                end += nbytes
        storages = [torch.UntypedStorage._new_shared(max(end, ALIGN)) for _ in range(self.size)]
        with self._cond:
            self._turn = [0] * self.size
            for i in range(self.size):
                self._turn[(first + i) % self.size] = first + i
            self.storages = storages
            self._cond.notify_all()
        return storages

    def _wait(self, ok: Callable[[], bool]) -> None:
        while not ok():
            if self._stopped:
                raise RingStopped
            self._cond.wait()
        if self._stopped:
            raise RingStopped

    def acquire(self, b: int) -> int:
        """Take batch ``b``'s slot (``b % size``), waiting until the batch before it in that slot
        was copied out and returned; RingStopped when the ring is stopped."""
        s = int(b) % self.size
        with self._cond:
            self._wait(lambda: self._turn[s] == b and self._free[s])
            self._free[s] = False
            self._turn[s] = b + self.size
            self._cond.notify_all()
        return s

    def skip(self, b: int) -> None:
        """Batch ``b`` does not use its slot (it is pickled through the pipe): the slot's next
        batch may take it (once it is returned)."""
        s = int(b) % self.size
        with self._cond:
            self._wait(lambda: self._turn[s] == b)
            self._turn[s] = b + self.size
            self._cond.notify_all()

    def release(self, s: int) -> None:
        """Slot ``s`` is free again (the training process copied its batch out, or it went unused)."""
        with self._cond:
            self._free[int(s)] = True
            self._cond.notify_all()

    def stop(self) -> None:
        """Every wait, now and later, raises :class:`RingStopped` (idempotent)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def entries(self, batch: dict[str, Any]) -> list[tuple[str, Any]] | None:
        """``batch`` as ``[(key, ("t", dtype, shape, offset)) | (key, ("v", value))]`` at the layout's
        offsets, or None when a tensor key is not in the layout, has another dtype or needs more
        bytes than reserved."""
        out: list[tuple[str, Any]] = []
        for key, v in batch.items():
            if not _slot_tensor(v):
                out.append((key, ("v", v)))
                continue
            lay = self.layout.get(key)
            if lay is None or lay[0] != v.dtype or v.numel() * v.element_size() > lay[3]:
                return None
            out.append((key, ("t", v.dtype, tuple(v.shape), lay[2])))
        return out

    def write(self, s: int, batch: dict[str, Any], entries: list[tuple[str, Any]]) -> None:
        """Copy ``batch``'s tensor keys into slot ``s`` at their entries' offsets, except those
        already there (written in place by :class:`RingSlots`)."""
        storage = self.storages[s]
        base = storage.data_ptr()
        for key, e in entries:
            if e[0] != "t":
                continue
            v = batch[key]
            if v.data_ptr() == base + e[3] and v.is_contiguous():
                continue
            slot_view(storage, e[1], e[2], e[3]).copy_(v)

    def detach(self, batch: Any) -> Any:
        """``batch`` with every top-level tensor that lives in a slot cloned (before pickling it:
        a pickled view of a slot would reach the training process as that shared memory)."""
        if not isinstance(batch, dict) or not self.storages:
            return batch
        ptrs = {st.data_ptr() for st in self.storages}
        return {
            k: (v.clone() if type(v) is torch.Tensor and v.untyped_storage().data_ptr() in ptrs else v)
            for k, v in batch.items()
        }


class RingSlots(BatchSlots):
    """:class:`BatchSlots` whose batch tensors are views into the batch's ring slot once the ring
    exists (a key of the layout's shape and dtype)."""

    def __init__(self, batch_size: int, ring: WorkerRing) -> None:
        super().__init__(batch_size, bulk=True)
        self.ring = ring
        self._slot_of: dict[int, Any] = {}

    def _begin(self, b: int) -> None:
        ring = self.ring
        with ring._cond:
            st = self._slot_of.get(b)
            if st is None:
                if not ring.storages:
                    self._slot_of[b] = _FRESH
                    return
                self._slot_of[b] = _PENDING
            elif st is _PENDING:
                ring._wait(lambda: self._slot_of.get(b) is not _PENDING)
                return
            else:
                return
        s = _FRESH
        try:
            s = ring.acquire(b)
        finally:
            with ring._cond:
                self._slot_of[b] = s
                ring._cond.notify_all()

    def _allocate(self, b: int, key: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        s = self._slot_of.get(b)
        lay = self.ring.layout.get(key)
        if isinstance(s, int) and lay is not None and lay[0] == dtype and lay[1] == shape:
            return slot_view(self.ring.storages[s], dtype, shape, lay[2])
        return super()._allocate(b, key, shape, dtype)

    def take_slot(self, b: int) -> int | None:
        """The slot batch ``b`` took while assembled (forgotten here), or None."""
        with self.ring._cond:
            s = self._slot_of.pop(int(b), None)
        return s if isinstance(s, int) else None


def read_returns(conn: Any, ring: WorkerRing, told_to_stop: threading.Event) -> None:
    """The worker's return thread: slot numbers free their slots; ``None``, the pipe's end or an
    error stop the ring (its waits raise :class:`RingStopped`) and set ``told_to_stop``."""
    try:
        while (msg := conn.recv()) is not None:
            ring.release(int(msg))
    except (EOFError, OSError):
        pass
    finally:
        ring.stop()
        told_to_stop.set()


def _worker_main(
    conn, dataset, wid: int, loader: Any, base_seed: int, epoch: int, samples: int, collate_fn: Callable, ring_size: int
) -> None:
    """A worker process: its shard's batches (``loader``: the ``LoaderSettings`` handed to the
    shard) into the ring (see the module doc)."""
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
    np.random.seed(dl_worker._generate_state(base_seed, wid))
    dl_worker._worker_info = dl_worker.WorkerInfo(id=wid, num_workers=nw, seed=seed, dataset=dataset)
    wrapper = None
    if hasattr(dataset, "wrap_items"):  # a wrapper (``StreamLoader``'s ``dataset`` doc)
        wrapper, dataset = dataset, dataset.dataset
    ring = WorkerRing(ring_size)
    told_to_stop = threading.Event()  # None from the training process, or its end of the pipe
    threading.Thread(target=read_returns, args=(conn, ring, told_to_stop), name="lrs-ring-returns", daemon=True).start()
    # frames straight into the slots only with the known collates: another's batch may hold the
    # items' values themselves, which must not be views of a slot
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
            if isinstance(batch, dict) and not ring.storages:
                first = b
                conn.send(("ring", ring.create(batch, b)))
            entries = ring.entries(batch) if isinstance(batch, dict) and ring.storages else None
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
        ring.stop()  # items assembled ahead of a pass limit may wait for a slot no batch will return
        shard.close()
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
            ring.stop()
            shard.close()
    # stay until the training process says stop (it may still be fetching the ring's descriptors)
    told_to_stop.wait()


def _picklable(exc: BaseException) -> BaseException:
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        exc.__traceback_text__ = traceback.format_exc()
        return exc
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")


class ProcessBatches:
    """The worker processes, the copy-out thread and the batches of one ``StreamLoader`` iterator:
    ``(batch, number of samples)`` in the DataLoader's order; :meth:`close` stops everything."""

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
        context: Any,
        base_seed: int,
        watch: StallWatch,
    ) -> None:
        num_workers = loader.num_workers
        if isinstance(context, str) or context is None:
            context = multiprocessing.get_context(context)
        if context.get_start_method() == "forkserver":  # effective when its server has not started yet
            context.set_forkserver_preload(PRELOAD)
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
        self._watch = watch
        self._stalled: set[int] = set()  # workers past the timeout: killed at close, not waited for
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

    def _recv(self, w: int) -> Any:
        """Worker ``w``'s next message, the wait timed by the stall watch."""
        conn, proc = self.conns[w], self.procs[w]
        self._watch.begin(f"worker {w}", w, proc.pid)
        try:
            while True:
                if self._stop.is_set():
                    raise RingStopped
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
        finally:
            self._watch.end()

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
        raise RingStopped

    def _run(self) -> None:
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
                        batch = pin_memory(batch)
                self._put(("batch", batch, n))
            self._put(("end",))
        except RingStopped:
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the iterating thread
            try:
                self._put(("error", exc))
            except RingStopped:
                return

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
        """The copy-out thread's next message (its last is ``end`` or ``error``), checking that it runs."""
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
            for end in (None, p.terminate, p.kill):  # let it exit, then SIGTERM, then SIGKILL
                if p.exitcode is None:
                    if end is not None:
                        end()
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
