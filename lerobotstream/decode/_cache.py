"""A bounded, per-process LRU of open episode decoders, closed on eviction."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Callable, Hashable


class DecoderCache:
    """LRU of open decoders keyed by e.g. ``(episode_index, camera)``.

    At most ``capacity`` decoders stay open; the least recently used is closed (``.close()``) on
    eviction. The cache is stamped with the PID that filled it: in a forked child the inherited
    entries are dropped without being used or closed (their native state belongs to the parent).

    Args:
        capacity: maximum open decoders (>= 1).
    """

    def __init__(self, capacity: int) -> None:
        if int(capacity) < 1:
            raise ValueError(f"DecoderCache capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._items: OrderedDict[Hashable, object] = OrderedDict()
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.opened = 0
        self.evicted = 0

    def _check_pid(self) -> None:
        pid = os.getpid()
        if pid != self._pid:  # forked: forget the parent's decoders, never touch them
            self._items = OrderedDict()
            self._lock = threading.Lock()
            self._pid = pid

    def get(self, key: Hashable):
        """The open decoder for ``key`` (marked most recently used), or None."""
        self._check_pid()
        with self._lock:
            dec = self._items.get(key)
            if dec is not None:
                self._items.move_to_end(key)
            return dec

    def get_or_open(self, key: Hashable, factory: Callable[[], object]):
        """The decoder for ``key``, opening it with ``factory()`` (outside the lock) if absent."""
        dec = self.get(key)
        if dec is not None:
            return dec
        new = factory()
        with self._lock:
            dec = self._items.get(key)
            if dec is not None:  # opened concurrently: keep the first
                self._items.move_to_end(key)
                _close(new)
                return dec
            self._items[key] = new
            self.opened += 1
            victims = []
            while len(self._items) > self.capacity:
                victims.append(self._items.popitem(last=False)[1])
                self.evicted += 1
        for v in victims:
            _close(v)
        return new

    def pop(self, key: Hashable) -> None:
        """Close and forget ``key``'s decoder (e.g. when its episode bytes are evicted)."""
        self._check_pid()
        with self._lock:
            dec = self._items.pop(key, None)
        if dec is not None:
            _close(dec)

    def clear(self) -> None:
        """Close every decoder."""
        self._check_pid()
        with self._lock:
            items = list(self._items.values())
            self._items.clear()
        for d in items:
            _close(d)

    def __len__(self) -> int:
        self._check_pid()
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        self._check_pid()
        return key in self._items


def _close(dec: object) -> None:
    close = getattr(dec, "close", None)
    if close is not None:
        close()
