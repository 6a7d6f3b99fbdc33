"""Episode sizes on demand: each episode's exact synthesized bytes, computed the first time
admission asks for it and kept.

The byte budget needs the exact size of an episode only when the episode is admitted to a pool
(the worker's active pool) or reserved ahead of it (the byte cache's prefetch frontier). Asking
for every owned episode's size before the first sample cost a DROID-sized rank minutes and
gigabytes (docs/scale.md); with :class:`EpisodeSizes` start-up and memory grow with the pool and
the frontier, not with the dataset. The sizes are data handed to the planner (it never opens an
index itself): whoever can compute them (the dataset's per-process span planner) wraps that
function here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["EpisodeSizes"]


class EpisodeSizes:
    """Exact bytes per episode (all cameras), computed on first use and kept (thread-safe).

    Args:
        compute: ``compute(episode_index) -> int`` bytes (>= 0); called at most once per episode
            (two threads asking at once may both compute it; the first result is kept).

    A planner given an :class:`EpisodeSizes` sizes an episode when admission reaches it (and an
    episode larger than its worker's whole budget raises ``ByteBudgetError`` then, before any of
    its bytes is fetched); given a plain callable it sizes every episode of a worker plan when
    the plan is built (the older, eager rule).
    """

    on_demand = True

    def __init__(self, compute: Callable[[int], int]) -> None:
        self._compute = compute
        self._known: dict[int, int] = {}
        self._lock = threading.Lock()

    def __call__(self, episode_index: int) -> int:
        """The episode's size in bytes (computed now if it is not known yet)."""
        e = int(episode_index)
        got = self._known.get(e)
        if got is None:
            got = int(self._compute(e))
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
