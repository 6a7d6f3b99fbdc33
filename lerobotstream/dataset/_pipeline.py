"""One worker's streaming pipeline: planner anchors → cache frontier → decode threads → ordered queue.

The main (iterating) thread owns the planner and the cache frontier:

1. initial residents are admitted (pinned) in the cache, and the next ``prefetch_episodes``
   episodes of the planner's frontier are prefetched speculatively (a fetch brings the episode's
   Parquet rows and every camera's mini-MP4 on the same frontier);
2. while fewer than ``decoded_queue_size`` items are in flight, the next anchor is drawn, a decode
   lease is taken on its episode and its assembly is submitted to ``decode_threads`` threads;
   planner evictions retire the episode in the cache (bytes freed when its last decode releases)
   and admissions pin the next episode (waiting for room when the budget is full);
3. the head of the in-flight deque is awaited and yielded: items come out in planner order.

An exception on a fetch or decode thread is re-raised from the iterator (never an empty or short
epoch); all threads are joined and the cache closed when the generator ends or is closed.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol, Sequence

from lerobotstream.cache import EpisodeByteCache

__all__ = ["AnchorPlan", "Pipeline", "StageTimes"]


class AnchorPlan(Protocol):
    """What the pipeline needs from a planner (one worker, one epoch)."""

    def initial_residents(self) -> Sequence[int]:
        """Episodes resident before the first draw (admission order)."""

    def draw(self) -> tuple[int, int, list[int], list[int]] | None:
        """Next anchor ``(episode, frame, evicted, admitted)``; the event lists are the episodes
        evicted and admitted right after this draw. None at the end of the epoch."""

    def frontier(self, k: int) -> Sequence[int]:
        """The next ``k`` episodes to be admitted, in admission order."""


@dataclass
class StageTimes:
    """Wall-clock seconds per stage (summed over threads) and counts."""

    assemble_s: float = 0.0
    queue_wait_s: float = 0.0
    admit_wait_s: float = 0.0
    items: int = 0
    first_item_s: float | None = None
    extra: dict[str, float] = field(default_factory=dict)


class Pipeline:
    """Ordered, bounded, multi-threaded item production for one worker and one epoch.

    Args:
        plan: the anchor plan (see :class:`AnchorPlan`).
        cache: the worker's :class:`EpisodeByteCache` (its fetch loads rows and payloads).
        assemble: ``assemble(episode, frame) -> item``; called on a decode thread while a decode
            lease is held on the episode.
        decode_threads: assembly threads, >= 1.
        decoded_queue_size: items in flight (submitted, not yet yielded), >= 1.
        prefetch_episodes: episodes of the planner frontier fetched ahead, >= 0.
        times: stage timings to update.
    """

    def __init__(
        self,
        plan: AnchorPlan,
        cache: EpisodeByteCache,
        assemble: Callable[[int, int], Any],
        *,
        decode_threads: int,
        decoded_queue_size: int,
        prefetch_episodes: int,
        times: StageTimes | None = None,
    ) -> None:
        self.plan = plan
        self.cache = cache
        self.assemble = assemble
        self.decode_threads = max(1, int(decode_threads))
        self.queue_size = max(1, int(decoded_queue_size))
        self.prefetch_episodes = max(0, int(prefetch_episodes))
        self.times = times if times is not None else StageTimes()

    def _schedule_frontier(self) -> None:
        for ep in self.plan.frontier(self.prefetch_episodes):
            if not self.cache.prefetch(ep):
                break  # budget full: speculative prefetch pauses, retried after the next draw

    def _admit(self, ep: int) -> None:
        t0 = time.perf_counter()
        self.cache.admit(ep)
        self.times.admit_wait_s += time.perf_counter() - t0

    def _run(self, ep: int, frame: int) -> Any:
        t0 = time.perf_counter()
        try:
            return self.assemble(ep, frame)
        finally:
            self.cache.release(ep)
            self.times.assemble_s += time.perf_counter() - t0

    def __iter__(self) -> Iterator[Any]:
        t_start = time.perf_counter()
        pool = ThreadPoolExecutor(self.decode_threads, thread_name_prefix="lrs-decode")
        inflight: deque[Future] = deque()
        try:
            for ep in self.plan.initial_residents():
                self.cache.check_fits(ep)
            for ep in self.plan.initial_residents():
                self._admit(ep)
            self._schedule_frontier()
            exhausted = False
            while True:
                while not exhausted and len(inflight) < self.queue_size:
                    drawn = self.plan.draw()
                    if drawn is None:
                        exhausted = True
                        break
                    ep, frame, evicted, admitted = drawn
                    self.cache.acquire(ep)
                    try:
                        inflight.append(pool.submit(self._run, ep, frame))
                    except BaseException:
                        self.cache.release(ep)
                        raise
                    for e in evicted:
                        self.cache.retire(e)
                    for e in admitted:
                        self._admit(e)
                    self._schedule_frontier()
                if not inflight:
                    return
                t0 = time.perf_counter()
                item = inflight.popleft().result()
                self.times.queue_wait_s += time.perf_counter() - t0
                self.times.items += 1
                if self.times.first_item_s is None:
                    self.times.first_item_s = time.perf_counter() - t_start
                yield item
        finally:
            for fut in inflight:
                fut.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            self.cache.close()
