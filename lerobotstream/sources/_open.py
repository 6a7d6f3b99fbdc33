"""``open_source``: one dataset root as users give it → the matching :class:`ByteSource`."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lerobotstream import constants
from lerobotstream.errors import SourceError, SourceNotFoundError, StreamingConfigError
from lerobotstream.sources._base import ByteSource
from lerobotstream.sources._http_transport import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    RetryPolicy,
)

_HF_DATASET = re.compile(r"^hf://datasets/(?P<owner>[^/@]+)/(?P<name>[^/@]+)(?:@(?P<rev>[^/]+))?(?P<sub>/.*)?$")
_HF_BUCKET = re.compile(r"^hf://buckets/(?P<owner>[^/@]+)/(?P<name>[^/@]+)(?P<sub>/.*)?$")
_HUB_REPO_ID = re.compile(r"^[^/\s]+/[^/\s]+$")

log = logging.getLogger("lerobotstream.sources")


def lerobot_local_copy(repo_id: str | None, repo_type: str = "dataset") -> Path | None:
    """LeRobot 0.6.1's local-copy rule for a dataset opened without ``root``: the folder
    ``$HF_LEROBOT_HOME/<repo_id>`` when it holds ``meta/info.json``, else None (then the Hub). As
    in LeRobot, a folder left by ``snapshot_download(local_dir=...)`` (with
    ``.cache/huggingface/download``) is skipped, buckets have none, ``revision`` is not checked."""
    if not repo_id or repo_type != "dataset" or "://" in repo_id:
        return None
    folder = Path(constants.HF_LEROBOT_HOME) / repo_id
    if not (folder / "meta" / "info.json").is_file():
        return None
    if (folder / ".cache" / "huggingface" / "download").exists():
        return None  # LeRobot's has_legacy_hub_download_metadata: re-fetched from the Hub
    return folder


def parse_hf_url(url: str) -> tuple[str, str, str | None]:
    """``hf://datasets/OWNER/NAME[@REV]`` or ``hf://buckets/OWNER/NAME`` → ``(repo_type, repo_id,
    revision)``. A revision containing ``/`` is written URL-encoded (``refs%2Fpr%2F1``).

    Raises:
        SourceError: another repo type, a sub-folder (data must sit at the root), or a malformed URL.
    """
    m = _HF_DATASET.match(url) or _HF_BUCKET.match(url)
    if m is None:
        raise SourceError(
            f"unsupported hf:// root {url!r}: expected hf://datasets/OWNER/NAME[@REV] or hf://buckets/OWNER/NAME"
        )
    if (m.group("sub") or "/").strip("/"):
        raise SourceError(
            f"{url!r}: meta/, data/ and videos/ must sit at the repository or bucket root (no sub-folder)"
        )
    repo_type = "dataset" if url.startswith("hf://datasets/") else "bucket"
    rev = m.groupdict().get("rev")
    return repo_type, f"{m.group('owner')}/{m.group('name')}", unquote(rev) if rev else None


def open_source(
    root: str | os.PathLike | ByteSource | None = None,
    *,
    repo_id: str | None = None,
    revision: str | None = None,
    repo_type: str = "dataset",
    token: str | bool | None = None,
    endpoint: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    retry: RetryPolicy | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
) -> ByteSource:
    """Open a dataset root, as users give it:

    - ``root`` unset, ``repo_id=`` → LeRobot's rule: the local copy ``$HF_LEROBOT_HOME/<repo_id>``
      when there is one (:func:`lerobot_local_copy`), else the Hub (``repo_id`` must then be
      ``OWNER/NAME``);
    - ``root=`` a local folder (or ``file://`` URL) → :class:`LocalSource` (``pread``);
    - ``root="hf://datasets/OWNER/NAME[@REV]"`` or ``repo_id=`` + ``revision=`` → :class:`HubSource`
      pinned to the commit the revision resolves to (once, now);
    - ``root="hf://buckets/OWNER/BUCKET"`` or ``repo_id=`` + ``repo_type="bucket"`` → bucket;
    - ``root="http(s)://..."`` → :class:`HttpSource` (native range fetcher);
    - ``root=`` any other fsspec URL → :class:`FsspecSource`;
    - an existing :class:`ByteSource` is returned unchanged.

    Args:
        root: see above; takes precedence over ``repo_id``.
        repo_id, revision, repo_type: ``OWNER/NAME`` on the Hub; branch, tag or commit (datasets
            only, default ``main``); ``"dataset"`` (default) or ``"bucket"``.
        token: Hub token (None: huggingface_hub's own); never logged.
        endpoint: Hub URL (default: ``HF_ENDPOINT`` through huggingface_hub).
        storage_options: fsspec filesystem options.
        headers: extra headers for a plain HTTP root's host.
        max_connections, retry: open connections per process and retry policy (HTTP and Hub).
        timeout_s: socket timeout of each connect and each wait for bytes, seconds (HTTP and Hub).
        read_timeout_s: longest one payload read may take, retries included, seconds (HTTP and
            Hub; default 120): then :class:`~lerobotstream.errors.SourceTimeoutError`.

    Raises:
        SourceNotFoundError: a local root that is not a folder, or a missing repository/revision.
        SourceError: a malformed or unsupported root, or a Hub error at resolution time.
        SourceProtocolError: a URL root whose protocol no fsspec filesystem serves (``gopher://``).
        MissingDependencyError: a URL root whose fsspec package is not installed (``s3fs``).
        StreamingConfigError: ``root`` unset and ``repo_id`` neither a local copy nor ``OWNER/NAME``.
    """
    if isinstance(root, ByteSource):
        return root
    net = dict(max_connections=max_connections, retry=retry, timeout_s=timeout_s, read_timeout_s=read_timeout_s)
    if root is None:
        if not repo_id:
            raise SourceError("give a dataset root (local folder or URL) or a repo_id")
        if repo_type not in ("dataset", "bucket"):
            raise SourceError(f"repo_type must be 'dataset' or 'bucket', got {repo_type!r}")
        local = lerobot_local_copy(repo_id, repo_type)
        if local is not None:
            log.info(
                "%s: using the local copy %s ($HF_LEROBOT_HOME/<repo_id>, as LeRobot)%s",
                repo_id,
                local,
                f"; revision {revision!r} is not checked against it" if revision else "",
            )
            from lerobotstream.sources._local import LocalSource

            return LocalSource(local)
        if not _HUB_REPO_ID.match(repo_id):
            raise StreamingConfigError(
                f"repo_id={repo_id!r} is not a Hub repository id OWNER/NAME, and there is no local copy at "
                f"{Path(constants.HF_LEROBOT_HOME) / repo_id} (HF_LEROBOT_HOME); pass root= the dataset folder "
                "for a local dataset"
            )
        root_s, kind, rid, rev = None, repo_type, repo_id, None
    else:
        root_s = os.fspath(root)
        if root_s.startswith("hf://"):
            kind, rid, rev = parse_hf_url(root_s)
            if repo_id and repo_id != rid:
                raise SourceError(f"root {root_s!r} names {rid!r} but repo_id={repo_id!r}")
            if kind == "dataset" and rev and revision and rev != revision:
                raise SourceError(f"root {root_s!r} pins revision {rev!r} but revision={revision!r}")
            root_s = None
    if root_s is None:
        from lerobotstream.sources._hub import HubSource

        rev = (rev or revision) if kind == "dataset" else None
        return HubSource(rid, revision=rev, repo_type=kind, token=token, endpoint=endpoint, **net)
    if root_s.startswith(("http://", "https://")):
        from lerobotstream.sources._http import HttpSource

        return HttpSource(root_s, headers=headers, **net)
    if root_s.startswith("file://"):
        root_s = root_s[len("file://") :]
    elif "://" in root_s:
        from lerobotstream.sources._fsspec import FsspecSource

        return FsspecSource(root_s, storage_options=storage_options)
    path = Path(root_s).expanduser()
    if not path.is_dir():
        raise SourceNotFoundError(f"dataset root is not a folder: {path}", path=str(path))
    from lerobotstream.sources._local import LocalSource

    return LocalSource(path)
