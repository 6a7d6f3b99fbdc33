"""HttpSource edge cases a plain static server shows: absolute hrefs in listings, a page without
a listing, a signed root (query string on every request), a server that never answers.

Each test runs its own small loopback server in a thread (``http.server``), configured per test;
nothing here depends on timing except the stalled-server tests, which only bound the wait from
above (a generous limit that catches the old multi-minute hang, never a tight one).
"""

from __future__ import annotations

import html
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pytest

from lerobotstream.errors import MetadataError, SourceAuthError, SourceError, SourceTimeoutError, StreamingConfigError
from lerobotstream.meta import DatasetMeta
from lerobotstream.sources import open_source
from lerobotstream.sources._http import HttpSource
from lerobotstream.sources._http_transport import RetryPolicy

REPO = Path(__file__).resolve().parents[2]
G1 = REPO / "data" / "g1_v30"
FAST = RetryPolicy(max_retries=2, backoff_base_s=0.001, backoff_cap_s=0.01)
SECRET = "X-Sig=s3cr3t-signature&Expires=9999999999"


class _Server:
    """Static files of ``folder`` under ``/<mount>/`` with HEAD, single Range, HTML indexes.

    ``hrefs``: how index links are written — ``"relative"`` (``name``), ``"absolute"``
    (``/<mount>/dir/name``, as many servers do), ``"url"`` (``http://host:port/<mount>/dir/name``)
    or ``"none"`` (a page without any link). ``require_query``: every request must carry exactly
    this query string (else 403), as a signed root's storage would.
    """

    def __init__(
        self, folder: Path, *, mount: str = "ds", hrefs: str = "relative", require_query: str | None = None
    ) -> None:
        self.folder, self.mount, self.hrefs, self.require_query = folder, mount, hrefs, require_query
        self.log: list[tuple[str, str, str]] = []  # (method, path, query)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                outer._answer(self)

            def do_GET(self):
                outer._answer(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = f"{self.base}/{mount}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _send(self, h, status: int, body: bytes = b"", headers: dict | None = None, ctype="text/html"):
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _answer(self, h) -> None:
        u = urlsplit(h.path)
        path = unquote(u.path)
        self.log.append((h.command, path, u.query))
        if self.require_query is not None and u.query != self.require_query:
            return self._send(h, 403, b"<Error>signature does not match</Error>")
        prefix = f"/{self.mount}/"
        if not path.startswith(prefix):
            return self._send(h, 404, b"not found")
        rel = path[len(prefix) :]
        p = (self.folder / rel) if rel else self.folder
        if p.is_dir():
            return self._send(h, 200, self._index(p, path).encode())
        if not p.is_file():
            return self._send(h, 404, b"not found")
        data = p.read_bytes()
        headers = {"ETag": f'"{len(data)}-{p.stat().st_mtime_ns}"', "Accept-Ranges": "bytes"}
        rng = h.headers.get("Range")
        if not rng:
            return self._send(h, 200, data, headers, "application/octet-stream")
        a, b = (int(x) for x in rng.split("=", 1)[1].split("-"))
        b = min(b, len(data) - 1)
        headers["Content-Range"] = f"bytes {a}-{b}/{len(data)}"
        self._send(h, 206, data[a : b + 1], headers, "application/octet-stream")

    def _index(self, folder: Path, page_path: str) -> str:
        if self.hrefs == "none":
            return "<html><body><h1>Welcome</h1><p>Nothing to see here.</p></body></html>"
        links = [
            '<a href="../">Parent Directory</a>',
            '<a href="?C=N;O=D">Name</a>',
            '<a href="/">Home</a>',
            '<a href="http://elsewhere.example/ds/x.bin">mirror</a>',
        ]
        for c in sorted(folder.iterdir()):
            name = quote(c.name) + ("/" if c.is_dir() else "")
            href = {"relative": name, "absolute": quote(page_path) + name, "url": self.base + quote(page_path) + name}[
                self.hrefs
            ]
            links.append(f'<a href="{href}">{html.escape(c.name)}</a>')
        return "<html><body>" + "\n".join(links) + "</body></html>"


@pytest.fixture
def serve():
    servers = []

    def start(folder: Path = G1, **kw) -> _Server:
        s = _Server(folder, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def _files(folder: Path, sub: str = "") -> list[str]:
    base = folder / sub if sub else folder
    return sorted(p.relative_to(folder).as_posix() for p in base.rglob("*") if p.is_file())


# --- listings (issue 17 item 2) -----------------------------------------------------------------
@pytest.mark.parametrize("hrefs", ["relative", "absolute", "url"])
def test_listing_resolves_relative_absolute_and_full_url_hrefs(serve, hrefs):
    server = serve(hrefs=hrefs)
    src = open_source(server.url, retry=FAST)
    assert src.list("") == _files(G1)
    assert src.list("meta/episodes") == _files(G1, "meta/episodes")
    meta = DatasetMeta.load(src)  # lists meta/episodes: "no episode metadata" before the fix
    assert meta.total_episodes == 2
    # parents, sort links, the server's home page and other hosts were never followed
    assert not any(p in ("/", f"/{server.mount}/../") for _, p, _ in server.log)


def test_a_page_without_a_listing_says_so(serve):
    server = serve(hrefs="none")
    src = open_source(server.url, retry=FAST)
    with pytest.raises(
        SourceError,
        match=r"the server returned no directory listing for "
        rf"{server.url}meta/episodes/",
    ):
        src.list("meta/episodes")
    assert src.list("no/such/folder") == []  # a missing folder (404) lists nothing, as on disk


# --- signed roots (issue 17 item 8) -------------------------------------------------------------
def test_signed_root_keeps_its_path_and_query_on_every_request(serve, caplog):
    server = serve(hrefs="absolute", require_query=SECRET)
    root = f"{server.url.rstrip('/')}?{SECRET}"
    src = open_source(root, retry=FAST)
    assert isinstance(src, HttpSource)
    meta = DatasetMeta.load(src)
    video = meta.video_paths()[0]
    assert src.read(video, 0, 64) == (G1 / video).read_bytes()[:64]
    assert src.list("videos") == _files(G1, "videos")
    assert server.log and all(p.startswith(f"/{server.mount}/") for _, p, _ in server.log)  # never /meta/...
    assert all(q == SECRET for _, _, q in server.log)  # the query rides on HEAD, GET and listings alike
    # the query never shows: repr, root_display, errors, logs
    assert "s3cr3t" not in repr(src) and "s3cr3t" not in src.root_display
    with pytest.raises(SourceError) as ei:
        src.read("meta/missing.json", 0, 1)
    assert "s3cr3t" not in str(ei.value) and server.url in str(ei.value)
    assert "s3cr3t" not in caplog.text


def test_signed_root_refused_signature_is_named_without_the_signature(serve):
    server = serve(require_query=SECRET)
    src = open_source(f"{server.url}?X-Sig=wrong-secret", retry=FAST)
    with pytest.raises(SourceAuthError) as ei:
        src.size("meta/info.json")
    assert "wrong-secret" not in str(ei.value) and f"{server.url}meta/info.json" in str(ei.value)


# --- a server that accepts and never answers (issue 17 item 9) ----------------------------------
@pytest.fixture
def stalled():
    """A TCP port whose kernel accepts connections (listen backlog) while nobody ever answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/ds/"
    sock.close()


def test_stalled_server_fails_after_read_timeout_naming_url_and_wait(stalled):
    src = open_source(
        stalled,
        retry=RetryPolicy(max_retries=5, backoff_base_s=0.01, backoff_cap_s=0.05),
        timeout_s=60.0,
        read_timeout_s=0.5,
    )
    t0 = time.monotonic()
    with pytest.raises(SourceTimeoutError) as ei:
        src.read("videos/a.mp4", 0, 100)
    waited = time.monotonic() - t0
    msg = str(ei.value)
    assert f"{stalled}videos/a.mp4" in msg and "read_timeout_s=0.5 s" in msg and "waited " in msg
    assert ei.value.waited_s >= 0.5 and isinstance(ei.value, TimeoutError) and isinstance(ei.value, SourceError)
    assert waited < 30  # 6 attempts x 60 s socket timeout before the deadline existed


def test_stalled_server_retries_inside_the_deadline(stalled):
    src = open_source(
        stalled,
        retry=RetryPolicy(max_retries=50, backoff_base_s=0.001, backoff_cap_s=0.001),
        timeout_s=0.1,
        read_timeout_s=0.6,
    )
    with pytest.raises(SourceTimeoutError, match=r"over \d+ attempt\(s\); last error: TimeoutError on HEAD") as ei:
        src.size("meta/info.json")
    assert "meta/info.json" in str(ei.value) and src.stats.retries >= 1


def test_dataset_takes_read_timeout_s(stalled):
    from lerobotstream import StreamingLeRobotDataset

    with pytest.raises(StreamingConfigError, match="read_timeout_s must be a number > 0"):
        StreamingLeRobotDataset(root=stalled, read_timeout_s=0)
    # meta/info.json is the first read: MetadataError carries the source's message
    with pytest.raises(
        MetadataError, match=rf"{stalled}meta/info.json: no complete answer within read_timeout_s=0\.3 s"
    ):
        StreamingLeRobotDataset(root=stalled, read_timeout_s=0.3)


def test_signed_root_end_to_end_leaves_no_trace_of_the_query(serve, tmp_path, monkeypatch, caplog):
    import logging

    from lerobotstream import StreamingLeRobotDataset, constants

    monkeypatch.setattr(constants, "SIDECAR_DIR", tmp_path / "sidecars")
    monkeypatch.setattr(constants, "INDEX_DIR", tmp_path / "indexes")
    server = serve(hrefs="absolute", require_query=SECRET)
    caplog.set_level(logging.DEBUG, logger="lerobotstream")
    ds = StreamingLeRobotDataset(root=f"{server.url}?{SECRET}", episodes=[0])
    item = next(iter(ds))
    assert item["episode_index"] == 0 and all(q == SECRET for _, _, q in server.log)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written  # the sidecar and its derived index
    for p in written:
        assert "s3cr3t" not in str(p) and b"s3cr3t" not in p.read_bytes(), p
    assert "s3cr3t" not in caplog.text
