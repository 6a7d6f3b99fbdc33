"""Canonical partitions: an order that does not depend on the topology (MosaicML Streaming's
"canonical nodes").

With ``partitions=P`` the selected episodes are split once into ``P`` frame-balanced partitions
(greedy LPT over the episode lengths, seeded ties from ``(seed, P)``: never from the world size,
the DataLoader workers or the batch size). Each partition is its own exact-coverage
:class:`~lerobotstream.planner.EpisodePool` per epoch, seeded from ``(seed, epoch, P, partition,
strategy, pool size, byte budget)``, with a pool size and byte budget of its own (``pool_size``,
default ``constants.DEFAULT_PARTITION_POOL_SIZE``, and ``byte_budget`` apply *per partition*). So a
partition's sample sequence — ``(episode, frame)`` in order — is a function of the data, the seed,
the epoch, ``P``, the pool options and the strategy only.

The ``W x K`` physical streams (rank ``r``, logical worker ``w``; ``K = max(1, num_workers)``) own
partitions: in an epoch stream ``s = w * W + r`` (the DataLoader's batch-turn order) owns the
partitions ``p`` with ``p mod (W * K) == s`` and plays them one after another in ascending order,
one partition pool resident at a time (:class:`PartitionChain`). ``P < W * K`` is refused
(``StreamingConfigError``): a stream would own nothing.

**Resume** (:func:`partition_remainder`): rank 0's state (samples consumed, hence every old stream's
count by the DataLoader's batch turns, ``_elastic.rank_batches``) says how far each old stream got
through its partitions, so each partition's consumed prefix (its *offset*) follows from counts
alone — no pool replay. On any new topology the epoch in progress plays each partition's tail from
its offset in the same order (the partition pools are rebuilt with the checkpoint's pool settings
and fast-forwarded in C); the tails are split over the new ranks, then their workers, by the same
LPT as episodes (whole partitions: ``max - min <= the longest tail``). Then plain epochs follow.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lerobotstream import constants
from lerobotstream.errors import ResumeStateError, ShardingError, StreamingConfigError
from lerobotstream.planner import _seeds
from lerobotstream.planner._elastic import pass_counts
from lerobotstream.planner._planner import Planner, WorkerPlan, _share
from lerobotstream.planner._pool import STRATEGY_IDS, EpisodePool, PoolEvent
from lerobotstream.planner._poolcore import shuffled_order
from lerobotstream.planner._shards import lpt_shards
from lerobotstream.planner._state import StreamState

__all__ = ["PartitionChain", "PartitionPlan", "PartitionPlanner", "PartitionRemainder", "partition_layout",
           "partition_remainder"]

_LAYOUTS: OrderedDict[tuple, tuple[list[np.ndarray], np.ndarray]] = OrderedDict()
_LAYOUT_LOCK = threading.Lock()


def partition_layout(lengths: np.ndarray, digest: str, seed: int, partitions: int) -> tuple[list[np.ndarray], np.ndarray]:
    """The ``partitions`` frame-balanced groups of episode positions (int64, ascending each; LPT,
    ``max - min <= the longest episode``) and their frames (int64 (P,)), a function of (episodes,
    seed, partitions) only; cached per process (``digest``: the episodes'
    :func:`~lerobotstream.planner.episodes_digest`)."""
    key = (digest, int(seed), int(partitions))
    with _LAYOUT_LOCK:  # StreamLoader's threads build planners concurrently
        got = _LAYOUTS.get(key)
        if got is None:
            parts = lpt_shards(lengths, partitions, (seed, _seeds.TAG_PARTITIONS, partitions))
            owner = np.empty(len(lengths), np.int64)
            for q, pos in enumerate(parts):
                owner[pos] = q
            got = (parts, np.bincount(owner, weights=lengths, minlength=partitions).astype(np.int64))
            _LAYOUTS[key] = got
            while len(_LAYOUTS) > 4:
                _LAYOUTS.popitem(last=False)
        _LAYOUTS.move_to_end(key)
        return got


@dataclass(frozen=True)
class PartitionRemainder:
    """What a checkpointed partitioned run left of one epoch (or remainder pass).

    Fields:
        epoch (int): the epoch (its label; plain epochs continue with ``epoch + 1``).
        offsets (np.ndarray): int64 (P,) samples of each partition's sequence already consumed.
        consumed (int): samples of the pass the old run consumed, all ranks together.
        depth (int): elastic resumes this remainder went through (1: from a plain epoch).
        strategy, pool_size, byte_budget: the pool settings of that pass (they fix each
            partition's order, so the tails are played with them).
    """

    epoch: int
    offsets: np.ndarray
    consumed: int
    depth: int
    strategy: str
    pool_size: int | None
    byte_budget: int | None


class PartitionChain:
    """The :class:`~lerobotstream.planner.EpisodePool` interface over one stream's partition pools
    of one epoch, played one after another (only the current one resident; ``frontier`` looks
    into the next ones). Events keep the pool's meaning, positions counted along the chain; the
    episodes resident when a partition starts (a tail: those its consumed prefix had admitted)
    are reported as admitted there."""

    def __init__(self, plan: PartitionPlan, epoch: int) -> None:
        self._plan, self._epoch = plan, int(epoch)
        left = plan._planner.part_left
        self._todo = deque(int(p) for p in plan.partitions if left[p] > 0)
        self._ready: deque[EpisodePool] = deque()
        self._events: list[PoolEvent] = []
        self._emitted = 0
        self._base = 0
        self._cur: EpisodePool | None = None
        self._switch()

    def _prepare(self) -> EpisodePool:
        pid = self._todo.popleft()
        pool = self._plan.partition_pool(pid, self._epoch)
        off = int(self._plan._planner.part_offsets[pid])
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
        """Anchors emitted so far in this epoch (the stream's share of it)."""
        return self._emitted

    @property
    def exhausted(self) -> bool:
        return self._cur is None or (self._cur.exhausted and not self._todo and not self._ready)

    @property
    def remaining(self) -> int:
        """Frames of the resident episodes (current partition) not yet emitted."""
        return 0 if self._cur is None else self._cur.remaining

    def resident(self) -> np.ndarray:
        return np.empty(0, np.int64) if self._cur is None else self._cur.resident()

    def frontier(self, k: int) -> np.ndarray:
        """The next ``k`` episodes to be admitted, in order, across the following partitions."""
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
            self._events += [PoolEvent(self._base + ev.position, ev.kind, ev.episode_index)
                             for ev in self._cur.drain_events()]
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

    __iter__ = EpisodePool.__iter__  # (episode_index, frame_index) Python ints until the epoch ends


class PartitionPlan(WorkerPlan):
    """One stream (rank, logical worker) of a :class:`PartitionPlanner`: its partitions in play
    order and their episodes.

    Attributes (beyond :class:`~lerobotstream.planner.WorkerPlan`'s):
        partitions (np.ndarray): int64 partition ids the stream plays, in order (ascending).
        episode_indices, lengths, nbytes: of those partitions' episodes, partition by partition
            (each partition's ascending).
        num_frames (int): anchors of the pass (a remainder pass: the partitions' tails).
        pool_size, byte_budget: one partition's (resident at a time), not a share of the rank's.
    """

    def __init__(self, planner: PartitionPlanner, worker: int, partitions: np.ndarray, rank: int) -> None:
        self._planner = planner
        self.worker, self.rank = int(worker), int(rank)
        self.partitions = np.asarray(partitions, dtype=np.int64)
        parts = [planner._parts[p] for p in self.partitions.tolist()]
        pos = np.concatenate(parts) if parts else np.empty(0, np.int64)
        self._bounds = dict(zip(self.partitions.tolist(), np.cumsum([0] + [len(x) for x in parts]).tolist()))
        self.episode_indices = planner.episode_indices[pos]
        self.lengths = planner.lengths[pos]
        self.num_frames = int(planner.part_left[self.partitions].sum()) if len(parts) else 0
        self.frame_maps: dict[int, np.ndarray] = {}
        self.pool_size = planner.partition_pool_size
        self.byte_budget = planner.byte_budget
        self.decoder_cache_size = _share(planner.decoder_cache_size, max(1, planner._active_count(self.rank)))
        self.nbytes = self._sizes(f"one partition's budget, of {planner.partitions} partitions",
                                  "(with partitions it is each partition's, not split over the workers)")

    def _words(self, epoch: int, tag: int, partition: int = 0) -> np.ndarray:
        p = self._planner
        return _seeds.seed_words(p.seed, epoch, _seeds.TAG_PARTITIONS, p.partitions, partition,
                                 STRATEGY_IDS[p.strategy], self.pool_size,
                                 0 if self.byte_budget is None else self.byte_budget + 1, tag)

    def _span(self, partition: int) -> slice:
        a = self._bounds[partition]
        return slice(a, a + len(self._planner._parts[partition]))

    def _partition_order(self, partition: int, epoch: int) -> np.ndarray:
        n = len(self._planner._parts[partition])
        if self._planner.strategy == "sequential":
            return np.arange(n, dtype=np.int64)
        return shuffled_order(self._words(epoch, _seeds.TAG_ADMISSION, partition), n)

    def admission_order(self, epoch: int) -> np.ndarray:
        """Episode indices in this epoch's admission order, partition after partition (int64)."""
        out = [self.episode_indices[self._span(p)][self._partition_order(p, epoch)]
               for p in self.partitions.tolist()]
        return np.concatenate(out) if out else np.empty(0, np.int64)

    def partition_pool(self, partition: int, epoch: int) -> EpisodePool:
        """Partition ``partition``'s exact-coverage pool of ``epoch``, at its first anchor."""
        sl = self._span(partition)
        size_of = (lambda local, a=sl.start: self.size_of(a + local)) if self.sizes_on_demand else None
        return EpisodePool(self.episode_indices[sl], self.lengths[sl], self.nbytes[sl],
                           self._partition_order(partition, epoch), self.pool_size, self.byte_budget,
                           self._planner.strategy, self._words(epoch, _seeds.TAG_DRAWS, partition), None, size_of)

    def pool(self, epoch: int) -> PartitionChain:  # type: ignore[override]
        """The stream's pool of ``epoch``: its partitions one after another (from their offsets)."""
        return PartitionChain(self, epoch)


class PartitionPlanner(Planner):
    """A :class:`~lerobotstream.planner.Planner` whose order does not depend on the topology: the
    episodes are split into ``partitions`` canonical partitions, each with its own seeded pool (see
    the module doc). Arguments are :class:`Planner`'s, plus ``partitions`` (int >= 1); ``pool_size``
    and ``byte_budget`` are per partition (default pool size
    ``constants.DEFAULT_PARTITION_POOL_SIZE``); ``decoder_cache_size`` stays per rank.

    Raises:
        StreamingConfigError: ``partitions`` is not an int >= 1, or fewer than ``world_size x
            max(1, num_workers)`` (a stream would own nothing).
        ShardingError: fewer non-empty episodes than partitions.
    """

    def __init__(self, episode_lengths, *, partitions: int, _offsets: np.ndarray | None = None, **kw: Any) -> None:
        if isinstance(partitions, bool) or not isinstance(partitions, (int, np.integer)) or partitions < 1:
            raise StreamingConfigError(f"partitions must be an int >= 1, got {partitions!r}", option="partitions",
                                       value=partitions)
        self.partitions = int(partitions)
        self._offsets = None if _offsets is None else np.asarray(_offsets, dtype=np.int64)
        super().__init__(episode_lengths, **kw)

    @property
    def partition_pool_size(self) -> int:
        """Resident episodes of one partition at most."""
        return constants.DEFAULT_PARTITION_POOL_SIZE if self.pool_size is None else int(self.pool_size)

    # --- partitions and who plays them ---------------------------------------------------------------
    def _build_shards(self) -> None:
        P, W, K = self.partitions, self.world_size, self.num_shards
        if P < W * K:
            raise StreamingConfigError(
                f"partitions={P} is fewer than the {W * K} streams of this run (world size {W} x {K} DataLoader "
                f"worker(s) per rank): every rank's worker plays whole partitions and would get none; use "
                f"partitions >= {W * K} (lerobotstream-train: --dataset.streaming_partitions; a multiple of it "
                f"balances best), or fewer ranks or workers",
                option="partitions", value=P)
        if len(self.lengths) < P:
            raise ShardingError(
                f"{len(self.lengths)} non-empty selected episode(s) cannot fill partitions={P}: some partition "
                f"would own no episode. Use partitions <= {len(self.lengths)} (lerobotstream-train: "
                f"--dataset.streaming_partitions; --dataset.episodes and --dataset.eval_split leave fewer episodes "
                f"to train on) or select more episodes.",
                num_episodes=len(self.lengths), world_size=W)
        self._parts, self.part_frames = partition_layout(self.lengths, self.episodes_digest, self.seed, P)
        self.part_offsets = np.zeros(P, np.int64) if self._offsets is None else self._offsets
        if len(self.part_offsets) != P or (self.part_offsets < 0).any() or (self.part_offsets > self.part_frames).any():
            raise ResumeStateError(f"partition offsets {self.part_offsets.tolist()[:8]}... do not fit the "
                                   f"{P} partitions of this stream")
        self.part_left = self.part_frames - self.part_offsets
        self._streams = self._assign()
        owner = np.full(P, -1, np.int64)  # stream r * K + w of each partition this pass
        for r, ws in enumerate(self._streams):
            for w, ids in enumerate(ws):
                owner[ids] = r * K + w
        live = owner >= 0
        self._frames = np.zeros(W * K, np.int64)
        np.add.at(self._frames, owner[live], self.part_left[live])
        self._rank_pos = _RankPositions(self)
        self._worker_pos_cache = {}
        self._plans = {}
        self.num_active_workers = self._active_count(self.rank)

    def _positions(self, partitions: np.ndarray) -> np.ndarray:
        parts = [self._parts[p] for p in partitions.tolist()]
        return np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)

    def _assign(self) -> list[list[np.ndarray]]:
        """Per rank, per logical worker: the partitions it plays, ascending. A plain epoch: stream
        ``w * W + r`` owns ``p mod (W * K) == w * W + r``; a remainder pass: the tails left, LPT over
        the ranks, then over each rank's workers (whole partitions)."""
        P, W, K = self.partitions, self.world_size, self.num_shards
        if self._offsets is None:
            return [[np.arange(w * W + r, P, W * K, dtype=np.int64) for w in range(K)] for r in range(W)]
        alive = np.flatnonzero(self.part_left > 0)
        out = []
        ranks = lpt_shards(self.part_left[alive], W, (self.seed, _seeds.TAG_PARTITIONS, _seeds.TAG_RANK_SHARDS, W)) \
            if len(alive) else [np.empty(0, np.int64)] * W
        for r, rpos in enumerate(ranks):
            mine = alive[rpos]
            n = min(K, len(mine))
            ws = [] if n == 0 else lpt_shards(self.part_left[mine], n, (self.seed, _seeds.TAG_PARTITIONS,
                                                                        _seeds.TAG_WORKER_SHARDS, r, W, K))
            out.append([mine[x] for x in ws] + [np.empty(0, np.int64)] * (K - n))
        return out

    def stream_partitions(self, worker: int, rank: int | None = None) -> np.ndarray:
        """Partition ids logical ``worker`` of ``rank`` plays this pass, in order (int64)."""
        return self._streams[self.rank if rank is None else rank][worker]

    def partition_episodes(self, partition: int) -> np.ndarray:
        """Dataset episode indices of ``partition`` (ascending, int64)."""
        return self.episode_indices[self._parts[partition]]

    def _worker_positions(self, rank: int) -> list[np.ndarray]:
        if rank not in self._worker_pos_cache:
            self._worker_pos_cache[rank] = [self._positions(ps) for ps in self._streams[rank]]
        return self._worker_pos_cache[rank]

    def _worker_frames(self, rank: int) -> list[int]:
        K = self.num_shards
        return self._frames[rank * K:(rank + 1) * K].tolist()

    def _active_count(self, rank: int) -> int:
        return sum(1 for f in self._worker_frames(rank) if f)

    def _owns(self) -> str:
        return f"{sum(len(ps) for ps in self._streams[self.rank])} partition(s)"

    def _make_plan(self, worker: int, rank: int) -> PartitionPlan:
        return PartitionPlan(self, worker, self._streams[rank][worker], rank)

    def samples_per_rank(self) -> np.ndarray:
        p = self._pass()
        if p is not self:
            return p.samples_per_rank()
        return self._frames.reshape(self.world_size, self.num_shards).sum(axis=1)

    # --- resume ------------------------------------------------------------------------------------
    def _stream_state(self, samples: int) -> StreamState:
        return replace(super()._stream_state(samples), partitions=self.partitions)

    def _layout_kwargs(self, st: StreamState) -> dict[str, Any]:
        return {"partitions": st.partitions}

    def _remainder(self) -> PartitionRemainder:
        return partition_remainder(self, StreamState.from_dict(self.origin))

    def rank_remainders(self) -> None:
        """Nothing to ship to the DataLoader workers: each worker derives the partitions' offsets
        from counts (``partition_remainder``, no replay; well under a second at DROID scale)."""
        return None

    def _planner_over(self, rem: PartitionRemainder) -> PartitionPlanner:
        """The planner of this topology that plays every partition's tail of ``rem`` (the same seed,
        partitions and pool settings as the pass it continues, so the same orders), then
        (endless) this planner's plain epochs."""
        nb = self.episode_nbytes
        if rem.byte_budget is not None and nb is None:
            provider = self.nbytes_provider
            nb = (lambda e: provider()[0](e)) if provider is not None else _no_nbytes
        rp = PartitionPlanner(self.lengths, episode_indices=self.episode_indices, seed=self.seed, rank=self.rank,
                              world_size=self.world_size, num_workers=self.num_workers, pool_size=rem.pool_size,
                              strategy=rem.strategy, byte_budget=rem.byte_budget,
                              episode_nbytes=nb if rem.byte_budget is not None else None,
                              decoder_cache_size=self.decoder_cache_size, repeat=self.repeat,
                              batch_size=self.batch_size, drop_last=self.drop_last, equalize=self.equalize,
                              partitions=self.partitions, _offsets=rem.offsets)
        return self._attach(rp, rem, self._plain())

    def remainder_info(self) -> dict[str, Any] | None:
        """As ``Planner.remainder_info``, by partitions (which episodes of a started partition were
        started is not known from counts): ``epoch``, ``samples_left``, ``rank_samples``,
        ``partitions_whole`` (tails that are a whole partition), ``partitions_started`` (tails of a
        started partition), ``depth``, ``consumed``."""
        if not self._elastic_active():
            return None
        rp = self._remainder_planner()
        rem, left = rp.remainder, rp.part_left
        return {"epoch": rem.epoch, "samples_left": int(left.sum()), "rank_samples": int(rp.samples_per_rank()[self.rank]),
                "partitions_whole": int((left == rp.part_frames).sum()),
                "partitions_started": int(((left > 0) & (left < rp.part_frames)).sum()),
                "depth": rem.depth, "consumed": rem.consumed}


class _RankPositions:
    """``Planner._rank_pos`` computed per rank on use (a rank's episode positions, ascending)."""

    def __init__(self, planner: PartitionPlanner) -> None:
        self._planner = planner
        self._cache: dict[int, np.ndarray] = {}

    def __getitem__(self, rank: int) -> np.ndarray:
        if rank not in self._cache:
            ws = self._planner._streams[rank]
            self._cache[rank] = self._planner._positions(np.concatenate(ws) if ws else np.empty(0, np.int64))
        return self._cache[rank]

    def __len__(self) -> int:
        return self._planner.world_size

    def __iter__(self):
        return (self[r] for r in range(len(self)))


def _no_nbytes(episode_index: int) -> int:
    raise AssertionError("this planner has no episode sizes (episode_nbytes) for a byte budget")


def _advance(offsets: np.ndarray, planner: PartitionPlanner, rank: int, worker: int, given: int) -> None:
    """Add ``given`` anchors of stream (rank, worker) of ``planner``'s pass to its partitions' offsets."""
    for p in planner._streams[rank][worker].tolist():
        if given <= 0:
            return
        take = min(given, int(planner.part_left[p]))
        offsets[p] += take
        given -= take


def partition_remainder(planner: PartitionPlanner, st: StreamState) -> PartitionRemainder:
    """Each partition's consumed offset in ``st``'s epoch in progress (see the module doc): from
    counts only — rank 0's consumed samples through the DataLoader's batch turns give every old
    stream's count, which runs through its partitions in order.

    ``repeat=True``: every old stream rolls into its next epoch on its own; the epoch in progress is
    the earliest pass any old stream was still in, and the partitions of the streams already past
    it count as consumed there (their samples of the next epoch are drawn again in it).

    Raises:
        ResumeStateError: the count does not fit the state's epoch (ends inside a batch with
        several workers, or exceeds it), or every old stream is idle.
    """
    old = planner._like(st)
    rp = old._remainder_planner() if old._elastic_active() else None
    src, epoch, counts = pass_counts(old, rp)
    offsets = src.part_offsets.copy()
    for r, w, g in counts:
        if g is None:  # already past this pass: its partitions of the pass are consumed
            mine = src._streams[r][w]
            offsets[mine] = src.part_frames[mine]
        else:
            _advance(offsets, src, r, w, g)
    return PartitionRemainder(int(epoch), offsets, int((offsets - src.part_offsets).sum()),
                              1 + rp.remainder.depth if src is rp else 1, src.strategy, src.pool_size,
                              src.byte_budget)
