# cython: language_level=3
"""Greedy LPT assignment core (see ``_shards.lpt_shards``): a binary min-heap of (load, shard)
in C arrays, O(E log N), the same pops as ``heapq`` on ``(load, shard)`` tuples."""

from libc.stdint cimport int64_t

import numpy as np


cdef inline bint _less(const int64_t[::1] load, const int64_t[::1] sid, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return load[a] < load[b] or (load[a] == load[b] and sid[a] < sid[b])


def lpt_owner(const int64_t[::1] lengths, const int64_t[::1] order, Py_ssize_t num_shards):
    """Shard of each item: items in ``order`` each go to the least-loaded shard (ties: lowest id).

    Args:
        lengths: (E,) int64 item weights (frames).
        order: (E,) int64 positions into ``lengths``, the assignment order.
        num_shards: number of shards (>= 1).

    Returns:
        (E,) int64 shard id per position.
    """
    cdef Py_ssize_t n = order.shape[0], i, j, c, pos
    cdef int64_t tl, ts
    owner_np = np.empty(lengths.shape[0], dtype=np.int64)
    load_np = np.zeros(num_shards, dtype=np.int64)
    sid_np = np.arange(num_shards, dtype=np.int64)
    cdef int64_t[::1] owner = owner_np, load = load_np, sid = sid_np
    with nogil:
        # heap[0] is the least (load, shard); the initial all-zero array ordered by id is a heap
        for i in range(n):
            pos = order[i]
            owner[pos] = sid[0]
            load[0] += lengths[pos]
            # sift the root down
            j = 0
            while True:
                c = 2 * j + 1
                if c >= num_shards:
                    break
                if c + 1 < num_shards and _less(load, sid, c + 1, c):
                    c += 1
                if _less(load, sid, c, j):
                    tl = load[j]; load[j] = load[c]; load[c] = tl
                    ts = sid[j]; sid[j] = sid[c]; sid[c] = ts
                    j = c
                else:
                    break
    return owner_np
