"""DiskCache: atomic entries checked on every read (size, key, checksum), identity in the key,
LRU bound, a dead writer's leftovers never read, two processes filling one cache at once."""

from __future__ import annotations

import multiprocessing as mp
import os

from lerobotstream.disk_cache import LAYOUT, DiskCache


def test_round_trip_and_identity_in_the_key(tmp_path):
    c = DiskCache(tmp_path, 1 << 20)
    k = c.key("hf://datasets/a/b@" + "1" * 40, "videos/x.mp4", 100, 5)
    assert c.get(k, 5) is None
    assert c.put(k, b"hello")
    assert c.get(k, 5) == b"hello"
    # another revision, file or range never reads it
    assert c.get(c.key("hf://datasets/a/b@" + "2" * 40, "videos/x.mp4", 100, 5), 5) is None
    assert c.get(c.key("hf://datasets/a/b@" + "1" * 40, "videos/x.mp4", 101, 5), 5) is None
    assert c.counters["hits"] == 1 and c.counters["misses"] == 3


def test_truncated_corrupt_or_foreign_entries_are_refused_and_deleted(tmp_path):
    c = DiskCache(tmp_path, 1 << 20)
    keys = [c.key("id", "f", i, 1000) for i in range(3)]
    for k in keys:
        c.put(k, os.urandom(1000))
    a, b, d = (c._path(k) for k in keys)
    a.write_bytes(a.read_bytes()[:-10])  # truncated
    blob = bytearray(b.read_bytes())
    blob[500] ^= 0xFF  # one bit of the payload
    b.write_bytes(bytes(blob))
    other = c._path(c.key("id", "f", 99, 1000))
    other.parent.mkdir(parents=True, exist_ok=True)
    os.replace(d, other)  # another key's file under this name
    assert c.get(keys[0], 1000) is None and not a.exists()
    assert c.get(keys[1], 1000) is None and not b.exists()
    assert c.get(c.key("id", "f", 99, 1000), 1000) is None
    assert c.counters["corrupt"] == 3


def test_an_oversized_entry_is_refused_without_being_read_whole(tmp_path, monkeypatch):
    c = DiskCache(tmp_path, 1 << 20)
    k = c.key("id", "f", 0, 10)
    c.put(k, b"0123456789")
    path = c._path(k)
    with open(path, "r+b") as f:  # a shared cache entry grown to 1 GiB (sparse): never allocated
        f.truncate(1 << 30)
    asked = []
    import lerobotstream.disk_cache as dc

    real_read = dc.read_regular

    def spy_read(p, limit=-1, **kw):  # every cache-file read goes through read_regular
        asked.append(limit)
        return real_read(p, limit, **kw)

    monkeypatch.setattr(dc, "read_regular", spy_read)
    assert c.get(k, 10) is None and not path.exists()
    assert asked and all(0 <= n <= 1 << 16 for n in asked)


def test_a_dead_writers_temporary_file_is_never_read(tmp_path):
    c = DiskCache(tmp_path, 1 << 20)
    k = c.key("id", "f", 0, 100)
    p = c._path(k)
    p.parent.mkdir(parents=True, exist_ok=True)
    (p.parent / f".{p.stem}.abc.tmp").write_bytes(b"partial")  # what kill -9 mid-write leaves
    assert c.get(k, 100) is None
    assert c.put(k, b"x" * 100) and c.get(k, 100) == b"x" * 100


def test_lru_eviction_keeps_the_total_under_the_limit(tmp_path):
    size = 1000 + 64 + 32
    c = DiskCache(tmp_path, 3 * size)
    keys = [c.key("id", "f", i, 1000) for i in range(5)]
    for i, k in enumerate(keys[:3]):
        c.put(k, bytes([i]) * 1000)
        os.utime(c._path(k), (1000 + i, 1000 + i))  # explicit recency: no clock in the test
    assert c.get(keys[0], 1000) is not None  # a hit makes 0 the most recently used
    c.put(keys[3], b"3" * 1000)  # evicts 1, the least recently used
    assert c.get(keys[1], 1000) is None and c.get(keys[0], 1000) is not None
    assert c.total_bytes() <= 3 * size and c.counters["evictions"] == 1
    assert not c.put(c.key("id", "big", 0, 4000), b"z" * 4000)  # larger than the limit: not stored


def _fill(root, worker, n):
    c = DiskCache(root, 40 * (2000 + 96))
    for i in range(n):
        k = c.key("id", "f", i % 30, 2000)  # both processes write the same 30 keys, and evict
        c.put(k, bytes([i % 30]) * 2000)
        got = c.get(k, 2000)
        assert got is None or got == bytes([i % 30]) * 2000


def test_two_processes_filling_one_cache_leave_no_torn_entry(tmp_path):
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_fill, args=(tmp_path, w, 60)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    c = DiskCache(tmp_path, 40 * (2000 + 96))
    for i in range(30):
        got = c.get(c.key("id", "f", i, 2000), 2000)
        assert got is None or got == bytes([i]) * 2000
    assert c.counters["corrupt"] == 0 and c.total_bytes() <= 40 * (2000 + 96)
    assert not [p for p in (tmp_path / LAYOUT).rglob("*.tmp")]


KILL_CHILD = r"""
import sys
from lerobotstream.disk_cache import DiskCache
c = DiskCache(sys.argv[1], 1 << 30)
i = 0
while True:
    c.put(c.key("id", "f", i % 50, 1 << 20), bytes([i % 50]) * (1 << 20))
    i += 1
    if i == 5:
        print("writing", flush=True)
"""


def test_kill_9_while_writing_leaves_nothing_a_reader_takes(tmp_path):
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", KILL_CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc.stdout.close()
    c = DiskCache(tmp_path, 1 << 30)
    got = [c.get(c.key("id", "f", i, 1 << 20), 1 << 20) for i in range(50)]
    assert all(g is None or g == bytes([i]) * (1 << 20) for i, g in enumerate(got))
    assert sum(g is not None for g in got) >= 5 and c.counters["corrupt"] == 0
