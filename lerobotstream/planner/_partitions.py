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
from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobotstream import constants
from lerobotstream.errors import ResumeStateError, ShardingError, StreamingConfigError
from lerobotstream.planner import _seeds
from lerobotstream.planner._layout import StreamSpec, Topology, WorkerPlan, share
from lerobotstream.planner._pool import STRATEGY_IDS, EpisodePool, PoolEvent
from lerobotstream.planner._poolcore import shuffled_order
from lerobotstream.planner._shards import lpt_shards

__all__ = ["PartitionChain", "PartitionLayout", "PartitionPlan", "PartitionRemainder", "partition_layout"]

_LAYOUTS: OrderedDict[tuple, tuple[list[np.ndarray], np.ndarray]] = OrderedDict()
_LAYOUT_LOCK = threading.Lock()


def partition_layout(
    lengths: np.ndarray, digest: str, seed: int, partitions: int
) -> tuple[list[np.ndarray], np.ndarray]:
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


@dataclass
class PartitionRemainder:
    """What a checkpointed partitioned run left of one epoch (or remainder pass).

    Fields:
        epoch (int): the epoch (its label; plain epochs continue with ``epoch + 1``).
        offsets (np.ndarray): int64 (P,) samples of each partition's sequence already consumed.
        consumed (int): samples of the pass the old run consumed, all ranks together.
        depth (int): elastic resumes this remainder went through (1: from a plain epoch).
        strategy, pool_size, byte_budget: the pool settings of that pass (they fix each
            partition's order, so the tails are played with them).
        key (str): what it is the remainder of (a digest of the old state and the episodes).
        rank (None): every rank's (P offsets are all a rank needs).
    """

    epoch: int
    offsets: np.ndarray
    consumed: int
    depth: int
    strategy: str
    pool_size: int | None
    byte_budget: int | None
    key: str = ""
    rank: int | None = None


class PartitionChain:
    """The :class:`~lerobotstream.planner.EpisodePool` interface over one stream's partition pools
    of one epoch, played one after another (only the current one resident; ``frontier`` looks
    into the next ones). Events keep the pool's meaning, positions counted along the chain; the
    episodes resident when a partition starts (a tail: those its consumed prefix had admitted)
    are reported as admitted there."""

    def __init__(self, plan: PartitionPlan, epoch: int) -> None:
        self._plan, self._epoch = plan, int(epoch)
        self._todo = deque(plan.tails())
        self._ready: deque[EpisodePool] = deque()
        self._events: list[PoolEvent] = []
        self._emitted = 0
        self._base = 0
        self._cur: EpisodePool | None = None
        self._switch()

    def _prepare(self) -> EpisodePool:
        pid = self._todo.popleft()
        pool = self._plan.partition_pool(pid, self._epoch)
        off = self._plan.offset(pid)
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

    __iter__ = EpisodePool.__iter__  # (episode_index, frame_index) Python ints until the epoch ends


class PartitionPlan(WorkerPlan):
    """One stream (rank, logical worker) of a :class:`PartitionLayout`: its partitions in play
    order and their episodes.

    Attributes (beyond :class:`~lerobotstream.planner.WorkerPlan`'s):
        partitions (np.ndarray): int64 partition ids the stream plays, in order (ascending).
        episode_indices, lengths, nbytes: of those partitions' episodes, partition by partition
            (each partition's ascending).
        num_frames (int): anchors of the pass (a remainder pass: the partitions' tails).
        pool_size, byte_budget: one partition's (resident at a time), not a share of the rank's.
    """

    def __init__(self, layout: PartitionLayout, worker: int, partitions: np.ndarray, rank: int) -> None:
        self._layout = layout
        self.worker, self.rank = int(worker), int(rank)
        self.partitions = np.asarray(partitions, dtype=np.int64)
        parts = [layout.parts[p] for p in self.partitions.tolist()]
        pos = np.concatenate(parts) if parts else np.empty(0, np.int64)
        self._bounds = dict(zip(self.partitions.tolist(), np.cumsum([0] + [len(x) for x in parts]).tolist()))
        self.episode_indices = layout.episode_indices[pos]
        self.lengths = layout.lengths[pos]
        self.num_frames = int(layout.part_left[self.partitions].sum()) if len(parts) else 0
        self.frame_maps: dict[int, np.ndarray] = {}
        self.pool_size = layout.partition_pool_size
        self.byte_budget = layout.spec.byte_budget
        self.video_decoder_cache_size = share(
            layout.spec.video_decoder_cache_size, max(1, layout.num_active(self.rank))
        )
        self.where = ""
        self.nbytes = self._sizes(
            f"one partition's budget, of {layout.partitions} partitions",
            "(with partitions it is each partition's, not split over the workers)",
        )

    def tails(self) -> list[int]:
        """The partitions this stream plays that have anchors left this pass, in order."""
        left = self._layout.part_left
        return [int(p) for p in self.partitions.tolist() if left[p] > 0]

    def offset(self, partition: int) -> int:
        """Anchors of ``partition``'s sequence consumed before this pass (a remainder's offset)."""
        return int(self._layout.part_offsets[partition])

    def _words(self, epoch: int, tag: int, partition: int = 0) -> np.ndarray:
        lay = self._layout
        return _seeds.seed_words(
            lay.spec.seed,
            epoch,
            _seeds.TAG_PARTITIONS,
            lay.partitions,
            partition,
            STRATEGY_IDS[lay.spec.strategy],
            self.pool_size,
            0 if self.byte_budget is None else self.byte_budget + 1,
            tag,
        )

    def _span(self, partition: int) -> slice:
        a = self._bounds[partition]
        return slice(a, a + len(self._layout.parts[partition]))

    def _partition_order(self, partition: int, epoch: int) -> np.ndarray:
        n = len(self._layout.parts[partition])
        if self._layout.spec.strategy == "sequential":
            return np.arange(n, dtype=np.int64)
        return shuffled_order(self._words(epoch, _seeds.TAG_ADMISSION, partition), n)

    def admission_order(self, epoch: int) -> np.ndarray:
        """Episode indices in this epoch's admission order, partition after partition (int64)."""
        out = [self.episode_indices[self._span(p)][self._partition_order(p, epoch)] for p in self.partitions.tolist()]
        return np.concatenate(out) if out else np.empty(0, np.int64)

    def partition_pool(self, partition: int, epoch: int) -> EpisodePool:
        """Partition ``partition``'s exact-coverage pool of ``epoch``, at its first anchor."""
        sl = self._span(partition)
        size_of = (lambda local, a=sl.start: self.size_of(a + local)) if self.sizes_on_demand else None
        return EpisodePool(
            self.episode_indices[sl],
            self.lengths[sl],
            self.nbytes[sl],
            self._partition_order(partition, epoch),
            self.pool_size,
            self.byte_budget,
            self._layout.spec.strategy,
            self._words(epoch, _seeds.TAG_DRAWS, partition),
            None,
            size_of,
        )

    def pool(self, epoch: int) -> PartitionChain:  # type: ignore[override]
        """The stream's pool of ``epoch``: its partitions one after another (from their offsets)."""
        return PartitionChain(self, epoch)


class PartitionLayout:
    """A pool layout whose order does not depend on the topology: the stream's episodes split into
    ``spec.partitions`` canonical partitions, each with its own seeded pool (see the module doc);
    ``spec.pool_size`` and ``spec.byte_budget`` are per partition (default pool size
    ``constants.DEFAULT_PARTITION_POOL_SIZE``), ``spec.video_decoder_cache_size`` per rank. ``offsets``:
    a remainder pass, each partition's consumed prefix (its tail is played).

    Raises:
        StreamingConfigError: ``partitions`` is not an int >= 1, or fewer than ``world_size x
            max(1, num_workers)`` (a stream would own nothing).
        ShardingError: fewer non-empty episodes than partitions.
        ResumeStateError: ``offsets`` that do not fit the partitions.
    """

    kind = "partitions"

    def __init__(self, spec: StreamSpec, topo: Topology, *, offsets: np.ndarray | None = None) -> None:
        P = spec.partitions
        if isinstance(P, bool) or not isinstance(P, (int, np.integer)) or P < 1:
            raise StreamingConfigError(f"partitions must be an int >= 1, got {P!r}", option="partitions", value=P)
        self.spec, self.topo = spec, topo
        self.partitions = P = int(P)
        self.episode_indices, self.lengths = spec.episode_indices, spec.lengths
        self.frame_maps: dict[int, np.ndarray] = {}
        W, K = topo.world_size, topo.num_shards
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
        self.parts, self.part_frames = partition_layout(self.lengths, spec.digest, spec.seed, P)
        self._offsets = None if offsets is None else np.asarray(offsets, dtype=np.int64)
        self.part_offsets = np.zeros(P, np.int64) if self._offsets is None else self._offsets
        if len(self.part_offsets) != P or (self.part_offsets < 0).any() or (self.part_offsets > self.part_frames).any():
            raise ResumeStateError(
                f"partition offsets {self.part_offsets.tolist()[:8]}... do not fit the {P} partitions of this stream"
            )
        self.part_left = self.part_frames - self.part_offsets
        self.streams = self._assign()
        owner = np.full(P, -1, np.int64)  # stream r * K + w of each partition this pass
        for r, ws in enumerate(self.streams):
            for w, ids in enumerate(ws):
                owner[ids] = r * K + w
        live = owner >= 0
        self._frames = np.zeros(W * K, np.int64)
        np.add.at(self._frames, owner[live], self.part_left[live])
        self._rank_pos: dict[int, np.ndarray] = {}
        self._plans: dict[tuple[int, int], PartitionPlan] = {}

    @property
    def partition_pool_size(self) -> int:
        """Resident episodes of one partition at most."""
        return constants.DEFAULT_PARTITION_POOL_SIZE if self.spec.pool_size is None else int(self.spec.pool_size)

    def _positions(self, partitions: np.ndarray) -> np.ndarray:
        parts = [self.parts[p] for p in partitions.tolist()]
        return np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)

    def _assign(self) -> list[list[np.ndarray]]:
        """Per rank, per logical worker: the partitions it plays, ascending. A plain epoch: stream
        ``w * W + r`` owns ``p mod (W * K) == w * W + r``; a remainder pass: the tails left, LPT over
        the ranks, then over each rank's workers (whole partitions)."""
        P, W, K, seed = self.partitions, self.topo.world_size, self.topo.num_shards, self.spec.seed
        if self._offsets is None:
            return [[np.arange(w * W + r, P, W * K, dtype=np.int64) for w in range(K)] for r in range(W)]
        alive = np.flatnonzero(self.part_left > 0)
        out = []
        ranks = (
            lpt_shards(self.part_left[alive], W, (seed, _seeds.TAG_PARTITIONS, _seeds.TAG_RANK_SHARDS, W))
            if len(alive)
            else [np.empty(0, np.int64)] * W
        )
        for r, rpos in enumerate(ranks):
            mine = alive[rpos]
            n = min(K, len(mine))
            ws = (
                []
                if n == 0
                else lpt_shards(
                    self.part_left[mine], n, (seed, _seeds.TAG_PARTITIONS, _seeds.TAG_WORKER_SHARDS, r, W, K)
                )
            )
            out.append([mine[x] for x in ws] + [np.empty(0, np.int64)] * (K - n))
        return out

    # --- the layout interface (see _layout.EpisodeLayout) -----------------------------------------
    def stream_partitions(self, worker: int, rank: int) -> np.ndarray:
        """Partition ids logical ``worker`` of ``rank`` plays this pass, in order (int64)."""
        return self.streams[rank][worker]

    def partition_episodes(self, partition: int) -> np.ndarray:
        """Dataset episode indices of ``partition`` (ascending, int64)."""
        return self.episode_indices[self.parts[partition]]

    def worker_frames(self, rank: int) -> list[int]:
        K = self.topo.num_shards
        return self._frames[rank * K : (rank + 1) * K].tolist()

    def rank_frames(self) -> np.ndarray:
        return self._frames.reshape(self.topo.world_size, self.topo.num_shards).sum(axis=1)

    def rank_episodes(self, rank: int) -> np.ndarray:
        got = self._rank_pos.get(rank)
        if got is None:
            ws = self.streams[rank]
            got = self._rank_pos[rank] = self._positions(np.concatenate(ws) if ws else np.empty(0, np.int64))
        return self.episode_indices[got]

    def worker_episodes(self, worker: int, rank: int) -> np.ndarray:
        return self.episode_indices[self._positions(self.streams[rank][worker])]

    def num_active(self, rank: int) -> int:
        return sum(1 for f in self.worker_frames(rank) if f)

    def owns(self, rank: int) -> str:
        return f"{sum(len(ps) for ps in self.streams[rank])} partition(s)"

    def plan(self, worker: int, rank: int) -> PartitionPlan:
        key = (rank, worker)
        got = self._plans.get(key)
        if got is None:
            got = PartitionPlan(self, worker, self.streams[rank][worker], rank)
            if rank == self.topo.rank:  # another rank's (an old run's, replayed once) is not kept
                self._plans[key] = got
        return got

    # --- elastic resume ---------------------------------------------------------------------------
    def remainder(
        self, counts: list[tuple[int, int, int | None]], epoch: int, pool_epoch: int, depth: int
    ) -> PartitionRemainder:
        """Each partition's consumed offset after ``counts`` (``(rank, worker, anchors it gave)``
        per old stream, None: its whole share consumed): from counts only, no pool replay — an old
        stream's count runs through its partitions in order."""
        offsets = self.part_offsets.copy()
        for r, w, g in counts:
            mine = self.streams[r][w]
            if g is None:  # already past this pass: its partitions of the pass are consumed
                offsets[mine] = self.part_frames[mine]
                continue
            for p in mine.tolist():
                if g <= 0:
                    break
                take = min(g, int(self.part_left[p]))
                offsets[p] += take
                g -= take
        return PartitionRemainder(
            int(epoch),
            offsets,
            int((offsets - self.part_offsets).sum()),
            depth,
            self.spec.strategy,
            self.spec.pool_size,
            self.spec.byte_budget,
        )

    @staticmethod
    def over(rem: PartitionRemainder, topo: Topology, plain: PartitionLayout) -> PartitionLayout:
        """The layout of ``topo`` that plays every partition's tail of ``rem``: the same seed,
        partitions and pool settings as the pass it continues (so the same orders)."""
        spec = plain.spec.but(strategy=rem.strategy, pool_size=rem.pool_size, byte_budget=rem.byte_budget)
        return PartitionLayout(spec, topo, offsets=rem.offsets)

    def for_rank(self, rem: PartitionRemainder, rank: int) -> PartitionRemainder:
        """What a rank's DataLoader workers need of ``rem``: all of it (P offsets)."""
        return rem

    def info(self, rem: PartitionRemainder) -> dict[str, Any]:
        """The remainder in ``Planner.remainder_info``'s units: partitions whole and started
        (which episodes of a started partition were started is not known from counts)."""
        left = self.part_left
        return {
            "unit": "partitions",
            "whole": int((left == self.part_frames).sum()),
            "started": int(((left > 0) & (left < self.part_frames)).sum()),
        }
