"""Pool layouts: what each rank and DataLoader worker of one stream (dataset) plays in one pass.

A *pool layout* turns one stream's episodes and the run's topology (ranks, workers) into a
:class:`WorkerPlan` per (rank, logical worker): the episodes it owns, its pools, its share of the
rank's resources. It also knows how to continue a pass on another topology: from how many
anchors each old (rank, worker) gave (``remainder``) to what is left (a remainder), and from that
to the layout that plays it (``over``). A layout is pure (numpy and the C pool core; no I/O).

Two layouts (a new one is one more module, registered in ``_pass.LAYOUTS``, plus its test):

* :class:`EpisodeLayout` (here) — episodes sharded over the ranks by LPT on frame counts, then
  over each rank's workers by the same LPT; one exact-coverage pool per worker and epoch. Its
  remainder comes from replaying each old worker's pool to its count (:class:`Remainder`).
* ``PartitionLayout`` (:mod:`._partitions`) — canonical partitions whose orders do not depend on
  the topology; its remainder is each partition's offset, from counts.

Also here: the streams a layout is built from (:class:`StreamSpec`), the topology
(:class:`Topology`), and :class:`ChainPlan` (an endless remainder's share, then plain epochs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lerobotstream import constants
from lerobotstream.errors import ByteBudgetError, ShardingError
from lerobotstream.planner import _seeds
from lerobotstream.planner._pool import STRATEGY_IDS, EpisodePool
from lerobotstream.planner._poolcore import shuffled_order
from lerobotstream.planner._shards import lpt_shards

__all__ = ["ChainPlan", "EpisodeLayout", "Remainder", "StreamSpec", "Topology", "WorkerPlan", "read_pools", "share"]


def share(total: int | None, n: int) -> int | None:
    """One of ``n`` equal shares of ``total`` (at least 1; None stays None)."""
    return None if total is None else max(1, int(total) // n)


@dataclass(frozen=True)
class Topology:
    """What the DataLoaders of a run look like: ``rank`` of ``world_size`` ranks, ``num_workers``
    DataLoader workers per rank (0: in the training process), their ``batch_size`` and
    ``drop_last``, ``repeat`` (endless), ``equalize`` (``none`` | ``drop``)."""

    rank: int
    world_size: int
    num_workers: int
    batch_size: int = 1
    drop_last: bool = False
    repeat: bool = False
    equalize: str = "none"

    @property
    def num_shards(self) -> int:
        """Logical workers per rank: ``max(1, num_workers)`` (0 and 1 are one stream)."""
        return max(1, self.num_workers)


@dataclass(frozen=True, eq=False)
class StreamSpec:
    """One stream (dataset) of a planner, with the settings its layout plays it with.

    Fields:
        episode_indices (np.ndarray): int64, ascending: the episodes of the pass (>= 1 anchor each).
        lengths (np.ndarray): int64 anchors per episode (a remainder's: its frames left).
        digest (str): ``episodes_digest`` of the stream's selection.
        seed (int): the stream's order seed (a mixture derives one per dataset; a remainder its own).
        strategy (str): ``remaining``, ``round_robin`` or ``sequential``.
        pool_size (int | None): explicit pool size (per worker; per partition with partitions);
            None: the default rule (32 per rank over the workers used).
        byte_budget (int | None): the stream's byte budget per rank (per partition), bytes.
        video_decoder_cache_size (int | None): open-decoder cap per rank.
        sizes: ``sizes(episode_index) -> bytes`` (``EpisodeSizes``: on demand), or None.
        partitions (int | None): canonical partitions (``PartitionLayout``), None: ``EpisodeLayout``.
        full_indices, full_lengths (np.ndarray): the whole selection (what "whole episode" means
            for a remainder); default: ``episode_indices`` / ``lengths``.
    """

    episode_indices: np.ndarray
    lengths: np.ndarray
    digest: str
    seed: int
    strategy: str = constants.DEFAULT_SAMPLING_STRATEGY
    pool_size: int | None = None
    byte_budget: int | None = None
    video_decoder_cache_size: int | None = None
    sizes: Callable[[int], int] | None = None
    partitions: int | None = None
    full_indices: np.ndarray | None = None
    full_lengths: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.full_indices is None:
            object.__setattr__(self, "full_indices", self.episode_indices)
            object.__setattr__(self, "full_lengths", self.lengths)

    @property
    def kind(self) -> str:
        """The layout that plays it (a key of ``_pass.LAYOUTS``)."""
        return "episodes" if self.partitions is None else "partitions"

    def but(self, **changes: Any) -> StreamSpec:
        return replace(self, **changes)


def read_pools(pools: Iterator[Any], limit: int | None) -> Iterator[tuple[int, int]]:
    """``(episode, frame)`` of ``pools`` read in turn, each to its end or to ``limit`` anchors of
    its epoch (``pool.emitted`` counts from the epoch start; None: no limit)."""
    for pool in pools:
        while True:
            want = 256 if limit is None else min(256, limit - pool.emitted)
            if want <= 0:
                break
            ep, fr = pool.next_anchors(want)
            yield from zip(ep.tolist(), fr.tolist())
            if len(ep) < want:
                break


class WorkerPlan:
    """One worker shard of one rank of one stream: its episodes and its share of the resources.

    Attributes:
        worker (int): logical worker id, ``0 <= worker < num_shards``.
        rank (int): the rank.
        episode_indices (np.ndarray): int64 dataset episode indices owned (sorted; empty = idle).
        lengths (np.ndarray): int64 frames per owned episode.
        nbytes (np.ndarray): int64 exact synthesized bytes per owned episode (zeros if no budget;
            -1 where not sized yet: sizes on demand).
        num_frames (int): frames per epoch.
        pool_size (int): resident episodes at most.
        byte_budget (int | None): resident bytes at most (bytes).
        video_decoder_cache_size (int | None): the worker's share of the decoder LRU.
        where (str): what a size error of this plan is prefixed with (a mixture's dataset).
    """

    def __init__(self, layout: EpisodeLayout, worker: int, positions: np.ndarray, rank: int) -> None:
        self._layout = layout
        self.worker, self.rank = int(worker), int(rank)
        self.episode_indices = layout.episode_indices[positions]
        self.lengths = layout.lengths[positions]
        self.num_frames = int(self.lengths.sum())
        maps = layout.frame_maps
        self.frame_maps = {i: maps[e] for i, e in enumerate(self.episode_indices.tolist()) if e in maps} if maps else {}
        n = layout.share_count(self.rank)
        spec = layout.spec
        self.pool_size = (
            spec.pool_size if spec.pool_size is not None else max(1, constants.DEFAULT_EPISODE_POOL_SIZE_PER_RANK // n)
        )
        self.byte_budget = share(spec.byte_budget, n)
        self.video_decoder_cache_size = share(spec.video_decoder_cache_size, n)
        self.where = ""
        self.nbytes = self._sizes(
            f"rank budget {spec.byte_budget} bytes split over {n} worker(s)", "or use fewer DataLoader workers"
        )

    # --- sizes ------------------------------------------------------------------------------------
    def _sizes(self, budget_is: str, advice: str) -> np.ndarray:
        """Sizes of this plan's episodes, int64: zeros without a budget; -1 each with sizes on
        demand (``EpisodeSizes``: filled in as admission reaches them, :meth:`size_of`); else
        every one now (an eager callable), checked.

        Raises:
            ByteBudgetError: (eager sizes) a negative size, or an episode larger than the budget.
        """
        self._budget_is, self._advice = budget_is, advice
        sizes = self._layout.spec.sizes
        if sizes is None or self.byte_budget is None:
            return np.zeros(len(self.episode_indices), dtype=np.int64)
        if self.sizes_on_demand:
            return np.full(len(self.episode_indices), -1, dtype=np.int64)
        nbytes = np.array([int(sizes(int(e))) for e in self.episode_indices], dtype=np.int64)
        for local in np.flatnonzero((nbytes < 0) | (nbytes > self.byte_budget))[:1].tolist():
            self._check(int(self.episode_indices[local]), int(nbytes[local]))
        return nbytes

    @property
    def sizes_on_demand(self) -> bool:
        """True when episode sizes are computed as admission reaches them (``EpisodeSizes``)."""
        return self.byte_budget is not None and getattr(self._layout.spec.sizes, "on_demand", False)

    def size_of(self, local: int) -> int:
        """Bytes of this plan's local episode ``local`` (the pools call it on admission)."""
        return self.episode_size(int(self.episode_indices[local]))

    def episode_size(self, episode_index: int) -> int:
        """Bytes of episode ``episode_index``, checked against the plan's budget (what the byte
        cache reserves for it; 0 without a budget).

        Raises:
            ByteBudgetError: a negative size, or larger than the plan's whole byte budget.
        """
        sizes = self._layout.spec.sizes
        n = 0 if self.byte_budget is None or sizes is None else int(sizes(int(episode_index)))
        self._check(int(episode_index), n)
        return n

    def _check(self, e: int, n: int) -> None:
        if n < 0:
            msg = f"episode {e} reports a negative byte size"
        elif n > self.byte_budget:
            msg = (
                f"episode {e} needs {n} bytes ({n / 2**30:.3f} GiB) of synthesized MP4 but worker "
                f"{self.worker} of rank {self.rank} has a byte budget of {self.byte_budget} bytes "
                f"({self.byte_budget / 2**30:.3f} GiB; {self._budget_is}); raise the byte "
                f"budget (streaming_byte_budget_gb) {self._advice}"
            )
        else:
            return
        if self.where:
            msg = f"{self.where}: {msg}"
        if n < 0:
            raise ByteBudgetError(msg, episode_index=e)
        raise ByteBudgetError(msg, episode_index=e, nbytes=n, byte_budget=self.byte_budget)

    # --- orders and pools -------------------------------------------------------------------------
    def _words(self, epoch: int, tag: int) -> np.ndarray:
        lay = self._layout
        return _seeds.seed_words(
            lay.spec.seed,
            epoch,
            self.rank,
            lay.topo.world_size,
            self.worker,
            lay.topo.num_shards,
            STRATEGY_IDS[lay.spec.strategy],
            self.pool_size,
            0 if self.byte_budget is None else self.byte_budget + 1,
            tag,
        )

    def _order(self, epoch: int) -> np.ndarray:
        if self._layout.spec.strategy == "sequential":  # ascending episode_index, every epoch alike
            return np.arange(len(self.lengths), dtype=np.int64)
        return shuffled_order(self._words(epoch, _seeds.TAG_ADMISSION), len(self.lengths))

    def admission_order(self, epoch: int) -> np.ndarray:
        """Dataset episode indices in this epoch's admission order (int64)."""
        return self.episode_indices[self._order(epoch)]

    def pool(self, epoch: int) -> EpisodePool:
        """A fresh exact-coverage pool for ``epoch`` (positioned at the epoch's first anchor)."""
        return EpisodePool(
            self.episode_indices,
            self.lengths,
            self.nbytes,
            self._order(epoch),
            self.pool_size,
            self.byte_budget,
            self._layout.spec.strategy,
            self._words(epoch, _seeds.TAG_DRAWS),
            self.frame_maps,
            self.size_of if self.sizes_on_demand else None,
        )

    def iter_pools(self, epoch: int = 0, start_offset: int = 0, *, repeat: bool = False) -> Iterator[Any]:
        """Pools positioned at the stream start: the first one already skipped ``start_offset``
        anchors (its events drained), one per epoch; with ``repeat=False`` only ``epoch``'s.

        ``start_offset`` may exceed one epoch with ``repeat=True`` (it rolls into later epochs).
        The caller reads each pool to exhaustion, or to ``WorkerStart.limit`` anchors of the
        epoch (finite mode with ``equalize``/``drop_last``; ``pool.emitted`` counts from the epoch start).
        """
        if self.num_frames == 0:
            return
        if repeat:
            epoch, start_offset = epoch + start_offset // self.num_frames, start_offset % self.num_frames
        first = True
        while True:
            pool = self.pool(epoch)
            if first and start_offset:
                pool.skip(start_offset)
                pool.drain_events()
            first = False
            yield pool
            if not repeat:
                return
            epoch += 1

    def iter_anchors(
        self, epoch: int = 0, start_offset: int = 0, *, repeat: bool = False, limit: int | None = None
    ) -> Iterator[tuple[int, int]]:
        """Yields ``(episode_index, frame_index)`` from ``start_offset`` of ``epoch`` on.

        Finite (``repeat=False``): to the end of the epoch, or to ``limit`` anchors of the epoch.
        Endless (``repeat=True``): epoch after epoch (an idle worker yields nothing).
        """
        stop = self.num_frames if limit is None else min(limit, self.num_frames)
        yield from read_pools(self.iter_pools(epoch, start_offset, repeat=repeat), None if repeat else stop)


class ChainPlan:
    """An endless elastic worker's plan of one stream: its share of the remainder (pool epoch
    ``epoch``), then its plain epochs from ``next_epoch`` on (one set of resource shares)."""

    def __init__(self, first: WorkerPlan, then: WorkerPlan, epoch: int, next_epoch: int) -> None:
        self.first, self.then = first, then
        self.epoch, self.next_epoch = int(epoch), int(next_epoch)
        self.worker, self.rank = first.worker, first.rank
        self.episode_indices = np.concatenate([first.episode_indices, then.episode_indices])
        self.lengths = np.concatenate([first.lengths, then.lengths])
        self.num_frames = first.num_frames + then.num_frames
        # the remainder may keep the checkpoint's pool settings (partitions): room for the larger
        self.pool_size = max(first.pool_size, then.pool_size)
        self.byte_budget = (
            None if first.byte_budget is None or then.byte_budget is None else max(first.byte_budget, then.byte_budget)
        )
        self.video_decoder_cache_size = then.video_decoder_cache_size

    @property
    def where(self) -> str:
        return self.then.where

    @where.setter
    def where(self, value: str) -> None:
        self.first.where = self.then.where = value

    def episode_size(self, episode_index: int) -> int:
        """As :meth:`WorkerPlan.episode_size`, checked against the larger budget of the two."""
        plan = self.first if self.first.byte_budget == self.byte_budget else self.then
        return plan.episode_size(episode_index)

    def iter_pools(self, epoch: int = 0, given: int = 0, *, repeat: bool = True) -> Iterator[Any]:
        """``given`` anchors of the chain already consumed: the remainder pool (its own epoch)
        while some of it is left, then the plain epochs from ``next_epoch`` on (``epoch`` and
        ``repeat``: ``WorkerPlan.iter_pools``' signature; the chain keeps its own)."""
        first = self.first.num_frames
        if given < first:
            pool = self.first.pool(self.epoch)
            if given:
                pool.skip(given)
                pool.drain_events()
            yield pool
            given = first
        yield from self.then.iter_pools(self.next_epoch, given - first, repeat=True)


@dataclass
class Remainder:
    """The unconsumed samples of one stream in one epoch (or remainder pass) of a checkpointed
    run (:class:`EpisodeLayout`'s remainder).

    Fields:
        epoch (int): the epoch they belong to (its label; the new run continues with ``epoch + 1``).
        episode_indices (np.ndarray): int64 (E,) episodes with frames left, ascending.
        lengths (np.ndarray): int64 (E,) frames left per episode (>= 1).
        frames (dict[int, np.ndarray]): episodes partly consumed → their frames left (int64,
            ascending, ``len == lengths``); an episode not in it is left whole (frames ``0..n-1``).
        consumed (int): samples of the pass the old run consumed, all ranks together.
        depth (int): elastic resumes this remainder went through (1: from a plain epoch).
        key (str): what it is the remainder of (a digest of the old state and the episodes).
        rank (int | None): ``frames`` holds only the started episodes new rank ``rank`` plays
            (:meth:`for_rank`); None: every started episode.
        started (int): episodes partly consumed, all ranks (-1: ``len(frames)``).
    """

    epoch: int
    episode_indices: np.ndarray
    lengths: np.ndarray
    frames: dict[int, np.ndarray] = field(default_factory=dict)
    consumed: int = 0
    depth: int = 1
    key: str = ""
    rank: int | None = None
    started: int = -1

    @property
    def total(self) -> int:
        """Frames left (samples the remainder pass gives over all new ranks)."""
        return int(self.lengths.sum())

    @property
    def episodes_started(self) -> int:
        """Episodes partly consumed by the old run, all ranks."""
        return len(self.frames) if self.started < 0 else self.started

    def for_rank(self, rank: int, episodes: np.ndarray) -> Remainder:
        """This remainder with the frames of started episodes kept only for ``episodes`` (those
        new rank ``rank`` plays): what that rank's DataLoader workers need, O(episodes) in memory."""
        keep = set(np.asarray(episodes).tolist())
        return replace(
            self,
            frames={e: f for e, f in self.frames.items() if e in keep},
            rank=int(rank),
            started=self.episodes_started,
        )


class EpisodeLayout:
    """One stream's episodes over the ranks (LPT) and each rank's workers (LPT): the layout of a
    plain epoch, or (``frame_maps``) of an elastic remainder, whose episodes play only their
    frames left and whose resource shares come from the plain layout (``shares_from``).

    Raises:
        ShardingError: a plain layout with fewer non-empty episodes than ranks.
    """

    kind = "episodes"

    def __init__(
        self,
        spec: StreamSpec,
        topo: Topology,
        *,
        frame_maps: Mapping[int, np.ndarray] | None = None,
        shares_from: EpisodeLayout | None = None,
    ) -> None:
        self.spec, self.topo = spec, topo
        self.episode_indices, self.lengths = spec.episode_indices, spec.lengths
        self.frame_maps: dict[int, np.ndarray] = dict(frame_maps or {})
        self._shares_from = shares_from
        n_eps, W = len(self.lengths), topo.world_size
        if n_eps < W and shares_from is None:
            raise ShardingError(
                f"{n_eps} non-empty selected episode(s) cannot be split over {W} ranks: "
                f"rank(s) {n_eps}..{W - 1} would own no episode. Lower the number of ranks "
                f"(world size) to at most {n_eps} or select more episodes.",
                world_size=W,
                num_episodes=n_eps,
            )
        self._rank_pos = lpt_shards(self.lengths, W, (spec.seed, _seeds.TAG_RANK_SHARDS, W))
        self._worker_pos: dict[int, list[np.ndarray]] = {}
        self._plans: dict[tuple[int, int], WorkerPlan] = {}

    # --- shards -----------------------------------------------------------------------------------
    def worker_positions(self, rank: int) -> list[np.ndarray]:
        """Per logical worker of ``rank``: positions of its episodes (ascending; the first
        ``min(workers, episodes)`` workers hold some, the others none)."""
        got = self._worker_pos.get(rank)
        if got is None:
            rpos = self._rank_pos[rank]
            K = self.topo.num_shards
            n = min(K, len(rpos))
            parts = (
                []
                if n == 0
                else lpt_shards(
                    self.lengths[rpos], n, (self.spec.seed, _seeds.TAG_WORKER_SHARDS, rank, self.topo.world_size, K)
                )
            )
            got = [rpos[p] for p in parts] + [np.empty(0, np.int64)] * (K - n)
            self._worker_pos[rank] = got
        return got

    def worker_frames(self, rank: int) -> list[int]:
        """Anchors per logical worker of ``rank`` in one pass."""
        pos = self.worker_positions(rank)
        n = min(self.topo.num_shards, len(self._rank_pos[rank]))
        return [int(self.lengths[p].sum()) for p in pos[:n]] + [0] * (len(pos) - n)

    def rank_frames(self) -> np.ndarray:
        """Anchors per rank in one pass, int64 (world_size,)."""
        return np.array([int(self.lengths[p].sum()) for p in self._rank_pos], dtype=np.int64)

    def rank_episodes(self, rank: int) -> np.ndarray:
        """Episode indices ``rank`` plays this pass, ascending, int64."""
        return self.episode_indices[self._rank_pos[rank]]

    def worker_episodes(self, worker: int, rank: int) -> np.ndarray:
        """Episode indices logical ``worker`` of ``rank`` plays this pass (empty: idle)."""
        return self.episode_indices[self.worker_positions(rank)[worker]]

    def num_active(self, rank: int) -> int:
        """Logical workers of ``rank`` that hold an episode."""
        return min(self.topo.num_shards, len(self._rank_pos[rank]))

    def share_count(self, rank: int) -> int:
        """Workers of ``rank`` the pool and budget shares are split over (a remainder uses its
        plain layout's, so a worker's shares stay the same when its stream moves on)."""
        src = self if self._shares_from is None else self._shares_from
        return max(1, src.num_active(rank))

    def owns(self, rank: int) -> str:
        """What ``rank`` owns, for the idle-worker warning ("3 episode(s)")."""
        return f"{len(self._rank_pos[rank])} episode(s)"

    def plan(self, worker: int, rank: int) -> WorkerPlan:
        """Logical ``worker`` of ``rank`` (cached). Raises ByteBudgetError for an episode larger
        than the worker's whole budget (eager sizes), before anything is fetched."""
        key = (rank, worker)
        got = self._plans.get(key)
        if got is None:
            got = self._make_plan(worker, rank)
            if rank == self.topo.rank:  # another rank's (an old run's, replayed once) is not kept
                self._plans[key] = got
        return got

    def _make_plan(self, worker: int, rank: int) -> WorkerPlan:
        return WorkerPlan(self, worker, self.worker_positions(rank)[worker], rank)

    # --- elastic resume ---------------------------------------------------------------------------
    def remainder(
        self, counts: list[tuple[int, int, int | None]], epoch: int, pool_epoch: int, depth: int
    ) -> Remainder:
        """What the old run left of this pass: ``counts`` are ``(rank, worker, anchors it gave)``
        per old stream (None: its whole share consumed); each is replayed in the C pool core to
        its count (no I/O): episodes finished, untouched (whole) and, for the resident ones, the
        frames not drawn yet. ``pool_epoch``: the epoch the pass's pools were seeded with."""
        whole: list[np.ndarray] = []
        part: dict[int, np.ndarray] = {}
        for r, w, g in counts:
            if g is None:
                continue
            plan = self.plan(w, r)
            if plan.num_frames == 0:
                continue
            if g == 0:
                whole.append(plan.episode_indices)
                continue
            pool = plan.pool(pool_epoch)
            pool.skip(g)
            untouched, started, frames = pool.remaining_state()
            whole.append(untouched)
            for e, fr in zip(started.tolist(), frames):
                if len(fr):
                    part[int(e)] = fr
        return self._build_remainder(whole, part, epoch, depth)

    def _build_remainder(
        self, whole: list[np.ndarray], part: dict[int, np.ndarray], epoch: int, depth: int
    ) -> Remainder:
        w = np.concatenate(whole) if whole else np.empty(0, np.int64)
        lengths = dict(zip(self.episode_indices.tolist(), self.lengths.tolist()))
        frames = {e: self.frame_maps[e] for e in w.tolist() if e in self.frame_maps}
        frames.update(part)
        lens = {e: lengths[e] for e in w.tolist()}
        lens.update({e: len(fr) for e, fr in part.items()})
        idx = np.array(sorted(lens), dtype=np.int64)
        ln = np.array([lens[e] for e in idx.tolist()], dtype=np.int64)
        full = dict(zip(self.spec.full_indices.tolist(), self.spec.full_lengths.tolist()))
        frames = {e: fr for e, fr in frames.items() if len(fr) != full[e]}  # all frames left: no map
        return Remainder(int(epoch), idx, ln, frames, int(self.lengths.sum() - ln.sum()), depth)

    @staticmethod
    def over(rem: Remainder, topo: Topology, plain: EpisodeLayout) -> EpisodeLayout:
        """The layout of ``topo`` that plays ``rem`` (its own seed; shares from ``plain``)."""
        spec = plain.spec.but(
            episode_indices=rem.episode_indices,
            lengths=rem.lengths,
            seed=_seeds.derived_seed(plain.spec.seed, _seeds.TAG_ELASTIC, rem.epoch, rem.depth),
        )
        return EpisodeLayout(spec, topo, frame_maps=rem.frames, shares_from=plain)

    def for_rank(self, rem: Remainder, rank: int) -> Remainder:
        """What ``rank``'s DataLoader workers need of ``rem`` (this layout plays it)."""
        return rem.for_rank(rank, self.rank_episodes(rank))

    def info(self, rem: Remainder) -> dict[str, Any]:
        """Remainder ``rem`` (that this layout plays) in ``Planner.remainder_info``'s units."""
        return {
            "unit": "episodes",
            "whole": int(len(rem.episode_indices) - rem.episodes_started),
            "started": rem.episodes_started,
        }
