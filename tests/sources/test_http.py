"""HttpSource against a real loopback HTTP server process with injected faults."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import threading

import pytest

from lerobotstream.errors import RangeReadError, SourceAuthError, SourceError, SourceNotFoundError
from lerobotstream.sources import open_source
from lerobotstream.sources._http import HttpSource
from lerobotstream.sources._http_transport import RetryPolicy
from lerobotstream.testing import LoopbackServer

FAST = RetryPolicy(max_retries=3, backoff_base_s=0.001, backoff_cap_s=0.01, max_retry_after_s=5.0)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("static")
    rng = random.Random(5)
    payload = bytes(rng.getrandbits(8) for _ in range(300_000))
    (root / "videos" / "cam").mkdir(parents=True)
    (root / "videos" / "cam" / "file-000.mp4").write_bytes(payload)
    (root / "meta").mkdir()
    (root / "meta" / "info.json").write_bytes(b'{"codebase_version": "v3.0"}')
    server = LoopbackServer.start({"static": str(root)})
    yield server, payload
    server.close()


@pytest.fixture
def src(served):
    server, _ = served
    server.set_faults([])
    server.clear_log()
    s = open_source(server.static_url, retry=FAST, timeout_s=2.0, max_connections=4)
    sleeps: list[float] = []
    s.fetcher._sleep = sleeps.append  # record backoff instead of sleeping
    s.sleeps = sleeps
    yield s
    s.close()


VID = "videos/cam/file-000.mp4"


def _gets(server):
    return [e for e in server.log() if e["method"] == "GET" and e["range"]]


def test_reads_sizes_listing_and_fingerprint(served, src):
    server, payload = served
    assert isinstance(src, HttpSource)
    assert src.size(VID) == len(payload)
    assert src.fingerprint(VID).startswith("etag=")
    assert src.list("") == ["meta/info.json", VID]
    assert src.list("videos") == [VID]
    assert src.read_file("meta/info.json") == b'{"codebase_version": "v3.0"}'
    ranges = [(1000, 5000), (6000, 100), (0, 10), (250_000, 50_000), (7, 0)]
    server.clear_log()
    before = src.stats.bytes_requested
    got = src.read_ranges(VID, ranges)
    assert got == [payload[o : o + n] for o, n in ranges]
    # (0,10), (1000,5000), (6000,100) coalesce (gaps < 32 KiB); 250_000 is alone
    assert len(_gets(server)) == 2
    assert src.stats.bytes_requested - before == sum(n for _, n in ranges)
    assert src.stats.retries == 0


def test_out_of_file_range_is_refused(src):
    with pytest.raises(RangeReadError, match="outside"):
        src.read(VID, 299_990, 20)
    with pytest.raises(SourceNotFoundError):
        src.read("videos/cam/missing.mp4", 0, 1)


@pytest.mark.parametrize(
    "fault",
    [
        {"kind": "status", "status": 500, "count": 2},
        {"kind": "status", "status": 503, "count": 1},
        {"kind": "status", "status": 429, "retry_after": "1", "count": 1},
        {"kind": "truncate", "count": 2},
        {"kind": "bad_range", "count": 1},
        {"kind": "short", "count": 1},
        {"kind": "reset", "count": 2},
        {"kind": "ignore_range", "count": 1},
    ],
    ids=lambda f: f["kind"] + str(f.get("status", "")),
)
def test_faults_are_retried_and_never_returned(served, src, fault):
    server, payload = served
    src.size(VID)  # HEAD before arming the fault
    server.set_faults([{**fault, "match": "file-000"}])
    assert src.read(VID, 12_345, 40_000) == payload[12_345:52_345]
    assert src.stats.retries == fault["count"]
    if fault.get("retry_after"):
        assert src.sleeps == [1.0]  # Retry-After honoured instead of the computed backoff


def test_slow_response_times_out_and_retries(served):
    server, payload = served
    s = open_source(server.static_url, retry=FAST, timeout_s=0.3)
    s.size(VID)
    server.set_faults([{"kind": "slow", "delay_s": 1.0, "match": "file-000", "count": 1}])
    assert s.read(VID, 100, 1000) == payload[100:1100]
    assert s.stats.retries == 1
    s.close()


def test_retries_run_out_with_a_clear_error(served, src):
    server, _ = served
    src.size(VID)
    server.clear_log()
    server.set_faults([{"kind": "status", "status": 502, "match": "file-000", "count": 100}])
    with pytest.raises(RangeReadError, match=r"gave up after 4 attempts; last error: HTTP 502") as ei:
        src.read(VID, 0, 100)
    assert isinstance(ei.value, SourceError) and isinstance(ei.value, OSError)
    assert len(_gets(server)) == 4  # bounded: 1 + max_retries
    assert len(src.sleeps) == 3 and all(0 < s <= 0.01 for s in src.sleeps)


def test_auth_failures_are_not_retried_and_never_leak_credentials(served):
    server, _ = served
    s = HttpSource(server.static_url, headers={"Authorization": "Bearer hf_SECRET123"}, retry=FAST)
    s.size(VID)
    server.set_faults([{"kind": "status", "status": 403, "match": "file-000", "count": 1}])
    with pytest.raises(SourceAuthError) as ei:
        s.read(VID, 0, 10)
    assert "SECRET" not in str(ei.value) and "SECRET" not in repr(s)
    assert s.stats.retries == 0
    server.set_faults([])
    with pytest.raises(SourceError):
        HttpSource("http://user:pw@127.0.0.1:1/x")


def test_threads_share_a_bounded_pool(served):
    server, payload = served
    s = open_source(server.static_url, retry=FAST, max_connections=4)
    errors = []

    def work(seed):
        rng = random.Random(seed)
        for _ in range(20):
            o = rng.randrange(0, len(payload) - 5000)
            n = rng.randrange(1, 5000)
            if s.read(VID, o, n) != payload[o : o + n]:
                errors.append((o, n))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert s.stats.retries == 0  # no connection was yanked from under another thread
    assert s.client._num_idle <= 4


def _child_read(s, q):
    q.put((os.getpid(), s.read(VID, 10, 20), s.stats.requests))


def test_forked_worker_opens_its_own_connections(served):
    server, payload = served
    s = open_source(server.static_url, retry=FAST)
    s.read(VID, 0, 10)  # parent now holds an idle keep-alive socket
    parent_conns = [c for v in s.client._idle.values() for c in v]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_read, args=(s, q))
    p.start()
    pid, data, child_requests = q.get(timeout=20)
    p.join(10)
    assert pid != os.getpid() and data == payload[10:30]
    assert child_requests == 1  # stats restart in the child
    assert [c for v in s.client._idle.values() for c in v] == parent_conns  # parent's socket untouched
    assert s.read(VID, 5, 5) == payload[5:10]
