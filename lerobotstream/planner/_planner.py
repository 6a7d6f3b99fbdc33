"""``Planner``: one rank's planner over N >= 1 streams — its position (``at``), its resume state and
the interface the dataset drives (``worker_start`` → ``worker_plans`` → ``worker_pools``), playing
the :class:`~lerobotstream.planner._pass.Pass` its position resolves to; and rank, world size and
DataLoader worker discovery without importing torch.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from lerobotstream import constants
from lerobotstream.errors import ResumeStateError, ShardingError, StreamingConfigError, naming
from lerobotstream.options import check_epoch
from lerobotstream.planner._layout import TAG_ELASTIC, TAG_MIXTURE, Layout, derived_seed, read_pools
from lerobotstream.planner._mixseq import integer_weights, mixture_shares
from lerobotstream.planner._pass import Pass, WorkerStart, old_run_remainders, remainder_cache
from lerobotstream.planner._state import (
    ELASTIC_SETTINGS,
    REFUSED_SETTINGS,
    RESUME_SETTINGS,
    Position,
    StreamState,
    check_count,
    episode_selection_diffs,
)
from lerobotstream.planner._streams import PlanSettings, Streams, no_sizes
from lerobotstream.planner._turns import epoch_overlap

__all__ = ["Planner", "WorkerStart", "current_worker", "discover_world"]

logger = logging.getLogger("lerobotstream.planner")
_IDLE_WARNED: set[tuple] = set()
_IDLE = (
    "rank %d owns %s for num_workers=%d (DataLoader workers or StreamLoader shards): %d..%d get no episode and "
    "yield nothing (lower num_workers to use every one)"
)


class Planner:
    """Deterministic planner of one rank over N >= 1 streams (pure: no I/O, no torch import).

    Args:
        streams: what it plays (:class:`~lerobotstream.planner._streams.Streams`): each stream's
            episodes, lengths and sizes (needed with a byte budget), weights and episode offsets.
        settings: :class:`~lerobotstream.planner._streams.PlanSettings` (the options' names and
            defaults; rank and world size default to ``discover_world``).

    Its position ``at`` (a :class:`~lerobotstream.planner._state.Position`) starts at epoch 0;
    ``place``, ``set_epoch`` and ``load_state_dict`` move it.

    Raises:
        ShardingError: a rank would own no episode (lower the number of ranks), bad rank/world.
        StreamingConfigError (a ValueError): bad ``partitions`` (fewer than the run's streams).
        ValueError: a byte budget without episode sizes.
    """

    def __init__(self, streams: Streams, settings: PlanSettings) -> None:
        s = settings  # checked by the options' rules (PlanSettings)
        if s.byte_budget is not None and any(e.sizes is None for e in streams.episodes):
            raise ValueError("a byte_budget needs episode_nbytes (each episode's exact synthesized size)")
        rank, world = discover_world(s.rank, s.world_size)
        casts = {"num_workers": int, "batch_size": int, "drop_last": bool, "repeat": bool}
        #: the settings with rank and world size resolved: also this rank's topology
        self.settings = replace(s, rank=rank, world_size=world, **{n: f(getattr(s, n)) for n, f in casts.items()})
        self.streams = streams
        self.seed = constants.SEED_WHEN_NONE if s.seed is None else int(s.seed)
        self.specs = streams.specs(self.settings, self.seed)
        self.plain = self._plain_pass(self.settings, self.specs)
        self.at = Position()
        #: settings the last loaded state changed (elastic resume), for the caller to log
        self.resume_changes: list[str] = []
        self._rem: tuple[Any, Pass] | None = None

    def _plain_pass(self, topo: PlanSettings, specs: Sequence[Any]) -> Pass:
        streams, mixture = self.streams, self.streams.rule == "mixture"
        budget = "" if topo.byte_budget is None else f"={topo.byte_budget / constants.GIB:g}"  # in GiB, as the option
        layouts = []
        for d, (spec, share) in enumerate(zip(specs, mixture_shares(streams.weights))):
            # a mixture's errors name the dataset and its shares of the byte budget and the pool
            where = f"dataset {d} ({streams.names[d]}; its share {share:.1%} of the mixture's byte_budget_gb{budget})"
            with naming(where + " and pool") if mixture else nullcontext():
                layouts.append(Layout(spec, topo, where=where if mixture else ""))
        weights, offsets = integer_weights(self.streams.weights), self.streams.offsets
        return Pass(layouts, weights, offsets, topo, mix_seed=self.seed, names=self.streams.names)

    # --- the pass in progress -----------------------------------------------------------------------
    def resolve(self) -> tuple[Pass, int, int]:
        """``(pass in progress, epoch, samples consumed since epoch began)``: the plain epoch, or the
        elastic remainder's pass while its samples last (endless: always), then the plain epochs."""
        samples, rp = self.at.samples, self._remainder_pass()
        if rp is None:
            return self.plain, self.at.epoch, samples
        total = 0 if self.settings.repeat else rp.epoch_samples()
        if self.settings.repeat or samples < total or not total and not samples:
            return rp, rp.epoch, samples
        return self.plain, rp.epoch + 1, samples - total

    def current_pass(self) -> Pass:
        """The pass in progress: the plain epoch, an elastic remainder, or the epochs after it."""
        return self.resolve()[0]

    def remainders(self) -> list[Any]:
        """The elastic remainder this planner plays first, one per stream (shipped or cached when
        it can be).

        Raises:
            ResumeStateError: no elastic origin, or the origin's count does not fit its run.
        """
        if self.at.origin is None:
            raise ResumeStateError("this planner plays plain epochs: it has no elastic remainder")
        st = StreamState.from_dict(self.at.origin)
        digests = [e.digest for e in self.streams.episodes]
        return remainder_cache(
            [st.to_dict(), digests, self.streams.rule],  # the state and streams it is the remainder of
            lambda: old_run_remainders(*self._old_run(st)),
            self.at.remainders,
            self.settings.rank,
        )

    def _remainder_pass(self) -> Pass | None:
        """The pass of this topology that plays the elastic remainder (None: ``at`` is in a plain epoch)."""
        if self.at.origin is None or self.at.epoch != self.at.origin_epoch:
            return None
        rems = self.remainders()
        if self._rem is None or self._rem[0] is not rems[0]:
            plain = self.plain
            layouts = [Layout.over(rem, plain.topo, lay) for lay, rem in zip(plain.layouts, rems)]
            mix_seed = derived_seed(self.seed, TAG_MIXTURE, TAG_ELASTIC, rems[0].epoch, rems[0].depth)
            rp = Pass(layouts, plain.weights, plain.offsets, plain.topo, mix_seed=mix_seed, remainders=rems)
            rp.chain = plain if plain.topo.repeat else None  # endless: chained to the plain epochs
            rp.names = plain.names
            self._rem = (rems[0], rp)
        return self._rem[1]

    def _old_run(self, st: StreamState) -> tuple[tuple[Pass, int, int], Pass]:
        """The run that wrote ``st`` (its rank 0 over the same streams): ``((pass in progress,
        epoch, samples), plain pass)``, whole finite epochs rolled over (as the same topology does).

        Raises:
            ResumeStateError: no run over these streams has ``st``'s settings (a tampered state).
        """
        try:
            settings = PlanSettings(**{n: getattr(st, n) for n in RESUME_SETTINGS}, rank=0)
            # streams without sizes get ``no_sizes``: a replay under a byte budget that needs one fails loudly
            sized = tuple(e if e.sizes is not None else replace(e, sizes=no_sizes) for e in self.streams.episodes)
            old = Planner(replace(self.streams, episodes=sized), settings)
        except (ShardingError, StreamingConfigError, ValueError) as e:
            raise ResumeStateError(
                f"malformed stream state (tampered, or not written by state_dict() for this stream): no run over "
                f"this stream has its settings ({e}). Pass the dict that state_dict() returned, or start a new run "
                "from the policy weights."
            ) from e
        old.place(Position(st.epoch, st.samples, st.origin, None if st.origin is None else st.epoch))
        current, epoch, samples = old.resolve()
        return (current, *current.position(epoch, samples)), old.plain

    def position(self) -> tuple[int, int]:
        """(epoch, samples consumed in it) of the resume state, whole finite epochs rolled over."""
        current, epoch, samples = self.resolve()
        return current.position(epoch, samples)

    # --- the pipeline's interface -------------------------------------------------------------------
    def worker_start(self, dl_worker_id: int | None = None, dl_num_workers: int = 0) -> WorkerStart:
        """Where DataLoader worker ``dl_worker_id`` (None in-process) starts (``WorkerStart``).

        Raises:
            ShardingError: the DataLoader's worker count is not the planner's ``num_workers``.
            ResumeStateError: the consumed count ends inside a batch (several workers) or exceeds
            the finite epoch.
        """
        current, epoch, samples = self.resolve()
        topo = self.settings
        if dl_num_workers != topo.num_workers:
            kind = "mixture" if self.streams.rule == "mixture" else "planner"
            raise ShardingError(
                f"the DataLoader runs {dl_num_workers} worker(s) but the {kind} was built for "
                f"num_workers={topo.num_workers} (pass max_num_shards/num_workers equal to the DataLoader's)"
            )
        shards, rank = topo.num_shards, topo.rank  # idle workers: warned by DataLoader worker 0, once per process
        if not dl_worker_id and (n := len(current.active_workers(rank))) < shards:
            owns = current.layouts[0].owns(rank) if len(current.layouts) == 1 else "episodes of the mixture's datasets"
            if (key := (self.streams.rule, rank, shards, owns)) not in _IDLE_WARNED:
                _IDLE_WARNED.add(key)
                logger.warning(_IDLE, rank, owns, shards, n, shards - 1)
        return current.worker_start(dl_worker_id, epoch, samples)

    def worker_plans(self, start: WorkerStart) -> list[Any]:
        """The plan of ``start.logical_worker`` for each stream (a mixture's name their dataset in
        their errors)."""
        current, rank, w = self.current_pass(), self.settings.rank, start.logical_worker
        plans = []
        for d, lay in enumerate(current.layouts):
            with naming(lay.where):  # its size errors name it too, at admission (``Layout.where``)
                plan = lay.plan(w, rank)
                if current.chain is not None:  # an endless remainder: its share, then the plain epochs
                    plan = plan.chained(current.chain.layouts[d].plan(w, rank), current.stream_epochs[d])
                plans.append(plan)
        return plans

    def worker_pools(self, start: WorkerStart, plans: Sequence[Any]) -> Iterator[Any]:
        """The pool (a played ``MixSequence``, global episode ids) the worker pipeline reads from
        ``start`` on: ``start.epoch``'s, or one endless pool (none: the worker gives nothing)."""
        current = self.current_pass()
        phases = current.phases(self.settings.rank, start.logical_worker, start.epoch, start.offset)
        if phases is not None:
            yield phases.play(plans, current.offsets, start.epoch, self.settings.repeat)

    def iter_worker_anchors(
        self, dl_worker_id: int | None = None, dl_num_workers: int = 0
    ) -> Iterator[tuple[int, int]]:
        """The anchors (global episode id, frame) DataLoader worker ``dl_worker_id`` yields."""
        start = self.worker_start(dl_worker_id, dl_num_workers)
        return read_pools(self.worker_pools(start, self.worker_plans(start)), start.limit)

    # --- epochs and resume ----------------------------------------------------------------------------
    def set_epoch(self, epoch: int, samples: int = 0) -> None:
        """Start ``epoch`` with ``samples`` of the rank consumed (default 0: from its first anchor); an
        elastic origin stays.

        Raises:
            StreamingConfigError: ``epoch`` is not an int >= 0 (a ValueError naming ``epoch``).
        """
        self.at = replace(self.at, epoch=check_epoch(epoch), samples=samples)

    def place(self, at: Position) -> None:
        """Put this planner at ``at`` (a stream's position; a tuple, never moved in place)."""
        self.at, self._rem = at, None

    # --- the resume state -----------------------------------------------------------------------------
    def _state(self, samples: int) -> StreamState:
        s, streams, at, mix = self.settings, self.streams, self.at, None
        if streams.mixture is not None:
            mix = {**streams.mixture, "integer_weights": integer_weights(streams.weights)}
        fields = {name: getattr(s, name) for name in RESUME_SETTINGS}  # named as the state's fields
        fields.update(seed=self.seed, sampling_strategy=self.specs[0].strategy if mix else s.sampling_strategy)
        return StreamState(
            **fields,
            epoch=at.epoch,
            samples=int(samples),
            episodes_digest="|".join(e.digest for e in streams.episodes),  # a mixture's digests joined
            mixture=mix,
            origin=at.origin if at.epoch == at.origin_epoch else None,  # None: a plain epoch
        )

    def state_dict(self, samples_consumed: int | None = None) -> dict[str, Any]:
        """Resume state (a :class:`~lerobotstream.planner._state.StreamState` dict) at the training
        loop's consumed sample count (default: ``at.samples``)."""
        count = self.at.samples if samples_consumed is None else check_count("samples_consumed", samples_consumed)
        return self._state(count).to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of this topology (the same order continues) or another
        (elastic resume, docs/resume.md; the remainder is computed when first needed). Sets
        :attr:`resume_changes` to the settings that differ (:data:`ELASTIC_SETTINGS`, as messages).

        Raises:
            ResumeStateError: no schema marker, a malformed or impossible state, another stream
            (dataset, episodes, mixture), seed or partitions; the message lists every difference.
        """
        st, mine, streams = StreamState.from_dict(state), self._state(0), self.streams

        def diffs(names: Sequence[str]) -> list[str]:
            return [
                f"{n}: checkpoint {getattr(st, n)!r}, now {getattr(mine, n)!r}"
                for n in names
                if getattr(st, n) != getattr(mine, n)
            ]

        refused = diffs(REFUSED_SETTINGS)
        if streams.mixture is None and st.mixture is not None:
            refused.append(f"the checkpoint streams a mixture of {st.mixture.get('repo_ids')}, this is one dataset")
        elif streams.mixture is None:
            refused += episode_selection_diffs(st, mine)
        elif st.mixture is None:
            raise ResumeStateError(
                "the resume state was written by a single-dataset stream but this is a mixture of "
                f"{len(streams.episodes)} datasets ({streams.mixture.get('repo_ids')}); sample-exact "
                "resume needs the same mixture. Start a new run from the policy weights."
            )
        else:
            keys = [k for k in sorted(set(st.mixture) | set(mine.mixture)) if st.mixture.get(k) != mine.mixture.get(k)]
            keys = [k for k in keys if k != "integer_weights"] or keys  # named alone: the weights' own differ
            refused += [
                f"mixture {k}: checkpoint {st.mixture.get(k)!r}, now {mine.mixture.get(k)!r}" for k in keys
            ] or episode_selection_diffs(st, mine)
        if refused:
            what = "the same episode selection"
            if streams.rule == "mixture":
                what = "the same mixture (datasets, weights, episode selections)"
            raise ResumeStateError(
                f"resume needs {what}, seed and partitions as the checkpointed run (they fix which samples the epoch "
                "has and their order; world size, batch size, DataLoader workers, pool and budget may change); "
                "differs: " + "; ".join(refused) + ". Restore those settings, or start a new run from the "
                "policy weights."
            )
        self.resume_changes = diffs(ELASTIC_SETTINGS)
        epoch, samples, origin = st.epoch, st.samples, st.origin  # the same topology: the same order continues
        if self.resume_changes:  # elastic: ``st``'s remainder, or (nothing of the epoch consumed) the plain epoch
            if st.origin is None:
                (_, epoch, samples), _ = self._old_run(st)
            samples, origin = 0, st.to_dict() if samples or st.origin is not None else None
        self.place(Position(epoch, samples, origin, None if origin is None else epoch))

    def rank_remainders(self) -> list[Any] | None:
        """This rank's part of the elastic remainder, one per stream (None: a plain epoch): computed
        once where the state is loaded, shipped to the workers (``at.remainders``)."""
        rp, rank = self._remainder_pass(), self.settings.rank
        return None if rp is None else [lay.for_rank(rem, rank) for lay, rem in zip(rp.layouts, rp.remainders)]

    def remainder_info(self) -> dict[str, Any] | None:
        """What an elastic resume continues (None: a plain epoch): ``epoch``, ``samples_left`` (all
        ranks) and ``samples_left_per_dataset``, ``rank_samples``, ``unit`` (``"episodes"`` or
        ``"partitions"``), ``whole`` and ``started`` (units left whole and partly consumed),
        ``depth``, ``consumed`` (samples the old run consumed, all ranks), ``overlap`` (samples of the
        next epoch yielded before the remainder's last one, ``_turns.epoch_overlap``; 0 when finite)
        and ``overlap_bound`` = (workers - 1) x (max - min share + batch size - 1)."""
        rp, topo = self._remainder_pass(), self.settings
        if rp is None:
            return None
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


def discover_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """(rank, world_size): explicit values, else ``torch.distributed`` when initialised, else the
    ``RANK``/``WORLD_SIZE`` environment variables, else (0, 1).

    Raises:
        ShardingError: invalid values (world size < 1, rank outside ``[0, world_size)``, not ints).
    """
    if rank is None or world_size is None:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            found = int(dist.get_rank()), int(dist.get_world_size())
        else:
            env_rank, env_world = constants.distributed_env()
            try:
                found = int(env_rank or 0), int(env_world or 1)
            except ValueError as e:
                raise ShardingError(f"RANK={env_rank!r} / WORLD_SIZE={env_world!r} are not integers") from e
        rank, world_size = found[0] if rank is None else rank, found[1] if world_size is None else world_size
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ShardingError(
            f"invalid rank {rank} for world size {world_size} (need 0 <= rank < world size)",
            rank=rank,
            world_size=world_size,
        )
    return rank, world_size


def current_worker() -> tuple[int | None, int]:
    """(DataLoader worker id, number of DataLoader workers), or (None, 0) in the main process."""
    data = sys.modules.get("torch.utils.data")
    info = None if data is None else data.get_worker_info()
    return (None, 0) if info is None else (int(info.id), int(info.num_workers))
