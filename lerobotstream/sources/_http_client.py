"""HTTP client: bounded keep-alive connections per process, every answer's body bounded.

Built on the standard library's ``http.client`` so that every byte on the wire is ours to check:
no read-ahead, no automatic redirects (so ``Authorization`` never follows a redirect to another
host). A body is read only when its size is what the request allows: a range answer of another
length is dropped unread (:attr:`Response.dropped`), a success body above its cap is refused
(:class:`BodyTooLargeError`) from its ``Content-Length`` before reading and while reading, an
error or redirect page is cut at :data:`_ERROR_BODY_NBYTES`. Retries, checked ranges and time
limits over it: :mod:`lerobotstream.sources._http_transport`.

URLs in messages go through :func:`redact_url` (no user info, no query: signed URLs stay secret).
"""

from __future__ import annotations

import http.client
import os
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from lerobotstream.errors import SourceError
from lerobotstream.sources._paths import MAX_METADATA_FILE_NBYTES

#: connections per process and per client (shared by all threads of the process)
DEFAULT_MAX_CONNECTIONS = 16
#: seconds before a connect or one wait for bytes on the socket gives up (then retried)
DEFAULT_TIMEOUT_S = 30.0
#: bytes per socket read of a response body (the deadline is checked between them)
_BODY_CHUNK_BYTES = 1 << 20
#: bytes of an error or redirect answer's body kept (the rest is not read; its connection is closed)
_ERROR_BODY_NBYTES = 64 * 1024
_FORK_LOCK = threading.Lock()  # guards the per-PID pool reset; re-created in a forked child
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: globals().__setitem__("_FORK_LOCK", threading.Lock()))


def redact_url(url: str) -> str:
    """``scheme://host[:port]/path`` without user info, query string or fragment (signed URLs
    carry credentials in the query)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"


@dataclass
class Response:
    """One complete HTTP answer (body fully read)."""

    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    url: str
    dropped: str | None = None
    """Why the body was not read (a range answer of another length), else None."""


class TransportError(Exception):
    """A request failed below HTTP (connect, reset, timeout, truncated body); always retryable."""


class _Dropped(Exception):
    """A range answer of the wrong length: its body is not read (``Response.dropped``)."""


class BodyTooLargeError(Exception):
    """A success body longer than the request allows (announced, or seen while reading); not read."""

    def __init__(self, declared: int | None, limit: int) -> None:
        what = f"announces {declared} bytes" if declared is not None else "sends more bytes"
        super().__init__(f"the answer {what}, more than the {limit} bytes allowed; it is not read")


class HttpClient:
    """Keep-alive ``http.client`` connections, at most ``max_connections`` open per process.

    Thread-safe. Fork-safe: the pool is keyed by PID, so a forked worker opens its own sockets and
    never touches its parent's.
    """

    def __init__(self, max_connections: int = DEFAULT_MAX_CONNECTIONS, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self.max_connections = max_connections
        self.timeout_s = timeout_s
        self._pid = -1
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._num_idle = 0
        self._ssl: ssl.SSLContext | None = None

    def _check_pid(self) -> None:
        if self._pid != os.getpid():
            with _FORK_LOCK:
                if self._pid != os.getpid():
                    self._reset()  # forked: drop (never close, never use) the parent's sockets

    def __getstate__(self):
        return {"max_connections": self.max_connections, "timeout_s": self.timeout_s}

    def __setstate__(self, state):
        self.__init__(**state)

    def _take(self, key: tuple[str, str, int]) -> http.client.HTTPConnection:
        with self._lock:
            conns = self._idle.get(key)
            if conns:
                self._num_idle -= 1
                return conns.pop()
        scheme, host, port = key
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
                try:
                    import certifi  # optional: the same CA bundle as the Hub client

                    self._ssl.load_verify_locations(certifi.where())
                except ImportError:
                    pass
            return http.client.HTTPSConnection(host, port, timeout=self.timeout_s, context=self._ssl)
        return http.client.HTTPConnection(host, port, timeout=self.timeout_s)

    def _give_back(self, key, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            # Keep at most max_connections sockets idle; together with the slot semaphore no more
            # than max_connections are ever in use, and idle ones beyond the cap are closed.
            if self._num_idle >= self.max_connections:
                victim_key = next((k for k, v in self._idle.items() if v), None)
                if victim_key is not None:
                    self._idle[victim_key].pop(0).close()
                    self._num_idle -= 1
            self._idle.setdefault(key, []).append(conn)
            self._num_idle += 1

    def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        deadline: float | None = None,
        want_nbytes: int | None = None,
        max_body_nbytes: int = MAX_METADATA_FILE_NBYTES,
    ) -> Response:
        """One request, no redirects followed, body read fully (and bounded).

        Args:
            deadline: ``time.monotonic()`` value after which the request gives up (the socket
                timeout of each wait is the smaller of ``timeout_s`` and the time left).
            want_nbytes: a range request's length, bytes: a success answer announcing or sending
                any other length is dropped unread (its ``Response.dropped`` says why).
            max_body_nbytes: the largest success body accepted otherwise, bytes, checked against
                ``Content-Length`` before reading and while reading. An error or redirect body
                is cut at :data:`_ERROR_BODY_NBYTES` (its connection is then closed).

        Raises:
            TransportError: connection refused/reset, timeout, or a body shorter than announced.
            BodyTooLargeError: a success body above ``max_body_nbytes`` (not read).
        """
        self._check_pid()
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise SourceError(f"not an HTTP URL: {redact_url(url)}")
        key = (scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80))
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        with self._slots:
            conn = self._take(key)
            try:
                _set_timeout(conn, self.timeout_s, deadline)
                conn.request(method, target, headers=dict(headers or {}))
                _set_timeout(conn, self.timeout_s, deadline)
                resp = conn.getresponse()
                resp_headers = {k.lower(): v for k, v in resp.getheaders()}
                ok = 200 <= resp.status < 300
                declared = None  # a HEAD's Content-Length is the caller's to check
                if method != "HEAD" and "content-length" in resp_headers:
                    declared = int(resp_headers["content-length"])  # not a number: ValueError, retried
                if method == "HEAD":
                    body, whole = resp.read(), True
                elif ok and want_nbytes is not None:
                    if declared is not None and declared != want_nbytes:
                        raise _Dropped(f"HTTP {resp.status} of {declared} bytes for a range of {want_nbytes} bytes")
                    body, whole = _read_body(conn, resp, self.timeout_s, deadline, want_nbytes)
                    if not whole:
                        raise _Dropped(f"HTTP {resp.status} of more than the {want_nbytes} bytes of the range")
                elif ok:
                    if declared is not None and declared > max_body_nbytes:
                        raise BodyTooLargeError(declared, max_body_nbytes)
                    body, whole = _read_body(conn, resp, self.timeout_s, deadline, max_body_nbytes)
                    if not whole:
                        raise BodyTooLargeError(None, max_body_nbytes)
                else:  # an error or a redirect: its status matters, not a long body
                    body, whole = _read_body(conn, resp, self.timeout_s, deadline, _ERROR_BODY_NBYTES)
                if whole and declared is not None and method != "HEAD" and len(body) != declared:
                    raise http.client.IncompleteRead(body, declared - len(body))
            except BodyTooLargeError:
                conn.close()
                raise
            except _Dropped as e:
                conn.close()  # never read: the rest of the body goes with the connection
                return Response(resp.status, resp_headers, b"", url, dropped=f"{e}, dropped unread")
            except (OSError, http.client.HTTPException, ValueError) as e:
                conn.close()
                raise TransportError(f"{type(e).__name__} on {method} {redact_url(url)}") from None
            if resp.will_close or not whole:
                conn.close()
            else:
                self._give_back(key, conn)
        return Response(resp.status, resp_headers, body, url)

    def close(self) -> None:
        """Close this process's idle connections."""
        if self._pid != os.getpid():
            self._reset()
            return
        with self._lock:
            for conns in self._idle.values():
                for c in conns:
                    c.close()
            self._idle = {}
            self._num_idle = 0


def _set_timeout(conn: http.client.HTTPConnection, timeout_s: float, deadline: float | None) -> None:
    """Socket timeout of the next wait: ``timeout_s``, or less when the deadline is nearer."""
    t = timeout_s
    if deadline is not None:
        t = min(t, deadline - time.monotonic())
        if t <= 0:
            raise TimeoutError("read deadline reached")
    conn.timeout = t
    if conn.sock is not None:
        conn.sock.settimeout(t)


def _read_body(
    conn: http.client.HTTPConnection,
    resp: http.client.HTTPResponse,
    timeout_s: float,
    deadline: float | None,
    limit: int,
) -> tuple[bytes, bool]:
    """``(body, whole)``: the body read in chunks (so that a server trickling bytes cannot outlast
    the deadline), at most ``limit`` bytes; ``whole`` is False when more followed (not read; the
    body is then ``b""``, or its first ``limit`` bytes for an error page's small limit)."""
    chunks = []
    total = 0
    while True:
        _set_timeout(conn, timeout_s, deadline)
        chunk = resp.read(min(_BODY_CHUNK_BYTES, limit + 1 - total))
        if not chunk:
            break
        total += len(chunk)
        if total > limit:  # an error page keeps its start; a success body that long is refused, never joined
            if limit > _ERROR_BODY_NBYTES:
                return b"", False
            chunks.append(chunk[: len(chunk) - (total - limit)])
            return b"".join(chunks), False
        chunks.append(chunk)
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), True
