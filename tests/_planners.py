"""The small planner constructors and shard queries the tests use (the library builds a planner one
way: ``Planner(streams, settings)``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from lerobotstream.errors import ShardingError
from lerobotstream.planner._layout import WorkerPlan, read_pools
from lerobotstream.planner._mixseq import MixSequence
from lerobotstream.planner._planner import Planner
from lerobotstream.planner._streams import PlanSettings, Streams, no_sizes

__all__ = [
    "admission_order",
    "iter_anchors",
    "partition_episodes",
    "make_mixture_for_datasets",
    "make_mixture",
    "make_partition_planner",
    "make_planner",
    "stream_partitions",
    "stream_planners",
    "with_specs",
    "worker_episodes",
    "worker_plan",
    "worker_pool",
]


def make_planner(
    episode_lengths: Mapping[int, int] | np.ndarray | list[int],
    *,
    episode_indices: Any = None,
    episode_nbytes: Callable[[int], int] | None = None,
    **settings: Any,
) -> Planner:
    """One dataset's planner: ``{episode_index: length}`` (or lengths and ``episode_indices``),
    its sizes, and :class:`PlanSettings` fields as keywords."""
    streams = Streams.of_dataset(episode_lengths, episode_nbytes, episode_indices=episode_indices)
    return Planner(streams, PlanSettings(**settings))


def make_partition_planner(episode_lengths: Any, *, partitions: int, **kw: Any) -> Planner:
    """:func:`make_planner` over ``partitions`` canonical partitions."""
    return make_planner(episode_lengths, partitions=partitions, **kw)


def make_mixture(
    planners: Sequence[Planner],
    weights: Sequence[float],
    offsets: Sequence[int],
    *,
    seed: int,
    repeat: bool,
    batch_size: int = 1,
    drop_last: bool = False,
    equalize: str = "none",
    mixture: dict[str, Any] | None = None,
    byte_budget: int | None = None,
    episode_pool_size: int | None = None,
) -> Planner:
    """A mixture of single-dataset planners, each stream played with its planner's own spec (seed,
    pool, budget); the planners share rank, world size, workers and ``repeat``.

    Raises:
        ValueError: planners disagree on world size, rank, workers or ``repeat``; bad weights.
    """
    planners = list(planners)
    if not planners:
        raise ValueError("a mixture needs one weight and one offset per planner")
    t0 = planners[0].settings
    for p in planners:
        t = p.settings
        if (t.rank, t.world_size, t.num_workers, t.repeat) != (t0.rank, t0.world_size, t0.num_workers, repeat):
            raise ValueError("the planners of a mixture must share rank, world size, num_workers and repeat")
    specs = [p.specs[0] for p in planners]
    episodes = [replace(s, sizes=s.sizes or no_sizes) for s in specs]
    streams = Streams.of_mixture(episodes, weights, offsets, mixture=mixture)
    s0 = planners[0].settings
    settings = PlanSettings(
        seed=seed,
        num_workers=t0.num_workers,
        episode_pool_size=episode_pool_size,
        sampling_strategy=s0.sampling_strategy,
        byte_budget=byte_budget,
        repeat=repeat,
        batch_size=batch_size,
        drop_last=drop_last,
        equalize=equalize,
        partitions=s0.partitions,
        rank=t0.rank,
        world_size=t0.world_size,
    )
    return with_specs(streams, settings, specs)


def make_mixture_for_datasets(
    anchor_lengths: Sequence[Mapping[int, int]],
    weights: Sequence[float],
    offsets: Sequence[int],
    settings: PlanSettings,
    *,
    episode_nbytes: Sequence[Callable[[int], int]] | None = None,
    mixture: dict[str, Any] | None = None,
) -> Planner:
    """The mixture planner the multi-dataset stream builds (each dataset its share by the rule)."""
    return Planner(Streams.of_mixture(anchor_lengths, weights, offsets, episode_nbytes, mixture), settings)


def with_specs(streams: Streams, settings: PlanSettings, specs: Sequence[Any]) -> Planner:
    """A planner of ``streams`` that plays each stream with its own ``specs`` entry (seed, pool,
    budget) instead of the ones the streams' rule gives."""
    eps = tuple(replace(e, sizes=e.sizes or no_sizes) for e in streams.episodes)
    p = Planner(replace(streams, episodes=eps), settings)
    p.specs = list(specs)
    p.plain = p._plain_pass(p.settings, p.specs)
    return p


def stream_planners(p: Planner) -> list[Planner]:
    """One planner per stream of ``p``, each over that stream alone with its spec (its shards and
    plans are the mixture's)."""
    return [with_specs(Streams((e,)), p.settings, [spec]) for e, spec in zip(p.streams.episodes, p.specs)]


def worker_plan(p: Planner, worker: int) -> WorkerPlan:
    """Logical ``worker``'s plan of the first stream, this rank, plain epochs.

    Raises:
        ShardingError: ``worker`` outside ``0..num_shards-1``.
    """
    k = p.settings.num_shards
    if not 0 <= worker < k:
        raise ShardingError(f"worker {worker} outside 0..{k - 1}")
    return p.plain.layouts[0].plan(worker, p.settings.rank)


def worker_episodes(p: Planner, worker: int, rank: int | None = None) -> np.ndarray:
    """Episode indices of the first stream logical ``worker`` of ``rank`` plays (plain epochs),
    ascending (empty: idle)."""
    layout = p.plain.layouts[0]
    groups = layout.groups_of(p.settings.rank if rank is None else rank)[worker].tolist()
    parts = [layout.groups[g][0] for g in groups]
    return layout.episode_indices[np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)]


def stream_partitions(p: Planner, worker: int, rank: int | None = None) -> np.ndarray:
    """Partition ids logical ``worker`` of ``rank`` plays in a plain epoch (``partitions``)."""
    return p.plain.layouts[0].groups_of(p.settings.rank if rank is None else rank)[worker]


def partition_episodes(p: Planner, partition: int) -> np.ndarray:
    """Dataset episode indices of ``partition`` of the first stream (ascending, int64)."""
    layout = p.plain.layouts[0]
    return layout.episode_indices[layout.parts[partition]]


def iter_anchors(
    plan: Any, epoch: int = 0, start_offset: int = 0, *, repeat: bool = False, limit: int | None = None
) -> Iterator[tuple[int, int]]:
    """``(episode_index, frame_index)`` of ``plan`` from ``start_offset`` of ``epoch`` on: to the end
    of the epoch, or to ``limit`` anchors of it (finite); epoch after epoch (``repeat=True``)."""
    stop = plan.num_frames if limit is None else min(limit, plan.num_frames)
    return read_pools(
        iter([worker_pool(plan, epoch, start_offset, repeat=repeat, limit=stop)]), None if repeat else stop
    )


def worker_pool(
    plan: WorkerPlan, epoch: int = 0, start_offset: int = 0, *, repeat: bool = False, limit: int | None = None
) -> MixSequence:
    """``plan``'s pool from ``start_offset`` of ``epoch`` on, as the worker pipeline reads it (a mix
    sequence of one stream over its group pools): to ``limit`` anchors of the epoch (default: all),
    or endless (``repeat=True``; an idle plan gives nothing)."""
    cap = None if repeat and plan.num_frames else (plan.num_frames if limit is None else limit)
    return MixSequence([1], [cap], [0], start_offset).play([plan], [0], epoch, repeat)


def admission_order(plan: WorkerPlan, epoch: int) -> np.ndarray:
    """Dataset episode indices of ``plan`` in ``epoch``'s admission order, group after group (int64)."""
    out = [plan.episode_indices[plan._starts[i] + plan._order(i, epoch)] for i in range(len(plan.groups))]
    return np.concatenate(out) if out else np.empty(0, np.int64)
