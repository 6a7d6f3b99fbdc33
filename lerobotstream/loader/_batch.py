"""Batches assembled in place: each item's frames are written once, into its row of a batch tensor
allocated for that batch, and the batch is made around those tensors.

:class:`BatchSlots` is the pipeline's ``slots`` hook (``Pipeline(slots=...)``): the stream's n-th
item (0-based, from the iterator start) is row ``n % B`` of batch ``n // B``; the first item of a
batch that asks for a key allocates that key's ``(B, *shape)`` tensor (``torch.empty``: never
zeroed; pinned when asked). Items are assembled on several threads, so allocation takes a lock;
the frame copy itself (``frames_to_u8_chw`` / ``frames_to_float_chw``, C, GIL released) does not.

A batch tensor is **fresh per batch** and handed to the caller: a batch the caller keeps is never
overwritten (nothing is recycled). Measured against recycling one tensor (``tools/bench.py --loader``'s
``alloc`` line: ``torch.empty`` + the C de-interleave of 8 640x480 uint8 frames): 0.59 vs 0.58 ms
per batch on a quiet machine, 0.9-1.3 vs 0.6-0.75 ms under load (the fresh tensor's page faults):
at most ~0.08 ms per sample, not worth a proof that the caller dropped the batch.

:func:`collate_items` makes the batch: the keys whose values are exactly rows 0..k-1 of their batch
tensor (in order) take ``tensor[:k]`` (no copy), every other key goes through the collate function
(``default_collate`` or LeRobot's ``lerobot_collate_fn``: the same keys, order, values, dtypes and
shapes as ``DataLoader`` gives); another collate function gets the items as they are.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch
from torch.utils.data._utils.collate import default_collate

from lerobotstream.dataset import PackedCollate, is_lerobot_collate

__all__ = ["BatchSlots", "collate_items", "known_collate"]


class BatchSlots:
    """Batch tensors of one stream, allocated per batch as its items are assembled.

    Args:
        batch_size: B (items per batch), >= 1.
        pin: allocate pinned (page-locked) memory (``pin_memory=True`` with CUDA).
    """

    def __init__(self, batch_size: int, *, pin: bool = False) -> None:
        self.batch_size = int(batch_size)
        self.pin = bool(pin)
        self._lock = threading.Lock()
        self._batches: dict[int, dict[str, torch.Tensor]] = {}

    def __call__(self, seq: int) -> Callable[[str, tuple, torch.dtype], torch.Tensor | None]:
        b, row = divmod(int(seq), self.batch_size)

        def slot(key: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor | None:
            self._begin(b)
            with self._lock:
                keys = self._batches.setdefault(b, {})
                t = keys.get(key)
                if t is None:
                    t = keys[key] = self._allocate(b, key, (self.batch_size, *shape), dtype)
            if t.dtype != dtype or tuple(t.shape[1:]) != tuple(shape):
                return None  # another shape than the batch's first item: its own tensor
            return t[row]

        return slot

    def _begin(self, b: int) -> None:
        """Called (outside the lock) before batch ``b``'s items ask for a tensor: nothing here (a
        subclass may wait for where batch ``b`` goes, e.g. a ring slot)."""

    def _allocate(self, b: int, key: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        """Batch ``b``'s ``shape`` (B, ...) tensor of ``key`` (under the lock, once per key)."""
        return torch.empty(shape, dtype=dtype, pin_memory=self.pin)

    def take(self, b: int) -> dict[str, torch.Tensor]:
        """Forget batch ``b``'s tensors and return them (key → ``(B, ...)`` tensor)."""
        with self._lock:
            return self._batches.pop(int(b), {})

    def clear(self) -> None:
        with self._lock:
            self._batches.clear()


def known_collate(collate_fn: Callable | None) -> Callable:
    """The collate function a loader calls: ``default_collate`` for None; ``PackedCollate``'s inner
    function (packing only helps DataLoader workers' hand-off, which a ``StreamLoader`` does not use);
    any other function as is."""
    if collate_fn is None:
        return default_collate
    if isinstance(collate_fn, PackedCollate):
        return collate_fn.inner
    return collate_fn


def _rows_of(values: list[Any], base: torch.Tensor) -> bool:
    """``values`` are rows 0..k-1 of ``base``, in order (the items' frames were written in place)."""
    if len(values) > base.shape[0]:
        return False
    step = base.stride(0) * base.element_size()
    p0 = base.data_ptr()
    for i, v in enumerate(values):
        if (type(v) is not torch.Tensor or v.data_ptr() != p0 + i * step or v.shape != base.shape[1:]
                or v.dtype != base.dtype or v.stride() != base.stride()[1:]):
            return False
    return True


def collate_items(items: list[Any], collate_fn: Callable, batch_tensors: dict[str, torch.Tensor]) -> Any:
    """The batch of ``items`` as ``collate_fn`` makes it, with the keys written in place in
    ``batch_tensors`` (``BatchSlots.take``) taken as ``tensor[:len(items)]`` instead of stacked.

    ``collate_fn`` must be ``default_collate`` or ``lerobot_collate_fn`` for the in-place keys to be
    used (their batches are known: ``torch.stack`` of the values, key order kept); any other function
    gets the items unchanged (the in-place values are then ordinary tensors, stacked or not by it).
    """
    if (not batch_tensors or not items or not (collate_fn is default_collate or is_lerobot_collate(collate_fn))
            or not all(type(it) is dict for it in items)):
        return collate_fn(items)
    k = len(items)
    placed = {key: t[:k] for key, t in batch_tensors.items()
              if all(key in it for it in items) and _rows_of([it[key] for it in items], t)}
    if not placed:
        return collate_fn(items)
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
