"""``PrefetchedReads``: a source's reads started ahead on a small thread pool, taken later in any order."""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from lerobotstream.sources._base import ByteSource

#: concurrent requests of one :class:`PrefetchedReads`
PREFETCH_THREADS = 8


class PrefetchedReads:
    """Reads of one source started ahead, so that independent requests share their round trips.

    On a remote source (no :meth:`~ByteSource.local_path`), :meth:`prefetch` starts
    ``read_file`` / ``list`` / ``exists`` calls on up to :data:`PREFETCH_THREADS` threads; the
    same-named methods here then return their results, or raise their exceptions unchanged, as a
    direct call would. A call never prefetched runs inline, and on a local source everything
    does. A ``read_file`` of a path in ``speculative`` that found nothing (``FileNotFoundError``)
    is read again inline when it is asked for (the guess was early, or wrong). :meth:`close` waits
    for the reads still running, so no thread touches the source afterwards; also a context manager.

    Args:
        source: the source read.
        speculative: paths prefetched on a guess.
        probe: a path whose :meth:`~ByteSource.local_path` tells local from remote.
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

    def read_file(self, path: str) -> bytes:
        return self._take("read_file", path)

    def list(self, prefix: str) -> list[str]:
        return self._take("list", prefix)

    def exists(self, path: str) -> bool:
        return self._take("exists", path)

    def size(self, path: str) -> int:
        return self._take("size", path)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._started.clear()

    def __enter__(self) -> PrefetchedReads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
