"""Episode rows from LeRobot v3 ``data/`` Parquet files: projected, row-group-pruned, validated.

Reads go through a :class:`~lerobotstream.sources.ByteSource` via a seekable file object, so
only the bytes pyarrow asks for travel: the footer (once per file and process; the parsed
``FileMetaData`` is cached) and the column chunks of the projected columns in the candidate row
groups. A row group is a candidate when its ``episode_index`` statistics ``[min, max]`` contain a
requested episode, or when it has no statistics (then it must be read and filtered, so a file
without valid bounds may need a whole-file projected read). Rows are then filtered by
whole episodes and checked: row count equals the episode's ``length``, every ``episode_index``
is the episode, and ``frame_index`` is exactly ``0..length-1`` in order.

Damaged files fail loudly: pages that carry a CRC-32 (``write_page_checksum=True``; the Parquet
format's optional ``crc`` field) are verified while they are decoded, and any decoding failure
(a truncated or corrupt page, a checksum mismatch) raises
:class:`~lerobotstream.errors.ParquetCorruptError` naming the file, the episodes and the row groups,
instead of pyarrow's bare ``OSError``.
"""

from __future__ import annotations

import bisect
import io
import os
import threading
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lerobotstream.errors import EpisodeDataError, ParquetCorruptError, SourceError
from lerobotstream.sources import ByteSource


class SourceFile(io.RawIOBase):
    """Read-only, seekable file object over one file of a ByteSource (what pyarrow reads from).

    No buffering: each ``read`` is one ``ByteSource.read`` of exactly the bytes asked for
    (pyarrow itself reads the footer with one 64 KiB tail read, and with ``pre_buffer`` merges
    the column chunks of a row group into few large reads).
    """

    def __init__(self, source: ByteSource, path: str, size: int | None = None) -> None:
        super().__init__()
        self.source = source
        self.path = path
        self._size = source.size(path) if size is None else size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, n: int = -1) -> bytes:
        start = self._pos
        stop = self._size if n is None or n < 0 else min(self._size, start + n)
        if stop <= start:
            return b""
        data = self.source.read(self.path, start, stop - start)
        self._pos = stop
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


class EpisodeParquetReader:
    """Reads whole episodes' rows from the ``data/`` Parquet files of one dataset.

    Args:
        source: the dataset's byte source.
        columns: columns to return (None: every column of the file). ``episode_index`` and
            ``frame_index`` are read for filtering/validation and dropped again when not asked for.

    Thread-safe; the parsed footers are cached per process.
    """

    def __init__(self, source: ByteSource, columns: Sequence[str] | None = None) -> None:
        self.source = source
        self.columns = list(dict.fromkeys(columns)) if columns is not None else None
        self._lock = threading.Lock()
        self._meta: dict[str, pq.FileMetaData] = {}
        self._pid = os.getpid()
        self.row_groups_read = 0
        """Row groups read so far (for tests and profiling)."""

    def _where(self, path: str) -> str:
        return f"{path} in {self.source.root_display}"

    def metadata(self, path: str, *, episodes: Sequence[int] | None = None) -> pq.FileMetaData:
        """The file's Parquet footer (read once per process).

        Raises:
            ParquetCorruptError: the footer cannot be read (names the file and ``episodes``).
        """
        with self._lock:
            if self._pid != os.getpid():
                self._meta, self._pid = {}, os.getpid()
            md = self._meta.get(path)
        if md is None:
            try:
                md = pq.ParquetFile(SourceFile(self.source, path)).metadata
            except (pa.ArrowException, OSError, ValueError) as e:
                if isinstance(e, SourceError):
                    raise
                what = "" if not episodes else f" (reading episodes {_short(episodes)})"
                raise ParquetCorruptError(
                    f"cannot read the Parquet footer of {self._where(path)}{what}: {type(e).__name__}: {_reason(e)}; the file is "
                    "truncated or damaged: re-download or rewrite it", path=path,
                    episode_index=int(min(episodes)) if episodes else None) from e
            with self._lock:
                self._meta[path] = md
        return md

    def candidate_row_groups(self, path: str, episodes: Sequence[int]) -> list[int]:
        """Row groups that may hold rows of ``episodes`` (statistics overlap, or no statistics)."""
        md = self.metadata(path)
        wanted = sorted(set(int(e) for e in episodes))
        col = _column_index(md, "episode_index")
        if col is None:
            raise EpisodeDataError(f"{self._where(path)} has no episode_index column", path=path)
        out = []
        for i in range(md.num_row_groups):
            st = md.row_group(i).column(col).statistics
            if st is None or not st.has_min_max:
                out.append(i)  # no bounds: must be read and filtered
                continue
            k = bisect.bisect_left(wanted, int(st.min))
            if k < len(wanted) and wanted[k] <= int(st.max):
                out.append(i)
        return out

    def read(self, data_path: str, episode_lengths: Mapping[int, int]) -> dict[int, pa.Table]:
        """Rows of each episode in ``episode_lengths`` (episode_index → expected length) that lives
        in ``data_path``.

        Returns:
            dict episode_index → ``pyarrow.Table`` with the projected columns, rows in frame order.

        Raises:
            EpisodeDataError: a projected column is missing, or an episode's rows disagree with its
                metadata (count, episode_index, frame_index), naming the episode and the file.
            ParquetCorruptError: the file cannot be decoded (truncated or corrupt pages, a page
                checksum mismatch), naming the file, the episodes and the row groups.
            SourceError: the bytes could not be read.
        """
        md = self.metadata(data_path, episodes=list(episode_lengths))
        names = md.schema.to_arrow_schema().names
        wanted_cols = list(names) if self.columns is None else list(self.columns)
        missing = [c for c in wanted_cols if c not in names]
        if missing:
            raise EpisodeDataError(f"missing projected columns {missing} in {self._where(data_path)}", path=data_path)
        read_cols = list(dict.fromkeys(wanted_cols + ["episode_index"] + (["frame_index"] if "frame_index" in names else [])))
        groups = self.candidate_row_groups(data_path, list(episode_lengths))
        if groups:
            try:
                pf = pq.ParquetFile(SourceFile(self.source, data_path), metadata=md, pre_buffer=True,
                                    page_checksum_verification=True)
                table = pf.read_row_groups(groups, columns=read_cols, use_threads=False)
            except (pa.ArrowException, OSError, ValueError) as e:
                if isinstance(e, SourceError):
                    raise
                eps = sorted(int(ep) for ep in episode_lengths)
                raise ParquetCorruptError(
                    f"episodes {_short(eps)} in {self._where(data_path)}: the Parquet data cannot be decoded "
                    f"(row groups {_short(groups)}, columns {read_cols}): {type(e).__name__}: {_reason(e)}; the file is "
                    "truncated or damaged: re-download or rewrite it", path=data_path,
                    episode_index=eps[0] if eps else None) from e
        else:
            table = pa.schema([md.schema.to_arrow_schema().field(c) for c in read_cols]).empty_table()
        with self._lock:
            self.row_groups_read += len(groups)
        ep_col = table.column("episode_index").to_numpy()
        out: dict[int, pa.Table] = {}
        for ep, length in episode_lengths.items():
            ep = int(ep)
            rows = np.flatnonzero(ep_col == ep)
            part = table.take(pa.array(rows, type=pa.int64()))
            _validate(part, ep, int(length), data_path, self.source.root_display)
            out[ep] = part.select(wanted_cols)
        return out


def _reason(e: BaseException) -> str:
    """pyarrow's message on one line, without its trailing period."""
    return " ".join(str(e).split()).rstrip(".") or repr(e)


def _short(values: Sequence[int], limit: int = 8) -> str:
    """``[1, 2, 3]``, or ``[1, 2, ..., (40 in all)]`` for long lists (messages stay one short line)."""
    values = [int(v) for v in values]
    if len(values) <= limit:
        return str(values)
    return f"{str(values[:limit])[:-1]}, ... ({len(values)} in all)]"


def _column_index(md: pq.FileMetaData, name: str) -> int | None:
    if md.num_row_groups == 0:
        names = md.schema.names
        return names.index(name) if name in names else None
    rg = md.row_group(0)
    for j in range(rg.num_columns):
        if rg.column(j).path_in_schema == name:
            return j
    return None


def _validate(part: pa.Table, ep: int, length: int, path: str, root: str) -> None:
    where = f"episode {ep} in {path} ({root})"
    if part.num_rows != length:
        raise EpisodeDataError(f"{where}: expected {length} rows, found {part.num_rows}", episode_index=ep, path=path)
    if length and not pc.all(pc.equal(part.column("episode_index"), ep)).as_py():
        raise EpisodeDataError(f"{where}: rows outside the episode", episode_index=ep, path=path)
    if "frame_index" in part.column_names:
        fi = part.column("frame_index").to_numpy()
        if not np.array_equal(fi, np.arange(length, dtype=fi.dtype)):
            bad = int(np.flatnonzero(fi != np.arange(length, dtype=fi.dtype))[0])
            raise EpisodeDataError(
                f"{where}: non-contiguous frame_index (row {bad} has {int(fi[bad])}, expected {bad})",
                episode_index=ep, path=path,
            )


def read_episode_rows(
    source: ByteSource,
    data_path: str,
    episode_lengths: Mapping[int, int],
    columns: Sequence[str] | None = None,
) -> dict[int, pa.Table]:
    """One-shot form of :meth:`EpisodeParquetReader.read` (no footer cache across calls)."""
    return EpisodeParquetReader(source, columns).read(data_path, episode_lengths)
