"""The path rule: every path a dataset's metadata names stays inside the dataset root.

A dataset path is a **normalized relative POSIX path**: ``/``-separated components, none empty,
``.`` or ``..``; no scheme (``http:``), host (``//host``), NUL, other control character or
backslash. The metadata reader applies :func:`path_problem` at load, every source again when it
joins a path to its root (:func:`checked_path`, :func:`url_under`). Only the *names* are confined
(symlinks are not resolved: a Hub cache snapshot is a folder of links into ``../../blobs``). For
URLs the root's origin and path prefix bound every request; credentials go only to that origin.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit

from lerobotstream.errors import SourceError

#: longest dataset path accepted, characters
MAX_PATH_CHARS = 1024
#: longest metadata file :meth:`~lerobotstream.sources.ByteSource.read_file` reads, bytes (a large
#: dataset's ``meta/episodes`` shard holds tens of MB); a larger one is refused before it is read
MAX_METADATA_FILE_NBYTES = 256 * 1024 * 1024

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")


def path_problem(path: object, *, folder: bool = False) -> str | None:
    """Why ``path`` (any object) is not a dataset path (``"has a '..' component"``), or None when it
    is one; ``folder``: ``""`` (the root, a listing prefix) is one too."""
    if not isinstance(path, str):
        return f"is a {type(path).__name__}, not a string"
    if path == "":
        return None if folder else "is empty"
    if len(path) > MAX_PATH_CHARS:
        return f"has {len(path)} characters (at most {MAX_PATH_CHARS})"
    bad = _CONTROL.search(path)
    if bad is not None:
        return f"holds the character {bad.group()!r} (NUL, a control character or a backslash)"
    if path.startswith("/"):
        return "is absolute (or names a host with '//')"
    if _SCHEME.match(path):
        return "starts with a URL scheme"
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return f"has a {part!r} component" if part else "has an empty component ('//' or a trailing '/')"
    return None


def checked_path(path: str, where: str, *, folder: bool = False) -> str:
    """``path`` when it is a dataset path; ``folder``: a listing prefix (``""`` and surrounding
    ``/`` allowed, returned stripped).

    Raises:
        SourceError: ``path`` could leave the root; names the path, ``where`` (the root, no
            credentials) and the reason.
    """
    if folder and isinstance(path, str):
        path = path.strip("/")
    why = path_problem(path, folder=folder)
    if why is not None:
        raise SourceError(
            f"refused to read {path!r} under {where}: the path {why}; paths stay inside the root", path=path
        )
    return path


def origin(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of ``url``, lower case, the scheme's default port filled in."""
    p = urlsplit(url)
    scheme = (p.scheme or "").lower()
    try:
        port = p.port
    except ValueError:  # a port that is not a number: no origin matches it
        return scheme, (p.hostname or "").lower(), -1
    return scheme, (p.hostname or "").lower(), port or (443 if scheme == "https" else 80)


def same_origin(url: str, other: str) -> bool:
    """True when both URLs have the same scheme, host and port (``https`` → ``http`` is another origin)."""
    return origin(url) == origin(other)


def url_under(root: str, path: str, where: str, *, folder: bool = False) -> str:
    """The URL of dataset path ``path`` under ``root`` (a URL ending with ``/``, no query),
    percent-encoded; checked to keep the root's origin and path prefix.

    Raises:
        SourceError: ``path`` is not a dataset path, or the URL would leave the root.
    """
    path = checked_path(path, where, folder=folder)
    url = root + quote(path, safe="/")
    if not same_origin(url, root) or not urlsplit(url).path.startswith(urlsplit(root).path):
        raise SourceError(f"refused to read {path!r} under {where}: its URL leaves the root", path=path)
    return url
