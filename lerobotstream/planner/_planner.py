"""``Planner``: the planner of one rank over N >= 1 streams — its position (``at``, one
:class:`~lerobotstream.planner._state.Position`: epoch, consumed samples, elastic origin), its resume state and the checks on loading one, and the one interface
the dataset layer drives (``worker_start`` → ``worker_plans`` → ``worker_pools``).

What it plays is a :class:`~lerobotstream.planner._pass.Pass` (streams' pool layouts on this
topology, mixed per worker); which pass, and where in it, follows from the position by
:func:`~lerobotstream.planner._pass.resolve_pass`. It is built one way: ``Planner(streams,
settings)`` — one dataset is ``Streams.of_dataset(...)``, a weighted mixture
``Streams.of_mixture(...)``; canonical partitions are a setting (``partitions=P``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from lerobotstream import constants
from lerobotstream.errors import ResumeStateError, ShardingError, StreamingConfigError, naming
from lerobotstream.options import check_epoch
from lerobotstream.planner._checkpoint import resume_differences, settings_of, stream_state
from lerobotstream.planner._layout import Layout, read_pools
from lerobotstream.planner._pass import (
    Pass,
    WorkerStart,
    old_run_remainders,
    remainder_cache,
    remainder_pass,
    resolve_pass,
    state_key,
)
from lerobotstream.planner._settings import PlanSettings
from lerobotstream.planner._state import Position, StreamState, check_count
from lerobotstream.planner._streams import Streams
from lerobotstream.planner._turns import epoch_overlap
from lerobotstream.planner._world import discover_world

__all__ = ["Planner", "WorkerStart"]

logger = logging.getLogger("lerobotstream.planner")
_IDLE_WARNED: set[tuple] = set()


class Planner:
    """Deterministic planner of one rank over N >= 1 streams (pure: no I/O, no torch import).

    Args:
        streams: what it plays (:class:`~lerobotstream.planner._streams.Streams`: one dataset,
            ``Streams.of_dataset``, or a mixture, ``Streams.of_mixture``): each stream's episodes,
            their lengths and sizes (``EpisodeSizes``, on demand, or an eager callable; needed
            with a byte budget), the weights and global episode offsets.
        settings: :class:`~lerobotstream.planner._settings.PlanSettings` (the options' names and
            defaults, declared once there): ``seed`` (1000; None → 42); ``rank``, ``world_size``
            (default from torch.distributed, else RANK/WORLD_SIZE, else 0/1); ``num_workers``
            (DataLoader workers per rank, 0 = in the training process); ``episode_pool_size``
            (per-worker pool size when given; default 32 per rank split over the workers used,
            ``max(1, 32 // n)``; with ``partitions``: per partition, default
            ``constants.DEFAULT_PARTITION_POOL_SIZE``); ``sampling_strategy`` (``remaining``,
            ``round_robin`` or ``sequential``); ``byte_budget`` (per-rank resident bytes or None;
            each worker gets 1/n, with ``partitions`` per partition); ``video_decoder_cache_size``
            (per-rank decoder LRU size or None); ``repeat`` (endless); ``batch_size``,
            ``drop_last`` (the DataLoader's); ``equalize`` (finite epochs: ``none`` or ``drop``,
            every rank stops after the smallest rank's batch count); ``partitions`` (canonical
            partitions: an order that does not depend on the topology).
        specs: each stream's own :class:`~lerobotstream.planner._layout.StreamSpec` (seed, pool,
            budget) instead of the ones ``streams.specs(settings)`` gives (None: those).

    Its position (``at``, one :class:`~lerobotstream.planner._state.Position`; ``epoch``,
    ``samples_consumed``, ``origin``, ``origin_epoch``, ``shipped_remainders`` are views of it)
    starts at epoch 0; ``place``, ``seek``, ``set_epoch`` and ``load_state_dict`` move it.

    Raises:
        ShardingError: a rank would own no episode (lower the number of ranks), bad rank/world.
        StreamingConfigError (a ValueError): bad ``partitions`` (fewer than the run's streams).
        ValueError: a byte budget without episode sizes.
    """

    def __init__(self, streams: Streams, settings: PlanSettings, *, specs: Sequence[Any] | None = None) -> None:
        s = settings  # checked by the options' rules (PlanSettings)
        if s.byte_budget is not None and specs is None and any(e.sizes is None for e in streams.episodes):
            raise ValueError("a byte_budget needs episode_nbytes (each episode's exact synthesized size)")
        rank, world = discover_world(s.rank, s.world_size)
        #: the settings with rank and world size resolved: also this rank's topology
        self.settings = replace(
            s,
            rank=rank,
            world_size=world,
            num_workers=int(s.num_workers),
            batch_size=int(s.batch_size),
            drop_last=bool(s.drop_last),
            repeat=bool(s.repeat),
        )
        self.streams = streams
        self.seed = constants.SEED_WHEN_NONE if s.seed is None else int(s.seed)
        self.specs = list(specs) if specs is not None else streams.specs(self.settings, self.seed)
        self.plain = self._plain_pass(self.settings, self.specs)
        #: where this planner is (the one position object: epoch, samples, elastic origin, shipped
        #: remainders; ``epoch``, ``samples_consumed``, ``origin``, ``origin_epoch``,
        #: ``shipped_remainders`` are views of it)
        self.at = Position()
        #: settings the last loaded state changed (elastic resume), for the caller to log
        self.resume_changes: list[str] = []
        self._rem: tuple[Any, Pass] | None = None

    def _plain_pass(self, topo: PlanSettings, specs: Sequence[Any]) -> Pass:
        mixture = self.streams.rule == "mixture"
        layouts = []
        for d, spec in enumerate(specs):  # a mixture's errors name the dataset and its shares
            with naming(self.streams.where(d, topo.byte_budget) + " and pool") if mixture else nullcontext():
                layouts.append(Layout(spec, topo))
        weights, offsets = self.streams.integer_weights, self.streams.offsets
        return Pass(layouts, weights, offsets, topo, mix_seed=self.seed, names=self.streams.names)

    # --- the position (``at``, one object) as attributes --------------------------------------------
    def _view(field: str, doc: str) -> property:  # noqa: N805 (a class-body helper)
        def set_(self, value: Any) -> None:
            self.at = replace(self.at, **{field: value})

        return property(
            lambda self: getattr(self.at, field), set_, doc=f"{doc} (``at.{field}``; setting it moves ``at``)"
        )

    epoch = _view("epoch", "the epoch this planner plays")
    samples_consumed = _view("samples", "samples of the rank consumed since ``epoch`` began")
    origin = _view(
        "origin", "the state dict whose unconsumed samples epoch ``origin_epoch`` replays (None: plain epochs)"
    )
    origin_epoch = _view("origin_epoch", "the epoch that replays ``origin``")
    shipped_remainders = _view(
        "remainders", "remainders computed where the state was loaded (``rank_remainders()``), taken when theirs"
    )
    del _view

    @property
    def _kind(self) -> str:
        """What the resume messages call this stream ("planner" or "mixture")."""
        return "mixture" if self.streams.rule == "mixture" else "planner"

    # --- the pass in progress -----------------------------------------------------------------------
    def _in_remainder(self) -> bool:
        return self.origin is not None and self.epoch == self.origin_epoch

    def resolve(self) -> tuple[Pass, int, int]:
        """The pass in progress and the position in it, ``(pass, epoch, samples consumed since
        epoch began)`` (:func:`~._pass.resolve_pass`)."""
        return resolve_pass(
            self.plain, self.epoch, self.samples_consumed, self._remainder_pass if self._in_remainder() else None
        )

    def current_pass(self) -> Pass:
        """The pass in progress: the plain epoch, an elastic remainder, or the epochs after it."""
        return self.resolve()[0]

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
            lambda: old_run_remainders(*self._old_run(st)),
            self.shipped_remainders,
            self.settings.rank,
        )

    def _remainder_pass(self) -> Pass:
        rems = self.remainders()
        if self._rem is None or self._rem[0] is not rems[0]:
            self._rem = (rems[0], remainder_pass(self.plain, rems, self.seed))
        return self._rem[1]

    def _old_run(self, st: StreamState) -> tuple[tuple[Pass, int, int], Pass]:
        """The run that wrote ``st`` (its rank 0 over the same streams, at ``st``'s position):
        its pass in progress with the position in it, and its plain pass.

        Raises:
            ResumeStateError: no run over these streams has ``st``'s settings (more ranks or
            workers than its episodes allow, or fewer partitions than streams: a tampered state).
        """
        try:
            old = Planner(self.streams.sized(), settings_of(st))
        except (ShardingError, StreamingConfigError, ValueError) as e:
            raise ResumeStateError(
                f"malformed stream state (tampered, or not written by state_dict() for this stream): no run over "
                f"this stream has its settings ({e}). Pass the dict that state_dict() returned, or start a new run "
                "from the policy weights."
            ) from e
        old.place(Position(st.epoch, st.samples, st.origin, None if st.origin is None else st.epoch))
        return old.resolve(), old.plain

    def turn_limits(self, rank: int | None = None) -> list[int | None]:
        """Anchors each logical worker of ``rank`` gives from the stream start before it stops, as
        the DataLoader's batch turns see them: finite epoch limits (after ``drop_last`` and
        ``equalize``), None (endless), or its share of an endless elastic remainder when no plain
        epoch follows it there."""
        return self.current_pass().turn_limits(rank)

    def position(self) -> tuple[int, int]:
        """(epoch, samples consumed in it) of the resume state; in finite mode a consumed count of
        one or more whole epochs rolls into the following epochs (``repeat=True`` keeps the
        stream's start epoch: each worker rolls over on its own)."""
        current, epoch, samples = self.resolve()
        return current.position(epoch, samples)

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
        current, epoch, samples = self.resolve()
        topo = self.settings
        if dl_num_workers != topo.num_workers:
            raise ShardingError(
                f"the DataLoader runs {dl_num_workers} worker(s) but the {self._kind} was built for "
                f"num_workers={topo.num_workers} (pass max_num_shards/num_workers equal to the DataLoader's)"
            )
        if not dl_worker_id and current.num_active() < topo.num_shards:
            self._warn_idle(current)
        return current.worker_start(dl_worker_id, epoch, samples)

    def worker_plans(self, start: WorkerStart) -> list[Any]:
        """The plan of ``start.logical_worker`` for each stream (one for a single dataset; a
        mixture's name its dataset in their errors). Nothing is sized yet with sizes on demand;
        eager sizes raise ByteBudgetError here, before anything is fetched."""
        current = self.current_pass()
        if self.streams.rule != "mixture":
            return current.worker_plans(start.logical_worker)
        plans = []
        for d in range(len(current.layouts)):
            where = self.streams.where(d, self.settings.byte_budget)
            with naming(where):
                plan = current.worker_plan(d, start.logical_worker)
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

    def _warn_idle(self, current: Pass) -> None:
        # Said where the stream starts, by DataLoader worker 0 only (every worker builds its own
        # planner; the training process builds them for state_dict too) and once per process.
        rank, shards = self.settings.rank, self.settings.num_shards
        owns = current.layouts[0].owns(rank) if len(current.layouts) == 1 else "episodes of the mixture's datasets"
        key = (self._kind, rank, shards, owns)
        if key in _IDLE_WARNED:
            return
        _IDLE_WARNED.add(key)
        n = current.num_active()
        logger.warning(
            "rank %d owns %s for num_workers=%d (DataLoader workers or StreamLoader shards): %d..%d get no "
            "episode and yield nothing (lower num_workers to use every one)",
            rank,
            owns,
            shards,
            n,
            shards - 1,
        )

    # --- epochs and resume ----------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first anchor (resets ``samples_consumed``).

        Raises:
            StreamingConfigError: ``epoch`` is not an int >= 0 (a ValueError naming ``epoch``).
        """
        self.at = replace(
            self.at, epoch=check_epoch(epoch), samples=0
        )  # an elastic origin stays: it plays in its epoch

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
        self.place(Position(int(epoch), int(samples), origin, origin_epoch, remainders))

    def place(self, at: Position) -> None:
        """Put this planner at ``at`` (a stream's position, the object itself: it is frozen, so
        moving the planner never moves the stream that handed it)."""
        self.at, self._rem = at, None

    # --- the resume state -----------------------------------------------------------------------------
    def _state(self, samples: int) -> StreamState:
        origin = self.origin if self._in_remainder() else None
        strategy = self.specs[0].strategy
        return stream_state(self.streams, self.settings, self.seed, strategy, self.epoch, samples, origin)

    def state_dict(self, samples_consumed: int | None = None) -> dict[str, Any]:
        """Resume state (:class:`~lerobotstream.planner._state.StreamState` layout, schema-versioned):
        seed, epoch, samples consumed by this rank, batch size, world size, workers, strategy, pool
        settings, the stream's identity. Pass the training loop's consumed sample count (sum of the
        consumed batches' sizes) or set ``samples_consumed`` beforehand."""
        count = self.samples_consumed if samples_consumed is None else check_count("samples_consumed", samples_consumed)
        return self._state(count).to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` — of this topology (the very same order continues) or of
        another one (elastic resume: the epoch's unconsumed samples are replanned over this
        planner's ranks, workers and batch size; see docs/resume.md). Sets
        :attr:`resume_changes` to the settings that differ. Nothing is replayed here: the
        remainder is computed when first needed (:meth:`remainders`).

        Raises:
            ResumeStateError: no schema marker (older sampler: start a new run from the policy
            weights), a malformed or impossible state (e.g. more than ``constants.MAX_NUM_WORKERS``
            workers), another stream (dataset, episodes, mixture) or seed; the message lists
            every difference.
        """
        st = StreamState.from_dict(state)
        changed = resume_differences(self.streams, st, self._state(0))
        self.resume_changes = changed
        if not changed:  # the same topology (inside a remainder: the same remainder plan continues)
            self.place(Position(st.epoch, st.samples, st.origin, None if st.origin is None else st.epoch))
            return
        epoch = st.epoch
        if st.origin is None:
            (old, old_epoch, samples), _ = self._old_run(st)
            if not st.repeat:
                epoch, samples = old.position(old_epoch, samples)  # counts only: a finished epoch rolls over
            if samples == 0:  # nothing of that epoch consumed: it is simply played on this topology
                self.place(Position(epoch))
                return
        self.place(Position(epoch, 0, st.to_dict(), epoch))

    def rank_remainders(self) -> list[Any] | None:
        """What this rank's DataLoader workers need of the elastic remainder (None: a plain
        epoch), one per stream (``for_rank``: a started episode's frames only for this rank's
        episodes): the dataset computes it once where the state is loaded and ships it to its
        workers (their planner's ``shipped_remainders``)."""
        if not self._in_remainder():
            return None
        rp = self._remainder_pass()
        return [lay.for_rank(rem, self.settings.rank) for lay, rem in zip(rp.layouts, rp.remainders)]

    def remainder_info(self) -> dict[str, Any] | None:
        """What an elastic resume continues (None when this planner plays a plain epoch), one
        schema for every stream and layout: ``epoch``, ``samples_left`` (all ranks) and
        ``samples_left_per_dataset``, ``rank_samples`` (this rank), ``unit`` (``"episodes"`` or
        ``"partitions"``), ``whole`` and ``started`` (units left whole and partly consumed),
        ``depth``, ``consumed`` (samples the old run consumed of that pass, all ranks), and where
        its end lies in this rank's batches: ``overlap``, samples of the next epoch the loader
        yields before the remainder's last one (``_turns.epoch_overlap`` of the workers' shares;
        exact when every worker goes on with plain epochs; 0 when finite: each epoch is its own
        iterator), ``overlap_bound`` = (workers - 1) x (max - min share + batch size - 1)."""
        if not self._in_remainder():
            return None
        rp, topo = self._remainder_pass(), self.settings
        infos = [lay.info(rem) for lay, rem in zip(rp.layouts, rp.remainders)]
        left = [int(lay.rank_frames().sum()) for lay in rp.layouts]
        shares = rp.worker_frames(topo.rank)
        endless, k, b = topo.repeat and topo.num_shards > 1, topo.num_shards, topo.batch_size
        return {
            "epoch": rp.epoch,
            "samples_left": sum(left),
            "samples_left_per_dataset": left,
            "rank_samples": int(rp.samples_per_rank()[topo.rank]),
            "unit": infos[0]["unit"],
            "whole": sum(i["whole"] for i in infos),
            "started": sum(i["started"] for i in infos),
            "depth": rp.depth,
            "consumed": sum(int(r.consumed) for r in rp.remainders),
            "overlap": epoch_overlap(shares, b) if endless else 0,
            "overlap_bound": (k - 1) * (max(shares) - min(shares) + b - 1) if endless else 0,
        }
