"""Every read failure of a source that is not "not found" is a typed ``SourceReadError`` naming
the file and the operating system's reason, the original chained (issue 35 item 6): before, the
local source let a bare ``OSError`` through (a refused permission, a symlink loop, a folder read as
a file, an I/O error) and the fsspec one said only ``failed (OSError)``. A root whose fsspec
implementation is not installed (``s3://`` without ``s3fs``) was a bare ``ImportError``; it is a
``MissingDependencyError`` naming the protocol and the pip package, still an ``ImportError``."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from lerobotstream.errors import (
    LeRobotStreamError,
    MissingDependencyError,
    SourceError,
    SourceNotFoundError,
    SourceReadError,
)
from lerobotstream.sources import open_source
from lerobotstream.sources._fsspec import FsspecSource
from lerobotstream.sources._local import LocalSource

REPO = Path(__file__).resolve().parents[2]
G1 = REPO / "data" / "g1_v30"
DATA = bytes(range(256)) * 4


@pytest.fixture
def root(tmp_path):
    (tmp_path / "videos").mkdir()
    (tmp_path / "videos" / "f.mp4").write_bytes(DATA)
    (tmp_path / "videos" / "loop.mp4").symlink_to("loop.mp4")  # a link to itself
    (tmp_path / "videos" / "dir.mp4").mkdir()
    return tmp_path


def _fail_on(monkeypatch, name: str, suffix: str, exc: OSError) -> None:
    """``os.<name>`` raises ``exc`` for a path ending with ``suffix`` (every other call is the real one)."""
    real = getattr(os, name)

    def fake(target, *args, **kwargs):
        if str(target).endswith(suffix):
            raise exc
        return real(target, *args, **kwargs)

    monkeypatch.setattr(os, name, fake)


def _check(e: SourceReadError, where: str, path: str, code: int, reason: str) -> None:
    assert isinstance(e, SourceError) and isinstance(e, OSError) and isinstance(e, LeRobotStreamError)
    assert not isinstance(e, FileNotFoundError)
    assert str(e) == f"could not read {where}: {reason}"
    assert e.path == path and e.errno == code and e.reason == reason
    assert isinstance(e.__cause__, OSError) and e.__cause__.errno == code


def test_local_symlink_loop_and_folder_are_read_errors(root):
    src = LocalSource(root)
    for op in (lambda p: src.size(p), lambda p: src.fingerprint(p), lambda p: src.read(p, 0, 1)):
        with pytest.raises(SourceReadError) as e:
            op("videos/loop.mp4")
        _check(
            e.value,
            f"{root}/videos/loop.mp4",
            "videos/loop.mp4",
            errno.ELOOP,
            "Too many levels of symbolic links (ELOOP)",
        )
    with pytest.raises(SourceReadError) as e:  # a folder opens, but does not read
        src.read("videos/dir.mp4", 0, 1)
    _check(e.value, f"{root}/videos/dir.mp4", "videos/dir.mp4", errno.EISDIR, "Is a directory (EISDIR)")
    assert not src.exists("videos/loop.mp4") and not src.exists("videos/dir.mp4")
    assert src.read("videos/f.mp4", 1, 2) == DATA[1:3]  # the source still works


def test_local_size_of_a_folder_or_a_device_is_a_read_error(root):
    """What ``exists()`` denies, ``size`` explains (the construction's file check asks it why)."""
    src = LocalSource(root)
    for op in (lambda p: src.size(p), lambda p: src.fingerprint(p)):
        with pytest.raises(SourceReadError) as e:
            op("videos/dir.mp4")
        _check(e.value, f"{root}/videos/dir.mp4", "videos/dir.mp4", errno.EISDIR, "Is a directory (EISDIR)")
    (root / "videos" / "null.mp4").symlink_to("/dev/null")
    with pytest.raises(SourceReadError) as e:
        src.size("videos/null.mp4")
    assert str(e.value) == f"could not read {root}/videos/null.mp4: not a regular file (a character device)"
    assert e.value.path == "videos/null.mp4" and e.value.reason == "not a regular file (a character device)"
    assert not src.exists("videos/null.mp4") and src.size("videos/f.mp4") == len(DATA)


def test_local_list_of_a_folder_that_cannot_be_read_is_a_read_error(root, monkeypatch):
    src = LocalSource(root)
    (root / "videos" / "sub").mkdir()
    (root / "videos" / "sub" / "g.mp4").write_bytes(b"x")
    assert src.list("videos") == ["videos/f.mp4", "videos/sub/g.mp4"]  # files only: no loop, no folder
    assert src.list("none") == []
    _fail_on(
        monkeypatch, "scandir", "videos/sub", PermissionError(errno.EACCES, "Permission denied", f"{root}/videos/sub")
    )
    with pytest.raises(SourceReadError) as e:  # not a listing without the folder's files
        src.list("videos")
    _check(e.value, f"{root}/videos/sub", "videos/sub", errno.EACCES, "Permission denied (EACCES)")


def test_local_permission_and_io_errors_are_read_errors(root, monkeypatch):
    src = LocalSource(root)
    _fail_on(monkeypatch, "open", "videos/f.mp4", PermissionError(errno.EACCES, "Permission denied"))
    with pytest.raises(SourceReadError) as e:
        src.read("videos/f.mp4", 0, 4)
    _check(e.value, f"{root}/videos/f.mp4", "videos/f.mp4", errno.EACCES, "Permission denied (EACCES)")
    monkeypatch.undo()
    src.read("videos/f.mp4", 0, 1)  # the descriptor is now open: the read itself fails next

    def pread(fd, n, offset):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "pread", pread)
    with pytest.raises(SourceReadError) as e:
        src.read("videos/f.mp4", 0, 4)
    _check(e.value, f"{root}/videos/f.mp4", "videos/f.mp4", errno.EIO, "Input/output error (EIO)")


def test_local_not_found_stays_not_found(root):
    src = LocalSource(root)
    for path in ("videos/none.mp4", "videos/f.mp4/inside"):  # missing; a file on the path (ENOTDIR)
        with pytest.raises(SourceNotFoundError) as e:
            src.read(path, 0, 1)
        assert str(e.value) == f"file not found: {root}/{path}" and e.value.path == path
        assert not src.exists(path)


def test_fsspec_os_errors_are_read_errors(root):
    src = FsspecSource(f"file://{root}")
    for op in (lambda p: src.size(p), lambda p: src.read_file(p), lambda p: src.read(p, 0, 1)):
        with pytest.raises(SourceReadError) as e:
            op("videos/loop.mp4")
        assert (
            str(e.value)
            == f"could not read 'videos/loop.mp4' from file://{root}: Too many levels of symbolic links (ELOOP)"
        )
        assert e.value.errno == errno.ELOOP and e.value.path == "videos/loop.mp4"
        assert isinstance(e.value.__context__, OSError)  # kept; not shown (a remote store's text is not ours to show)
    with pytest.raises(SourceReadError, match=r"could not read 'videos/dir\.mp4' from .*: Is a directory \(EISDIR\)$"):
        src.read_file("videos/dir.mp4")
    with pytest.raises(SourceNotFoundError, match=r"'videos/dir\.mp4' at file://.* is a folder, not a file$"):
        src.size("videos/dir.mp4")
    assert not src.exists("videos/dir.mp4")


def _copy_g1(tmp_path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(G1, root)
    return root


@pytest.mark.parametrize(
    "what", ["data/chunk-000/file-000.parquet", "videos/observation.images.cam_high/chunk-000/file-000.mp4"]
)
def test_training_names_an_unreadable_file(tmp_path, monkeypatch, what):
    """Bug: a data file that could not be opened was ``ParquetCorruptError`` ("truncated or
    damaged: re-download it"), a video a bare ``PermissionError``."""
    from lerobotstream import StreamingLeRobotDataset

    root = _copy_g1(tmp_path)
    _fail_on(monkeypatch, "open", what, PermissionError(errno.EACCES, "Permission denied"))
    with pytest.raises(SourceReadError) as e:  # the video at construction (its sidecar), the data when iterating
        next(iter(StreamingLeRobotDataset(root=root)))
    assert str(e.value) == f"could not read {root}/{what}: Permission denied (EACCES)"


def test_a_missing_fsspec_implementation_names_the_pip_package(monkeypatch):
    from fsspec.registry import known_implementations

    monkeypatch.setitem(
        known_implementations,
        "lrsmissing",
        {"class": "lrs_no_such_package.FileSystem", "err": "Install lrs_no_such_package"},
    )
    with pytest.raises(ImportError) as e:  # the built-in callers caught before
        open_source("lrsmissing://user:secret@host/ds?sig=abc")
    assert isinstance(e.value, MissingDependencyError) and isinstance(e.value, LeRobotStreamError)
    assert str(e.value) == (
        "root 'lrsmissing://host/ds': the fsspec filesystem of the protocol 'lrsmissing' needs the "
        "package 'lrs_no_such_package', which is not installed: pip install lrs_no_such_package "
        "(fsspec: Install lrs_no_such_package)"
    )
    assert e.value.protocol == "lrsmissing" and e.value.package == "lrs_no_such_package"
    assert e.value.name == "lrs_no_such_package" and "secret" not in str(e.value) and "sig" not in str(e.value)
    assert isinstance(e.value.__cause__, ImportError)


def test_s3_without_s3fs(capsys):
    pytest.importorskip("fsspec")
    try:
        import s3fs  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("s3fs is installed")
    from lerobotstream.validate.__main__ import main as validate_main

    with pytest.raises(MissingDependencyError, match=r"pip install s3fs") as e:
        open_source("s3://bucket/ds")
    assert e.value.package == "s3fs" and e.value.protocol == "s3"
    assert validate_main(["s3://bucket/ds"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: MissingDependencyError: root 's3://bucket/ds': the fsspec filesystem of the protocol 's3' needs the "
        "package 's3fs', which is not installed: pip install s3fs (fsspec: Install s3fs to access S3)"
    )


def test_http_head_without_a_valid_content_length_is_a_source_error():
    """Bug: ``HEAD`` answering ``Content-Length: 12abc`` raised a bare ``ValueError`` (``int()``)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from lerobotstream.sources._http import HttpSource

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_HEAD(self):
            self.send_response(200)
            self.send_header("Content-Length", "12abc")
            self.end_headers()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        src = HttpSource(f"http://127.0.0.1:{httpd.server_address[1]}/ds/?sig=s3cr3t")
        with pytest.raises(SourceError) as e:
            src.size("videos/f.mp4")
        assert str(e.value) == (
            f"the HEAD of 'videos/f.mp4' at http://127.0.0.1:{httpd.server_address[1]}/ds/videos/"
            "f.mp4 has no valid Content-Length ('12abc'): the file's size is unknown"
        )
        assert e.value.path == "videos/f.mp4" and "s3cr3t" not in str(e.value)
    finally:
        httpd.shutdown()
        httpd.server_close()
