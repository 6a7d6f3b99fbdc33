"""One worker's exact-coverage episode pool: global episode ids over the Cython ``PoolCore``."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from lerobotstream.planner._poolcore import STRATEGIES, PoolCore, StrategyInfo

__all__ = ["EpisodePool", "PoolEvent", "STRATEGIES", "STRATEGY_IDS", "StrategyInfo", "strategy_info"]

#: name -> id (the strategy's position in the table, part of the seeds), from ``STRATEGIES``
STRATEGY_IDS = {name: s.id for name, s in STRATEGIES.items()}


def strategy_info(name: str) -> StrategyInfo:
    """The table entry of sampling strategy ``name`` (``id``, ``in_order``, ``help``): what a plan
    asks of a strategy (``in_order``: admit episodes in ascending order, no seeded order).

    Raises:
        ValueError: ``name`` is not a strategy of the table.
    """
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown sampling strategy {name!r}: one of {tuple(STRATEGIES)}") from None


class PoolEvent(NamedTuple):
    """An admission or eviction.

    Fields:
        position (int): samples the pool had emitted when it happened (an eviction at position p
            follows the episode's last anchor, number p-1; an episode admitted at p can be drawn
            from sample p on).
        kind (str): ``"admit"`` (bytes must be resident before its first anchor) or ``"evict"``
            (its last anchor was emitted: release its bytes once that anchor is decoded).
        episode_index (int): dataset episode index.
    """

    position: int
    kind: str
    episode_index: int


_KINDS = ("admit", "evict")


class EpisodePool:
    """Exact-coverage pool of one worker for one epoch (built by ``WorkerPlan.pool``).

    Every frame of the worker's episodes is emitted exactly once; at most ``pool_size`` episodes
    and ``byte_budget`` bytes are resident; episodes are admitted strictly in the seeded admission
    order (the next one waits until it fits) and leave right after their last frame.

    Args:
        episode_indices (np.ndarray): int64 (E,) dataset episode indices of the worker.
        lengths (np.ndarray): int64 (E,) frames per episode (>= 1).
        nbytes (np.ndarray): int64 (E,) resident bytes per episode (zeros when unbounded; -1 where
            not known yet: ``size_of`` is asked when admission reaches the episode, and the
            answer is written into this array, so pools over the same array share what is known).
        order (np.ndarray): int64 (E,) admission order, positions into the arrays above.
        pool_size (int): maximum resident episodes.
        byte_budget (int | None): maximum resident bytes, or None.
        strategy (str): a name of the strategy table (``STRATEGIES``: ``remaining``,
            ``round_robin``, ``sequential``).
        draw_words (np.ndarray): uint64 (4,) seed words of the draws.
        frame_maps (dict[int, np.ndarray] | None): elastic remainders: for a local episode whose
            ``lengths`` entry counts only its remaining frames, the int64 ascending frame indices
            those are (pool-local frame k is frame ``frame_maps[i][k]`` of the episode).
        size_of (Callable[[int], int] | None): sizes on demand: ``size_of(local episode) -> int``
            bytes for an entry of ``nbytes`` that is -1 (``WorkerPlan.size_of``: the plan's
            ``planner._sizes.SizeProvider``, checked against its budget), asked when admission
            reaches the episode. The pool reads no file: the provider's typed errors (naming
            episode, camera, file) come out of the ``fill`` / ``next_anchors`` that admitted it.
    """

    def __init__(
        self,
        episode_indices,
        lengths,
        nbytes,
        order,
        pool_size,
        byte_budget,
        strategy,
        draw_words,
        frame_maps=None,
        size_of=None,
    ):
        self.episode_indices = np.ascontiguousarray(episode_indices, dtype=np.int64)
        self.pool_size = int(pool_size)
        self.byte_budget = byte_budget
        self.strategy = strategy
        self._core = PoolCore(
            np.ascontiguousarray(lengths, dtype=np.int64),
            np.ascontiguousarray(nbytes, dtype=np.int64),
            np.ascontiguousarray(order, dtype=np.int64),
            self.pool_size,
            -1 if byte_budget is None else int(byte_budget),
            strategy_info(strategy).id,
            np.ascontiguousarray(draw_words, dtype=np.uint64),
            size_of,
        )
        self._maps = dict(frame_maps or {})
        self._mapped: np.ndarray | None = None
        if self._maps:  # one flat table: frame = flat[base[local] + k]
            n = len(self.episode_indices)
            self._mapped = np.zeros(n, dtype=bool)
            self._base = np.zeros(n, dtype=np.int64)
            parts, at = [], 0
            for local in sorted(self._maps):
                self._mapped[local] = True
                self._base[local] = at
                parts.append(np.asarray(self._maps[local], dtype=np.int64))
                at += len(parts[-1])
            self._flat = np.concatenate(parts)

    def _map(self, local: np.ndarray, frames: np.ndarray) -> None:
        """Pool-local frames of local episodes → episode frames, in place."""
        if self._mapped is None:
            return
        sel = np.flatnonzero(self._mapped[local])
        if len(sel):
            frames[sel] = self._flat[self._base[local[sel]] + frames[sel]]

    def remaining_state(self) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """Where this epoch stands (elastic resume): ``(untouched, started, frames)`` — dataset
        episode indices not yet admitted (int64, admission order), those admitted with frames left
        (int64) and, for each of those, the episode frames it has not emitted yet (int64,
        ascending). Every other episode of the pool has emitted all its frames."""
        n_admitted, res, frames = self._core.remaining_state()
        order = self._core.order_array()
        out = []
        for local, fr in zip(res.tolist(), frames):
            fr = np.asarray(fr, dtype=np.int64)
            self._map(np.full(len(fr), local, dtype=np.int64), fr)
            out.append(np.sort(fr))
        return self.episode_indices[order[n_admitted:]], self.episode_indices[res], out

    def fill(self, out_episode: np.ndarray, out_frame: np.ndarray) -> int:
        """Write up to ``len(out_episode)`` anchors into the caller's int64 arrays; returns the
        count (fewer means the epoch ended). The batched fast path (``python -m tools.microbench planner``)."""
        k = self._core.fill(out_episode, out_frame, min(len(out_episode), len(out_frame)))
        if self._mapped is not None:
            self._map(out_episode[:k], out_frame[:k])
        out_episode[:k] = self.episode_indices[out_episode[:k]]
        return k

    def next_anchors(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``n`` anchors: (episode_index int64 (k,), frame_index int64 (k,)), k < n at the end."""
        ep = np.empty(n, dtype=np.int64)
        fr = np.empty(n, dtype=np.int64)
        k = self.fill(ep, fr)
        return ep[:k], fr[:k]

    def skip(self, n: int) -> int:
        """Draw and discard ``n`` anchors (resume fast-forward, no I/O); returns how many were drawn."""
        return self._core.skip(n)

    def drain_events(self) -> list[PoolEvent]:
        """Admissions and evictions since the last drain, in order."""
        pos, kind, ep = self._core.drain_events()
        ids = self.episode_indices
        return [PoolEvent(int(p), _KINDS[k], int(ids[e])) for p, k, e in zip(pos, kind, ep)]

    def resident(self) -> np.ndarray:
        """Dataset episode indices resident now (int64)."""
        return self.episode_indices[self._core.resident()]

    def finished(self) -> np.ndarray:
        """Dataset episode indices whose every frame this epoch has emitted (int64; read-only)."""
        admitted = self._core.order_array()[: self._core.num_admitted]
        return self.episode_indices[np.setdiff1d(admitted, self._core.resident())]

    def frontier(self, k: int) -> np.ndarray:
        """The next ``k`` episodes to be admitted, in admission order (int64): what to prefetch."""
        return self.episode_indices[self._core.frontier(k)]

    @property
    def emitted(self) -> int:
        """Anchors emitted so far in this epoch."""
        return self._core.emitted

    @property
    def remaining(self) -> int:
        """Frames of resident episodes not yet emitted."""
        return self._core.total_remaining

    @property
    def resident_bytes(self) -> int:
        return self._core.resident_bytes

    @property
    def exhausted(self) -> bool:
        """True once every frame of the epoch has been emitted."""
        return self._core.total_remaining == 0

    def __iter__(self):
        """Yields ``(episode_index, frame_index)`` Python ints until the epoch ends."""
        while True:
            ep, fr = self.next_anchors(256)
            yield from zip(ep.tolist(), fr.tolist())
            if len(ep) < 256:
                return
