"""Mixtures: the weights and the seeded mix sequence (which dataset gives each next sample of one
worker: :class:`MixSequence`), which is also the pool the worker pipeline reads over every stream
of a pass (:meth:`MixSequence.play`: global episode ids ``offset[d] + episode_index``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._layout import TAG_MIXTURE, seed_words
from lerobotstream.planner._poolcore import PoolEvent, shuffled_order

__all__ = ["MixSequence", "WEIGHT_SCALE", "integer_weights", "mixture_shares"]

_NONE = np.empty(0, np.int64)

WEIGHT_SCALE = 1 << 40  # integer weights: exact block counts, no float drift over billions of samples


def integer_weights(weights: Sequence[float]) -> list[int]:
    """Weights as integers summing to :data:`WEIGHT_SCALE` (largest-remainder rounding).

    Raises:
        ValueError: a weight is negative, not finite, or all are zero.
    """
    w = np.asarray(list(weights), dtype=np.float64)
    if w.ndim != 1 or len(w) == 0 or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be finite numbers >= 0 with a positive sum, got {list(weights)}")
    exact = w / w.sum() * WEIGHT_SCALE
    out = np.floor(exact).astype(np.int64)
    short = WEIGHT_SCALE - int(out.sum())
    out[np.argsort(-(exact - out), kind="stable")[:short]] += 1
    return [int(x) for x in out]


def mixture_shares(weights: Sequence[float]) -> np.ndarray:
    """Each dataset's share of a worker's byte budget and pool: half split evenly, half by weight,
    so a lightly weighted dataset still holds its largest episodes. float64 (N,), sums to 1."""
    w = np.asarray(list(weights), dtype=np.float64)
    w = w / w.sum()
    return 0.5 / len(w) + 0.5 * w


class MixSequence:
    """The seeded mix sequence of one worker: which dataset gives each of its samples.

    A phase mixes the datasets with samples left by their weights in blocks of ``K`` samples: the
    first ``b`` blocks hold ``w * b * K // total`` of each (the heaviest takes the rounding), each
    block a seeded permutation. A phase ends when its first capped dataset is exhausted; the next
    mixes the ones left. ``counts``, ``position_of`` and ``choices`` count inside the current phase.

    Args:
        weights: integer weights, one per dataset (0: never draws).
        caps: samples each dataset gives in this worker (None: endless; 0: never draws).
        words: entropy (ints >= 0: seed, epoch, rank, world size, worker, workers).
        start: samples of the worker's stream already consumed.
        block: samples per block ``K`` (raised so the heaviest dataset's count stays >= 0).

    Raises:
        ValueError: a negative weight.
        ResumeStateError: ``start`` exceeds the samples of every phase.
    """

    def __init__(
        self,
        weights: Sequence[int],
        caps: Sequence[int | None],
        words: Sequence[int],
        start: int = 0,
        block: int = 64,
    ) -> None:
        self.weights = [int(x) for x in weights]
        if any(x < 0 for x in self.weights):
            raise ValueError(f"integer weights must be >= 0, got {self.weights}")
        self.caps = list(caps)
        self.words = [int(x) for x in words]
        self.n = len(self.weights)
        self._min_block = int(block)
        self.given = np.zeros(self.n, dtype=np.int64)  # samples given by each dataset before the phase
        self.phase = 0
        self._enter()
        over = self._walk(int(start))[0]
        if over > 0:
            raise ResumeStateError(f"resume offset exceeds the mixture's samples by {over}")
        self.emitted = int(start)  # samples of the worker's stream before the first :meth:`next_anchors`

    # --- phases -------------------------------------------------------------------------------------
    def _enter(self) -> None:
        """Start phase ``self.phase``: the datasets with samples left, by their weights."""
        act = [
            d for d in range(self.n) if self.weights[d] > 0 and (self.caps[d] is None or self.given[d] < self.caps[d])
        ]
        self.live = bool(act)  # False: every dataset is exhausted
        self.r = 0  # position inside the phase
        self.length = None  # samples in this phase (None: endless)
        self._cache: tuple[int, np.ndarray] | None = None
        if not act:
            return
        self.w = [self.weights[d] if d in act else 0 for d in range(self.n)]
        self.total = sum(self.w)
        self.heavy = int(np.argmax(self.w))
        # the heaviest dataset gets K - sum(floor(...)) >= K * w_max - (n - 1) per block
        need = -(-(self.n - 1) * self.total // max(1, self.w[self.heavy]))
        self.block = max(self._min_block, need, 1)
        #: the one dataset with a weight, if only one has (a stream of one dataset: no draws)
        self._only = self.heavy if len(act) == 1 else None
        ends = [self.position_of(d, int(self.caps[d] - self.given[d])) for d in act if self.caps[d] is not None]
        self.length = min(ends) if ends else None  # the phase ends when its first dataset is exhausted

    def _walk(self, count: int, keep: bool = False) -> tuple[int, np.ndarray]:
        """Move ``count`` samples on: (the count no dataset had left, the datasets of the samples
        moved over, int64, when ``keep``)."""
        parts = []
        while count > 0 and self.live:
            room = count if self.length is None else min(count, self.length - self.r)
            if keep:
                parts.append(self.choices(self.r, self.r + room))
            self.r += room
            count -= room
            if self.length is not None and self.r >= self.length:  # the next phase
                self.given += self.counts(self.r)
                self.phase += 1
                self._enter()
        return count, np.concatenate(parts) if parts else _NONE

    def consumed(self) -> np.ndarray:
        """Samples given by each dataset so far, int64 (N,)."""
        return self.given + self.counts(self.r) if self.live else self.given.copy()

    # --- blocks of the current phase ----------------------------------------------------------------
    def cumulative(self, b: int) -> np.ndarray:
        """Samples of each dataset in the phase's first ``b`` blocks, int64 (N,)."""
        pos = int(b) * self.block
        out = np.array([w * pos // self.total for w in self.w], dtype=np.int64)
        out[self.heavy] = pos - (int(out.sum()) - int(out[self.heavy]))
        return out

    def block_choices(self, b: int) -> np.ndarray:
        """Dataset of each position of the phase's block ``b``, int64 (K,): a seeded permutation
        (``_poolcore.shuffled_order``)."""
        if self._cache is None or self._cache[0] != b:
            if self._only is not None:  # what the permutation gives: every position is that dataset's
                out = np.full(self.block, self._only, dtype=np.int64)
            else:
                base = np.repeat(np.arange(self.n, dtype=np.int64), self.cumulative(b + 1) - self.cumulative(b))
                out = base[shuffled_order(seed_words(*self.words, self.phase, TAG_MIXTURE, int(b)), len(base))]
            self._cache = (b, out)
        return self._cache[1]

    def counts(self, r: int) -> np.ndarray:
        """Samples of each dataset among the phase's positions ``[0, r)``, int64 (N,)."""
        b, j = divmod(int(r), self.block)
        out = self.cumulative(b)
        if j:
            out = out + np.bincount(self.block_choices(b)[:j], minlength=self.n)
        return out

    def position_of(self, d: int, m: int) -> int:
        """The smallest phase position ``r`` with ``counts(r)[d] >= m``.

        Raises:
            ValueError: dataset ``d`` has no weight in this phase.
        """
        if m <= 0:
            return 0
        if self.w[d] == 0:
            raise ValueError(f"dataset {d} has weight 0 and never gives a sample")
        lo, hi = 0, 1
        while self.cumulative(hi)[d] < m:  # galloping: the block holding the m-th sample
            lo, hi = hi, hi * 2
        while lo < hi:
            mid = (lo + hi) // 2
            if self.cumulative(mid + 1)[d] >= m:
                hi = mid
            else:
                lo = mid + 1
        before = int(self.cumulative(lo)[d])
        where = np.flatnonzero(self.block_choices(lo) == d)
        return lo * self.block + int(where[m - before - 1]) + 1

    def choices(self, r0: int, r1: int) -> np.ndarray:
        """Dataset of each phase position in ``[r0, r1)``, int64."""
        parts = []
        r = int(r0)
        while r < r1:
            b, j = divmod(r, self.block)
            take = min(self.block - j, int(r1) - r)
            parts.append(self.block_choices(b)[j : j + take])
            r += take
        return np.concatenate(parts) if parts else _NONE

    # --- the worker's pool over every stream (global episode ids) ------------------------------------
    def play(self, plans: Sequence[Any], offsets: Sequence[int], epoch: int, repeat: bool) -> MixSequence:
        """This sequence as the ``EpisodePool`` interface over every stream of the worker, global ids
        ``offsets[d] + episode_index`` (one pool per finite epoch, or one endless): each stream plays
        its plan's group pools in turn (``plan.iter_pools`` of ``epoch``, past what the sequence
        consumed of it); events are the pools' own at the mixed positions, a pool's residents
        reported admitted where it starts. Each stream keeps its share of the worker's budget."""
        self.offsets = [int(o) for o in offsets]
        starts = self.consumed().tolist()  # each stream's anchors before the start
        self._pools = [plan.iter_pools(epoch, int(s), repeat=bool(repeat)) for plan, s in zip(plans, starts)]
        self._ahead: list[deque[Any]] = [deque() for _ in plans]  # pools built early by ``frontier``
        self._current = [next(pools, None) for pools in self._pools]  # the first ones skipped to start
        self._events: list[PoolEvent] = []
        return self

    def _each(self, ask: str) -> np.ndarray:
        """``pool.<ask>()`` of every stream's current pool, as global ids, int64."""
        parts = [
            _NONE if pool is None else getattr(pool, ask)() + off for pool, off in zip(self._current, self.offsets)
        ]
        return np.concatenate(parts) if parts else _NONE

    def resident(self) -> np.ndarray:
        return self._each("resident")

    def finished(self) -> np.ndarray:
        """Global ids of the episodes of the current pools whose every frame was emitted, int64."""
        return self._each("finished")

    def frontier(self, k: int) -> np.ndarray:
        """The next admissions of every dataset, interleaved (prefetch hints), int64 (<= k,); a
        stream's own looks into its following pools."""
        fronts = []
        for d, pool in enumerate(self._current):
            front = [] if pool is None else pool.frontier(k).tolist()
            ahead, i = self._ahead[d], 0
            while pool is not None and len(front) < k:
                if i == len(ahead):
                    nxt = next(self._pools[d], None)
                    if nxt is None:
                        break
                    ahead.append(nxt)
                front += ahead[i].resident().tolist() + ahead[i].frontier(k).tolist()
                i += 1
            fronts.append([e + self.offsets[d] for e in front[:k]])
        out: list[int] = []
        for i in range(k):
            out += [f[i] for f in fronts if i < len(f)]
        return np.asarray(out[:k], dtype=np.int64)

    def drain_events(self) -> list[PoolEvent]:
        out, self._events = self._events, []
        return out

    def _take(self, d: int, count: int) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str, int]]]:
        """``count`` anchors of stream ``d`` (global ids, frames) and their events ``(j, kind, global
        episode)``, ``j`` the anchors of this call before the event."""
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
                ahead = self._ahead[d]  # the next pool: one ``frontier`` built early, or a new one
                pool = self._current[d] = ahead.popleft() if ahead else next(self._pools[d], None)
                if pool is None:
                    raise AssertionError("a dataset stream was asked past its end")
                evs += [(got, "admit", int(ep) + off) for ep in pool.resident().tolist()]
        ep = np.concatenate(eps) + off if eps else _NONE
        fr = np.concatenate(frs) if frs else _NONE
        return ep, fr, evs

    def next_anchors(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``n`` anchors (global episode id int64 (k,), frame int64 (k,)); k < n at the end."""
        which = self._walk(int(n), keep=True)[1]
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
        self._events += [PoolEvent(self.emitted + p, kind, gid) for p, _, kind, gid in events]
        self.emitted += k
        return out_ep, out_fr
