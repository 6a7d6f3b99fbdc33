"""A bounded, per-process LRU of open episode decoders, closed on eviction; in-use decoders are pinned."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager


class OpenDecoderLRU:
    """LRU of open decoders keyed by e.g. ``(episode_index, camera)``, safe across decode threads.

    At most ``capacity`` *unpinned* decoders stay open; the least recently used unpinned one is
    closed (``.close()``) on eviction. A decoder obtained with :meth:`acquire` (or the
    :meth:`pinned` context manager) is pinned until :meth:`release`: it is never evicted or closed
    while pinned. When every open decoder is pinned the cache **temporarily exceeds** ``capacity``
    (it never waits, so decode threads cannot deadlock on each other); the excess is closed as soon
    as the pins are released. :meth:`pop` / :meth:`clear` of a pinned decoder forget it at once and
    close it on its last release.

    The cache is stamped with the PID that filled it: in a forked child the inherited entries are
    dropped without being used or closed (their native state belongs to the parent).

    Args:
        capacity: maximum open unpinned decoders (int >= 1).

    Raises:
        ValueError: ``capacity < 1``.
    """

    def __init__(self, capacity: int) -> None:
        if int(capacity) < 1:
            raise ValueError(f"OpenDecoderLRU capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._items: OrderedDict[Hashable, object] = OrderedDict()
        self._pins: dict[int, list] = {}  # id(decoder) -> [decoder, pin count]
        self._doomed: dict[int, object] = {}  # forgotten while pinned: closed on the last release
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.opened = 0
        self.evicted = 0
        self.peak_open = 0

    def _check_pid(self) -> None:
        pid = os.getpid()
        if pid != self._pid:  # forked: forget the parent's decoders, never touch them
            self._items = OrderedDict()
            self._pins = {}
            self._doomed = {}
            self._lock = threading.Lock()
            self._pid = pid

    def get(self, key: Hashable):
        """The open decoder for ``key`` (marked most recently used), or None (not pinned)."""
        self._check_pid()
        with self._lock:
            dec = self._items.get(key)
            if dec is not None:
                self._items.move_to_end(key)
            return dec

    def get_or_open(self, key: Hashable, factory: Callable[[], object]):
        """The decoder for ``key``, opening it with ``factory()`` (outside the lock) if absent.

        Not pinned: another thread may evict and close it. Code that decodes with it while other
        threads use the cache must use :meth:`acquire`/:meth:`release` or :meth:`pinned`.
        """
        return self._get_or_open(key, factory, pin=False)

    def acquire(self, key: Hashable, factory: Callable[[], object]):
        """Like :meth:`get_or_open`, and pin the decoder until :meth:`release` (one release per acquire)."""
        return self._get_or_open(key, factory, pin=True)

    def release(self, dec: object) -> None:
        """Unpin a decoder from :meth:`acquire`; closes it if it was forgotten, trims the excess."""
        self._check_pid()
        victims = []
        with self._lock:
            entry = self._pins.get(id(dec))
            if entry is None or entry[0] is not dec:
                return  # acquired before a fork, or already released
            entry[1] -= 1
            if entry[1] <= 0:
                del self._pins[id(dec)]
                doomed = self._doomed.pop(id(dec), None)
                if doomed is not None:
                    victims.append(doomed)
            victims += self._trim_locked()
        for v in victims:
            _close(v)

    @contextmanager
    def pinned(self, key: Hashable, factory: Callable[[], object]) -> Iterator[object]:
        """``with cache.pinned(key, factory) as dec:`` — the decoder, pinned inside the block."""
        dec = self.acquire(key, factory)
        try:
            yield dec
        finally:
            self.release(dec)

    def _pin_locked(self, dec: object) -> None:
        entry = self._pins.get(id(dec))
        if entry is None:
            self._pins[id(dec)] = [dec, 1]
        else:
            entry[1] += 1

    def _trim_locked(self) -> list:
        """Pop least recently used unpinned decoders while over capacity (caller closes them)."""
        victims = []
        if len(self._items) <= self.capacity:
            return victims
        for k in list(self._items.keys()):
            if len(self._items) <= self.capacity:
                break
            if id(self._items[k]) in self._pins:
                continue
            victims.append(self._items.pop(k))
            self.evicted += 1
        return victims

    def _get_or_open(self, key: Hashable, factory: Callable[[], object], *, pin: bool):
        self._check_pid()
        with self._lock:
            dec = self._items.get(key)
            if dec is not None:
                self._items.move_to_end(key)
                if pin:
                    self._pin_locked(dec)
                return dec
        new = factory()
        victims = []
        with self._lock:
            dec = self._items.get(key)
            if dec is not None:  # opened concurrently: keep the first
                self._items.move_to_end(key)
                if pin:
                    self._pin_locked(dec)
                victims.append(new)
            else:
                dec = new
                self._items[key] = new
                self.opened += 1
                if pin:
                    self._pin_locked(new)
                victims += self._trim_locked()
                self.peak_open = max(self.peak_open, len(self._items))
        for v in victims:
            _close(v)
        return dec

    def _forget_locked(self, dec: object) -> bool:
        """True when ``dec`` can be closed now; else it is closed on its last release."""
        if id(dec) in self._pins:
            self._doomed[id(dec)] = dec
            return False
        return True

    def pop(self, key: Hashable) -> None:
        """Forget ``key``'s decoder and close it (at once, or on its last release when pinned)."""
        self._check_pid()
        with self._lock:
            dec = self._items.pop(key, None)
            close_now = dec is not None and self._forget_locked(dec)
        if close_now:
            _close(dec)

    def clear(self) -> None:
        """Forget every decoder; unpinned ones are closed now, pinned ones on their last release."""
        self._check_pid()
        with self._lock:
            items = [d for d in self._items.values() if self._forget_locked(d)]
            self._items.clear()
        for d in items:
            _close(d)

    @property
    def pinned_count(self) -> int:
        """Decoders currently pinned (in use by a decode call)."""
        self._check_pid()
        return len(self._pins)

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
