"""Publishing (``build --push``) and published-sidecar lookup through the real huggingface_hub
client against the loopback Hub; bucket fingerprint invalidation."""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path

import pytest

from lerobotstream import constants
from lerobotstream.errors import SidecarPublishError
from lerobotstream.mp4._npz_schema import SIDECAR_SCHEMA_VERSION as SV
from lerobotstream.sidecar import build_sidecar, ensure_sidecar, push_sidecar
from lerobotstream.sidecar.__main__ import main as sidecar_cli
from lerobotstream.sidecar._archive import load_manifest, load_tables
from lerobotstream.sources import open_source
from lerobotstream.sources._local import LocalSource
from lerobotstream.testing import LoopbackServer

SHA1, SHA2 = "1" * 40, "2" * 40
CAM = (("observation.images.front", 64, 48),)
BRANCH = "lerobot-sidecars"
WRITES = ("POST", "PUT", "DELETE", "PATCH")


class NoIdentitySource(LocalSource):
    def fingerprint(self, path: str) -> None:
        return None


@pytest.fixture(scope="module")
def hub(make_generated_dataset, tmp_path_factory):
    a = make_generated_dataset(episode_lengths=(5, 4, 6), cameras=CAM, codec="h264", episodes_per_video_file=2)
    b = make_generated_dataset(episode_lengths=(6, 4, 6), cameras=CAM, codec="h264", episodes_per_video_file=2)
    bucket = tmp_path_factory.mktemp("bucket") / "bkt"
    shutil.copytree(a, bucket)
    server = LoopbackServer.start(
        {
            "datasets": {"o/ds": {"refs": {"main": SHA1, "v1.0": SHA1}, "commits": {SHA1: str(a), SHA2: str(b)}}},
            "buckets": {"o/bkt": str(bucket)},
            "scratch": str(tmp_path_factory.mktemp("hub_scratch")),
        }
    )
    server.dirs = {SHA1: Path(a), SHA2: Path(b), "bucket": bucket}
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path, hub):
    from huggingface_hub import constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)  # loopback only
    monkeypatch.setattr(constants, "SIDECAR_DIR", tmp_path / "sidecars")
    monkeypatch.setattr(constants, "INDEX_DIR", tmp_path / "indexes")
    hub.clear_log()


def _open(hub, root):
    return open_source(root, endpoint=hub.url, token="hf_loopbackSECRET")


def _writes(hub):
    return [e for e in hub.log() if e["method"] in WRITES]


@pytest.fixture(scope="module")
def published(hub, tmp_path_factory):
    """The maintainer's explicit publish of the SHA1 sidecar, through the CLI and a tag."""
    from huggingface_hub import constants as hf_constants

    old = hf_constants.HF_HUB_OFFLINE
    hf_constants.HF_HUB_OFFLINE = False
    try:
        out = tmp_path_factory.mktemp("pub") / "sidecar.npz"
        hub.clear_log()
        rc = sidecar_cli(
            [
                "build",
                "--repo-id",
                "o/ds",
                "--data-root",
                "hf://datasets/o/ds@v1.0",
                "--output",
                str(out),
                "--push",
                "--endpoint",
                hub.url,
                "--no-progress",
            ]
        )
        assert rc == 0
        writes = [(e["method"], e["path"]) for e in _writes(hub)]
    finally:
        hf_constants.HF_HUB_OFFLINE = old
    return out, writes


def test_push_creates_the_branch_and_uploads_only_to_it(hub, published):
    out, writes = published
    assert writes == [
        ("POST", f"/api/datasets/o/ds/branch/{BRANCH}"),
        ("POST", f"/api/datasets/o/ds/preupload/{BRANCH}"),
        ("POST", f"/api/datasets/o/ds/commit/{BRANCH}"),
    ]
    refs = hub.refs()["o/ds"]
    assert refs["main"] == SHA1 and refs["v1.0"] == SHA1  # source branch and tag untouched
    assert refs[BRANCH] not in (SHA1, SHA2)
    folder = Path(hub.commits()["o/ds"][refs[BRANCH]])
    remote = folder / "meta" / "mp4-sidecars" / f"mp4-v{SV}-{SHA1}.npz"
    assert remote.read_bytes() == out.read_bytes()
    assert not (hub.dirs[SHA1] / "meta" / "mp4-sidecars").exists()  # the source commit is unchanged
    m = load_manifest(out)
    assert m["revision"] == SHA1 and not m["subset"] and m["repo_id"] == "o/ds"
    assert all(s["fingerprint"].startswith("sha256:") for s in m["sources"])


@pytest.mark.parametrize("rev", [SHA1, "v1.0", "main"])
def test_training_finds_the_published_sidecar_by_pinned_commit_or_tag_without_writing(hub, published, tmp_path, rev):
    out, _ = published
    src = _open(hub, f"hf://datasets/o/ds@{rev}")
    hub.clear_log()
    path, how = ensure_sidecar(src, repo_id="o/ds", cache_dir=tmp_path / f"c-{rev}")
    assert how == "published"
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(out.read_bytes()).digest()
    assert not _writes(hub)  # training never writes, never creates a branch
    assert ensure_sidecar(src, repo_id="o/ds", cache_dir=tmp_path / f"c-{rev}") == (path, "cache")
    # a subset selection also uses the full published sidecar
    from lerobotstream.meta import DatasetMeta

    sub = DatasetMeta.load(src, episodes=[1])
    assert ensure_sidecar(src, sub, repo_id="o/ds", cache_dir=tmp_path / "sub")[1] == "published"
    assert not _writes(hub)


def test_a_mismatched_published_sidecar_is_rejected_and_built_locally(hub, published, tmp_path, caplog):
    from huggingface_hub import HfApi

    out, _ = published
    # someone published the SHA1 index under SHA2's name
    HfApi(endpoint=hub.url, token="x").upload_file(
        path_or_fileobj=str(out),
        path_in_repo=f"meta/mp4-sidecars/mp4-v{SV}-{SHA2}.npz",
        repo_id="o/ds",
        repo_type="dataset",
        revision=BRANCH,
    )
    src = _open(hub, f"hf://datasets/o/ds@{SHA2}")
    hub.clear_log()
    with caplog.at_level(logging.WARNING, logger="lerobotstream.sidecar"):
        path, how = ensure_sidecar(src, repo_id="o/ds")
    assert how == "built" and "ignoring the published MP4 sidecar" in caplog.text and SHA2 in caplog.text
    assert load_manifest(path)["revision"] == SHA2
    assert not _writes(hub)
    # and pushing a sidecar that does not describe the source is refused before any write
    hub.clear_log()
    with pytest.raises(SidecarPublishError, match="does not describe"):
        push_sidecar(out, src)
    assert not _writes(hub)


def test_push_refuses_subsets_and_local_roots(hub, tmp_path, capsys):
    src = _open(hub, f"hf://datasets/o/ds@{SHA1}")
    sub = tmp_path / "subset.npz"
    build_sidecar(src, output=sub, repo_id="o/ds", episodes=[0, 1], progress=False)
    with pytest.raises(SidecarPublishError, match="only a complete dataset sidecar can be published"):
        push_sidecar(sub, src)
    with pytest.raises(SidecarPublishError, match="hf://"):
        push_sidecar(sub, LocalSource(hub.dirs[SHA1]))
    rc = sidecar_cli(
        [
            "build",
            "--repo-id",
            "o/ds",
            "--data-root",
            f"hf://datasets/o/ds@{SHA1}",
            "--output",
            str(tmp_path / "x.npz"),
            "--episodes",
            "0",
            "--push",
            "--endpoint",
            hub.url,
            "--no-progress",
        ]
    )
    assert rc == 2 and "only a complete dataset sidecar" in capsys.readouterr().err
    rc = sidecar_cli(
        [
            "build",
            "--repo-id",
            "o/ds",
            "--root",
            str(hub.dirs[SHA1]),
            "--output",
            str(tmp_path / "y.npz"),
            "--push",
            "--no-progress",
        ]
    )
    assert rc == 2 and "--push needs --data-root hf://" in capsys.readouterr().err
    assert not _writes(hub) and not (tmp_path / "x.npz").exists()


class RecordingApi:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append((name, a, k))


def _flip_payload_byte(video: Path, sidecar: Path) -> None:
    """Replace ``video`` with the same number of bytes, one sample payload byte changed (the boxes,
    hence the sample tables, stay the same)."""
    for src, arrays in load_tables(sidecar):
        if video.as_posix().endswith(src["path"]):
            pos = int(arrays["offset"][0] + arrays["size"][0] // 2)
            data = bytearray(video.read_bytes())
            data[pos] ^= 0xFF
            video.write_bytes(bytes(data))
            return
    raise AssertionError(f"{video} not in {sidecar}")


def test_bucket_publish_lookup_and_same_size_replacement(hub, tmp_path, caplog):
    bucket = hub.dirs["bucket"]
    src = _open(hub, "hf://buckets/o/bkt")
    # a maintainer's bucket sidecar (written in place: the loopback does not emulate Xet uploads)
    pub = bucket / "meta" / "mp4-sidecars" / f"mp4-v{SV}.npz"
    build_sidecar(src, output=tmp_path / "b.npz", repo_id="o/bkt", repo_type="bucket", progress=False)
    api = RecordingApi()
    assert push_sidecar(tmp_path / "b.npz", src, api=api) == f"hf://buckets/o/bkt/meta/mp4-sidecars/mp4-v{SV}.npz"
    assert [c[0] for c in api.calls] == ["batch_bucket_files"]  # no branch for buckets
    assert api.calls[0][2]["add"] == [(str(tmp_path / "b.npz"), f"meta/mp4-sidecars/mp4-v{SV}.npz")]
    pub.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(tmp_path / "b.npz", pub)
    try:
        hub.clear_log()
        path, how = ensure_sidecar(_open(hub, "hf://buckets/o/bkt"), repo_id="o/bkt", repo_type="bucket")
        assert how == "published" and not _writes(hub)
        assert all(s["fingerprint"].startswith("xet:") for s in load_manifest(path)["sources"])
        # same path, same size, different content: a new listing hash invalidates cache and publication
        video = bucket / load_manifest(path)["sources"][0]["path"]
        size = video.stat().st_size
        _flip_payload_byte(video, path)
        assert video.stat().st_size == size
        fresh = _open(hub, "hf://buckets/o/bkt")
        with caplog.at_level(logging.WARNING, logger="lerobotstream.sidecar"):
            path2, how2 = ensure_sidecar(fresh, repo_id="o/bkt", repo_type="bucket")
        assert how2 == "built" and path2 != path and "content fingerprint changed" in caplog.text
        assert ensure_sidecar(_open(hub, "hf://buckets/o/bkt"), repo_id="o/bkt", repo_type="bucket") == (path2, "cache")
        # a published bucket sidecar without fingerprints is rebuilt locally once, then cached
        build_sidecar(NoIdentitySource(bucket), output=pub, repo_id="o/bkt", repo_type="bucket", progress=False)
        assert all(s["fingerprint"] is None for s in load_manifest(pub)["sources"])
        cache = tmp_path / "other-cache"
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="lerobotstream.sidecar"):
            p3, how3 = ensure_sidecar(
                _open(hub, "hf://buckets/o/bkt"), repo_id="o/bkt", repo_type="bucket", cache_dir=cache
            )
        assert how3 == "built" and "no content fingerprint" in caplog.text
        assert ensure_sidecar(
            _open(hub, "hf://buckets/o/bkt"), repo_id="o/bkt", repo_type="bucket", cache_dir=cache
        ) == (p3, "cache")
        assert not _writes(hub)
    finally:
        shutil.rmtree(pub.parent, ignore_errors=True)
