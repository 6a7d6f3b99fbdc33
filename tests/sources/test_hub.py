"""hf:// datasets and buckets through the real huggingface_hub client against a loopback Hub."""

from __future__ import annotations

import pytest

from lerobotstream.errors import SourceChangedError, SourceError, SourceNotFoundError
from lerobotstream.sources import open_source
from lerobotstream.sources._http_transport import RetryPolicy
from lerobotstream.sources._hub import HubSource
from lerobotstream.testing import LoopbackServer

FAST = RetryPolicy(max_retries=3, backoff_base_s=0.001, backoff_cap_s=0.01, max_retry_after_s=2.0)
SHA1, SHA2 = "1" * 40, "2" * 40
TOKEN = "hf_loopbackSECRETtoken"
VID = "videos/cam/chunk-000/file-000.mp4"


def _write(folder, fill: bytes):
    (folder / "videos" / "cam" / "chunk-000").mkdir(parents=True)
    (folder / "videos" / "cam" / "chunk-000" / "file-000.mp4").write_bytes(fill * 100_000)
    (folder / "meta").mkdir()
    (folder / "meta" / "info.json").write_bytes(b'{"fps": 30}')


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    a, b, bkt = (tmp_path_factory.mktemp(n) for n in ("commit1", "commit2", "bucket"))
    _write(a, b"A")
    _write(b, b"B")  # same paths, same sizes, different bytes
    _write(bkt, b"K")
    server = LoopbackServer.start(
        {
            "datasets": {"lerobot/demo": {"refs": {"main": SHA1}, "commits": {SHA1: str(a), SHA2: str(b)}}},
            "buckets": {"lerobot/bkt": str(bkt)},
            "signed_ttl_s": 600,
        }
    )
    server.bucket_dir = bkt
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _online(monkeypatch, hub):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # loopback only: endpoint is 127.0.0.1
    hub.set_faults([])
    hub.set_ref("lerobot/demo", "main", SHA1)
    hub.clear_log()


def _open(hub, root="hf://datasets/lerobot/demo", **kw):
    return open_source(root, endpoint=hub.url, token=TOKEN, retry=FAST, **kw)


def test_reads_are_pinned_to_the_resolved_commit(hub):
    src = _open(hub)
    assert isinstance(src, HubSource) and src.commit == SHA1
    assert src.root_display == f"hf://datasets/lerobot/demo@{SHA1}"
    assert src.read(VID, 10, 5) == b"AAAAA"
    hub.set_ref("lerobot/demo", "main", SHA2)  # the branch moves mid-run
    assert src.read(VID, 50_000, 5) == b"AAAAA"
    assert src.read_file("meta/info.json") == b'{"fps": 30}'
    assert src.size(VID) == 100_000 and src.list("videos") == [VID]
    log = hub.log()
    revision_calls = [e for e in log if "/revision/" in e["path"]]
    assert [e["path"] for e in revision_calls] == ["/api/datasets/lerobot/demo/revision/main"]  # resolved once
    for e in log:
        if e is not revision_calls[0] and e["host"] == "hub":
            assert SHA1 in e["path"], e  # every later Hub call names the commit, never "main"
    assert not [e for e in log if e["method"] in ("POST", "PUT", "DELETE", "PATCH")]  # training never writes
    # a new run sees the moved branch, and the fingerprint tells the contents apart at equal size
    src2 = _open(hub)
    assert src2.commit == SHA2 and src2.read(VID, 10, 5) == b"BBBBB"
    assert src2.size(VID) == src.size(VID) and src2.fingerprint(VID) != src.fingerprint(VID)
    assert src.fingerprint(VID).startswith("sha256:")


def test_redirect_resolved_once_per_file_and_no_auth_to_other_host(hub):
    src = _open(hub, "hf://datasets/lerobot/demo@" + SHA1)
    for i in range(10):
        assert src.read_ranges(VID, [(i * 1000, 10), (60_000 + i * 1000, 10)]) == [b"A" * 10] * 2
    log = hub.log()
    resolves = [e for e in log if "/resolve/" in e["path"]]
    cdn = [e for e in log if e["host"] == "cdn"]
    assert len(resolves) == 1 and resolves[0]["method"] == "HEAD" and resolves[0]["auth"]
    assert len(cdn) == 20 and not any(e["auth"] for e in cdn)  # Authorization stays on the Hub host
    assert all(e["range"] for e in cdn)


def test_refused_signed_url_is_refreshed_once(hub):
    src = _open(hub)
    src.read(VID, 0, 1)
    hub.set_faults([{"kind": "status", "status": 403, "match": "/cdn/", "count": 1}])
    assert src.read(VID, 5, 3) == b"AAA"
    resolves = [e for e in hub.log() if "/resolve/" in e["path"]]
    assert len(resolves) == 2  # the expired/refused URL was resolved again, once


def test_429_with_retry_after_on_resolve_and_cdn(hub):
    src = _open(hub)
    sleeps = []
    src.fetcher._sleep = sleeps.append
    hub.set_faults(
        [
            {
                "kind": "status",
                "status": 429,
                "retry_after": "1",
                "match": "/resolve/",
                "methods": ["HEAD"],
                "count": 1,
            },
            {"kind": "status", "status": 500, "match": "/cdn/", "count": 1},
            {"kind": "truncate", "match": "/cdn/", "count": 1},
        ]
    )
    assert src.read(VID, 0, 20_000) == b"A" * 20_000
    assert sleeps[0] == 1.0 and src.stats.retries == 3


def test_errors_are_typed_and_free_of_credentials(hub, monkeypatch):
    with pytest.raises(SourceNotFoundError) as ei:
        _open(hub, "hf://datasets/lerobot/demo@no-such-branch")
    assert TOKEN not in str(ei.value)
    with pytest.raises(SourceNotFoundError):
        _open(hub, "hf://datasets/lerobot/nope")
    src = _open(hub)
    assert TOKEN not in repr(src) and TOKEN not in src.root_display
    with pytest.raises(SourceNotFoundError):
        src.read("videos/cam/chunk-000/file-009.mp4", 0, 1)
    with pytest.raises(SourceError, match="sub-folder"):
        _open(hub, "hf://datasets/lerobot/demo/sub")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(SourceError, match="offline"):
        _open(hub)


def test_repo_id_and_revision_arguments(hub):
    src = open_source(repo_id="lerobot/demo", revision=SHA2, endpoint=hub.url, token=TOKEN)
    assert src.commit == SHA2 and src.read(VID, 0, 2) == b"BB"


def test_bucket_listing_fingerprints_and_replacement(hub):
    src = _open(hub, "hf://buckets/lerobot/bkt")
    same = open_source(repo_id="lerobot/bkt", repo_type="bucket", endpoint=hub.url, token=TOKEN)
    assert src.root_display == "hf://buckets/lerobot/bkt" and same.root_display == src.root_display
    assert src.list("") == ["meta/info.json", VID]
    fp = src.fingerprint(VID)
    assert fp.startswith("xet:") and src.read(VID, 0, 3) == b"KKK"
    assert not [e for e in hub.log() if e["method"] in ("POST", "PUT", "DELETE")]
    # replace the video at the same path with the same size: a fresh listing sees a new hash
    path = hub.bucket_dir / VID
    old = path.read_bytes()
    try:
        path.write_bytes(b"Z" * len(old))
        fresh = _open(hub, "hf://buckets/lerobot/bkt")
        assert fresh.size(VID) == src.size(VID) and fresh.fingerprint(VID) != fp
        # a source that listed the old object refuses to read the new bytes under the old identity
        stale = _open(hub, "hf://buckets/lerobot/bkt")
        stale._folders["videos/cam/chunk-000"] = {VID: (len(old), fp)}
        with pytest.raises(SourceChangedError):
            stale.read(VID, 0, 3)
    finally:
        path.write_bytes(old)


def test_unreachable_hub_says_what_to_do(hub):
    """Issue 29 (new user, item 4): a connection error named only httpx's ConnectError; it says
    what to do without a network."""
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SourceError) as ei:
        open_source(repo_id="lerobot/demo", endpoint=f"http://127.0.0.1:{port}", token=TOKEN, retry=FAST)
    msg = str(ei.value)
    assert "no network? pass root=" in msg and "HF_HUB_OFFLINE=1" in msg and TOKEN not in msg
    with pytest.raises(SourceNotFoundError) as ei:  # an answer from the Hub: no network hint
        _open(hub, "hf://datasets/lerobot/nope")
    assert "no network" not in str(ei.value)


def test_local_copy_comes_before_the_hub(hub, tmp_path, monkeypatch):
    """Issue 29 (new user, item 1): with root unset, $HF_LEROBOT_HOME/<repo_id> is read before
    the Hub is asked anything (LeRobot's rule)."""
    from lerobotstream import constants

    monkeypatch.setattr(constants, "HF_LEROBOT_HOME", tmp_path)
    _write(tmp_path / "lerobot" / "demo", b"L")
    src = open_source(repo_id="lerobot/demo", revision=SHA2, endpoint=hub.url, token=TOKEN)
    assert not isinstance(src, HubSource) and src.read(VID, 0, 2) == b"LL"
    assert hub.log() == []  # the Hub was not asked
