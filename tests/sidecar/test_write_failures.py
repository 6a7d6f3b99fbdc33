"""Writing the sidecar when the disk says no, and the temporaries of builders that died.

A full disk is injected (``OSError(ENOSPC)`` where zipfile, fsync or the lock would raise it);
dead builders are real processes killed with SIGKILL while they hold a partial archive.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from lerobotstream.errors import SidecarError, SidecarWriteError
from lerobotstream.sidecar import build_sidecar
from lerobotstream.sidecar.__main__ import main as cli_main
from lerobotstream.sidecar._archive import SidecarWriter, load_manifest, open_temporary, remove_dead_temporaries
from tests._sidecar_helpers import FakeSource, fake_meta, fake_parse, synth_table

REPO = Path(__file__).resolve().parents[2]
A, B = "videos/cam/chunk-000/file-000.mp4", "videos/cam/chunk-000/file-001.mp4"
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _dataset():
    tables = {A: synth_table(30, gop=10, path=A), B: synth_table(15, path=B)}
    meta = fake_meta([(0, 20, {"cam": (A, 0.0)}), (1, 10, {"cam": (A, 20 / 30)}), (2, 15, {"cam": (B, 0.0)})])
    return tables, meta


def _build(out, tables, meta):
    src = FakeSource(tables)
    return build_sidecar(src, output=out, repo_id="o/n", meta=meta, parse=fake_parse(src), progress=False, workers=1)


def _temporaries(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.*.tmp.npz"))


# --- a full disk (issue 17 item 11) -------------------------------------------------------------
@pytest.mark.parametrize("where", ["member", "fsync", "open"])
def test_full_disk_names_the_sidecar_and_keeps_the_old_one(tmp_path, monkeypatch, where):
    tables, meta = _dataset()
    out = tmp_path / "sc.npz"
    _build(out, tables, meta)
    before = out.read_bytes()
    if where == "member":  # the 3rd array written: zipfile's write raises ENOSPC mid-archive
        real = np.lib.format.write_array
        calls = []

        def write_array(*a, **k):
            calls.append(1)
            if len(calls) == 3:
                raise ENOSPC
            return real(*a, **k)

        monkeypatch.setattr(np.lib.format, "write_array", write_array)
    elif where == "fsync":  # delayed allocation: the space runs out when the data is flushed

        def fsync(fd):
            raise ENOSPC

        monkeypatch.setattr(os, "fsync", fsync)
    else:  # not even the temporary file can be created
        import lerobotstream.sidecar._archive as archive

        def no_room(output):
            raise ENOSPC

        monkeypatch.setattr(archive, "open_temporary", no_room)
    with pytest.raises(SidecarWriteError) as ei:
        _build(out, tables, meta)
    monkeypatch.undo()
    msg = str(ei.value)
    assert msg.startswith(
        f"cannot write the MP4 sidecar {out}: No space left on device (ENOSPC); free space on the "
        f"disk holding {tmp_path}"
    )
    assert "--output" in msg and "LEROBOTSTREAM_SIDECAR_DIR" in msg
    assert ei.value.errno == errno.ENOSPC and isinstance(ei.value, OSError) and isinstance(ei.value, SidecarError)
    assert out.read_bytes() == before and _temporaries(out) == []  # old sidecar intact, no partial left


def test_full_disk_in_the_cli_is_one_typed_line(tmp_path, monkeypatch, capsys):
    root = REPO / "data" / "g1_v30"
    out = tmp_path / "x.npz"

    def write_array(*a, **k):
        raise ENOSPC

    monkeypatch.setattr(np.lib.format, "write_array", write_array)
    monkeypatch.delenv("LEROBOTSTREAM_DEBUG", raising=False)
    assert cli_main(["build", "--root", str(root), "--output", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"error: SidecarWriteError: cannot write the MP4 sidecar {out}: No space left on device"
    )
    assert not out.exists() and _temporaries(out) == []


def test_unwritable_cache_folder_for_the_lock(tmp_path, monkeypatch):
    from filelock import FileLock

    from lerobotstream.sidecar._lifecycle import _BuildLock

    def acquire(self, *a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(FileLock, "acquire", acquire)
    with pytest.raises(
        SidecarWriteError,
        match=r"cannot write the MP4 sidecar lock .*sc.npz.lock: Read-only file "
        r"system \(EROFS\); make .* writable",
    ):
        with _BuildLock(tmp_path / "sc.npz", 1.0, "test"):
            pass


# --- temporaries of dead builders (issue 17 item 12) --------------------------------------------
_CHILD = textwrap.dedent("""
    import json, os, signal, sys
    sys.path.insert(0, {repo!r})
    from lerobotstream.sidecar._archive import SidecarWriter
    from tests._sidecar_helpers import synth_table
    w = SidecarWriter({out!r}, {{"repo_id": "o/n"}})
    w.add_source(0, synth_table(10, path="a.mp4"), path="a.mp4", size=1, fingerprint=None)
    w._file.flush()
    print(json.dumps({{"tmp": str(w.tmp_path)}}), flush=True)
    if {die!r}:
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9 mid-build
    sys.stdin.read()  # a live builder: holds its partial archive until told to go
""")


def _builder(out: Path, *, die: bool) -> tuple[subprocess.Popen, Path]:
    p = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(repo=str(REPO), out=str(out), die=die)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    line = p.stdout.readline()
    assert line, p.stderr.read()
    return p, Path(json.loads(line)["tmp"])


def test_a_killed_builders_partial_archive_is_removed_by_the_next_build(tmp_path):
    tables, meta = _dataset()
    out = tmp_path / "sc.npz"
    dead, dead_tmp = _builder(out, die=True)
    assert dead.wait(30) == -signal.SIGKILL
    dead.stdout.close(), dead.stderr.close(), dead.stdin.close()
    assert dead_tmp.is_file() and _temporaries(out) == [dead_tmp]  # what kill -9 used to leave for ever
    live, live_tmp = _builder(out, die=False)
    try:
        _build(out, tables, meta)  # a new build of the same output
        assert not dead_tmp.exists()  # the dead builder's partial archive is gone
        assert live_tmp.is_file()  # a live builder's is never touched
        assert _temporaries(out) == [live_tmp]
        assert load_manifest(out)["repo_id"] == "o/n"
    finally:
        live.communicate("", timeout=30)
    assert live.returncode == 0
    assert remove_dead_temporaries(out) == [live_tmp]  # its process has gone: now it is a dead one's


def test_cli_build_removes_a_dead_builders_partial_archive(tmp_path):
    out = tmp_path / "g1.npz"
    dead, dead_tmp = _builder(out, die=True)
    dead.wait(30)
    dead.stdout.close(), dead.stderr.close(), dead.stdin.close()
    assert cli_main(["build", "--root", str(REPO / "data" / "g1_v30"), "--output", str(out), "--no-progress"]) == 0
    assert out.is_file() and not dead_tmp.exists() and _temporaries(out) == []


def test_writers_in_one_process_keep_each_others_temporaries(tmp_path):
    out = tmp_path / "sc.npz"
    first = SidecarWriter(out, {"repo_id": "o/n"})
    second = SidecarWriter(out, {"repo_id": "o/n"})  # runs remove_dead_temporaries: first is held
    try:
        assert first.tmp_path.is_file() and second.tmp_path.is_file() and first.tmp_path != second.tmp_path
    finally:
        first.abort()
        second.abort()
    assert _temporaries(out) == []
    tmp, f = open_temporary(out)
    f.close()  # closed without removing: like a writer that died
    assert remove_dead_temporaries(out) == [tmp] and not tmp.exists()


# --- the derived index: the same typed error as the sidecar's (issue 29, fault trial item 6) ----
@pytest.mark.parametrize("how", ["enospc", "enotdir"])
def test_failed_derived_index_write_is_a_sidecar_write_error(tmp_path, monkeypatch, how):
    from lerobotstream.mp4._index_file import Mp4Index

    tables, meta = _dataset()
    out = tmp_path / "sc.npz"
    _build(out, tables, meta)
    if how == "enospc":
        index_dir = tmp_path / "idx"

        def fsync(fd):
            raise ENOSPC

        monkeypatch.setattr(os, "fsync", fsync)
    else:  # the index folder cannot be made (a file is in the way): as a read-only cache, even for root
        (tmp_path / "afile").write_text("x")
        index_dir = tmp_path / "afile" / "idx"
    with pytest.raises(SidecarWriteError) as ei:
        Mp4Index.open(out, index_dir=index_dir)
    monkeypatch.undo()
    e = ei.value
    assert isinstance(e, OSError) and isinstance(e, SidecarError)
    assert e.errno == (errno.ENOSPC if how == "enospc" else errno.ENOTDIR)
    assert str(e).startswith(f"cannot write the derived MP4 index {index_dir}/")
    assert "LEROBOTSTREAM_INDEX_DIR" in str(e)
    if how == "enospc":
        assert not [p for p in index_dir.iterdir() if p.name.endswith(".tmp")]  # no partial index left
