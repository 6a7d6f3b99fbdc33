"""``HttpSource``: a dataset root behind a plain ``http(s)://`` URL, read with ``Range`` requests.

Sizes and fingerprints come from one ``HEAD`` per file; ``list`` parses HTML directory indexes.
Connections, retries, checked ranges and time limits are the transport's
(:mod:`lerobotstream.sources._http_transport`, whose names are re-exported here).

Signed roots: a root URL with a query string (``https://host/ds?X-Sig=...``) keeps that query on
every request under it; it never appears in a message, a log line or a sidecar (:func:`redact_url`).
"""

from __future__ import annotations

import threading
from html.parser import HTMLParser
from typing import Mapping, Sequence
from urllib.parse import quote, unquote, urljoin, urlsplit, urlunsplit

from lerobotstream.errors import SourceError, SourceNotFoundError
from lerobotstream.sources._base import ByteSource
from lerobotstream.sources._http_transport import (  # noqa: F401  (re-exported: callers import them from here)
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_TIMEOUT_S,
    DEFAULT_READ_TIMEOUT_S,
    RETRY_STATUSES,
    RetryPolicy,
    Response,
    TransportError,
    HttpClient,
    RangeFetcher,
    check_range_response,
    error_for,
    redact_url,
    _MAX_REDIRECTS,
)


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            for k, v in attrs:
                if k == "href" and v:
                    self.links.append(v)


def _host_key(parts) -> tuple[str, str, int]:
    scheme = (parts.scheme or "").lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


class HttpSource(ByteSource):
    """Files under a plain ``http(s)://`` URL root, read with ``Range`` requests.

    Size and fingerprint come from one ``HEAD`` per file (cached): ``Content-Length`` and the
    strong ``ETag`` (else ``Last-Modified``). Redirects are followed by hand, at most
    :data:`_MAX_REDIRECTS`, resolved once per file and cached; headers given in ``headers`` (e.g.
    ``Authorization``) are sent only to the root's host. ``list`` parses HTML directory indexes.

    Args:
        root: ``http://`` or ``https://`` URL of the dataset root (user info is refused). A query
            string (a signed root, ``?X-Sig=...``) is sent with every request under the root and
            never shown.
        headers: extra request headers for the root's host (never logged).
        max_connections: open connections per process.
        retry: retry policy.
        timeout_s: socket timeout of each connect and each wait for bytes, seconds.
        read_timeout_s: longest one read may take, every attempt and backoff included, seconds.
    """

    def __init__(
        self,
        root: str,
        *,
        headers: Mapping[str, str] | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        retry: RetryPolicy | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        super().__init__()
        parts = urlsplit(root)
        if parts.username or parts.password:
            raise SourceError(f"credentials in the URL are not supported: {redact_url(root)}; pass headers= instead")
        #: the root URL without query or fragment, ending with "/"
        self.root = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/", "", ""))
        self._query = parts.query  # a signed root's query: sent with every request, never shown
        self.root_display = redact_url(self.root)
        self._headers = dict(headers or {})
        self._host = (parts.scheme, parts.hostname, parts.port)
        self.client = HttpClient(max_connections, timeout_s)
        self.fetcher = RangeFetcher(self.client, retry or RetryPolicy(), self.stats, read_timeout_s=read_timeout_s)
        self._meta: dict[str, tuple[str, int, str | None]] = {}  # path -> (final url, size, fingerprint)
        self._init_process_state()

    _PROCESS_LOCAL = ("_meta_lock",)  # the connection pool pickles itself empty (HttpClient)

    def _init_process_state(self) -> None:
        self._meta_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"HttpSource({self.root_display!r})"

    def _url(self, path: str) -> str:
        url = urljoin(self.root, quote(path))
        return f"{url}?{self._query}" if self._query else url

    def _headers_for(self, url: str) -> dict[str, str]:
        p = urlsplit(url)
        same = (p.scheme, p.hostname, p.port) == self._host
        return dict(self._headers) if same else {}

    def _head(self, path: str) -> tuple[str, int, str | None]:
        with self._meta_lock:
            hit = self._meta.get(path)
        if hit is not None:
            return hit
        url = self._url(path)
        for _ in range(_MAX_REDIRECTS + 1):
            r = self.fetcher.request(
                "HEAD", lambda u=url: (u, {**self._headers_for(u), "Accept-Encoding": "identity"}),
                path=path, metadata=True, accept_redirect=True,
            )
            if r.status in (301, 302, 303, 307, 308) and "location" in r.headers:
                url = urljoin(url, r.headers["location"])
                continue
            break
        else:
            raise SourceError(f"too many redirects for {path!r} at {self.root_display}", path=path)
        if "content-length" not in r.headers:
            raise SourceError(f"no Content-Length for {path!r} at {redact_url(url)}", path=path)
        etag = r.headers.get("etag")
        fp = f"etag={etag}" if etag and not etag.startswith("W/") else (
            f"last-modified={r.headers['last-modified']}:size={r.headers['content-length']}" if "last-modified" in r.headers else None)
        hit = (url, int(r.headers["content-length"]), fp)
        with self._meta_lock:
            self._meta[path] = hit
        return hit

    def size(self, path: str) -> int:
        return self._head(path)[1]

    def fingerprint(self, path: str) -> str | None:
        return self._head(path)[2]

    def list(self, prefix: str) -> list[str]:
        """Files under ``prefix`` from the server's HTML directory indexes (recursive, sorted).

        Each link is resolved against its page's URL (``urljoin``), so relative (``name``,
        ``./name``), absolute-path (``/ds/dir/name``) and full-URL links all count when they point
        to a direct child of the page's folder on the root's host; sort links, parents and other
        hosts are skipped. A missing ``prefix`` folder (404) lists nothing.

        Raises:
            SourceError: the ``prefix`` page exists but links to nothing under it ("the server
                returned no directory listing for ..."): an empty folder, or a server without
                HTML indexes.
        """
        out: set[str] = set()
        base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        todo = [base]
        seen = {base}
        while todo:
            folder = todo.pop()
            url = self._url(folder)
            try:
                r = self.fetcher.request("GET", lambda u=url: (u, self._headers_for(u)), path=folder, metadata=True)
            except SourceNotFoundError:
                if folder == base:
                    return []
                continue
            children = self._listing_children(url, r.body, folder)
            if folder == base and not children:
                raise SourceError(
                    f"the server returned no directory listing for {redact_url(url)}: the page (HTTP {r.status}, "
                    f"{len(r.body)} bytes) links to no file or folder under it. Serve HTML directory indexes "
                    "(e.g. nginx `autoindex on`, `python -m http.server`), or use a local, hf:// or fsspec root",
                    path=folder)
            for name in children:
                if name.endswith("/"):
                    if folder + name not in seen:
                        seen.add(folder + name)
                        todo.append(folder + name)
                else:
                    out.add(folder + name)
        return sorted(out)

    def _listing_children(self, page_url: str, body: bytes, folder: str) -> list[str]:
        """Names (``"x.mp4"``, ``"sub/"``) of the direct children of ``folder`` linked from its page."""
        parser = _LinkParser()
        parser.feed(body.decode("utf-8", "replace"))
        page = urlsplit(page_url)
        page_base = urlunsplit((page.scheme, page.netloc, page.path, "", ""))
        folder_path = unquote(urlsplit(self.root).path) + folder
        host = _host_key(page)
        names = []
        for href in parser.links:
            t = urlsplit(urljoin(page_base, href.strip()))
            if _host_key(t) != host:
                continue
            path = unquote(t.path)
            if not path.startswith(folder_path):
                continue  # a parent, a sibling or another tree
            name = path[len(folder_path):]
            if not name or "/" in name.rstrip("/") or name in (".", "./", "..", "../"):
                continue  # the page itself (sort links), deeper paths
            names.append(name)
        return names

    def _fetch(self, path: str, offset: int, length: int) -> bytes:
        url = self._head(path)[0]
        r = self.fetcher.request("GET", lambda: (url, self._headers_for(url)), path=path,
                                 offset=offset, length=length)
        return r.body

    def _read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        size = self.size(path)
        from lerobotstream.sources._base import check_ranges

        check_ranges(path, ranges, size)
        return self._read_coalesced(path, ranges)

    def close(self) -> None:
        self.client.close()

