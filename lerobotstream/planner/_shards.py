"""Frame-balanced shards of whole episodes (ranks, then DataLoader workers inside a rank).

Algorithm: greedy LPT (longest processing time first). Episodes are sorted by decreasing length,
ties broken by a seeded permutation, and each goes to the shard with the fewest frames so far
(ties: lowest shard id).

Guarantee (tested): ``max(shard frames) - min(shard frames) <= max(episode length)``, hence
``max(shard frames) <= mean + max(episode length)``. Proof sketch: an episode is only ever added
to a currently least-loaded shard, so after adding it that shard exceeds the minimum by at most
the episode's length; every other gap only shrinks. When there are at least as many episodes as
shards, every shard receives at least one episode (empty shards are least loaded first).
"""

from __future__ import annotations

import numpy as np

from lerobotstream.planner._lpt import lpt_owner
from lerobotstream.planner._poolcore import shuffled_order
from lerobotstream.planner._seeds import seed_words

__all__ = ["lpt_shards", "LPT_BOUND_DOC"]

LPT_BOUND_DOC = "max(shard frames) - min(shard frames) <= max(episode length)"


def lpt_shards(lengths: np.ndarray, num_shards: int, tie_seed: tuple[int, ...]) -> list[np.ndarray]:
    """Split items (episodes) into ``num_shards`` frame-balanced groups.

    Args:
        lengths (np.ndarray): int64 (E,) frames per item, all >= 1.
        num_shards (int): number of groups (>= 1).
        tie_seed (tuple[int, ...]): entropy for the tie-breaking permutation among equal lengths.

    Returns:
        list[np.ndarray]: ``num_shards`` int64 arrays of *positions* into ``lengths``, each sorted
        ascending. Pure function of (lengths, num_shards, tie_seed). O(E log E + E log N): the
        heap runs in C (``_lpt.lpt_owner``), the split is one stable argsort.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n = int(lengths.shape[0])
    tie = np.empty(n, dtype=np.int64)
    tie[shuffled_order(seed_words(*tie_seed), n)] = np.arange(n, dtype=np.int64)
    order = np.lexsort((tie, -lengths))  # primary: length descending; secondary: seeded tie rank
    owner = lpt_owner(np.ascontiguousarray(lengths), np.ascontiguousarray(order, dtype=np.int64), int(num_shards))
    # split by owner in O(E log E): a stable sort keeps each shard's positions ascending
    by_owner = np.argsort(owner, kind="stable")
    bounds = np.cumsum(np.bincount(owner, minlength=num_shards))[:-1]
    return [part.astype(np.int64, copy=False) for part in np.split(by_owner, bounds)]
