"""A planner's resume state as data: the :class:`~lerobotstream.planner._state.StreamState` a
planner position writes (:func:`stream_state`), what a loaded state may change and what it may not
(:func:`resume_differences`, docs/resume.md), and the settings of the run that wrote a state
(:func:`settings_of`). ``Planner.state_dict`` / ``Planner.load_state_dict`` call them."""

from __future__ import annotations

from typing import Any

from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._settings import PlanSettings
from lerobotstream.planner._state import (
    ELASTIC_SETTINGS,
    REFUSED_SETTINGS,
    RESUME_SETTINGS,
    StreamState,
    episode_selection_diffs,
)
from lerobotstream.planner._streams import Streams

__all__ = [
    "ELASTIC_SETTINGS",
    "REFUSED_SETTINGS",
    "RESUME_SETTINGS",
    "resume_differences",
    "settings_of",
    "stream_state",
]


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
        mixture = {**mix, "integer_weights": list(streams.integer_weights)}
    else:
        strategy = s.sampling_strategy
    fields = {name: getattr(s, name) for name in RESUME_SETTINGS}  # the settings, named as the state's fields
    fields.update(seed=seed, sampling_strategy=strategy)
    return StreamState(
        **fields,
        epoch=epoch,
        samples=int(samples),
        episodes_digest=streams.digest,
        mixture=mixture,
        origin=origin,
    )


def settings_of(st: StreamState) -> PlanSettings:
    """The settings of rank 0 of the run that wrote ``st`` (its old topology)."""
    return PlanSettings(**{name: getattr(st, name) for name in RESUME_SETTINGS}, video_decoder_cache_size=None, rank=0)


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
        for key in sorted(set(st.mixture) | set(mine.mixture))
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
