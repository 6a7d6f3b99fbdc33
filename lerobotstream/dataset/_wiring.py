"""The stream's wiring in one process: a planner's shard → one byte cache, one decoded-GOP cache
and one pipeline of episode jobs over every part (dataset) → items. :class:`Readers` is the
per-process state, :func:`shard_items` one iterator (``tools/scale_sim.py`` runs it over stubs).
"""

from __future__ import annotations

import bisect
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from lerobotstream import _heap
from lerobotstream.dataset._decodejob import DecodedGopCache, EpisodeJob
from lerobotstream.dataset._pipeline import Pipeline, StageTimes
from lerobotstream.dataset._reader import DatasetReader, ReaderConfig
from lerobotstream.payload_cache import EpisodeByteCache
from lerobotstream.planner._sizes import EpisodeSizes

__all__ = [
    "ASSEMBLY_GROUP",
    "ORIGIN_KEYS",
    "PROCESS_KEYS",
    "PayloadOrigin",
    "Readers",
    "StreamPart",
    "one_per_process",
    "shard_items",
]

#: items per assembly task at most (the largest divisor of the batch size up to this)
ASSEMBLY_GROUP = 4


@dataclass(frozen=True)
class StreamPart:
    """One dataset of a stream, as the core wires it."""

    config: ReaderConfig  # what its :class:`DatasetReader` needs
    offset: int = 0  # its episode ``e`` is the global episode id ``offset + e``
    dataset_index: int | None = None  # added to its items as an int64 scalar tensor (None: no key)
    dropped: tuple[str, ...] = ()  # keys removed from its items (features not in every dataset)
    transform_keys: tuple[str, ...] = ()  # item keys the image transforms apply to


#: the MP4 payload counters by origin (a ``bytes_by_epoch`` row's keys)
ORIGIN_KEYS = ("store_bytes", "disk_cache_bytes", "reused_bytes", "needed_bytes")


class PayloadOrigin:
    """Running totals of MP4 payload bytes by origin (:data:`ORIGIN_KEYS`), every epoch summed,
    that several readers add to (the readers of one stream in one process: its shards, its
    datasets). Thread-safe; cheap to read."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.totals = dict.fromkeys(ORIGIN_KEYS, 0)

    def add(self, **kw: int) -> None:
        with self.lock:
            for k, v in kw.items():
                self.totals[k] += int(v)

    def as_dict(self) -> dict[str, int]:
        with self.lock:
            return dict(self.totals)


class Readers:
    """Per-process state of a stream (made after a PID check, never pickled): one
    :class:`DatasetReader` and :class:`~lerobotstream.planner._sizes.EpisodeSizes` per part, the
    iterator's byte and decoded-GOP caches, the stage times, and the counters read from them.
    ``origin``: the :class:`PayloadOrigin` its readers also count into (None: one of its own)."""

    #: the episode jobs its iterators make (``tools/scale_sim.py``: a stub's)
    job_class = EpisodeJob

    def __init__(self, parts: Sequence[StreamPart], origin: PayloadOrigin | None = None) -> None:
        self.pid = os.getpid()
        self.parts = list(parts)
        self.readers = self._readers()
        self.origin = PayloadOrigin() if origin is None else origin
        for reader in self.readers:
            reader.origin = self.origin
        self.sizes = [EpisodeSizes(r.episode_nbytes) for r in self.readers]
        self.cache: EpisodeByteCache | None = None
        self.gops = DecodedGopCache(0)
        self.times = StageTimes()

    def _readers(self) -> list[Any]:
        return [DatasetReader(p.config) for p in self.parts]

    def part_stats(self, d: int) -> dict[str, Any]:
        """Part ``d``'s own counters in this process (see ``StreamingLeRobotDataset.stats``)."""
        reader = self.readers[d]
        src = reader.source.stats.as_dict()
        fb = reader.fallback
        out: dict[str, Any] = {
            "pid": reader.pid,
            "source": src,
            "bytes_fetched": int(src.get("bytes_read", 0)),
            "requests": int(src.get("requests", 0)),
            "decoder_opens": reader.decoders.opened,
            "decoder_evictions": reader.decoders.evicted,
            "open_decoders": len(reader.decoders),
            "decoder_capacity": reader.decoders.capacity,
            "decoder_fallbacks": fb.fallback_count,
            "pyav_fallbacks": fb.pyav_fallbacks,
            "fallback_reasons": dict(fb.cpu_fallbacks),
            "index_open_s": reader.index_open_s,
            "episodes_sized": len(self.sizes[d].known),
        }
        with reader.lock:
            out.update(
                {
                    k: (int(v) if k.startswith(("frames", "decode_calls", "bytes", "episodes", "items")) else v)
                    for k, v in reader.counts.items()
                }
            )
            out["spans_s"] = reader.spans.planned_s
            out["bytes_by_epoch"] = {e: dict(row) for e, row in sorted(reader.by_epoch.items())}
        if reader.disk is not None:
            out["disk_cache"] = {**reader.disk.counters, "limit_bytes": reader.disk.limit_bytes}
        out["frames_decoded_per_returned"] = (
            out["frames_decoded"] / out["frames_returned"] if out["frames_returned"] else None
        )
        if reader.cfg.meta.source is not reader.source:
            out["metadata_source"] = reader.cfg.meta.source.stats.as_dict()
        return out

    def pipeline_stats(self) -> dict[str, Any]:
        """The worker's shared counters: pipeline stage times, the byte cache, the decoded-GOP cache."""
        t, gops, c = self.times, self.gops, self.cache
        return {
            "assemble_s": t.assemble_s,
            "queue_wait_s": t.queue_wait_s,
            "admit_wait_s": t.admit_wait_s,
            "decode_job_s": t.decode_job_s,
            "chunks": t.chunks,
            "first_item_s": t.first_item_s,
            "gop_cache_bytes": gops.nbytes,
            "gop_cache_peak_bytes": gops.peak_nbytes,
            "gop_cache_capacity_bytes": gops.capacity_bytes,
            "gop_cache_evictions": gops.evictions,
            "reserved_bytes": 0 if c is None else c.reserved_bytes,
            "resident_bytes": 0 if c is None else c.resident_bytes,
            "byte_budget": 0 if c is None else c.byte_budget,
            "cache": {} if c is None else c.stats.as_dict(),
        }

    def source_stats(self) -> list[dict[str, Any]]:
        """Each part's payload-source counters (``ByteSource.stats``)."""
        return [r.source.stats.as_dict() for r in self.readers]


#: counters every shard of one process shares: its payload source's, and the seconds the stream's
#: construction took (metadata, sidecar, torchcodec import: one set-up per process, reported by
#: each of its shards); summed over processes, not over shards
PROCESS_KEYS = (
    "source",
    "metadata_source",
    "bytes_fetched",
    "requests",
    "metadata_s",
    "sidecar_s",
    "torchcodec_import_s",
)


def one_per_process(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first of ``parts`` (``stats()`` of shards) from each process (``pid``)."""
    seen: dict[Any, dict[str, Any]] = {}
    for p in parts:
        seen.setdefault(p.get("pid"), p)
    return list(seen.values())


def shard_items(
    planner: Any,
    readers: Readers,
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
    from ``samples`` consumed samples of ``epoch``, with ``readers`` and the rank's ``planner``.
    ``in_process``: image transforms on the iterating thread (else the decode threads).

    Raises (while iterating): ShardingError, ResumeStateError (``worker_start``); ByteBudgetError
    for an episode larger than its budget, before any fetch of it; fetch and decode errors.
    """
    nw, batch_size = loader.num_workers, loader.batch_size
    planner.set_epoch(epoch, samples)
    start = planner.worker_start(wid, nw)
    plans = planner.worker_plans(start)
    if not any(len(p.episode_indices) for p in plans):
        return
    budget = sum(int(plan.byte_budget or 0) for plan in plans if len(plan.episode_indices))
    cache = EpisodeByteCache(
        max(1, budget),
        max_workers=max(1, min(8, options.prefetch_episodes + 1)),
        keep_retired=bool(planner.settings.repeat),  # a finite epoch admits each episode once
    )
    gops = DecodedGopCache(options.decoded_cache_bytes // max(1, nw))  # every part's jobs, keys by episode id
    readers.cache, readers.gops = cache, gops
    for part, reader, plan in zip(readers.parts, readers.readers, plans):
        n_cams = max(1, len(part.config.video_keys))
        cap = plan.video_decoder_cache_size or plan.pool_size * n_cams + options.prefetch_episodes * n_cams
        reader.prepare(video_decoder_cache_size=cap, epoch=start.epoch)
    transforms = None if in_process else options.image_transforms
    offsets = [part.offset for part in readers.parts]

    def new_job(key: int) -> EpisodeJob:
        """The pipeline's job factory: a global episode id split into its part here, once; the job is
        sized (against its plan's budget) when admission or prefetch reaches it."""
        d = bisect.bisect_right(offsets, key) - 1
        part, ep = readers.parts[d], int(key) - offsets[d]
        size = partial(plans[d].episode_size, ep)
        return readers.job_class(
            readers.readers[d],
            key,
            ep,
            cache,
            gops,
            size,
            transforms=transforms,
            dataset_index=part.dataset_index,
            dropped=part.dropped,
        )

    pipe = Pipeline(
        planner.worker_pools(start, plans),
        start.limit,
        cache,
        new_job,
        decode_threads=options.decode_threads,
        decoded_queue_size=options.decoded_queue_size,
        prefetch_episodes=options.prefetch_episodes,
        lookahead=options.decode_lookahead,
        times=readers.times,
        first_lookahead=options.first_lookahead or batch_size or 8,
        slots=slots,
        assembly_group=math.gcd(batch_size or 1, ASSEMBLY_GROUP),
    )
    tfm = None if not in_process else options.image_transforms
    by_index = {part.dataset_index: (r, part.transform_keys) for part, r in zip(readers.parts, readers.readers)}
    try:
        for item in pipe:
            if tfm is not None:  # in-process: the training thread applies them (same --seed, same transforms)
                t0 = time.perf_counter()
                reader, keys = by_index[None if "dataset_index" not in item else int(item["dataset_index"])]
                for k in keys:
                    if k in item:
                        item[k] = tfm(item[k])
                reader.add(transforms_s=time.perf_counter() - t0)
            yield item
    finally:
        for reader in readers.readers:
            reader.release()
        gops.clear()
        _heap.trim()  # the iterator's frames are freed: free pages back to the OS if many are kept
