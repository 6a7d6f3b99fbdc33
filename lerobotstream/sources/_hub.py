"""Hugging Face Hub byte sources: dataset repositories pinned to one commit, and Storage Buckets.

A dataset revision is resolved **once**, at open (``HfApi.dataset_info``); every later listing and
read uses the 40-hex commit. Endpoint, token and offline mode are huggingface_hub's. Sizes and
fingerprints come from the tree listing (one request per folder, cached): ``xet:<hash>``,
``sha256:<oid>`` (LFS) or ``git:<blob id>``.

Not ``HfFileSystem``, which sends every range through ``/resolve`` again (the pattern that draws
429s; README "Data sources"): here the redirect is resolved once per file (``HEAD``), the signed
URL cached until it expires or is refused (401/403: resolved again, once), and each ``Range`` GET
goes to the storage host without ``Authorization``. Nothing here issues POST, PUT or DELETE.
"""

from __future__ import annotations

import calendar
import math
import posixpath
import re
import threading
import time
from typing import Any
from urllib.parse import parse_qs, quote, urljoin, urlsplit

from lerobotstream.errors import SourceChangedError, SourceError, SourceNotFoundError, SourceProtocolError
from lerobotstream.sources._base import ByteSource
from lerobotstream.sources._http_transport import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    HttpClient,
    RangeFetcher,
    RetryPolicy,
    error_for,
)
from lerobotstream.sources._paths import checked_path, same_origin, url_under

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
#: lifetime assumed for a signed URL whose expiry we cannot read, seconds
SIGNED_URL_TTL_S = 600.0
#: a signed URL is refreshed this many seconds before it expires
SIGNED_URL_MARGIN_S = 30.0


def _signed_url_expiry(url: str, now: float) -> float:
    """When the signed ``url`` expires (``Expires=`` or ``X-Amz-Date`` + ``X-Amz-Expires``), Unix
    seconds; ``now + SIGNED_URL_TTL_S`` when it says no finite time."""
    q = {k.lower(): v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    when = None
    try:
        if "expires" in q:
            when = float(q["expires"])
        elif "x-amz-expires" in q and "x-amz-date" in q:
            when = calendar.timegm(time.strptime(q["x-amz-date"], "%Y%m%dT%H%M%SZ")) + float(q["x-amz-expires"])
    except (ValueError, OverflowError):
        pass
    return when if when is not None and math.isfinite(when) else now + SIGNED_URL_TTL_S


def _linked_size(value: str, path: str, where: str) -> int:
    """The file size a ``/resolve`` answer announces; SourceProtocolError when not a decimal number."""
    text = value.strip()
    if not (text.isascii() and text.isdigit()):
        raise SourceProtocolError(
            f"the Hub's answer for {path!r} at {where} announces the size {text[:40]!r}, which is not a number of "
            "bytes",
            path=path,
        )
    return int(text)


def _offline_hint(exc: BaseException) -> str:
    """What to do when the Hub cannot be reached at all (no answer, not an HTTP error): '' else."""
    names = {c.__name__ for c in type(exc).__mro__}  # httpx's ConnectError / ConnectTimeout, or the stdlib's
    if "ConnectionError" in names or "ConnectError" in names or "ConnectTimeout" in names:
        return (
            "no network? pass root= a local copy of the dataset (or put one at $HF_LEROBOT_HOME/<repo_id>), "
            "or set HF_HUB_OFFLINE=1"
        )
    return ""


def _fingerprint_of(entry: Any) -> str | None:
    xet = getattr(entry, "xet_hash", None)
    if xet:
        return f"xet:{xet}"
    lfs = getattr(entry, "lfs", None)
    if lfs is not None:
        sha = getattr(lfs, "sha256", None) or (lfs.get("sha256") if isinstance(lfs, dict) else None)
        if sha:
            return f"sha256:{sha}"
    blob = getattr(entry, "blob_id", None)
    return f"git:{blob}" if blob else None


class HubSource(ByteSource):
    """A Hub dataset repository at one commit, or a Storage Bucket, read with ranged GETs.

    Args:
        repo_id, repo_type: ``OWNER/NAME`` of the dataset or bucket; ``"dataset"`` or ``"bucket"``.
        revision: branch, tag or commit of a dataset (default ``main``), resolved once to a commit;
            None for buckets.
        token: Hub token; None uses huggingface_hub's (``HF_TOKEN`` or the saved login), False
            sends none. Never logged, never part of an error or ``repr``.
        endpoint: Hub URL; defaults to ``huggingface_hub.constants.ENDPOINT`` (``HF_ENDPOINT``).
        max_connections, retry, timeout_s, read_timeout_s: as :func:`~lerobotstream.sources.open_source`.

    Raises:
        SourceError: offline mode is on, or the Hub answered with an error.
        SourceNotFoundError: repository, bucket or revision does not exist (or is private).
        SourceAuthError: the token was refused.
    """

    def __init__(
        self,
        repo_id: str,
        *,
        revision: str | None = None,
        repo_type: str = "dataset",
        token: str | bool | None = None,
        endpoint: str | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        retry: RetryPolicy | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        super().__init__()
        from huggingface_hub import HfApi
        from huggingface_hub import constants as hf_constants

        if repo_type not in ("dataset", "bucket"):
            raise SourceError(f"repo_type must be 'dataset' or 'bucket', got {repo_type!r}")
        if repo_type == "bucket" and revision not in (None, ""):
            raise SourceError(f"buckets have no revisions (got revision={revision!r} for bucket {repo_id!r})")
        self.repo_id = repo_id
        self.repo_type = repo_type
        self.endpoint = (endpoint or hf_constants.ENDPOINT).rstrip("/")
        self._token = token
        where = f"{self.endpoint} ({repo_type} {repo_id})"
        if hf_constants.is_offline_mode():
            raise SourceError(
                f"cannot open the {repo_type} {repo_id!r} on {self.endpoint}: huggingface_hub offline mode is "
                "enabled (HF_HUB_OFFLINE); use root= a local copy of the dataset instead"
            )
        self._api = HfApi(endpoint=self.endpoint, token=token, library_name="lerobotstream")
        self.revision = (revision or "main") if repo_type == "dataset" else None
        try:
            if repo_type == "dataset":
                info = self._api.dataset_info(repo_id, revision=self.revision)
            else:
                self._api.bucket_info(repo_id)
        except Exception as e:  # every huggingface_hub / httpx failure, mapped in one place
            at = f"@{self.revision}" if self.revision else ""
            raise error_for(None, path=at, where=where, exc=e, detail=_offline_hint(e)) from None
        self.stats.add(metadata_requests=1)
        self.commit: str | None = None
        self.root_display = f"hf://buckets/{repo_id}"
        if repo_type == "dataset":
            if not info.sha or not _COMMIT_RE.match(info.sha):
                raise SourceError(f"the Hub did not resolve revision {self.revision!r} of {repo_id!r} to a commit")
            self.commit = info.sha
            self.root_display = f"hf://datasets/{repo_id}@{self.commit}"
        self.client = HttpClient(max_connections, timeout_s)
        self.fetcher = RangeFetcher(self.client, retry or RetryPolicy(), self.stats, read_timeout_s=read_timeout_s)
        self._folders: dict[str, dict[str, tuple[int, str | None]]] = {}
        self._signed: dict[str, tuple[str, dict[str, str], float]] = {}  # path -> (url, headers, expires)
        self._init_process_state()
        self._hub_headers: dict[str, str] | None = None

    _PROCESS_LOCAL = ("_lock", "_path_locks")  # the connection pool pickles itself empty (HttpClient)

    def _init_process_state(self) -> None:
        self._lock = threading.Lock()
        self._path_locks: dict[str, threading.Lock] = {}

    @property
    def api(self) -> Any:
        """The ``huggingface_hub.HfApi`` this source uses (for ``sidecar.push_sidecar``)."""
        return self._api

    def at_revision(self, revision: str) -> HubSource:
        """The same dataset at ``revision`` (pinned to its commit), with this source's endpoint,
        credentials and retry policy (SourceNotFoundError: no such revision; SourceError: a bucket)."""
        return HubSource(
            self.repo_id,
            revision=revision,
            repo_type=self.repo_type,
            token=self._token,
            endpoint=self.endpoint,
            retry=self.fetcher.retry,
        )

    def _where(self) -> str:
        return f"{self.endpoint} ({self.root_display})"

    def _tree(self, folder: str, recursive: bool) -> list[tuple[str, tuple[int, str | None]]] | None:
        """``(path, (size, fingerprint))`` of the files under ``folder``; None when it does not exist."""
        try:
            if self.repo_type == "dataset":
                tree = self._api.list_repo_tree(
                    self.repo_id,
                    path_in_repo=folder or None,
                    revision=self.commit,
                    repo_type="dataset",
                    recursive=recursive,
                )
            else:
                tree = self._api.list_bucket_tree(self.repo_id, prefix=folder or None, recursive=recursive)
            kinds = ("RepoFile", "BucketFile")
            return [(e.path, (int(e.size), _fingerprint_of(e))) for e in tree if type(e).__name__ in kinds]
        except Exception as e:
            err = error_for(None, path=folder or "/", where=self._where(), exc=e)
            if isinstance(err, SourceNotFoundError):
                return None
            raise err from None

    def _folder(self, folder: str) -> dict[str, tuple[int, str | None]]:
        with self._lock:
            hit = self._folders.get(folder)
            if hit is not None:
                return hit
            flock = self._path_locks.setdefault(f"tree:{folder}", threading.Lock())
        with flock:  # one tree request per folder even when many threads ask at once
            with self._lock:
                hit = self._folders.get(folder)
            if hit is not None:
                return hit
            entries = {p: v for p, v in self._tree(folder, recursive=False) or () if posixpath.dirname(p) == folder}
            self.stats.add(metadata_requests=1)
            with self._lock:
                self._folders[folder] = entries
            return entries

    def _entry(self, path: str) -> tuple[int, str | None]:
        path = checked_path(path, self.root_display)
        hit = self._folder(posixpath.dirname(path)).get(path)
        if hit is None:
            raise SourceNotFoundError(f"{path!r} not found in {self.root_display}", path=path)
        return hit

    def size(self, path: str) -> int:
        return self._entry(path)[0]

    def fingerprint(self, path: str) -> str | None:
        return self._entry(path)[1]

    def list(self, prefix: str) -> list[str]:
        prefix = checked_path(prefix, self.root_display, folder=True)
        files = self._tree(prefix, recursive=True)
        if files is None:
            return []
        self.stats.add(metadata_requests=1)
        out = [(p, v) for p, v in files if not prefix or p.startswith(prefix + "/")]
        with self._lock:
            for p, v in out:
                self._folders.setdefault(posixpath.dirname(p), {})[p] = v
        return sorted(p for p, _ in out)

    def resolve_url(self, path: str) -> str:
        """The ``/resolve`` URL of ``path``, pinned to the commit for datasets; SourceError when the
        path breaks the path rule or its URL would leave the ``/resolve/`` folder."""
        if self.repo_type == "dataset":
            return url_under(f"{self.endpoint}/datasets/{self.repo_id}/resolve/{self.commit}/", path, self.root_display)
        return f"{self.endpoint}/buckets/{self.repo_id}/resolve/{quote(checked_path(path, self.root_display), safe='')}"

    def _auth_headers(self) -> dict[str, str]:
        if self._hub_headers is None:
            from huggingface_hub.utils import build_hf_headers

            from lerobotstream._version import __version__

            self._hub_headers = build_hf_headers(
                token=self._token, library_name="lerobotstream", library_version=__version__
            )
        return dict(self._hub_headers)

    def _headers_for(self, url: str) -> dict[str, str]:
        """Hub headers for the Hub's own origin (scheme, host, port); none for any other."""
        return self._auth_headers() if same_origin(url, self.endpoint) else {}

    def _signed_url(self, path: str) -> tuple[str, dict[str, str]]:
        now = time.time()
        with self._lock:
            hit = self._signed.get(path)
            if hit is not None and hit[2] - SIGNED_URL_MARGIN_S > now:
                return hit[0], hit[1]
            plock = self._path_locks.setdefault(path, threading.Lock())
        with plock:  # one resolve per file even when many threads ask at once
            with self._lock:
                hit = self._signed.get(path)
            if hit is not None and hit[2] - SIGNED_URL_MARGIN_S > time.time():
                return hit[0], hit[1]
            size, fp = self._entry(path)
            url = self.resolve_url(path)
            r = self.fetcher.request(
                "HEAD",
                lambda: (url, {**self._headers_for(url), "Accept-Encoding": "identity"}),
                path=path,
                metadata=True,
                accept_redirect=True,
            )
            linked = r.headers.get("x-linked-size") or (None if r.status >= 300 else r.headers.get("content-length"))
            if linked is not None and _linked_size(linked, path, self._where()) != size:
                raise SourceChangedError(
                    f"{path!r} in {self.root_display} changed: listed {size} bytes, now {linked}", path=path
                )
            xet = r.headers.get("x-xet-hash")
            if xet and fp and fp.startswith("xet:") and fp != f"xet:{xet}":
                raise SourceChangedError(f"{path!r} in {self.root_display} was replaced since it was listed", path=path)
            if r.status in (301, 302, 303, 307, 308) and "location" in r.headers:
                target = urljoin(url, r.headers["location"])
                entry = (target, self._headers_for(target), _signed_url_expiry(target, time.time()))
            else:  # served by the Hub host itself (small git files)
                entry = (url, self._headers_for(url), float("inf"))
            with self._lock:
                self._signed[path] = entry
            return entry[0], entry[1]

    def _invalidate(self, path: str) -> None:
        with self._lock:
            self._signed.pop(path, None)

    def _fetch(self, path: str, offset: int, length: int) -> bytes:
        r = self.fetcher.request(
            "GET",
            lambda: self._signed_url(path),
            path=path,
            offset=offset,
            length=length,
            invalidate=lambda: self._invalidate(path),
            expect=(self.size(path), None),
        )
        return r.body

    def close(self) -> None:
        self.client.close()
