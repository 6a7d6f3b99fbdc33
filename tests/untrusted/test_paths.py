"""Untrusted input, the path boundary: every path a dataset's metadata names stays inside its root.

One rule (``sources._paths.path_problem``) is checked when ``meta/info.json`` is loaded (templates,
video keys, ``repo_id``) and again where every source joins a path to its root."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import fsspec
import pytest

from lerobotstream.errors import MetadataError, SourceError
from lerobotstream.meta import DatasetMeta
from lerobotstream.sources._fsspec import FsspecSource
from lerobotstream.sources._local import LocalSource
from lerobotstream.sources._paths import checked_path, path_problem, same_origin, url_under

HOSTILE = [
    "../x",
    "a/../../x",
    "..",
    ".",
    "./meta/info.json",
    "/etc/passwd",
    "//other-host/x",
    "http://other-host/x",
    "https:x",
    "C:/x",
    "a//b",
    "a/",
    "",
    "a\\..\\b",
    "a\x00b",
    "a\nb",
    "x" * 2000,
]


@pytest.mark.parametrize("path", HOSTILE, ids=repr)
def test_the_rule_refuses_every_path_that_could_leave_the_root(path):
    assert path_problem(path) is not None
    with pytest.raises(SourceError, match="paths stay inside the root"):
        checked_path(path, "the root")


@pytest.mark.parametrize(
    "path",
    ["meta/info.json", "videos/observation.images.top/chunk-000/file-000.mp4", "a/..b/c..", ".hidden/x", "a b/c%2F"],
)
def test_the_rule_accepts_dataset_paths(path):
    assert path_problem(path) is None
    assert checked_path(path, "root") == path


def test_the_rule_names_non_strings():
    assert "not a string" in path_problem(5)
    assert "not a string" in path_problem(None)


def test_folders_may_be_the_root():
    assert checked_path("", "root", folder=True) == ""
    assert checked_path("/meta/", "root", folder=True) == "meta"
    with pytest.raises(SourceError):
        checked_path("../", "root", folder=True)


@pytest.fixture
def outside(tmp_path):
    """A dataset root and a secret file one folder above it."""
    root = tmp_path / "ds"
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text("{}")
    (tmp_path / "secret.parquet").write_bytes(b"SECRET")
    return root


@pytest.mark.parametrize("path", ["../secret.parquet", "meta/../../secret.parquet", "/etc/passwd"])
def test_local_source_never_opens_a_file_outside_its_root(outside, path):
    src = LocalSource(outside)
    for call in (src.size, src.fingerprint, src.exists, src.read_file, src.local_path):
        with pytest.raises(SourceError, match="paths stay inside the root"):
            call(path)
    with pytest.raises(SourceError):
        src.read(path, 0, 1)
    with pytest.raises(SourceError):
        src.list("../")


def test_local_source_follows_symlinks_inside_its_root(outside):
    """A Hub cache snapshot is a folder of links into ``../../blobs``: names are confined, link
    targets are not."""
    blob = outside.parent / "blobs" / "abc"
    blob.parent.mkdir()
    blob.write_bytes(b"0123456789")
    os.symlink(blob, outside / "meta" / "linked.bin")
    src = LocalSource(outside)
    assert src.read_file("meta/linked.bin") == b"0123456789"
    assert "meta/linked.bin" in src.list("meta")


def test_fsspec_source_never_leaves_its_root():
    fs = fsspec.filesystem("memory")
    fs.pipe("/ds/meta/info.json", b"{}")
    fs.pipe("/secret.bin", b"SECRET")
    src = FsspecSource("memory://ds")
    assert src.read_file("meta/info.json") == b"{}"
    for call in (src.size, src.read_file):
        with pytest.raises(SourceError, match="paths stay inside the root"):
            call("../secret.bin")
    with pytest.raises(SourceError):
        src.list("..")


@pytest.mark.parametrize("path", ["//evil:81/x", "../x", "/x", "..%2Fx/../../y"])
def test_url_under_keeps_the_roots_origin_and_prefix(path):
    with pytest.raises(SourceError):
        url_under("https://host/ds/", path, "https://host/ds/")


def test_url_under_percent_encodes_what_a_url_would_read_as_syntax():
    assert url_under("https://host/ds/", "a b/c?d#e:f%2F", "root") == "https://host/ds/a%20b/c%3Fd%23e%3Af%252F"
    assert url_under("https://host/ds/", "", "root", folder=True) == "https://host/ds/"


def test_same_origin_is_scheme_host_and_port():
    assert same_origin("https://h/x", "https://H:443/y")
    assert not same_origin("https://h/x", "http://h/x")  # a redirect to http keeps no credential
    assert not same_origin("https://h/x", "https://h:8443/x")
    assert not same_origin("https://h/x", "https://h.evil/x")
    assert not same_origin("https://h/x", "https://h:abc/x")


# --- the same rule when info.json is loaded ---------------------------------------------------------
@pytest.fixture(scope="module")
def dataset(make_generated_dataset):
    return make_generated_dataset(episode_lengths=(3, 4), codec="h264")


def _with_info(dataset: Path, tmp_path: Path, **edits) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(dataset, root, symlinks=True)
    info = json.loads((root / "meta/info.json").read_text())
    for key, value in edits.items():
        if key == "rename_camera":
            old, new = value
            info["features"][new] = info["features"].pop(old)
        else:
            info[key] = value
    (root / "meta/info.json").write_text(json.dumps(info))
    return root


@pytest.mark.parametrize(
    "field,value",
    [
        ("data_path", "../secret/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"),
        ("data_path", "/etc/passwd"),
        ("data_path", "//other-host/{chunk_index}.parquet"),
        ("data_path", "http://other-host/{chunk_index}.parquet"),
        ("data_path", "data\\{chunk_index}.parquet"),
        ("video_path", "../../videos/{video_key}/{chunk_index}/{file_index}.mp4"),
        ("video_path", "videos/{video_key}/../../../x.mp4"),
        ("repo_id", ".."),
        ("repo_id", "../../elsewhere"),
        ("repo_id", "/abs"),
    ],
)
def test_info_json_paths_that_leave_the_root_are_refused_when_loaded(dataset, tmp_path, field, value):
    root = _with_info(dataset, tmp_path, **{field: value})
    with pytest.raises(MetadataError, match=rf"meta/info.json: {field} ") as e:
        DatasetMeta.load(root)
    assert e.value.field == field and e.value.path == "meta/info.json"


@pytest.mark.parametrize("key", ["../../cam", "/abs", "a/../../b", ".", "cam\x00"])
def test_a_video_key_that_leaves_the_root_is_refused(dataset, tmp_path, key):
    info = json.loads((dataset / "meta/info.json").read_text())
    cam = next(k for k, f in info["features"].items() if f["dtype"] == "video")
    root = _with_info(dataset, tmp_path, rename_camera=(cam, key))
    with pytest.raises(MetadataError, match="meta/info.json: features.") as e:
        DatasetMeta.load(root)
    assert e.value.field == f"features.{key}"


def test_a_video_key_and_its_template_make_one_path(dataset, tmp_path):
    """Each passes alone, together they make a path longer than the rule allows: the filled path is checked."""
    info = json.loads((dataset / "meta/info.json").read_text())
    cam = next(k for k, f in info["features"].items() if f["dtype"] == "video")
    root = _with_info(dataset, tmp_path, rename_camera=(cam, "k" * 1000))
    with pytest.raises(MetadataError, match="video_path makes the path .* for the video key") as e:
        DatasetMeta.load(root)
    assert e.value.field == "video_path" and len(str(e.value)) < 500


def test_repo_id_dotdot_never_writes_outside_the_sidecar_cache(dataset, tmp_path):
    """``"repo_id": ".."`` would have put the sidecar and its lock one folder above the cache."""
    root = _with_info(dataset, tmp_path, repo_id="..")
    with pytest.raises(MetadataError, match="repo_id names the dataset's cache folder"):
        DatasetMeta.load(root)
    ok = _with_info(dataset, tmp_path / "ok", repo_id="owner/name")
    assert DatasetMeta.load(ok).repo_id == "owner/name"


@pytest.mark.parametrize("repo_id", ["..", ".", "...", "../..", "/", ""])
def test_the_sidecar_cache_file_stays_in_the_cache_folder_whatever_the_repo_id(tmp_path, repo_id):
    from lerobotstream.sidecar._identity import SidecarIdentity
    from lerobotstream.sidecar._lifecycle import cache_path

    identity = SidecarIdentity(
        repo_id=repo_id, repo_type="dataset", commit=None, revision=None, data_root="/x", episodes=None, files=[]
    )
    path = cache_path(identity, tmp_path / "cache")
    assert path.parent.parent == tmp_path / "cache" and path.parent.name not in ("", ".", "..")


# --- a metadata file's size is checked before it is read --------------------------------------------------
def test_a_local_metadata_file_above_the_cap_is_refused_before_it_is_read(tmp_path):
    from lerobotstream.errors import MetadataReadError
    from lerobotstream.sources._paths import MAX_METADATA_FILE_NBYTES

    (tmp_path / "meta").mkdir()
    with open(tmp_path / "meta/info.json", "wb") as f:  # sparse: no disk, no memory
        f.truncate(MAX_METADATA_FILE_NBYTES + 1)
    with pytest.raises(SourceError, match=rf"has {MAX_METADATA_FILE_NBYTES + 1} bytes, more than the"):
        LocalSource(tmp_path).read_file("meta/info.json")
    with pytest.raises(MetadataReadError, match="could not read meta/info.json .* it is not read"):
        DatasetMeta.load(tmp_path)


def test_an_fsspec_metadata_file_is_read_no_further_than_the_cap(monkeypatch):
    import lerobotstream.sources._base as base
    import lerobotstream.sources._fsspec as fsspec_source

    monkeypatch.setattr(base, "MAX_METADATA_FILE_NBYTES", 100)
    monkeypatch.setattr(fsspec_source, "MAX_METADATA_FILE_NBYTES", 100)
    fs = fsspec.filesystem("memory")
    fs.pipe("/capped/meta/stats.json", b"x" * 1000)
    fs.pipe("/capped/meta/info.json", b"x" * 100)
    src = FsspecSource("memory://capped")
    assert len(src.read_file("meta/info.json")) == 100
    with pytest.raises(SourceError, match="has more than the 100 bytes .* not read further"):
        src.read_file("meta/stats.json")
    src.size("meta/stats.json")  # now known: refused from the size, before reading
    with pytest.raises(SourceError, match="has 1000 bytes, more than the 100 bytes"):
        src.read_file("meta/stats.json")
