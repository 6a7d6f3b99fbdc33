"""Untrusted input in the node's caches: a FIFO, a socket or a symbolic link put where a derived
index, a note, a verification record or a disk-cache entry should be is refused without blocking
(and rebuilt or refetched); a symbolic link inside ``cache_dir`` is never followed. Each risky call
runs in a thread with a time limit, so a hang fails the test instead of the run."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from lerobotstream import constants
from lerobotstream._cachefile import NotRegularFileError, open_regular, read_regular
from lerobotstream.disk_cache import LAYOUT, DiskCache
from lerobotstream.testing import read_identity

CAM = "observation.images.front"
LENGTHS = (6, 5)
LIMIT_S = 120.0


def _bounded(fn, limit_s: float = LIMIT_S):
    """``fn()``'s result (or its exception, raised), failing the test when it runs past ``limit_s``."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # handed to the test's thread
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"still blocked after {limit_s:g} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_fifo_is_refused_at_once_by_every_cache_open(tmp_path):
    fifo = tmp_path / "entry"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFileError):
        _bounded(lambda: read_regular(fifo), 10)
    with pytest.raises(NotRegularFileError):  # an append would wait for a reader
        _bounded(lambda: open_regular(fifo, os.O_WRONLY | os.O_APPEND | os.O_CREAT), 10)
    (tmp_path / "file").write_bytes(b"0123456789")
    assert read_regular(tmp_path / "file", 4, offset=2) == b"2345"
    (tmp_path / "link").symlink_to(tmp_path / "file")
    assert read_regular(tmp_path / "link") == b"0123456789"
    with pytest.raises(NotRegularFileError):
        read_regular(tmp_path / "link", follow_symlinks=False)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "absent")


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(make_generated_dataset(episode_lengths=LENGTHS, codec="h264", cameras=((CAM, 32, 24),)))


def _stream(root: Path) -> tuple[str, bool]:
    from lerobotstream.dataset._dataset import StreamingLeRobotDataset

    ds = StreamingLeRobotDataset(root=root)
    ok = all(read_identity(it[CAM].numpy())[:2] == (int(it["episode_index"]), int(it["frame_index"])) for it in ds)
    return ds.sidecar_status, ok


@pytest.mark.parametrize("pattern", ["npz-*.gen", "*.verified", "*.valid-*", "*.idx"])
def test_a_fifo_in_the_index_cache_is_rebuilt_not_waited_on(root, tmp_path, monkeypatch, pattern):
    monkeypatch.setattr(constants, "SIDECAR_DIR", tmp_path / "sidecars")
    monkeypatch.setattr(constants, "INDEX_DIR", tmp_path / "indexes")
    assert _bounded(lambda: _stream(root)) == ("built", True)
    (planted,) = (tmp_path / "indexes").glob(pattern)
    planted.chmod(0o644)
    planted.unlink()
    os.mkfifo(planted)
    status, ok = _bounded(lambda: _stream(root))
    assert ok and status == "cache"
    if pattern != "*.valid-*":  # the validation note is only written after a validation
        assert planted.is_file(), "the FIFO was replaced by a regular file"


def test_a_fifo_entry_in_cache_dir_is_a_corrupt_miss(tmp_path):
    c = DiskCache(tmp_path, 1 << 20)
    k = c.key("id", "f", 0, 10)
    assert c.put(k, b"0123456789")
    path = c._path(k)
    path.unlink()
    os.mkfifo(path)
    assert _bounded(lambda: c.get(k, 10), 10) is None
    assert c.counters["corrupt"] == 1 and not os.path.lexists(path)
    assert c.put(k, b"0123456789") and c.get(k, 10) == b"0123456789"  # fetched again, cached again


def test_a_symlinked_entry_in_cache_dir_is_not_followed(tmp_path):
    c = DiskCache(tmp_path / "cache", 1 << 20)
    k = c.key("id", "f", 0, 10)
    assert c.put(k, b"0123456789")
    path = c._path(k)
    outside = tmp_path / "outside.bin"
    os.replace(path, outside)
    path.symlink_to(outside)
    assert c.get(k, 10) is None and not os.path.lexists(path)
    assert outside.exists(), "the link was removed, never its target"


def test_a_shard_folder_symlinked_outside_cache_dir_is_never_written_through(tmp_path):
    c = DiskCache(tmp_path / "cache", 5000)
    outside = tmp_path / "outside"
    outside.mkdir()
    for shard in (f"{i:02x}" for i in range(256)):  # every shard folder links outside
        (c.root / shard).symlink_to(outside)
    keys = [c.key("id", "f", i, 1000) for i in range(20)]
    for k in keys:
        assert c.put(k, b"x" * 1000)
    assert list(outside.iterdir()) == [], "an entry was written outside cache_dir"
    assert all(not c._path(k).parent.is_symlink() and c._path(k).parent.is_dir() for k in keys)  # replaced
    assert c.total_bytes() <= 5000
    # a link that stays (made after the writes) is neither read through, counted nor evicted
    k = keys[-1]
    shard = c._path(k).parent
    moved = tmp_path / "moved"
    total = c.total_bytes()
    os.replace(shard, moved)
    shard.symlink_to(moved)
    linked = sum(p.stat().st_size for p in moved.iterdir())
    assert c.get(k, 1000) is None and any(moved.iterdir())  # not read through, nothing deleted there
    assert linked > 0 and c.total_bytes() == total - linked  # the link's entries are not counted


def test_total_bytes_counts_a_linked_entry_as_the_link(tmp_path):
    c = DiskCache(tmp_path / "cache", 1 << 20)
    big = tmp_path / "big"
    big.write_bytes(b"z" * 100_000)
    k = c.key("id", "f", 0, 10)
    assert c.put(k, b"0123456789")
    (c._path(k).parent / ("0" * 64 + ".bin")).symlink_to(big)
    assert c.total_bytes() < 1000
    assert (tmp_path / "cache" / LAYOUT).is_dir()
