"""``Planner``: the planner of one rank over N >= 1 streams — its position (epoch, consumed
samples, elastic origin), its resume state and the checks on loading one, and the one interface
the dataset layer drives (``worker_start`` → ``worker_plans`` → ``worker_pools``).

What it plays is a :class:`~lerobotstream.planner._pass.Pass` (streams' pool layouts on this
topology, mixed per worker); which pass, and where in it, follows from the position by
:func:`~lerobotstream.planner._pass.resolve_pass`. A single dataset is a mixture of one stream
(``Planner(episode_lengths, ...)`` or :meth:`Planner.for_dataset`); a weighted mixture is
``Planner.for_streams(...)`` (``MixturePlanner.for_datasets``); canonical partitions are a pool
layout (``partitions=P``), for one dataset or a mixture.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from lerobotstream import constants
from lerobotstream.errors import ResumeStateError, ShardingError, StreamingConfigError, naming
from lerobotstream.planner._checkpoint import ELASTIC_SETTINGS, REFUSED_SETTINGS, RESUME_SETTINGS, PlannerCheckpoint
from lerobotstream.planner._layout import Topology, WorkerPlan, read_pools
from lerobotstream.planner._pass import (
    Pass,
    Resolved,
    WorkerStart,
    build_layout,
    old_run_remainders,
    remainder_cache,
    remainder_pass,
    resolve_pass,
    state_key,
)
from lerobotstream.planner._settings import PlanSettings
from lerobotstream.planner._state import StreamState
from lerobotstream.planner._streams import Streams, episodes_of
from lerobotstream.planner._world import discover_world

__all__ = ["ELASTIC_SETTINGS", "Planner", "REFUSED_SETTINGS", "RESUME_SETTINGS", "WorkerStart", "dataset_planner"]

logger = logging.getLogger("lerobotstream.planner")
_IDLE_WARNED: set[tuple] = set()


class Planner(PlannerCheckpoint):
    """Deterministic planner of one rank over N >= 1 streams (pure: no I/O, no torch import).

    ``Planner(episode_lengths, ...)`` is one dataset's (the other constructors:
    :meth:`for_dataset`, :meth:`for_streams`).

    Args:
        episode_lengths: frames per selected episode: ``{episode_index: length}``, or a 1-D array
            (then ``episode_indices`` gives the indices, default ``0..E-1``). Episodes of length 0
            are dropped (never yielded).
        episode_indices: dataset episode indices matching an array ``episode_lengths``.
        episode_nbytes: the episodes' exact synthesized sizes (all cameras): an ``EpisodeSizes``
            (asked as admission reaches an episode) or ``episode_nbytes(episode_index) -> int``
            (every episode of a worker plan sized when the plan is built); needed with a budget.
        **settings: :class:`~lerobotstream.planner.PlanSettings`' fields, the options' names and
            defaults (declared once, there): ``seed`` (1000; None → 42); ``rank``, ``world_size``
            (default from torch.distributed, else RANK/WORLD_SIZE, else 0/1); ``num_workers``
            (DataLoader workers per rank, 0 = in the training process; ``max_num_shards`` of the
            dataset maps here, 0 and 1 are one stream); ``episode_pool_size`` (per-worker pool
            size when given: each batch comes from one worker's pool; default 32 per rank split
            over the workers used, ``max(1, 32 // n)``; with ``partitions``: per partition,
            default ``constants.DEFAULT_PARTITION_POOL_SIZE``); ``sampling_strategy``
            (``remaining``, ``round_robin`` or ``sequential``: ascending episodes, frames in order,
            evaluation streams); ``byte_budget`` (per-rank resident bytes or None; each worker
            gets 1/n, with ``partitions`` per partition); ``video_decoder_cache_size`` (per-rank
            decoder LRU size or None; each worker gets 1/n); ``repeat`` (endless stream, what
            lerobot-train uses); ``batch_size``, ``drop_last`` (the DataLoader's, for resume and
            batch counts); ``equalize`` (finite epochs only: ``none``, ranks may give different
            batch counts, see ``batches_per_rank()``, or ``drop``, every rank stops after the
            smallest rank's batch count so DDP collectives never hang; dropped anchors are skipped
            this epoch only); ``partitions`` (canonical partitions: an order that does not depend
            on the topology).

    Raises:
        TypeError: a keyword that is no ``PlanSettings`` field.
        ShardingError: a rank would own no episode (lower the number of ranks), bad rank/world.
        StreamingConfigError (a ValueError): a setting breaks its option's rule (unknown strategy
            or equalize mode, a count out of range), bad ``partitions`` (fewer than the run's streams).
        ValueError: bad sizes or counts.
    """

    def __init__(
        self,
        episode_lengths: Mapping[int, int] | np.ndarray | list[int],
        *,
        episode_indices: np.ndarray | list[int] | None = None,
        episode_nbytes: Callable[[int], int] | None = None,
        **settings: Any,
    ) -> None:
        self._setup(Streams((episodes_of(episode_lengths, episode_indices, episode_nbytes),)), PlanSettings(**settings))

    # --- construction -------------------------------------------------------------------------------
    @classmethod
    def for_dataset(
        cls,
        episode_lengths: Mapping[int, int],
        settings: PlanSettings,
        episode_nbytes: Callable[[int], int] | None = None,
    ) -> Planner:
        """One dataset's planner from plain settings (``episode_nbytes``: its sizes)."""
        out = cls.__new__(cls)
        out._setup(Streams((episodes_of(episode_lengths, None, episode_nbytes),)), settings)
        return out

    @classmethod
    def for_streams(cls, streams: Streams, settings: PlanSettings, *, specs: Sequence[Any] | None = None) -> Planner:
        """A planner over ``streams`` (``specs``: the streams' own settings instead of the rule's)."""
        out = cls.__new__(cls)
        out._setup(streams, settings, specs)
        return out

    def _setup(self, streams: Streams, settings: PlanSettings, specs: Sequence[Any] | None = None) -> None:
        s = settings  # checked by the options' rules (PlanSettings)
        if s.byte_budget is not None and specs is None and any(e.sizes is None for e in streams.episodes):
            raise ValueError("a byte_budget needs episode_nbytes (each episode's exact synthesized size)")
        rank, world = discover_world(s.rank, s.world_size)
        self.settings = s.but(rank=rank, world_size=world)
        self.streams = streams
        self.seed = constants.SEED_WHEN_NONE if s.seed is None else int(s.seed)
        self.topology = Topology(
            rank, world, int(s.num_workers), int(s.batch_size), bool(s.drop_last), bool(s.repeat), s.equalize
        )
        self._specs = list(specs) if specs is not None else streams.specs(self.settings, self.seed)
        self._plain = self._plain_pass(self.topology, self._specs)
        self.epoch = 0
        self.samples_consumed = 0
        #: the state dict whose unconsumed samples epoch ``origin_epoch`` replays (None: plain epochs)
        self.origin: dict[str, Any] | None = None
        self.origin_epoch: int | None = None
        #: settings the last loaded state changed (elastic resume), for the caller to log
        self.resume_changes: list[str] = []
        #: remainders computed where the state was loaded (``rank_remainders()``), taken when theirs
        self.shipped_remainders: list[Any] | None = None
        self._rem: tuple[Any, Pass] | None = None

    def _plain_pass(self, topo: Topology, specs: Sequence[Any]) -> Pass:
        layouts = []
        for d, spec in enumerate(specs):
            where = (
                self.streams.where(d, self.settings.byte_budget) + " and pool"
                if self.streams.rule == "mixture"
                else None
            )
            if where is None:
                layouts.append(build_layout(spec, topo))
            else:
                with naming(where):
                    layouts.append(build_layout(spec, topo))
        return Pass(
            layouts,
            self.streams.integer_weights,
            self.streams.offsets,
            topo,
            mix_seed=self.seed,
            names=self.streams.names,
        )

    # --- settings as attributes ---------------------------------------------------------------------
    rank = property(lambda self: self.topology.rank)
    world_size = property(lambda self: self.topology.world_size)
    num_workers = property(lambda self: self.topology.num_workers)
    num_shards = property(lambda self: self.topology.num_shards)
    batch_size = property(lambda self: self.topology.batch_size)
    drop_last = property(lambda self: self.topology.drop_last)
    repeat = property(lambda self: self.topology.repeat)
    equalize = property(lambda self: self.topology.equalize)
    sampling_strategy = property(lambda self: self.settings.sampling_strategy)
    episode_pool_size = property(lambda self: self.settings.episode_pool_size)
    byte_budget = property(lambda self: self.settings.byte_budget)
    video_decoder_cache_size = property(lambda self: self.settings.video_decoder_cache_size)
    partitions = property(lambda self: self.settings.partitions)
    weights = property(lambda self: self.streams.integer_weights)
    offsets = property(lambda self: list(self.streams.offsets))
    shares = property(lambda self: self.streams.shares)
    mixture = property(lambda self: self.streams.mixture)
    #: each stream's spec under these settings (``StreamSpec``: seed, pool, budget, sizes)
    specs = property(lambda self: list(self._specs))
    #: one dataset's selection (the first stream's)
    episode_indices = property(lambda self: self._specs[0].episode_indices)
    lengths = property(lambda self: self._specs[0].lengths)
    episode_nbytes = property(lambda self: self._specs[0].sizes)
    episodes_digest = property(lambda self: self._specs[0].digest)

    @property
    def _kind(self) -> str:
        """What the resume messages call this stream ("planner" or "mixture")."""
        return "mixture" if self.streams.rule == "mixture" else "planner"

    # --- the pass in progress -----------------------------------------------------------------------
    def _elastic_active(self) -> bool:
        return self.origin is not None and self.epoch == self.origin_epoch

    def resolve(self) -> Resolved:
        """The pass in progress and the position in it (:func:`~._pass.resolve_pass`)."""
        return resolve_pass(
            self._plain, self.epoch, self.samples_consumed, self._remainder_pass if self._elastic_active() else None
        )

    def current_pass(self) -> Pass:
        """The pass in progress: the plain epoch, an elastic remainder, or the epochs after it."""
        return self.resolve().pass_

    def plain_pass(self) -> Pass:
        """This topology's plain epochs (without an elastic origin)."""
        return self._plain

    def remainders(self) -> list[Any]:
        """The elastic remainder this planner plays first, one per stream (the origin's unconsumed
        samples; shipped or cached when it can be).

        Raises:
            ResumeStateError: no elastic origin, or the origin's count does not fit its run.
        """
        if self.origin is None:
            raise ResumeStateError("this planner plays plain epochs: it has no elastic remainder")
        st = StreamState.from_dict(self.origin)
        return remainder_cache(
            state_key(st, self.streams.digests) + [self.streams.rule],
            lambda: self._compute_remainders(st),
            self.shipped_remainders,
            self.rank,
        )

    def _compute_remainders(self, st: StreamState) -> list[Any]:
        old = self._like(st)
        return old_run_remainders(old.resolve(), old.plain_pass())

    def _remainder_pass(self) -> Pass:
        rems = self.remainders()
        if self._rem is None or self._rem[0] is not rems[0]:
            self._rem = (rems[0], remainder_pass(self._plain, rems, self.seed))
        return self._rem[1]

    def _like(self, st: StreamState) -> Planner:
        """The planner of rank 0 over the same streams with ``st``'s settings and position.

        Raises:
            ResumeStateError: no run over these streams has ``st``'s settings (more ranks or
            workers than its episodes allow, or fewer partitions than streams: a tampered state).
        """
        s = PlanSettings(
            seed=st.seed,
            num_workers=st.num_workers,
            episode_pool_size=st.episode_pool_size,
            sampling_strategy=st.sampling_strategy,
            byte_budget=st.byte_budget,
            video_decoder_cache_size=None,
            repeat=st.repeat,
            batch_size=st.batch_size,
            drop_last=st.drop_last,
            equalize=st.equalize,
            partitions=st.partitions,
            rank=0,
            world_size=st.world_size,
        )
        try:
            out = Planner.for_streams(self.streams.sized(), s)
        except (ShardingError, StreamingConfigError, ValueError) as e:
            raise ResumeStateError(
                f"malformed stream state (tampered, or not written by state_dict() for this stream): no run over "
                f"this stream has its settings ({e}). Pass the dict that state_dict() returned, or start a new run "
                "from the policy weights."
            ) from e
        out.epoch, out.samples_consumed = st.epoch, st.samples
        if st.origin is not None:
            out.origin, out.origin_epoch = st.origin, st.epoch
        return out

    # --- what the pass in progress answers -------------------------------------------------------------
    def samples_per_rank(self) -> np.ndarray:
        """Frames per rank in one epoch (every stream) before equalization, int64 (world_size,)."""
        return self.current_pass().samples_per_rank()

    def worker_frames(self, rank: int | None = None) -> list[int]:
        """Anchors per logical worker of ``rank`` in one epoch of the pass in progress (before
        ``drop_last`` and ``equalize``)."""
        return self.current_pass().worker_frames(self.rank if rank is None else rank)

    def batches_per_rank(self) -> np.ndarray:
        """DataLoader batches per rank in one finite epoch (``batch_size``, ``drop_last``, workers
        taken into account), before equalization, int64 (world_size,)."""
        return self.current_pass().batches_per_rank()

    def worker_epoch_limits(self, rank: int | None = None) -> list[int]:
        """Anchors each logical worker of ``rank`` yields in one finite epoch (after ``drop_last``
        truncation to whole batches and ``equalize``)."""
        return self.current_pass().worker_epoch_limits(rank)

    def turn_limits(self, rank: int | None = None) -> list[int | None]:
        """Anchors each logical worker of ``rank`` gives from the stream start before it stops, as
        the DataLoader's batch turns see them: :meth:`worker_epoch_limits` (finite), None (endless),
        or its share of an endless elastic remainder when no plain epoch follows it there."""
        return self.current_pass().turn_limits(rank)

    def epoch_samples(self) -> int:
        """Anchors this rank yields in one finite epoch (after ``equalize``)."""
        return self.current_pass().epoch_samples()

    def position(self) -> tuple[int, int]:
        """(epoch, samples consumed in it) of the resume state; in finite mode a consumed count of
        one or more whole epochs rolls into the following epochs (``repeat=True`` keeps the
        stream's start epoch: each worker rolls over on its own)."""
        r = self.resolve()
        return r.pass_.position(r.epoch, r.samples)

    @property
    def num_active_workers(self) -> int:
        """Logical workers of this rank that give samples in the pass in progress."""
        return self.current_pass().num_active()

    def dataset_worker_frames(self, rank: int | None = None) -> np.ndarray:
        """Frames per (stream, logical worker) of ``rank`` in one plain epoch, int64 (N, workers)."""
        return self._plain.dataset_worker_frames(rank)

    def worker_weights(self, worker: int, rank: int | None = None) -> list[int]:
        """Integer mixing weights of logical ``worker`` of ``rank`` in plain endless epochs
        (``Pass.worker_weights``)."""
        return self._plain.worker_weights(worker, rank)

    # --- one dataset's shards (the first stream's, plain epochs) -------------------------------------
    def rank_episodes(self, rank: int | None = None) -> np.ndarray:
        """Dataset episode indices owned by ``rank`` (default: this rank), sorted, int64."""
        return self._plain.rank_episodes(self.rank if rank is None else rank)

    def worker_episodes(self, worker: int, rank: int | None = None) -> np.ndarray:
        """Dataset episode indices owned by logical ``worker`` of ``rank`` (empty = idle)."""
        return self._plain.layouts[0].worker_episodes(worker, self.rank if rank is None else rank)

    def worker_plan(self, worker: int) -> WorkerPlan:
        """This rank's logical ``worker`` shard of the first stream (cached). Raises
        ByteBudgetError for an episode larger than the worker's whole byte budget (eager sizes),
        before anything is fetched."""
        if not 0 <= worker < self.num_shards:
            raise ShardingError(f"worker {worker} outside 0..{self.num_shards - 1}")
        return self._plain.layouts[0].plan(worker, self.rank)

    def stream_partitions(self, worker: int, rank: int | None = None) -> np.ndarray:
        """Partition ids logical ``worker`` of ``rank`` plays in a plain epoch (``partitions``)."""
        return self._plain.layouts[0].stream_partitions(worker, self.rank if rank is None else rank)

    def partition_episodes(self, partition: int) -> np.ndarray:
        """Dataset episode indices of ``partition`` (``partitions``)."""
        return self._plain.layouts[0].partition_episodes(partition)

    @property
    def planners(self) -> list[Planner]:
        """One planner per stream, each over that stream alone with its settings (its shards and
        plans are the mixture's)."""
        return [
            Planner.for_streams(Streams((e,)), self.settings, specs=[spec])
            for e, spec in zip(self.streams.episodes, self._specs)
        ]

    # --- the pipeline's interface -------------------------------------------------------------------
    def worker_start(self, dl_worker_id: int | None = None, dl_num_workers: int = 0) -> WorkerStart:
        """Where DataLoader worker ``dl_worker_id`` (None in-process) starts, from the resume state
        (``epoch``, ``samples_consumed``): its logical worker, epoch, samples of its stream already
        consumed (endless: counted from the stream's start epoch; the pools roll it over) and
        limit (finite mode).

        Raises:
            ShardingError: the DataLoader's worker count is not the planner's ``num_workers``.
            ResumeStateError: the consumed count ends inside a batch (several workers) or exceeds
            the finite epoch.
        """
        r = self.resolve()
        if dl_num_workers != self.num_workers:
            raise ShardingError(
                f"the DataLoader runs {dl_num_workers} worker(s) but the {self._kind} was built for "
                f"num_workers={self.num_workers} (pass max_num_shards/num_workers equal to the DataLoader's)"
            )
        if not dl_worker_id and r.pass_.num_active() < self.num_shards:
            self._warn_idle(r.pass_)
        return r.pass_.worker_start(dl_worker_id, r.epoch, r.samples)

    def worker_plans(self, start: WorkerStart) -> list[Any]:
        """The plan of ``start.logical_worker`` for each stream (one for a single dataset; a
        mixture's name its dataset in their errors). Nothing is sized yet with sizes on demand;
        eager sizes raise ByteBudgetError here, before anything is fetched."""
        p = self.current_pass()
        if self.streams.rule != "mixture":
            return p.worker_plans(start.logical_worker)
        plans = []
        for d in range(len(p.layouts)):
            where = self.streams.where(d, self.byte_budget)
            with naming(where):
                plan = p.worker_plan(d, start.logical_worker)
            plan.where = where  # sizes on demand: a ByteBudgetError at admission names the dataset too
            plans.append(plan)
        return plans

    def worker_pools(self, start: WorkerStart, plans: Sequence[Any]) -> Iterator[Any]:
        """The pools the worker pipeline reads from ``start`` on (``EpisodePool`` interface, global
        episode ids): one per finite epoch, or one endless pool, as ``repeat`` says."""
        return self.current_pass().worker_pools(start, plans)

    def iter_worker_anchors(
        self, dl_worker_id: int | None = None, dl_num_workers: int = 0
    ) -> Iterator[tuple[int, int]]:
        """The anchors (global episode id, frame) DataLoader worker ``dl_worker_id`` yields, from
        the resume state on: one (the rest of the) epoch when finite, endless with ``repeat=True``."""
        start = self.worker_start(dl_worker_id, dl_num_workers)
        return read_pools(self.worker_pools(start, self.worker_plans(start)), start.limit)

    def _warn_idle(self, p: Pass) -> None:
        # Said where the stream starts, by DataLoader worker 0 only (every worker builds its own
        # planner; the training process builds them for state_dict too) and once per process.
        owns = p.layouts[0].owns(self.rank) if len(p.layouts) == 1 else "episodes of the mixture's datasets"
        key = (self._kind, self.rank, self.num_shards, owns)
        if key in _IDLE_WARNED:
            return
        _IDLE_WARNED.add(key)
        n = p.num_active()
        logger.warning(
            "rank %d owns %s for num_workers=%d (DataLoader workers or StreamLoader shards): %d..%d get no "
            "episode and yield nothing (lower num_workers to use every one)",
            self.rank,
            owns,
            self.num_shards,
            n,
            self.num_shards - 1,
        )

    # --- epochs and resume ----------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first anchor (resets ``samples_consumed``).

        Raises:
            StreamingConfigError: ``epoch`` is not an int >= 0 (a ValueError naming ``epoch``).
        """
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise StreamingConfigError(f"epoch must be an int >= 0, got {epoch!r}", option="epoch", value=epoch)
        self.epoch, self.samples_consumed = int(epoch), 0

    def seek(
        self,
        epoch: int,
        samples: int = 0,
        *,
        origin: dict[str, Any] | None = None,
        origin_epoch: int | None = None,
        remainders: list[Any] | None = None,
    ) -> None:
        """Put this planner at ``samples`` consumed samples of ``epoch`` (a stream's resume state,
        as data): ``origin`` — an elastic resume's origin state, whose remainder epoch
        ``origin_epoch`` plays — and ``remainders``, that remainder's part computed elsewhere
        (``rank_remainders()``; taken when it is this origin's).

        Raises:
            StreamingConfigError: ``epoch`` is not an int >= 0; ValueError: ``samples`` < 0.
        """
        self.set_epoch(epoch)
        if samples < 0:
            raise ValueError(f"samples must be >= 0, got {samples}")
        self.samples_consumed = int(samples)
        self.origin, self.origin_epoch = origin, origin_epoch
        self.shipped_remainders, self._rem = remainders, None


def dataset_planner(
    episode_lengths: Mapping[int, int], settings: PlanSettings, episode_nbytes: Callable[[int], int] | None = None
) -> Planner:
    """The planner of one dataset's rank from ``settings`` (``episode_nbytes``: its sizes,
    ``EpisodeSizes`` on demand): :meth:`Planner.for_dataset`."""
    return Planner.for_dataset(episode_lengths, settings, episode_nbytes)
