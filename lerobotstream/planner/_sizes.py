"""The planner's one impure edge: episode sizes (a size provider, ``SizeProvider``), and
:class:`EpisodeSizes`, each episode's exact synthesized bytes computed the first time admission
asks for it and kept.

The byte budget needs the exact size of an episode only when the episode is admitted to a pool
(the worker's active pool) or reserved ahead of it (the byte cache's prefetch frontier). Asking
for every owned episode's size before the first sample cost a DROID-sized rank minutes and
gigabytes (docs/scale.md); with :class:`EpisodeSizes` start-up and memory grow with the pool and
the frontier, not with the dataset. The sizes are data handed to the planner: it never opens an
index or a file, and knows nothing of datasets; whoever can compute them (the dataset's
per-process span planner, ``dataset._worker.Worker.episode_nbytes``) is a size provider,
wrapped here.

**The size provider** (``SizeProvider``, a plain callable): where episode sizes come from, the
planner's one impure edge, passed in at construction
(``Planner(..., episode_nbytes=EpisodeSizes(provider))``); nothing else of the planner reads a
file, an index or a dataset.

``provider(episode_index) -> int``: the exact synthesized bytes of episode ``episode_index``
(dataset episode index): every camera's mini-MP4 together, what the byte cache holds for the
episode while it is resident. A Python ``int`` (numpy integers are accepted), ``>= 0``.

When it is called (wrapped in :class:`EpisodeSizes`: at most once per episode and process,
then kept): when a worker's pool admits the episode (``EpisodePool`` asks the plan's checked
``size_of``, holding the GIL, inside ``EpisodePool.fill`` / ``next_anchors``), and when the byte
cache reserves it for prefetch (``WorkerPlan.episode_size``). Never for an episode no pool
admits or prefetches, and never while a plan is built. (A plain callable, not wrapped, is the
older eager rule: every episode of a worker plan is sized when the plan is built.)

Errors: a :class:`~lerobotstream.errors.LeRobotStreamError` subclass whose message names the
episode, and the camera and file at fault where there is one (the dataset's provider raises
the span planner's ``Mp4Error``, ``SourceError``, ``SidecarError``, ``FrameTimestampError`` or
``MetadataError`` as ``episode E, camera 'C', file F: ...``). It propagates unchanged out of
the call that admitted or reserved the episode (``next_anchors``, ``fill``, ``episode_size``);
:class:`EpisodeSizes` adds ``episode E:`` to a typed error that does not name its episode, and
keeps nothing for that episode (the next admission asks again). A negative size, or one larger
than the worker's whole budget, is refused by the plan (``ByteBudgetError`` naming the
episode). Any other exception is a bug of the provider and is not caught.
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
    """Exact bytes per episode (all cameras), computed on first use and kept (thread-safe).

    Args:
        compute: the ``SizeProvider``, ``compute(episode_index) -> int`` bytes (>= 0); called
            at most once per episode (two threads asking at once may both compute it; the first
            result is kept; a failed call keeps nothing).

    A planner given an :class:`EpisodeSizes` sizes an episode when admission reaches it (and an
    episode larger than its worker's whole budget raises ``ByteBudgetError`` then, before any of
    its bytes is fetched); given a plain callable it sizes every episode of a worker plan when
    the plan is built (the older, eager rule).
    """

    on_demand = True

    def __init__(self, compute: SizeProvider) -> None:
        self._compute = compute
        self._known: dict[int, int] = {}
        self._lock = threading.Lock()

    def __call__(self, episode_index: int) -> int:
        """The episode's size in bytes (computed now if it is not known yet).

        Raises:
            the provider's typed error (``SizeProvider``), naming the episode.
        """
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

    __getitem__ = __call__

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
