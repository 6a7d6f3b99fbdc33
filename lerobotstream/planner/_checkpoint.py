"""A planner's resume state as data: the :class:`~lerobotstream.planner._state.StreamState` a
planner position writes (:func:`stream_state`), what a loaded state may change and what it may not
(:func:`resume_differences`, docs/resume.md), and the settings of the run that wrote a state
(:func:`settings_of`). ``Planner.state_dict`` / ``Planner.load_state_dict`` call them."""

from __future__ import annotations

from typing import Any

from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._settings import PlanSettings
from lerobotstream.planner._state import StreamState, episode_selection_diffs
from lerobotstream.planner._streams import Streams

__all__ = [
    "ELASTIC_SETTINGS",
    "REFUSED_SETTINGS",
    "RESUME_SETTINGS",
    "resume_differences",
    "settings_of",
    "stream_state",
]

#: settings that fix episode ownership, the order and the batch boundaries: a resume state that
#: matches them continues the very same order; one that does not is resumed elastically
RESUME_SETTINGS = (
    "seed",
    "batch_size",
    "world_size",
    "num_workers",
    "strategy",
    "pool_size",
    "byte_budget",
    "repeat",
    "drop_last",
    "equalize",
    "partitions",
)
#: what an elastic resume cannot change (with the stream's identity: dataset, episodes, mixture)
REFUSED_SETTINGS = ("seed", "partitions")
#: what it can: the remainder of the epoch is replanned over the new values
ELASTIC_SETTINGS = tuple(s for s in RESUME_SETTINGS if s not in REFUSED_SETTINGS)
_SEED_RULE_KEY = "seed_rule"  # a mixture of one dataset's state records that the dataset used the seed itself
#: in the mixture record of states written before the budget was split in bytes (the GiB option); not
#: compared on resume, not written any more
_BUDGET_KEY = "byte_budget_gb"


def stream_state(
    streams: Streams,
    settings: PlanSettings,
    seed: int,
    strategy: str,
    epoch: int,
    samples: int,
    origin: dict[str, Any] | None,
) -> StreamState:
    """The resume state of a planner over ``streams`` with ``settings`` (rank and world size
    resolved; ``seed`` mapped) at ``samples`` consumed samples of ``epoch`` (``origin``: the
    elastic origin of that epoch, None: a plain epoch); ``strategy``: the first stream's."""
    s, mix, mixture = settings, streams.mixture, None
    if mix is not None:
        extra = {}
        if len(streams.episodes) == 1:  # its dataset plays under the seed itself: an older
            extra[_SEED_RULE_KEY] = "dataset"  # mixture-of-one state (derived seed) is another order: refused
        mixture = {**mix, "integer_weights": list(streams.integer_weights), **extra}
    else:
        strategy = s.sampling_strategy
    return StreamState(
        seed,
        epoch,
        int(samples),
        s.batch_size,
        s.world_size,
        s.num_workers,
        strategy,
        s.episode_pool_size,
        s.byte_budget,
        s.repeat,
        s.drop_last,
        s.equalize,
        streams.digest,
        mixture=mixture,
        origin=origin,
        partitions=s.partitions,
    )


def settings_of(st: StreamState) -> PlanSettings:
    """The settings of rank 0 of the run that wrote ``st`` (its old topology)."""
    return PlanSettings(
        seed=st.seed,
        num_workers=st.num_workers,
        episode_pool_size=st.pool_size,
        sampling_strategy=st.strategy,
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


def _identity_diffs(streams: Streams, st: StreamState, mine: StreamState) -> list[str]:
    """What makes ``st`` another stream than ``streams`` (dataset, episodes, mixture)."""
    if streams.mixture is None:
        if st.mixture is not None:
            return [f"the checkpoint streams a mixture of {st.mixture.get('repo_ids')}, this is one dataset"]
        return episode_selection_diffs(st, mine)
    if st.mixture is None:
        raise ResumeStateError(
            "the resume state was written by a single-dataset stream but this is a mixture of "
            f"{len(streams.episodes)} datasets ({streams.mixture.get('repo_ids')}); sample-exact "
            "resume needs the same mixture. Start a new run from the policy weights."
        )
    diffs = [
        f"mixture {key}: checkpoint {st.mixture.get(key)!r}, now {mine.mixture.get(key)!r}"
        for key in sorted((set(st.mixture) | set(mine.mixture)) - {_BUDGET_KEY})
        if st.mixture.get(key) != mine.mixture.get(key)
    ]
    return diffs or episode_selection_diffs(st, mine)


def resume_differences(streams: Streams, st: StreamState, mine: StreamState) -> list[str]:
    """The settings a loaded state ``st`` changes (:data:`ELASTIC_SETTINGS`, as messages) against
    ``mine`` (this planner's state): empty, the same topology.

    Raises:
        ResumeStateError: ``st`` is another stream (dataset, episodes, mixture) or has another
            seed or partitions; the message lists every difference.
    """
    refused = [
        f"{name}: checkpoint {getattr(st, name)!r}, now {getattr(mine, name)!r}"
        for name in REFUSED_SETTINGS
        if getattr(st, name) != getattr(mine, name)
    ]
    refused += _identity_diffs(streams, st, mine)
    if refused:
        what = (
            "the same mixture (datasets, weights, episode selections)"
            if streams.rule == "mixture"
            else "the same episode selection"
        )
        raise ResumeStateError(
            f"resume needs {what}, seed and partitions as the checkpointed run (they fix which samples the epoch has "
            "and their order; world size, batch size, DataLoader workers, pool and budget may change); "
            "differs: " + "; ".join(refused) + ". Restore those settings, or start a new run from the "
            "policy weights."
        )
    return [
        f"{name}: checkpoint {getattr(st, name)!r}, now {getattr(mine, name)!r}"
        for name in ELASTIC_SETTINGS
        if getattr(st, name) != getattr(mine, name)
    ]
