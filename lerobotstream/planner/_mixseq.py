"""Mixture weights and the seeded mix sequence: which dataset of a mixture gives each next sample
of one worker (blocks, phases: :class:`MixSequence`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._poolcore import shuffled_order
from lerobotstream.planner._seeds import TAG_MIXTURE, seed_words

__all__ = ["MixSequence", "WEIGHT_SCALE", "integer_weights", "mixture_shares"]

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
    for i in np.argsort(-(exact - out), kind="stable")[:short]:
        out[i] += 1
    return [int(x) for x in out]


def mixture_shares(weights: Sequence[float]) -> np.ndarray:
    """Each dataset's share of a worker's byte budget and pool: half split evenly, half by weight,
    so a lightly weighted dataset still holds its largest episodes. float64 (N,), sums to 1."""
    w = np.asarray(list(weights), dtype=np.float64)
    w = w / w.sum()
    return 0.5 / len(w) + 0.5 * w


class MixSequence:
    """The seeded mix sequence of one worker: which dataset gives each of its samples, across
    phases (finite) or in one endless phase.

    A phase mixes the datasets with samples left, by their weights, in blocks of ``K`` samples:
    the first ``b`` blocks hold ``w * b * K // total`` samples of each dataset (the heaviest one
    takes the rounding), each block in a seeded permutation. A phase ends when its first capped
    dataset is exhausted; the next phase mixes the ones left. ``counts``, ``position_of`` and
    ``choices`` count positions inside the current phase.

    Args:
        weights: integer weights (``integer_weights``), one per dataset; zero weights never draw.
        caps: samples each dataset gives in this worker (None each: endless); a dataset with a cap
            of 0 never draws.
        words: entropy (ints >= 0: seed, epoch, rank, world size, worker, workers); a phase's
            permutations add its number.
        start: samples of the worker's stream already consumed.
        block: samples per block, ``K``; raised to at least the count that keeps the heaviest
            dataset's per-block count non-negative.

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
        self.skip(int(start))

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
        self._words = [*self.words, self.phase]
        #: the one dataset with a weight, if only one has (a stream of one dataset: no draws)
        self._only = self.heavy if len(act) == 1 else None
        ends = [self.position_of(d, int(self.caps[d] - self.given[d])) for d in act if self.caps[d] is not None]
        self.length = min(ends) if ends else None  # the phase ends when its first dataset is exhausted

    def _advance_phase(self) -> None:
        self.given += self.counts(self.r)
        self.phase += 1
        self._enter()

    def skip(self, count: int) -> None:
        """Consume ``count`` samples without producing them."""
        while count > 0 and self.live:
            room = count if self.length is None else min(count, self.length - self.r)
            self.r += room
            count -= room
            if self.length is not None and self.r >= self.length:
                self._advance_phase()
        if count > 0:
            raise ResumeStateError(f"resume offset exceeds the mixture's samples by {count}")

    def consumed(self) -> np.ndarray:
        """Samples given by each dataset so far, int64 (N,)."""
        if not self.live:
            return self.given.copy()
        return self.given + self.counts(self.r)

    def take(self, count: int) -> np.ndarray:
        """The datasets of the next ``count`` samples (fewer when every dataset is exhausted), int64."""
        parts = []
        while count > 0 and self.live:
            room = count if self.length is None else min(count, self.length - self.r)
            parts.append(self.choices(self.r, self.r + room))
            self.r += room
            count -= room
            if self.length is not None and self.r >= self.length:
                self._advance_phase()
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    # --- blocks of the current phase ----------------------------------------------------------------
    def cumulative(self, b: int) -> np.ndarray:
        """Samples of each dataset in the phase's first ``b`` blocks, int64 (N,)."""
        pos = int(b) * self.block
        out = np.array([w * pos // self.total for w in self.w], dtype=np.int64)
        out[self.heavy] = pos - (int(out.sum()) - int(out[self.heavy]))
        return out

    def block_choices(self, b: int) -> np.ndarray:
        """Dataset of each position of the phase's block ``b``, int64 (K,): a seeded permutation
        drawn with the planner's own generator (``_poolcore.shuffled_order``, xoshiro256** from
        :func:`seed_words`), so the mix does not change with the numpy version."""
        if self._cache is not None and self._cache[0] == b:
            return self._cache[1]
        if self._only is not None:  # what the permutation below gives: every position is that dataset's
            out = np.full(self.block, self._only, dtype=np.int64)
            self._cache = (b, out)
            return out
        counts = self.cumulative(b + 1) - self.cumulative(b)
        base = np.repeat(np.arange(self.n, dtype=np.int64), counts)
        out = base[shuffled_order(seed_words(*self._words, TAG_MIXTURE, int(b)), len(base))]
        self._cache = (b, out)
        return out

    def counts(self, r: int) -> np.ndarray:
        """Samples of each dataset among the phase's positions ``[0, r)``, int64 (N,)."""
        b, j = divmod(int(r), self.block)
        out = self.cumulative(b)
        if j:
            out = out + np.bincount(self.block_choices(b)[:j], minlength=self.n)
        return out

    def position_of(self, d: int, m: int) -> int:
        """The smallest phase position ``r`` with ``counts(r)[d] >= m`` (m >= 1: one past dataset
        d's m-th sample of the phase).

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
        return np.concatenate(parts) if parts else np.empty(0, np.int64)
