"""Schema-5 sidecar: NPZ round-trip, atomic builds, validation against metadata, CLI, and a
generated dataset end to end (real parser + DatasetMeta)."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest

from lerobotstream.errors import SidecarSchemaError, SidecarStaleError, SidecarValidationError
from lerobotstream.mp4._npz_schema import SIDECAR_SCHEMA_VERSION
from lerobotstream.sidecar import build_sidecar, open_sidecar
from lerobotstream.sidecar.__main__ import main as cli_main
from lerobotstream.sidecar._archive import SidecarWriter, load_manifest, load_tables, safe_data_root
from lerobotstream.sidecar._validate import check_fps, check_window_detail
from tests._sidecar_helpers import FakeSource, fake_meta, fake_parse, synth_table

A, B = "videos/cam/chunk-000/file-000.mp4", "videos/cam/chunk-000/file-001.mp4"


def two_file_dataset():
    """Episodes 0,1 in file-000 (20 + 10 frames), episode 2 in file-001 (15 frames), 30 fps."""
    tables = {A: synth_table(30, bframes=True, gop=10, path=A), B: synth_table(15, path=B)}
    meta = fake_meta([(0, 20, {"cam": (A, 0.0)}), (1, 10, {"cam": (A, 20 / 30)}), (2, 15, {"cam": (B, 0.0)})])
    return tables, meta


def build(tmp_path, tables, meta, output=None, **kw):
    src = FakeSource(tables)
    return build_sidecar(
        src,
        output=output or tmp_path / "sc.npz",
        repo_id="o/n",
        revision="a" * 40,
        data_root="hf://user:secret@datasets/o/n?token=abc",
        meta=meta,
        parse=kw.pop("parse", fake_parse(src)),
        progress=False,
        workers=2,
        **kw,
    )


def test_npz_round_trip(tmp_path):
    tables, meta = two_file_dataset()
    rep = build(tmp_path, tables, meta)
    assert rep.num_sources == 2 and rep.num_samples == 45 and not rep.subset
    m = load_manifest(rep.output)
    assert m["schema_version"] == SIDECAR_SCHEMA_VERSION == 5 and m["repo_id"] == "o/n" and m["revision"] == "a" * 40
    assert m["data_root"] == "hf://datasets/o/n"  # no credentials, no query
    assert "secret" not in json.dumps(m, default=list) and "abc" not in json.dumps(m, default=list)
    assert [s["path"] for s in m["sources"]] == [A, B]
    s0 = m["sources"][0]
    assert s0["fingerprint"] == f"fake:{A}:{tables[A].file_size}" and s0["ctts_version"] == 0
    assert s0["media_timescale"] == 15360 and s0["media_time"] == 512 and s0["codec"] == "avc1"
    with zipfile.ZipFile(rep.output) as zf:
        names = set(zf.namelist())
    assert {"b000000/offset.npy", "manifest.json.npy", "sources.json.npy", "src/path.npy"} <= names
    for (_src, arrays), path in zip(load_tables(rep.output), [A, B]):
        t = tables[path]
        for f in ("offset", "size", "dts_ticks", "cts_ticks", "pts_ticks", "pts_s", "presentation_order", "is_sync"):
            assert np.array_equal(arrays[f], getattr(t, f)), f
        assert arrays["offset"].dtype == np.int64


def test_safe_data_root():
    assert safe_data_root("https://u:p@host/a/b/?sig=1#x") == "https://host/a/b"
    assert safe_data_root("s3://bucket/ds/") == "s3://bucket/ds"
    assert safe_data_root("/tmp/../tmp/ds") == "/tmp/ds"


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_interrupted_build_keeps_old_file(tmp_path, exc):
    tables, meta = two_file_dataset()
    out = build(tmp_path, tables, meta).output
    before = out.read_bytes()
    src = FakeSource({**tables, B: synth_table(15, base_offset=999, path=B)})
    with pytest.raises(exc, match="simulated"):
        build_sidecar(
            src,
            output=out,
            repo_id="o/n",
            meta=meta,
            parse=fake_parse(src, fail_on=B, exc=exc),
            progress=False,
            workers=1,
        )
    assert out.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["sc.npz"]  # no temporary archive left behind


def test_invalid_build_keeps_old_file(tmp_path):
    tables, meta = two_file_dataset()
    out = build(tmp_path, tables, meta).output
    before = out.read_bytes()
    bad = fake_meta([(0, 20, {"cam": (A, 0.0)}), (1, 10, {"cam": (A, 20 / 30)}), (2, 16, {"cam": (B, 0.0)})])
    with pytest.raises(SidecarValidationError):
        build(tmp_path, tables, bad)
    assert out.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["sc.npz"]


def test_subset_build_is_marked(tmp_path):
    tables, _ = two_file_dataset()
    meta = fake_meta([(2, 15, {"cam": (B, 0.0)})], total_episodes=3)
    rep = build(tmp_path, {B: tables[B]}, meta, episodes=[2])
    m = load_manifest(rep.output)
    assert m["subset"] is True and m["episodes"] == [2] and [s["path"] for s in m["sources"]] == [B]


def test_bounded_pending_parse_results(tmp_path):
    tables = {f"videos/c/chunk-000/file-{i:03d}.mp4": synth_table(6) for i in range(12)}
    meta = fake_meta([(i, 6, {"c": (p, 0.0)}) for i, p in enumerate(sorted(tables))])
    src = FakeSource(tables)
    import threading

    live, peak, lock = [0], [0], threading.Lock()
    inner = fake_parse(src)

    def parse(read, size, *, path=""):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        return inner(read, size, path=path)

    import lerobotstream.sidecar._archive as arch

    orig = arch.SidecarWriter.add_source

    def add_source(self, *a, **k):
        with lock:
            live[0] -= 1
        return orig(self, *a, **k)

    arch.SidecarWriter.add_source = add_source
    try:
        build_sidecar(
            src,
            output=tmp_path / "s.npz",
            repo_id="o/n",
            meta=meta,
            parse=parse,
            progress=False,
            workers=2,
            max_pending=3,
        )
    finally:
        arch.SidecarWriter.add_source = orig
    assert peak[0] <= 3


# --- validation (BR-07 / BR-09 / BR-12) ---------------------------------------------------------
def test_validation_passes_and_open_sidecar(tmp_path):
    tables, meta = two_file_dataset()
    out = build(tmp_path, tables, meta).output
    idx = open_sidecar(out, meta, source=FakeSource(tables), index_dir=tmp_path / "idx")
    assert idx.num_sources == 2


def test_open_sidecar_validates_once_per_node_for_the_same_inputs(tmp_path, monkeypatch):
    """A successful validation is noted next to the derived index; the same selection at the same
    source state is not validated again, any change of windows or sources is."""
    import lerobotstream.sidecar as sc

    tables, meta = two_file_dataset()
    out = build(tmp_path, tables, meta).output
    open_sidecar(out, meta, source=FakeSource(tables), index_dir=tmp_path / "idx")
    assert len(list((tmp_path / "idx").glob("*.valid-*"))) == 1
    calls = []
    monkeypatch.setattr(sc, "validate_index", lambda *a, **k: calls.append("validate"))
    monkeypatch.setattr(sc, "check_sources", lambda *a, **k: calls.append("sources"))
    open_sidecar(out, meta, source=FakeSource(tables), index_dir=tmp_path / "idx")
    assert calls == []  # noted: skipped
    monkeypatch.undo()
    changed = FakeSource({**tables, B: synth_table(16, path=B)})  # a new size: the note does not apply
    with pytest.raises(SidecarStaleError, match="file-001.mp4"):
        open_sidecar(out, meta, source=changed, index_dir=tmp_path / "idx")
    shorter = fake_meta([(0, 20, {"cam": (A, 0.0)}), (1, 11, {"cam": (A, 20 / 30)})])
    with pytest.raises(SidecarValidationError, match="episode 1, camera cam"):
        open_sidecar(out, shorter, source=FakeSource(tables), index_dir=tmp_path / "idx")
    assert len(list((tmp_path / "idx").glob("*.valid-*"))) == 1  # failures are not noted


def test_fps_mismatch_is_reported(tmp_path):
    t = synth_table(60)  # 30 fps video
    reason = check_fps(t, 29, A)
    assert reason is not None and "fps=29" in reason and "30" in reason
    assert check_fps(t, 30, A) is None
    tables = {A: t}
    meta = fake_meta([(0, 60, {"cam": (A, 0.0)})], fps=29)
    with pytest.raises(
        SidecarValidationError, match=r"episode 0, camera cam, file .*file-000.mp4: info.json fps=29"
    ) as ei:
        build(tmp_path, tables, meta)
    assert os.listdir(tmp_path) == []
    assert ei.value.episode_index == 0 and ei.value.camera == "cam" and ei.value.path == A


def check_window(table, from_timestamp, length, fps, tolerance_s):
    return check_window_detail(table, from_timestamp, length, fps, tolerance_s).reason


def test_window_past_end_of_video():
    t = synth_table(30)
    reason = check_window(t, 20 / 30, 12, 30, 1e-4)
    assert (
        reason is not None and "shorter than the metadata" in reason and "[20, 32)" in reason and "30 frames" in reason
    )
    assert check_window(t, 20 / 30, 10, 30, 1e-4) is None


def test_from_timestamp_shifted_by_previous_file(tmp_path):
    # BR-07: episode 2 of file-001 carries a from_timestamp offset by file-000's duration (1.0 s)
    tables, _ = two_file_dataset()
    meta = fake_meta([(0, 20, {"cam": (A, 0.0)}), (1, 10, {"cam": (A, 20 / 30)}), (2, 15, {"cam": (B, 1.0)})])
    with pytest.raises(SidecarValidationError, match=r"episode 2, camera cam, file .*file-001.mp4: .*past the end"):
        build(tmp_path, tables, meta)
    assert not (tmp_path / "sc.npz").exists()


def test_window_between_frames_and_drift():
    t = synth_table(30, bframes=True)
    assert "between frames" in check_window(t, 0.5 + 1 / 60, 5, 30, 1e-4)
    # within tolerance: a tiny float error in from_timestamp is fine
    assert check_window(t, 1 / 3 + 1e-9, 10, 30, 1e-4) is None
    # a 29.97 fps video labelled 30 fps drifts out of tolerance within the window
    ntsc = synth_table(60, fps=30, timescale=30000)  # duration 1000 ticks = 30 fps exactly
    assert check_window(ntsc, 0.0, 60, 30, 1e-4) is None
    import dataclasses

    slow_dts = np.arange(60, dtype=np.int64) * 1001
    slow = dataclasses.replace(ntsc, dts_ticks=slow_dts, pts_ticks=slow_dts, pts_s=slow_dts / 30000)
    assert "miss their timestamp" in check_window(slow, 0.0, 60, 30, 1e-4)


def test_open_sidecar_stale_and_missing(tmp_path):
    tables, meta = two_file_dataset()
    out = build(tmp_path, tables, meta).output
    changed = FakeSource({**tables, B: synth_table(16, path=B)})
    with pytest.raises(SidecarStaleError, match="file-001.mp4"):
        open_sidecar(out, meta, source=changed, index_dir=tmp_path / "idx")
    other = fake_meta([(0, 5, {"cam": ("videos/cam/chunk-000/file-009.mp4", 0.0)})])
    with pytest.raises(SidecarStaleError, match="file-009.mp4"):
        open_sidecar(out, other, index_dir=tmp_path / "idx")
    shorter = fake_meta([(0, 20, {"cam": (A, 0.0)}), (1, 11, {"cam": (A, 20 / 30)})])
    with pytest.raises(SidecarValidationError, match="episode 1, camera cam"):
        open_sidecar(out, shorter, index_dir=tmp_path / "idx")


def test_schema_errors(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros(3))
    with pytest.raises(SidecarSchemaError, match="no manifest.json"):
        load_manifest(bad)
    old = tmp_path / "old.npz"
    w = SidecarWriter(old, {})
    w._manifest["schema_version"] = SIDECAR_SCHEMA_VERSION
    w.commit()
    with zipfile.ZipFile(old) as zf:
        raw = np.lib.format.read_array(zf.open("manifest.json.npy"))
    m = json.loads(raw.tobytes())
    m["schema_version"] = 2
    w2 = SidecarWriter(tmp_path / "v2.npz", {})
    w2._zf.close()
    with zipfile.ZipFile(w2.tmp_path, "w") as zf:
        with zf.open("manifest.json.npy", "w") as f:
            np.lib.format.write_array(f, np.frombuffer(json.dumps(m).encode(), dtype=np.uint8))
    os.replace(w2.tmp_path, tmp_path / "v2.npz")
    with pytest.raises(SidecarSchemaError, match="unsupported MP4 sidecar schema 2"):
        load_manifest(tmp_path / "v2.npz")


# --- a generated dataset end to end --------------------------------------------------------------
@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    from lerobotstream.testing import make_dataset

    # episode lengths are multiples of 3 at 30 fps: whole milliseconds, so ffmpeg's concat demuxer
    # (mvhd timescale 1000) adds no sub-frame gap between episodes
    return make_dataset(
        tmp_path_factory.mktemp("gen") / "ds",
        episode_lengths=(9, 12, 6),
        codec="h264",
        episodes_per_video_file=2,
        cameras=(("cam.a", 64, 48), ("cam.b", 64, 48)),
    )


def test_generated_dataset_build_open_and_cli(generated, tmp_path, capsys):
    out = tmp_path / "sc.npz"
    rc = cli_main(
        [
            "build",
            "--repo-id",
            "o/gen",
            "--root",
            str(generated),
            "--output",
            str(out),
            "--workers",
            "2",
            "--no-progress",
        ]
    )
    assert rc == 0 and out.is_file()
    assert "files=4" in capsys.readouterr().out
    from lerobotstream.meta import DatasetMeta
    from lerobotstream.mp4.parse import parse_mp4_bytes
    from lerobotstream.sources._local import LocalSource

    src = LocalSource(generated)
    meta = DatasetMeta.load(src)
    idx = open_sidecar(out, meta, source=src, index_dir=tmp_path / "idx")
    for p in meta.video_paths():
        ref = parse_mp4_bytes((generated / p).read_bytes())
        m = idx.table_for_path(p)
        for f in ("offset", "size", "dts_ticks", "cts_ticks", "pts_ticks", "is_sync", "pts_s", "presentation_order"):
            assert np.array_equal(np.asarray(getattr(m, f)), getattr(ref, f)), (p, f)
        assert m.stsd == ref.stsd and m.media_time == ref.media_time
    # subset build via the console-script form (no sub-command)
    sub = tmp_path / "sub.npz"
    assert (
        cli_main(
            ["--repo-id", "o/gen", "--root", str(generated), "--output", str(sub), "--episodes", "2", "--no-progress"]
        )
        == 0
    )
    m = load_manifest(sub)
    assert m["subset"] and m["episodes"] == [2] and len(m["sources"]) == 2
    assert cli_main(["inspect", str(sub)]) == 0
    assert "subset       True" in capsys.readouterr().out


def test_generated_dataset_fps_mismatch(generated, tmp_path):
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(generated, ds)
    info = json.loads((ds / "meta/info.json").read_text())
    info["fps"] = 29
    (ds / "meta/info.json").write_text(json.dumps(info))
    rc = cli_main(
        ["build", "--repo-id", "o/gen", "--root", str(ds), "--output", str(tmp_path / "x.npz"), "--no-progress"]
    )
    assert rc == 2 and not (tmp_path / "x.npz").exists()


def test_cli_errors_are_one_line_exit_2(tmp_path):
    """Bug: ``inspect missing.npz`` printed a raw traceback. One typed line, exit 2; --debug keeps it."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LEROBOTSTREAM_DEBUG"}
    cmd = [sys.executable, "-m", "lerobotstream.sidecar", "inspect", str(tmp_path / "missing.npz")]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "missing.npz" in lines[0]
    assert "Traceback" not in p.stderr
    p = subprocess.run(cmd + ["--debug"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode != 0 and "Traceback" in p.stderr
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(env, LEROBOTSTREAM_DEBUG="1"), timeout=60)
    assert "Traceback" in p.stderr


def test_display_matrices_round_trip_and_missing_matrix_is_refused(tmp_path, monkeypatch):
    """The sidecar keeps each source's tkhd/mvhd matrices through the NPZ and the derived index; a
    record without them (or a derived index of an older schema) is refused, never read as identity."""
    import dataclasses

    from lerobotstream.mp4 import _index_file as ix

    tables, meta = two_file_dataset()
    rot = (0, -65536, 0, 65536, 0, 0, 0, 0, 1 << 30)
    tables[A] = dataclasses.replace(tables[A], matrix=rot)
    rep = build(tmp_path, tables, meta)
    m = load_manifest(rep.output)
    assert m["sources"][0]["matrix"] == list(rot) and m["sources"][1]["matrix"] == list(tables[B].matrix)
    index = ix.Mp4Index.open(rep.output, index_dir=tmp_path / "idx")
    assert index.index_path.name.startswith(f"mp4-s{SIDECAR_SCHEMA_VERSION}-")
    t0, t1 = index.table(0), index.table(1)
    assert t0.matrix == rot and t0.movie_matrix == tables[A].movie_matrix and t1.matrix == tables[B].matrix
    # a source table without the matrix column: the derived index refuses the source
    from lerobotstream.mp4 import _index_write

    real = _index_write.read_source_table

    def without_matrix(*args, **kwargs):
        table = real(*args, **kwargs)
        table._columns.pop("matrix")
        return table

    monkeypatch.setattr(_index_write, "read_source_table", without_matrix)
    out = tmp_path / "nomatrix.idx"
    with zipfile.ZipFile(rep.output) as zf, open(out, "wb") as f:
        ix._convert(zf, m, "0" * 64, f, str(rep.output))
    monkeypatch.undo()
    with pytest.raises(SidecarSchemaError, match="no valid matrix"):
        ix.Mp4Index(out).table(0)
    # a derived index converted from an older-schema manifest is not opened at all
    old = tmp_path / "old.idx"
    with zipfile.ZipFile(rep.output) as zf, open(old, "wb") as f:
        ix._convert(zf, dict(m, schema_version=3), "1" * 64, f, str(rep.output))
    with pytest.raises(SidecarSchemaError, match="schema 3"):
        ix.Mp4Index(old)
