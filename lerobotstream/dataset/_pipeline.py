"""One worker's streaming pipeline: planner pools → episode jobs → cache frontier → chunked GOP-once decode → ordered items.

The iterating thread owns the pools, the cache frontier and the jobs. Anchors are drawn in chunks
of ``lookahead``, split at admission events (an episode's bytes are reserved before its first
anchor); per sub-chunk one decode per episode job (``decode_threads`` threads) decodes each
needed frame once; items are assembled in groups (``assembly_group``) at most
``decoded_queue_size`` ahead and yielded in planner order. At most two chunks are decoded at once
(``2 × lookahead × cameras × T`` frames). Planner evictions retire the episode in the cache; the
next ``prefetch_episodes`` of the frontier are prefetched when the budget allows. An exception on
any thread is re-raised from the iterator; every thread is joined and the cache closed at the end.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from lerobotstream.dataset._decodejob import EpisodeJob
from lerobotstream.payload_cache import EpisodeByteCache

__all__ = ["Pipeline", "StageTimes"]


@dataclass
class StageTimes:
    """Wall-clock seconds per stage (summed over threads) and counts of one worker process."""

    decode_job_s: float = 0.0
    assemble_s: float = 0.0
    queue_wait_s: float = 0.0
    admit_wait_s: float = 0.0
    items: int = 0
    chunks: int = 0
    first_item_s: float | None = None


def _join_openmp_team() -> None:
    """Assembly-thread initializer: one parallel torch op, so this thread owns an OpenMP team. With
    more teams than CPUs libgomp's idle threads spin ~1,000 rounds instead of 300,000, so the
    training thread's team no longer spins between batches (measured: -3.5 CPU ms per 640x480 sample).
    """
    torch.empty(1 << 18, dtype=torch.uint8).fill_(0)


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
        cache: the worker's :class:`EpisodeByteCache` (it runs each job's fetch on its threads).
        new_job: ``new_job(episode id) -> EpisodeJob``, made when the episode is first admitted,
            prefetched, or named by the first pool's ``finished()`` (resumed mid-epoch).
        decode_threads: decode and assembly threads (each); decoded_queue_size: assembled items
            in flight; prefetch_episodes: frontier episodes fetched ahead; lookahead: anchors per
            chunk; first_lookahead: anchors of the first chunk (default ``lookahead``).
        times: stage timings to update; slots: ``slots(n) -> slot`` for the n-th item.
        assembly_group: consecutive items assembled by one task, never across a multiple of it.
    """

    def __init__(
        self,
        pools: Iterable[Any],
        limit: int | None,
        cache: EpisodeByteCache,
        new_job: Callable[[int], EpisodeJob],
        *,
        decode_threads: int,
        decoded_queue_size: int,
        prefetch_episodes: int,
        lookahead: int,
        times: StageTimes | None = None,
        first_lookahead: int | None = None,
        slots: Callable[[int], Any] | None = None,
        assembly_group: int = 1,
    ) -> None:
        self.pools = pools
        self.limit = limit
        self.cache = cache
        self.new_job = new_job
        self.jobs: dict[int, EpisodeJob] = {}  # episode id -> its job, until the cache frees it
        self.decode_threads = max(1, int(decode_threads))
        self.queue_size = max(1, int(decoded_queue_size))
        self.prefetch_episodes = max(0, int(prefetch_episodes))
        self.lookahead = max(1, int(lookahead))
        self.first_lookahead = (
            self.lookahead if first_lookahead is None else max(1, min(self.lookahead, int(first_lookahead)))
        )
        self.times = times if times is not None else StageTimes()
        self.slots = slots
        self.assembly_group = max(1, int(assembly_group))

    # --- main-thread helpers ------------------------------------------------------------------
    def _job(self, ep: int) -> EpisodeJob:
        job = self.jobs.get(ep)
        if job is None:
            job = self.jobs[ep] = self.new_job(ep)
        return job

    def _admit(self, ep: int) -> None:
        job = self._job(ep)
        t0 = time.perf_counter()
        reused = self.cache.admit(ep, job=job)
        self.times.admit_wait_s += time.perf_counter() - t0
        job.admitted(reused)
        self._freed()

    def _freed(self) -> None:
        """Close the jobs of the episodes the cache freed (the cache's free notice)."""
        for ep in self.cache.drain_freed():
            job = self.jobs.pop(ep, None)
            if job is not None:
                job.close()

    def _prefetch(self, pool: Any) -> None:
        if self.prefetch_episodes:
            for ep in pool.frontier(self.prefetch_episodes).tolist():
                if not self.cache.prefetch(ep, job=self._job(ep)):
                    break  # budget full: speculative prefetch pauses, retried after the next chunk
            self._freed()

    def _decode(self, job: EpisodeJob, frames: np.ndarray) -> Any:
        t0 = time.perf_counter()
        try:
            return job.decode(frames)
        finally:
            self.cache.release(job.key)
            self.times.decode_job_s += time.perf_counter() - t0
            self._freed()

    def _assemble(self, job: EpisodeJob, fr: int, decoded: Future, seq: int) -> Any:
        state = decoded.result()
        t0 = time.perf_counter()
        try:
            return job.assemble(fr, state, None if self.slots is None else self.slots(seq))
        finally:
            self.times.assemble_s += time.perf_counter() - t0

    def _assemble_group(self, work: list[tuple[EpisodeJob, int, Future, int]]) -> list[Any]:
        return [self._assemble(job, fr, decoded, seq) for job, fr, decoded, seq in work]

    def _chunks(self, dec: ThreadPoolExecutor) -> Iterator[list[tuple[int, int, Future]]]:
        """Sub-chunks of submitted work: ``[(episode job, frame, its decode's future), ...]``.

        Admissions due at a sub-chunk's start (a pool's first residents included: they are admitted
        once its first chunk is drawn) are made in order of first need by the chunk's anchors, so
        their fetches start in that order: the first batch waits for its own episodes only."""
        size = self.first_lookahead  # the iterator's first chunk, then ``lookahead``
        for i, pool in enumerate(self.pools):
            if i == 0 and hasattr(pool, "finished"):
                for ep in pool.finished().tolist():
                    job = self._job(ep)
                    job.reader.count_finished(job.episode)
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
                    decodes: dict[int, tuple[EpisodeJob, Future]] = {}
                    for ep in dict.fromkeys(seg_e.tolist()):
                        job = self._job(ep)
                        self.cache.acquire(ep)
                        try:
                            decodes[ep] = (job, dec.submit(self._decode, job, seg_f[seg_e == ep]))
                        except BaseException:
                            self.cache.release(ep)
                            raise
                    for e in events:
                        if e.kind == "evict" and a < e.position - start <= b:
                            self.cache.retire(e.episode_index)
                    self._prefetch(pool)
                    self.times.chunks += 1
                    yield [(decodes[x][0], y, decodes[x][1]) for x, y in zip(seg_e.tolist(), seg_f.tolist())]
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
        todo: deque[tuple[EpisodeJob, int, Future]] = deque()
        inflight: deque[tuple[Future, int]] = deque()  # (a group's assembly, its items)
        queued = 0  # items of the groups in ``inflight``
        ready: deque[Any] = deque()  # assembled items of a finished group, not yet yielded
        group = self.assembly_group
        chunks = self._chunks(dec)
        exhausted = False
        #: the first chunk's decodes: the next chunk is drawn once they are done (else its decode of
        #: the same episode races the first one for the job's lock, and the first items wait)
        first_decodes: list[Future] | None = None
        seq = 0  # items submitted for assembly (the slot of each)
        try:
            while True:
                # keep one chunk decoding ahead of the one being assembled (double buffering)
                while not exhausted and len(todo) < self.lookahead + 1:
                    if first_decodes:
                        if (todo or inflight or ready) and not all(f.done() for f in first_decodes):
                            break
                        first_decodes = []
                    try:
                        chunk = next(chunks)
                    except StopIteration:
                        exhausted = True
                        break
                    if first_decodes is None:
                        first_decodes = list({id(j): j for _, _, j in chunk}.values())
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
