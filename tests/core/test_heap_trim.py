"""Decoded-frame memory goes back to the OS: ``lerobotstream._heap`` trims the heap when it keeps
more free memory resident than its slack, checked when an episode is freed and when an iterator
ends; threads, open decoders and checks stay bounded across epochs (counts, not timings; the RSS
soak is ``tools/rss_epochs.py``)."""

from __future__ import annotations

import sys
import threading

import pytest

from lerobotstream import _heap, constants

CAM = (("observation.images.front", 64, 48),)
LENGTHS = (6, 5, 7, 4)


def kept_free_bytes() -> int | None:
    """Free heap memory kept resident since the last trim, bytes (None before it, or unavailable)."""
    if not _heap.available() or _heap._not_heap is None:
        return None
    return _heap._rss_bytes() - _heap._in_use_bytes() - _heap._not_heap


class _FakeHeap:
    """Stands in for glibc: RSS and in-use bytes set by the test; ``malloc_trim`` drops RSS to
    ``in_use + not_heap`` and is recorded."""

    def __init__(self) -> None:
        self.rss, self.in_use, self.not_heap, self.calls = 100 << 20, 50 << 20, 50 << 20, []

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(pad)
        self.rss = self.in_use + self.not_heap
        return 1

    def mallinfo2(self):
        return _heap._MallInfo2(uordblks=self.in_use, hblkhd=0)


@pytest.fixture
def fake_heap(monkeypatch):
    h = _FakeHeap()
    monkeypatch.setattr(_heap, "_malloc_trim", h.malloc_trim)
    monkeypatch.setattr(_heap, "_mallinfo2", h.mallinfo2)
    monkeypatch.setattr(_heap, "_rss_bytes", lambda: h.rss)
    monkeypatch.setattr(_heap, "_not_heap", None)
    monkeypatch.setattr(_heap, "TRIM_SLACK_BYTES", 256 << 20)
    return h


def test_trims_only_when_much_free_memory_is_kept(fake_heap):
    h = fake_heap
    assert _heap.trim() is True and len(h.calls) == 1  # the first call measures the non-heap part
    assert kept_free_bytes() == 0
    h.in_use += 300 << 20  # frames decoded: in use, not kept free
    h.rss += 300 << 20
    assert _heap.trim() is False and len(h.calls) == 1
    h.in_use -= 300 << 20  # freed, pages still resident: 300 MiB kept free > 256 MiB slack
    assert kept_free_bytes() == 300 << 20
    assert _heap.trim() is True and len(h.calls) == 2 and h.calls[-1] == 0
    assert kept_free_bytes() == 0 and h.rss == 100 << 20
    h.rss += 200 << 20  # below the slack: kept
    assert _heap.trim() is False and len(h.calls) == 2
    assert _heap.trim(force=True) is True and len(h.calls) == 3


def test_one_thread_trims_at_a_time(fake_heap):
    with _heap._lock:  # another thread is trimming: a second call does not wait
        assert _heap.trim(force=True) is False
    assert fake_heap.calls == []


def test_trim_is_a_no_op_without_glibc(monkeypatch):
    monkeypatch.setattr(_heap, "_malloc_trim", None)
    assert _heap.trim(force=True) is False and not _heap.available() and kept_free_bytes() is None


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, 256 << 20),
        ({"LEROBOTSTREAM_MALLOC_TRIM": "0"}, 0),
        ({"LEROBOTSTREAM_MALLOC_TRIM": "off"}, 0),
        ({"LEROBOTSTREAM_MALLOC_TRIM_MIB": "64"}, 64 << 20),
        ({"LEROBOTSTREAM_MALLOC_TRIM_MIB": "junk"}, 256 << 20),
    ],
)
def test_environment_knobs(monkeypatch, env, expected):
    monkeypatch.delenv("LEROBOTSTREAM_MALLOC_TRIM", raising=False)
    monkeypatch.delenv("LEROBOTSTREAM_MALLOC_TRIM_MIB", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert constants.malloc_trim_slack_bytes() == expected


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim")
def test_real_malloc_trim_gives_freed_buffers_back():
    if not _heap.available():
        pytest.skip("malloc_trim/mallinfo2 not available (not glibc >= 2.33, or disabled by the environment)")
    import torch

    _heap.trim(force=True)
    keep = []

    def churn():  # 64 frame-sized buffers on a short-lived thread (its own arena), all but one freed
        bufs = [torch.ones(3 * 480 * 640, dtype=torch.uint8) for _ in range(64)]
        keep.append(bufs[-1])
        del bufs

    t = threading.Thread(target=churn)
    t.start()
    t.join()
    keep.clear()
    assert kept_free_bytes() is not None
    assert _heap.trim(force=True) is True
    after = kept_free_bytes()
    assert after is not None and abs(after) < 8 << 20  # just trimmed: nothing counted as kept free


def _pipeline_threads() -> list[str]:
    """Live fetch, decode and assembly threads of the library (named ``lrs-...``)."""
    return [t.name for t in threading.enumerate() if t.name.startswith("lrs-")]


def _count_checks(monkeypatch):
    """Record each call of ``_heap.trim`` made by the library (their number; nothing trimmed)."""
    calls: list[bool] = []
    monkeypatch.setattr(_heap, "trim", lambda force=False: calls.append(force) or False)
    return calls


def test_single_dataset_checks_at_freed_episodes_and_iterator_end(make_generated_dataset, monkeypatch):
    from lerobotstream.dataset._dataset import StreamingLeRobotDataset

    calls = _count_checks(monkeypatch)
    root = make_generated_dataset(episode_lengths=LENGTHS, codec="av1", cameras=CAM)
    ds = StreamingLeRobotDataset(root=root, episode_pool_size=1, prefetch_episodes=1, decode_threads=2)
    threads, n = [], []
    for _ in range(4):
        before = len(calls)
        assert sum(1 for _ in ds) == sum(LENGTHS)
        n.append(len(calls) - before)
        st = ds.stats()
        assert st["open_decoders"] == 0 and ds._readers.cache is not None
        threads.append(_pipeline_threads())
    # a check when episodes are freed and one when the iterator ended: bounded by the episodes, not
    # by the frames (at most one per decode that released the episode's last lease)
    assert all(2 <= k <= 2 * len(LENGTHS) + 1 for k in n), n
    assert not any(calls), "the library never forces a trim"
    assert threads == [[]] * 4, f"pipeline threads alive after each epoch: {threads}"  # all joined, none kept


def test_mixture_checks_at_iterator_end(make_generated_dataset, monkeypatch):
    from lerobotstream.dataset._multi import StreamingMultiLeRobotDataset

    calls = _count_checks(monkeypatch)
    a = make_generated_dataset(repo_id="heap/a", episode_lengths=(5, 4), codec="av1", cameras=CAM)
    b = make_generated_dataset(repo_id="heap/b", episode_lengths=(3, 6), codec="av1", cameras=CAM)
    ds = StreamingMultiLeRobotDataset(["heap/a", "heap/b"], roots=[a, b])
    it = iter(ds)
    got = sum(1 for _ in it)
    n_end = len(calls)
    assert got > 0 and n_end >= 1
    it.close()
    ds2 = iter(ds)
    next(ds2)
    before = len(calls)
    ds2.close()  # an iterator closed early checks too
    assert len(calls) == before + 1
    assert all(len(w.decoders) == 0 for w in ds._readers.readers)


def test_trim_is_quiet_while_the_interpreter_exits(monkeypatch):
    """A stream's iterator closed by the last garbage collection at exit trimmed after builtins were
    torn down (``NameError: open`` in the output): at exit trim does nothing, and reading RSS needs
    no builtin looked up at call time."""
    import builtins

    monkeypatch.setattr(_heap.sys, "is_finalizing", lambda: True)
    monkeypatch.setattr(_heap, "_malloc_trim", lambda pad: pytest.fail("trimmed while exiting"))
    assert _heap.trim(force=True) is False
    monkeypatch.delattr(builtins, "open")
    assert _heap._rss_bytes() > 0
