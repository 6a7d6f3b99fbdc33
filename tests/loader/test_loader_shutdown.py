"""StreamLoader shutdown: no leaked thread, child process, file descriptor or /dev/shm entry after
``break``, an exception, ``KeyboardInterrupt``, an iterator dropped half-way; a killed worker
raises LoaderWorkerError naming it (and leaves nothing behind either)."""

from __future__ import annotations

import gc
import os
import signal
import threading

import pytest

from lerobotstream import StreamLoader
from lerobotstream.errors import LoaderWorkerError
from tests._streams import BATCH as B
from tests._streams import small_stream


@pytest.fixture(scope="module")
def root(small_dataset):
    return small_dataset


def _loader(root, mode, nw=2):
    ds = small_stream(root, nw, repeat=True)
    return StreamLoader(
        ds, B, num_workers=nw, mode=mode, multiprocessing_context="fork" if mode == "processes" else None
    )


def _children() -> set[int]:
    out: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                out |= {int(x) for x in f.read().split()}
        except OSError:
            pass
    return out


def _snapshot() -> dict:
    gc.collect()
    return {
        "threads": {t.ident for t in threading.enumerate()},
        "children": _children(),
        "fds": set(os.listdir("/proc/self/fd")),
        "shm": set(os.listdir("/dev/shm")),
    }


def _ours(names: set[str], pids: list[int]) -> set[str]:
    """The /dev/shm entries this loader could have made: its ring slots are torch segments, named
    ``torch_<PID>_...`` after the process that made them (this process or one of the loader's
    workers). /dev/shm is shared by every process on the machine, so any other entry (another
    run's ``torch_`` segments, Python's ``psm_`` segments) is not this loader's and never counts."""
    mine = {str(p) for p in [os.getpid(), *pids]}
    return {n for n in names if n.startswith("torch_") and n.split("_")[1] in mine}


def _leaks(before: dict, pids: list[int] = ()) -> dict:
    after = _snapshot()
    out = {k: after[k] - before[k] for k in before if after[k] - before[k]}
    shm = _ours(out.pop("shm", set()), list(pids))
    return {**out, **({"shm": shm} if shm else {})}


def _break(loader):
    for j, _ in enumerate(loader):
        if j == 3:
            break


def _exception(loader):
    with pytest.raises(ValueError, match="in the step"):
        for j, _ in enumerate(loader):
            if j == 2:
                raise ValueError("in the step")


def _interrupt(loader):
    with pytest.raises(KeyboardInterrupt):
        for j, _ in enumerate(loader):
            if j == 2:
                raise KeyboardInterrupt


def _dropped(loader):
    it = iter(loader)
    next(it)
    next(it)
    del it


@pytest.mark.parametrize("mode", ["threads", "processes"])
@pytest.mark.parametrize("how", [_break, _exception, _interrupt, _dropped], ids=lambda f: f.__name__.strip("_"))
def test_no_leak(root, mode, how):
    _break(_loader(root, mode))  # warm-up: torch's thread pools, lazily opened files
    before = _snapshot()
    loader = _loader(root, mode)
    how(loader)
    pids = loader.worker_pids
    del loader  # (the loader holds the dataset, whose metadata files are open)
    assert _leaks(before, pids) == {}


def test_killed_worker_is_named(root):
    _break(_loader(root, "processes"))
    before = _snapshot()
    loader = _loader(root, "processes")
    it = iter(loader)
    next(it)
    victim = loader.worker_pids[1]
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(LoaderWorkerError, match=rf"worker 1 \(pid {victim}\) was killed by signal SIGKILL") as err:
        for _ in range(1000):  # endless stream: the error comes once the worker's sent batches are taken
            next(it)
    assert err.value.worker == 1 and err.value.pid == victim
    pids = loader.worker_pids
    del it, err, loader  # (the loader holds the dataset, whose metadata files are open)
    assert _leaks(before, pids) == {}
