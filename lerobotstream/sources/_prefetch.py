"""``PrefetchedReads``: a source's reads started ahead on a small thread pool, taken later in any order."""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from lerobotstream.sources._base import ByteSource

#: concurrent requests of one :class:`PrefetchedReads`
PREFETCH_THREADS = 8


class PrefetchedReads:
    """Reads of one ``source`` started ahead, so that independent requests share their round trips.

    On a remote source (``source.local_path(probe)`` is None), :meth:`prefetch` starts calls on
    :data:`PREFETCH_THREADS` threads; ``read_file``, ``list``, ``exists`` and ``size`` here then
    return (or raise) as a direct call would; a call never prefetched runs inline. A ``read_file``
    of a path in ``speculative`` (a guess) that found nothing is read again inline when asked for.
    """

    def __init__(self, source: ByteSource, *, speculative: Iterable[str] = (), probe: str = "") -> None:
        self.source = source
        self.root_display = source.root_display
        self._speculative = frozenset(speculative)
        remote = source.local_path(probe) is None
        self._pool = (
            ThreadPoolExecutor(PREFETCH_THREADS, thread_name_prefix="lerobotstream-prefetch") if remote else None
        )
        self._started: dict[tuple[str, str], Future] = {}

    def prefetch(self, *calls: tuple[str, str]) -> None:
        """Start ``(method, path)`` calls (``read_file``, ``list``, ``exists``) not started yet."""
        if self._pool is None:
            return
        for call in calls:
            if call not in self._started:
                self._started[call] = self._pool.submit(getattr(self.source, call[0]), call[1])

    def _take(self, method: str, path: str) -> Any:
        fut = self._started.pop((method, path), None)
        if fut is not None:
            try:
                return fut.result()  # its exception is the one a direct call would raise
            except FileNotFoundError:
                if method != "read_file" or path not in self._speculative:
                    raise
        return getattr(self.source, method)(path)

    def __getattr__(self, method: str) -> Any:
        if method not in ("read_file", "list", "exists", "size"):
            raise AttributeError(method)
        return lambda path: self._take(method, path)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._started.clear()

    def __enter__(self) -> PrefetchedReads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
