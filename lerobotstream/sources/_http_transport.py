"""HTTP for :class:`~lerobotstream.sources._http.HttpSource` and the Hub: a bounded client, and
retries, checked ranges and time limits over it.

:class:`HttpClient` is the standard library's ``http.client``: no read-ahead, no automatic
redirects (``Authorization`` never follows one to another host), bounded bodies. URLs in messages
go through :func:`redact_url` (no user info, no query).

:class:`RangeFetcher` verifies every ``206`` against its ``Content-Range`` and length, and retries
transport failures, mis-ranged answers and :data:`RETRY_STATUSES` (:class:`RetryPolicy`). A
``206`` whose ``Content-Range`` total or ``ETag`` differs from the file first seen raises
:class:`~lerobotstream.errors.SourceChangedError` at once. Each connect and wait for bytes gives
up after ``timeout_s``; one read, every attempt and backoff together, after ``read_timeout_s``
(:class:`~lerobotstream.errors.SourceTimeoutError`).
"""

from __future__ import annotations

import email.utils
import http.client
import os
import random
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from lerobotstream import constants
from lerobotstream.errors import (
    RangeReadError,
    SourceAuthError,
    SourceChangedError,
    SourceError,
    SourceNotFoundError,
    SourceReadError,
    SourceTimeoutError,
    os_reason,
)
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
    """Keep-alive ``http.client`` connections, at most ``max_connections`` open per process;
    thread-safe and fork-safe (keyed by PID)."""

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
            # at most max_connections idle (the slot semaphore bounds those in use): close the oldest
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
            deadline: ``time.monotonic()`` value after which the request gives up.
            want_nbytes: a range request's length, bytes: a success answer of another length is
                dropped unread (``Response.dropped`` says why).
            max_body_nbytes: the largest other success body, bytes (checked before and while
                reading); an error or redirect body is cut at :data:`_ERROR_BODY_NBYTES`.

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
    """``(body, whole)``: at most ``limit`` bytes, read in chunks (the deadline checked between);
    ``whole`` is False when more followed (then the body is ``b""``, or an error page's start)."""
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


#: seconds one read may take in total, every attempt and backoff included (then SourceTimeoutError)
DEFAULT_READ_TIMEOUT_S = constants.DEFAULT_READ_TIMEOUT_S
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
_MAX_REDIRECTS = 5


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a failed request: exponential backoff with full jitter,
    ``min(cap, base * 2**attempt) * U(0.5, 1)``, or a capped ``Retry-After``.

    Attributes:
        max_retries: retries after the first attempt (so at most ``max_retries + 1`` requests).
        backoff_base_s: first backoff, seconds (doubles each retry).
        backoff_cap_s: largest computed backoff, seconds.
        max_retry_after_s: largest wait honoured from a ``Retry-After`` header, seconds.
    """

    max_retries: int = 5
    backoff_base_s: float = 0.25
    backoff_cap_s: float = 8.0
    max_retry_after_s: float = 60.0

    def delay_s(self, attempt: int, rng: random.Random, retry_after: str | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        wait = None
        if retry_after:
            try:
                wait = float(retry_after.strip())
            except ValueError:
                try:
                    wait = email.utils.parsedate_to_datetime(retry_after.strip()).timestamp() - time.time()
                except (TypeError, ValueError):
                    pass
        if wait is not None:
            return min(max(wait, 0.0), self.max_retry_after_s)
        return min(self.backoff_cap_s, self.backoff_base_s * (2**attempt)) * rng.uniform(0.5, 1.0)


def error_for(
    status: int | None,
    *,
    path: str,
    where: str,
    detail: str = "",
    exc: BaseException | None = None,
) -> SourceError:
    """The one place mapping a store failure (HTTP ``status``, or ``exc``: a huggingface_hub, fsspec
    or OS exception) on dataset path ``path`` to a typed error; ``where`` (redacted URL or root)
    and ``detail`` hold no credentials."""
    extra = f": {detail}" if detail else ""
    if exc is not None and status is None:
        resp = getattr(exc, "response", None)
        status = getattr(resp, "status_code", None)
        name = type(exc).__name__
        if name in (
            "RepositoryNotFoundError",
            "RevisionNotFoundError",
            "EntryNotFoundError",
            "BucketNotFoundError",
            "RemoteEntryNotFoundError",
            "LocalEntryNotFoundError",
        ) or isinstance(exc, FileNotFoundError):
            return SourceNotFoundError(f"{path!r} not found at {where} ({name}){extra}", path=path)
        if name == "GatedRepoError" or isinstance(exc, PermissionError):
            return SourceAuthError(f"access to {path!r} at {where} was refused ({name}){extra}", path=path)
        if isinstance(exc, OSError) and exc.errno is not None:  # the store's own OS error (EISDIR, ELOOP, EIO...)
            reason = os_reason(exc)  # the operating system's text and errno name: no path, no credentials
            return SourceReadError(
                f"could not read {path!r} from {where}: {reason}{extra}", path=path, errno=exc.errno, reason=reason
            )
        if name == "OfflineModeIsEnabled":
            return SourceError(
                f"cannot read {path!r} from {where}: huggingface_hub offline mode is enabled (HF_HUB_OFFLINE); "
                "use a local dataset root instead",
                path=path,
            )
        if status is None:
            return SourceError(f"reading {path!r} from {where} failed ({name}){extra}", path=path)
    if status in (401, 403):
        return SourceAuthError(
            f"the store refused our credentials (HTTP {status}) for {path!r} at {where}{extra}",
            path=path,
            status=status,
        )
    if status in (404, 410):
        return SourceNotFoundError(f"{path!r} not found (HTTP {status}) at {where}{extra}", path=path, status=status)
    if status == 416:
        return RangeReadError(
            f"range not satisfiable (HTTP 416) for {path!r} at {where}{extra}", path=path, status=status
        )
    return SourceError(f"reading {path!r} from {where} failed (HTTP {status}){extra}", path=path, status=status)


def _range_problem(
    r: Response, url: str, path: str, offset: int, length: int, expect: tuple[int, str | None] | None
) -> str | None:
    """None when a 200/206 answer ``r`` holds exactly bytes ``[offset, offset + length)``, else why not.

    Raises:
        SourceChangedError: a ``206`` whose ``Content-Range`` total or strong ``ETag`` is not the
            one in ``expect`` (``(size, fingerprint or None)``).
    """
    if expect is not None and r.status == 206:
        size, fingerprint = expect
        total = r.headers.get("content-range", "").rsplit("/", 1)[-1].strip()
        etag = r.headers.get("etag")
        changed = None
        if total.isdigit() and int(total) != int(size):
            changed = f"it had {size} bytes, the server now answers for {int(total)} bytes"
        elif (
            etag
            and not etag.startswith("W/")
            and (fingerprint or "").startswith("etag=")
            and f"etag={etag}" != fingerprint
        ):
            changed = f"its ETag was {fingerprint[5:]}, the server now sends {etag}"
        if changed is not None:
            raise SourceChangedError(
                f"{path!r} at {redact_url(url)} changed during the run: {changed}. The dataset's files "
                "must not change while it is read: restart once the new version is complete (its "
                "MP4 sidecar is then rebuilt)",
                path=path,
                offset=offset,
                status=r.status,
            )
    if r.dropped is not None:
        return r.dropped
    if r.status == 200:
        if offset == 0 and len(r.body) == length:
            return None  # a server may answer a whole-file range with 200
        return f"server ignored the Range header (200 with {len(r.body)} bytes)"
    if r.status != 206:
        return f"unexpected HTTP {r.status} for a range read"
    cr = r.headers.get("content-range", "")
    try:
        unit, rest = cr.split(" ", 1)
        span, _total = rest.split("/", 1)
        first, last = (int(x) for x in span.split("-", 1))
    except ValueError:
        return f"missing or malformed Content-Range {cr!r}"
    if unit != "bytes" or first != offset or last != offset + length - 1:
        return f"wrong Content-Range {cr!r} for bytes={offset}-{offset + length - 1}"
    if len(r.body) != length:
        return f"body has {len(r.body)} bytes, expected {length}"
    return None


class RangeFetcher:
    """Range GETs with retries against URLs given by a resolver (redirects resolved by the caller);
    ``read_timeout_s``: seconds one :meth:`request` may take in total (attempts and backoff)."""

    def __init__(
        self, client: HttpClient, retry: RetryPolicy, stats, *, read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    ):
        if not read_timeout_s > 0:
            raise ValueError(f"read_timeout_s must be > 0 seconds, got {read_timeout_s!r}")
        self.client = client
        self.retry = retry
        self.stats = stats
        self.read_timeout_s = float(read_timeout_s)
        self._sleep = time.sleep  # (tests replace it)
        self._rng = random.Random()  # jitter only; never the global RNG

    def request(
        self,
        method: str,
        resolve: Callable[[], tuple[str, dict[str, str]]],
        *,
        path: str,
        invalidate: Callable[[], None] | None = None,
        offset: int | None = None,
        length: int | None = None,
        metadata: bool = False,
        accept_redirect: bool = False,
        expect: tuple[int, str | None] | None = None,
    ) -> Response:
        """Send ``method`` with retries; for ranges return only a verified 206/200; any other success
        body is bounded by ``MAX_METADATA_FILE_NBYTES``. ``resolve()`` gives ``(url, headers)``
        before every attempt. On a 401/403, ``invalidate()`` (when given) drops the cached signed
        URL, once. ``expect``: the file's ``(size, fingerprint)`` when first seen.

        Raises:
            SourceError: a success body above that bound (not read, not retried).
            SourceChangedError: a ``206`` shows another size or ETag than ``expect`` (no retry).
            SourceTimeoutError: no complete answer within ``read_timeout_s`` (all attempts).
        """
        refreshed = False
        last = ""
        status: int | None = None
        t0 = time.monotonic()
        deadline = t0 + self.read_timeout_s
        url = ""
        attempts = 0
        for attempt in range(self.retry.max_retries + 1):
            if attempt and time.monotonic() >= deadline:
                break
            attempts += 1
            url, headers = resolve()
            if offset is not None:
                headers = dict(headers)
                headers["Range"] = f"bytes={offset}-{offset + length - 1}"
                headers.setdefault("Accept-Encoding", "identity")
            retry_after = None
            try:
                r = self.client.send(
                    method, url, headers, deadline=deadline, want_nbytes=length if offset is not None else None
                )
            except BodyTooLargeError as e:
                raise SourceError(f"{method} of {path!r} from {redact_url(url)}: {e}", path=path) from None
            except TransportError as e:
                last, status = str(e), None
            else:
                status = r.status
                self.stats.add(**({"metadata_requests": 1} if metadata else {"requests": 1, "bytes_read": len(r.body)}))
                if offset is not None and r.status in (200, 206):
                    why = _range_problem(r, url, path, offset, length, expect)
                    if why is None:
                        return r
                    last = f"{why} from {redact_url(url)}"
                elif r.status < 300 or (accept_redirect and r.status in (301, 302, 303, 307, 308)):
                    return r
                elif r.status in (401, 403) and not refreshed and invalidate is not None:
                    refreshed = True
                    invalidate()  # drop the cached signed URL; the next attempt resolves again
                    self.stats.add(retries=1)
                    continue
                elif r.status in RETRY_STATUSES:
                    last = f"HTTP {r.status} from {redact_url(url)}"
                    retry_after = r.headers.get("retry-after")
                else:
                    raise error_for(
                        r.status,
                        path=path,
                        where=redact_url(url),
                        detail="after refreshing the signed URL" if refreshed else "",
                    )
            if attempt < self.retry.max_retries:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.stats.add(retries=1)
                self._sleep(min(self.retry.delay_s(attempt, self._rng, retry_after), left))
        waited = time.monotonic() - t0
        what = f"bytes [{offset}, {offset + length})" if offset is not None else method
        if waited >= self.read_timeout_s:
            raise SourceTimeoutError(
                f"{what} of {path!r} from {redact_url(url)}: no complete answer within read_timeout_s="
                f"{self.read_timeout_s:g} s (waited {waited:.1f} s over {attempts} attempt(s); last error: {last}); "
                "check the server, or raise the read_timeout_s option for a slow store or large ranges",
                path=path,
                offset=offset,
                status=status,
                waited_s=waited,
            )
        err_cls = RangeReadError if offset is not None else SourceError
        raise err_cls(
            f"{what} of {path!r}: gave up after {self.retry.max_retries + 1} attempts; last error: {last}",
            path=path,
            offset=offset,
            status=status,
        )
