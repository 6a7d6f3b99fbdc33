"""``PlanSettings``: the plain, typed settings a rank's planner is built from (what the stream's
options say about ownership, order, batches and resources), each field named as the option it
comes from and checked by that option's own rule (:func:`lerobotstream.options.check_option`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from lerobotstream import constants
from lerobotstream.options import StreamOptions, check_option

__all__ = ["PlanSettings"]


@dataclass(frozen=True)
class PlanSettings:
    """What a rank's planner needs of the stream's options (plain values, named as the options
    they come from; the DataLoader's ``num_workers``, ``batch_size`` and ``drop_last`` are the
    loader's that batches the stream).

    Fields:
        seed (int | None): order seed (None: ``constants.SEED_WHEN_NONE``).
        num_workers (int): DataLoader workers per rank (0: in the training process; at most
            ``constants.MAX_NUM_WORKERS``).
        episode_pool_size (int | None): per-worker pool size (None: 32 per rank split over the
            workers used; with ``partitions``: per partition, default
            ``constants.DEFAULT_PARTITION_POOL_SIZE``).
        sampling_strategy (str): ``remaining``, ``round_robin`` or ``sequential``.
        byte_budget (int | None): per-rank budget of synthesized bytes (None: unbounded; a stream's
            is ``StreamOptions.byte_budget``, ``byte_budget_gb`` converted once).
        video_decoder_cache_size (int | None): per-rank open-decoder cap.
        repeat (bool): endless stream.
        batch_size (int): the DataLoader's batch size (>= 1).
        drop_last (bool): the DataLoader drops each worker's short last batch.
        equalize (str): ``none`` or ``drop`` (finite epochs).
        partitions (int | None): canonical partitions (None: episodes sharded by the topology).
        rank, world_size (int | None): None: discovered (``torch.distributed``, RANK/WORLD_SIZE, 0/1);
            a planner's settings have them resolved (they are its topology: rank, world size,
            workers, batch size, ``drop_last``, ``repeat``, ``equalize``).

    Raises:
        StreamingConfigError (a ValueError): a field breaks its option's rule (named, with the
            value and the rule); ValueError: ``byte_budget`` < 1 byte.
    """

    seed: int | None = constants.DEFAULT_SEED
    num_workers: int = 0
    episode_pool_size: int | None = None
    sampling_strategy: str = constants.DEFAULT_SAMPLING_STRATEGY
    byte_budget: int | None = None
    video_decoder_cache_size: int | None = None
    repeat: bool = False
    batch_size: int = 1
    drop_last: bool = False
    equalize: str = "none"
    partitions: int | None = None
    rank: int | None = None
    world_size: int | None = None

    def __post_init__(self) -> None:
        for name in _OPTION_FIELDS:
            check_option(name, getattr(self, name), required=name in _REQUIRED)
        if self.byte_budget is not None and not self.byte_budget >= 1:
            raise ValueError(f"byte_budget must be >= 1 byte or None, got {self.byte_budget}")

    @property
    def num_shards(self) -> int:
        """Logical workers per rank: ``max(1, num_workers)`` (0 and 1 are one stream)."""
        return max(1, int(self.num_workers))


#: the fields that are options (checked by their rules); the planner needs these ones set
_OPTION_FIELDS = tuple(f.name for f in fields(PlanSettings) if f.name in StreamOptions.__dataclass_fields__)
_REQUIRED = frozenset({"num_workers", "batch_size"})
