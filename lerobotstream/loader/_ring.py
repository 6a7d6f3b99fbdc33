"""A processes-mode worker's ring of shared-memory slots, and batches assembled straight into it.

:class:`WorkerRing` holds ``size`` shared-memory storages (made once, at the worker's first dict
batch, each sized by that batch: its tensor keys at 64-byte aligned offsets, the **layout**).
Batch ``b`` (the worker's b-th batch from the ring's first one on) always uses slot ``b % size``,
and slot ``s`` serves its batches in order: batch ``b`` may take it once batch ``b - size`` took
it (or skipped it) and the training process has copied that batch out and returned the slot.
Waiting only ever on an *earlier* batch of the same worker is what keeps the ring deadlock-free
however far ahead the pipeline assembles: the earliest batch not yet sent never waits on a later
one.

:class:`RingSlots` is the pipeline's ``slots`` hook in a worker: the first time batch ``b`` asks
for a tensor (an assembly thread, its first RGB frame), it takes its slot (blocking on the ring's
condition until the training process returns it), and every key whose ``(B, *shape)`` and dtype
are the layout's is then a view into that slot: the C de-interleave writes each frame straight
into shared memory, and nothing is copied when the batch is sent. A key that does not fit the
layout, and a batch whose first tensor was asked before the ring existed, get fresh tensors
(copied into the slot when sent, the earlier path).

Slot returns are read by the worker's return thread (:func:`read_returns`) from the worker's pipe;
``None`` or the pipe's end stops the ring: every wait raises :class:`RingStopped` (a shutdown
never hangs on a slot), and the worker leaves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from lerobotstream.loader._batch import BatchSlots

__all__ = ["ALIGN", "RingSlots", "RingStopped", "WorkerRing", "read_returns", "slot_view"]

ALIGN = 64
_PENDING = object()  # a batch whose slot is being taken (another thread of it waits)
_FRESH = object()  # a batch that asked before the ring existed: fresh tensors


class RingStopped(Exception):
    """The training process stopped the worker (or went away) while it waited for a ring slot."""


def slot_view(storage: torch.UntypedStorage, dtype: torch.dtype, shape: tuple, offset: int) -> torch.Tensor:
    """A contiguous ``shape`` tensor of ``dtype`` over ``storage`` from byte ``offset`` (a multiple
    of the dtype's size)."""
    t = torch.empty(0, dtype=dtype)
    return t.set_(storage, offset // t.element_size(), shape)


def batch_layout(batch: dict[str, Any]) -> tuple[list[tuple[str, Any]], int]:
    """A batch dict → ``[(key, ("t", dtype, shape, offset)) | (key, ("v", value))]`` in key order,
    and the bytes its tensor keys need in a slot (each at a 64-byte aligned offset)."""
    entries: list[tuple[str, Any]] = []
    end = 0
    for key, v in batch.items():
        if _slot_tensor(v):
            entries.append((key, ("t", v.dtype, tuple(v.shape), end)))
            end += -(-(v.numel() * v.element_size()) // ALIGN) * ALIGN
        else:
            entries.append((key, ("v", v)))
    return entries, end


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
        self.slot_bytes = 0
        self._cond = threading.Condition()
        self._free = [True] * self.size
        self._turn = list(range(self.size))  # the batch that may take slot s next
        self._stopped = False

    @property
    def ready(self) -> bool:
        return bool(self.storages)

    @property
    def stopped(self) -> bool:
        return self._stopped

    def create(self, batch: dict[str, Any], first: int) -> list[torch.UntypedStorage]:
        """Make the slots, sized by ``batch`` (the worker's batch ``first``, which uses slot
        ``first % size``); returns the storages (sent to the training process once)."""
        entries, nbytes = batch_layout(batch)
        self.slot_bytes = max(nbytes, ALIGN)
        self.layout = {}
        for i, (key, e) in enumerate(entries):
            if e[0] == "t":
                nxt = next((x[1][3] for x in entries[i + 1 :] if x[1][0] == "t"), self.slot_bytes)
                self.layout[key] = (e[1], e[2], e[3], nxt - e[3])
        storages = [torch.UntypedStorage._new_shared(self.slot_bytes) for _ in range(self.size)]
        with self._cond:
            self._turn = [0] * self.size
            for i in range(self.size):
                self._turn[(first + i) % self.size] = first + i
            self.storages = storages
            self._cond.notify_all()
        return storages

    # --- turns ------------------------------------------------------------------------------------
    def _wait(self, ok: Callable[[], bool]) -> None:
        while not ok():
            if self._stopped:
                raise RingStopped
            self._cond.wait()
        if self._stopped:
            raise RingStopped

    def acquire(self, b: int) -> int:
        """Take batch ``b``'s slot (``b % size``), waiting until the batch before it in that slot
        was copied out and returned.

        Raises:
            RingStopped: the ring was stopped (before or while waiting).
        """
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

    # --- a batch into a slot ----------------------------------------------------------------------
    def entries(self, batch: dict[str, Any]) -> list[tuple[str, Any]] | None:
        """``batch``'s entries at the layout's offsets (``batch_layout``'s form), or None when a
        tensor key is not in the layout, has another dtype or needs more bytes than reserved."""
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
    exists (see the module doc). :meth:`take_slot` gives the slot batch ``b`` took (None: fresh
    tensors, or a key outside the layout only)."""

    def __init__(self, batch_size: int, ring: WorkerRing) -> None:
        super().__init__(batch_size, bulk=True)
        self.ring = ring
        self._slot_of: dict[int, Any] = {}

    def _begin(self, b: int) -> None:
        ring = self.ring
        with ring._cond:
            st = self._slot_of.get(b)
            if st is None:
                if not ring.ready:
                    self._slot_of[b] = _FRESH
                    return
                self._slot_of[b] = _PENDING
            elif st is _PENDING:
                ring._wait(lambda: self._slot_of.get(b) is not _PENDING)
                return
            else:
                return
        try:
            s = ring.acquire(b)
        except BaseException:
            with ring._cond:
                self._slot_of[b] = _FRESH
                ring._cond.notify_all()
            raise
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
    """The worker's return thread: slot numbers from the training process free their slots;
    ``None``, the pipe's end or an error stop the ring and set ``told_to_stop``."""
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                break
            ring.release(int(msg))
    except (EOFError, OSError):
        pass
    finally:
        ring.stop()
        told_to_stop.set()
