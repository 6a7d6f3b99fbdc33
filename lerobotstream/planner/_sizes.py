"""Episode sizes, the planner's one impure edge: :class:`EpisodeSizes` wraps a ``SizeProvider``
(``provider(episode_index) -> int`` bytes >= 0, the episode's synthesized mini-MP4s together) and
asks it at most once per episode and process, when a pool admits the episode (``EpisodePool``) or
the byte cache reserves it (``WorkerPlan.episode_size``): start-up and memory grow with the pool,
not the dataset (docs/scale.md).

Errors: the provider's :class:`~lerobotstream.errors.LeRobotStreamError` propagates, with
``episode E:`` added when it does not name its episode; nothing is kept for that episode. A negative
or over-budget size is refused by the plan (``ByteBudgetError``); any other exception is not caught.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from lerobotstream.errors import LeRobotStreamError

__all__ = ["EpisodeSizes", "SizeProvider"]


#: Where episode sizes come from: ``provider(episode_index) -> int`` bytes.
SizeProvider = Callable[[int], int]


class EpisodeSizes:
    """Exact bytes per episode, computed on first use by ``compute`` (the ``SizeProvider``) and kept
    in ``known`` (episode -> bytes, what admission and prefetch asked for; thread-safe: two threads
    asking at once may both compute it; the first result is kept)."""

    def __init__(self, compute: SizeProvider) -> None:
        self._compute = compute
        self.known: dict[int, int] = {}

    def __call__(self, episode_index: int) -> int:
        """The episode's size in bytes. Raises the provider's typed error, naming the episode."""
        e = int(episode_index)
        got = self.known.get(e)
        if got is None:
            try:
                got = int(self._compute(e))
            except LeRobotStreamError as exc:
                if getattr(exc, "episode_index", None) == e or re.search(rf"\bepisode {e}\b", exc.message):
                    raise
                raise type(exc)(f"episode {e}: {exc.message}", **{**exc.fields, "episode_index": e}) from exc
            got = self.known.setdefault(e, got)  # atomic: the first result is kept
        return got
