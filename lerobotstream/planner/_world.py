"""Rank, world size and DataLoader worker discovery without importing torch.

``torch`` is consulted only when the caller's process already imported it (``sys.modules``):
if torch is not imported, ``torch.distributed`` cannot be initialised and no DataLoader worker can
be running, so the planner stays torch-free and the CLI starts fast.
"""

from __future__ import annotations

import sys

from lerobotstream import constants
from lerobotstream.errors import ShardingError

__all__ = ["discover_world", "current_worker"]


def discover_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """(rank, world_size): explicit values, else ``torch.distributed`` when initialised, else the
    ``RANK``/``WORLD_SIZE`` environment variables, else (0, 1).

    Raises:
        ShardingError: invalid values (world size < 1, rank outside ``[0, world_size)``, not ints).
    """
    if rank is None or world_size is None:
        d_rank, d_world = None, None
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            d_rank, d_world = int(dist.get_rank()), int(dist.get_world_size())
        else:
            env_rank, env_world = constants.distributed_env()
            try:
                d_rank = int(env_rank) if env_rank not in (None, "") else 0
                d_world = int(env_world) if env_world not in (None, "") else 1
            except ValueError as e:
                raise ShardingError(f"RANK={env_rank!r} / WORLD_SIZE={env_world!r} are not integers") from e
        rank = d_rank if rank is None else rank
        world_size = d_world if world_size is None else world_size
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ShardingError(
            f"invalid rank {rank} for world size {world_size} (need 0 <= rank < world size)",
            rank=rank,
            world_size=world_size,
        )
    return rank, world_size


def current_worker() -> tuple[int | None, int]:
    """(DataLoader worker id, number of DataLoader workers), or (None, 0) in the main process."""
    data = sys.modules.get("torch.utils.data")
    if data is None:
        return None, 0
    info = data.get_worker_info()
    if info is None:
        return None, 0
    return int(info.id), int(info.num_workers)
