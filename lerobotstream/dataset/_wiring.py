"""The stream's wiring in one process: a planner's worker shard → one byte cache, one
decoded-GOP cache and one pipeline over every part (dataset) of the stream → items.

:class:`Run` is the per-process state of a stream (one :class:`~lerobotstream.dataset._worker.Worker`
per part, each part's episode sizes on demand, dispatch by global episode id
``part.offset + episode_index``); :func:`shard_items` is what one iterator does with it: where the
DataLoader worker starts (``planner.worker_start``), its plans (``planner.worker_plans``), the
byte cache sized on demand, the workers bound, the pipeline over ``planner.worker_pools``, and the
items out (a part's dropped keys removed, its ``dataset_index`` added, image transforms on the
iterating thread in-process). ``tools/scale_sim.py`` runs this same code over a synthetic index
(its :class:`Run` with stub fetch and decode), so the scale model measures the dataset's own
start-up.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lerobotstream import _heap
from lerobotstream.dataset._pipeline import Pipeline, StageTimes
from lerobotstream.dataset._worker import Worker, WorkerConfig
from lerobotstream.payload_cache import EpisodeByteCache
from lerobotstream.planner import EpisodeSizes

__all__ = ["ASSEMBLY_GROUP", "Run", "StreamPart", "shard_items"]

#: items per assembly task at most (the largest divisor of the batch size up to this): one hand-off
#: between the pipeline's threads per group instead of per item
ASSEMBLY_GROUP = 4


@dataclass(frozen=True)
class StreamPart:
    """One dataset of a stream, as the core wires it.

    Fields:
        config: what its :class:`Worker` needs (:class:`WorkerConfig`).
        offset (int): its episode ``e`` is the global episode id ``offset + e``.
        dataset_index (int | None): added to each of its items as an int64 scalar tensor (None:
            no key, a single dataset).
        dropped (tuple[str, ...]): keys removed from its items (features not in every dataset).
        transform_keys (tuple[str, ...]): item keys the image transforms apply to.
    """

    config: WorkerConfig
    offset: int = 0
    dataset_index: int | None = None
    dropped: tuple[str, ...] = ()
    transform_keys: tuple[str, ...] = ()


class Run:
    """Per-process state of a stream: one :class:`Worker` per part, each part's episode sizes
    (:class:`~lerobotstream.planner.EpisodeSizes` over its worker's spans: computed as admission
    and prefetch reach an episode, kept), dispatch by global episode id, the pipeline's stage
    times. Created after a PID check; never pickled."""

    def __init__(self, parts: Sequence[StreamPart]) -> None:
        self.pid = os.getpid()
        self.parts = list(parts)
        self.workers = self._workers()
        self.sizes = [EpisodeSizes(w.episode_nbytes) for w in self.workers]
        self.offsets = [p.offset for p in self.parts]
        self.cache: EpisodeByteCache | None = None
        self.times = StageTimes()

    def _workers(self) -> list[Any]:
        return [Worker(p.config) for p in self.parts]

    def split(self, gid: int) -> tuple[int, int]:
        d = len(self.offsets) - 1
        while self.offsets[d] > gid:
            d -= 1
        return d, int(gid) - self.offsets[d]

    def sizes_for(self, plans: Sequence[Any]) -> Callable[[int], int]:
        """``size(global episode id) -> bytes`` of an iterator whose parts play ``plans``: each
        part's size, checked against its plan's budget (``WorkerPlan.episode_size``)."""

        def size(gid: int) -> int:
            d, ep = self.split(gid)
            return plans[d].episode_size(ep)

        return size

    def fetch(self, gid: int):
        d, ep = self.split(gid)
        return self.workers[d].fetch(ep)

    def decode_group(self, gid: int, frames):
        d, ep = self.split(gid)
        return self.workers[d].jobs.decode_group(ep, frames)

    def assemble(self, gid: int, frame: int, dec, slot=None) -> dict[str, Any]:
        d, ep = self.split(gid)
        item = self.workers[d].assemble(ep, frame, dec, slot)
        part = self.parts[d]
        for key in part.dropped:
            item.pop(key, None)
        if part.dataset_index is not None:
            item["dataset_index"] = torch.tensor(part.dataset_index, dtype=torch.int64)
        return item

    def on_free(self, gid: int) -> None:
        d, ep = self.split(gid)
        self.workers[d].on_free(ep)

    def on_start(self, gids: list[int]) -> None:
        for gid in gids:
            d, ep = self.split(gid)
            self.workers[d].on_start_finished(ep)

    def on_admit(self, gid: int, reused: bool) -> None:
        d, ep = self.split(gid)
        self.workers[d].on_admit(ep, reused)


def shard_items(
    planner: Any,
    run: Run,
    wid: int | None,
    epoch: int,
    samples: int,
    options: Any,
    loader: Any,
    *,
    in_process: bool,
    slots: Callable[[int], Any] | None = None,
) -> Iterator[dict[str, Any]]:
    """The items of DataLoader worker ``wid`` of ``loader.num_workers`` (None, 0: the one stream)
    from ``samples`` consumed samples of ``epoch`` (the rank's count), produced with ``run``'s workers.

    Args:
        planner: the rank's planner for ``loader``'s settings, built with ``run.sizes`` as its
            episode sizes (``planner.Planner``).
        options: the stream's resolved ``StreamOptions``; read here: ``prefetch_episodes``,
            ``decode_threads``, ``decoded_queue_size``, ``decode_lookahead``, ``first_lookahead``,
            ``decoded_cache_bytes`` (per rank: split over the workers), ``image_transforms``.
        loader: the stream's ``LoaderSettings`` (``num_workers``; ``batch_size``: the first
            decode chunk and the assembly groups).
        in_process: image transforms on the iterating thread (else on the decode threads).
        slots: the pipeline's per-item frame slots (``Pipeline``'s ``slots``).

    Raises (while iterating): ShardingError, ResumeStateError (``worker_start``); ByteBudgetError
    when admission or prefetch reaches an episode larger than its worker's budget, before any of
    its bytes is fetched; fetch and decode errors.
    """
    from lerobotstream.dataset._decoded_gops import DecodedGopCache

    nw, batch_size = loader.num_workers, loader.batch_size
    planner.set_epoch(epoch)
    planner.samples_consumed = samples
    start = planner.worker_start(wid, nw)
    plans = planner.worker_plans(start)
    if not any(len(p.episode_indices) for p in plans):
        return
    budget = sum(int(plan.byte_budget or 0) for plan in plans if len(plan.episode_indices))
    # sizes on demand: the pools size an episode when admission reaches it, the cache when it
    # prefetches one, checked against its plan's budget (ByteBudgetError then, naming the dataset
    # of a mixture, before any byte of that episode is fetched)
    cache = EpisodeByteCache(
        max(1, budget),
        run.sizes_for(plans),
        run.fetch,
        max_workers=max(1, min(8, options.prefetch_episodes + 1)),
        keep_retired=bool(planner.settings.repeat),  # a finite epoch admits each episode once
    )
    run.cache = cache
    gops = DecodedGopCache(0)  # one decoded-GOP cache for the worker: each part's keys namespaced
    for d, (part, w, plan) in enumerate(zip(run.parts, run.workers, plans)):
        n_cams = max(1, len(part.config.video_keys))
        cap = plan.video_decoder_cache_size or plan.pool_size * n_cams + options.prefetch_episodes * n_cams
        w.bind(
            cache,
            part.offset,
            gops,
            (d,),
            video_decoder_cache_size=cap,
            gop_capacity_bytes=options.decoded_cache_bytes // max(1, nw),
            transforms_in_threads=not in_process,
            epoch=start.epoch,
        )
    pipe = Pipeline(
        planner.worker_pools(start, plans),
        start.limit,
        cache,
        run.decode_group,
        run.assemble,
        decode_threads=options.decode_threads,
        decoded_queue_size=options.decoded_queue_size,
        prefetch_episodes=options.prefetch_episodes,
        lookahead=options.decode_lookahead,
        on_free=run.on_free,
        on_admit=run.on_admit,
        on_start=run.on_start,
        times=run.times,
        first_lookahead=options.first_lookahead or batch_size or 8,
        slots=slots,
        assembly_group=math.gcd(batch_size or 1, ASSEMBLY_GROUP),
    )
    tfm = None if not in_process else options.image_transforms
    by_index = {part.dataset_index: (w, part.transform_keys) for part, w in zip(run.parts, run.workers)}
    try:
        for item in pipe:
            if tfm is not None:  # in-process: the training thread applies them (same --seed, same transforms)
                t0 = time.perf_counter()
                w, keys = by_index[None if "dataset_index" not in item else int(item["dataset_index"])]
                for k in keys:
                    if k in item:
                        item[k] = tfm(item[k])
                w.add(transforms_s=time.perf_counter() - t0)
            yield item
    finally:
        for w in run.workers:
            w.release()
        _heap.trim()  # the iterator's frames are freed: free pages back to the OS if many are kept
