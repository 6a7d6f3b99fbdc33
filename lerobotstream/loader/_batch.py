"""Batches assembled in place: each item's frames are written once, into its row of a batch tensor,
and the batch is made around those tensors.

:class:`BatchSlots` is the pipeline's ``slots`` hook: the stream's n-th item is row ``n % B`` of
batch ``n // B``; the first item of a batch asking for a key allocates its ``(B, *shape)`` tensor.
With ``recycle=True`` a batch tensor is reused once nothing but the pool references its storage
(``torch._C._storage_Use_Count``): a fresh tensor's pages fault in as the frames are written (ten
times the copy; docs/performance.md). Pinned memory is never recycled (a ``non_blocking`` copy may
still read it).

:func:`collate_items` makes the batch: keys whose values are rows 0..k-1 of their batch tensor (or
:data:`IN_BATCH` in every item) take ``tensor[:k]`` (no copy); the rest go through the collate.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from itertools import count, islice
from typing import Any

import numpy as np
import torch
from torch.utils.data._utils.collate import default_collate

from lerobotstream.dataset._collate import PackedCollate, is_lerobot_collate

__all__ = [
    "IN_BATCH",
    "BatchSlots",
    "ItemSlot",
    "collate_items",
    "is_known_collate",
    "item_chunks",
    "known_collate",
]


class _InBatch:
    """The marker an item carries for a key written into its batch's array (:meth:`ItemSlot.put`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<in batch>"


#: an item's value of a key that was written into its row of the batch's tensor (small keys in bulk)
IN_BATCH = _InBatch()


@functools.cache
def _torch_dtype(dtype: np.dtype) -> torch.dtype | None:
    try:
        return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    except TypeError:
        return None


class ItemSlot:
    """One item's slot (``_assemble.SlotFn``): its row ``row`` of batch ``b``'s tensors."""

    __slots__ = ("owner", "b", "row", "begun")

    def __init__(self, owner: BatchSlots, b: int, row: int) -> None:
        self.owner, self.b, self.row, self.begun = owner, b, row, False

    def _tensor(self, key: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        o = self.owner
        if not self.begun:
            o._begin(self.b)
            self.begun = True
        with o._lock:
            keys = o._batches.setdefault(self.b, {})
            t = keys.get(key)
            if t is None:
                t = keys[key] = o._allocate(self.b, key, (o.batch_size, *shape), dtype)
        return t

    def __call__(self, key: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor | None:
        """Row ``row`` of the batch's ``(B, *shape)`` tensor of ``key`` (allocated by the first item
        that asks), or None when its shape or dtype is not the batch's first item's."""
        t = self._tensor(key, shape, dtype)
        if t.dtype != dtype or tuple(t.shape[1:]) != tuple(shape):
            return None  # another shape than the batch's first item: its own tensor
        return t[self.row]

    def put(self, key: str, value: np.ndarray) -> _InBatch | None:
        """With ``bulk``, write ``value`` (a numpy array or scalar) into row ``row`` of the batch's
        array of ``key`` and return :data:`IN_BATCH` (the item's value); None (the item keeps a
        tensor of its own) without ``bulk``, or when its shape or dtype is not the batch's first
        item's (or torch has no such dtype)."""
        if not self.owner.bulk:
            return None
        try:
            a = self.owner._arrays[self.b][key]
        except KeyError:
            a = self._new_array(key, value)
            if a is None:
                return None
        if a.shape[1:] != value.shape or a.dtype != value.dtype:
            return None
        a[self.row] = value
        return IN_BATCH

    def _new_array(self, key: str, value: np.ndarray) -> np.ndarray | None:
        dtype = _torch_dtype(value.dtype)
        if dtype is None:
            return None
        t = self._tensor(key, value.shape, dtype)
        o = self.owner
        with o._lock:
            arrays = o._arrays.setdefault(self.b, {})
            a = arrays.get(key)
            if a is None:
                a = arrays[key] = t.numpy()
        return a


_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _storage_uses(t: torch.Tensor) -> int:
    """References to ``t``'s storage (its own included; views, ``.numpy()`` arrays each add one)."""
    return _use_count(t.untyped_storage()._cdata)


#: references a tensor's storage has when nothing but that tensor holds it (probed once)
_ALONE = _storage_uses(torch.empty(1)) if _use_count is not None else None
#: handed-out batch tensors kept per (key, shape, dtype) for reuse (the oldest is forgotten beyond)
RECYCLE_PER_KEY = 4


class BatchSlots:
    """Batch tensors of one stream (B = ``batch_size`` items per batch), allocated per batch as its
    items are assembled; ``pin``: pinned memory; ``bulk``: the items' small keys (row columns,
    ``*_is_pad``) go into per-batch arrays too, the items carrying :data:`IN_BATCH` (for
    :func:`is_known_collate` ones only); ``recycle``: reuse batch tensors the caller let go of
    (:meth:`recycle` offers them; ignored with ``pin`` or where torch cannot count references)."""

    def __init__(self, batch_size: int, *, pin: bool = False, bulk: bool = False, recycle: bool = False) -> None:
        self.batch_size = int(batch_size)
        self.pin = bool(pin)
        self.bulk = bool(bulk)
        self._lock = threading.Lock()
        self._batches: dict[int, dict[str, torch.Tensor]] = {}
        self._arrays: dict[int, dict[str, np.ndarray]] = {}  # numpy views of the bulk keys' tensors
        self._recycle = bool(recycle) and not self.pin and _ALONE is not None
        #: (key, shape, dtype) -> handed-out batch tensors, oldest first (reused once let go of)
        self._pool: dict[tuple, list[torch.Tensor]] = {}

    def __call__(self, seq: int) -> ItemSlot:
        b, row = divmod(int(seq), self.batch_size)
        return ItemSlot(self, b, row)

    def _begin(self, b: int) -> None:
        """Called (outside the lock) before batch ``b``'s items ask for a tensor (a subclass may wait
        for where batch ``b`` goes, e.g. a ring slot)."""

    def _allocate(self, b: int, key: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        """Batch ``b``'s ``shape`` (B, ...) tensor of ``key`` (under the lock, once per key): a
        recycled one nothing else references any more, else a new one."""
        if self._recycle:
            pool = self._pool.get((key, tuple(shape), dtype))
            if pool:
                for i, t in enumerate(pool):
                    if _storage_uses(t) == _ALONE:
                        return pool.pop(i)
        return torch.empty(shape, dtype=dtype, pin_memory=self.pin)

    def recycle(self, tensors: dict[str, torch.Tensor]) -> None:
        """Offer batch tensors (:meth:`take`'s) for reuse once the batch made of them is out: each is
        reused only after every view of it is gone (keeps at most :data:`RECYCLE_PER_KEY` per key)."""
        if not self._recycle:
            return
        with self._lock:
            for key, t in tensors.items():
                pool = self._pool.setdefault((key, tuple(t.shape), t.dtype), [])
                pool.append(t)
                if len(pool) > RECYCLE_PER_KEY:
                    del pool[0]

    def take(self, b: int) -> dict[str, torch.Tensor]:
        """Forget batch ``b``'s tensors and return them (key → ``(B, ...)`` tensor)."""
        with self._lock:
            self._arrays.pop(int(b), None)
            return self._batches.pop(int(b), {})


def is_known_collate(collate_fn: Callable) -> bool:
    """``collate_fn`` is one whose batches :func:`collate_items` makes from batch tensors
    (``default_collate``, ``lerobot_collate_fn``)."""
    return collate_fn is default_collate or is_lerobot_collate(collate_fn)


def item_chunks(items: Iterator[Any], batch_size: int, drop_last: bool) -> Iterator[tuple[int, list[Any]]]:
    """``(b, items of batch b)`` of one shard's items in order: ``batch_size`` items each, a short
    last batch unless ``drop_last`` (the DataLoader's rule), b from 0."""
    for b in count():
        chunk = list(islice(items, batch_size))
        if not chunk or (drop_last and len(chunk) < batch_size):
            return
        yield b, chunk


def known_collate(collate_fn: Callable | None) -> Callable:
    """The collate function a loader calls: ``default_collate`` for None; ``PackedCollate``'s inner
    function (packing only helps DataLoader workers' hand-off, which a ``StreamLoader`` does not use);
    any other function as is."""
    if collate_fn is None:
        return default_collate
    if isinstance(collate_fn, PackedCollate):
        return collate_fn.inner
    return collate_fn


def _plain_batch(items: list[dict[str, Any]], placed: dict[str, torch.Tensor]) -> dict[str, Any] | None:
    """``default_collate``'s batch when every key is placed or holds strings in every item (its
    batch of strings is their list), made without calling it; None otherwise."""
    first = items[0]
    out: dict[str, Any] = {}
    for key in first:
        t = placed.get(key)
        if t is not None:
            out[key] = t
            continue
        values = [it[key] for it in items]
        if not all(type(v) is str for v in values):
            return None
        out[key] = values
    return out


def _rows_of(values: list[Any], base: torch.Tensor) -> bool:
    """``values`` are rows 0..k-1 of ``base``, in order (the items' frames were written in place)."""
    if len(values) > base.shape[0]:
        return False
    step = base.stride(0) * base.element_size()
    p0 = base.data_ptr()
    for i, v in enumerate(values):
        if (
            type(v) is not torch.Tensor
            or v.data_ptr() != p0 + i * step
            or v.shape != base.shape[1:]
            or v.dtype != base.dtype
            or v.stride() != base.stride()[1:]
        ):
            return False
    return True


def _materialize(items: list[Any], batch_tensors: dict[str, torch.Tensor]) -> None:
    """Give every :data:`IN_BATCH` value of ``items`` its own tensor (its row of the batch tensor,
    copied): what the item would have carried without bulk keys."""
    for i, it in enumerate(items):
        if type(it) is dict:
            for key, v in it.items():
                if v is IN_BATCH and key in batch_tensors:
                    it[key] = batch_tensors[key][i].clone()


def collate_items(items: list[Any], collate_fn: Callable, batch_tensors: dict[str, torch.Tensor]) -> Any:
    """The batch of ``items`` as ``collate_fn`` makes it, with the keys written in place in
    ``batch_tensors`` (``BatchSlots.take``) taken as ``tensor[:len(items)]`` instead of stacked.

    Only with ``default_collate`` or ``lerobot_collate_fn`` (whose batches are known); any other
    function gets the items unchanged. A key whose items carry :data:`IN_BATCH` takes the batch
    tensor when every item does; otherwise those items get their rows as tensors of their own.
    """
    if not batch_tensors or not items or not is_known_collate(collate_fn) or not all(type(it) is dict for it in items):
        if batch_tensors:
            _materialize(items, batch_tensors)
        return collate_fn(items)
    k = len(items)
    placed: dict[str, torch.Tensor] = {}
    partial = False
    for key, t in batch_tensors.items():
        values = [it.get(key) for it in items]
        if all(v is IN_BATCH for v in values):
            placed[key] = t[:k]
        elif any(v is IN_BATCH for v in values):
            partial = True
        elif _rows_of(values, t):
            placed[key] = t[:k]
    if partial:
        _materialize(items, {key: t for key, t in batch_tensors.items() if key not in placed})
    if not placed:
        return collate_fn(items)
    if collate_fn is default_collate:
        batch = _plain_batch(items, placed)
        if batch is not None:
            return batch
    # a placed key's values stand in as empty strings, which both collates pass through as a list
    # (no tensor work), keeping the key where the collate puts it
    stand_in = dict.fromkeys(placed, "")
    batch = collate_fn([{**it, **stand_in} for it in items])
    if batch is None:
        return None
    for key, t in placed.items():
        if key in batch:
            batch[key] = t
    return batch
