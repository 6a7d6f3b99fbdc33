"""Derived index format 3: shared progression blocks (zero-copy views for large sources), lazy
per-source records, the warm-open generation note, and episode_frame_range / plan_span on those
views equal to the same calls on the parser's int64 tables."""

from __future__ import annotations

import numpy as np

from lerobotstream.mp4._index_file import Mp4Index
from lerobotstream.mp4._index_format import SHARED_MIN_SAMPLES
from lerobotstream.mp4.spans import episode_frame_range, plan_span
from lerobotstream.sidecar._archive import SidecarWriter
from tests._sidecar_helpers import synth_table

N = SHARED_MIN_SAMPLES + 904


def _write(path, tables):
    w = SidecarWriter(path, {"repo_id": "t/t", "revision": None, "data_root": "/x", "subset": False})
    for sid, p in enumerate(sorted(tables)):
        t = tables[p]
        w.add_source(sid, t, path=p, size=int(t.file_size), fingerprint=None)
    return w.commit()


def _tables():
    return {
        "a.mp4": synth_table(N, gop=2),  # arith dts == pts, identity order
        "b.mp4": synth_table(N + 3000, gop=2, sizes=np.full(N + 3000, 700, dtype=np.int64)),  # arith offsets
        "c.mp4": synth_table(N + 10, bframes=True, gop=10),
        "d.mp4": synth_table(N - 1000, empty_edit=40, movie_timescale=1000),
        "e.mp4": synth_table(300, gop=3),
    }  # small: lazily materialised


def test_shared_blocks_are_zero_copy_views_and_exact(tmp_path):
    tables = _tables()
    idx = Mp4Index.open(_write(tmp_path / "s.npz", tables), index_dir=tmp_path / "idx")
    assert idx.paths == sorted(tables)
    for p, t in tables.items():
        m = idx.table(idx.source_id(p))
        for f in ("offset", "size", "dts_ticks", "cts_ticks", "pts_ticks", "is_sync", "pts_s", "presentation_order"):
            got = getattr(m, f)
            assert np.array_equal(np.asarray(got), np.asarray(getattr(t, f))), (p, f)
            assert not got.flags.writeable
            if t.num_samples > SHARED_MIN_SAMPLES:  # never materialised: a view of the map or a broadcast
                assert got.base is not None or got.strides == (0,), (p, f)
                assert not got.flags.owndata, (p, f)
        assert m.pts_s.dtype == np.float64 and np.array_equal(m.pts_s, t.pts_s)  # bit-exact
    # the shared blocks cost one longest progression per key, not one per source
    a, b = idx.table(0), idx.table(1)
    assert np.shares_memory(a.dts_ticks, b.dts_ticks) and np.shares_memory(a.dts_ticks, a.pts_ticks)
    assert np.shares_memory(a.presentation_order, b.presentation_order)
    assert np.shares_memory(a.pts_s, b.pts_s)


def test_records_are_parsed_lazily_and_warm_open_skips_the_npz(tmp_path, monkeypatch):
    npz = _write(tmp_path / "s.npz", _tables())
    idx = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    assert idx.source_id("c.mp4") == 2 and idx._tables == {}
    assert idx.source_info(4)["path"] == "e.mp4" and idx._tables == {}  # records are parsed per use: nothing kept
    import zipfile

    def boom(*a, **k):
        raise AssertionError("warm open read the NPZ")

    monkeypatch.setattr(zipfile, "ZipFile", boom)
    again = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    assert again.index_path == idx.index_path and again.table(3).num_samples == N - 1000


def test_replaced_npz_is_not_served_from_the_note(tmp_path):
    npz = _write(tmp_path / "s.npz", _tables())
    old = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    _write(npz, {"z.mp4": synth_table(50)})
    new = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    assert new.generation != old.generation and new.paths == ["z.mp4"]


def test_spans_on_index_views_equal_spans_on_parser_tables(tmp_path):
    tables = _tables()
    idx = Mp4Index.open(_write(tmp_path / "s.npz", tables), index_dir=tmp_path / "idx")
    rng = np.random.default_rng(3)
    for p, t in tables.items():
        m = idx.table(idx.source_id(p))
        n = t.num_samples
        for _ in range(25):
            a = int(rng.integers(0, n - 1))
            b = int(rng.integers(a + 1, min(n, a + 400) + 1))
            want = plan_span(t, a, b)
            got = plan_span(m, a, b)
            for k in want.__slots__:
                x, y = getattr(want, k), getattr(got, k)
                if isinstance(x, np.ndarray):
                    assert x.dtype == y.dtype and np.array_equal(x, y), (p, k)
                else:
                    assert x == y, (p, k)
            fps = 30
            ts = float(t.pts_s[t.presentation_order[a]])
            length = b - a
            assert episode_frame_range(m, ts, length, fps) == episode_frame_range(t, ts, length, fps)
