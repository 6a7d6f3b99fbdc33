"""Local and fsspec sources, range coalescing and open_source routing."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lerobotstream.errors import RangeReadError, SourceError, SourceNotFoundError
from lerobotstream.sources import open_source
from lerobotstream.sources._base import COALESCE_GAP_BYTES, coalesce_ranges
from lerobotstream.sources._fsspec import FsspecSource
from lerobotstream.sources._http import HttpSource
from lerobotstream.sources._local import LocalSource
from lerobotstream.sources._open import parse_hf_url

DATA = bytes(range(256)) * 400


@pytest.fixture
def root(tmp_path):
    (tmp_path / "videos" / "cam").mkdir(parents=True)
    (tmp_path / "videos" / "cam" / "f.mp4").write_bytes(DATA)
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text("{}")
    return tmp_path


@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 700)), max_size=20), st.integers(0, 300))
@settings(max_examples=200, deadline=None)
def test_coalesce_places_every_range(ranges, gap):
    groups, where = coalesce_ranges(ranges, gap_bytes=gap)
    starts = [o for o, _ in groups]
    assert starts == sorted(starts)
    for (a, n), (b, _m) in zip(groups, groups[1:]):
        assert b > a + n + gap  # groups are separated by more than the gap
    for (off, n), (g, start, length) in zip(ranges, where):
        assert length == n
        if n:
            go, gn = groups[g]
            assert go + start == off and start + n <= gn


def test_local_source(root):
    src = open_source(root)
    assert isinstance(src, LocalSource)
    assert src.list("") == ["meta/info.json", "videos/cam/f.mp4"]
    assert src.read_ranges("videos/cam/f.mp4", [(5, 10), (0, 0), (100_000, 2400)]) == [DATA[5:15], b"", DATA[100_000:]]
    assert src.fingerprint("videos/cam/f.mp4").startswith("mtime_ns=")
    with pytest.raises(RangeReadError):
        src.read("videos/cam/f.mp4", 102_390, 20)
    with pytest.raises(RangeReadError):
        src.read("videos/cam/f.mp4", -1, 2)
    with pytest.raises(SourceNotFoundError):
        src.read("nope", 0, 1)
    assert not src.exists("nope") and src.exists("meta/info.json")
    assert open_source(f"file://{root}").read("meta/info.json", 0, 2) == b"{}"
    with pytest.raises(SourceNotFoundError):
        open_source(root / "missing")


def _child(src, q):
    q.put(src.read("videos/cam/f.mp4", 7, 3))


def test_local_source_after_fork(root):
    src = open_source(root)
    src.read("videos/cam/f.mp4", 0, 1)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(src, q))
    p.start()
    assert q.get(timeout=20) == DATA[7:10]
    p.join(10)
    assert src.read("videos/cam/f.mp4", 1, 2) == DATA[1:3]


def test_fsspec_source_coalesces_and_checks(tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("memory://srctest/videos/cam/f.mp4", DATA)
    src = open_source("memory://srctest")
    assert isinstance(src, FsspecSource)
    assert src.list("videos") == ["videos/cam/f.mp4"] and src.size("videos/cam/f.mp4") == len(DATA)
    got = src.read_ranges("videos/cam/f.mp4", [(10, 5), (20, 5), (10 + COALESCE_GAP_BYTES + 100, 3)])
    assert got == [DATA[10:15], DATA[20:25], DATA[COALESCE_GAP_BYTES + 110 : COALESCE_GAP_BYTES + 113]]
    assert src.stats.requests == 2
    with pytest.raises(SourceNotFoundError):
        src.size("videos/cam/none.mp4")
    with pytest.raises(RangeReadError):
        src.read("videos/cam/f.mp4", len(DATA), 1)


def test_open_source_routing_and_hf_url_parsing():
    assert parse_hf_url("hf://datasets/lerobot/pusht") == ("dataset", "lerobot/pusht", None)
    assert parse_hf_url("hf://datasets/lerobot/pusht@refs%2Fpr%2F3") == ("dataset", "lerobot/pusht", "refs/pr/3")
    assert parse_hf_url("hf://buckets/me/bkt/") == ("bucket", "me/bkt", None)
    for bad in ("hf://models/a/b", "hf://buckets/me/bkt/sub", "hf://datasets/a"):
        with pytest.raises(SourceError):
            parse_hf_url(bad)
    assert isinstance(open_source("http://127.0.0.1:9/ds"), HttpSource)  # lazy: nothing sent yet
    with pytest.raises(SourceError):
        open_source()
    with pytest.raises(SourceError, match="offline"):  # tests run with HF_HUB_OFFLINE=1
        open_source(repo_id="lerobot/pusht")
    src = LocalSource(os.getcwd())
    assert open_source(src) is src
