"""``HttpSource``: a dataset root behind a plain ``http(s)://`` URL, read with ``Range`` requests
(transport: :mod:`~lerobotstream.sources._http_transport`)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from lerobotstream.errors import SourceChangedError, SourceError, SourceNotFoundError
from lerobotstream.sources._base import ByteSource, check_file_size
from lerobotstream.sources._http_transport import (
    _MAX_REDIRECTS,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    HttpClient,
    RangeFetcher,
    Response,
    RetryPolicy,
    redact_url,
)
from lerobotstream.sources._paths import origin, same_origin, url_under


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            for k, v in attrs:
                if k == "href" and v:
                    self.links.append(v)


_REDIRECTS = (301, 302, 303, 307, 308)
#: folder pages of one listing level fetched at once
_LISTING_THREADS = 8


def _fingerprint(headers: Mapping[str, str], size: int) -> str | None:
    """``etag=<strong ETag>``, else ``last-modified=<date>:size=<n>``, else None (weak ETags do not
    identify bytes)."""
    etag = headers.get("etag")
    if etag and not etag.startswith("W/"):
        return f"etag={etag}"
    if "last-modified" in headers:
        return f"last-modified={headers['last-modified']}:size={size}"
    return None


class HttpSource(ByteSource):
    """Files under a plain ``http(s)://`` URL root, read with ``Range`` requests.

    Size and fingerprint come from one ``HEAD`` per file (cached): ``Content-Length`` and the
    strong ``ETag`` (else ``Last-Modified``). Redirects are followed by hand (at most
    :data:`_MAX_REDIRECTS`, resolved once per file); ``headers`` (e.g. ``Authorization``) go only
    to the root's origin. ``list`` parses HTML directory indexes.

    Args:
        root: ``http://`` or ``https://`` URL of the dataset root (user info is refused; a signed
            root's query string is sent with every request under it and never shown).
        headers: extra request headers for the root's host (never logged).
        max_connections, retry, timeout_s, read_timeout_s: as :func:`~lerobotstream.sources.open_source`.
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
        self.client = HttpClient(max_connections, timeout_s)
        self.fetcher = RangeFetcher(self.client, retry or RetryPolicy(), self.stats, read_timeout_s=read_timeout_s)
        self._meta: dict[str, tuple[str, int, str | None]] = {}  # path -> (final url, size, fingerprint)
        self._init_process_state()

    _PROCESS_LOCAL = ("_meta_lock",)  # the connection pool pickles itself empty (HttpClient)

    def _init_process_state(self) -> None:
        self._meta_lock = threading.Lock()

    def _url(self, path: str, *, folder: bool = False) -> str:
        """The URL of ``path`` (``folder``: of its index page) under the root, with the signed root's
        query; a path that would leave the root raises SourceError."""
        url = url_under(self.root, path, self.root_display, folder=folder)
        if folder and not url.endswith("/"):
            url += "/"
        return f"{url}?{self._query}" if self._query else url

    def _headers_for(self, url: str) -> dict[str, str]:
        """The caller's headers for the root's own origin (scheme, host, port); none elsewhere."""
        return dict(self._headers) if same_origin(url, self.root) else {}

    def _follow(self, method: str, path: str, url: str, **kw: Any) -> tuple[Any, str]:
        """``(last answer, its URL)`` of ``method`` on ``url`` (identity encoding), following at most
        :data:`_MAX_REDIRECTS` redirects (then SourceError)."""
        for _ in range(_MAX_REDIRECTS + 1):
            r = self.fetcher.request(
                method,
                lambda u=url: (u, {**self._headers_for(u), "Accept-Encoding": "identity"}),
                path=path,
                accept_redirect=True,
                **kw,
            )
            if r.status in _REDIRECTS and "location" in r.headers:
                url = urljoin(url, r.headers["location"])
                continue
            return r, url
        raise SourceError(f"too many redirects for {path!r} at {self.root_display}", path=path)

    def _head(self, path: str) -> tuple[str, int, str | None]:
        with self._meta_lock:
            hit = self._meta.get(path)
        if hit is not None:
            return hit
        r, url = self._follow("HEAD", path, self._url(path), metadata=True)
        if "content-length" not in r.headers:
            raise SourceError(f"no Content-Length for {path!r} at {redact_url(url)}", path=path)
        length = r.headers["content-length"].strip()
        if not (length.isascii() and length.isdigit()):
            raise SourceError(
                f"the HEAD of {path!r} at {redact_url(url)} has no valid Content-Length "
                f"({length[:40]!r}): the file's size is unknown",
                path=path,
                status=r.status,
            )
        size = int(length)
        hit = (url, size, _fingerprint(r.headers, size))
        with self._meta_lock:
            self._meta[path] = hit
        return hit

    def size(self, path: str) -> int:
        return self._head(path)[1]

    def fingerprint(self, path: str) -> str | None:
        return self._head(path)[2]

    def list(self, prefix: str) -> list[str]:
        """Files under ``prefix`` from the server's HTML directory indexes (recursive, sorted).

        A link counts when, resolved against its page's URL, it names a direct child of the page's
        folder on the root's host; sort links, parents and other hosts are skipped. A missing
        ``prefix`` (404) lists nothing.

        Raises:
            SourceError: the ``prefix`` page exists but links to nothing under it ("the server
                returned no directory listing for ..."): an empty folder, or a server without
                HTML indexes.
        """
        out: set[str] = set()
        base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        level = [base]
        seen = {base}
        while level:  # one level of folders at a time, its pages fetched concurrently
            with ThreadPoolExecutor(min(_LISTING_THREADS, len(level)), thread_name_prefix="lerobotstream-list") as ex:
                pages = list(ex.map(self._listing_page, level))
            deeper = []
            for folder, page in zip(level, pages):
                if page is None:  # 404
                    if folder == base:
                        return []
                    continue
                url, r = page
                children = self._listing_children(url, r.body, folder)
                if folder == base and not children:
                    raise SourceError(
                        f"the server returned no directory listing for {redact_url(url)}: the page (HTTP {r.status}, "
                        f"{len(r.body)} bytes) links to no file or folder under it. Serve HTML directory indexes "
                        "(e.g. nginx `autoindex on`, `python -m http.server`), or use a local, hf:// or fsspec root",
                        path=folder,
                    )
                for name in children:
                    if name.endswith("/"):
                        if folder + name not in seen:
                            seen.add(folder + name)
                            deeper.append(folder + name)
                    else:
                        out.add(folder + name)
            level = deeper
        return sorted(out)

    def _listing_page(self, folder: str) -> tuple[str, Response] | None:
        """``(url, answer)`` of the folder's index page, or None when it does not exist (404)."""
        url = self._url(folder, folder=True)
        try:
            return url, self.fetcher.request("GET", lambda u=url: (u, self._headers_for(u)), path=folder, metadata=True)
        except SourceNotFoundError:
            return None

    def _listing_children(self, page_url: str, body: bytes, folder: str) -> list[str]:
        """Names (``"x.mp4"``, ``"sub/"``) of the direct children of ``folder`` linked from its page."""
        parser = _LinkParser()
        parser.feed(body.decode("utf-8", "replace"))
        page = urlsplit(page_url)
        page_base = urlunsplit((page.scheme, page.netloc, page.path, "", ""))
        folder_path = unquote(urlsplit(self.root).path) + folder
        host = origin(page_base)
        names = []
        for href in parser.links:
            target = urljoin(page_base, href.strip())
            if origin(target) != host:
                continue
            t = urlsplit(target)
            path = unquote(t.path)
            if not path.startswith(folder_path):
                continue  # a parent, a sibling or another tree
            name = path[len(folder_path) :]
            if not name or "/" in name.rstrip("/") or name in (".", "./", "..", "../"):
                continue  # the page itself (sort links), deeper paths
            names.append(name)
        return names

    def _fetch(self, path: str, offset: int, length: int) -> bytes:
        url, size, fingerprint = self._head(path)
        r = self.fetcher.request(
            "GET",
            lambda: (url, self._headers_for(url)),
            path=path,
            offset=offset,
            length=length,
            expect=(size, fingerprint),
        )
        return r.body

    def read_file(self, path: str) -> bytes:
        """The whole file with one ``GET`` and no ``HEAD`` first (for small metadata files); the final
        URL, size and fingerprint are cached as a ``HEAD``'s would be, or checked when known.

        Raises:
            SourceNotFoundError: the file does not exist (404/410).
            SourceChangedError: the file changed since its size or fingerprint were read (names the URL).
            SourceError: the body is larger than ``MAX_METADATA_FILE_NBYTES``, or any other failure
                (a non-200 success, a compressed body, too many redirects, retries ran out).
        """
        with self._meta_lock:
            known = self._meta.get(path)
        if known is not None:
            check_file_size(path, known[1], self.root_display)
        r, url = self._follow("GET", path, known[0] if known is not None else self._url(path))
        where = redact_url(url)
        if r.status != 200:
            raise SourceError(
                f"reading {path!r} from {where}: expected HTTP 200 for a whole-file GET, got {r.status}",
                path=path,
                status=r.status,
            )
        encoding = r.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise SourceError(
                f"reading {path!r} from {where}: the server sent a {encoding!r}-encoded body although "
                "we asked for identity; its bytes are not the file's",
                path=path,
                status=r.status,
            )
        size = len(r.body)
        fp = _fingerprint(r.headers, size)
        if known is not None and (known[1] != size or (known[2] is not None and fp is not None and known[2] != fp)):
            raise SourceChangedError(
                f"{path!r} at {where} changed while being read: it had {known[1]} bytes ({known[2]}), the GET "
                f"returned {size} bytes ({fp}); restart to read the new version",
                path=path,
            )
        if known is None:
            with self._meta_lock:
                self._meta.setdefault(path, (url, size, fp))
        self.stats.add(bytes_requested=size)
        return r.body

    def close(self) -> None:
        self.client.close()
