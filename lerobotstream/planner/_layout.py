"""Layouts: which episodes each rank and DataLoader worker of one stream (dataset) plays in one pass.

A *group* is a set of episodes that one pool plays in order: one exact-coverage
:class:`~lerobotstream.planner._poolcore.EpisodePool` per group and epoch, seeded from the group's key.
A :class:`Layout` splits a stream's episodes into groups and deals them to the (rank, logical
worker) pairs of a topology (a planner's resolved ``PlanSettings``); a worker plays its groups one after another
(:class:`WorkerPlan`). Two ways to form the groups, one model:

* **by topology** (default): one group per (rank, worker) — episodes sharded over the ranks by
  greedy LPT on frame counts, then over each rank's workers by the same LPT; the group's pool size
  and byte budget are the worker's share of the rank's. Its seed key is (rank, world size, worker,
  workers).
* **canonical partitions** (``partitions=P``): ``P`` frame-balanced groups from (seed, P) only (LPT,
  seeded ties; never the world size, workers or batch size), each with its own pool size and
  byte budget (``pool_size``, default ``constants.DEFAULT_PARTITION_POOL_SIZE``, and ``byte_budget``
  apply *per partition*) and seed key (P, partition): a partition's sample sequence is the same on
  any topology. In an epoch stream ``s = w * W + r`` (rank ``r``, worker ``w``, the DataLoader's
  batch-turn order) plays the partitions ``p mod (W * K) == s``, ascending, one resident at a time
  (:class:`GroupChain`). ``P < W * K`` is refused (a stream would own nothing).

**Elastic resume** (:meth:`Layout.remainder`): how many anchors each old (rank, worker) gave runs
through its groups in order; what is left is one :class:`Remainder`. Topology groups do not
survive a topology change: each started group is replayed in the C pool core to its count
(untouched episodes whole, started ones their frames left) and the leftover episodes form new
topology groups (their own seed; :meth:`Layout.over`). Canonical groups survive: each partition
keeps its consumed prefix (its *offset*, from counts alone, no replay) and its tail is played in the
same order on any topology, the tails dealt over the new ranks, then their workers, by LPT (whole
partitions). Then plain epochs follow.

Also here: the stream a layout is built from (:class:`StreamSpec`) and :class:`ChainPlan` (an
endless remainder's share, then plain epochs). A layout is pure (numpy and the C pool core; no I/O).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lerobotstream import constants
from lerobotstream.errors import ResumeStateError, ShardingError, StreamingConfigError, over_budget
from lerobotstream.planner import _seeds
from lerobotstream.planner._pool import PoolEvent
from lerobotstream.planner._poolcore import STRATEGY_IDS, EpisodePool, shuffled_order, strategy_info
from lerobotstream.planner._settings import PlanSettings
from lerobotstream.planner._shards import lpt_shards

__all__ = [
    "ChainPlan",
    "GroupChain",
    "Layout",
    "Remainder",
    "StreamSpec",
    "WorkerPlan",
    "partition_groups",
    "read_pools",
]


def share(total: int | None, n: int) -> int | None:
    """One of ``n`` equal shares of ``total`` (at least 1; None stays None)."""
    return None if total is None else max(1, int(total) // n)


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
        partitions (int | None): canonical partitions, None: groups by topology.
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


_PARTITIONS: OrderedDict[tuple, tuple[list[np.ndarray], np.ndarray]] = OrderedDict()
_PARTITIONS_LOCK = threading.Lock()


def partition_groups(
    lengths: np.ndarray, digest: str, seed: int, partitions: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """The ``partitions`` frame-balanced groups of episode positions (int64, ascending each; LPT,
    ``max - min <= the longest episode``) and their frames (int64 (P,)), a function of (episodes,
    seed, partitions) only; cached per process (``digest``: the episodes' ``episodes_digest``)."""
    key = (digest, int(seed), int(partitions))
    with _PARTITIONS_LOCK:  # StreamLoader's threads build planners concurrently
        got = _PARTITIONS.get(key)
        if got is None:
            parts = lpt_shards(lengths, partitions, (seed, _seeds.TAG_PARTITIONS, partitions))
            owner = np.empty(len(lengths), np.int64)
            for q, pos in enumerate(parts):
                owner[pos] = q
            got = (parts, np.bincount(owner, weights=lengths, minlength=partitions).astype(np.int64))
            _PARTITIONS[key] = got
            while len(_PARTITIONS) > 4:
                _PARTITIONS.popitem(last=False)
        _PARTITIONS.move_to_end(key)
        return got


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


@dataclass
class Remainder:
    """The unconsumed samples of one stream in one epoch (or remainder pass) of a checkpointed run.

    Fields:
        epoch (int): the epoch they belong to (its label; the new run continues with ``epoch + 1``).
        consumed (int): samples of the pass the old run consumed, all ranks together.
        depth (int): elastic resumes this remainder went through (1: from a plain epoch).
        episode_indices (np.ndarray): topology groups: int64 (E,) episodes with frames left, ascending.
        lengths (np.ndarray): topology groups: int64 (E,) frames left per episode (>= 1).
        frames (dict[int, np.ndarray]): topology groups: episodes partly consumed → their frames
            left (int64, ascending, ``len == lengths``); an episode not in it is left whole.
        offsets (np.ndarray | None): canonical partitions: int64 (P,) samples of each partition's
            sequence already consumed (None: topology groups).
        strategy, pool_size, byte_budget: canonical partitions: the pool settings of that pass
            (they fix each partition's order, so the tails are played with them).
        key (str): what it is the remainder of (a digest of the old state and the episodes).
        rank (int | None): ``frames`` holds only the started episodes new rank ``rank`` plays
            (:meth:`for_rank`); None: every started episode (partitions: always None).
        started (int): episodes partly consumed, all ranks (-1: ``len(frames)``).
    """

    epoch: int
    consumed: int = 0
    depth: int = 1
    episode_indices: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    lengths: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    frames: dict[int, np.ndarray] = field(default_factory=dict)
    offsets: np.ndarray | None = None
    strategy: str = constants.DEFAULT_SAMPLING_STRATEGY
    pool_size: int | None = None
    byte_budget: int | None = None
    key: str = ""
    rank: int | None = None
    started: int = -1

    @property
    def episodes_started(self) -> int:
        """Episodes partly consumed by the old run, all ranks."""
        return len(self.frames) if self.started < 0 else self.started

    def for_rank(self, rank: int, episodes: np.ndarray) -> Remainder:
        """This remainder with the frames of started episodes kept only for ``episodes`` (those
        new rank ``rank`` plays): what that rank's DataLoader workers need, O(episodes) in memory."""
        keep = set(np.asarray(episodes).tolist())
        frames = {e: f for e, f in self.frames.items() if e in keep}
        return replace(self, frames=frames, rank=int(rank), started=self.episodes_started)


class GroupChain:
    """The :class:`~lerobotstream.planner._poolcore.EpisodePool` interface over a worker's group pools
    of one epoch, played one after another (only the current one resident; ``frontier`` looks
    into the next ones). Events keep the pool's meaning, positions counted along the chain; the
    episodes resident when a group starts (a tail: those its consumed prefix had admitted) are
    reported as admitted there."""

    def __init__(self, plan: WorkerPlan, epoch: int) -> None:
        self._plan, self._epoch = plan, int(epoch)
        self._todo = deque(plan.tails())
        self._ready: deque[EpisodePool] = deque()
        self._events: list[PoolEvent] = []
        self._emitted = 0
        self._base = 0
        self._cur: EpisodePool | None = None
        self._switch()

    def _prepare(self) -> EpisodePool:
        i = self._todo.popleft()
        pool = self._plan.group_pool(i, self._epoch)
        off = self._plan.offset(i)
        if off:
            pool.skip(off)
        pool.drain_events()
        return pool

    def _switch(self) -> None:
        self._cur = self._ready.popleft() if self._ready else (self._prepare() if self._todo else None)
        if self._cur is not None:
            self._base = self._emitted - self._cur.emitted
            self._events += [PoolEvent(self._emitted, "admit", int(e)) for e in self._cur.resident().tolist()]

    @property
    def emitted(self) -> int:
        """Anchors emitted so far in this epoch (the worker's share of it)."""
        return self._emitted

    @property
    def exhausted(self) -> bool:
        return self._cur is None or (self._cur.exhausted and not self._todo and not self._ready)

    def resident(self) -> np.ndarray:
        return np.empty(0, np.int64) if self._cur is None else self._cur.resident()

    def frontier(self, k: int) -> np.ndarray:
        """The next ``k`` episodes to be admitted, in order, across the following groups."""
        out = [] if self._cur is None else self._cur.frontier(k).tolist()
        i = 0
        while len(out) < k:
            if i == len(self._ready):
                if not self._todo:
                    break
                self._ready.append(self._prepare())
            pool = self._ready[i]
            i += 1
            out += pool.resident().tolist() + pool.frontier(k).tolist()
        return np.asarray(out[:k], dtype=np.int64)

    def drain_events(self) -> list[PoolEvent]:
        out, self._events = self._events, []
        return out

    def next_anchors(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``n`` anchors (episode_index int64 (k,), frame_index int64 (k,)), k < n at the end."""
        eps, frs, got = [], [], 0
        while got < n and self._cur is not None:
            want = n - got
            e, f = self._cur.next_anchors(want)
            self._events += [
                PoolEvent(self._base + ev.position, ev.kind, ev.episode_index) for ev in self._cur.drain_events()
            ]
            eps.append(e)
            frs.append(f)
            got += len(e)
            self._emitted += len(e)
            if len(e) < want:
                self._switch()
        if not eps:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(eps), np.concatenate(frs)

    def skip(self, n: int) -> int:
        """Draw and discard ``n`` anchors (no I/O); returns how many were drawn."""
        done = 0
        while done < n and self._cur is not None:
            want = n - done
            k = self._cur.skip(want)
            self._cur.drain_events()
            done += k
            self._emitted += k
            if k < want:
                self._switch()
        self._events = []
        return done


class WorkerPlan:
    """One (rank, logical worker) of one stream: the groups it plays, in order, their episodes
    and its share of the resources.

    Attributes:
        worker (int): logical worker id, ``0 <= worker < num_shards``.
        rank (int): the rank.
        groups (np.ndarray): int64 ids of the groups it plays, in order (empty = idle).
        episode_indices (np.ndarray): int64 dataset episode indices of those groups, group by
            group (each group's ascending).
        lengths (np.ndarray): int64 frames per episode.
        nbytes (np.ndarray): int64 exact synthesized bytes per episode (zeros if no budget; -1
            where not sized yet: sizes on demand).
        num_frames (int): anchors of the pass (a remainder pass: the groups' tails).
        pool_size (int): resident episodes at most (one group's pool).
        byte_budget (int | None): resident bytes at most (one group's pool; bytes).
        video_decoder_cache_size (int | None): the worker's share of the decoder LRU.
        where (str): what a size error of this plan is prefixed with (a mixture's dataset).
    """

    def __init__(self, layout: Layout, worker: int, rank: int, groups: np.ndarray) -> None:
        self._layout = layout
        self.worker, self.rank = int(worker), int(rank)
        self.groups = np.asarray(groups, dtype=np.int64)
        parts = [layout.group_positions(g) for g in self.groups.tolist()]
        pos = np.concatenate(parts) if parts else np.empty(0, np.int64)
        self._starts = np.cumsum([0] + [len(x) for x in parts]).tolist()
        self.episode_indices = layout.episode_indices[pos]
        self.lengths = layout.lengths[pos]
        self.num_frames = sum(layout.group_left(g) for g in self.groups.tolist())
        maps = layout.frame_maps
        self.frame_maps = {i: maps[e] for i, e in enumerate(self.episode_indices.tolist()) if e in maps} if maps else {}
        spec = layout.spec
        if layout.canonical:
            self.pool_size = layout.partition_pool_size
            self.byte_budget = spec.byte_budget
            self.video_decoder_cache_size = share(spec.video_decoder_cache_size, max(1, layout.num_active(self.rank)))
            budget_is = f"one partition's budget, of {layout.partitions} partitions"
            advice = "(with partitions it is each partition's, not split over the workers)"
        else:
            n = layout.share_count(self.rank)
            per_rank = constants.DEFAULT_EPISODE_POOL_SIZE_PER_RANK
            self.pool_size = spec.pool_size if spec.pool_size is not None else max(1, per_rank // n)
            self.byte_budget = share(spec.byte_budget, n)
            self.video_decoder_cache_size = share(spec.video_decoder_cache_size, n)
            budget_is = f"rank budget {spec.byte_budget} bytes split over {n} worker(s)"
            advice = "or use fewer DataLoader workers"
        self.where = ""
        self.nbytes = self._sizes(budget_is, advice)

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
        """Raise the byte-budget rule's error (``errors.over_budget``) for episode ``e`` of ``n`` bytes."""
        error = over_budget(
            e,
            n,
            self.byte_budget,
            holder=f"worker {self.worker} of rank {self.rank}",
            budget_is=self._budget_is,
            advice=self._advice,
            where=self.where,
        )
        if error is not None:
            raise error

    # --- groups, orders and pools -------------------------------------------------------------------
    def tails(self) -> list[int]:
        """Positions (in :attr:`groups`) of the groups with anchors left this pass, in order."""
        return [i for i, g in enumerate(self.groups.tolist()) if self._layout.group_left(g) > 0]

    def offset(self, i: int) -> int:
        """Anchors of group ``groups[i]``'s sequence consumed before this pass (a remainder's)."""
        return self._layout.group_offset(int(self.groups[i]))

    def _span(self, i: int) -> slice:
        return slice(self._starts[i], self._starts[i + 1])

    def _words(self, epoch: int, tag: int, i: int) -> np.ndarray:
        lay = self._layout
        return _seeds.seed_words(
            lay.spec.seed,
            epoch,
            *lay.group_key(int(self.groups[i])),
            STRATEGY_IDS[lay.spec.strategy],
            self.pool_size,
            0 if self.byte_budget is None else self.byte_budget + 1,
            tag,
        )

    def _order(self, i: int, epoch: int) -> np.ndarray:
        sl = self._span(i)
        n = sl.stop - sl.start
        if strategy_info(self._layout.spec.strategy).in_order:  # ascending episode_index, every epoch alike
            return np.arange(n, dtype=np.int64)
        return shuffled_order(self._words(epoch, _seeds.TAG_ADMISSION, i), n)

    def admission_order(self, epoch: int) -> np.ndarray:
        """Dataset episode indices in this epoch's admission order, group after group (int64)."""
        out = [self.episode_indices[self._span(i)][self._order(i, epoch)] for i in range(len(self.groups))]
        return np.concatenate(out) if out else np.empty(0, np.int64)

    def group_pool(self, i: int, epoch: int) -> EpisodePool:
        """Group ``groups[i]``'s exact-coverage pool of ``epoch``, at its first anchor."""
        sl = self._span(i)
        a = sl.start
        maps = {k - a: m for k, m in self.frame_maps.items() if a <= k < sl.stop}
        size_of = None
        if self.sizes_on_demand:
            size_of = self.size_of if a == 0 else (lambda local: self.size_of(a + local))
        return EpisodePool(
            self.episode_indices[sl],
            self.lengths[sl],
            self.nbytes[sl],
            self._order(i, epoch),
            self.pool_size,
            self.byte_budget,
            self._layout.spec.strategy,
            self._words(epoch, _seeds.TAG_DRAWS, i),
            maps,
            size_of,
        )

    def pool(self, epoch: int) -> Any:
        """The worker's pool of ``epoch`` (``EpisodePool`` interface): its one group's, or its groups
        one after another from their offsets (:class:`GroupChain`)."""
        if len(self.groups) == 1 and not self._layout.canonical:
            return self.group_pool(0, epoch)
        return GroupChain(self, epoch)

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


class Layout:
    """One stream's episodes in groups, dealt to the (rank, logical worker) pairs of ``topo`` (see
    the module doc): by topology (``spec.partitions`` None; ``frame_maps`` and ``shares_from``: an
    elastic remainder's, whose episodes play only their frames left and whose resource shares are
    its plain layout's) or canonical partitions (``offsets``: a remainder pass, each partition's
    consumed prefix).

    Raises:
        ShardingError: fewer non-empty episodes than ranks (by topology) or partitions.
        StreamingConfigError: ``partitions`` is not an int >= 1, or fewer than ``world_size x
            max(1, num_workers)`` (a worker would own nothing).
        ResumeStateError: ``offsets`` that do not fit the partitions.
    """

    def __init__(
        self,
        spec: StreamSpec,
        topo: PlanSettings,
        *,
        frame_maps: Mapping[int, np.ndarray] | None = None,
        shares_from: Layout | None = None,
        offsets: np.ndarray | None = None,
    ) -> None:
        self.spec, self.topo = spec, topo
        self.episode_indices, self.lengths = spec.episode_indices, spec.lengths
        self.frame_maps: dict[int, np.ndarray] = dict(frame_maps or {})
        self._shares_from = shares_from
        self.canonical = spec.partitions is not None
        self._plans: dict[tuple[int, int], WorkerPlan] = {}
        self._rank_cache: dict[int, np.ndarray] = {}  # canonical: each rank's partitions' positions
        if self.canonical:
            self._deal_partitions(offsets)
            return
        n_eps, W = len(self.lengths), topo.world_size
        if n_eps < W and shares_from is None:
            raise ShardingError(
                f"{n_eps} non-empty selected episode(s) cannot be split over {W} ranks: "
                f"rank(s) {n_eps}..{W - 1} would own no episode. Lower the number of ranks "
                f"(world size) to at most {n_eps} or select more episodes.",
                world_size=W,
                num_episodes=n_eps,
            )
        self._rank_pos: list[np.ndarray] = lpt_shards(self.lengths, W, (spec.seed, _seeds.TAG_RANK_SHARDS, W))
        self._worker_pos: dict[int, list[np.ndarray]] = {}

    def _deal_partitions(self, offsets: np.ndarray | None) -> None:
        P, W, K = self.spec.partitions, self.topo.world_size, self.topo.num_shards
        if isinstance(P, bool) or not isinstance(P, (int, np.integer)) or P < 1:
            raise StreamingConfigError(f"partitions must be an int >= 1, got {P!r}", option="partitions", value=P)
        self.partitions = P = int(P)
        if P < W * K:
            raise StreamingConfigError(
                f"partitions={P} is fewer than the {W * K} streams of this run (world size {W} x {K} DataLoader "
                f"worker(s) per rank): every rank's worker plays whole partitions and would get none; use "
                f"partitions >= {W * K} (lerobotstream-train: --dataset.streaming_partitions; a multiple of it "
                f"balances best), or fewer ranks or workers",
                option="partitions",
                value=P,
            )
        if len(self.lengths) < P:
            raise ShardingError(
                f"{len(self.lengths)} non-empty selected episode(s) cannot fill partitions={P}: some partition "
                f"would own no episode. Use partitions <= {len(self.lengths)} (lerobotstream-train: "
                f"--dataset.streaming_partitions; --dataset.episodes and --dataset.eval_split leave fewer episodes "
                f"to train on) or select more episodes.",
                num_episodes=len(self.lengths),
                world_size=W,
            )
        self.parts, self.part_frames = partition_groups(self.lengths, self.spec.digest, self.spec.seed, P)
        remainder = offsets is not None
        self.part_offsets = np.asarray(offsets, dtype=np.int64) if remainder else np.zeros(P, np.int64)
        if len(self.part_offsets) != P or (self.part_offsets < 0).any() or (self.part_offsets > self.part_frames).any():
            raise ResumeStateError(
                f"partition offsets {self.part_offsets.tolist()[:8]}... do not fit the {P} partitions of this stream"
            )
        self.part_left = self.part_frames - self.part_offsets
        if not remainder:  # a plain epoch: stream w * W + r owns p mod (W * K) == w * W + r
            self.streams = [[np.arange(w * W + r, P, W * K, dtype=np.int64) for w in range(K)] for r in range(W)]
            return
        # a remainder pass: the tails left, LPT over the ranks, then over each rank's workers
        seed, alive = self.spec.seed, np.flatnonzero(self.part_left > 0)
        ranks = [np.empty(0, np.int64)] * W
        if len(alive):
            ranks = lpt_shards(self.part_left[alive], W, (seed, _seeds.TAG_PARTITIONS, _seeds.TAG_RANK_SHARDS, W))
        self.streams = []
        for r, rpos in enumerate(ranks):
            mine = alive[rpos]
            n = min(K, len(mine))
            key = (seed, _seeds.TAG_PARTITIONS, _seeds.TAG_WORKER_SHARDS, r, W, K)
            ws = lpt_shards(self.part_left[mine], n, key) if n else []
            self.streams.append([mine[x] for x in ws] + [np.empty(0, np.int64)] * (K - n))

    @property
    def partition_pool_size(self) -> int:
        """Resident episodes of one partition at most."""
        return constants.DEFAULT_PARTITION_POOL_SIZE if self.spec.pool_size is None else int(self.spec.pool_size)

    # --- groups -------------------------------------------------------------------------------------
    def worker_positions(self, rank: int) -> list[np.ndarray]:
        """By topology: per logical worker of ``rank``, positions of its episodes (ascending; the
        first ``min(workers, episodes)`` workers hold some, the others none)."""
        got = self._worker_pos.get(rank)
        if got is None:
            rpos = self._rank_pos[rank]
            K, W = self.topo.num_shards, self.topo.world_size
            n = min(K, len(rpos))
            key = (self.spec.seed, _seeds.TAG_WORKER_SHARDS, rank, W, K)
            parts = lpt_shards(self.lengths[rpos], n, key) if n else []
            got = self._worker_pos[rank] = [rpos[p] for p in parts] + [np.empty(0, np.int64)] * (K - n)
        return got

    def groups_of(self, rank: int) -> list[np.ndarray]:
        """Per logical worker of ``rank``: the ids of the groups it plays this pass, in order."""
        if self.canonical:
            return self.streams[rank]
        K = self.topo.num_shards
        n = min(K, len(self._rank_pos[rank]))
        return [np.array([rank * K + w], np.int64) for w in range(n)] + [np.empty(0, np.int64)] * (K - n)

    def group_positions(self, g: int) -> np.ndarray:
        """Positions (into ``episode_indices``) of group ``g``'s episodes, ascending, int64."""
        if self.canonical:
            return self.parts[g]
        K = self.topo.num_shards
        return self.worker_positions(g // K)[g % K]

    def group_left(self, g: int) -> int:
        """Anchors group ``g`` gives this pass (a remainder pass: its tail)."""
        if self.canonical:
            return int(self.part_left[g])
        return int(self.lengths[self.group_positions(g)].sum())

    def group_offset(self, g: int) -> int:
        """Anchors of group ``g``'s sequence consumed before this pass (canonical remainders)."""
        return int(self.part_offsets[g]) if self.canonical else 0

    def group_key(self, g: int) -> tuple[int, ...]:
        """What seeds group ``g``'s pools besides the seed and epoch: (rank, world size, worker,
        workers) by topology; (partitions tag, P, partition) for canonical partitions."""
        if self.canonical:
            return (_seeds.TAG_PARTITIONS, self.partitions, g)
        K = self.topo.num_shards
        return (g // K, self.topo.world_size, g % K, K)

    # --- what ranks and workers play ----------------------------------------------------------------
    def worker_frames(self, rank: int) -> list[int]:
        """Anchors per logical worker of ``rank`` in one pass."""
        return [sum(self.group_left(g) for g in gs.tolist()) for gs in self.groups_of(rank)]

    def _rank_positions(self, rank: int) -> np.ndarray:
        if not self.canonical:
            return self._rank_pos[rank]
        got = self._rank_cache.get(rank)
        if got is None:
            got = self._rank_cache[rank] = np.sort(
                np.concatenate(
                    [self.parts[p] for p in np.concatenate(self.streams[rank]).tolist()] or [np.empty(0, np.int64)]
                )
            )
        return got

    def rank_frames(self) -> np.ndarray:
        """Anchors per rank in one pass, int64 (world_size,)."""
        if self.canonical:
            return np.array([sum(int(self.part_left[ws].sum()) for ws in wss) for wss in self.streams], dtype=np.int64)
        return np.array([int(self.lengths[p].sum()) for p in self._rank_pos], dtype=np.int64)

    def rank_episodes(self, rank: int) -> np.ndarray:
        """Episode indices ``rank`` plays this pass, ascending, int64."""
        return self.episode_indices[self._rank_positions(rank)]

    def num_active(self, rank: int) -> int:
        """Logical workers of ``rank`` that give anchors."""
        if self.canonical:
            return sum(1 for f in self.worker_frames(rank) if f)
        return min(self.topo.num_shards, len(self._rank_pos[rank]))

    def share_count(self, rank: int) -> int:
        """By topology: workers of ``rank`` the pool and budget shares are split over (a remainder
        uses its plain layout's, so a worker's shares stay the same when its stream moves on)."""
        src = self if self._shares_from is None else self._shares_from
        return max(1, src.num_active(rank))

    def owns(self, rank: int) -> str:
        """What ``rank`` owns, for the idle-worker warning ("3 episode(s)", "4 partition(s)")."""
        if self.canonical:
            return f"{sum(len(ps) for ps in self.streams[rank])} partition(s)"
        return f"{len(self._rank_pos[rank])} episode(s)"

    def plan(self, worker: int, rank: int) -> WorkerPlan:
        """Logical ``worker`` of ``rank`` (cached). Raises ByteBudgetError for an episode larger
        than the worker's whole budget (eager sizes), before anything is fetched."""
        key = (rank, worker)
        got = self._plans.get(key)
        if got is None:
            got = WorkerPlan(self, worker, rank, self.groups_of(rank)[worker])
            if rank == self.topo.rank:  # another rank's (an old run's, replayed once) is not kept
                self._plans[key] = got
        return got

    # --- elastic resume -----------------------------------------------------------------------------
    def remainder(
        self, counts: list[tuple[int, int, int | None]], epoch: int, pool_epoch: int, depth: int
    ) -> Remainder:
        """What the old run left of this pass: ``counts`` are ``(rank, worker, anchors it gave)``
        per old (rank, worker) (None: its whole share consumed); each count runs through the
        worker's groups in order. Canonical partitions: each partition's offset, from counts.
        By topology: each started group replayed in the C pool core to its count (no I/O):
        episodes untouched (whole) and, for the resident ones, the frames not drawn yet.
        ``pool_epoch``: the epoch the pass's pools were seeded with."""
        whole: list[np.ndarray] = []
        part: dict[int, np.ndarray] = {}
        offsets = self.part_offsets.copy() if self.canonical else None
        for r, w, given in counts:
            plan = self.plan(w, r) if not self.canonical and given else None
            for i, g in enumerate(self.groups_of(r)[w].tolist()):
                left = self.group_left(g)
                take = left if given is None else min(given, left)
                if given is not None:
                    given -= take
                if offsets is not None:
                    offsets[g] += take
                elif take == 0:
                    whole.append(self.episode_indices[self.group_positions(g)])
                elif take < left:
                    pool = plan.group_pool(i, pool_epoch)
                    pool.skip(take)
                    untouched, started, frames = pool.remaining_state()
                    whole.append(untouched)
                    part.update((int(e), fr) for e, fr in zip(started.tolist(), frames) if len(fr))
        if offsets is not None:
            s = self.spec
            consumed = int((offsets - self.part_offsets).sum())
            return Remainder(
                int(epoch),
                consumed,
                depth,
                offsets=offsets,
                strategy=s.strategy,
                pool_size=s.pool_size,
                byte_budget=s.byte_budget,
            )
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
        return Remainder(int(epoch), int(self.lengths.sum() - ln.sum()), depth, idx, ln, frames)

    @staticmethod
    def over(rem: Remainder, topo: PlanSettings, plain: Layout) -> Layout:
        """The layout of ``topo`` that plays ``rem``: canonical partitions keep the seed,
        partitions and pool settings of the pass they continue (so the same orders); by topology,
        the leftover episodes with their own seed (shares from ``plain``)."""
        if plain.canonical:
            spec = replace(plain.spec, strategy=rem.strategy, pool_size=rem.pool_size, byte_budget=rem.byte_budget)
            return Layout(spec, topo, offsets=rem.offsets)
        seed = _seeds.derived_seed(plain.spec.seed, _seeds.TAG_ELASTIC, rem.epoch, rem.depth)
        spec = replace(plain.spec, episode_indices=rem.episode_indices, lengths=rem.lengths, seed=seed)
        return Layout(spec, topo, frame_maps=rem.frames, shares_from=plain)

    def for_rank(self, rem: Remainder, rank: int) -> Remainder:
        """What ``rank``'s DataLoader workers need of ``rem`` (this layout plays it): canonical,
        all of it (P offsets); by topology, the started episodes' frames of its episodes."""
        return rem if self.canonical else rem.for_rank(rank, self.rank_episodes(rank))

    def info(self, rem: Remainder) -> dict[str, Any]:
        """Remainder ``rem`` (that this layout plays) in ``Planner.remainder_info``'s units: whole
        and started episodes; canonical, partitions (which episodes of a started partition were
        started is not known from counts)."""
        if self.canonical:
            left = self.part_left
            started = int(((left > 0) & (left < self.part_frames)).sum())
            return {"unit": "partitions", "whole": int((left == self.part_frames).sum()), "started": started}
        started = rem.episodes_started
        return {"unit": "episodes", "whole": int(len(rem.episode_indices) - started), "started": started}
