"""``StreamLoader``'s processes mode: worker processes over a ring of shared-memory slots.

Each worker process (``multiprocessing`` context of the caller's choice) iterates its shard of the
stream (``StreamCore.shard(p, N, ...)``: the shard a ``DataLoader`` worker p of N gets, with
the DataLoader's worker seeds and ``get_worker_info()``), assembles each batch in place
(:class:`~lerobotstream.loader._batch.BatchSlots`) and writes its tensors into a **slot** of its
ring: ``prefetch_batches`` shared-memory storages made once, at the first batch (sized by it), and
sent to the training process once (``torch.multiprocessing``'s descriptor passing; the segment is
unlinked at creation, so nothing is left under ``/dev/shm`` even when a process is killed). Per
batch only a small message crosses: the slot, each tensor key's dtype, shape and offset, and the
other keys' values (strings, lists) pickled.

In the training process one background thread takes the workers' batches in the DataLoader's
turns, copies each out of its slot (into pinned memory with ``pin_memory=True``) and hands the
slot back to its worker explicitly (a message on the worker's pipe): the batch the caller gets
owns its memory, so a batch the caller keeps is never overwritten. A batch larger than the ring's
slots (another shape than the first batch's) is pickled through the pipe instead (correct, slower).

Shutdown (end of the iterator, ``break``, an exception, ``KeyboardInterrupt``, the iterator
garbage-collected): the thread is stopped and joined, every worker is told to stop and joined
(terminated, then killed, if it does not exit), every pipe closed. A worker that dies raises
:class:`~lerobotstream.errors.LoaderWorkerError` naming the worker, its PID and exit code; an
exception in a worker is re-raised in the training process at that worker's turn.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
import traceback
from itertools import islice
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator

import torch

from lerobotstream.errors import LoaderWorkerError
from lerobotstream.loader._batch import BatchSlots, collate_items

__all__ = ["ProcessBatches"]

_ALIGN = 64
_JOIN_S = 10.0


def _split(batch: Any) -> tuple[list[tuple[str, Any]], int]:
    """A batch dict → ``[(key, ("t", dtype, shape, offset)) | (key, ("v", value))]`` in key order,
    and the bytes its tensor keys need in a slot (64-byte aligned)."""
    entries: list[tuple[str, Any]] = []
    end = 0
    for key, v in batch.items():
        if type(v) is torch.Tensor and v.device.type == "cpu" and v.layout == torch.strided and not v.requires_grad:
            entries.append((key, ("t", v.dtype, tuple(v.shape), end)))
            end += -(-(v.numel() * v.element_size()) // _ALIGN) * _ALIGN
        else:
            entries.append((key, ("v", v)))
    return entries, end


def _view(storage: torch.UntypedStorage, dtype: torch.dtype, shape: tuple, offset: int) -> torch.Tensor:
    return torch.empty(0, dtype=dtype).set_(storage, offset // torch.empty(0, dtype=dtype).element_size(), shape)


def _worker_main(conn, dataset, wid: int, nw: int, base_seed: int, epoch: int, samples: int, batch_size: int,
                 drop_last: bool, collate_fn: Callable, ring_size: int) -> None:
    """A worker process: its shard's batches into the ring (see the module doc)."""
    import random

    from torch.utils.data._utils import worker as dl_worker

    from lerobotstream.loader._startup import import_decoder_lean

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
    ring: list[torch.UntypedStorage] = []
    slot_bytes = 0
    free: list[int] = []

    def take_messages(block: bool) -> bool:
        """Read slot returns (appended to ``free``); False when told to stop (None or EOF)."""
        while block or conn.poll():
            try:
                msg = conn.recv()
            except EOFError:
                return False
            if msg is None:
                return False
            free.append(int(msg))
            block = False
        return True

    try:
        slots = BatchSlots(batch_size)
        shard = dataset.shard(wid, nw, epoch=epoch, samples=samples, in_process=False, slots=slots)
        items = shard.items if wrapper is None else wrapper.wrap_items(shard.items, wid, nw, shard.source_stats)
        b = 0
        while True:
            chunk = list(islice(items, batch_size))
            if not chunk or (drop_last and len(chunk) < batch_size):
                break
            batch = collate_items(chunk, collate_fn, slots.take(b))
            b += 1
            del chunk
            if not isinstance(batch, dict):
                conn.send(("pickled", batch, batch_size if batch is None else _count(batch, batch_size)))
                continue
            entries, nbytes = _split(batch)
            n = _count(batch, batch_size)
            if not ring:
                slot_bytes = max(nbytes, _ALIGN)
                ring = [torch.UntypedStorage._new_shared(slot_bytes) for _ in range(ring_size)]
                free = list(range(ring_size))
                conn.send(("ring", ring))
            if nbytes > slot_bytes:
                conn.send(("pickled", batch, n))
                continue
            if not take_messages(False):
                return
            if not free and not take_messages(True):
                return
            slot = free.pop(0)
            for key, e in entries:
                if e[0] == "t":
                    _view(ring[slot], e[1], e[2], e[3]).copy_(batch[key])
            conn.send(("batch", slot, entries, n))
            del batch
        shard.close()
        conn.send(("end",))
    except (BrokenPipeError, ConnectionResetError):
        return
    except BaseException as exc:  # noqa: BLE001 - re-raised in the training process
        try:
            conn.send(("error", _picklable(exc)))
        except Exception:  # noqa: BLE001
            return
    # stay until the training process says stop (it may still be fetching the ring's descriptors)
    while take_messages(True):
        pass


def _count(batch: Any, default: int) -> int:
    """Samples in a batch: the first dim of its first tensor key (``default`` without one)."""
    if isinstance(batch, dict):
        for v in batch.values():
            if isinstance(v, torch.Tensor) and v.dim():
                return int(v.shape[0])
            if isinstance(v, list):
                return len(v)
    return default


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

    def __init__(self, dataset: Any, num_workers: int, epoch: int, samples: int, *, batch_size: int,
                 drop_last: bool, collate_fn: Callable, pin: bool, ring_size: int, context: Any = None,
                 base_seed: int | None = None) -> None:
        if isinstance(context, str) or context is None:
            context = multiprocessing.get_context(context)
        if context.get_start_method() == "forkserver":
            from lerobotstream.loader._startup import preload_forkserver

            preload_forkserver(context)
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
        if base_seed is None:
            base_seed = int(torch.empty((), dtype=torch.int64).random_().item())
        try:
            for w in range(num_workers):
                parent, child = context.Pipe(duplex=True)
                p = context.Process(target=_worker_main, name=f"lrs-loader-worker-{w}", daemon=True,
                                    args=(child, dataset, w, num_workers, base_seed, epoch, samples, batch_size,
                                          drop_last, collate_fn, ring_size))
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
        while True:
            if self._stop.is_set():
                raise _Stopped
            if conn.poll():
                try:
                    return conn.recv()
                except EOFError:
                    pass
            elif proc.exitcode is None:
                wait([conn, proc.sentinel, self._wake_r])
                continue
            proc.join(0)
            code = proc.exitcode
            how = f"was killed by signal {signal.Signals(-code).name}" if code is not None and code < 0 else \
                f"exited with code {code}"
            raise LoaderWorkerError(f"StreamLoader worker {w} (pid {proc.pid}) {how} before its shard ended",
                                    worker=w, pid=proc.pid, exitcode=code)

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
                dst.copy_(_view(storage, e[1], e[2], e[3]))
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

        try:
            active = list(range(self.num_workers))
            pos = 0
            while active:
                w = active[pos]
                msg = self._recv(w)
                kind = msg[0]
                if kind == "ring":
                    self._rings[w] = msg[1]
                    continue
                if kind == "end":
                    active.pop(pos)
                    if pos >= len(active):
                        pos = 0
                    continue
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
                pos = (pos + 1) % len(active)
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
                msg = self._out.get()
                if msg[0] == "end":
                    return
                if msg[0] == "error":
                    raise msg[1]
                yield msg[1], msg[2]
        finally:
            self.close()

    def close(self) -> None:
        """Stop the thread and the workers, join them, close the pipes (idempotent)."""
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
            t.join()
        for w in range(len(self.conns)):
            self._send(w, None)
        for p in self.procs:
            p.join(_JOIN_S)
            if p.exitcode is None:
                p.terminate()
                p.join(_JOIN_S)
            if p.exitcode is None:
                p.kill()
                p.join()
        for c in self.conns:
            c.close()
        for p in self.procs:
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
