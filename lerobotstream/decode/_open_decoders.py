"""A bounded, per-process LRU of open episode decoders, closed on eviction; in-use decoders are pinned."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager


class OpenDecoderLRU:
    """LRU of open decoders keyed by e.g. ``(episode_index, camera)``, safe across decode threads.

    At most ``capacity`` (>= 1, else ValueError) *unpinned* decoders stay open; the least recently
    used one is closed on eviction. A decoder from :meth:`acquire` (or :meth:`pinned`) is pinned
    until :meth:`release`: never evicted or closed meanwhile; when every open decoder is pinned
    the cache temporarily exceeds ``capacity`` rather than wait (no deadlock). :meth:`pop` /
    :meth:`clear` of a pinned decoder close it on its last release. A forked child drops the
    inherited entries, never using or closing them.
    """

    def __init__(self, capacity: int) -> None:
        if int(capacity) < 1:
            raise ValueError(f"OpenDecoderLRU capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._pid = None
        self._check_pid()
        self.opened = 0
        self.evicted = 0

    def _check_pid(self) -> None:
        if self._pid != os.getpid():  # new, or forked: forget the parent's decoders, never touch them
            self._items: OrderedDict[Hashable, object] = OrderedDict()
            self._pins: dict[int, list] = {}  # id(decoder) -> [decoder, pin count]
            self._doomed: dict[int, object] = {}  # forgotten while pinned: closed on the last release
            self._lock = threading.Lock()
            self._pid = os.getpid()

    def get_or_open(self, key: Hashable, factory: Callable[[], object]):
        """The decoder for ``key``, opened with ``factory()`` (outside the lock) if absent; not pinned."""
        return self._get_or_open(key, factory, pin=False)

    def acquire(self, key: Hashable, factory: Callable[[], object]):
        """:meth:`get_or_open`, the decoder pinned until :meth:`release` (one release per acquire)."""
        return self._get_or_open(key, factory, pin=True)

    def release(self, dec: object) -> None:
        """Unpin a decoder from :meth:`acquire`; closes it if it was forgotten, trims the excess."""
        self._check_pid()
        with self._lock:
            entry = self._pins.get(id(dec))
            if entry is None or entry[0] is not dec:
                return  # acquired before a fork, or already released
            entry[1] -= 1
            victims = []
            if entry[1] <= 0:
                del self._pins[id(dec)]
                if id(dec) in self._doomed:
                    victims.append(self._doomed.pop(id(dec)))
            victims += self._trim_locked()
        for v in victims:
            _close(v)

    @contextmanager
    def pinned(self, key: Hashable, factory: Callable[[], object]) -> Iterator[object]:
        """``with cache.pinned(key, factory) as dec:``: the decoder, pinned inside the block."""
        dec = self.acquire(key, factory)
        try:
            yield dec
        finally:
            self.release(dec)

    def _hit_locked(self, key: Hashable, pin: bool):
        """``key``'s decoder marked most recently used (and pinned with ``pin``), or None."""
        dec = self._items.get(key)
        if dec is not None:
            self._items.move_to_end(key)
            if pin:
                self._pins.setdefault(id(dec), [dec, 0])[1] += 1
        return dec

    def _trim_locked(self) -> list:
        """Pop least recently used unpinned decoders while over capacity (caller closes them)."""
        victims = []
        for k in list(self._items):
            if len(self._items) <= self.capacity:
                break
            if id(self._items[k]) not in self._pins:
                victims.append(self._items.pop(k))
                self.evicted += 1
        return victims

    def _get_or_open(self, key: Hashable, factory: Callable[[], object], *, pin: bool):
        self._check_pid()
        with self._lock:
            dec = self._hit_locked(key, pin)
        if dec is not None:
            return dec
        new = factory()
        with self._lock:
            if key in self._items:  # opened concurrently: keep the first
                victims = [new]
            else:
                self._items[key] = new
                self.opened += 1
                victims = []
            dec = self._hit_locked(key, pin)
            victims += self._trim_locked()
        for v in victims:
            _close(v)
        return dec

    def _forget(self, keys: Iterable[Hashable]) -> None:
        """Forget ``keys``' decoders: close them now, or on their last release when pinned."""
        self._check_pid()
        with self._lock:
            gone = [self._items.pop(k) for k in list(keys) if k in self._items]
            self._doomed.update((id(d), d) for d in gone if id(d) in self._pins)
            now = [d for d in gone if id(d) not in self._pins]
        for d in now:
            _close(d)

    def pop(self, key: Hashable) -> None:
        """Forget ``key``'s decoder and close it (at once, or on its last release when pinned)."""
        self._forget([key])

    def clear(self) -> None:
        """Forget every decoder; unpinned ones are closed now, pinned ones on their last release."""
        self._check_pid()
        self._forget(self._items)

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
