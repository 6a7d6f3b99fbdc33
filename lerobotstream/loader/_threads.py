"""``StreamLoader``'s threads mode: every shard's pipeline in the training process.

With ``num_workers=N`` the stream is cut into the same N shards a ``DataLoader`` with N workers
would give (``StreamCore.shard(p, N, ..., in_process=True)``, each with its own per-process state), and
their batches are taken in the DataLoader's turns (:func:`round_robin`), so the batches are the
DataLoader's; with 0 it is the one in-process stream. Decoding, the frame copies and the batch
assembly run on the pipelines' threads (C with the GIL released: torchcodec's decode, the
de-interleave into the batch tensor, the small keys' numpy rows into their batch arrays); the
training thread only takes finished items and makes the batch dict around the batch tensors.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from lerobotstream.loader._batch import BatchSlots, collate_items, is_known_collate, item_chunks

__all__ = ["round_robin", "shard_batches", "thread_batches", "pin_batch"]


def round_robin(sources: list[Iterator[Any]]) -> Iterator[Any]:
    """The DataLoader's turns over workers: one batch from each active worker in id order; a worker
    that ends leaves the rotation (the next turn is the next worker's)."""
    active = list(range(len(sources)))
    pos = 0
    while active:
        w = active[pos]
        try:
            x = next(sources[w])
        except StopIteration:
            active.pop(pos)
            if pos >= len(active):
                pos = 0
            continue
        yield x
        pos = (pos + 1) % len(active)


def shard_batches(items: Iterator[dict[str, Any]], slots: BatchSlots, batch_size: int, drop_last: bool,
                  collate_fn: Callable) -> Iterator[tuple[Any, int]]:
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


def pin_batch(batch: Any) -> Any:
    """``batch`` with its CPU tensors in pinned memory (those already pinned kept as they are)."""
    if isinstance(batch, torch.Tensor):
        return batch if batch.is_pinned() else batch.pin_memory()
    if isinstance(batch, dict):
        return {k: pin_batch(v) for k, v in batch.items()}
    if isinstance(batch, list):
        return [pin_batch(v) for v in batch]
    if isinstance(batch, tuple):
        return tuple(pin_batch(v) for v in batch)
    return batch


def thread_batches(dataset: Any, num_workers: int, epoch: int, samples: int, *, batch_size: int, drop_last: bool,
                   collate_fn: Callable, pin: bool, wrapper: Any = None) -> Iterator[tuple[Any, int]]:
    """Every batch of the stream from (``epoch``, ``samples``) in the DataLoader's order, made in
    this process (see the module doc)."""
    shards = [(None, 0)] if num_workers == 0 else [(p, num_workers) for p in range(num_workers)]
    opened = []
    sources = []
    try:
        for wid, nw in shards:
            slots = BatchSlots(batch_size, pin=pin, bulk=is_known_collate(collate_fn), recycle=True)
            shard = dataset.shard(wid, nw, epoch=epoch, samples=samples, in_process=True, slots=slots)
            opened.append(shard)
            items = shard.items if wrapper is None else wrapper.wrap_items(shard.items, -1 if wid is None else wid,
                                                                           nw, shard.source_stats)
            sources.append(shard_batches(items, slots, batch_size, drop_last, collate_fn))
        for batch, n in round_robin(sources):
            yield (pin_batch(batch) if pin else batch), n
    finally:
        for src in sources:
            src.close()
        for shard in opened:  # joins each pipeline's threads and closes its cache
            shard.close()
