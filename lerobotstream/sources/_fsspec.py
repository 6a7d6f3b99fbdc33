"""Any fsspec URL (``s3://``, ``gs://``, ``memory://``, ``file://``...) as a byte source.

Each thread of each process opens its own filesystem instance (``skip_instance_cache=True``, keyed
by PID). Ranges are read with ``cat_ranges`` (no read-ahead), every blob length-checked.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from lerobotstream.errors import (
    MissingDependencyError,
    RangeReadError,
    SourceError,
    SourceNotFoundError,
    SourceProtocolError,
)
from lerobotstream.sources._base import ByteSource, check_file_size
from lerobotstream.sources._http_transport import error_for, redact_url
from lerobotstream.sources._paths import MAX_METADATA_FILE_NBYTES, checked_path

_FINGERPRINT_KEYS = ("xet_hash", "ETag", "etag", "e_tag", "md5", "md5Hash", "checksum", "sha256", "crc32c")
#: pip packages whose import name differs from the distribution's (the module fsspec failed to import → pip name)
_PIP_NAMES = {"smbclient": "smbprotocol", "libarchive": "libarchive-c"}


def _filesystem_class(protocol: str, shown: str) -> type:
    """The fsspec filesystem class serving ``protocol`` (``s3fs.S3FileSystem`` for ``s3``)."""
    import fsspec
    from fsspec.registry import known_implementations

    if protocol not in fsspec.available_protocols():
        raise SourceProtocolError(
            f"root {shown!r}: no fsspec filesystem serves the protocol {protocol!r}; give a local folder, "
            "an http(s):// URL, hf://datasets/OWNER/NAME, hf://buckets/OWNER/NAME or a URL of an installed fsspec "
            "filesystem (s3://, gs://, ...)",
            path=shown,
            protocol=protocol,
        )
    try:
        return fsspec.get_filesystem_class(protocol)
    except ImportError as e:
        missing = getattr(e.__cause__, "name", None) or getattr(e, "name", None)  # the module that failed
        implementer = str(known_implementations.get(protocol, {}).get("class", "")).split(".", 1)[0]
        module = (missing or implementer).split(".", 1)[0]
        package = _PIP_NAMES.get(module, module)
        hint = f" (fsspec: {e})" if str(e) else ""
        raise MissingDependencyError(
            f"root {shown!r}: the fsspec filesystem of the protocol {protocol!r} needs the package {package!r}, "
            f"which is not installed: pip install {package}{hint}",
            path=shown,
            protocol=protocol,
            package=package,
            name=missing,
        ) from e


class FsspecSource(ByteSource):
    """Files under an fsspec URL ``root`` (``s3://bucket/ds``, ``memory://ds``...);
    ``storage_options``: the filesystem's keyword arguments (kept out of ``repr`` and errors).

    Raises:
        SourceProtocolError: no fsspec filesystem knows the protocol (``gopher://``); a ``ValueError``.
        MissingDependencyError: its package is not installed (``s3fs`` for ``s3://``): names the
            pip package; an ``ImportError``. Both name the root (no credentials) and the protocol.
    """

    def __init__(self, root: str, *, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        import fsspec.core

        self.protocol, base = fsspec.core.split_protocol(root)
        self.protocol = self.protocol or "file"
        self._options = dict(storage_options or {})
        self.root_display = redact_url(root) if "://" in root else root
        cls = _filesystem_class(self.protocol, self.root_display)
        self.base = cls._strip_protocol(root).rstrip("/")
        self._info: dict[str, dict] = {}
        self._init_process_state()

    _PROCESS_LOCAL = ("_local", "_info_lock")

    def _init_process_state(self) -> None:
        self._local = threading.local()
        self._info_lock = threading.Lock()

    @property
    def fs(self):
        """This thread's (and this process's) filesystem instance."""
        loc = self._local
        if getattr(loc, "pid", None) != os.getpid():
            import fsspec

            loc.fs = fsspec.filesystem(self.protocol, skip_instance_cache=True, **self._options)
            loc.pid = os.getpid()
        return loc.fs

    def _full(self, path: str, *, folder: bool = False) -> str:
        """The filesystem path of ``path``, checked by the path rule (``folder``: ``""`` allowed)."""
        path = checked_path(path, self.root_display, folder=folder)
        return "/".join(part for part in (self.base, path) if part)

    def _err(self, e: BaseException, path: str) -> SourceError:
        return error_for(None, path=path, where=self.root_display, exc=e)

    def _stat(self, path: str) -> dict:
        with self._info_lock:
            hit = self._info.get(path)
        if hit is not None:
            return hit
        full = self._full(path)
        try:
            info = self.fs.info(full)
        except Exception as e:
            raise self._err(e, path) from None
        self.stats.add(metadata_requests=1)
        if info.get("type") == "directory":  # not a file: exists() is False, as for a local folder
            raise SourceNotFoundError(f"{path!r} at {self.root_display} is a folder, not a file", path=path)
        with self._info_lock:
            self._info[path] = info
        return info

    def size(self, path: str) -> int:
        return int(self._stat(path)["size"])

    def fingerprint(self, path: str) -> str | None:
        info = self._stat(path)
        for key in _FINGERPRINT_KEYS:
            if info.get(key):
                return f"{key.lower()}={info[key]}"
        for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
            if info.get(key):
                return f"{key}={info[key]}:size={info['size']}"
        return None  # no stable object identity: callers rebuild derived indexes each open

    def list(self, prefix: str) -> list[str]:
        base = self._full(prefix, folder=True)
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return []
        except Exception as e:
            raise self._err(e, prefix) from None
        self.stats.add(metadata_requests=1)
        return sorted(_rel(p, self.base) for p in found)

    def local_path(self, path: str) -> str | None:
        return self._full(path) if self.protocol in ("file", "local") else None

    def read_file(self, path: str) -> bytes:
        """The whole file with one ``cat_file`` (no ``info`` first, at most ``MAX_METADATA_FILE_NBYTES + 1`` bytes).

        Raises:
            SourceNotFoundError: the file does not exist.
            RangeReadError: the file no longer has the size an earlier ``info`` gave.
            SourceError: the file is larger than ``MAX_METADATA_FILE_NBYTES``, or another failure.
        """
        with self._info_lock:
            known = self._info.get(path)
        if known is not None:
            check_file_size(path, int(known["size"]), self.root_display)
        full = self._full(path)
        try:
            data = self.fs.cat_file(full, start=0, end=MAX_METADATA_FILE_NBYTES + 1)
        except Exception as e:
            raise self._err(e, path) from None
        if len(data) > MAX_METADATA_FILE_NBYTES:
            raise SourceError(
                f"{path!r} at {self.root_display} has more than the {MAX_METADATA_FILE_NBYTES} bytes a metadata file "
                "may have; it is not read further",
                path=path,
            )
        if known is not None and len(data) != int(known["size"]):
            raise RangeReadError(
                f"{path!r} at {self.root_display} has {len(data)} bytes, but {known['size']} when it was first seen",
                path=path,
            )
        self.stats.add(requests=1, bytes_read=len(data), bytes_requested=len(data))
        return data

    def _fetch_groups(self, path: str, groups: list[tuple[int, int]]) -> list:
        full = self._full(path)
        try:
            starts = [o for o, _ in groups]
            ends = [o + n for o, n in groups]
            blobs = self.fs.cat_ranges([full] * len(groups), starts, ends, on_error="raise") if groups else []
        except Exception as e:
            raise self._err(e, path) from None
        for (off, n), blob in zip(groups, blobs):
            if isinstance(blob, BaseException):
                raise self._err(blob, path)
            if len(blob) != n:
                raise RangeReadError(
                    f"short read of {path!r} at {self.root_display}: asked [{off}, {off + n}), got {len(blob)} bytes",
                    path=path,
                    offset=off,
                )
        self.stats.add(requests=len(groups), bytes_read=sum(len(b) for b in blobs))
        return blobs


def _rel(p: str, base: str) -> str:
    p, b = p.strip("/"), base.strip("/")
    return p[len(b) + 1 :] if b and p.startswith(b + "/") else p
