"""``PlannerBase``: the rules every planner of one rank shares — epoch sizes and the DataLoader's
batch turns, ``set_epoch``, the resume state and its checks, where each DataLoader worker starts,
and the one interface the dataset layer drives (``worker_plans`` → ``worker_pools``).

:class:`~lerobotstream.planner.Planner` (one dataset) and
:class:`~lerobotstream.planner.MixturePlanner` (a weighted mixture) differ only in what a logical
worker owns (``_worker_frames``, ``worker_plans``, ``worker_pools``) and in what identifies their
stream in a resume state (``_stream_state``, ``_identity_diffs``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from lerobotstream.errors import ResumeStateError, ShardingError, StreamingConfigError
from lerobotstream.planner._state import StreamState, replay_turns

__all__ = ["PlannerBase", "WorkerStart", "RESUME_SETTINGS", "ELASTIC_SETTINGS", "REFUSED_SETTINGS", "read_pools"]

logger = logging.getLogger("lerobotstream.planner")
_IDLE_WARNED: set[tuple] = set()

#: settings that fix episode ownership, the order and the batch boundaries: a resume state that
#: matches them continues the very same order; one that does not is resumed elastically
RESUME_SETTINGS = ("seed", "batch_size", "world_size", "num_workers", "strategy", "pool_size", "byte_budget",
                   "repeat", "drop_last", "equalize", "partitions")
#: what an elastic resume cannot change (with the stream's identity: dataset, episodes, mixture)
REFUSED_SETTINGS = ("seed", "partitions")
#: what it can: the remainder of the epoch is replanned over the new values
ELASTIC_SETTINGS = tuple(s for s in RESUME_SETTINGS if s not in REFUSED_SETTINGS)


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


@dataclass(frozen=True)
class WorkerStart:
    """Where a DataLoader worker's stream begins (see ``PlannerBase.worker_start``).

    Fields:
        logical_worker (int): the worker shard this DataLoader worker plays.
        epoch (int): epoch of the first anchor.
        offset (int): anchors of that epoch already consumed (skipped on start).
        limit (int | None): anchors this worker yields per epoch (None: all of them), finite mode.
    """

    logical_worker: int
    epoch: int
    offset: int
    limit: int | None


class PlannerBase:
    """Epoch sizes, batch turns, epochs and resume of one rank's planner.

    A subclass sets the attributes ``rank``, ``world_size``, ``num_workers``, ``num_shards``,
    ``num_active_workers``, ``batch_size``, ``drop_last``, ``repeat``, ``equalize``, ``seed``,
    ``epoch``, ``samples_consumed`` and implements ``_worker_frames(rank)`` (frames per logical
    worker in one epoch), ``_stream_state(samples)``, ``worker_plans(start)`` and
    ``worker_pools(start, plans)``.
    """

    #: what the resume messages call this stream ("planner" or "mixture")
    _kind = "planner"

    # --- what a subclass provides ---------------------------------------------------------------
    def _stream_state(self, samples: int) -> StreamState:
        raise NotImplementedError

    def _identity_diffs(self, st: StreamState, mine: StreamState) -> list[str]:
        """What makes ``st`` another stream than this one (dataset, episodes, mixture)."""
        raise NotImplementedError

    def worker_plans(self, start: WorkerStart) -> list[Any]:
        """The ``WorkerPlan`` of ``start.logical_worker`` for each dataset of the stream (one for a
        single dataset). Raises ByteBudgetError (an episode larger than its worker's budget) before
        anything is fetched."""
        raise NotImplementedError

    def worker_pools(self, start: WorkerStart, plans: Sequence[Any]) -> Iterator[Any]:
        """The pools the worker pipeline reads from ``start`` on (``EpisodePool`` interface, global
        episode ids): one per epoch, or one endless pool, as the planner's ``repeat`` says."""
        raise NotImplementedError

    def _worker_frames(self, rank: int) -> list[int]:
        raise NotImplementedError

    # --- elastic resume (a subclass that supports it overrides _load_elastic and _pass) ------------
    def _init_elastic(self) -> None:
        #: the state dict whose unconsumed samples epoch ``origin_epoch`` replays (None: plain epochs)
        self.origin: dict[str, Any] | None = None
        self.origin_epoch: int | None = None
        #: settings the last loaded state changed (elastic resume), for the caller to log
        self.resume_changes: list[str] = []
        #: ``() -> [episode_nbytes per dataset]`` for the replay where this planner has no sizes
        self.nbytes_provider = getattr(self, "nbytes_provider", None)
        self._replay_nbytes = None
        self._rp = None
        self._rolled = None
        self._chain = None
        self._elastic_epoch_rolled = False

    def _elastic_active(self) -> bool:
        return getattr(self, "origin", None) is not None and self.epoch == self.origin_epoch

    def _endless_limits(self, rank: int) -> list[int | None]:
        """Per logical worker: None (endless) or the samples it gives before it stops."""
        return [None if f else 0 for f in self._worker_frames(rank)]

    def _like(self, st: StreamState, nbytes=None) -> PlannerBase:
        """A planner of rank 0 over the same stream with ``st``'s settings and position."""
        raise NotImplementedError

    def _remainder_planner(self) -> PlannerBase:
        """The planner of this topology that plays the origin's remainder (cached)."""
        raise NotImplementedError

    def _check_elastic(self, st: StreamState, changed: list[str]) -> None:
        """Raise ResumeStateError where this stream cannot resume ``st`` on another topology."""

    def _load_elastic(self, st: StreamState, changed: list[str]) -> None:
        """Resume ``st`` on this topology: this planner's epoch becomes the old run's epoch in
        progress, whose unconsumed samples it plays first (counted from 0)."""
        self._check_elastic(st, changed)
        key = st.epoch
        if st.origin is None:
            old = self._old_run(st)
            if not st.repeat:
                key, s = old.position()  # counts only: a finished epoch rolls over
            else:
                s = st.samples
            if s == 0:  # nothing of that epoch consumed: it is simply played on this topology
                self.epoch, self.samples_consumed = key, 0
                return
        self.origin, self.origin_epoch = st.to_dict(), key
        self.epoch, self.samples_consumed = key, 0

    def _old_run(self, st: StreamState) -> PlannerBase:
        """:meth:`_like` for a loaded state: settings no run over this stream can have had (more ranks
        or workers than its episodes allow: a tampered state) raise ResumeStateError."""
        try:
            return self._like(st)
        except (ShardingError, StreamingConfigError) as e:
            raise ResumeStateError(
                f"malformed stream state (tampered, or not written by state_dict() for this stream): no run over "
                f"this stream has its settings ({e}). Pass the dict that state_dict() returned, or start a new run "
                "from the policy weights.") from e

    def _plain(self) -> PlannerBase:
        """This planner without its elastic origin (the plain epochs of its topology)."""
        out = copy.copy(self)
        out._init_elastic()
        return out

    def _pass(self) -> PlannerBase:
        """The planner of the epoch in progress: this one, or (elastic resume) the one that plays
        the old run's remainder on this topology (endless: then its plain epochs), or, when the
        count ran past the remainder (finite), the plain epochs after it."""
        if not self._elastic_active():
            return self
        rp = self._remainder_planner()
        rp.samples_consumed = self.samples_consumed
        if self.repeat:
            return rp
        total = rp.epoch_samples()
        if self.samples_consumed < total or not total and not self.samples_consumed:
            return rp
        key = (self.epoch, self.samples_consumed)
        if self._rolled is None or self._rolled[0] != key:
            q = self._plain()
            q.epoch, q.samples_consumed = rp.epoch + 1, self.samples_consumed - total
            q._elastic_epoch_rolled = True
            self._rolled = (key, q)
        return self._rolled[1]

    def iter_worker_anchors(self, dl_worker_id: int | None = None,
                            dl_num_workers: int = 0) -> Iterator[tuple[int, int]]:
        """The anchors (global episode id, frame) DataLoader worker ``dl_worker_id`` yields, from
        the resume state on: one (the rest of the) epoch when finite, endless with ``repeat=True``."""
        start = self.worker_start(dl_worker_id, dl_num_workers)
        return read_pools(self.worker_pools(start, self.worker_plans(start)), start.limit)

    def worker_frames(self, rank: int | None = None) -> list[int]:
        """Anchors per logical worker of ``rank`` (default: this rank) in one epoch of the pass in
        progress (before ``drop_last`` and ``equalize``)."""
        return self._pass()._worker_frames(self.rank if rank is None else rank)

    def batches_per_rank(self) -> np.ndarray:
        """DataLoader batches per rank in one finite epoch (``batch_size``, ``drop_last``, workers
        taken into account), before equalization, int64 (world_size,)."""
        p = self._pass()
        if p is not self:
            return p.batches_per_rank()
        out = []
        for r in range(self.world_size):
            fr = self._worker_frames(r)
            out.append(replay_turns(fr, self.batch_size, batches=sum(fr) + 1, drop_last=self.drop_last)[2])
        return np.array(out, dtype=np.int64)

    def worker_epoch_limits(self, rank: int | None = None) -> list[int]:
        """Anchors each logical worker of ``rank`` yields in one finite epoch (after ``drop_last``
        truncation to whole batches and ``equalize``)."""
        p = self._pass()
        if p is not self:
            return p.worker_epoch_limits(rank)
        rank = self.rank if rank is None else rank
        fr = self._worker_frames(rank)
        if self.repeat:
            return fr
        if self.drop_last:  # the DataLoader drops each worker's short last batch: never decode it
            fr = [f - f % self.batch_size for f in fr]
        if self.equalize == "none":
            return fr
        if getattr(self, "_bmin", None) is None:  # every rank's limits need it: computed once
            self._bmin = int(self.batches_per_rank().min())
        bmin = self._bmin
        return replay_turns(fr, self.batch_size, batches=bmin, drop_last=self.drop_last)[0]

    def turn_limits(self, rank: int | None = None) -> list[int | None]:
        """Anchors each logical worker of ``rank`` gives from the stream start before it stops, as
        the DataLoader's batch turns see them: :meth:`worker_epoch_limits` (finite), None (endless),
        or its share of an endless elastic remainder when no plain epoch follows it there."""
        p = self._pass()
        rank = self.rank if rank is None else rank
        return p._endless_limits(rank) if self.repeat else list(p.worker_epoch_limits(rank))

    def epoch_samples(self) -> int:
        """Anchors this rank yields in one finite epoch (after ``equalize``)."""
        p = self._pass()
        if p is not self:
            return p.epoch_samples()
        return sum(self.worker_epoch_limits())

    def position(self) -> tuple[int, int]:
        """(epoch, samples consumed in it) of the resume state; in finite mode a consumed count of
        one or more whole epochs rolls into the following epochs (``repeat=True`` keeps the
        stream's start epoch: each worker rolls over on its own)."""
        p = self._pass()
        if p is not self:
            return p.position()
        if self.repeat:
            return self.epoch, self.samples_consumed
        total = self.epoch_samples()
        if total and self.samples_consumed >= total:
            return self.epoch + self.samples_consumed // total, self.samples_consumed % total
        return self.epoch, self.samples_consumed

    def _turn_start(self, dl_worker_id: int | None) -> tuple[int, int, int, int | None]:
        """(logical worker, samples it already gave, epoch, its epoch limit or None) for DataLoader
        worker ``dl_worker_id``, from the resume state. With ``repeat=True`` the count runs from the
        stream's start epoch (the caller rolls it into epochs).

        Raises:
            ResumeStateError: the consumed count ends inside a batch or exceeds the finite epoch.
        """
        fr = self._worker_frames(self.rank)
        if self.repeat:
            limits: list[int | None] = self._endless_limits(self.rank)
            if not any(x is None or x for x in limits):
                return 0, 0, self.epoch, None
            epoch, s = self.epoch, self.samples_consumed
        else:
            limits = list(self.worker_epoch_limits())
            epoch, s = self.position()
        given, nxt, _ = replay_turns(limits, self.batch_size, samples=s, drop_last=self.drop_last)
        logical = ((0 if dl_worker_id is None else int(dl_worker_id)) + (nxt or 0)) % self.num_shards
        return logical, given[logical], epoch, (None if self.repeat else limits[logical])

    # --- epochs and resume ------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first anchor (resets ``samples_consumed``)."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self.epoch, self.samples_consumed = int(epoch), 0

    def state_dict(self, samples_consumed: int | None = None) -> dict[str, Any]:
        """Resume state (:class:`~lerobotstream.planner.StreamState` layout, schema-versioned): seed,
        epoch, samples consumed by this rank, batch size, world size, workers, strategy, pool
        settings, the stream's identity. Pass the training loop's consumed sample count (sum of the
        consumed batches' sizes) or set ``samples_consumed`` beforehand."""
        s = self.samples_consumed if samples_consumed is None else int(samples_consumed)
        return self._stream_state(s).to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` — of this topology (the very same order continues) or of
        another one (elastic resume: the epoch's unconsumed samples are replanned over this
        planner's ranks, workers and batch size; see docs/resume.md). Sets
        :attr:`resume_changes` to the settings that differ.

        Raises:
            ResumeStateError: no schema marker (older sampler: start a new run from the policy
            weights), another stream (dataset, episodes, mixture) or seed; the message lists every
            difference.
        """
        st = StreamState.from_dict(state)
        mine = self._stream_state(0)
        refused = [f"{name}: checkpoint {getattr(st, name)!r}, now {getattr(mine, name)!r}"
                   for name in REFUSED_SETTINGS if getattr(st, name) != getattr(mine, name)]
        refused += self._identity_diffs(st, mine)
        if refused:
            what = ("the same mixture (datasets, weights, episode selections)" if self._kind == "mixture"
                    else "the same episode selection")
            raise ResumeStateError(
                f"resume needs {what}, seed and partitions as the checkpointed run (they fix which samples the epoch has "
                "and their order; world size, batch size, DataLoader workers, pool and budget may change); "
                "differs: " + "; ".join(refused) + ". Restore those settings, or start a new run from the "
                "policy weights.")
        changed = [f"{name}: checkpoint {getattr(st, name)!r}, now {getattr(mine, name)!r}"
                   for name in ELASTIC_SETTINGS if getattr(st, name) != getattr(mine, name)]
        self._init_elastic()
        self.resume_changes = changed
        if changed:
            self._load_elastic(st, changed)
            return
        if st.origin is not None:  # the same topology inside a remainder: the same remainder plan continues
            self.origin, self.origin_epoch = st.origin, st.epoch
        self.epoch, self.samples_consumed = st.epoch, st.samples

    def _check_dataloader(self, dl_worker_id: int | None, dl_num_workers: int) -> None:
        if dl_num_workers != self.num_workers:
            raise ShardingError(
                f"the DataLoader runs {dl_num_workers} worker(s) but the {self._kind} was built for "
                f"num_workers={self.num_workers} (pass max_num_shards/num_workers equal to the DataLoader's)")
        if self.num_active_workers < self.num_shards and not dl_worker_id:
            self._warn_idle()

    def _warn_idle(self) -> None:
        # Said where the stream starts, by DataLoader worker 0 only (every worker builds its own
        # planner; the training process builds them for state_dict too) and once per process.
        key = (self._kind, self.rank, self.num_shards, self._owns())
        if key in _IDLE_WARNED:
            return
        _IDLE_WARNED.add(key)
        logger.warning(
            "rank %d owns %s for %d DataLoader workers: workers %d..%d get no episode and yield nothing "
            "(lower num_workers to use every worker)", self.rank, self._owns(), self.num_shards,
            self.num_active_workers, self.num_shards - 1)

    def _owns(self) -> str:
        """What this rank owns, for the idle-worker warning ("3 episode(s)")."""
        raise NotImplementedError

    def worker_start(self, dl_worker_id: int | None = None, dl_num_workers: int = 0) -> WorkerStart:
        """Where DataLoader worker ``dl_worker_id`` (None in-process) starts, from the resume state
        (``epoch``, ``samples_consumed``): its logical worker, epoch, samples of that epoch already
        consumed (endless streams: rolled into later epochs where the planner's pools need it) and
        limit (finite mode).

        Raises:
            ShardingError: the DataLoader's worker count is not the planner's ``num_workers``.
            ResumeStateError: the consumed count ends inside a batch (several workers) or exceeds
            the finite epoch.
        """
        p = self._pass()
        if p is not self:
            return p.worker_start(dl_worker_id, dl_num_workers)
        self._check_dataloader(dl_worker_id, dl_num_workers)
        logical, c, epoch, limit = self._turn_start(dl_worker_id)
        return self._start_at(logical, c, epoch, limit)

    def _start_at(self, logical: int, given: int, epoch: int, limit: int | None) -> WorkerStart:
        return WorkerStart(logical, epoch, given, limit)
