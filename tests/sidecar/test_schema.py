"""Schema 5 (columns + blocks): the member count does not grow with the sources, blocks split and
reorder exactly, identity checks read the columnar source table, older schemas (never released)
are refused with a rebuild message, and reading the manifest or opening the index creates no
Python object per untouched source."""

from __future__ import annotations

import gc
import json
import os
import zipfile

import numpy as np
import pytest

from lerobotstream.errors import SidecarSchemaError
from lerobotstream.mp4._index_file import Mp4Index
from lerobotstream.mp4._npz_schema import CANONICAL_FIELDS, SIDECAR_SCHEMA_VERSION
from lerobotstream.sidecar._archive import SidecarWriter, load_manifest, load_tables
from lerobotstream.sidecar._identity import SidecarIdentity, check_identity
from tests._sidecar_helpers import synth_table

FIELDS = ("offset", "size", "dts_ticks", "cts_ticks", "pts_ticks", "is_sync", "pts_s", "presentation_order")


def _tables(n: int) -> dict[str, object]:
    kinds = [dict(gop=2), dict(bframes=True, gop=10), dict(empty_edit=40, movie_timescale=1000), dict(gop=3)]
    return {
        f"videos/cam{i % 3}/file-{i:04d}.mp4": synth_table(20 + (i * 7) % 45, path=f"f{i}", **kinds[i % 4])
        for i in range(n)
    }


def _write5(path, tables, *, order=None, **kw):
    paths = sorted(tables)
    with SidecarWriter(path, {"repo_id": "t/t", "revision": None, "data_root": "/x", "subset": False}, **kw) as w:
        for sid in order if order is not None else range(len(paths)):
            t = tables[paths[sid]]
            w.add_source(sid, t, path=paths[sid], size=int(t.file_size), fingerprint=f"fp:{sid}")
        return w.commit()


def _members(path) -> list[str]:
    with zipfile.ZipFile(path) as zf:
        return zf.namelist()


def test_member_count_does_not_grow_with_sources(tmp_path):
    few = _members(_write5(tmp_path / "few.npz", _tables(2)))
    many = _members(_write5(tmp_path / "many.npz", _tables(120)))
    assert len(few) == len(many) and set(few) == set(many)
    assert "b000000/offset.npy" in many and not any(n.startswith("s000") for n in many)
    # a block closes once it holds block_samples samples: members grow with samples, not sources
    blocks = _members(_write5(tmp_path / "blocks.npz", _tables(120), block_samples=1000))
    nblocks = len({n.split("/")[0] for n in blocks if n.startswith("b")})
    total = sum(t.num_samples for t in _tables(120).values())
    assert (
        nblocks == load_manifest(tmp_path / "blocks.npz")["num_blocks"]
        and total // 1000 <= nblocks <= total // 1000 + 1
    )
    assert len(blocks) == len(many) + len(CANONICAL_FIELDS) * (nblocks - 1)


@pytest.mark.parametrize("block_samples", [1, 50, 1 << 20])
def test_out_of_order_sources_and_block_splits_round_trip_exactly(tmp_path, block_samples):
    tables = _tables(37)
    paths = sorted(tables)
    order = list(np.random.default_rng(block_samples).permutation(len(paths)))  # parse completion order
    npz = _write5(tmp_path / "s.npz", tables, order=order, block_samples=block_samples)
    m = load_manifest(npz)
    assert m["schema_version"] == SIDECAR_SCHEMA_VERSION == 5 and m["num_sources"] == 37
    assert [s["path"] for s in m["sources"]] == paths
    got = list(load_tables(npz))
    assert [src["path"] for src, _ in got] == paths
    idx = Mp4Index.open(npz, index_dir=tmp_path / "idx")
    for sid, p in enumerate(paths):
        t = tables[p]
        src, arrays = got[sid]
        assert src["fingerprint"] == f"fp:{sid}" and src["num_samples"] == t.num_samples
        assert src["matrix"] == list(t.matrix) and src["media_timescale"] == t.media_timescale
        m_t = idx.table(sid)
        assert m_t.stsd == t.stsd and m_t.ftyp == t.ftyp and m_t.matrix == tuple(t.matrix)
        assert idx.path(sid) == p and idx.source_id(p) == sid
        for f in FIELDS:
            assert np.array_equal(arrays[f], getattr(t, f)), (p, f)
            assert np.array_equal(np.asarray(getattr(m_t, f)), np.asarray(getattr(t, f))), (p, f)


def test_identity_checks_read_the_columnar_source_table(tmp_path):
    tables = _tables(9)
    mn = load_manifest(_write5(tmp_path / "new.npz", tables))
    ident = SidecarIdentity(
        repo_id="t/t",
        repo_type="dataset",
        commit=None,
        revision=None,
        data_root="/x",
        episodes=None,
        files=[(p, int(tables[p].file_size), f"fp:{i}") for i, p in enumerate(sorted(tables))][::3],
    )
    assert check_identity(mn, ident) is None
    bad = SidecarIdentity(
        repo_id="t/t",
        repo_type="dataset",
        commit=None,
        revision=None,
        data_root="/x",
        episodes=None,
        files=[("videos/none.mp4", 1, None)],
    )
    assert "does not index videos/none.mp4" in check_identity(mn, bad)


@pytest.mark.parametrize("schema", [3, 4])
def test_older_schema_is_refused_with_a_rebuild_message(tmp_path, schema):
    npz = tmp_path / f"v{schema}.npz"
    with zipfile.ZipFile(npz, "w") as zf:
        with zf.open("manifest.json.npy", "w") as f:
            np.lib.format.write_array(
                f, np.frombuffer(json.dumps({"schema_version": schema, "sources": []}).encode(), dtype=np.uint8)
            )
    for call in (load_manifest, lambda p: Mp4Index.open(p, index_dir=tmp_path / "idx")):
        with pytest.raises(SidecarSchemaError, match=f"schema {schema}.*rebuild"):
            call(npz)


def test_damaged_block_layout_is_a_schema_error(tmp_path):
    npz = _write5(tmp_path / "s.npz", _tables(4))
    broken = tmp_path / "broken.npz"
    with zipfile.ZipFile(npz) as zf, zipfile.ZipFile(broken, "w") as out:
        for info in zf.infolist():
            data = zf.read(info.filename)
            if info.filename == "src/_block_start.npy":
                with out.open(info.filename, "w") as f:
                    np.lib.format.write_array(f, np.full(4, 10**9, dtype=np.int64))
                continue
            out.writestr(info, data)
    with pytest.raises(SidecarSchemaError, match="lies outside sidecar block 0"):
        Mp4Index.open(broken, index_dir=tmp_path / "idx")


def test_writer_refuses_duplicate_and_missing_ids(tmp_path):
    t = synth_table(10)
    w = SidecarWriter(tmp_path / "a.npz", {})
    w.add_source(0, t, path="a.mp4", size=1, fingerprint=None)
    with pytest.raises(ValueError, match="written twice"):
        w.add_source(0, t, path="a.mp4", size=1, fingerprint=None)
    w.add_source(2, t, path="c.mp4", size=1, fingerprint=None)
    with pytest.raises(ValueError, match=r"ids \[1\] are missing"):
        w.commit()
    w.abort()
    assert not (tmp_path / "a.npz").exists() and not list(tmp_path.glob(".a.npz.*"))


def _objects_after(fn) -> int:
    gc.collect()
    before = len(gc.get_objects())
    keep = fn()
    gc.collect()
    n = len(gc.get_objects()) - before
    del keep
    return n


def test_no_python_object_per_untouched_source(tmp_path):
    """Reading a schema-5 manifest and opening and using one source of the index cost the same
    number of Python objects with 8 sources as with 400 (the columns are arrays, the index is
    mapped): a rank's memory does not grow with the sources it does not touch."""
    counts = {}
    for n in (8, 400):
        npz = _write5(tmp_path / f"s{n}.npz", _tables(n))
        Mp4Index.open(npz, index_dir=tmp_path / "idx").close()  # converted once (cold)

        def use(npz=npz):
            m = load_manifest(npz)
            idx = Mp4Index.open(npz, index_dir=tmp_path / "idx")  # warm
            sid = idx.source_id(m["sources"].get(3, "path"))
            return m, idx, idx.table(sid), idx.path(sid), m["sources"].find(idx.path(sid))

        use()  # imports and caches
        counts[n] = _objects_after(use)
    assert counts[400] <= counts[8] + 20, counts
    assert os.path.getsize(tmp_path / "s400.npz") < 400 * 2000  # no per-source member overhead (~1 KB/source)


def test_block_encodings_equal_per_source_encodings():
    """The converter encodes a whole NPZ block at once; each source's result must equal
    encode_int_array on its own slice (const, arith of any step and sign, plain, empty, 1 sample)."""
    from lerobotstream.mp4._index_format import encode_int_segments
    from tests.mp4._encoding_reference import encode_int_array

    rng = np.random.default_rng(7)
    for _ in range(400):
        segs = []
        for _ in range(int(rng.integers(1, 7))):
            n = int(rng.choice([0, 1, 2, 3, 17]))
            kind = int(rng.integers(0, 5))
            if kind == 0:
                a = np.full(n, int(rng.integers(-5, 70_000)))
            elif kind == 1:
                a = int(rng.integers(-1000, 1000)) + np.arange(n) * int(rng.choice([-3, 1, 1024, 70_000]))
            elif kind == 2:
                a = rng.integers(-(2**40), 2**40, n)
            elif kind == 3:
                a = rng.integers(0, 300, n)
            else:  # a progression broken at its last value
                a = np.arange(n) * 2 + (np.arange(n) == n - 1) * (n > 2)
            segs.append(np.asarray(a, dtype=np.int64))
        got = encode_int_segments(np.concatenate(segs), [len(x) for x in segs])
        for x, (spec, block) in zip(segs, got):
            want_spec, want_block = encode_int_array(x)
            assert spec == want_spec, (x, spec, want_spec)
            assert (block is None) == (want_block is None)
            if block is not None:
                assert block.dtype == want_block.dtype and np.array_equal(block, want_block)


def test_the_published_sidecar_is_found_by_the_current_schema_only(monkeypatch):
    from types import SimpleNamespace

    from lerobotstream.sidecar import _publish

    monkeypatch.setattr(_publish, "_is_hub", lambda source: True)
    have = {"meta/mp4-sidecars/mp4-v4.npz"}  # an older schema is never used
    bucket = SimpleNamespace(repo_type="bucket", repo_id="o/b", exists=lambda p: p in have)
    assert _publish.open_published(bucket, None) is None
    have.add("meta/mp4-sidecars/mp4-v5.npz")
    store, path, where = _publish.open_published(bucket, None)
    assert store is bucket and path == "meta/mp4-sidecars/mp4-v5.npz" and where.endswith("mp4-v5.npz")
