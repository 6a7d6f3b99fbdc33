"""Sidecar lifecycle: revision-keyed cache, lock (8 processes, SIGKILL, time-out), invalidation.

Processes are real (``subprocess``): this file doubles as the child program
(``python tests/sidecar/test_lifecycle.py CONFIG_JSON``, see :func:`child_main`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if __name__ == "__main__":
    sys.path.insert(0, str(REPO))

from lerobotstream.sources._local import LocalSource  # noqa: E402


class NoIdentitySource(LocalSource):
    """A store without stable object identity (like a generic remote filesystem)."""

    def fingerprint(self, path: str) -> None:
        return None


def child_main(cfg: dict) -> None:
    """Child program. ``mode``: "ensure" (count builds in ``markers/builds.log``, touch
    ``markers/parsing.<pid>`` when a parse starts, sleep ``parse_delay_s`` per parse, print
    ``{"how", "path", "sha256"}``) or "hold" (take the entry's lock, print ``held``, sleep)."""
    import lerobotstream.sidecar._build as B
    from lerobotstream.sidecar import _lifecycle as L

    markers = Path(cfg["markers"])
    src = (NoIdentitySource if cfg.get("no_identity") else LocalSource)(cfg["root"])
    if cfg["mode"] == "hold":
        from lerobotstream.meta import DatasetMeta

        ident = L.sidecar_identity(src, DatasetMeta.load(src), repo_id="t/ds")
        with L._BuildLock(L.cache_path(ident, cfg["cache"]), 1.0, "test holder"):
            print("held", flush=True)
            time.sleep(120)
        return
    orig_build, orig_parse = B.build_sidecar, B._parse_one

    def counting_build(*a, **k):
        with open(markers / "builds.log", "a") as f:
            f.write(f"{os.getpid()}\n")
        return orig_build(*a, **k)

    def slow_parse(source, path, parse):
        (markers / f"parsing.{os.getpid()}").touch()
        time.sleep(float(cfg.get("parse_delay_s", 0)))
        return orig_parse(source, path, parse)

    B.build_sidecar, B._parse_one = counting_build, slow_parse
    (markers / f"ready.{os.getpid()}").touch()
    while cfg.get("wait_for") and not os.path.exists(cfg["wait_for"]):
        time.sleep(0.01)
    path, how = L.ensure_sidecar(
        src, repo_id="t/ds", cache_dir=cfg["cache"], workers=1, lock_timeout_s=float(cfg.get("lock_timeout_s", 120))
    )
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    print(json.dumps({"how": how, "path": str(path), "sha256": digest}), flush=True)


if __name__ == "__main__":
    child_main(json.loads(sys.argv[1]))
    sys.exit(0)

import pytest  # noqa: E402

from lerobotstream import constants  # noqa: E402
from lerobotstream.errors import SidecarLockTimeoutError  # noqa: E402
from lerobotstream.meta import DatasetMeta  # noqa: E402
from lerobotstream.mp4._npz_schema import SIDECAR_SCHEMA_VERSION as SV  # noqa: E402
from lerobotstream.sidecar import _lifecycle, ensure_sidecar, open_sidecar  # noqa: E402
from lerobotstream.sidecar._archive import load_manifest  # noqa: E402
from lerobotstream.sidecar._identity import sidecar_identity  # noqa: E402
from lerobotstream.sidecar._lifecycle import cache_path  # noqa: E402

CAM = (("observation.images.front", 64, 48),)


@pytest.fixture(autouse=True)
def _dirs(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "SIDECAR_DIR", tmp_path / "sidecars")
    monkeypatch.setattr(constants, "INDEX_DIR", tmp_path / "indexes")


@pytest.fixture
def dataset(make_generated_dataset, tmp_path) -> Path:
    """A private copy (tests touch its files) of a 3-episode, 2-file H.264 dataset."""
    src = make_generated_dataset(episode_lengths=(5, 4, 6), cameras=CAM, codec="h264", episodes_per_video_file=2)
    dst = tmp_path / "ds"
    shutil.copytree(src, dst)
    return dst


def _child_env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env["LEROBOTSTREAM_INDEX_DIR"] = str(tmp_path / "indexes")
    env["LEROBOTSTREAM_SIDECAR_DIR"] = str(tmp_path / "sidecars")
    return env


def _spawn(tmp_path: Path, **cfg) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, json.dumps(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(tmp_path),
        cwd=REPO,
    )


def _wait_for(pred, timeout_s: float = 60.0) -> None:
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError("timed out waiting for a child process")
        time.sleep(0.02)


# --- cache keys and reuse ------------------------------------------------------------------------
def test_cache_hit_and_key_fields(dataset, tmp_path):
    src = LocalSource(dataset)
    full = DatasetMeta.load(src)
    path, how = ensure_sidecar(src, full, repo_id="t/ds")
    assert how == "built" and path.parent.parent == constants.SIDECAR_DIR
    assert path.name.startswith(f"mp4-v{SV}-") and path.parent.name == "t--ds"
    assert ensure_sidecar(src, full, repo_id="t/ds") == (path, "cache")
    assert ensure_sidecar(LocalSource(dataset), repo_id="t/ds") == (path, "cache")  # meta loaded inside
    # the episode subset, the repo and the data root are part of the key
    sub = DatasetMeta.load(src, episodes=[2])
    p_sub, how_sub = ensure_sidecar(src, sub, repo_id="t/ds")
    assert how_sub == "built" and p_sub != path and load_manifest(p_sub)["episodes"] == [2]
    assert cache_path(sidecar_identity(src, full, repo_id="t/other")) != path
    moved = tmp_path / "moved"
    shutil.copytree(dataset, moved)
    assert cache_path(sidecar_identity(LocalSource(moved), full, repo_id="t/ds")) != path
    assert open_sidecar(path, full, source=src).num_sources == 2


def test_local_fingerprint_change_gets_a_new_entry(dataset):
    src = LocalSource(dataset)
    path, _ = ensure_sidecar(src, repo_id="t/ds")
    video = dataset / DatasetMeta.load(src).video_paths()[0]
    st = video.stat()
    os.utime(video, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))  # same size, new mtime
    path2, how = ensure_sidecar(LocalSource(dataset), repo_id="t/ds")
    assert how == "built" and path2 != path and path.exists()  # the old entry is left alone


def test_older_schema_in_the_slot_is_rebuilt_and_other_schemas_live_elsewhere(dataset, caplog):
    src = LocalSource(dataset)
    meta = DatasetMeta.load(src)
    target = cache_path(sidecar_identity(src, meta, repo_id="t/ds"))
    target.parent.mkdir(parents=True)
    import zipfile

    import numpy as np

    with zipfile.ZipFile(target, "w") as zf:  # an older-schema archive sitting where the current one belongs
        with zf.open("manifest.json.npy", "w") as f:
            np.lib.format.write_array(f, np.frombuffer(json.dumps({"schema_version": SV - 2}).encode(), np.uint8))
    old_name = target.with_name(target.name.replace(f"mp4-v{SV}-", f"mp4-v{SV - 1}-"))
    assert old_name != target
    old_name.write_bytes(b"an old schema-2 entry")
    with caplog.at_level(logging.WARNING, logger="lerobotstream.sidecar"):
        path, how = ensure_sidecar(src, meta, repo_id="t/ds")
    assert (path, how) == (target, "built") and load_manifest(path)["schema_version"] == SV
    assert "not usable" in caplog.text and "schema" in caplog.text
    assert old_name.read_bytes() == b"an old schema-2 entry"


def test_no_identity_rebuilds_at_every_open_and_says_so(dataset, caplog):
    src = NoIdentitySource(dataset)
    with caplog.at_level(logging.WARNING, logger="lerobotstream.sidecar"):
        p1, how1 = ensure_sidecar(src, repo_id="t/ds")
        p2, how2 = ensure_sidecar(NoIdentitySource(dataset), repo_id="t/ds")
    assert (how1, how2) == ("built", "built") and p1 == p2
    assert caplog.text.count("rebuilt at every open") == 2


def test_failed_build_keeps_the_previous_file(dataset, monkeypatch):
    import lerobotstream.sidecar._build as B

    src = NoIdentitySource(dataset)
    path, _ = ensure_sidecar(src, repo_id="t/ds")
    before = path.read_bytes()

    def boom(source, p, parse):
        raise RuntimeError(f"simulated parse failure of {p}")

    monkeypatch.setattr(B, "_parse_one", boom)
    with pytest.raises(RuntimeError, match="simulated"):
        ensure_sidecar(NoIdentitySource(dataset), repo_id="t/ds")
    assert path.read_bytes() == before
    assert not list(path.parent.glob(".*.tmp.npz")) and not Path(str(path) + ".lock.info").exists()


# --- processes and the lock ----------------------------------------------------------------------
@pytest.mark.slow
def test_eight_processes_on_a_cold_cache_build_once(dataset, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    go = tmp_path / "go"
    cfg = dict(
        mode="ensure",
        root=str(dataset),
        cache=str(tmp_path / "sidecars"),
        markers=str(markers),
        parse_delay_s=0.5,
        wait_for=str(go),
    )
    procs = [_spawn(tmp_path, **cfg) for _ in range(8)]
    try:
        _wait_for(lambda: len(list(markers.glob("ready.*"))) == 8, 120)
        go.touch()  # all eight start at once
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    hows = sorted(o["how"] for o in outs)
    assert hows == ["built"] + ["cache"] * 7
    assert len((markers / "builds.log").read_text().split()) == 1  # exactly one build ran
    assert len({o["path"] for o in outs}) == 1 and len({o["sha256"] for o in outs}) == 1
    assert len(list(markers.glob("parsing.*"))) == 1


def test_sigkilled_holder_leaves_the_previous_sidecar_and_the_next_process_rebuilds(dataset, tmp_path):
    # a store without identity rebuilds at every open: the previous file exists while the build runs
    path, _ = ensure_sidecar(NoIdentitySource(dataset), repo_id="t/ds")
    before = path.read_bytes()
    markers = tmp_path / "markers"
    markers.mkdir()
    cfg = dict(
        mode="ensure",
        root=str(dataset),
        cache=str(tmp_path / "sidecars"),
        markers=str(markers),
        no_identity=True,
        parse_delay_s=60,
    )
    holder = _spawn(tmp_path, **cfg)
    try:
        _wait_for(lambda: list(markers.glob("parsing.*")), 120)  # mid-build, holding the lock
        assert list(path.parent.glob(f".{path.name}.*.tmp.npz"))  # its partial archive
        info = json.loads(Path(str(path) + ".lock.info").read_text())
        assert info["pid"] == holder.pid
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert path.read_bytes() == before  # intact
    assert load_manifest(path)["schema_version"] == SV
    nxt = _spawn(tmp_path, **{**cfg, "parse_delay_s": 0, "lock_timeout_s": 30})
    out, err = nxt.communicate(timeout=120)
    assert nxt.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["how"] == "built"  # the lock died with its holder
    assert not list(path.parent.glob(f".{path.name}.*.tmp.npz"))  # the partial archive was cleaned up
    assert (markers / "builds.log").read_text().split() == [str(holder.pid), str(nxt.pid)]


def test_lock_held_past_the_timeout_gives_the_documented_error(dataset, tmp_path):
    holder = _spawn(tmp_path, mode="hold", root=str(dataset), cache=str(tmp_path / "sidecars"), markers=str(tmp_path))
    try:
        assert holder.stdout.readline().strip() == "held"
        src = LocalSource(dataset)
        lock = str(cache_path(sidecar_identity(src, DatasetMeta.load(src), repo_id="t/ds"))) + ".lock"
        t0 = time.monotonic()
        with pytest.raises(SidecarLockTimeoutError) as ei:
            ensure_sidecar(src, repo_id="t/ds", lock_timeout_s=0.3)
        assert time.monotonic() - t0 < 30
    finally:
        holder.kill()
        holder.wait(10)
    msg = str(ei.value)
    assert lock in msg and ei.value.path == lock  # which lock
    assert f"pid {holder.pid}" in msg and "still running" in msg  # who may hold it
    assert "--dataset.streaming_sidecar_lock_timeout_s" in msg and f"delete {lock}" in msg  # what to do
    assert isinstance(ei.value, TimeoutError)
    # the holder is dead now: the message says so, and the next call simply takes the lock
    msg2 = _lifecycle.lock_timeout_message(Path(lock), 0.3, 0.3)
    assert "no such process" in msg2 and "looks dead" in msg2
    assert ensure_sidecar(src, repo_id="t/ds", lock_timeout_s=5)[1] == "built"


def test_damaged_cached_sidecar_arrays_are_rebuilt(tmp_path, make_generated_dataset):
    """A cached NPZ whose manifest reads fine but whose array members are damaged is rebuilt
    (not an untyped zlib error at every later start)."""
    import shutil

    from lerobotstream.meta import DatasetMeta
    from lerobotstream.mp4._index_file import Mp4Index
    from lerobotstream.sidecar import ensure_sidecar
    from lerobotstream.sources._local import LocalSource

    root = make_generated_dataset(episode_lengths=(6, 9), codec="av1")
    source = LocalSource(root)
    meta = DatasetMeta.load(source)
    cache_dir, index_dir = tmp_path / "sidecars", tmp_path / "indexes"
    npz, how = ensure_sidecar(source, meta, repo_id="local/damaged", cache_dir=cache_dir, index_dir=index_dir)
    assert how == "built"
    good = npz.read_bytes()
    data = bytearray(good)
    data[100:140] = bytes(b ^ 0xFF for b in data[100:140])  # inside the first array member
    npz.chmod(0o644)
    npz.write_bytes(bytes(data))
    shutil.rmtree(index_dir, ignore_errors=True)
    npz2, how2 = ensure_sidecar(source, meta, repo_id="local/damaged", cache_dir=cache_dir, index_dir=index_dir)
    assert npz2 == npz and how2 == "built"
    Mp4Index.open(npz2, index_dir=index_dir).close()
