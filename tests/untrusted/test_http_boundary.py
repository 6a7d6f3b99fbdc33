"""Untrusted input, the HTTP boundary: requests stay under the root, credentials with their origin,
and every body is bounded before it is read."""

from __future__ import annotations

import json
import shutil
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lerobotstream.errors import (
    MetadataError,
    RangeReadError,
    SourceChangedError,
    SourceError,
    SourceProtocolError,
)
from lerobotstream.meta import DatasetMeta
from lerobotstream.sources import open_source
from lerobotstream.sources._http import HttpSource
from lerobotstream.sources._http_transport import BodyTooLargeError, HttpClient, RetryPolicy
from lerobotstream.sources._hub import SIGNED_URL_TTL_S, HubSource, _linked_size, _signed_url_expiry
from lerobotstream.sources._paths import MAX_METADATA_FILE_NBYTES
from lerobotstream.testing import LoopbackServer

FAST = RetryPolicy(max_retries=2, backoff_base_s=0.001, backoff_cap_s=0.002)
TOKEN = "Bearer hf_SECRET"
SHA = "1" * 40


@pytest.fixture(scope="module")
def served(tmp_path_factory, make_generated_dataset):
    static = tmp_path_factory.mktemp("static")
    ds = static / "ds"
    shutil.copytree(make_generated_dataset(episode_lengths=(3, 4), codec="h264"), ds)
    (static / "secret.txt").write_text("SECRET")
    server = LoopbackServer.start(
        {"static": str(static), "datasets": {"lerobot/demo": {"refs": {"main": SHA}, "commits": {SHA: str(ds)}}}}
    )
    server.ds = ds
    yield server
    server.close()


@pytest.fixture
def signed(served):
    served.set_faults([])
    served.clear_log()
    src = HttpSource(served.static_url + "ds/?X-Sig=s3cr3t", headers={"Authorization": TOKEN}, retry=FAST)
    yield src
    src.close()


@pytest.mark.parametrize(
    "path", ["//127.0.0.1:1/x", "../secret.txt", "/static/secret.txt", "http://evil/x", "a/../../x"]
)
def test_a_signed_root_sends_nothing_outside_itself(served, signed, path):
    """``urljoin(root, quote(path))`` once sent the query and the Authorization header to another
    host (``//host/x``) or outside the root (``../x``, ``/x``)."""
    for call in (signed.size, signed.read_file, signed.exists):
        with pytest.raises(SourceError, match="paths stay inside the root") as e:
            call(path)
        assert "s3cr3t" not in str(e.value) and "SECRET" not in str(e.value)
    assert served.log() == []  # not one request
    try:  # a listing prefix may carry surrounding "/" ("/meta/" is "meta"): it still lists under the root
        signed.list(path)
    except SourceError:
        pass
    assert all(e["path"].startswith("/static/ds/") and e["query"] == "X-Sig=s3cr3t" for e in served.log())


def test_an_http_dataset_whose_info_points_elsewhere_is_refused_before_any_data_request(served, signed):
    info_path = served.ds / "meta/info.json"
    good = info_path.read_text()
    info = json.loads(good)
    info["data_path"] = "//127.0.0.1:9/steal/{chunk_index}.parquet"
    info_path.write_text(json.dumps(info))
    try:
        with pytest.raises(MetadataError, match="data_path .* is absolute") as e:
            DatasetMeta.load(signed)
        assert e.value.field == "data_path"
        assert all(entry["path"].startswith("/static/ds/") for entry in served.log())
    finally:
        info_path.write_text(good)


def test_credentials_go_only_to_the_roots_origin():
    src = HttpSource("https://data.example/ds/?X-Sig=s", headers={"Authorization": TOKEN})
    assert src._headers_for("https://data.example/other/x") == {"Authorization": TOKEN}  # same origin
    assert src._headers_for("https://data.example:443/ds/x") == {"Authorization": TOKEN}
    for url in ("http://data.example/ds/x", "https://data.example:8443/ds/x", "https://cdn.example/ds/x"):
        assert src._headers_for(url) == {}, url


def test_a_hub_redirect_from_https_to_http_on_the_same_host_carries_no_token():
    hub = object.__new__(HubSource)  # only the endpoint and headers matter here: no network
    hub.endpoint = "https://huggingface.co"
    hub._hub_headers = {"authorization": TOKEN}
    assert hub._headers_for("https://huggingface.co/api/x") == {"authorization": TOKEN}
    assert hub._headers_for("http://huggingface.co/api/x") == {}
    assert hub._headers_for("https://cdn-lfs.hf.co/x") == {}


def test_hub_paths_stay_in_the_repository(served, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    src = open_source("hf://datasets/lerobot/demo", endpoint=served.url, token="hf_SECRET", retry=FAST)
    served.clear_log()
    for path in ("../../other/x", "/etc/passwd", "meta/../../x"):
        with pytest.raises(SourceError, match="paths stay inside the root"):
            src.read(path, 0, 1)
        with pytest.raises(SourceError):
            src.resolve_url(path)
    with pytest.raises(SourceError):
        src.list("../")
    assert served.log() == []
    assert src.read_file("meta/info.json") == (served.ds / "meta/info.json").read_bytes()


def test_hub_answers_outside_the_protocol_are_typed():
    with pytest.raises(SourceProtocolError, match="'abc', which is not a number of bytes"):
        _linked_size("abc", "videos/a.mp4", "hub")
    assert _linked_size(" 42 ", "p", "hub") == 42
    now = 1_000_000.0
    for q in ("Expires=nan", "Expires=inf", "Expires=-inf", "Expires=abc", "X-Amz-Date=x&X-Amz-Expires=1"):
        assert _signed_url_expiry(f"https://cdn/x?{q}", now) == now + SIGNED_URL_TTL_S, q
    assert _signed_url_expiry("https://cdn/x?Expires=1000600", now) == 1_000_600.0


# --- bodies are bounded --------------------------------------------------------------------------------
@contextmanager
def _server(answer):
    """A server whose every GET is ``answer(handler)``; yields its base URL and a request counter."""
    hits = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            hits.append((self.path, self.headers.get("Range")))
            answer(self)

        do_HEAD = do_GET

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/ds/", hits
    finally:
        httpd.shutdown()
        httpd.server_close()


def _announce(nbytes: int, status: int = 200, extra: dict | None = None):
    """Headers announcing ``nbytes`` bytes, then the connection closes (a body never sent)."""

    def answer(h):
        h.send_response(status)
        h.send_header("Content-Length", str(nbytes))
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(b"x" * 16)
        h.close_connection = True

    return answer


def test_a_metadata_file_announcing_2_gib_is_refused_before_it_is_read():
    """A 2 GiB info.json once reached 4.4 GiB of memory."""
    with _server(_announce(2 << 30)) as (root, hits):
        src = HttpSource(root, retry=FAST)
        with pytest.raises(SourceError, match=rf"announces {2 << 30} bytes, more than the {MAX_METADATA_FILE_NBYTES}"):
            src.read_file("meta/info.json")
        assert len(hits) == 1  # not retried
        with pytest.raises(MetadataError, match="could not read meta/info.json .* it is not read"):
            DatasetMeta.load(src)


def test_a_body_longer_than_allowed_is_cut_while_reading():
    """No Content-Length: the limit holds while reading (close-delimited body)."""

    def answer(h):
        h.send_response(200)
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(b"y" * 100_000)
        h.close_connection = True

    with _server(answer) as (root, _hits):
        client = HttpClient(1, timeout_s=5.0)
        with pytest.raises(BodyTooLargeError, match="sends more bytes, more than the 1000 bytes"):
            client.send("GET", root + "meta/info.json", max_body_nbytes=1000)
        assert len(client.send("GET", root + "meta/info.json", max_body_nbytes=100_000).body) == 100_000


def _sized(nbytes: int):
    """HEAD: the file has ``nbytes`` bytes; GET: the answer ``then`` gives."""

    def wrap(then):
        def answer(h):
            if h.command == "HEAD":
                h.send_response(200)
                h.send_header("Content-Length", str(nbytes))
                h.send_header("ETag", '"e"')
                h.end_headers()
                return
            then(h)

        return answer

    return wrap


@pytest.mark.parametrize(
    "answer,why",
    [
        (_announce(2 << 30), f"HTTP 200 of {2 << 30} bytes for a range of 100 bytes"),
        (
            _announce(5000, 206, {"Content-Range": "bytes 1000-5999/10000"}),
            "HTTP 206 of 5000 bytes for a range of 100 bytes",
        ),
    ],
    ids=["200-whole-file", "206-wrong-length"],
)
def test_a_range_answer_of_another_length_is_dropped_unread(answer, why):
    """A 2 GiB ``200`` answer to a Range request once reached 6.5 GiB, once per retry."""
    with _server(_sized(10_000)(answer)) as (root, hits):
        src = HttpSource(root, retry=FAST)
        with pytest.raises(RangeReadError, match=rf"last error: {why}, dropped unread"):
            src.read("videos/a.mp4", 1000, 100)
        gets = [r for _p, r in hits if r]
        assert gets == ["bytes=1000-1099"] * (FAST.max_retries + 1)
        assert src.stats.bytes_read == 0


def test_a_short_range_answer_from_a_file_that_shrank_is_a_change_not_a_retry():
    """Dropping the body unread keeps the headers: a total that is not the file's size still says why."""
    answer = _announce(50, 206, {"Content-Range": "bytes 1000-1049/1050"})
    with _server(_sized(10_000)(answer)) as (root, hits):
        src = HttpSource(root, retry=FAST)
        with pytest.raises(SourceChangedError, match="it had 10000 bytes, the server now answers for 1050 bytes"):
            src.read("videos/a.mp4", 1000, 100)
        assert [r for _p, r in hits if r] == ["bytes=1000-1099"]


def test_loopback_server_never_serves_outside_its_folders(served):
    base = served.url
    for path in (
        "/static/..%2F..%2F..%2F..%2Fetc/",
        "/static/..%2F..%2F..%2F..%2Fetc/passwd",
        "/static/ds/..%2F..%2Fsecret.txt",
        "/static/%2E%2E/secret.txt",
        f"/api/datasets/lerobot/demo/tree/{SHA}/..%2F..%2F..",
        f"/datasets/lerobot/demo/resolve/{SHA}/..%2F..%2Fsecret.txt",
    ):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + path, timeout=10)
        assert e.value.code == 404, path
    with urllib.request.urlopen(base + "/static/secret.txt", timeout=10) as r:  # inside: served
        assert r.read() == b"SECRET"
