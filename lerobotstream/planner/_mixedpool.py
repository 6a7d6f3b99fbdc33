"""The pool a worker pipeline reads, over every stream (dataset) of a pass: global episode ids.

:class:`MixedPool` presents the streams' pools to the worker pipeline as one pool over **global
episode ids** (``offset[d] + episode_index``), with the stream of each sample chosen by the
worker's mix sequence (:class:`~lerobotstream.planner._mixseq.Phases`; one stream: always it).
Its admissions and evictions are the streams' own, moved to the mixed positions, so the
pipeline, byte cache and decoders serve every stream at once. Resident bytes stay within the
worker's budget because each stream's pool keeps to its own share of it (the shares sum to the
budget).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lerobotstream.planner._mixseq import Phases
from lerobotstream.planner._pool import EpisodePool, PoolEvent

__all__ = ["DatasetStream", "MixedPool"]


class DatasetStream:
    """One dataset's anchors in one worker: its pools (``plan.iter_pools``), chained over epochs
    when endless (an endless elastic remainder: its share of the remainder, then plain epochs)."""

    def __init__(self, plan: Any, offset: int, epoch: int, start: int, repeat: bool) -> None:
        self.plan, self.offset, self.repeat = plan, int(offset), bool(repeat)
        self.pools = plan.iter_pools(epoch, start, repeat=repeat)  # the first one skipped to start
        self.pool: EpisodePool | None = next(self.pools, None)
        if self.pool is not None:
            self.pool.drain_events()

    def resident(self) -> np.ndarray:
        return np.empty(0, np.int64) if self.pool is None else self.pool.resident() + self.offset

    def frontier(self, k: int) -> np.ndarray:
        return np.empty(0, np.int64) if self.pool is None else self.pool.frontier(k) + self.offset

    def finished(self) -> np.ndarray:
        """Global ids of the episodes this epoch has finished (empty where the pool cannot tell: a
        partition chain)."""
        done = getattr(self.pool, "finished", None)
        return np.empty(0, np.int64) if done is None else done() + self.offset

    def take(self, count: int) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str, int]]]:
        """``count`` anchors (global episode ids, frames) and their events as ``(j, kind, global
        episode)``: ``j`` = anchors of this call before the event (an admission at j is drawn from
        anchor j on; an eviction at j follows anchor j-1)."""
        eps, frs, evs = [], [], []
        got = 0
        while got < count and self.pool is not None:
            q0 = self.pool.emitted
            e, f = self.pool.next_anchors(count - got)
            evs += [
                (got + ev.position - q0, ev.kind, ev.episode_index + self.offset) for ev in self.pool.drain_events()
            ]
            eps.append(e)
            frs.append(f)
            got += len(e)
            if got < count:
                pool = next(self.pools, None)
                if pool is None:
                    raise AssertionError("a dataset stream was asked past its end")
                self.pool = pool
                self.pool.drain_events()
                evs += [(got, "admit", int(ep) + self.offset) for ep in self.pool.resident().tolist()]
        ep = np.concatenate(eps) + self.offset if eps else np.empty(0, np.int64)
        fr = np.concatenate(frs) if frs else np.empty(0, np.int64)
        return ep, fr, evs


class MixedPool:
    """The pool interface of :class:`~lerobotstream.planner.EpisodePool` over a mixture (global
    episode ids): one per finite epoch, or one endless pool with ``repeat=True``.

    Args:
        streams: one ``DatasetStream`` per dataset, positioned at the worker's start.
        phases: the worker's mix sequence, positioned at the same start.
        emitted: samples of the worker's stream before the start (positions count from there).
    """

    def __init__(self, streams: list[DatasetStream], phases: Phases, emitted: int) -> None:
        self.streams, self.phases = streams, phases
        self._emitted = int(emitted)
        self._events: list[PoolEvent] = []

    @property
    def emitted(self) -> int:
        return self._emitted

    def resident(self) -> np.ndarray:
        parts = [s.resident() for s in self.streams]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def finished(self) -> np.ndarray:
        """Global ids of the episodes whose every frame the current epoch has emitted (a worker
        resumed mid-epoch: they come back in the next epoch), int64."""
        parts = [s.finished() for s in self.streams]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def frontier(self, k: int) -> np.ndarray:
        """The next admissions of every dataset, interleaved (prefetch hints), int64 (<= k,)."""
        fronts = [s.frontier(k).tolist() for s in self.streams]
        out: list[int] = []
        for i in range(k):
            out += [f[i] for f in fronts if i < len(f)]
        return np.asarray(out[:k], dtype=np.int64)

    def drain_events(self) -> list[PoolEvent]:
        out, self._events = self._events, []
        return out

    def next_anchors(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``n`` anchors (global episode id int64 (k,), frame int64 (k,)); k < n at the end."""
        which = self.phases.take(int(n))
        k = len(which)
        out_ep = np.empty(k, np.int64)
        out_fr = np.empty(k, np.int64)
        events: list[tuple[int, int, str, int]] = []
        for d in np.unique(which).tolist():
            pos = np.flatnonzero(which == d)
            ep, fr, evs = self.streams[d].take(len(pos))
            out_ep[pos], out_fr[pos] = ep, fr
            for j, kind, gid in evs:
                if kind == "evict":
                    local = int(pos[j - 1]) + 1 if j > 0 else 0
                else:
                    local = int(pos[j]) if j < len(pos) else k
                events.append((local, 0 if kind == "evict" else 1, kind, gid))
        events.sort(key=lambda e: (e[0], e[1]))
        self._events += [PoolEvent(self._emitted + p, kind, gid) for p, _, kind, gid in events]
        self._emitted += k
        return out_ep, out_fr

    def skip(self, n: int) -> int:
        got = 0
        while got < n:
            ep, _ = self.next_anchors(min(4096, n - got))
            got += len(ep)
            if len(ep) == 0:
                break
        self._events = []
        return got
