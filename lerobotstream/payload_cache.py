"""Byte-budgeted episode payload cache: reservations, prefetch frontier, concurrent fetches.

:class:`EpisodeByteCache` owns the compressed payload (one synthesized mini-MP4 per camera) of
every episode a worker has admitted or prefetched. An episode **reserves** its exact synthesized
size (all cameras, from the sidecar: ``mp4.spans.plan_span(...).synth_nbytes``) *before* anything
is fetched, and keeps it until the planner retired it **and** its last decode released its lease.

States of an entry::

    reserved (fetch pending) ──► resident (payload complete) ──► kept (retired, evictable) ──► freed
                 │                        ▲                              │
                 │                        └──── admitted again ◄─────────┘
                 └──────────────► failed (error kept; re-raised to every reader)

Rules:

* Each admission and prefetch is handed the episode's :class:`FetchJob` (its ``nbytes`` and its
  fetch): memory grows with the pool and the frontier, not the dataset.
* An episode larger than the whole budget raises :class:`~lerobotstream.errors.ByteBudgetError`
  before any byte of it is fetched.
* :meth:`EpisodeByteCache.prefetch` never waits: with the budget full it returns ``False``.
* A fetch failing with a :class:`~lerobotstream.errors.SourceError` (the source gave up after its
  retries and time limit) ends the stream: every later operation raises that error, queued fetches
  are skipped and :meth:`~EpisodeByteCache.close` does not wait for running ones, so the consumer
  sees the first unrecoverable failure within about one read's time limit. Other fetch errors
  stay with their episode.
* A retired episode whose last decode released it stays **kept** (evictable); admitted again (the
  next ``repeat=True`` epoch, another pool) it takes that payload without a fetch
  (``CacheStats.reuses``): a worker whose episodes fit its budget fetches each once.
* To make room, admission and prefetch evict kept episodes, then admission evicts finished,
  unpinned prefetches (least recently used first), else waits until a release makes room. The
  budget is never exceeded; freed episodes are reported by :meth:`EpisodeByteCache.drain_freed`.

The budget covers compressed mini-MP4 bytes only (not decoder state, tensors, Parquet tables): it
is not a process RSS limit. Thread-safe: every state change happens under one ``threading.Condition``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from lerobotstream.errors import ByteBudgetError, SourceError, over_budget


class FetchJob(Protocol):
    """What :meth:`EpisodeByteCache.admit` and :meth:`~EpisodeByteCache.prefetch` are handed with
    an episode: the bytes to reserve, and ``fetch() -> EpisodePayload`` (at most ``nbytes``)."""

    nbytes: int

    def fetch(self) -> EpisodePayload: ...


@dataclass
class EpisodePayload:
    """What one fetch returns for an episode."""

    payloads: dict[str, bytes]  # camera key -> synthesized mini-MP4 bytes (the budgeted part)
    extra: Any = None  # un-budgeted data fetched with it (the episode's Parquet rows)


@dataclass
class CacheStats:
    """Per-process counters of one cache (seconds are wall-clock, summed over fetch threads)."""

    fetches: int = 0  # episode fetches started
    fetch_failures: int = 0  # fetches that raised
    fetches_skipped: int = 0  # queued fetches never run: an earlier source failure ended the stream
    payload_bytes: int = 0  # synthesized bytes stored (sum over fetches)
    evictions: int = 0  # unpinned finished prefetches or kept episodes dropped to make room
    reuses: int = 0  # admissions served from a kept payload (no fetch)
    reused_bytes: int = 0  # synthesized bytes of those admissions
    admit_wait_s: float = 0.0  # time admissions waited for room
    fetch_s: float = 0.0  # time inside the fetch callable
    peak_reserved_bytes: int = 0  # high-water mark of reserved_bytes

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass
class _Entry:
    episode_index: int
    nbytes: int
    speculative: bool
    pins: int = 0
    retired: bool = False
    fetch: Callable[[], EpisodePayload] | None = None  # the job's
    future: Future | None = None
    result: EpisodePayload | None = None
    error: BaseException | None = None
    done: bool = False
    resident_nbytes: int = 0
    kept: bool = False
    last_used: float = field(default_factory=time.monotonic)


class EpisodeByteCache:
    """Reservation-accounted cache of per-episode synthesized payloads.

    Args:
        byte_budget (int): the worker's budget of reserved payload bytes, > 0.
        max_workers (int): concurrent fetches (threads), >= 1.
        keep_retired (bool): keep a retired episode's payload (evictable) for a later admission;
            False frees it once its last decode released it (one finite epoch).
        on_event (Callable[[str, dict], None] | None): called under the lock after every state
            change with an event name and a snapshot, and with ``"admit_wait"`` before
            :meth:`admit` waits for room (tests check invariants and order threads with it).

    Raises:
        ValueError: non-positive budget or worker count.
    """

    def __init__(
        self,
        byte_budget: int,
        *,
        max_workers: int = 4,
        keep_retired: bool = True,
        on_event: Callable[[str, dict], None] | None = None,
    ) -> None:
        if int(byte_budget) <= 0:
            raise ValueError(f"byte_budget must be positive, got {byte_budget}")
        if int(max_workers) < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.byte_budget = int(byte_budget)
        self._max_workers = int(max_workers)
        self._keep_retired = bool(keep_retired)
        self._on_event = on_event
        self._cond = threading.Condition(threading.Lock())
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._reserved = 0
        self._resident = 0
        self._closed = False
        self._fatal: BaseException | None = None  # the first SourceError of a fetch: ends the stream
        self._pool: ThreadPoolExecutor | None = None
        self._freed: list[int] = []
        self.stats = CacheStats()

    # --- accounting ---------------------------------------------------------------------------
    @property
    def reserved_bytes(self) -> int:
        """Bytes reserved by pending fetches, finished prefetches and admitted/decoding episodes."""
        with self._cond:
            return self._reserved

    @property
    def resident_bytes(self) -> int:
        """Bytes of completed payloads held (before or after their first sample was asked for)."""
        with self._cond:
            return self._resident

    def check_fits(self, episode_index: int, job: FetchJob) -> int:
        """Raise :class:`ByteBudgetError` when the episode can never fit; returns its size (``job``'s).

        Raises:
            ValueError: the job's size is negative.
        """
        nbytes = int(job.nbytes)
        if nbytes < 0:
            raise ValueError(f"negative synthesized size {nbytes} for episode {episode_index}")
        error = over_budget(episode_index, nbytes, self.byte_budget, advice="or lower num_workers")
        if error is not None:
            raise error
        return nbytes

    @property
    def kept_bytes(self) -> int:
        """Bytes of kept (retired, evictable) payloads, part of ``reserved_bytes``."""
        with self._cond:
            return sum(e.nbytes for e in self._entries.values() if e.kept)

    def drain_freed(self) -> list[int]:
        """Episodes whose entry was freed since the last call (each reported once)."""
        with self._cond:
            out, self._freed = self._freed, []
            return out

    def held(self, episode_index: int) -> bool:
        """True when the episode has an entry (pending, resident or failed)."""
        with self._cond:
            return int(episode_index) in self._entries

    # --- internal -----------------------------------------------------------------------------
    def _emit(self, event: str, episode_index: int) -> None:
        if self._on_event is not None:
            self._on_event(
                event,
                {
                    "episode_index": episode_index,
                    "reserved_bytes": self._reserved,
                    "resident_bytes": self._resident,
                    "byte_budget": self.byte_budget,
                    "entries": {k: (e.pins, e.retired, e.done) for k, e in self._entries.items()},
                    "kept": [k for k, e in self._entries.items() if e.kept],
                },
            )

    def _check_open(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closed:
            raise RuntimeError("EpisodeByteCache is closed")

    @property
    def failure(self) -> BaseException | None:
        """The source failure that ended the stream (None while every source read succeeds)."""
        with self._cond:
            return self._fatal

    def _new_entry(self, ep: int, nbytes: int, speculative: bool, job: FetchJob) -> _Entry:
        entry = _Entry(ep, nbytes, speculative, fetch=job.fetch)
        self._entries[ep] = entry
        self._reserved += nbytes
        self.stats.peak_reserved_bytes = max(self.stats.peak_reserved_bytes, self._reserved)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="lrs-fetch")
        self.stats.fetches += 1
        entry.future = self._pool.submit(self._run_fetch, entry)
        self._emit("reserve", ep)
        return entry

    def _run_fetch(self, entry: _Entry) -> None:
        t0 = time.perf_counter()
        result: EpisodePayload | None = None
        error: BaseException | None = None
        with self._cond:
            fatal = self._fatal
            if fatal is not None:
                self.stats.fetches_skipped += 1
        try:
            if fatal is not None:  # the stream has ended: do not send requests to a failed source
                raise fatal
            result = entry.fetch()
            total = sum(len(b) for b in result.payloads.values())
            if total > entry.nbytes:
                raise ByteBudgetError(
                    f"episode {entry.episode_index}: synthesized payload of {total} bytes exceeds its "
                    f"reservation of {entry.nbytes} bytes (size prediction is wrong)",
                    episode_index=entry.episode_index,
                )
        except BaseException as exc:  # stored and re-raised to every reader of this episode
            error = exc
            result = None
        dt = time.perf_counter() - t0
        with self._cond:
            self.stats.fetch_s += dt
            entry.done = True
            if error is not None:
                entry.error = error
                if fatal is None:
                    self.stats.fetch_failures += 1
                if isinstance(error, SourceError) and self._fatal is None:
                    self._fatal = error
            elif self._entries.get(entry.episode_index) is entry and not self._closed:
                entry.result = result
                entry.resident_nbytes = sum(len(b) for b in result.payloads.values())
                self._resident += entry.resident_nbytes
                self.stats.payload_bytes += entry.resident_nbytes
            self._maybe_free(entry)
            self._emit("fetched", entry.episode_index)
            self._cond.notify_all()

    def _free(self, entry: _Entry) -> None:
        if self._entries.get(entry.episode_index) is entry:
            del self._entries[entry.episode_index]
            self._reserved -= entry.nbytes
            self._resident -= entry.resident_nbytes
            entry.resident_nbytes = 0
            entry.result = None
            entry.kept = False
            self._freed.append(entry.episode_index)
            self._emit("free", entry.episode_index)
            self._cond.notify_all()

    def _maybe_free(self, entry: _Entry) -> None:
        """A retired episode whose last lease is gone: kept (evictable) when its payload is good."""
        if entry.retired and entry.pins == 0 and entry.done:
            if self._keep_retired and entry.error is None and entry.result is not None and not self._closed:
                if not entry.kept:
                    entry.kept = True
                    self._emit("keep", entry.episode_index)
            else:
                self._free(entry)

    def _evict_for(self, nbytes: int, *, prefetches: bool) -> None:
        """Drop kept episodes, then (``prefetches``) finished unpinned prefetches, each least
        recently used first, until ``nbytes`` fit."""
        if self._reserved + nbytes <= self.byte_budget:
            return
        kept = [e for e in self._entries.values() if e.kept]
        spec = [e for e in self._entries.values() if prefetches and not e.retired and e.pins == 0 and e.done]
        for group in (kept, spec):
            for entry in sorted(group, key=lambda e: e.last_used):
                if self._reserved + nbytes <= self.byte_budget:
                    return
                self.stats.evictions += 1
                self._free(entry)

    # --- public operations --------------------------------------------------------------------
    def prefetch(self, episode_index: int, job: FetchJob) -> bool:
        """Speculatively reserve and start fetching an episode; never waits.

        Returns:
            bool: True when the episode is held (already, or newly reserved); False when the budget
            is full now (call again later).

        Raises:
            ByteBudgetError: the episode is larger than the whole budget (nothing is fetched).
            RuntimeError: the cache is closed.
        """
        ep = int(episode_index)
        nbytes = self.check_fits(ep, job)
        with self._cond:
            self._check_open()
            entry = self._entries.get(ep)
            if entry is not None:
                entry.last_used = time.monotonic()  # a kept episode about to be admitted: evicted last
                return True
            self._evict_for(nbytes, prefetches=False)
            if self._reserved + nbytes > self.byte_budget:
                return False
            self._new_entry(ep, nbytes, True, job)
            return True

    def admit(self, episode_index: int, *, job: FetchJob, timeout: float | None = None) -> bool:
        """Pin an episode for the active pool, reserving and fetching it if needed; may wait for
        room. A retired episode still held is taken back with its payload, without a fetch. The
        pin is dropped by :meth:`retire`.

        Returns:
            bool: True when the episode's payload was reused (it had been retired).

        Raises:
            ByteBudgetError: the episode is larger than the whole budget (nothing is fetched).
            TimeoutError: no room within ``timeout`` seconds.
            RuntimeError: the cache was closed while waiting.
        """
        ep = int(episode_index)
        nbytes = self.check_fits(ep, job)
        t0 = time.perf_counter()
        deadline = None if timeout is None else time.monotonic() + timeout
        reused = False
        with self._cond:
            while True:
                self._check_open()
                entry = self._entries.get(ep)
                if entry is not None:
                    if entry.retired:
                        reused = True
                        self.stats.reuses += 1
                        self.stats.reused_bytes += entry.resident_nbytes or entry.nbytes
                    entry.retired = entry.kept = False
                    entry.pins += 1
                    entry.speculative = False
                    entry.last_used = time.monotonic()
                    self._emit("admit", ep)
                    break
                self._evict_for(nbytes, prefetches=True)
                if self._reserved + nbytes <= self.byte_budget:
                    entry = self._new_entry(ep, nbytes, False, job)
                    entry.pins += 1
                    self._emit("admit", ep)
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(
                        f"episode {ep}: no room in the byte budget ({self._reserved}/{self.byte_budget} "
                        f"bytes reserved) after {timeout} s"
                    )
                self._emit("admit_wait", ep)
                self._cond.wait(remaining)
            self.stats.admit_wait_s += time.perf_counter() - t0
        return reused

    def acquire(self, episode_index: int) -> None:
        """Take a decode lease on a held episode (released by :meth:`release`)."""
        ep = int(episode_index)
        with self._cond:
            self._check_open()
            entry = self._entries.get(ep)
            if entry is None:
                raise KeyError(f"episode {ep} is not held by the cache (admit it first)")
            entry.pins += 1
            entry.last_used = time.monotonic()

    def release(self, episode_index: int) -> None:
        """Drop one lease (decode lease or, via :meth:`retire`, the admission pin)."""
        ep = int(episode_index)
        with self._cond:
            entry = self._entries.get(ep)
            if entry is None:
                return
            entry.pins = max(0, entry.pins - 1)
            self._maybe_free(entry)
            self._emit("release", ep)
            self._cond.notify_all()

    def retire(self, episode_index: int) -> None:
        """The planner is done with the episode: drop its admission pin; once the last decode lease
        is released (and the fetch finished) the payload is kept, evictable, for a later admission."""
        ep = int(episode_index)
        with self._cond:
            entry = self._entries.get(ep)
            if entry is None:
                return
            entry.retired = True
            entry.pins = max(0, entry.pins - 1)
            self._maybe_free(entry)
            self._emit("retire", ep)
            self._cond.notify_all()

    def get(self, episode_index: int, *, timeout: float | None = None) -> EpisodePayload:
        """Wait for the episode's fetch and return its payload.

        Raises:
            KeyError: the episode is not held.
            TimeoutError: not finished within ``timeout`` seconds.
            SourceError: any fetch's source failure ended the stream (names its episode and file).
            Exception: the fetch's own error (typed error naming episode, camera and file).
        """
        ep = int(episode_index)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._check_open()
                entry = self._entries.get(ep)
                if entry is None:
                    raise KeyError(f"episode {ep} is not held by the cache")
                if entry.done:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"episode {ep}: fetch not finished after {timeout} s")
                self._cond.wait(remaining)
            entry.last_used = time.monotonic()
            if entry.error is not None:
                raise entry.error
            assert entry.result is not None
            return entry.result

    def close(self) -> None:
        """Drop everything, wake waiters (they raise), wait for running fetches to finish (not after
        a source failure ended the stream: those finish in the background, their results dropped)."""
        with self._cond:
            self._closed = True
            for entry in list(self._entries.values()):
                if entry.future is not None:
                    entry.future.cancel()
            self._entries.clear()
            self._reserved = 0
            self._resident = 0
            self._cond.notify_all()
            pool, self._pool = self._pool, None
        if pool is not None:  # after a source failure, a stalled read must not hold the error back
            pool.shutdown(wait=self._fatal is None, cancel_futures=True)

    def __enter__(self) -> EpisodeByteCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"EpisodeByteCache(budget={self.byte_budget}, reserved={self._reserved}, "
            f"resident={self._resident}, entries={len(self._entries)})"
        )
