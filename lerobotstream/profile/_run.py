"""One profiled run: the streaming dataset through the loader training uses (``StreamLoader`` or
torch's DataLoader), no model.

:class:`ProfiledStream` (DataLoader) or :class:`ProfiledShards` (``StreamLoader``) adds to every item
one JSON string under :data:`STATS_KEY`: its shard's ``stats()`` snapshot, pid, worker id and wall
clock; the main process pops them from the collated batch and keeps the latest per (pid, worker).
Memory is sampled from ``/proc`` (:mod:`lerobotstream.profile._memory`) on a timer, once the workers
have started, after each batch (unless the timer read within the interval) and before they stop.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from lerobotstream.dataset._collate import PackedCollate, lerobot_collate_fn
from lerobotstream.errors import worker_error
from lerobotstream.loader import StreamLoader
from lerobotstream.profile._memory import MemorySampler

STATS_KEY = "__lrs_stats__"
"""Batch key of the per-item stats snapshots (JSON strings); removed before the batch is returned."""

#: the loaders a run can take: ``StreamLoader``'s modes (``auto``: its choice, as ``lerobotstream-train``
#: makes it) and torch's DataLoader
LOADERS = ("auto", "threads", "processes", "dataloader")

_TRANSFORM_S = [0.0]  # per process: seconds spent in TimedTransform
_TRANSFORM_LOCK = threading.Lock()


class TimedTransform:
    """Wrap an image transform to count its seconds (per process, summed over decode threads)."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.fn = fn

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        try:
            return self.fn(x)
        finally:
            dt = time.perf_counter() - t0
            with _TRANSFORM_LOCK:
                _TRANSFORM_S[0] += dt


class ProfiledStream(IterableDataset):
    """Iterate ``ds`` and attach a stats snapshot (JSON str) to each item under :data:`STATS_KEY`."""

    def __init__(self, ds: Any) -> None:
        super().__init__()
        self.ds = ds

    def __iter__(self):
        info = get_worker_info()
        yield from _with_snapshots(self.ds, None if info is None else int(info.id), self.ds.stats)


class ProfiledShards:
    """``StreamLoader``'s wrapper protocol (``dataset``, ``wrap_items``) around ``ds``: each
    shard's items get a stats snapshot of that shard (JSON str) under :data:`STATS_KEY`."""

    def __init__(self, ds: Any) -> None:
        self.dataset = ds

    def wrap_items(self, items: Any, worker: int, num_workers: int, source_stats: Callable) -> Any:
        shard = getattr(source_stats, "__self__", None)  # the shard whose counters source_stats reads
        stats = shard.stats if callable(getattr(shard, "stats", None)) else self.dataset.stats
        return _with_snapshots(items, None if worker < 0 else worker, stats)


def _with_snapshots(items: Any, worker: int | None, stats: Callable[[], dict]) -> Any:
    pid = os.getpid()
    for item in items:
        snap = {"pid": pid, "worker": worker, "wall_s": time.time(), "stats": stats(), "transforms_s": _TRANSFORM_S[0]}
        item[STATS_KEY] = json.dumps(
            snap, default=lambda x: x.item() if isinstance(x, (np.integer, np.floating)) else str(x)
        )
        yield item


def _batch_size(batch: Any) -> int:
    if isinstance(batch, dict):
        for k in ("index", "frame_index", "episode_index"):
            v = batch.get(k)
            if isinstance(v, torch.Tensor) and v.ndim >= 1:
                return int(v.shape[0])
        for v in batch.values():
            if isinstance(v, torch.Tensor) and v.ndim >= 1:
                return int(v.shape[0])
            if isinstance(v, list):
                return len(v)
    return 1


def profile_dataset(
    ds: Any,
    *,
    num_workers: int = 2,
    batch_size: int = 8,
    steps: int = 50,
    step_s: float = 0.0,
    memory_interval_s: float = 0.1,
    metadata_s: float | None = None,
    prefetch_factor: int | None = None,
    persistent_workers: bool = False,
    multiprocessing_context: str | None = None,
    loader: str = "dataloader",
) -> dict:
    """Run ``ds`` through ``loader`` for ``steps`` batches, no model, collated as
    ``lerobotstream-train`` collates (``PackedCollate`` over ``default_collate``, or over
    ``lerobot_collate_fn`` with language columns). Image transforms are timed (the ``transforms``
    stage) when ``ds`` was built with ``image_transforms=TimedTransform(fn)``.

    Args:
        ds: a :class:`~lerobotstream.StreamingLeRobotDataset` (anything iterable with ``stats()``).
        num_workers: DataLoader worker processes, or ``StreamLoader``'s shards (0: this process).
        batch_size: items per batch.
        steps: batches to draw (fewer if the epoch ends first).
        step_s: simulated model step, seconds slept after each batch (0: none).
        memory_interval_s: seconds between timer RSS/PSS samples.
        metadata_s: seconds the caller spent constructing ``ds`` (the metadata stage).
        prefetch_factor, persistent_workers, multiprocessing_context: the DataLoader's (with
            workers only; None: torch's defaults); a ``StreamLoader`` takes ``prefetch_factor`` as
            its ``prefetch_batches`` and the context for its worker processes.
        loader: one of :data:`LOADERS`.

    Returns:
        dict (:func:`~lerobotstream.profile.build_report` reads it): ``wall_s``, ``first_batch_s``,
        ``batch_wait_s`` (list, s), ``batch_t_s`` (end time of each batch, s since start),
        ``samples``, ``frames``, ``anchors`` (delivered (episode, frame) pairs; (dataset, episode,
        frame) for a mixture), ``snapshots`` (latest ``stats()`` per process and shard),
        ``timeline`` (per batch: cumulated samples/frames, reserved/resident/fetched bytes summed
        over pids), ``memory``, ``epoch_ended`` (the stream ended before ``steps`` batches).
    """
    if loader not in LOADERS:
        raise ValueError(f"loader must be one of {', '.join(LOADERS)}, got {loader!r}")
    batches, name, buffered = _make_loader(
        ds, loader, num_workers, batch_size, prefetch_factor, persistent_workers, multiprocessing_context
    )
    tally = _Tally(list(getattr(ds, "video_keys", [])))
    holder: list[Any] = [None]  # the loader iterator, visible to the sampler thread

    def current_pids() -> dict[int, str]:
        it = holder[0]
        if it is not None:
            for i, w in enumerate(getattr(it, "_workers", []) or []):
                if getattr(w, "pid", None):
                    tally.pids.setdefault(int(w.pid), f"worker {i}")
            for i, pid in enumerate(getattr(batches, "worker_pids", [])):  # StreamLoader, processes mode
                tally.pids.setdefault(int(pid), f"worker {i}")
        return dict(tally.pids)

    with MemorySampler(current_pids, interval_s=memory_interval_s, t0=tally.t0) as mem:
        it = holder[0] = iter(batches)
        mem.sample()  # every worker is alive now: its first reading never depends on the timer
        epoch_ended = False
        try:
            for _ in range(int(steps)):
                tb = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    epoch_ended = True
                    break
                except Exception as exc:
                    original = worker_error(exc)
                    if original is None:
                        raise
                    raise original from exc
                tally.add(batch, tb)
                del batch
                mem.sample(unless_newer_than_s=memory_interval_s)  # a reading per batch, at most the timer's rate
                if step_s > 0:
                    time.sleep(step_s)
        finally:
            wall = time.perf_counter() - tally.t0
            mem.sample()  # the workers' last reading, before the iterator stops them
            holder[0] = None
            close = getattr(it, "close", None)
            if close is not None:  # a StreamLoader's iterator: its shards or workers end now
                close()
            del it
    return dict(
        wall_s=wall,
        wall_start=tally.wall0,
        first_batch_s=tally.waits[0] if tally.waits else None,
        batch_wait_s=tally.waits,
        batch_t_s=tally.t_end,
        samples=tally.samples,
        frames=tally.frames,
        anchors=tally.anchors,
        snapshots=list(tally.latest.values()),
        timeline=tally.timeline,
        memory=mem.summary(),
        num_workers=int(num_workers),
        loader=name,
        buffered_batches=buffered,
        batch_size=int(batch_size),
        steps=len(tally.waits),
        epoch_ended=epoch_ended,
        step_s=float(step_s),
        metadata_s=metadata_s,
        video_keys=tally.video_keys,
        batch_samples=[b["samples"] for b in tally.timeline],
    )


def _make_loader(
    ds: Any,
    loader: str,
    num_workers: int,
    batch_size: int,
    prefetch_factor: int | None,
    persistent_workers: bool,
    multiprocessing_context: str | None,
) -> tuple[Any, str, int]:
    """``(batches, name for the report, batches made ahead of the consumer)`` for ``loader``,
    collated as ``lerobotstream-train`` collates (see :func:`profile_dataset`)."""
    language = bool(getattr(getattr(ds, "meta", None), "has_language_columns", False))
    collate = PackedCollate(lerobot_collate_fn if language else None)
    if loader == "dataloader":
        mp = dict(prefetch_factor=prefetch_factor, multiprocessing_context=multiprocessing_context)
        workers = {**mp, "persistent_workers": bool(persistent_workers)} if int(num_workers) > 0 else {}
        batches = DataLoader(
            ProfiledStream(ds), batch_size=batch_size, num_workers=num_workers, collate_fn=collate, **workers
        )
        if not num_workers:
            return batches, "DataLoader, in this process", 0
        name = f"DataLoader, {num_workers} {multiprocessing_context or 'default-start'} workers"
        return batches, name, (prefetch_factor or 2) * int(num_workers)
    batches = StreamLoader(
        ProfiledShards(ds),
        batch_size,
        num_workers=int(num_workers),
        mode=loader,
        prefetch_batches=prefetch_factor if num_workers else None,
        collate_fn=collate,
        multiprocessing_context=multiprocessing_context,
    )
    unit = "shard" if batches.mode == "threads" else "worker"
    n = max(1, int(num_workers))
    name = f"StreamLoader {batches.mode}, {n} {unit}{'s' if n > 1 else ''} ({batches.mode_reason})"
    # batches made ahead of the consumer: each shard's pipeline or the ring's slots
    return batches, name, n * (prefetch_factor or 2)


class _Tally:
    """What :func:`profile_dataset` records per batch: waits and end times (s since ``t0``),
    samples and frames, anchors, the latest ``stats()`` snapshot per (pid, shard), the timeline."""

    def __init__(self, video_keys: list[str]) -> None:
        self.video_keys = video_keys
        self.pids: dict[int, str] = {os.getpid(): "main"}
        self.latest: dict[tuple[int, Any], dict] = {}
        self.waits: list[float] = []
        self.t_end: list[float] = []
        self.timeline: list[dict] = []
        self.anchors: list[tuple[int, ...]] = []
        self.samples = self.frames = 0
        self.t0 = time.perf_counter()
        self.wall0 = time.time()

    def add(self, batch: Any, asked_at: float) -> None:
        """Record ``batch``, asked for at ``asked_at`` (``perf_counter``; the first wait counts from ``t0``)."""
        now = time.perf_counter()
        self.waits.append(now - (self.t0 if not self.waits else asked_at))
        self.t_end.append(now - self.t0)
        for s in batch.pop(STATS_KEY, []):
            snap = json.loads(s)
            self.latest[(int(snap["pid"]), snap["worker"])] = snap
            if int(snap["pid"]) != os.getpid():
                self.pids.setdefault(int(snap["pid"]), f"worker {snap['worker']}")
        self.samples += _batch_size(batch)
        for k in self.video_keys:
            v = batch.get(k)
            if isinstance(v, torch.Tensor):
                self.frames += int(np.prod(v.shape[:-3]))
        ep, fr = batch.get("episode_index"), batch.get("frame_index")
        if isinstance(ep, torch.Tensor) and isinstance(fr, torch.Tensor):
            di = batch.get("dataset_index")
            cols = [di, ep, fr] if isinstance(di, torch.Tensor) else [ep, fr]  # a mixture: (dataset, episode, frame)
            self.anchors.extend(zip(*(c.reshape(-1).tolist() for c in cols)))
        snaps = [x["stats"] for x in self.latest.values()]
        self.timeline.append(
            {
                "t_s": now - self.t0,
                "samples": self.samples,
                "frames": self.frames,
                "reserved_bytes": sum(int(x.get("reserved_bytes", 0)) for x in snaps),
                "resident_bytes": sum(int(x.get("resident_bytes", 0)) for x in snaps),
                "bytes_fetched": sum(int(x.get("source", {}).get("bytes_read", 0)) for x in snaps),
            }
        )
