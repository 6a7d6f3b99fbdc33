"""Start-up steps that say what they do when they take a while: :func:`announce_if_slow` logs a
step (the metadata listing, the wait for the first batch over a slow store) once it has run for
:data:`~lerobotstream.constants.SLOW_START_S` seconds, and how long it took when it ends; a fast
step says nothing."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from lerobotstream import constants


@contextmanager
def announce_if_slow(logger: logging.Logger, what: str, after_s: float | None = None) -> Iterator[None]:
    """Log ``"<what>..."`` at INFO if the block still runs after ``after_s`` seconds (default
    :data:`~lerobotstream.constants.SLOW_START_S`), then ``"<what>: done in N s"`` when it ends."""
    after_s = constants.SLOW_START_S if after_s is None else after_s
    t0 = time.perf_counter()
    said = threading.Event()

    def say() -> None:
        said.set()
        logger.info("%s... (%.0f s so far)", what, time.perf_counter() - t0)

    timer = threading.Timer(after_s, say)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if said.is_set():
            logger.info("%s: done in %.1f s", what, time.perf_counter() - t0)
