"""``PlanSettings``: the plain, typed settings a rank's planner is built from (what the stream's
options say about ownership, order, batches and resources)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lerobotstream import constants

__all__ = ["PlanSettings"]


@dataclass(frozen=True)
class PlanSettings:
    """What a rank's planner needs of the stream's options (plain values; the planner checks them).

    Fields:
        seed (int | None): order seed (None: ``constants.SEED_WHEN_NONE``).
        num_workers (int): DataLoader workers per rank (0: in the training process).
        pool_size (int | None): per-worker pool size (None: 32 per rank split over the workers used;
            with ``partitions``: per partition, default ``constants.DEFAULT_PARTITION_POOL_SIZE``).
        strategy (str): ``remaining``, ``round_robin`` or ``sequential``.
        byte_budget (int | None): per-rank budget of synthesized bytes (None: unbounded).
        decoder_cache_size (int | None): per-rank open-decoder cap.
        repeat (bool): endless stream.
        batch_size (int): the DataLoader's batch size (>= 1).
        drop_last (bool): the DataLoader drops each worker's short last batch.
        equalize (str): ``none`` or ``drop`` (finite epochs).
        partitions (int | None): canonical partitions (None: episodes sharded by the topology).
        rank, world_size (int | None): None: discovered (``torch.distributed``, RANK/WORLD_SIZE, 0/1).
        byte_budget_gb (float | None): the budget as the option gave it (GiB): a mixture splits
            this exact value into its datasets' shares (None: ``byte_budget`` / GiB).
    """

    seed: int | None = constants.DEFAULT_SEED
    num_workers: int = 0
    pool_size: int | None = None
    strategy: str = constants.DEFAULT_SAMPLING_STRATEGY
    byte_budget: int | None = None
    decoder_cache_size: int | None = None
    repeat: bool = False
    batch_size: int = 1
    drop_last: bool = False
    equalize: str = "none"
    partitions: int | None = None
    rank: int | None = None
    world_size: int | None = None
    byte_budget_gb: float | None = None

    def but(self, **changes: Any) -> PlanSettings:
        """These settings with ``changes``."""
        return replace(self, **changes)

