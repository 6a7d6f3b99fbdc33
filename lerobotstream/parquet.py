"""Episode rows from LeRobot v3 ``data/`` Parquet files: projected, row-group-pruned, validated.

Reads go through a :class:`~lerobotstream.sources.ByteSource` via a seekable file object, so only
the bytes pyarrow asks for travel: the footer (once per file and process) and the projected column
chunks of the candidate row groups (those whose ``episode_index`` statistics contain a requested
episode, or that have none). Footer and row-group reads are single-flight (threads wanting one in
flight wait for it), decoded row groups stay in a small LRU (:data:`ROW_GROUP_CACHE_BYTES`), and a
small remote file is read whole with its footer (:data:`SMALL_FILE_BYTES`). Each episode's rows
are checked (:func:`episode_rows_problem`, the rule ``lerobotstream.validate`` applies too).

Damaged files fail loudly: page CRC-32s (the Parquet format's optional ``crc``) are verified, and
any decoding failure raises :class:`~lerobotstream.errors.ParquetCorruptError` naming the file,
the episodes and the row groups.
"""

from __future__ import annotations

import bisect
import io
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lerobotstream.errors import EpisodeDataError, ParquetCorruptError, Problem, SourceError
from lerobotstream.sources import ByteSource

#: decoded row groups kept per reader, bytes of their Arrow buffers (LRU; a larger one is shared
#: only with the readers waiting for it): the projected columns of a few hundred LeRobot episodes
ROW_GROUP_CACHE_BYTES = 64 * 1024 * 1024
#: a remote data file no larger than this is read whole with its footer (one request, not two)
SMALL_FILE_BYTES = 1024 * 1024
#: bytes of such whole small files kept per reader (LRU)
SMALL_FILES_CACHE_BYTES = 16 * 1024 * 1024
#: most column bytes one read may decode, as the footer declares them (LeRobot cuts its data files
#: at ~100 MB; a decompression bomb declares more)
READ_MAX_BYTES = 512 * 1024 * 1024
#: most items of any list in a Parquet footer (row groups, column chunks, schema elements), given
#: to pyarrow's Thrift decoder before it allocates them (a LeRobot file has a handful of row groups)
FOOTER_MAX_ITEMS = 100_000


class _SingleFlight:
    """One computation per key at a time: callers of a key in flight wait for its result. Results
    stay in ``done`` (an LRU of at most ``capacity_bytes`` by ``nbytes(value)``); after a failure
    each waiter computes again, so its error names its own request. Not fork-safe."""

    def __init__(self, capacity_bytes: int | None, nbytes: Callable[[object], int] = lambda v: 0) -> None:
        self.capacity_bytes = capacity_bytes
        self._nbytes = nbytes
        self._lock = threading.Lock()
        self._inflight: dict[object, Future] = {}
        self.done: OrderedDict[object, object] = OrderedDict()
        self._held = 0
        self.computed = 0  # values computed (rather than shared or cached)
        self.shared = 0  # values awaited while another thread computed them

    def get(self, key: object, fn: Callable[[], object]) -> object:
        """The value of ``key``: cached, or awaited while another thread computes it, or ``fn()``."""
        return self.get_many([key], lambda keys: [fn()])[0]

    def get_many(self, keys: Sequence[object], compute: Callable[[list], list]) -> list:
        """Values of ``keys``; those neither cached nor in flight come from one ``compute(missing)``
        call (values in the order of ``missing``). A thread computes its own keys before it waits
        for others', so two threads never wait on each other."""
        mine: list = []
        waits: dict[object, Future] = {}
        out: dict[object, object] = {}
        with self._lock:
            for k in dict.fromkeys(keys):
                if k in self.done:
                    self.done.move_to_end(k)
                    out[k] = self.done[k]
                elif k in self._inflight:
                    waits[k] = self._inflight[k]
                    self.shared += 1
                else:
                    self._inflight[k] = Future()
                    mine.append(k)
            self.computed += len(mine)
        if mine:
            try:
                values = list(compute(mine))
            except BaseException as exc:
                with self._lock:
                    futs = [self._inflight.pop(k) for k in mine]
                for f in futs:
                    f.set_exception(exc)
                raise
            with self._lock:
                futs = [self._inflight.pop(k) for k in mine]
                for k, v in zip(mine, values):
                    self._keep(k, v)
            for f, v in zip(futs, values):
                f.set_result(v)
            out.update(zip(mine, values))
        failed = []
        for k, f in waits.items():
            try:
                out[k] = f.result()
            except BaseException:  # the other thread's failure: read again, so the error is ours
                failed.append(k)
        if failed:
            with self._lock:
                self.computed += len(failed)
            out.update(zip(failed, compute(failed)))
        return [out[k] for k in keys]

    def _keep(self, key: object, value: object) -> None:
        n = self._nbytes(value)
        if self.capacity_bytes is not None and n > self.capacity_bytes:
            return
        self.done[key] = value
        self._held += n
        while self.capacity_bytes is not None and self._held > self.capacity_bytes and self.done:
            _, old = self.done.popitem(last=False)
            self._held -= self._nbytes(old)


class SourceFile(io.RawIOBase):
    """Read-only, seekable, unbuffered file object over one file of a ByteSource: each ``read`` is
    one ``ByteSource.read`` of exactly the bytes asked for (pyarrow's ``pre_buffer`` merges them)."""

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
        columns: columns to return (None: all). ``episode_index`` and ``frame_index`` are read for
            filtering and validation and dropped again when not asked for.
        row_group_cache_bytes: decoded row groups kept for later episodes, bytes (0: none).
        file_rows: rows each data file should hold (``DatasetMeta.data_file_rows``); a footer
            declaring more is refused before decoding (:func:`footer_rows_problem`). None: unchecked.

    Thread-safe and single-flight; footers and row groups are cached per process (a forked child
    starts empty).
    """

    def __init__(
        self,
        source: ByteSource,
        columns: Sequence[str] | None = None,
        *,
        row_group_cache_bytes: int = ROW_GROUP_CACHE_BYTES,
        file_rows: Mapping[str, int] | None = None,
    ) -> None:
        self.source = source
        self.file_rows = file_rows
        self.columns = list(dict.fromkeys(columns)) if columns is not None else None
        self.row_group_cache_bytes = int(row_group_cache_bytes)
        self._lock = threading.Lock()
        self._pid = -1
        self._check_pid()
        self.row_groups_read = 0  # read from the source (cached or shared ones not counted)

    def _check_pid(self) -> None:
        with self._lock:
            if self._pid != os.getpid():  # forked: nothing of the parent's reads is shared
                self._pid = os.getpid()
                self._footers = _SingleFlight(None)
                self._groups = _SingleFlight(self.row_group_cache_bytes, lambda t: t.nbytes)
                self._small: OrderedDict[str, bytes] = OrderedDict()  # path -> whole small file
                self._small_bytes = 0

    def _where(self, path: str) -> str:
        return f"{path} in {self.source.root_display}"

    def metadata(self, path: str, *, episodes: Sequence[int] | None = None) -> pq.FileMetaData:
        """The file's Parquet footer (read once per process, by one thread).

        Raises:
            ParquetCorruptError: the footer cannot be read (names the file and ``episodes``).
            EpisodeDataError: the footer declares more rows than the file's episodes hold
                (``file_rows``), naming the file.
        """
        self._check_pid()
        return self._footers.get(path, lambda: self._read_footer(path, episodes))

    def _read_footer(self, path: str, episodes: Sequence[int] | None) -> pq.FileMetaData:
        size = self.source.size(path)
        small = size <= SMALL_FILE_BYTES and self.source.local_path(path) is None  # remote: a round trip saved
        data = self.source.read(path, 0, size) if small else None
        try:
            md = pq.ParquetFile(
                SourceFile(self.source, path, size) if data is None else pa.BufferReader(data),
                thrift_container_size_limit=FOOTER_MAX_ITEMS,
            ).metadata
        except (pa.ArrowException, OSError, ValueError) as e:
            if isinstance(e, SourceError):
                raise
            what = "" if not episodes else f" (reading episodes {_short(episodes)})"
            raise ParquetCorruptError(
                f"cannot read the Parquet footer of {self._where(path)}{what}: {type(e).__name__}: {_reason(e)}; the file is "
                "truncated or damaged: re-download or rewrite it",
                path=path,
                episode_index=int(min(episodes)) if episodes else None,
            ) from e
        problem = None if self.file_rows is None else footer_rows_problem(md, int(self.file_rows.get(path, 0)))
        if problem is not None:
            what = "" if not episodes else f"episodes {_short(episodes)} in "
            raise EpisodeDataError(
                f"{what}{self._where(path)}: {problem.message}; the file does not hold these episodes' rows "
                "(a damaged or hostile file): refused before decoding",
                path=path,
                episode_index=int(min(episodes)) if episodes else None,
                code=problem.code,
            )
        if data is not None:
            with self._lock:
                self._small[path] = data
                self._small_bytes += len(data)
                while self._small_bytes > SMALL_FILES_CACHE_BYTES and len(self._small) > 1:
                    self._small_bytes -= len(self._small.popitem(last=False)[1])
        return md

    def _file(self, path: str):
        """What pyarrow reads ``path`` from: its bytes when it was small, else a :class:`SourceFile`."""
        with self._lock:
            data = self._small.get(path)
            if data is not None:
                self._small.move_to_end(path)
        return SourceFile(self.source, path) if data is None else pa.BufferReader(data)

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
        read_cols = list(
            dict.fromkeys(wanted_cols + ["episode_index"] + (["frame_index"] if "frame_index" in names else []))
        )
        groups = self.candidate_row_groups(data_path, list(episode_lengths))
        eps = sorted(int(ep) for ep in episode_lengths)
        if groups:
            cols = tuple(read_cols)
            parts = self._groups.get_many(
                [(data_path, g, cols) for g in groups],
                lambda keys: self._read_groups(data_path, md, [k[1] for k in keys], cols, eps),
            )
            table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        else:
            table = pa.schema([md.schema.to_arrow_schema().field(c) for c in read_cols]).empty_table()
        ep_col = table.column("episode_index").to_numpy()
        out: dict[int, pa.Table] = {}
        for ep, length in episode_lengths.items():
            ep = int(ep)
            rows = np.flatnonzero(ep_col == ep)
            if rows.size and int(rows[-1]) - int(rows[0]) + 1 == rows.size:
                part = table.slice(int(rows[0]), int(rows.size))  # the usual contiguous rows: no copy
            else:
                part = table.take(pa.array(rows, type=pa.int64()))
            _validate(part, ep, int(length), data_path, self.source.root_display)
            out[ep] = part.select(wanted_cols)
        return out

    def read_columns(self, path: str, columns: Sequence[str], *, episodes: Sequence[int] | None = None) -> pa.Table:
        """The ``columns`` of the file that exist (a projected read), of every row group or of the
        candidate row groups of ``episodes``; rows in file order, unfiltered, unchecked, uncached.

        Raises:
            ParquetCorruptError: the footer or the pages cannot be decoded (names the file, the
                episodes, the row groups and the columns).
            EpisodeDataError: ``episodes`` given and the file has no ``episode_index`` column.
            SourceError: the bytes could not be read.
        """
        md = self.metadata(path, episodes=episodes)
        names = md.schema.to_arrow_schema().names
        cols = [c for c in dict.fromkeys(columns) if c in names]
        groups = list(range(md.num_row_groups)) if episodes is None else self.candidate_row_groups(path, episodes)
        if not groups or not cols:
            return pa.schema([md.schema.to_arrow_schema().field(c) for c in cols]).empty_table()
        parts = self._read_groups(path, md, groups, cols, sorted(int(e) for e in episodes or ()))
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def _read_groups(
        self, path: str, md: pq.FileMetaData, groups: list[int], cols: Sequence[str], eps: Sequence[int]
    ) -> list[pa.Table]:
        """Row groups ``groups`` of ``path`` (columns ``cols``) in one pyarrow read, checksums
        verified; one table each. More than :data:`READ_MAX_BYTES` declared is refused."""
        declared = declared_bytes(md, groups, cols)
        if declared > READ_MAX_BYTES:
            raise EpisodeDataError(
                f"{f'episodes {_short(eps)} in ' if eps else ''}{self._where(path)}: row groups {_short(groups)} "
                f"declare {declared} bytes of columns {list(cols)} once decoded, more than the {READ_MAX_BYTES} "
                "one read may decode (a damaged or hostile file): refused before decoding",
                path=path,
                episode_index=eps[0] if eps else None,
                code="data_rows",
            )
        try:
            pf = pq.ParquetFile(self._file(path), metadata=md, pre_buffer=True, page_checksum_verification=True)
            table = pf.read_row_groups(groups, columns=list(cols), use_threads=False)
        except (pa.ArrowException, OSError, ValueError) as e:
            if isinstance(e, SourceError):
                raise
            raise ParquetCorruptError(
                f"{f'episodes {_short(eps)} in ' if eps else ''}{self._where(path)}: the Parquet data cannot be decoded "
                f"(row groups {_short(groups)}, columns {list(cols)}): {type(e).__name__}: {_reason(e)}; the file is "
                "truncated or damaged: re-download or rewrite it",
                path=path,
                episode_index=eps[0] if eps else None,
            ) from e
        with self._lock:
            self.row_groups_read += len(groups)
        out, start = [], 0
        for g in groups:
            n = md.row_group(g).num_rows
            out.append(table.slice(start, n))
            start += n
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


def footer_rows_problem(md: pq.FileMetaData, expected_rows: int) -> Problem | None:
    """``Problem("data_rows", "its footer declares 20000000 rows in 1 row groups (the largest
    20000000), its episodes have 90 frames in meta/episodes")`` when footer ``md`` declares more
    rows than ``expected_rows`` (the summed ``length`` of its episodes); None otherwise."""
    rows = int(md.num_rows)
    if rows <= expected_rows:
        return None
    largest = max((int(md.row_group(i).num_rows) for i in range(md.num_row_groups)), default=0)
    return Problem(
        "data_rows",
        f"its footer declares {rows} rows in {md.num_row_groups} row groups (the largest {largest}), "
        f"its episodes have {expected_rows} frames in meta/episodes",
    )


def declared_bytes(md: pq.FileMetaData, groups: Sequence[int], cols: Sequence[str]) -> int:
    """Uncompressed bytes the footer declares for columns ``cols`` (and their nested leaves) of
    row groups ``groups``."""
    total = 0
    for g in groups:
        rg = md.row_group(g)
        for j in range(rg.num_columns):
            cc = rg.column(j)
            p = cc.path_in_schema
            if any(p == c or p.startswith(c + ".") for c in cols):
                total += max(0, int(cc.total_uncompressed_size))
    return total


def _column_index(md: pq.FileMetaData, name: str) -> int | None:
    if md.num_row_groups == 0:
        names = md.schema.names
        return names.index(name) if name in names else None
    rg = md.row_group(0)
    for j in range(rg.num_columns):
        if rg.column(j).path_in_schema == name:
            return j
    return None


def _non_integer_kind(values: np.ndarray) -> str | None:
    """What a column that is not numbers holds (``str``, ``bool``), or None for numbers."""
    if values.dtype.kind in "iuf":
        return None
    if values.dtype.kind == "O":
        return "/".join(sorted({type(v).__name__ for v in values[:64].tolist()})) or "non-numeric"
    return str(values.dtype)


def episode_rows_problem(
    episode_index: np.ndarray, frame_index: np.ndarray | None, ep: int, length: int
) -> Problem | None:
    """What is wrong with the rows read for episode ``ep`` (``length`` in ``meta/episodes``), or None.

    ``frame_index`` is None when the file has no such column. Returns a
    :class:`~lerobotstream.errors.Problem`: ``data_rows`` ("expected 30 rows, found 29", or rows of
    another episode) or ``data_frame_index`` ("non-contiguous frame_index (row 10 has -1, expected
    10)": it must be exactly ``0..length-1`` in row order; "the frame_index column holds str values,
    not integers": a column of another type than numbers).
    """
    for name, col in (("episode_index", episode_index), ("frame_index", frame_index)):
        kind = None if col is None else _non_integer_kind(np.asarray(col))
        if kind is not None:
            code = "data_rows" if name == "episode_index" else "data_frame_index"
            reason = f"the {name} column holds {kind} values, not integers (LeRobot writes int64)"
            return Problem(code, reason, episode_index=ep, column=name)
    n = int(episode_index.shape[0])
    if n != length:
        return Problem("data_rows", f"expected {length} rows, found {n}", episode_index=ep)
    if length and not bool(np.all(episode_index == ep)):
        return Problem("data_rows", "rows outside the episode", episode_index=ep)
    if frame_index is not None:
        fi = np.asarray(frame_index)
        want = np.arange(length, dtype=fi.dtype)
        if not np.array_equal(fi, want):
            bad = int(np.flatnonzero(fi != want)[0])
            reason = f"non-contiguous frame_index (row {bad} has {int(fi[bad])}, expected {bad})"
            return Problem("data_frame_index", reason, episode_index=ep)
    return None


def index_problem(index: np.ndarray, from_index: int) -> Problem | None:
    """``Problem("data_index_range", "row 6 (frame_index 6) has index 999, dataset_from_index +
    frame_index is 6")`` for the first row (in ``frame_index`` order) whose ``index`` is not
    ``from_index + frame_index``; None when every row's is."""
    got = np.asarray(index)
    want = int(from_index) + np.arange(got.shape[0], dtype=np.int64)
    bad = got != want
    if not bad.any():
        return None
    k = int(np.flatnonzero(bad)[0])
    return Problem(
        "data_index_range",
        f"row {k} (frame_index {k}) has index {got[k]}, dataset_from_index + frame_index is {int(want[k])}",
    )


def task_index_problem(task_index: np.ndarray, n_tasks: int, frame_index: np.ndarray | None = None) -> Problem | None:
    """What is wrong with an episode's ``task_index`` values, or None: each must satisfy ``0 <=
    task_index < n_tasks`` (a negative one would pick a task from the end; a null read as NaN is
    out of range too). ``frame_index`` names the row's frame (None: row ``k`` is frame ``k``).

    Returns:
        ``Problem("data_task_index", "row 3 (frame_index 3) has task_index 7, but meta/tasks.parquet
        holds 1 task (task_index 0..0)", column="task_index")`` for the first row out of range
        (with how many are).
    """
    got = np.asarray(task_index)
    if got.shape[0] == 0:
        return None
    if got.dtype.kind == "f":
        bad = ~np.isfinite(got) | (got < 0) | (got >= n_tasks) | (got != np.floor(got))
    elif got.dtype.kind in "iu":
        bad = (got < 0) | (got >= n_tasks)
    else:  # not a number column (objects: nulls, strings)
        bad = np.array([not isinstance(v, (int, np.integer)) or not 0 <= int(v) < n_tasks for v in got.tolist()])
    if not bad.any():
        return None
    k = int(np.flatnonzero(bad)[0])
    fi = k if frame_index is None else int(np.asarray(frame_index)[k])
    value = got[k].item() if hasattr(got[k], "item") else got[k]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    shown = "null" if value is None or (isinstance(value, float) and value != value) else repr(value)
    more = int(bad.sum())
    also = f" ({more} rows out of range)" if more > 1 else ""
    valid = f"task_index 0..{n_tasks - 1}" if n_tasks else "no valid task_index"
    return Problem(
        "data_task_index",
        f"row {k} (frame_index {fi}) has task_index {shown}{also}, but meta/tasks.parquet holds "
        f"{n_tasks} task{'s' if n_tasks != 1 else ''} ({valid})",
        column="task_index",
    )


#: the columns every LeRobot v3 data file has, as LeRobot declares them (when meta/info.json does not)
STANDARD_COLUMNS = {
    "timestamp": {"dtype": "float32", "shape": [1]},
    **{k: {"dtype": "int64", "shape": [1]} for k in ("frame_index", "episode_index", "index", "task_index")},
}

#: ``meta/info.json`` feature dtypes whose data columns hold numbers → the Arrow type of their values
NUMERIC_DTYPES: dict[str, pa.DataType] = {
    name: pa.type_for_alias(name)
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
    + ("float16", "float32", "float64")
}


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _leaf_type(t: pa.DataType) -> pa.DataType:
    while _is_list(t):
        t = t.value_type
    return t


def _declared_type(arrow_type: pa.DataType, dtype: str) -> pa.DataType:
    """``arrow_type`` (a number, or (nested) lists of numbers) with values of ``dtype``."""
    if pa.types.is_fixed_size_list(arrow_type):
        return pa.list_(_declared_type(arrow_type.value_type, dtype), arrow_type.list_size)
    if pa.types.is_large_list(arrow_type):
        return pa.large_list(_declared_type(arrow_type.value_type, dtype))
    if pa.types.is_list(arrow_type):
        return pa.list_(_declared_type(arrow_type.value_type, dtype))
    return NUMERIC_DTYPES[dtype]


def declared_values(column: pa.ChunkedArray, dtype: object) -> pa.ChunkedArray:
    """``column`` with its numbers of the declared ``dtype`` (a key of :data:`NUMERIC_DTYPES`), cast
    as LeRobot's loader casts them (``list<int64>`` → ``list<float>`` for ``float32``); the same
    column when they are already, or ``dtype`` names no numbers. For a column
    :func:`data_column_problem` passed.

    Raises:
        pyarrow.ArrowInvalid: a value the dtype cannot hold (what :func:`data_column_problem` reports).
    """
    want = NUMERIC_DTYPES.get(dtype) if isinstance(dtype, str) else None
    if want is None or _leaf_type(column.type) == want:
        return column
    return column.cast(_declared_type(column.type, dtype))


def _first_null_row(column: pa.ChunkedArray | pa.Array) -> int:
    def has_null(v: object) -> bool:
        return v is None or (isinstance(v, list) and any(has_null(x) for x in v))

    return next(k for k, v in enumerate(column.to_pylist()) if has_null(v))


def _first_uncastable_row(column: pa.ChunkedArray | pa.Array, leaf: pa.DataType) -> int:
    """The first row of ``column`` holding a value pyarrow's safe cast to ``leaf`` refuses (0 when none)."""
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    rows = None  # the row of each value of ``values``
    while _is_list(values.type):
        parents = pc.list_parent_indices(values)
        rows = parents if rows is None else rows.take(parents)
        values = pc.list_flatten(values)
    lo, hi = 0, len(values)  # the first lo values cast, the first hi do not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            values.slice(0, mid).cast(leaf)
            lo = mid
        except pa.ArrowException:
            hi = mid
    return lo if rows is None or lo >= len(rows) else int(rows[lo].as_py())


def data_column_problem(column: pa.ChunkedArray | pa.Array, dtype: object, name: str | None = None) -> Problem | None:
    """What is wrong with an episode's data ``column`` (pyarrow; rows in ``frame_index`` order) of a
    feature whose ``meta/info.json`` ``dtype`` names numbers (:data:`NUMERIC_DTYPES`), or None (also
    for any other ``dtype``). Every row must hold numbers, or (nested) lists of numbers, with no
    null row or value, that the declared dtype holds: the values are cast to it as LeRobot's loader
    does (pyarrow's safe cast: an int under ``float32`` beyond ±2**24, a float with a fraction or NaN
    under an int dtype, a negative under ``uint8`` are refused). Checked once per episode on the
    Arrow types and null counts (vectorised); the row is searched for only when one is at fault.

    Returns:
        ``Problem("data_dtype", "column 'observation.state' row 1 (frame_index 1) holds a null value
        where meta/info.json declares float32 values", column=name)``; or ``... holds values of Arrow
        type string where ...`` (a column of strings, structs, binary, dictionaries); or ``... holds a
        value (int64) that float32 cannot hold (Integer value 4611686018427387904 not in range: ...)``.
    """
    want = NUMERIC_DTYPES.get(dtype) if isinstance(dtype, str) else None
    if want is None:
        return None
    what = f"column {name!r}" if name is not None else "the column"
    declared = f"meta/info.json declares {dtype} values"
    leaf = _leaf_type(column.type)
    if not (pa.types.is_integer(leaf) or pa.types.is_floating(leaf) or pa.types.is_boolean(leaf)):
        return Problem("data_dtype", f"{what} holds values of Arrow type {column.type} where {declared}", column=name)
    values = column
    while True:
        if values.null_count:
            k = _first_null_row(column)
            return Problem(
                "data_dtype", f"{what} row {k} (frame_index {k}) holds a null value where {declared}", column=name
            )
        if not _is_list(values.type):
            break
        values = pc.list_flatten(values)
    if leaf != want:
        to = _declared_type(column.type, dtype)
        try:
            column.cast(to)
        except pa.ArrowException as e:
            k = _first_uncastable_row(column, want)
            return Problem(
                "data_dtype",
                f"{what} row {k} (frame_index {k}) holds a value ({leaf}) that {dtype} cannot hold ({_reason(e)}); {declared}",
                column=name,
            )
    return None


def _validate(part: pa.Table, ep: int, length: int, path: str, root: str) -> None:
    fi = part.column("frame_index").to_numpy() if "frame_index" in part.column_names else None
    problem = episode_rows_problem(part.column("episode_index").to_numpy(), fi, ep, length)
    if problem is not None:
        raise EpisodeDataError(f"episode {ep} in {path} ({root}): {problem.message}", episode_index=ep, path=path)
