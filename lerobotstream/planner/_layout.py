"""Layouts: which episodes each rank and DataLoader worker of one stream (dataset) plays in one pass,
with the seeds and the LPT shards they are built from.

A *group* is a set of episodes one exact-coverage :class:`~lerobotstream.planner._poolcore.EpisodePool`
plays per epoch, seeded from the group's key. A :class:`Layout` deals a stream's groups to the (rank,
logical worker) pairs of a topology; a worker plays its groups in turn (:class:`WorkerPlan`):

* **by topology** (default): one group per (rank, worker) — episodes by greedy LPT on frame counts
  over the ranks, then over each rank's workers; pool size and byte budget are the worker's share of
  the rank's. Seed key: (rank, world size, worker, workers).
* **canonical partitions** (``partitions=P``): ``P`` frame-balanced groups from (seed, P) only, each
  with its own pool size, budget and seed key (P, partition), so a partition's order is the same on
  any topology. Stream ``s = w * W + r`` plays the partitions ``p mod (W * K) == s``; ``P < W * K``
  is refused.

**Elastic resume** (:meth:`Layout.remainder`): each old (rank, worker)'s anchor count runs through
its groups; what is left is a remainder :class:`StreamSpec`. Topology groups are replayed in the C
pool core (untouched episodes whole, started ones their frames left), the leftovers forming new
topology groups (:meth:`Layout.over`); canonical partitions keep their consumed prefix (an offset),
their tails split over the new ranks and workers by LPT as episodes are by topology.

Seeds: ``SeedSequence`` tuple entropy (:func:`seed_words`) feeds ``_poolcore``'s own generator,
never the global RNG or numpy's generators (no order changes with the numpy version).
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lerobotstream.constants import (
    DEFAULT_EPISODE_POOL_SIZE_PER_RANK,
    DEFAULT_PARTITION_POOL_SIZE,
    DEFAULT_SAMPLING_STRATEGY,
)
from lerobotstream.errors import ResumeStateError, ShardingError, StreamingConfigError, over_budget
from lerobotstream.planner._lpt import lpt_owner
from lerobotstream.planner._poolcore import EpisodePool, shuffled_order, strategy_info

# Domain tags keep the seed streams of different uses apart (arbitrary fixed constants).
TAG_RANK_SHARDS = 0x52414E4B  # "RANK"
TAG_WORKER_SHARDS = 0x574B5253  # "WKRS"
TAG_ADMISSION = 0x41444D54  # "ADMT"
TAG_DRAWS = 0x44524157  # "DRAW"
TAG_PARTITIONS = 0x50415254  # "PART"
TAG_ELASTIC = 0x454C5354  # "ELST": an elastic remainder's seeds
TAG_MIXTURE = 0x4D495854  # "MIXT": a mixture's per-dataset seeds and mix sequences


def seed_words(*entropy: int) -> np.ndarray:
    """Four uint64 words (C-contiguous (4,)) from ``SeedSequence(entropy)``; entries ints >= 0."""
    ent = [int(x) for x in entropy]
    if any(x < 0 for x in ent):
        raise ValueError(f"seed entropy must be non-negative integers, got {ent}")
    words = np.random.SeedSequence(ent).generate_state(4, dtype=np.uint64)
    if not words.any():  # xoshiro's all-zero state is absorbing (probability 2**-256)
        words[0] = 1
    return words


def derived_seed(*entropy: int) -> int:
    """A 62-bit seed derived from ``entropy`` (the first of :func:`seed_words`, shifted)."""
    return int(seed_words(*entropy)[0] >> 2)


def lpt_shards(lengths: np.ndarray, num_shards: int, tie_seed: tuple[int, ...]) -> list[np.ndarray]:
    """Greedy LPT of items with ``lengths`` (int64 (E,) frames, >= 1 each) over ``num_shards`` (>= 1):
    by decreasing length (ties: a permutation seeded by ``tie_seed``), each to the shard with the
    fewest frames (ties: lowest id); ``max - min <= max(lengths)`` frames. Returns ``num_shards``
    int64 arrays of positions into ``lengths``, ascending each."""
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    n = len(lengths)
    tie = np.empty(n, dtype=np.int64)
    tie[shuffled_order(seed_words(*tie_seed), n)] = np.arange(n, dtype=np.int64)
    owner = lpt_owner(lengths, np.lexsort((tie, -lengths)).astype(np.int64, copy=False), int(num_shards))
    bounds = np.cumsum(np.bincount(owner, minlength=num_shards))[:-1]
    return np.split(np.argsort(owner, kind="stable").astype(np.int64, copy=False), bounds)


@dataclass(frozen=True, eq=False)
class StreamSpec:
    """One stream (dataset) in one pass and its layout's settings: ``episode_indices`` (int64,
    ascending), ``lengths`` (int64 anchors, >= 1 each), ``digest`` (``episodes_digest``), ``seed``,
    ``strategy``, ``pool_size`` (per worker, or per partition; None: 32 per rank over the workers
    used), ``byte_budget`` (bytes per rank, or per partition), ``video_decoder_cache_size`` (per
    rank), ``sizes`` (``sizes(episode) -> bytes``; None: none, as a remainder shipped to workers),
    ``partitions`` (None: groups by topology).

    An elastic *remainder* (:meth:`Layout.remainder`) adds ``epoch`` (its label; None: a plain pass),
    ``consumed`` (samples the old run consumed, all ranks), ``depth`` (elastic resumes so far),
    ``key`` (digest of what it remains of), ``rank`` (``frames`` kept for that rank's episodes only;
    None: all), ``episodes_started`` (all ranks); by topology the episodes with frames left and how
    many, ``frames`` (each started one's int64 frames left, ascending), ``full`` (the whole selection
    ``(indices, lengths)``); canonical, ``offsets`` (int64 (P,), anchors consumed per partition)."""

    episode_indices: np.ndarray
    lengths: np.ndarray
    digest: str
    seed: int
    strategy: str = DEFAULT_SAMPLING_STRATEGY
    pool_size: int | None = None
    byte_budget: int | None = None
    video_decoder_cache_size: int | None = None
    sizes: Callable[[int], int] | None = None
    partitions: int | None = None
    epoch: int | None = None
    consumed: int = 0
    depth: int = 0
    key: str = ""
    rank: int | None = None
    episodes_started: int = 0
    frames: dict[int, np.ndarray] = field(default_factory=dict)
    full: tuple[np.ndarray, np.ndarray] | None = None
    offsets: np.ndarray | None = None


_PARTITIONS: OrderedDict[tuple, tuple[list[np.ndarray], np.ndarray]] = OrderedDict()
_PARTITIONS_LOCK = threading.Lock()


def partition_groups(
    lengths: np.ndarray, digest: str, seed: int, partitions: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """The ``partitions`` LPT groups of episode positions (int64, ascending each) and their frames
    (int64 (P,)), a function of (episodes, seed, partitions); cached per process by ``digest``."""
    key = (digest, int(seed), int(partitions))
    with _PARTITIONS_LOCK:  # StreamLoader's threads build planners concurrently
        if key not in _PARTITIONS:
            parts = lpt_shards(lengths, partitions, (seed, TAG_PARTITIONS, partitions))
            _PARTITIONS[key] = (parts, np.array([int(lengths[pos].sum()) for pos in parts], dtype=np.int64))
            if len(_PARTITIONS) > 4:  # the 4 used last are kept
                _PARTITIONS.popitem(last=False)
        _PARTITIONS.move_to_end(key)
        return _PARTITIONS[key]


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
    """One (rank, logical worker) of one stream: ``worker``, ``rank``, the ``groups`` it plays in
    order (entries of :attr:`Layout.groups`; empty: idle) and its resources: ``episode_indices``,
    ``lengths`` (int64, those groups' episodes group by group, each group's ascending, and their
    frames), ``nbytes`` (int64 bytes per episode; zeros without a budget, -1: sized on admission),
    ``num_frames`` (anchors of the pass; a remainder pass: the groups' tails), ``pool_size`` and
    ``byte_budget`` (int | None) (resident episodes and bytes at most, one group's pool),
    ``video_decoder_cache_size`` (int | None, the worker's share of the decoder LRU). An endless
    elastic worker's plan is :meth:`chained`: its remainder share, then plain epochs."""

    def __init__(self, layout: Layout, worker: int, rank: int, groups: list[tuple]) -> None:
        self._layout, self._chain = layout, ()
        self.worker, self.rank, self.groups = int(worker), int(rank), groups
        pos = np.concatenate([g[0] for g in groups] or [np.empty(0, np.int64)])
        self._starts = np.cumsum([0] + [len(g[0]) for g in groups]).tolist()
        self.episode_indices = layout.episode_indices[pos]
        self.lengths = layout.lengths[pos]
        self.num_frames = sum(g[1] for g in groups)
        spec, canon = layout.spec, layout.canonical
        # workers sharing the rank's pool, budget and decoder cache (canonical: the decoder cache only;
        # a remainder by topology: its plain layout's, so the shares stay when its stream moves on)
        n = self._shares = max(1, sum(1 for f in (layout._shares_from or layout).worker_frames(self.rank) if f))
        default = DEFAULT_PARTITION_POOL_SIZE if canon else max(1, DEFAULT_EPISODE_POOL_SIZE_PER_RANK // n)
        self.pool_size = default if spec.pool_size is None else int(spec.pool_size)
        share = [None if t is None else max(1, int(t) // n) for t in (spec.byte_budget, spec.video_decoder_cache_size)]
        self.byte_budget, self.video_decoder_cache_size = spec.byte_budget if canon else share[0], share[1]
        self._sized = self.byte_budget is not None and spec.sizes is not None  # asked on admission: size_of
        self.nbytes = np.full(len(self.episode_indices), -1 if self._sized else 0, dtype=np.int64)

    def chained(self, then: WorkerPlan, epoch: int) -> WorkerPlan:
        """This plan (pools of ``epoch``) followed by ``then``'s plain epochs from ``epoch + 1``
        on, as one plan with room for the larger pool and budget of the two."""
        chain = copy.copy(self)
        chain._chain = (self, then, int(epoch))
        chain.episode_indices = np.concatenate([self.episode_indices, then.episode_indices])
        chain.lengths = np.concatenate([self.lengths, then.lengths])
        chain.num_frames = self.num_frames + then.num_frames
        chain.pool_size = max(self.pool_size, then.pool_size)
        budgets = (self.byte_budget, then.byte_budget)
        chain.byte_budget = None if None in budgets else max(budgets)
        chain.video_decoder_cache_size = then.video_decoder_cache_size
        return chain

    def size_of(self, local: int) -> int:
        """Bytes of this plan's local episode ``local`` (the pools call it on admission)."""
        return self.episode_size(int(self.episode_indices[local]))

    def episode_size(self, episode_index: int) -> int:
        """Bytes of an episode (what the byte cache reserves; 0 without a budget); a chain's is
        checked against the larger budget of its two plans.

        Raises:
            ByteBudgetError: a negative size, or larger than the plan's whole byte budget.
        """
        if self._chain:
            first, then, _ = self._chain
            return (first if first.byte_budget == self.byte_budget else then).episode_size(episode_index)
        e, lay = int(episode_index), self._layout
        n = int(lay.spec.sizes(e)) if self._sized else 0
        if lay.canonical:
            budget_is = f"one partition's budget, of {lay.partitions} partitions"
            advice = "(with partitions it is each partition's, not split over the workers)"
        else:
            budget_is = f"rank budget {lay.spec.byte_budget} bytes split over {self._shares} worker(s)"
            advice = "or use fewer DataLoader workers"
        holder = f"worker {self.worker} of rank {self.rank}"
        error = over_budget(e, n, self.byte_budget, holder=holder, budget_is=budget_is, advice=advice, where=lay.where)
        if error is not None:
            raise error
        return n

    # --- orders and pools ---------------------------------------------------------------------------
    def _words(self, epoch: int, tag: int, i: int) -> np.ndarray:
        spec, budget = self._layout.spec, 0 if self.byte_budget is None else self.byte_budget + 1
        key = self.groups[i][3]
        return seed_words(spec.seed, epoch, *key, strategy_info(spec.strategy).id, self.pool_size, budget, tag)

    def _order(self, i: int, epoch: int) -> np.ndarray:
        n = self._starts[i + 1] - self._starts[i]
        if strategy_info(self._layout.spec.strategy).in_order:  # ascending episode_index, every epoch alike
            return np.arange(n, dtype=np.int64)
        return shuffled_order(self._words(epoch, TAG_ADMISSION, i), n)

    def group_pool(self, i: int, epoch: int) -> EpisodePool:
        """Group ``groups[i]``'s exact-coverage pool of ``epoch``, at its first anchor."""
        a, b = self._starts[i], self._starts[i + 1]
        frames = self._layout.spec.frames  # an elastic remainder's started episodes: their frames left
        maps = {k: frames[e] for k, e in enumerate(self.episode_indices[a:b].tolist()) if e in frames} if frames else {}
        size_of = (lambda local: self.size_of(a + local)) if self._sized else None
        return EpisodePool(
            self.episode_indices[a:b],
            self.lengths[a:b],
            self.nbytes[a:b],
            self._order(i, epoch),
            self.pool_size,
            self.byte_budget,
            self._layout.spec.strategy,
            self._words(epoch, TAG_DRAWS, i),
            maps,
            size_of,
        )

    def iter_pools(self, epoch: int = 0, start_offset: int = 0, *, repeat: bool = False) -> Iterator[EpisodePool]:
        """The group pools in play order from the stream start, the first one past ``start_offset``
        anchors (events drained): each group of ``epoch`` in turn (``repeat=True``: then of every
        later epoch; the offset may roll into them). A chain plays its remainder's pools (its own
        epoch) while some of it is left, then the plain epochs (``epoch`` and ``repeat`` ignored)."""
        if self._chain:
            first, then, e = self._chain
            if start_offset < first.num_frames:
                yield from first.iter_pools(e, start_offset)
                start_offset = first.num_frames
            yield from then.iter_pools(e + 1, start_offset - first.num_frames, repeat=True)
            return
        if self.num_frames == 0:
            return
        if repeat:
            epoch, start_offset = epoch + start_offset // self.num_frames, start_offset % self.num_frames
        while True:
            for i, (_, left, consumed, _) in enumerate(self.groups):
                if start_offset >= left:  # a group already played (or empty): not built
                    start_offset -= left
                    continue
                pool = self.group_pool(i, epoch)
                pool.skip(consumed + start_offset)  # a canonical remainder's prefix, then the offset
                pool.drain_events()
                yield pool
                start_offset = 0
            if not repeat:
                return
            epoch += 1


class Layout:
    """One stream's episodes in groups, dealt to the (rank, logical worker) pairs of ``topo`` (see
    the module doc). ``shares_from``: by topology, the plain layout whose workers a remainder's
    resource shares follow. ``groups``: per group id (of the ranks :meth:`groups_of` built so far),
    its episodes' positions (int64, ascending), anchors left this pass, anchors consumed before (a
    canonical remainder's prefix) and seed key.

    Raises:
        ShardingError: fewer non-empty episodes than ranks (by topology) or partitions.
        StreamingConfigError: ``partitions`` not an int >= 1, or fewer than ``world_size x
            max(1, num_workers)``.
        ResumeStateError: ``offsets`` that do not fit the partitions.
    """

    def __init__(
        self,
        spec: StreamSpec,
        topo: Any,
        *,
        shares_from: Layout | None = None,
        where: str = "",
    ) -> None:
        self.spec, self.topo, self.where = spec, topo, where
        self.episode_indices, self.lengths = spec.episode_indices, spec.lengths
        self._shares_from = shares_from
        self.canonical = spec.partitions is not None
        self.groups: dict[int, tuple[np.ndarray, int, int, tuple[int, ...]]] = {}
        self._workers: dict[int, list[np.ndarray]] = {}  # per rank: each worker's group ids
        self._plans: dict[tuple[int, int], WorkerPlan] = {}
        n_eps, W, K = len(self.lengths), topo.world_size, topo.num_shards
        # what is dealt to the ranks, then to each rank's workers: episodes by topology, partitions canonical
        self._weights, self._tag = self.lengths, ()
        if not self.canonical and n_eps < W and shares_from is None:
            raise ShardingError(
                f"{n_eps} non-empty selected episode(s) cannot be split over {W} ranks: "
                f"rank(s) {n_eps}..{W - 1} would own no episode. Lower the number of ranks "
                f"(world size) to at most {n_eps} or select more episodes.",
                world_size=W,
                num_episodes=n_eps,
            )
        if self.canonical:
            P = spec.partitions
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
            if n_eps < P:
                raise ShardingError(
                    f"{n_eps} non-empty selected episode(s) cannot fill partitions={P}: some partition "
                    f"would own no episode. Use partitions <= {n_eps} (lerobotstream-train: "
                    f"--dataset.streaming_partitions; --dataset.episodes and --dataset.eval_split leave fewer "
                    f"episodes to train on) or select more episodes.",
                    num_episodes=n_eps,
                    world_size=W,
                )
            self.parts, self.part_frames = partition_groups(self.lengths, spec.digest, spec.seed, P)
            offsets = np.zeros(P, np.int64) if spec.offsets is None else np.asarray(spec.offsets, dtype=np.int64)
            if len(offsets) != P or (offsets < 0).any() or (offsets > self.part_frames).any():
                raise ResumeStateError(
                    f"partition offsets {offsets.tolist()[:8]}... do not fit the {P} partitions of this stream"
                )
            self.part_offsets, self.part_left = offsets, self.part_frames - offsets
            self._weights, self._tag = self.part_left, (TAG_PARTITIONS,)
            if spec.offsets is None:  # a plain epoch: rank r's stream w * W + r owns p mod (W * K) == w * W + r
                self._rank_items = [np.arange(r, P, W, dtype=np.int64) for r in range(W)]
                return
        # LPT over the ranks (a canonical remainder: the partitions' tails left)
        alive = np.flatnonzero(self._weights > 0)  # by topology every episode (>= 1 anchor each)
        ranks = lpt_shards(self._weights[alive], W, (spec.seed, *self._tag, TAG_RANK_SHARDS, W))
        self._rank_items = [alive[p] for p in ranks]

    # --- what ranks and workers play ----------------------------------------------------------------
    def groups_of(self, rank: int) -> list[np.ndarray]:
        """Per logical worker of ``rank``: the int64 ids of the groups it plays this pass, in order
        (built on first use, a rank at a time, with their entries in :attr:`groups`)."""
        got = self._workers.get(rank)
        if got is not None:
            return got
        W, K, items = self.topo.world_size, self.topo.num_shards, self._rank_items[rank]
        if self.canonical and self.spec.offsets is None:  # worker w: partitions p mod (W * K) == w * W + rank
            dealt = [items[w::K] for w in range(K)]
        else:  # LPT over the rank's workers
            tie = (self.spec.seed, *self._tag, TAG_WORKER_SHARDS, rank, W, K)
            dealt = [items[p] for p in lpt_shards(self._weights[items], K, tie)]
        if self.canonical:
            for g in np.concatenate(dealt).tolist():
                key = (TAG_PARTITIONS, self.partitions, g)
                self.groups[g] = (self.parts[g], int(self.part_left[g]), int(self.part_offsets[g]), key)
            got = dealt
        else:  # worker w of the rank plays group rank * K + w: its share of the rank's episodes
            for w, pos in enumerate(dealt):
                self.groups[rank * K + w] = (pos, int(self.lengths[pos].sum()), 0, (rank, W, w, K))
            got = [np.full(min(1, len(pos)), rank * K + w, dtype=np.int64) for w, pos in enumerate(dealt)]
        self._workers[rank] = got
        return got

    def worker_frames(self, rank: int) -> list[int]:
        """Anchors per logical worker of ``rank`` in one pass."""
        return [sum(self.groups[g][1] for g in gs.tolist()) for gs in self.groups_of(rank)]

    def rank_frames(self) -> np.ndarray:
        """Anchors per rank in one pass, int64 (world_size,)."""
        return np.array([int(self._weights[items].sum()) for items in self._rank_items], dtype=np.int64)

    def rank_episodes(self, rank: int) -> np.ndarray:
        """Episode indices ``rank`` plays this pass, ascending, int64."""
        parts = [self.groups[g][0] for gs in self.groups_of(rank) for g in gs.tolist()]
        return self.episode_indices[np.sort(np.concatenate(parts or [np.empty(0, np.int64)]))]

    def owns(self, rank: int) -> str:
        """What ``rank`` owns, for the idle-worker warning ("3 episode(s)", "4 partition(s)")."""
        return f"{len(self._rank_items[rank])} {'partition' if self.canonical else 'episode'}(s)"

    def plan(self, worker: int, rank: int) -> WorkerPlan:
        """Logical ``worker`` of ``rank`` (cached for this rank)."""
        key = (rank, worker)
        got = self._plans.get(key)
        if got is None:
            got = WorkerPlan(self, worker, rank, [self.groups[g] for g in self.groups_of(rank)[worker].tolist()])
            if rank == self.topo.rank:  # another rank's (an old run's, replayed once) is not kept
                self._plans[key] = got
        return got

    # --- elastic resume -----------------------------------------------------------------------------
    def remainder(self, counts: list[tuple[int, int, int | None]], epoch: int, depth: int) -> StreamSpec:
        """What the old run left of this pass (a remainder :class:`StreamSpec`): ``counts`` are
        ``(rank, worker, anchors it gave)`` per old (rank, worker) (None: its whole share), run
        through the worker's groups in order.
        Canonical: each partition's offset. By topology: each started group replayed in the C pool
        core (pools of ``epoch``) to its count."""
        whole: list[int] = []
        part: dict[int, np.ndarray] = {}
        offsets = self.part_offsets.copy() if self.canonical else None
        for r, w, given in counts:
            plan = self.plan(w, r) if not self.canonical and given else None
            for i, g in enumerate(self.groups_of(r)[w].tolist()):
                pos, left = self.groups[g][:2]
                take = left if given is None else min(given, left)
                given = None if given is None else given - take
                if offsets is not None:
                    offsets[g] += take
                elif take == 0:
                    whole.extend(self.episode_indices[pos].tolist())
                elif take < left:
                    pool = plan.group_pool(i, epoch)
                    pool.skip(take)
                    untouched, started, frames = pool.remaining_state()
                    whole.extend(untouched.tolist())
                    part.update((int(e), fr) for e, fr in zip(started.tolist(), frames) if len(fr))
        if offsets is not None:
            new = {"consumed": int((offsets - self.part_offsets).sum()), "offsets": offsets}
        else:
            lens = dict(zip(self.episode_indices.tolist(), self.lengths.tolist()))
            left = {e: lens[e] for e in whole} | {e: len(fr) for e, fr in part.items()}
            full = self.spec.full or (self.episode_indices, self.lengths)
            whole_len = dict(zip(*(x.tolist() for x in full)))
            maps = self.spec.frames
            frames = {e: maps[e] for e in left if e in maps and e not in part} | part
            frames = {e: fr for e, fr in frames.items() if len(fr) != whole_len[e]}  # all frames left: no map
            idx = np.array(sorted(left), dtype=np.int64)
            ln = np.array([left[e] for e in idx.tolist()], dtype=np.int64)
            consumed = int(self.lengths.sum() - ln.sum())
            new = {"episode_indices": idx, "lengths": ln, "frames": frames, "full": full, "consumed": consumed}
            new["episodes_started"] = len(frames)
        done = {"epoch": int(epoch), "depth": depth, "key": "", "rank": None, "video_decoder_cache_size": None}
        return replace(self.spec, sizes=None, **done, **new)

    @staticmethod
    def over(rem: StreamSpec, topo: Any, plain: Layout) -> Layout:
        """The layout of ``topo`` that plays remainder ``rem`` with this run's sizes and decoder cap
        (``plain``'s): canonical partitions with the pool settings of the pass they continue; by
        topology the leftover episodes on their own seed with this run's settings (shares from
        ``plain``)."""
        s = plain.spec
        new = {"sizes": s.sizes, "video_decoder_cache_size": s.video_decoder_cache_size}
        if plain.canonical:
            return Layout(replace(rem, **new), topo, where=plain.where)
        seed = derived_seed(s.seed, TAG_ELASTIC, rem.epoch, rem.depth)
        spec = replace(rem, seed=seed, strategy=s.strategy, pool_size=s.pool_size, byte_budget=s.byte_budget, **new)
        return Layout(spec, topo, shares_from=plain, where=plain.where)

    def for_rank(self, rem: StreamSpec, rank: int) -> StreamSpec:
        """What ``rank``'s DataLoader workers need of ``rem``: canonical, all of it; by topology,
        the started episodes' frames of its episodes only."""
        if self.canonical:
            return rem
        keep = set(self.rank_episodes(rank).tolist())
        return replace(rem, frames={e: f for e, f in rem.frames.items() if e in keep}, rank=int(rank))

    def info(self, rem: StreamSpec) -> dict[str, Any]:
        """``rem`` in ``Planner.remainder_info``'s units: whole and started episodes, or partitions."""
        if self.canonical:
            left, whole = self.part_left, self.part_left == self.part_frames
            return {"unit": "partitions", "whole": int(whole.sum()), "started": int(((left > 0) & ~whole).sum())}
        started = rem.episodes_started
        return {"unit": "episodes", "whole": int(len(rem.episode_indices) - started), "started": started}
