"""HTTP transport: retries, checked ranges and time limits over the bounded client.

The connections and bodies are :mod:`lerobotstream.sources._http_client`'s (keep-alive pool per
process, no automatic redirects, every body bounded); here: one ``Range`` request per coalesced
group of ranges, and every ``206`` answer verified against ``Content-Range`` and its length before
it is returned.

Retry policy (:class:`RetryPolicy`): connection errors, resets, timeouts, truncated bodies,
mis-ranged answers (a range answer of another length is dropped unread, then retried) and
statuses 408/425/429/500/502/503/504 are retried up to ``max_retries`` times with exponential
backoff and full jitter (``min(cap, base * 2**attempt) * U(0.5, 1)``); a ``Retry-After`` header
(seconds or HTTP date, capped) replaces the computed wait.

Files that change: a range read may be given what the file was when first seen (its size and
strong ETag, :meth:`RangeFetcher.request`'s ``expect``); a ``206`` whose ``Content-Range`` total
or ``ETag`` differs raises :class:`~lerobotstream.errors.SourceChangedError` at once (the file was
replaced during the run; retrying cannot help), instead of retries on "wrong Content-Range".

Time limits: each attempt's connect and each wait for bytes give up after ``timeout_s`` (socket
timeout); one read — every attempt and backoff of one request together — gives up after
``read_timeout_s`` (:class:`~lerobotstream.errors.SourceTimeoutError` naming the URL and the time
waited), so a server that accepts connections and never answers cannot block a reader for long.

Used by :class:`~lerobotstream.sources._http.HttpSource` and the Hub/bucket source.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

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
from lerobotstream.sources._http_client import (
    BodyTooLargeError,
    HttpClient,
    Response,
    TransportError,
    redact_url,
)
from lerobotstream.sources._paths import MAX_METADATA_FILE_NBYTES

#: seconds one read may take in total, every attempt and backoff included (then SourceTimeoutError)
DEFAULT_READ_TIMEOUT_S = constants.DEFAULT_READ_TIMEOUT_S
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
_MAX_REDIRECTS = 5


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a failed request.

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
        if retry_after:
            wait = _parse_retry_after(retry_after)
            if wait is not None:
                return min(max(wait, 0.0), self.max_retry_after_s)
        return min(self.backoff_cap_s, self.backoff_base_s * (2**attempt)) * rng.uniform(0.5, 1.0)


def _parse_retry_after(value: str) -> float | None:
    value = value.strip()
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()


def error_for(
    status: int | None,
    *,
    path: str,
    where: str,
    detail: str = "",
    exc: BaseException | None = None,
) -> SourceError:
    """The one place mapping a store failure to a typed error.

    Args:
        status: HTTP status (or None for a non-HTTP failure described by ``exc``).
        path: dataset-relative path that was being read.
        where: a credential-free description of the location (redacted URL or root).
        detail: extra text (never containing credentials).
        exc: the underlying exception (huggingface_hub, fsspec or OSError), when there is one.
    """
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


def changed_file(r: Response, expect: tuple[int, str | None] | None) -> str | None:
    """None unless a range answer shows that the file is no longer the one first seen: its
    ``Content-Range`` total (``bytes a-b/N``) is not the expected size, or its strong ``ETag`` is
    not the expected ``etag=...`` fingerprint. ``expect``: ``(size, fingerprint or None)``."""
    if expect is None or r.status != 206:
        return None
    size, fingerprint = expect
    total = r.headers.get("content-range", "").rsplit("/", 1)[-1].strip()
    if total.isdigit() and int(total) != int(size):
        return f"it had {size} bytes, the server now answers for {int(total)} bytes"
    etag = r.headers.get("etag")
    if (
        etag
        and not etag.startswith("W/")
        and fingerprint
        and fingerprint.startswith("etag=")
        and f"etag={etag}" != fingerprint
    ):
        return f"its ETag was {fingerprint[5:]}, the server now sends {etag}"
    return None


def check_range_response(r: Response, offset: int, length: int) -> str | None:
    """None when ``r`` holds exactly bytes ``[offset, offset + length)``, else why not."""
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
    """Range GETs with retries against URLs given by a resolver (redirects resolved by the caller).

    Args:
        client: connection pool.
        retry: retry policy.
        stats: counters to update.
        sleep: injectable sleep (tests).
        read_timeout_s: seconds one :meth:`request` may take in total (attempts and backoff).
    """

    def __init__(
        self,
        client: HttpClient,
        retry: RetryPolicy,
        stats,
        sleep: Callable[[float], None] = time.sleep,
        *,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ):
        if not read_timeout_s > 0:
            raise ValueError(f"read_timeout_s must be > 0 seconds, got {read_timeout_s!r}")
        self.client = client
        self.retry = retry
        self.stats = stats
        self.read_timeout_s = float(read_timeout_s)
        self._sleep = sleep
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
        max_body_nbytes: int = MAX_METADATA_FILE_NBYTES,
    ) -> Response:
        """Send ``method`` with retries; for ranges return only a verified 206/200.

        A range answer of another length than asked is dropped unread and retried (its bytes
        never reach memory); any other success body is bounded by ``max_body_nbytes``.

        ``resolve()`` gives ``(url, headers)`` (called before every attempt). On a 401/403,
        ``invalidate()`` (when given) drops the cached signed URL so the next attempt resolves
        again; this happens once, a second refusal raises SourceAuthError. ``expect``: the file's
        ``(size, fingerprint)`` when first seen (range reads), checked on every ``206`` answer.

        Raises:
            SourceError: a success body above ``max_body_nbytes`` (not read, not retried).
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
                    method,
                    url,
                    headers,
                    deadline=deadline,
                    want_nbytes=length if offset is not None else None,
                    max_body_nbytes=max_body_nbytes,
                )
            except BodyTooLargeError as e:
                raise SourceError(f"{method} of {path!r} from {redact_url(url)}: {e}", path=path) from None
            except TransportError as e:
                last, status = str(e), None
            else:
                status = r.status
                self.stats.add(
                    requests=0 if metadata else 1,
                    metadata_requests=1 if metadata else 0,
                    bytes_read=0 if metadata else len(r.body),
                )
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
        raise self._gave_up(method, path, url, offset, length, time.monotonic() - t0, attempts, last, status)

    def _gave_up(
        self,
        method: str,
        path: str,
        url: str,
        offset: int | None,
        length: int | None,
        waited: float,
        attempts: int,
        last: str,
        status: int | None,
    ) -> SourceError:
        """The error of a request that got no usable answer: SourceTimeoutError when ``waited``
        (seconds) reached ``read_timeout_s``, else RangeReadError (ranges) or SourceError."""
        what = f"bytes [{offset}, {offset + length})" if offset is not None else method
        if waited >= self.read_timeout_s:
            return SourceTimeoutError(
                f"{what} of {path!r} from {redact_url(url)}: no complete answer within read_timeout_s="
                f"{self.read_timeout_s:g} s (waited {waited:.1f} s over {attempts} attempt(s); last error: {last}); "
                "check the server, or raise the read_timeout_s option for a slow store or large ranges",
                path=path,
                offset=offset,
                status=status,
                waited_s=waited,
            )
        err_cls = RangeReadError if offset is not None else SourceError
        return err_cls(
            f"{what} of {path!r}: gave up after {self.retry.max_retries + 1} attempts; last error: {last}",
            path=path,
            offset=offset,
            status=status,
        )


def _range_problem(
    r: Response, url: str, path: str, offset: int, length: int, expect: tuple[int, str | None] | None
) -> str | None:
    """Why a 200/206 answer to a range request is not the bytes asked for (None: it is).

    Raises:
        SourceChangedError: the answer shows another size or ETag than ``expect`` (no retry).
    """
    changed = changed_file(r, expect)
    if changed is not None:
        raise SourceChangedError(
            f"{path!r} at {redact_url(url)} changed during the run: {changed}. The dataset's files "
            "must not change while it is read: restart once the new version is complete (its "
            "MP4 sidecar is then rebuilt)",
            path=path,
            offset=offset,
            status=r.status,
        )
    return check_range_response(r, offset, length)
