"""The node-local disk cache under a stream over a remote (loopback HTTP) store: a second run and
later epochs read from it, every frame still right; a corrupt entry is fetched again; the cache
stays under its limit. Counted from ``stats()["bytes_by_epoch"]``, never timed."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from lerobotstream.disk_cache import LAYOUT, DiskCache
from lerobotstream.testing import LoopbackServer, read_identity
from tests._streams import CAMERA, SMALL_DATASET, small_stream

FRAMES = sum(SMALL_DATASET["episode_lengths"])
WANT = Counter((e, f) for e, n in enumerate(SMALL_DATASET["episode_lengths"]) for f in range(n))


@pytest.fixture(scope="module")
def url(small_dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    shutil.copytree(small_dataset, root / "ds")
    server = LoopbackServer.start({"static": str(root)})
    yield f"{server.static_url}ds/"
    server.close()


def _run(url, cache, epochs=1, **kw):
    """``epochs`` epochs of an in-process stream (endless when > 1), each covering every frame once
    with its own pixels; returns ``stats()``."""
    ds = small_stream(url, 0, cache_dir=str(cache), repeat=epochs > 1, **kw)
    it = iter(ds)
    for _ in range(epochs):
        seen = Counter()
        for _ in range(FRAMES):
            item = next(it)
            e, f = int(item["episode_index"]), int(item["frame_index"])
            assert read_identity(item[CAMERA])[:2] == (e, f)
            seen[(e, f)] += 1
        assert seen == WANT
    return ds.stats()


def test_a_second_run_reads_every_payload_from_the_disk_cache(url, tmp_path):
    first = _run(url, tmp_path)["bytes_by_epoch"][0]
    assert first["store_bytes"] == first["needed_bytes"] > 0 and first["disk_cache_bytes"] == 0
    st = _run(url, tmp_path)
    again = st["bytes_by_epoch"][0]
    assert again["store_bytes"] == 0 and again["disk_cache_bytes"] == first["needed_bytes"]
    assert st["disk_cache"]["hits"] > 0 and st["disk_cache"]["corrupt"] == 0
    # a damaged entry is refused, deleted and fetched again; the frames stay right
    entry = sorted((tmp_path / LAYOUT).rglob("*.bin"))[0]
    entry.write_bytes(entry.read_bytes()[:-1])
    st = _run(url, tmp_path)
    assert st["disk_cache"]["corrupt"] == 1 and 0 < st["bytes_by_epoch"][0]["store_bytes"] < first["needed_bytes"]


def test_a_dataset_larger_than_its_byte_budget_is_fetched_once_with_a_large_enough_cache(url, tmp_path):
    st = _run(url, tmp_path, epochs=3, byte_budget_gb=4500 / 2**30, prefetch_episodes=1)
    by = st["bytes_by_epoch"]
    assert st["cache"]["evictions"] > 0  # the byte budget does not hold the dataset
    assert by[0]["store_bytes"] == by[0]["needed_bytes"]
    assert by[1]["store_bytes"] == by[2]["store_bytes"] == 0  # memory or disk only


def test_a_cache_limit_below_the_dataset_holds_and_every_frame_is_right(url, tmp_path):
    first = _run(url, tmp_path / "probe")["bytes_by_epoch"][0]["needed_bytes"]
    limit = first // 2
    st = _run(url, tmp_path / "half", epochs=2, cache_limit_gb=limit / 2**30)
    assert st["disk_cache"]["evictions"] > 0
    assert DiskCache(tmp_path / "half", limit).total_bytes() <= limit


def _forge(cache) -> int:
    """Rewrite every entry's payload to zeros with a matching checksum (what anyone who can write
    ``cache_dir`` can do: the checksum is not keyed); returns how many."""
    import hashlib

    entries = sorted((cache / LAYOUT).rglob("*.bin"))
    for e in entries:
        blob = e.read_bytes()
        payload = bytes(len(blob) - 96)
        e.write_bytes(blob[:64] + payload + hashlib.sha256(payload).digest())
    return len(entries)


def test_forged_entries_the_framing_check_refuses_are_fetched_from_the_store(url, tmp_path):
    first = _run(url, tmp_path)["bytes_by_epoch"][0]
    assert _forge(tmp_path) > 0
    st = _run(url, tmp_path)  # every frame right (asserted in _run)
    assert st["disk_cache"]["corrupt"] > 0
    assert st["bytes_by_epoch"][0]["store_bytes"] == first["needed_bytes"]
    assert _run(url, tmp_path)["bytes_by_epoch"][0]["store_bytes"] == 0  # the store's bytes were cached again


def test_disk_cache_bytes_that_fail_to_decode_are_fetched_from_the_store(url, tmp_path, monkeypatch, caplog):
    from lerobotstream.mp4 import framing

    first = _run(url, tmp_path)["bytes_by_epoch"][0]
    assert _forge(tmp_path) > 0
    monkeypatch.setattr(framing, "check_sample_framing", lambda *a, **kw: None)  # forged bytes reach the decoder
    st = _run(url, tmp_path)  # every frame right (asserted in _run)
    assert st["disk_cache"]["corrupt"] > 0
    assert st["bytes_by_epoch"][0]["store_bytes"] == 0  # a refetch in place is not counted (as after a verification)
    assert f"cache_dir={tmp_path}" in caplog.text and "fetched again from the store" in caplog.text
    assert _run(url, tmp_path)["disk_cache"]["corrupt"] == 0  # the store's bytes were cached again
    assert first["needed_bytes"] > 0
