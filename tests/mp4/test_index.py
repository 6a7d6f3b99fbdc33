"""Derived memory-mapped index (lerobotstream.mp4._index_file / mp4.index): minimal dtypes,
constant arrays stored once, exact round-trip, Cython accessors vs numpy, generations, locking."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lerobotstream.errors import SidecarSchemaError
from lerobotstream.mp4 import index as cix
from lerobotstream.mp4._index_file import Mp4Index
from lerobotstream.mp4._index_format import minimal_int_dtype, samples_problem, table_problem
from lerobotstream.sidecar._archive import SidecarWriter
from tests._sidecar_helpers import synth_table
from tests.mp4._encoding_reference import encode_int_array

I64 = np.iinfo(np.int64)


def write_sidecar(path: Path, tables: dict[str, object], **manifest) -> Path:
    w = SidecarWriter(path, {"repo_id": "t/t", "revision": None, "data_root": "/x", "subset": False, **manifest})
    for sid, p in enumerate(sorted(tables)):
        t = tables[p]
        w.add_source(sid, t, path=p, size=int(t.file_size), fingerprint=f"fp:{p}")
    return w.commit()


def test_minimal_int_dtype_boundaries():
    assert minimal_int_dtype(0, 255) == np.uint8
    assert minimal_int_dtype(0, 256) == np.uint16
    assert minimal_int_dtype(0, 65535) == np.uint16
    assert minimal_int_dtype(0, 65536) == np.uint32
    assert minimal_int_dtype(0, 2**32 - 1) == np.uint32
    assert minimal_int_dtype(0, 2**32) == np.int64
    assert minimal_int_dtype(-1, 5) == np.int32
    assert minimal_int_dtype(-(2**31), 2**31 - 1) == np.int32
    assert minimal_int_dtype(-(2**31) - 1, 0) == np.int64
    assert minimal_int_dtype(I64.min, I64.max) == np.int64


def test_encodings_chosen():
    assert encode_int_array(np.full(10, 512))[0]["enc"] == "const"
    assert encode_int_array(np.arange(10) * 512 + 7)[0]["enc"] == "arith"
    spec, block = encode_int_array(np.array([5, 1, 300]))
    assert spec["enc"] == "plain" and block.dtype == np.uint16


@st.composite
def int_arrays(draw):
    n = draw(st.integers(1, 40))
    kind = draw(st.sampled_from(["const", "arith", "small", "neg", "huge", "wide"]))
    if kind == "const":
        v = draw(st.integers(I64.min, I64.max))
        return np.full(n, v, dtype=np.int64)
    if kind == "arith":
        first = draw(st.integers(-(2**40), 2**40))
        step = draw(st.integers(-(2**20), 2**20))
        return first + np.arange(n, dtype=np.int64) * step
    lo, hi = {"small": (0, 300), "neg": (-70000, 70000), "huge": (2**32 - 5, 2**40), "wide": (I64.min, I64.max)}[kind]
    return np.array(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), dtype=np.int64)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=int_arrays(), size_seed=st.integers(0, 3), data=st.data())
def test_index_round_trips_exactly(tmp_path, offset, size_seed, data):
    n = offset.shape[0]
    sizes = data.draw(
        st.one_of(
            st.just(np.full(n, 700, dtype=np.int64)),
            st.lists(st.integers(0, 2**33), min_size=n, max_size=n).map(np.array),
        )
    )
    dts = data.draw(
        st.one_of(
            st.just(np.arange(n, dtype=np.int64) * 512),
            st.lists(st.integers(-(2**50), 2**50), min_size=n, max_size=n, unique=True).map(
                lambda v: np.array(sorted(v), dtype=np.int64)
            ),
        )
    )
    cts = data.draw(
        st.lists(st.integers(-(2**31), 2**31), min_size=n, max_size=n).map(np.array)
        | st.just(np.zeros(n, dtype=np.int64))
    )
    base = synth_table(n)
    import dataclasses

    pts = dts + cts - 3
    t = dataclasses.replace(
        base,
        offset=offset,
        size=np.asarray(sizes, dtype=np.int64),
        dts_ticks=dts,
        cts_ticks=np.asarray(cts, dtype=np.int64),
        media_time=3,
        pts_ticks=pts,
        is_sync=np.arange(n) % 3 == 0,
        file_size=2**62,
    )
    d = tmp_path / f"case{os.urandom(4).hex()}"
    npz = write_sidecar(d / "s.npz", {"videos/a.mp4": t})
    if samples_problem(offset, t.size, t.file_size) is not None:  # negative or huge byte ranges are refused
        with pytest.raises(SidecarSchemaError, match="videos/a.mp4"):
            Mp4Index.open(npz, index_dir=d / "idx")
        return
    idx = Mp4Index.open(npz, index_dir=d / "idx")
    m, views = idx._views(idx._record(0))  # the stored encodings, as table() maps them
    assert table_problem(views) is None
    for f in ("offset", "size", "dts_ticks", "cts_ticks", "pts_ticks", "is_sync"):
        got = np.asarray(getattr(m, f))
        want = np.asarray(getattr(t, f))
        assert np.array_equal(got.astype(np.int64), want.astype(np.int64)), f
        assert not got.flags.writeable, f
        if f != "is_sync" and got.strides != (0,) and getattr(m, f).base is not None:
            lo, hi = int(want.min()), int(want.max())
            assert got.dtype == minimal_int_dtype(lo, hi), (f, got.dtype)
    assert np.array_equal(np.asarray(m.presentation_order), np.argsort(pts, kind="stable"))
    assert np.array_equal(views["sync_samples"], np.flatnonzero(np.arange(n) % 3 == 0))


def test_constant_arrays_stored_once_and_views(tmp_path):
    t = synth_table(1000, sizes=np.full(1000, 600, dtype=np.int64))  # const size → arith offsets
    npz = write_sidecar(tmp_path / "s.npz", {"v.mp4": t})
    idx = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    m = idx.table(0)
    assert m.size.strides == (0,) and m.size.shape == (1000,) and not m.size.flags.writeable
    assert m.cts_ticks.strides == (0,) and int(m.cts_ticks[5]) == 0
    assert np.array_equal(m.offset, t.offset) and np.array_equal(m.dts_ticks, t.dts_ticks)
    assert np.array_equal(m.pts_s, t.pts_s)  # derived pts_s is bit-exact
    assert m.is_sync.dtype == bool and np.array_equal(m.is_sync, t.is_sync)
    # only is_sync (dense, 1 byte/sample) and sync_samples are stored per source and sample: the
    # progressions from 0 (DTS, PTS, order, pts_s) live once in shared blocks, whatever the sources
    two = Mp4Index.open(write_sidecar(tmp_path / "s2.npz", {"v.mp4": t, "w.mp4": t}), index_dir=tmp_path / "idx")
    assert two.nbytes_stored() - idx.nbytes_stored() < 1000 * 2 + 4096
    assert np.shares_memory(two.table(0).dts_ticks, two.table(1).dts_ticks)


def test_bframes_edit_and_empty_edit_pts_exact(tmp_path):
    t1 = synth_table(50, bframes=True, gop=10)
    t2 = synth_table(20, empty_edit=40, movie_timescale=1000)
    npz = write_sidecar(tmp_path / "s.npz", {"a.mp4": t1, "b.mp4": t2})
    idx = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    assert idx.num_sources == 2 and idx.source_id("b.mp4") == 1
    for sid, t in ((0, t1), (1, t2)):
        m = idx.table(sid)
        assert np.array_equal(m.pts_s, t.pts_s)
        assert np.array_equal(m.presentation_order, t.presentation_order)
        assert m.codec == "avc1" and m.stsd == t.stsd and m.media_time == t.media_time
        assert m.empty_edit_movie_ticks == t.empty_edit_movie_ticks
    assert idx.table(1).pts_s[0] == 0.04
    with pytest.raises(KeyError, match="nope.mp4"):
        idx.source_id("nope.mp4")


def test_lazy_per_source_records(tmp_path):
    npz = write_sidecar(tmp_path / "s.npz", {f"v{i}.mp4": synth_table(10 + i) for i in range(5)})
    idx = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    assert idx._tables == {}
    idx.table(3)
    assert list(idx._tables) == [3]
    assert idx.table(3) is idx.table(3)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.int32, np.int64])
def test_nearest_frames_match_numpy(dtype):
    rng = np.random.default_rng(0)
    n = 200
    order = rng.permutation(n).astype(dtype)
    pts_s = np.empty(n)
    pts_s[order.astype(np.int64)] = np.sort(rng.uniform(0, 10, n))
    times = np.concatenate([rng.uniform(-1, 11, 100), pts_s[:5]])
    got_f, got_p = cix.nearest_frames(pts_s, order, times)
    sorted_pts = pts_s[order.astype(np.int64)]
    want = np.argmin(np.abs(sorted_pts[None, :] - times[:, None]), axis=1)
    assert np.array_equal(got_f, want) and np.array_equal(got_p, sorted_pts[want])


def test_accessors_on_broadcast_views(tmp_path):
    npz = write_sidecar(tmp_path / "s.npz", {"v.mp4": synth_table(30, sizes=np.full(30, 10, dtype=np.int64), gop=10)})
    idx = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    f, p = idx.frames_played_at(0, [0.0, 0.51, 100.0])
    assert list(f) == [0, 15, 29]


def test_replaced_sidecar_keeps_old_reader(tmp_path):
    npz = tmp_path / "s.npz"
    write_sidecar(npz, {"v.mp4": synth_table(40)})
    old = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    old_view = old.table(0).offset
    want = np.array(old_view)
    write_sidecar(npz, {"v.mp4": synth_table(60, base_offset=4096)})  # atomic replace, new content
    new = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    assert new.generation != old.generation and new.index_path != old.index_path
    assert new.table(0).num_samples == 60 and int(new.table(0).offset[0]) == 4096
    assert np.array_equal(old_view, want) and old.table(0).num_samples == 40  # old mapping intact
    # reopening the same content reuses the same generation file
    assert Mp4Index.open(npz, index_dir=tmp_path / "idx").index_path == new.index_path


def test_damaged_index_is_rebuilt(tmp_path):
    npz = write_sidecar(tmp_path / "s.npz", {"v.mp4": synth_table(40)})
    idx = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    path = idx.index_path
    del idx
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes()[:-5])  # truncated trailer
    again = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    assert again.table(0).num_samples == 40


def _convert_worker(npz: str, index_dir: str, barrier, queue) -> None:
    barrier.wait()
    idx = Mp4Index.open(npz, index_dir=index_dir)
    queue.put((str(idx.index_path), int(np.asarray(idx.table(1).offset, dtype=np.int64).sum())))


def test_concurrent_conversion_one_valid_file(tmp_path):
    tables = {f"v{i}.mp4": synth_table(5000 + i, bframes=i % 2 == 0) for i in range(4)}
    npz = write_sidecar(tmp_path / "s.npz", tables)
    ctx = mp.get_context("fork")
    nproc = 4
    barrier, queue = ctx.Barrier(nproc), ctx.Queue()
    procs = [
        ctx.Process(target=_convert_worker, args=(str(npz), str(tmp_path / "idx"), barrier, queue))
        for _ in range(nproc)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len({r for r in results}) == 1
    files = sorted(os.listdir(tmp_path / "idx"))
    assert [f for f in files if f.endswith(".idx")] == [Path(results[0][0]).name]
    assert not [f for f in files if f.endswith(".tmp")]
    assert results[0][1] == int(tables["v1.mp4"].offset.sum())
