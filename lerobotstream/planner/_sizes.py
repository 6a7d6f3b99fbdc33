"""Episode sizes, the planner's one impure edge: :class:`EpisodeSizes`, each episode's exact
synthesized bytes (every camera's mini-MP4 together) computed when admission or prefetch first asks
for it, and kept — so start-up and memory grow with the pool and the frontier, not the dataset
(docs/scale.md). The planner never opens a file: whoever can compute sizes (the dataset's
``Worker.episode_nbytes``) is a *size provider* (``SizeProvider``), wrapped here.

``provider(episode_index) -> int`` bytes (>= 0) is called, at most once per episode and process,
when a pool admits the episode (``EpisodePool`` asks the plan's checked ``size_of``, holding the
GIL) or the byte cache reserves it (``WorkerPlan.episode_size``).

Errors: the provider's :class:`~lerobotstream.errors.LeRobotStreamError` propagates unchanged out of
the call that asked (``next_anchors``, ``fill``, ``episode_size``), with ``episode E:`` added when it
does not name its episode; nothing is kept for that episode. A negative size, or one larger than the
worker's whole budget, is refused by the plan (``ByteBudgetError``). Any other exception is a bug of
the provider and is not caught.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from lerobotstream.errors import LeRobotStreamError

__all__ = ["EpisodeSizes", "SizeProvider"]


#: Where episode sizes come from (see the module doc): ``provider(episode_index) -> int`` bytes.
SizeProvider = Callable[[int], int]


def _names_episode(exc: LeRobotStreamError, episode_index: int) -> bool:
    if getattr(exc, "episode_index", None) == episode_index:
        return True
    return re.search(rf"\bepisode {episode_index}\b", exc.message) is not None


class EpisodeSizes:
    """Exact bytes per episode, computed on first use by ``compute`` (the ``SizeProvider``) and kept
    (thread-safe: two threads asking at once may both compute it; the first result is kept)."""

    def __init__(self, compute: SizeProvider) -> None:
        self._compute = compute
        self._known: dict[int, int] = {}
        self._lock = threading.Lock()

    def __call__(self, episode_index: int) -> int:
        """The episode's size in bytes. Raises the provider's typed error, naming the episode."""
        e = int(episode_index)
        got = self._known.get(e)
        if got is None:
            try:
                got = int(self._compute(e))
            except LeRobotStreamError as exc:
                if _names_episode(exc, e):
                    raise
                raise type(exc)(f"episode {e}: {exc.message}", **{**exc.fields, "episode_index": e}) from exc
            with self._lock:
                got = self._known.setdefault(e, got)
        return got

    def known(self) -> dict[int, int]:
        """The sizes computed so far (a copy): what admission and prefetch asked for."""
        with self._lock:
            return dict(self._known)

    def __len__(self) -> int:
        """Number of episodes sized so far."""
        return len(self._known)

    def __bool__(self) -> bool:  # a source of sizes, known or not (``__len__`` counts the known ones)
        return True

    def __repr__(self) -> str:
        return f"EpisodeSizes({len(self._known)} known)"
