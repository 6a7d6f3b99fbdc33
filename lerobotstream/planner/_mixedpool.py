"""The pool a worker pipeline reads, over every stream (dataset) of a pass: global episode ids.

:class:`MixedPool` presents the streams' pools to the worker pipeline as one pool over **global
episode ids** (``offset[d] + episode_index``), with the stream of each sample chosen by the
worker's mix sequence (:class:`~lerobotstream.planner._mixseq.MixSequence`; one stream: always it).
Each stream's pools come from its plan (``plan.iter_pools``), chained over epochs when endless (an
endless elastic remainder: its share of the remainder, then plain epochs). Its admissions and
evictions are the streams' own, moved to the mixed positions, so the pipeline, byte cache and
decoders serve every stream at once. Resident bytes stay within the worker's budget because each
stream's pool keeps to its own share of it (the shares sum to the budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lerobotstream.planner._mixseq import MixSequence
from lerobotstream.planner._pool import PoolEvent

__all__ = ["MixedPool"]

_NONE = np.empty(0, np.int64)


class MixedPool:
    """The pool interface of :class:`~lerobotstream.planner._poolcore.EpisodePool` over a mixture
    (global episode ids): one per finite epoch, or one endless pool with ``repeat=True``.

    Args:
        plans: one plan per stream (``WorkerPlan`` or ``ChainPlan``) of the worker.
        offsets: global episode id offset per stream.
        epoch: the epoch of the worker's start.
        starts: anchors of each stream the worker gave before its start (its pools skip them).
        repeat: endless (each stream's pools chained over epochs).
        phases: the worker's mix sequence, positioned at the same start.
        emitted: samples of the worker's stream before the start (positions count from there).
    """

    def __init__(
        self,
        plans: Sequence[Any],
        offsets: Sequence[int],
        epoch: int,
        starts: Sequence[int],
        repeat: bool,
        phases: MixSequence,
        emitted: int,
    ) -> None:
        self.offsets = [int(o) for o in offsets]
        self._pools = [plan.iter_pools(epoch, int(s), repeat=bool(repeat)) for plan, s in zip(plans, starts)]
        self._current = [next(pools, None) for pools in self._pools]  # the first ones skipped to start
        for pool in self._current:
            if pool is not None:
                pool.drain_events()
        self.phases = phases
        self._emitted = int(emitted)
        self._events: list[PoolEvent] = []

    @property
    def emitted(self) -> int:
        return self._emitted

    def _each(self, ask: str, *args: Any) -> list[np.ndarray]:
        """``pool.<ask>(*args)`` of each stream's current pool, as global ids (empty where none, or
        where the pool cannot tell: a group chain has no ``finished``)."""
        out = []
        for pool, off in zip(self._current, self.offsets):
            got = getattr(pool, ask, None)
            out.append(_NONE if got is None else got(*args) + off)
        return out

    def resident(self) -> np.ndarray:
        parts = self._each("resident")
        return np.concatenate(parts) if parts else _NONE

    def finished(self) -> np.ndarray:
        """Global ids of the episodes whose every frame the current epoch has emitted (a worker
        resumed mid-epoch: they come back in the next epoch), int64."""
        parts = self._each("finished")
        return np.concatenate(parts) if parts else _NONE

    def frontier(self, k: int) -> np.ndarray:
        """The next admissions of every dataset, interleaved (prefetch hints), int64 (<= k,)."""
        fronts = [f.tolist() for f in self._each("frontier", k)]
        out: list[int] = []
        for i in range(k):
            out += [f[i] for f in fronts if i < len(f)]
        return np.asarray(out[:k], dtype=np.int64)

    def drain_events(self) -> list[PoolEvent]:
        out, self._events = self._events, []
        return out

    def _take(self, d: int, count: int) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str, int]]]:
        """``count`` anchors of stream ``d`` (global episode ids, frames) and their events as ``(j,
        kind, global episode)``: ``j`` = anchors of this call before the event (an admission at j is
        drawn from anchor j on; an eviction at j follows anchor j-1)."""
        off, eps, frs, evs = self.offsets[d], [], [], []
        got = 0
        while got < count and self._current[d] is not None:
            pool = self._current[d]
            q0 = pool.emitted
            e, f = pool.next_anchors(count - got)
            evs += [(got + ev.position - q0, ev.kind, ev.episode_index + off) for ev in pool.drain_events()]
            eps.append(e)
            frs.append(f)
            got += len(e)
            if got < count:
                pool = self._current[d] = next(self._pools[d], None)
                if pool is None:
                    raise AssertionError("a dataset stream was asked past its end")
                pool.drain_events()
                evs += [(got, "admit", int(ep) + off) for ep in pool.resident().tolist()]
        ep = np.concatenate(eps) + off if eps else _NONE
        fr = np.concatenate(frs) if frs else _NONE
        return ep, fr, evs

    def next_anchors(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``n`` anchors (global episode id int64 (k,), frame int64 (k,)); k < n at the end."""
        which = self.phases.take(int(n))
        k = len(which)
        out_ep = np.empty(k, np.int64)
        out_fr = np.empty(k, np.int64)
        events: list[tuple[int, int, str, int]] = []
        for d in np.unique(which).tolist():
            pos = np.flatnonzero(which == d)
            ep, fr, evs = self._take(d, len(pos))
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
