"""Reading one ``meta/`` file of a LeRobot v3 dataset — its bytes, its JSON, its Parquet table —
with every failure a :class:`~lerobotstream.errors.MetadataError` naming the file: missing,
unreadable (:class:`~lerobotstream.errors.MetadataReadError`, also an ``OSError``: a symlink loop,
a refused permission, a failed read of the store), not JSON, JSON nested deeper than Python's
parser allows, not Parquet. ``lerobotstream.meta`` builds the dataset's metadata from these."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from lerobotstream.constants import INFO_PATH
from lerobotstream.errors import MetadataError, MetadataReadError, SourceError, SourceReadError, os_reason
from lerobotstream.parquet import FOOTER_MAX_ITEMS

if TYPE_CHECKING:
    from lerobotstream.sources import ByteSource
    from lerobotstream.sources._prefetch import PrefetchedReads

#: largest ``meta/*.json`` file parsed, bytes: a parsed JSON value costs up to ~30x its text in
#: Python objects, and LeRobot's ``info.json`` / ``stats.json`` hold a few KB to a few MB
MAX_JSON_NBYTES = 16 * 1024 * 1024


def _where(source: ByteSource | PrefetchedReads, path: str) -> str:
    root = getattr(source, "root_display", "") or ""
    return f"{root.rstrip('/')}/{path}" if root else path


def _read_bytes(source: ByteSource | PrefetchedReads, path: str, *, what: str) -> bytes:
    try:
        return source.read_file(path)
    except FileNotFoundError as e:
        hint = ""
        root = str(getattr(source, "root_display", "") or "").rstrip("/")
        if path == INFO_PATH and (root.endswith("/meta") or root == "meta"):
            parent = root.rsplit("/", 1)[0] if "/" in root else "."
            hint = f"; the root looks like the dataset's meta/ folder: give its parent folder as the root ({parent})"
        raise MetadataError(f"{what} is missing: {_where(source, path)}{hint}", path=path) from e
    except OSError as e:  # SourceError, or the local file system's own (a symlink loop, EACCES, EIO)
        raise _read_error(source, path, what, e) from e


def read_reason(e: OSError) -> str:
    """Why a file that is there could not be read: the operating system's text and errno name
    (``Permission denied (EACCES)``), without the path the message repeats; a store's own error text."""
    if isinstance(e, SourceReadError):
        return e.reason
    if isinstance(e, SourceError):
        return str(e)
    return os_reason(e)


def _read_error(source: ByteSource | PrefetchedReads, path: str, what: str, e: OSError) -> MetadataReadError:
    """The error for a ``meta/`` file (or folder) that exists but cannot be read: the file and the
    reason (:func:`read_reason`)."""
    return MetadataReadError(
        f"could not read {what} {_where(source, path)}: {read_reason(e)}", path=path, errno=getattr(e, "errno", None)
    )


def _parse_json(source: ByteSource | PrefetchedReads, path: str, raw: bytes) -> Any:
    """``json.loads(raw)`` of a ``meta/`` file; anything that is not JSON Python can hold (bad
    bytes, bad syntax, nesting deeper than the interpreter's recursion limit, more than
    :data:`MAX_JSON_NBYTES` bytes) is a :class:`MetadataError` naming the file."""
    if len(raw) > MAX_JSON_NBYTES:
        raise MetadataError(
            f"{_where(source, path)} has {len(raw)} bytes, more than the {MAX_JSON_NBYTES} bytes a LeRobot "
            "metadata JSON file may have (they hold a few KB to a few MB); it is not parsed",
            path=path,
        )
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MetadataError(f"{_where(source, path)} is not valid JSON: {e}", path=path) from e
    except RecursionError as e:
        raise MetadataError(
            f"{_where(source, path)} nests arrays/objects deeper than the JSON parser allows "
            f"({e}); it is not a LeRobot metadata file: restore it",
            path=path,
        ) from None


def _read_parquet(
    source: ByteSource | PrefetchedReads,
    path: str,
    *,
    what: str,
    columns: Iterable[str] | None = None,
    check: Callable[[pq.FileMetaData], None] | None = None,
) -> pa.Table:
    """The table of a ``meta/`` Parquet file (``columns`` that exist, or all); ``check`` is called
    with its footer before anything is decoded (it raises to refuse the file)."""
    data = _read_bytes(source, path, what=what)
    try:
        pf = pq.ParquetFile(io.BytesIO(data), thrift_container_size_limit=FOOTER_MAX_ITEMS)
        if check is not None:
            check(pf.metadata)
        names = pf.schema_arrow.names
        cols = None if columns is None else [c for c in names if c in set(columns)]
        return pf.read(columns=cols, use_threads=False)  # small files; pyarrow threads + torch can abort at exit
    except MetadataError:
        raise
    except (pa.ArrowException, OSError, ValueError) as e:
        raise MetadataError(f"{what} {_where(source, path)} is not a readable Parquet file: {e}", path=path) from e
