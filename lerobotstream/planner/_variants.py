"""The planner's named constructors: ``PartitionPlanner`` (one dataset over canonical
partitions) and ``MixturePlanner`` (a weighted mixture). Both build a
:class:`~lerobotstream.planner.Planner` — there is one planner, whatever it plays; these only
say how its streams and settings are given."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lerobotstream.planner._mixseq import integer_weights
from lerobotstream.planner._planner import Planner
from lerobotstream.planner._settings import PlanSettings
from lerobotstream.planner._streams import Episodes, Streams, episodes_of, no_sizes

__all__ = ["MixturePlanner", "PartitionPlanner"]


class PartitionPlanner(Planner):
    """``Planner(..., partitions=P)``: one dataset over ``P`` canonical partitions (arguments as
    :class:`Planner`'s, ``partitions`` required)."""

    def __init__(self, episode_lengths: Any, *, partitions: int, **kw: Any) -> None:
        super().__init__(episode_lengths, partitions=partitions, **kw)


class MixturePlanner(Planner):
    """A :class:`Planner` over several datasets (streams), given as one single-dataset planner each.

    Args:
        planners: one :class:`Planner` per dataset, built with the same world, ``num_workers``
            and ``repeat`` (their byte budgets and pool sizes are the datasets' shares).
        weights: sampling weight per dataset (> 0 each), e.g. the frame counts.
        offsets: global episode id offset per dataset (``offsets[d] + episode_index``).
        seed, repeat, batch_size, drop_last, equalize: as :class:`Planner`'s.
        mixture: a JSON-able description recorded in the state and compared on resume (repo ids,
            weights).
        byte_budget, episode_pool_size: the mixture's rank byte budget (bytes) and per-worker pool
            option (recorded in the state; each planner holds its share).

    Raises:
        ValueError: planners disagree on world size, rank, workers or ``repeat``; bad weights.
    """

    def __init__(
        self,
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
    ) -> None:
        planners = list(planners)
        if not planners or len(weights) != len(planners) or len(offsets) != len(planners):
            raise ValueError("a mixture needs one weight and one offset per planner")
        p0 = planners[0]
        for p in planners:
            if (p.rank, p.world_size, p.num_workers, p.repeat) != (p0.rank, p0.world_size, p0.num_workers, repeat):
                raise ValueError("the planners of a mixture must share rank, world size, num_workers and repeat")
        specs = [p.specs[0] for p in planners]
        streams = _streams(
            [Episodes(s.episode_indices, s.lengths, s.digest, s.sizes or no_sizes) for s in specs],
            weights,
            offsets,
            mixture,
        )
        settings = PlanSettings(
            seed=seed,
            num_workers=p0.num_workers,
            episode_pool_size=episode_pool_size,
            sampling_strategy=p0.sampling_strategy,
            byte_budget=byte_budget,
            repeat=repeat,
            batch_size=batch_size,
            drop_last=drop_last,
            equalize=equalize,
            partitions=p0.partitions,
            rank=p0.rank,
            world_size=p0.world_size,
        )
        self._setup(streams, settings, specs)

    @classmethod
    def for_datasets(
        cls,
        anchor_lengths: Sequence[Mapping[int, int]],
        weights: Sequence[float],
        offsets: Sequence[int],
        settings: PlanSettings,
        *,
        episode_nbytes: Sequence[Callable[[int], int]] | None = None,
        mixture: dict[str, Any] | None = None,
    ) -> Planner:
        """The mixture planner of one rank from the mixture's ``settings`` (:mod:`._streams`'
        mixture rule: each dataset's own seed — a mixture of one dataset uses the seed itself, so
        it gives that dataset's own order — and its share of the rank's pool, byte budget and
        open-decoder cap). Errors name the dataset (``mixture["repo_ids"]``) and its share.

        Raises:
            ShardingError, StreamingConfigError, ValueError: as :class:`Planner` for one dataset
            (its name and share added).
        """
        sizes = list(episode_nbytes) if episode_nbytes else [None] * len(anchor_lengths)
        streams = _streams(
            [episodes_of(lengths, None, nb or no_sizes) for lengths, nb in zip(anchor_lengths, sizes)],
            weights,
            offsets,
            mixture,
        )
        return Planner.for_streams(streams, settings)


def _streams(
    episodes: list[Episodes], weights: Sequence[float], offsets: Sequence[int], mixture: dict[str, Any] | None
) -> Streams:
    names = tuple(str(n) for n in (mixture or {}).get("repo_ids", range(len(episodes))))
    integer_weights(weights)  # ValueError for bad weights, here
    return Streams(
        tuple(episodes),
        tuple(float(w) for w in weights),
        tuple(int(o) for o in offsets),
        names,
        "mixture",
        dict(mixture or {}),
    )
