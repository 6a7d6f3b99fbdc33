"""``StreamLoader``'s threads mode: every shard's pipeline in the training process.

With ``num_workers=N`` the stream is cut into the same N shards a ``DataLoader`` with N workers
would give (``StreamCore.shard(p, N, ..., in_process=True)``, each with its own per-process state), and
their batches are taken in the DataLoader's turns (``planner._turns.take_turns``), so the batches are the
DataLoader's; with 0 it is the one in-process stream. Decoding, the frame copies and the batch
assembly run on the pipelines' threads (C with the GIL released: torchcodec's decode, the
de-interleave into the batch tensor, the small keys' numpy rows into their batch arrays); the
training thread only takes finished items and makes the batch dict around the batch tensors.

Each shard's waits are timed (:class:`~lerobotstream.loader._stall.StallWatch`, checked on a helper
thread): past ``timeout`` the stalled shard is aborted (its byte cache closes, so its pipeline's
waits raise) and the iterator raises ``LoaderWorkerError`` naming it; without one, a stall is
named in one warning.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from lerobotstream.loader._batch import BatchSlots, collate_items, is_known_collate, item_chunks
from lerobotstream.loader._stall import StallWatch
from lerobotstream.planner._turns import take_turns

__all__ = ["shard_batches", "thread_batches", "pin_batch", "watched"]

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


def watched(batches: Iterator[Any], watch: StallWatch, what: str, worker: int | None) -> Iterator[Any]:
    """``batches`` with each ``next`` timed by ``watch`` (its wait on shard ``what``): a wait that
    passed the timeout raises the watch's :class:`~lerobotstream.errors.LoaderWorkerError` (the
    error the aborted shard's wait raised is its cause)."""
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
    wrapper: Any = None,
    watch: StallWatch | None = None,
    opened: list[Any] | None = None,
) -> Iterator[tuple[Any, int]]:
    """Every batch of the stream from (``epoch``, ``samples``) in the DataLoader's order, made in
    this process with ``loader``'s settings (a ``LoaderSettings``, handed to each shard; see the
    module doc); each shard's waits timed by ``watch`` (a stalled shard is aborted past its timeout).
    The shards are appended to ``opened`` as they open (the caller reads their counters)."""
    num_workers, batch_size, drop_last = loader.num_workers, loader.batch_size, loader.drop_last
    shards = [(None, 0)] if num_workers == 0 else [(p, num_workers) for p in range(num_workers)]
    watch = watch or StallWatch()
    opened = [] if opened is None else opened
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
            yield (pin_batch(batch) if pin else batch), n
    finally:
        watch.close()
        for src in sources:
            src.close()
        for shard in opened:  # joins each pipeline's threads and closes its cache
            shard.close()
        if not watch.aborting:  # (aborting, it waits for the stalled shard's reads: a daemon, left to end)
            watcher.join(_JOIN_S)
