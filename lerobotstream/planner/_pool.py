"""A pool's admissions and evictions (:class:`PoolEvent`): what the worker pipeline, byte cache and
decoders follow. The pool itself is :class:`~lerobotstream.planner._poolcore.EpisodePool` (Cython)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PoolEvent"]


class PoolEvent(NamedTuple):
    """An admission or eviction.

    Fields:
        position (int): samples the pool had emitted when it happened (an eviction at position p
            follows the episode's last anchor, number p-1; an episode admitted at p can be drawn
            from sample p on).
        kind (str): ``"admit"`` (bytes must be resident before its first anchor) or ``"evict"``
            (its last anchor was emitted: release its bytes once that anchor is decoded).
        episode_index (int): dataset episode index.
    """

    position: int
    kind: str
    episode_index: int
