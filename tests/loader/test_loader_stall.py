"""StreamLoader's ``timeout`` (torch DataLoader's convention, issue 35): a worker (processes mode)
or shard (threads mode) that delivers no batch within it raises ``LoaderWorkerError`` naming it,
its PID and how long it stalled; without a timeout a stall is named in one warning. Nothing here
depends on timing: the stall is made by SIGSTOP or by a read that waits for an event the test
holds, and the timeout and warning threshold are tiny; ``StallWatch`` itself runs on a fake clock."""

from __future__ import annotations

import logging
import os
import signal
import threading

import pytest

from lerobotstream import StreamLoader
from lerobotstream.errors import LoaderWorkerError, StreamingConfigError
from lerobotstream.loader._threads import StallWatch
from tests._streams import BATCH as B
from tests._streams import SMALL_DATASET, small_stream

TINY = 0.2  # seconds: the stall is certain, so any timeout is reached
FRAMES = sum(SMALL_DATASET["episode_lengths"])


@pytest.fixture(scope="module")
def root(small_dataset):
    return small_dataset


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_stall_watch_warns_once_then_raises_past_the_timeout(caplog):
    clock = _Clock()
    watch = StallWatch(timeout=30.0, warn_after_s=10.0, clock=clock)
    assert watch.remaining() is None and watch.check() is None  # no wait
    watch.begin("worker 1", 1, 4321)
    assert watch.remaining() == 10.0
    clock.t += 9.0
    with caplog.at_level(logging.WARNING, logger="lerobotstream.loader"):
        assert watch.check() is None and not caplog.records
        clock.t += 1.0
        assert watch.check() is None and watch.remaining() == 20.0  # warned: the timeout is next
        clock.t += 5.0
        assert watch.check() is None
    assert [r.getMessage() for r in caplog.records] == [
        "StreamLoader worker 1 (pid 4321) has delivered no batch for 10.0 s (no timeout: still waiting; "
        "StreamLoader(timeout=...) or --dataset.streaming_loader_timeout_s makes this an error)"
    ]
    watch.end()
    watch.begin("worker 1", 1, 4321)  # the same worker stalls again: no second warning
    clock.t += 30.0
    err = watch.check()
    assert isinstance(err, LoaderWorkerError) and isinstance(err, RuntimeError) and watch.expired is err
    assert "StreamLoader worker 1 (pid 4321) delivered no batch for 30.0 s (timeout=30 s)" in str(err)
    assert (err.worker, err.pid, err.stalled_s) == (1, 4321, 30.0) and len(caplog.records) == 1


def test_without_a_timeout_nothing_is_due_once_warned():
    clock = _Clock()
    watch = StallWatch(timeout=0, warn_after_s=60.0, clock=clock)
    watch.begin("shard 0 of 2 (threads mode)", 0, 1)
    clock.t += 61.0
    assert watch.check() is None and watch.remaining() is None  # waits on, without a bound to check


def test_timeout_rule_and_default_come_from_the_option(root):
    ds = small_stream(root, 0, loader_timeout_s=7.5)
    assert StreamLoader(ds, B).timeout == 7.5 and StreamLoader(ds, B, timeout=0).timeout == 0.0
    assert StreamLoader(small_stream(root, 0), B).timeout == 0.0  # the option's default: no timeout
    with pytest.raises(StreamingConfigError, match=r"timeout must be a number >= 0"):
        StreamLoader(ds, B, timeout=-1)
    with pytest.raises(StreamingConfigError, match="loader_timeout_s must be a number >= 0"):
        small_stream(root, 0, loader_timeout_s=float("nan"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_stopped_worker_past_the_timeout_is_named(root):
    loader = StreamLoader(
        small_stream(root, 1, repeat=True),
        B,
        num_workers=1,
        mode="processes",
        multiprocessing_context="fork",
        timeout=TINY,
    )
    it = iter(loader)
    pid = loader.worker_pids[0]
    os.kill(pid, signal.SIGSTOP)  # it cannot deliver anything from now on
    with pytest.raises(LoaderWorkerError, match=rf"StreamLoader worker 0 \(pid {pid}\) delivered no batch for") as err:
        for _ in range(1000):  # (a batch sent before the stop is taken first)
            next(it)
    e = err.value
    assert (e.worker, e.pid) == (0, pid) and e.stalled_s >= TINY and f"(timeout={TINY:g} s)" in str(e)
    del it
    assert not _alive(pid)  # the stalled worker was killed (and reaped), not waited for


def _blocked_reads(ds, release: threading.Event) -> None:
    """Every payload read of ``ds`` (the MP4 spans) waits for ``release`` (60 s at most)."""
    source = ds.reader_config().payload_source
    read = source.read

    def blocked(*args, **kwargs):
        release.wait(60)
        return read(*args, **kwargs)

    source.read = blocked


def test_a_stalled_shard_past_the_timeout_is_named_in_threads_mode(root):
    ds = small_stream(root, 1)
    release = threading.Event()
    _blocked_reads(ds, release)
    loader = StreamLoader(ds, B, num_workers=1, mode="threads", timeout=TINY)
    try:
        with pytest.raises(
            LoaderWorkerError,
            match=rf"StreamLoader shard 0 of 1 \(threads mode\) \(pid {os.getpid()}\) "
            r"delivered no batch for",
        ) as err:
            next(iter(loader))
    finally:
        release.set()
    assert err.value.worker == 0 and err.value.stalled_s >= TINY


class _OnWarning(logging.Handler):
    """Runs ``action`` at each stall warning of the loader's logger."""

    def __init__(self, action) -> None:
        super().__init__(logging.WARNING)
        self.action = action
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "has delivered no batch" in record.getMessage():
            self.messages.append(record.getMessage())
            self.action()


def _listening(handler: logging.Handler):
    logger = logging.getLogger("lerobotstream.loader")
    logger.addHandler(handler)
    return logger


@pytest.mark.parametrize("mode", ["processes", "threads"])
def test_without_a_timeout_a_stall_is_named_once_and_the_epoch_continues(root, mode):
    ds = small_stream(root, 1)
    loader = StreamLoader(ds, B, num_workers=1, mode=mode, multiprocessing_context="fork")
    loader.stall_warning_s = 0.0  # (injected: a minute in real use)
    if mode == "processes":
        stopped = threading.Event()

        def resume():  # (the copy-out thread may warn before the test has stopped the worker)
            stopped.wait(60)
            os.kill(loader.worker_pids[0], signal.SIGCONT)

        handler = _OnWarning(resume)
    else:
        release = threading.Event()
        _blocked_reads(ds, release)
        handler = _OnWarning(release.set)
    logger = _listening(handler)
    try:
        it = iter(loader)
        if mode == "processes":
            os.kill(loader.worker_pids[0], signal.SIGSTOP)
            stopped.set()
        samples = sum(len(b["index"]) for b in it)
    finally:
        logger.removeHandler(handler)
        if mode == "threads":
            release.set()
    assert samples == FRAMES  # no error: the whole epoch
    what = "worker 0" if mode == "processes" else "shard 0 of 1 (threads mode)"
    pid = loader.worker_pids[0] if mode == "processes" else os.getpid()
    assert len(handler.messages) == 1 and handler.messages[0].startswith(
        f"StreamLoader {what} (pid {pid}) has delivered no batch for"
    )
