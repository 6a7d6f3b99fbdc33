"""A :class:`~lerobotstream.planner._planner.Planner`'s resume state: what it writes
(:meth:`PlannerCheckpoint.state_dict`, a :class:`~lerobotstream.planner._state.StreamState`), what it
refuses or resumes elastically on :meth:`PlannerCheckpoint.load_state_dict` (docs/resume.md), and
what an elastic resume continues (:meth:`PlannerCheckpoint.remainder_info`,
:meth:`PlannerCheckpoint.rank_remainders`). A base class of ``Planner``: its methods read the
planner's position, streams and passes (``_like``, ``_remainder_pass``, ``_elastic_active``)."""

from __future__ import annotations

from typing import Any

from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._state import (
    ELASTIC_SETTINGS,
    REFUSED_SETTINGS,
    RESUME_SETTINGS,
    StreamState,
    episode_selection_diffs,
)
from lerobotstream.planner._turns import epoch_overlap

__all__ = ["ELASTIC_SETTINGS", "PlannerCheckpoint", "REFUSED_SETTINGS", "RESUME_SETTINGS"]


class PlannerCheckpoint:
    """Resume state of a planner (mixed into :class:`~lerobotstream.planner._planner.Planner`)."""

    def _stream_state(self, samples: int) -> StreamState:
        origin = self.origin if self._elastic_active() else None
        mix, mixture, strategy = self.streams.mixture, None, self.sampling_strategy
        if mix is not None:
            mixture, strategy = {**mix, "integer_weights": list(self.weights)}, self._specs[0].strategy
        return StreamState(
            seed=self.seed,
            epoch=self.epoch,
            samples=int(samples),
            batch_size=self.batch_size,
            world_size=self.world_size,
            num_workers=self.num_workers,
            sampling_strategy=strategy,
            episode_pool_size=self.episode_pool_size,
            byte_budget=self.byte_budget,
            repeat=self.repeat,
            drop_last=self.drop_last,
            equalize=self.equalize,
            partitions=self.partitions,
            episodes_digest=self.streams.digest,
            mixture=mixture,
            origin=origin,
        )

    def state_dict(self, samples_consumed: int | None = None) -> dict[str, Any]:
        """Resume state (the one :class:`~lerobotstream.planner.StreamState` layout): seed, epoch,
        samples consumed by this rank, the settings that fix the order (named as the options) and
        the stream's identity. Pass the training loop's consumed sample count (sum of the
        consumed batches' sizes) or set ``samples_consumed`` beforehand."""
        s = self.samples_consumed if samples_consumed is None else int(samples_consumed)
        return self._stream_state(s).to_dict()

    def _identity_diffs(self, st: StreamState, mine: StreamState) -> list[str]:
        """What makes ``st`` another stream than this one (dataset, episodes, mixture)."""
        if self.streams.mixture is None:
            if st.mixture is not None:
                return [f"the checkpoint streams a mixture of {st.mixture.get('repo_ids')}, this is one dataset"]
            return episode_selection_diffs(st, mine)
        if st.mixture is None:
            raise ResumeStateError(
                "the resume state was written by a single-dataset stream but this is a mixture of "
                f"{len(self.streams.episodes)} datasets ({self.streams.mixture.get('repo_ids')}); sample-exact "
                "resume needs the same mixture. Start a new run from the policy weights."
            )
        diffs = [
            f"mixture {key}: checkpoint {st.mixture.get(key)!r}, now {mine.mixture.get(key)!r}"
            for key in sorted(set(st.mixture) | set(mine.mixture))
            if st.mixture.get(key) != mine.mixture.get(key)
        ]
        return diffs or episode_selection_diffs(st, mine)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` — of this topology (the very same order continues) or of
        another one (elastic resume: the epoch's unconsumed samples are replanned over this
        planner's ranks, workers and batch size; see docs/resume.md). Sets
        :attr:`resume_changes` to the settings that differ. Nothing is replayed here: the
        remainder is computed when first needed (:meth:`remainders`).

        Raises:
            ResumeStateError: another schema (an earlier build's state: start a new run from the
            saved weights), a malformed or impossible state (e.g. more than ``constants.MAX_NUM_WORKERS``
            workers), another stream (dataset, episodes, mixture) or seed; the message lists
            every difference.
        """
        st = StreamState.from_dict(state)
        mine = self._stream_state(0)
        refused = [
            f"{name}: checkpoint {getattr(st, name)!r}, now {getattr(mine, name)!r}"
            for name in REFUSED_SETTINGS
            if getattr(st, name) != getattr(mine, name)
        ]
        refused += self._identity_diffs(st, mine)
        if refused:
            what = (
                "the same mixture (datasets, weights, episode selections)"
                if self._kind == "mixture"
                else "the same episode selection"
            )
            raise ResumeStateError(
                f"resume needs {what}, seed and partitions as the checkpointed run (they fix which samples the epoch has "
                "and their order; world size, batch size, DataLoader workers, pool and budget may change); "
                "differs: " + "; ".join(refused) + ". Restore those settings, or start a new run from the "
                "policy weights."
            )
        changed = [
            f"{name}: checkpoint {getattr(st, name)!r}, now {getattr(mine, name)!r}"
            for name in ELASTIC_SETTINGS
            if getattr(st, name) != getattr(mine, name)
        ]
        self.origin, self.origin_epoch, self._rem = None, None, None
        self.resume_changes = changed
        if not changed:
            if st.origin is not None:  # the same topology inside a remainder: the same remainder plan continues
                self.origin, self.origin_epoch = st.origin, st.epoch
            self.epoch, self.samples_consumed = st.epoch, st.samples
            return
        key = st.epoch
        if st.origin is None:
            old = self._like(st)
            s = st.samples
            if not st.repeat:
                key, s = old.position()  # counts only: a finished epoch rolls over
            if s == 0:  # nothing of that epoch consumed: it is simply played on this topology
                self.epoch, self.samples_consumed = key, 0
                return
        self.origin, self.origin_epoch = st.to_dict(), key
        self.epoch, self.samples_consumed = key, 0

    def rank_remainders(self) -> list[Any] | None:
        """What this rank's DataLoader workers need of the elastic remainder (None: a plain
        epoch), one per stream (``for_rank``: a started episode's frames only for this rank's
        episodes): the dataset computes it once where the state is loaded and ships it to its
        workers (their planner's ``shipped_remainders``)."""
        if not self._elastic_active():
            return None
        rp = self._remainder_pass()
        return [lay.for_rank(rem, self.rank) for lay, rem in zip(rp.layouts, rp.remainders)]

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
        if not self._elastic_active():
            return None
        rp = self._remainder_pass()
        infos = [lay.info(rem) for lay, rem in zip(rp.layouts, rp.remainders)]
        left = [int(lay.rank_frames().sum()) for lay in rp.layouts]
        shares = rp.worker_frames(self.rank)
        endless, k, b = self.repeat and self.num_shards > 1, self.num_shards, self.batch_size
        return {
            "epoch": rp.epoch,
            "samples_left": sum(left),
            "samples_left_per_dataset": left,
            "rank_samples": int(rp.samples_per_rank()[self.rank]),
            "unit": infos[0]["unit"],
            "whole": sum(i["whole"] for i in infos),
            "started": sum(i["started"] for i in infos),
            "depth": rp.depth,
            "consumed": sum(int(r.consumed) for r in rp.remainders),
            "overlap": epoch_overlap(shares, b) if endless else 0,
            "overlap_bound": (k - 1) * (max(shares) - min(shares) + b - 1) if endless else 0,
        }
