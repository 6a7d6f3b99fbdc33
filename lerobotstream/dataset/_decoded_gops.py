"""Bounded per-worker cache of decoded GOPs, so a GOP is decoded once per episode, not once per chunk.

Why: the planner draws a pool's anchors in random order, so a chunk of ``decode_lookahead`` anchors
touches many GOPs of an episode but only a few frames of each. Decoding a GOP's needed frames per
chunk re-decodes its head (keyframe → requested frame) every time another chunk touches it: with
a 30-frame H.264 GOP and several episodes in the pool that is many decoded frames per returned
frame. Here, the first touch of a GOP decodes the whole GOP run (keyframe → next keyframe, capped at
``max_run`` frames past the last needed frame) in the same batched decoder call as the chunk's other
GOPs; the frames stay cached until every use the episode will make of them was served
(``demand`` counts anchors × window frames), the episode is freed, or the byte bound evicts them
(least recently used first; an evicted GOP is simply decoded again when needed — never wrong, only
slower).

Memory bound (per worker process): cached GOP frames ≤ ``capacity_bytes`` (uint8 ``C×H×W`` bytes
per frame) — plus the frames the at most two in-flight chunks still reference (see
``dataset._pipeline``), which are released when those chunks' items are assembled.

Thread-safe (one lock); entries are keyed ``(episode, camera, payload serial, gop start)``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

import torch

__all__ = ["DecodedGopCache"]


class DecodedGopCache:
    """LRU of decoded GOP runs with remaining-demand release.

    Args:
        capacity_bytes: bound on cached frame bytes (>= 0; 0 disables caching).
    """

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = max(0, int(capacity_bytes))
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, tuple[int, torch.Tensor]] = OrderedDict()  # key -> (first frame, frames)
        self._demand: dict[Hashable, int] = {}
        self.nbytes = 0
        self.peak_nbytes = 0
        self.evictions = 0

    @staticmethod
    def _size(t: torch.Tensor) -> int:
        return int(t.numel()) * int(t.element_size())

    def get(self, key: Hashable, frame: int) -> torch.Tensor | None:
        """The cached frame ``frame`` (local index) of run ``key`` as a (C,H,W) view, or None."""
        with self._lock:
            ent = self._items.get(key)
            if ent is None or not ent[0] <= frame < ent[0] + ent[1].shape[0]:
                return None
            self._items.move_to_end(key)
            return ent[1][frame - ent[0]]

    def get_run(self, key: Hashable) -> tuple[int, torch.Tensor] | None:
        """The cached run ``key`` as ``(first local frame, (T,C,H,W) frames)``, or None (one lock
        for all of a GOP's frames; counts as a use for the LRU order)."""
        with self._lock:
            ent = self._items.get(key)
            if ent is not None:
                self._items.move_to_end(key)
            return ent

    def put(self, key: Hashable, first: int, frames: torch.Tensor, demand: int) -> None:
        """Cache ``frames`` (T,C,H,W) = local frames ``first .. first+T-1`` of run ``key`` with
        ``demand`` remaining uses (replaces an older entry of the key)."""
        if self.capacity_bytes <= 0 or demand <= 0:
            return
        size = self._size(frames)
        if size > self.capacity_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.nbytes -= self._size(old[1])
            self._items[key] = (int(first), frames)
            self._demand[key] = int(demand)
            self.nbytes += size
            while self.nbytes > self.capacity_bytes and self._items:
                k, (_, t) = self._items.popitem(last=False)
                self._demand.pop(k, None)
                self.nbytes -= self._size(t)
                self.evictions += 1
            self.peak_nbytes = max(self.peak_nbytes, self.nbytes)

    def use(self, key: Hashable, n: int) -> None:
        """``n`` uses of run ``key`` were served: drop the run when no use remains."""
        with self._lock:
            self._use_locked(key, n)

    def use_many(self, keys: list, counts: list) -> None:
        """:meth:`use` for each ``(key, n)`` pair, under one lock."""
        with self._lock:
            for key, n in zip(keys, counts):
                self._use_locked(key, n)

    def _use_locked(self, key: Hashable, n: int) -> None:
        left = self._demand.get(key)
        if left is None:
            return
        left -= int(n)
        if left > 0:
            self._demand[key] = left
            return
        self._demand.pop(key, None)
        ent = self._items.pop(key, None)
        if ent is not None:
            self.nbytes -= self._size(ent[1])

    def drop(self, prefix: tuple) -> None:
        """Forget every run whose key starts with ``prefix`` (e.g. ``(episode,)``)."""
        n = len(prefix)
        with self._lock:
            for k in [k for k in self._items if k[:n] == prefix]:
                self.nbytes -= self._size(self._items.pop(k)[1])
                self._demand.pop(k, None)
            for k in [k for k in self._demand if k[:n] == prefix]:
                self._demand.pop(k, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._demand.clear()
            self.nbytes = 0

    def __len__(self) -> int:
        return len(self._items)
