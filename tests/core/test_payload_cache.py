"""EpisodeByteCache: each episode handed with its fetch job; reservation accounting, budget failure
before fetch, prefetch pause, waits."""

from __future__ import annotations

import threading

import pytest

from lerobotstream.errors import ByteBudgetError
from lerobotstream.payload_cache import EpisodeByteCache, EpisodePayload


class FakeFetch:
    """Returns ``size`` bytes for an episode split over two cameras; records calls; can block."""

    def __init__(self, sizes, *, gate: threading.Event | None = None, fail: set[int] = frozenset()):
        self.sizes = sizes
        self.calls: list[int] = []
        self.bytes_fetched = 0
        self.gate = gate
        self.fail = fail
        self._lock = threading.Lock()

    def __call__(self, ep: int) -> EpisodePayload:
        if self.gate is not None:
            self.gate.wait(10)
        with self._lock:
            self.calls.append(ep)
        if ep in self.fail:
            raise OSError(f"boom episode {ep}")
        n = self.sizes[ep]
        a = n // 2
        with self._lock:
            self.bytes_fetched += n
        return EpisodePayload({"cam0": b"x" * a, "cam1": b"y" * (n - a)}, extra=ep)


class Jobs:
    """``jobs(ep)``: episode ``ep``'s :class:`~lerobotstream.payload_cache.FetchJob` (what the
    cache is handed with each admission and prefetch): its size ``sizes[ep]``, its fetch
    ``fetch(ep)``. ``asked``: the episodes whose size the cache read, in order."""

    def __init__(self, sizes, fetch):
        self.sizes, self.fetch_episode, self.asked = sizes, fetch, []

    def __call__(self, ep: int) -> _Job:
        return _Job(self, ep)


class _Job:
    def __init__(self, jobs: Jobs, ep: int) -> None:
        self._jobs, self.episode_index = jobs, ep

    @property
    def nbytes(self) -> int:
        self._jobs.asked.append(self.episode_index)
        return self._jobs.sizes[self.episode_index]

    def fetch(self) -> EpisodePayload:
        return self._jobs.fetch_episode(self.episode_index)


def _checker(budget, waiting: threading.Event | None = None):
    """``(on_event, seen)``: the hook checks the budget invariants at every event and sets
    ``waiting`` when an admission starts waiting for room (threads ordered by events, not sleeps)."""
    seen = []

    def on_event(name, snap):
        assert snap["reserved_bytes"] <= budget, (name, snap)
        assert 0 <= snap["resident_bytes"] <= snap["reserved_bytes"], (name, snap)
        seen.append(name)
        if name == "admit_wait" and waiting is not None:
            waiting.set()

    return on_event, seen


def test_oversize_episode_fails_before_any_fetch():
    sizes = {0: 100, 1: 1000}
    fetch = FakeFetch(sizes)
    jobs = Jobs(sizes, fetch)
    cache = EpisodeByteCache(500, max_workers=2)
    with pytest.raises(ByteBudgetError, match="episode 1"):
        cache.prefetch(1, job=jobs(1))
    with pytest.raises(ByteBudgetError, match="episode 1") as e:
        cache.admit(1, job=jobs(1))
    assert fetch.calls == [] and fetch.bytes_fetched == 0
    assert cache.reserved_bytes == 0
    cache.close()
    # the one rule and message of an episode over the budget (errors.over_budget; the planner's too)
    assert str(e.value) == (
        "episode 1 needs 1000 bytes (0.000 GiB) of synthesized MP4 but the worker has a byte budget of 500 bytes "
        "(0.000 GiB); raise the byte budget (streaming_byte_budget_gb) or lower num_workers"
    )
    assert (e.value.episode_index, e.value.nbytes, e.value.byte_budget) == (1, 1000, 500)


def test_reserved_and_resident_accounting():
    sizes = {0: 100, 1: 200, 2: 300}
    gate = threading.Event()
    fetch = FakeFetch(sizes, gate=gate)
    on_event, _ = _checker(600)
    jobs = Jobs(sizes, fetch)
    cache = EpisodeByteCache(600, max_workers=2, on_event=on_event)
    cache.admit(0, job=jobs(0))
    assert cache.prefetch(1, job=jobs(1))
    # reservations made before any byte arrives
    assert cache.reserved_bytes == 300 and cache.resident_bytes == 0
    gate.set()
    p0 = cache.get(0)
    assert p0.extra == 0 and sum(map(len, p0.payloads.values())) == 100
    cache.get(1)
    # finished prefetch is resident before any sample of it is asked
    assert cache.resident_bytes == 300 and cache.reserved_bytes == 300
    cache.retire(0)  # kept: still in the budget, evictable
    assert cache.reserved_bytes == 300 and cache.resident_bytes == 300 and cache.kept_bytes == 100
    cache.close()


def test_a_retired_episode_is_kept_and_admitted_again_without_a_fetch():
    sizes = {0: 100, 1: 200}
    fetch = FakeFetch(sizes)
    on_event, seen = _checker(300)
    jobs = Jobs(sizes, fetch)
    cache = EpisodeByteCache(300, max_workers=2, on_event=on_event)
    for _epoch in range(3):
        for ep in (0, 1):
            cache.admit(ep, job=jobs(ep))
            cache.acquire(ep)
            assert cache.get(ep).extra == ep
            cache.retire(ep)
            cache.release(ep)
    assert sorted(fetch.calls) == [0, 1] and fetch.bytes_fetched == 300
    assert cache.stats.reuses == 4 and cache.stats.reused_bytes == 600
    assert cache.kept_bytes == 300 and cache.drain_freed() == [] and "keep" in seen
    # still decoding when admitted again: taken back too (no wait, no fetch)
    cache.admit(0, job=jobs(0))
    cache.acquire(0)
    cache.retire(0)
    assert cache.admit(0, job=jobs(0)) is True
    cache.release(0)
    assert cache.held(0) and fetch.calls.count(0) == 1
    cache.close()


def test_kept_episodes_are_evicted_lru_first_and_the_budget_holds():
    sizes = {i: 100 for i in range(6)}
    fetch = FakeFetch(sizes)
    on_event, _ = _checker(300)
    jobs = Jobs(sizes, fetch)
    cache = EpisodeByteCache(300, max_workers=2, on_event=on_event)
    for ep in (0, 1, 2):
        cache.admit(ep, job=jobs(ep))
        cache.get(ep)
        cache.retire(ep)
    assert cache.kept_bytes == 300
    assert cache.prefetch(4, job=jobs(4))  # a prefetch evicts the least recently used kept episode (0)
    assert not cache.held(0) and cache.drain_freed() == [0]
    assert cache.admit(1, job=jobs(1)) is True  # reused: moves 1 to most recently used
    cache.admit(3, job=jobs(3))  # evicts kept 2 (0 is gone, 1 is pinned)
    assert not cache.held(2) and cache.held(1) and cache.held(4)
    assert cache.reserved_bytes == 300 and fetch.calls.count(1) == 1
    cache.close()


def test_prefetch_pauses_when_full_and_admission_waits_for_last_decode():
    sizes = {0: 400, 1: 400}
    fetch = FakeFetch(sizes)
    waiting = threading.Event()
    on_event, _ = _checker(500, waiting)
    jobs = Jobs(sizes, fetch)
    cache = EpisodeByteCache(500, max_workers=2, on_event=on_event)
    cache.admit(0, job=jobs(0))
    cache.get(0)
    assert cache.prefetch(1, job=jobs(1)) is False  # speculative prefetch pauses
    cache.acquire(0)  # a decode still running on episode 0
    cache.retire(0)  # planner evicted it; the bytes stay until the decode releases
    assert cache.reserved_bytes == 400
    done = threading.Event()

    def admit1():
        cache.admit(1, job=jobs(1))
        done.set()

    t = threading.Thread(target=admit1)
    t.start()
    assert waiting.wait(10), "admission of episode 1 never started waiting"
    assert not done.is_set(), "admission must wait for the outgoing episode's last decode"
    assert fetch.calls == [0]
    cache.release(0)
    assert done.wait(5)
    t.join()
    cache.get(1)
    assert cache.reserved_bytes == 400 and cache.resident_bytes == 400
    cache.close()


def test_admission_evicts_unpinned_finished_prefetch():
    sizes = {0: 300, 1: 300, 2: 300}
    fetch = FakeFetch(sizes)
    jobs = Jobs(sizes, fetch)
    cache = EpisodeByteCache(600, max_workers=2)
    cache.admit(0, job=jobs(0))
    assert cache.prefetch(1, job=jobs(1))
    cache.get(1)
    cache.admit(2, job=jobs(2))  # evicts prefetched 1 (finished, nobody pins it)
    assert cache.stats.evictions == 1
    assert not cache.held(1) and cache.held(2)
    assert cache.reserved_bytes == 600
    cache.close()


def test_admit_timeout_and_close_wakes_waiters():
    sizes = {0: 400, 1: 400}
    waiting = threading.Event()
    on_event, _ = _checker(500, waiting)
    jobs = Jobs(sizes, FakeFetch(sizes))
    cache = EpisodeByteCache(500, on_event=on_event)
    cache.admit(0, job=jobs(0))
    with pytest.raises(TimeoutError):
        cache.admit(1, job=jobs(1), timeout=0.05)
    errors = []

    def admit1():
        try:
            cache.admit(1, job=jobs(1))
        except RuntimeError as exc:
            errors.append(exc)

    waiting.clear()  # the timed-out admission above waited too
    t = threading.Thread(target=admit1)
    t.start()
    assert waiting.wait(10), "the admission never started waiting"
    cache.close()
    t.join(5)
    assert errors and "closed" in str(errors[0])


def test_failed_fetch_is_reraised_and_reservation_reusable():
    sizes = {0: 100, 1: 100}
    fetch = FakeFetch(sizes, fail={0})
    jobs = Jobs(sizes, fetch)
    cache = EpisodeByteCache(150)
    cache.admit(0, job=jobs(0))
    with pytest.raises(OSError, match="boom episode 0"):
        cache.get(0)
    cache.retire(0)
    assert cache.reserved_bytes == 0
    cache.admit(1, job=jobs(1))
    assert cache.get(1).extra == 1
    cache.close()


def test_payload_larger_than_reservation_is_an_error():
    sizes = {0: 10}

    def fetch(ep):
        return EpisodePayload({"cam": b"z" * 11})

    jobs = Jobs(sizes, fetch)

    cache = EpisodeByteCache(100)
    cache.admit(0, job=jobs(0))
    with pytest.raises(ByteBudgetError, match="exceeds its reservation"):
        cache.get(0)
    cache.close()


def test_random_schedule_keeps_invariants():
    import numpy as np

    rng = np.random.default_rng(0)
    sizes = {i: int(rng.integers(50, 300)) for i in range(40)}
    budget = 700
    on_event, seen = _checker(budget)
    jobs = Jobs(sizes, FakeFetch(sizes))
    cache = EpisodeByteCache(budget, max_workers=3, on_event=on_event)
    order = list(range(40))
    active: list[int] = []
    nxt = 0
    while nxt < len(order) or active:
        while nxt < len(order) and len(active) < 2:
            cache.admit(order[nxt], job=jobs(order[nxt]))
            active.append(order[nxt])
            nxt += 1
        for ep in order[nxt : nxt + 3]:
            cache.prefetch(ep, job=jobs(ep))
        ep = active.pop(0)
        cache.acquire(ep)
        cache.get(ep)
        cache.retire(ep)
        cache.release(ep)
        assert cache.reserved_bytes <= budget
    cache.close()
    assert "fetched" in seen


def test_a_source_failure_ends_the_stream_at_once():
    """Issue 29: a fetch's SourceError was stored for its episode only; every later prefetch was
    attempted (and failed on its own) and the consumer saw the error when it reached that episode.
    Now the first source failure is raised by every operation and no new fetch is sent."""
    from lerobotstream.errors import SourceError

    sizes = {e: 10 for e in range(8)}
    failed = threading.Event()

    class Dead(FakeFetch):
        def __call__(self, ep):
            if ep >= 2:  # the server dies after episodes 0 and 1
                with self._lock:
                    self.calls.append(ep)
                raise SourceError(f"episode {ep}: reading videos/file-{ep:03d}.mp4 failed (HTTP 503)", path=ep)
            return super().__call__(ep)

    def on_event(name, snap):
        if name == "fetched" and snap["episode_index"] == 2:
            failed.set()

    fetch = Dead(sizes)
    jobs = Jobs(sizes, fetch)
    cache = EpisodeByteCache(1000, max_workers=2, on_event=on_event)
    cache.admit(0, job=jobs(0))
    cache.admit(1, job=jobs(1))
    assert cache.get(0).extra == 0 and cache.get(1).extra == 1
    assert cache.prefetch(2, job=jobs(2))
    assert failed.wait(10)
    for op in (
        lambda: cache.get(0),
        lambda: cache.get(2),
        lambda: cache.admit(4, job=jobs(4)),
        lambda: cache.prefetch(5, job=jobs(5)),
    ):
        with pytest.raises(SourceError, match="file-002.mp4"):
            op()
    assert sorted(fetch.calls) == [0, 1, 2] and cache.stats.fetch_failures == 1  # 0 and 1 run in parallel
    assert cache.failure is not None and "file-002" in str(cache.failure)
    cache.close()


def test_queued_fetches_are_skipped_after_a_source_failure():
    from lerobotstream.errors import SourceError

    sizes = {e: 10 for e in range(6)}
    release = threading.Event()

    def fetch(ep):
        release.wait(10)
        raise SourceError(f"file-{ep:03d}.mp4: HTTP 404", path=ep)

    jobs = Jobs(sizes, fetch)

    cache = EpisodeByteCache(1000, max_workers=1)
    for ep in range(4):  # one runs, three wait in the queue
        assert cache.prefetch(ep, job=jobs(ep))
    release.set()
    with pytest.raises(SourceError, match="file-000.mp4"):
        cache.get(3)
    cache.close()
    assert cache.stats.fetch_failures == 1  # episode 0's request only
    assert cache.stats.fetches_skipped + cache.stats.fetch_failures <= 4


def test_a_job_is_sized_only_when_admitted_or_prefetched():
    """The size comes with each episode's job (the planner's sizes on demand, ``EpisodeSizes``):
    the cache reads it only for the episodes it admits or prefetches, and an oversize one still
    fails before any fetch. The cache itself takes no sizes and no fetch function."""
    sizes = {0: 100, 1: 200, 2: 5000, 3: 50}
    fetch = FakeFetch(sizes)
    jobs = Jobs(sizes, fetch)
    cache = EpisodeByteCache(1000, max_workers=1)
    try:
        cache.admit(0, job=jobs(0))
        assert cache.prefetch(1, job=jobs(1))
        assert jobs.asked == [0, 1] and cache.reserved_bytes == 300
        with pytest.raises(ByteBudgetError, match="episode 2"):
            cache.prefetch(2, job=jobs(2))
        assert 2 not in fetch.calls and 3 not in jobs.asked
    finally:
        cache.close()
    with pytest.raises(TypeError):
        EpisodeByteCache(10, sizes, fetch)


def test_without_keep_retired_a_retired_episode_is_freed_after_its_last_decode():
    sizes = {0: 100}
    jobs = Jobs(sizes, FakeFetch(sizes))
    cache = EpisodeByteCache(300, keep_retired=False)
    cache.admit(0, job=jobs(0))
    cache.acquire(0)
    cache.get(0)
    cache.retire(0)
    assert cache.held(0)  # still decoding
    cache.release(0)
    assert not cache.held(0) and cache.reserved_bytes == 0 and cache.drain_freed() == [0]
    cache.close()


def test_a_job_handed_with_the_admission_is_sized_and_fetched_instead_of_the_cache_functions():
    """The dataset's path (``EpisodeJob``): no size or fetch function, each admission and prefetch
    hands the episode's job (``FetchJob``: its ``nbytes``, its ``fetch()``)."""
    fetch = FakeFetch({0: 100, 1: 200, 2: 5000})

    class Job:
        def __init__(self, ep):
            self.ep, self.nbytes = ep, fetch.sizes[ep]

        def fetch(self):
            return fetch(self.ep)

    cache = EpisodeByteCache(1000, max_workers=1)
    try:
        assert cache.admit(0, job=Job(0)) is False and cache.prefetch(1, Job(1))
        assert cache.reserved_bytes == 300 and cache.get(0).extra == 0 and cache.get(1).extra == 1
        with pytest.raises(ByteBudgetError, match="episode 2"):
            cache.prefetch(2, Job(2))
        assert sorted(fetch.calls) == [0, 1]
    finally:
        cache.close()
