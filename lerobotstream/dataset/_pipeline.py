"""One worker's streaming pipeline: planner pools → cache frontier → chunked GOP-once decode → ordered items.

The iterating thread owns the planner pools and the cache frontier. Anchors are drawn in
**chunks** of ``lookahead`` anchors (the planner knows the order ahead of time):

1. a chunk is split at admission events (an episode admitted at position p can be drawn from p
   on; its bytes must be reserved before its first anchor, and the room comes from episodes
   evicted earlier, whose last decode must release them first);
2. per sub-chunk, the anchors are grouped by episode; one **decode job** per episode (on
   ``decode_threads`` threads, holding a decode lease in the cache) gathers every frame the
   sub-chunk's anchors need from each camera (windows included), decodes each distinct frame
   once, in ascending order, in one decoder call — so a GOP is decoded once per chunk instead of
   once per frame — and keeps the decoded uint8 frames until the chunk's items are assembled;
3. items are assembled on ``decode_threads`` assembly threads, in groups of consecutive items
   (``assembly_group``: one hand-off between threads per group), at most ``decoded_queue_size``
   in assembly (plus the rest of the last finished group) ahead of the consumer, and yielded
   strictly in planner order.

Memory bound of decoded frames per worker: at most two chunks are decoded at once (the one being
yielded and the next one), so decoded frames ≤ ``2 × lookahead × cameras × T`` frames of
``H × W × 3`` bytes each (T = frames per video window, 1 without ``delta_timestamps``), plus
``decoded_queue_size`` assembled items.

Planner evictions retire the episode in the cache (its bytes kept, evictable, once its last decode
job releases its lease); admissions pin the next episode (taking a kept payload back without a
fetch, else waiting for room when the budget is full); the next ``prefetch_episodes`` episodes of
the planner frontier are prefetched whenever the budget allows.

An exception on a fetch, decode or assembly thread is re-raised from the iterator (never an empty
or short epoch); all threads are joined and the cache closed when the generator ends or is closed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from lerobotstream.payload_cache import EpisodeByteCache

__all__ = ["Pipeline", "StageTimes"]


@dataclass
class StageTimes:
    """Wall-clock seconds per stage (summed over threads) and counts (one worker process)."""

    decode_job_s: float = 0.0
    assemble_s: float = 0.0
    queue_wait_s: float = 0.0
    admit_wait_s: float = 0.0
    items: int = 0
    chunks: int = 0
    first_item_s: float | None = None
    extra: dict[str, float] = field(default_factory=dict)


def _join_openmp_team() -> None:
    """Assembly-thread initializer: one parallel torch op, so this thread owns an OpenMP team.

    Why: torch's CPU ops run on libgomp, whose idle team threads spin 300,000 rounds before they
    sleep while libgomp manages no more threads than the process may use CPUs, but only ~1,000
    once it manages more. In-process (``num_workers=0``) the DataLoader's collate (``torch.stack``
    of the batch's frames) wakes the training thread's team every batch; with no other team its
    idle thread then spins through the wait for the next batch, taking a core from the decode
    threads (measured: +3.5 CPU ms per 640x480 sample, libgomp 33 % of the CPU). Items used to be
    copied with torch's parallel ``copy_`` on these threads, which created their teams as a side
    effect; the C de-interleave that replaced it does not, so the teams are made here, once per
    thread (a 256 KiB fill: microseconds).
    """
    torch.empty(1 << 18, dtype=torch.uint8).fill_(0)


#: ``decode_group(episode, frames int64 (k,)) -> opaque decoded state`` (runs on a decode thread)
DecodeFn = Callable[[int, np.ndarray], Any]
#: ``assemble(episode, frame, decoded_state) -> item`` (runs on an assembly thread)
AssembleFn = Callable[[int, int, Any], Any]


def _by_need(admits: list[int], upcoming: np.ndarray) -> list[int]:
    """``admits`` ordered by the first of the ``upcoming`` anchors' episodes (int64) that needs
    each; episodes no upcoming anchor needs keep their admission order, after the others."""
    if len(admits) < 2:
        return admits
    first: dict[int, int] = {}
    for i, ep in enumerate(upcoming.tolist()):
        first.setdefault(ep, i)
    return sorted(admits, key=lambda ep: first.get(ep, len(first) + len(upcoming)))


class Pipeline:
    """Ordered, bounded, multi-threaded item production for one worker.

    Args:
        pools: the worker's ``EpisodePool`` objects, one per epoch (``WorkerPlan.iter_pools``).
        limit: anchors per epoch to yield at most (``WorkerStart.limit``; None = all).
        cache: the worker's :class:`EpisodeByteCache` (its fetch loads rows and payloads).
        decode_group: decodes every frame a group of anchors of one episode needs.
        assemble: builds one item from the group's decoded state.
        decode_threads: decode and assembly threads (each), >= 1.
        decoded_queue_size: assembled items in flight, >= 1.
        prefetch_episodes: episodes of the planner frontier fetched ahead, >= 0.
        lookahead: anchors drawn (and decoded together) per chunk, >= 1.
        first_lookahead: anchors of the iterator's first chunk (default ``lookahead``): a small
            first chunk (e.g. one batch) lets the first items out before a whole chunk is decoded.
        on_free: called with an episode index after its cache entry was freed (close decoders).
        on_admit: called with an episode index and whether its kept payload was reused, after
            each admission and before any of its decode jobs is submitted (counters; a reused
            episode's per-admission decode state is reset).
        on_start: called once, before the first admission, with the episodes the first pool's
            epoch has already finished (a worker resumed mid-epoch; pools with ``finished()``).
        times: stage timings to update.
        slots: optional ``slots(n) -> slot`` for the iterator's n-th item (0-based, planner order):
            ``assemble`` is then called with it as a fourth argument (where the item's frames may
            be written, ``_assemble.SlotFn``; ``StreamLoader``'s batch tensors).
        assembly_group: consecutive items assembled by one task (one hand-off between threads per
            group instead of per item), never across a multiple of it (give a divisor of the batch
            size: a group then never spans two batches), >= 1.
    """

    def __init__(
        self,
        pools: Iterable[Any],
        limit: int | None,
        cache: EpisodeByteCache,
        decode_group: DecodeFn,
        assemble: AssembleFn,
        *,
        decode_threads: int,
        decoded_queue_size: int,
        prefetch_episodes: int,
        lookahead: int,
        on_free: Callable[[int], None] | None = None,
        on_admit: Callable[[int, bool], None] | None = None,
        on_start: Callable[[list[int]], None] | None = None,
        times: StageTimes | None = None,
        first_lookahead: int | None = None,
        slots: Callable[[int], Any] | None = None,
        assembly_group: int = 1,
    ) -> None:
        self.pools = pools
        self.limit = limit
        self.cache = cache
        self.decode_group = decode_group
        self.assemble = assemble
        self.decode_threads = max(1, int(decode_threads))
        self.queue_size = max(1, int(decoded_queue_size))
        self.prefetch_episodes = max(0, int(prefetch_episodes))
        self.lookahead = max(1, int(lookahead))
        self.first_lookahead = (
            self.lookahead if first_lookahead is None else max(1, min(self.lookahead, int(first_lookahead)))
        )
        self.on_free = on_free
        self.on_admit = on_admit
        self.on_start = on_start
        self.times = times if times is not None else StageTimes()
        self.slots = slots
        self.assembly_group = max(1, int(assembly_group))

    # --- main-thread helpers ------------------------------------------------------------------
    def _admit(self, ep: int) -> None:
        t0 = time.perf_counter()
        reused = self.cache.admit(ep)
        self.times.admit_wait_s += time.perf_counter() - t0
        if self.on_admit is not None:
            self.on_admit(ep, reused)
        self._freed()

    def _freed(self) -> None:
        """Report the cache's freed episodes (close their decoders)."""
        for ep in self.cache.drain_freed():
            if self.on_free is not None:
                self.on_free(ep)

    def _prefetch(self, pool: Any) -> None:
        if self.prefetch_episodes:
            for ep in pool.frontier(self.prefetch_episodes).tolist():
                if not self.cache.prefetch(ep):
                    break  # budget full: speculative prefetch pauses, retried after the next chunk
            self._freed()

    def _job(self, ep: int, frames: np.ndarray) -> Any:
        t0 = time.perf_counter()
        try:
            return self.decode_group(ep, frames)
        finally:
            self.cache.release(ep)
            self.times.decode_job_s += time.perf_counter() - t0
            self._freed()

    def _assemble(self, ep: int, fr: int, job: Future, seq: int) -> Any:
        state = job.result()
        t0 = time.perf_counter()
        try:
            if self.slots is not None:
                return self.assemble(ep, fr, state, self.slots(seq))
            return self.assemble(ep, fr, state)
        finally:
            self.times.assemble_s += time.perf_counter() - t0

    def _assemble_group(self, work: list[tuple[int, int, Future, int]]) -> list[Any]:
        return [self._assemble(ep, fr, job, seq) for ep, fr, job, seq in work]

    def _chunks(self, dec: ThreadPoolExecutor) -> Iterator[list[tuple[int, int, Future]]]:
        """Sub-chunks of submitted work: ``[(episode, frame, decode job future), ...]``.

        Admissions due at a sub-chunk's start (a pool's first residents included: they are admitted
        once its first chunk is drawn) are made in order of first need by the chunk's anchors, so
        their fetches start in that order: the first batch waits for its own episodes only."""
        size = self.first_lookahead  # the iterator's first chunk, then ``lookahead``
        for i, pool in enumerate(self.pools):
            if i == 0 and self.on_start is not None and hasattr(pool, "finished"):
                self.on_start(pool.finished().tolist())
            pool.drain_events()
            pending_admits: list[int] = pool.resident().tolist()
            while True:
                want = size if self.limit is None else min(size, self.limit - pool.emitted)
                if want <= 0:
                    break
                start = pool.emitted
                eps, frs = pool.next_anchors(want)
                size = self.lookahead
                k = len(eps)
                events = pool.drain_events()
                cuts = sorted({e.position - start for e in events if e.kind == "admit" and 0 < e.position - start < k})
                bounds = [0, *cuts, k]
                for a, b in zip(bounds[:-1], bounds[1:]):
                    admits = pending_admits + [
                        e.episode_index for e in events if e.kind == "admit" and e.position - start == a and a > 0
                    ]
                    if a == 0:
                        admits += [e.episode_index for e in events if e.kind == "admit" and e.position == start]
                    pending_admits = []
                    for ep in _by_need(admits, eps[a:]):
                        self._admit(ep)
                    seg_e, seg_f = eps[a:b], frs[a:b]
                    jobs: dict[int, Future] = {}
                    for ep in dict.fromkeys(seg_e.tolist()):
                        self.cache.acquire(ep)
                        try:
                            jobs[ep] = dec.submit(self._job, ep, seg_f[seg_e == ep])
                        except BaseException:
                            self.cache.release(ep)
                            raise
                    for e in events:
                        if e.kind == "evict" and a < e.position - start <= b:
                            self.cache.retire(e.episode_index)
                    self._prefetch(pool)
                    self.times.chunks += 1
                    yield [(int(x), int(y), jobs[int(x)]) for x, y in zip(seg_e.tolist(), seg_f.tolist())]
                pending_admits = [e.episode_index for e in events if e.kind == "admit" and e.position - start == k]
                if k < want:
                    break
            for ep in pending_admits:  # admitted at the very end (cannot happen with exact coverage)
                self.cache.retire(ep)

    def __iter__(self) -> Iterator[Any]:
        t_start = time.perf_counter()
        dec = ThreadPoolExecutor(self.decode_threads, thread_name_prefix="lrs-decode")
        asm = ThreadPoolExecutor(
            self.decode_threads,
            thread_name_prefix="lrs-assemble",
            initializer=_join_openmp_team if torch.get_num_threads() > 1 else None,
        )
        todo: deque[tuple[int, int, Future]] = deque()
        inflight: deque[tuple[Future, int]] = deque()  # (a group's assembly, its items)
        queued = 0  # items of the groups in ``inflight``
        ready: deque[Any] = deque()  # assembled items of a finished group, not yet yielded
        group = self.assembly_group
        chunks = self._chunks(dec)
        exhausted = False
        #: the first chunk's decode jobs: the next chunk is drawn once they are done. Drawn at once,
        #: the next chunk's job of the same episode raced the first one for the episode's decode
        #: lock (both wake when the episode's fetch ends) and won about half the time, so the first
        #: items waited for a whole ``lookahead`` chunk's decode (0.3-2.5 s with 2 workers on 2 cores)
        first_jobs: list[Future] | None = None
        seq = 0  # items submitted for assembly (the slot of each)
        try:
            while True:
                # keep one chunk decoding ahead of the one being assembled (double buffering)
                while not exhausted and len(todo) < self.lookahead + 1:
                    if first_jobs:
                        if (todo or inflight or ready) and not all(f.done() for f in first_jobs):
                            break
                        first_jobs = []
                    try:
                        chunk = next(chunks)
                    except StopIteration:
                        exhausted = True
                        break
                    if first_jobs is None:
                        first_jobs = list({id(j): j for _, _, j in chunk}.values())
                    todo.extend(chunk)
                while todo and queued < self.queue_size:
                    # a group never crosses a multiple of ``group`` items (a batch boundary)
                    work = []
                    while todo and queued + len(work) < self.queue_size:
                        work.append((*todo.popleft(), seq))
                        seq += 1
                        if seq % group == 0:
                            break
                    inflight.append((asm.submit(self._assemble_group, work), len(work)))
                    queued += len(work)
                if not ready:
                    if not inflight:
                        return
                    t0 = time.perf_counter()
                    fut, k = inflight.popleft()
                    ready.extend(fut.result())
                    queued -= k
                    self.times.queue_wait_s += time.perf_counter() - t0
                item = ready.popleft()
                self.times.items += 1
                if self.times.first_item_s is None:
                    self.times.first_item_s = time.perf_counter() - t_start
                yield item
        finally:
            chunks.close()
            for fut, _ in inflight:
                fut.cancel()
            asm.shutdown(wait=True, cancel_futures=True)
            dec.shutdown(wait=True, cancel_futures=True)
            self.cache.close()
