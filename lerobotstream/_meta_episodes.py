"""The ``meta/episodes`` table of a LeRobotDataset v3 (one row per episode, over every
``meta/episodes/chunk-XXX/file-XXX.parquet`` shard, in sorted order): its rows read with the
columns the stream uses (``stats/*`` never read), built into :class:`EpisodeInfo` records and
checked (lengths against ``[dataset_from_index, dataset_to_index)``, duplicates, overlaps, the
files each episode references). :class:`lerobotstream.meta.DatasetMeta` reads the rest of ``meta/``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lerobotstream._meta_files import _read_error, _read_parquet, _where, read_reason
from lerobotstream.constants import EPISODES_DIR, INFO_PATH
from lerobotstream.errors import MetadataError, MetadataReadError, Problem, SourceError, SourceReadError
from lerobotstream.parquet import declared_bytes
from lerobotstream.sources import ByteSource
from lerobotstream.sources._prefetch import PrefetchedReads

_REQUIRED_EPISODE_COLUMNS = (
    "episode_index",
    "length",
    "dataset_from_index",
    "dataset_to_index",
    "data/chunk_index",
    "data/file_index",
)
_VIDEO_SUFFIXES = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
_COLUMN_TYPES = {"from_timestamp": pa.float64(), "to_timestamp": pa.float64()}  # else int64
#: Most rows ``meta/episodes`` may hold (all shards together), checked from the footers before a
#: shard is decoded. The largest public robot datasets hold under half a million episodes
#: (language_table: 442k; DROID: 92k); the table costs ~50 bytes per episode and camera here.
EPISODES_MAX = 1 << 20
#: Most bytes its columns may declare once decoded (the footers' uncompressed sizes of the columns
#: read, all shards): ~100 bytes per episode at the row cap, and a tasks column of short strings.
EPISODES_MAX_BYTES = 512 * 1024 * 1024
#: a problem naming more missing episodes than this carries their ranges in its message only
MAX_LISTED_EPISODES = 10_000


@dataclass(frozen=True)
class EpisodeVideo:
    """Where one episode of one camera lives inside a concatenated MP4."""

    path: str
    """MP4 path relative to the dataset root (``videos/<key>/chunk-XXX/file-XXX.mp4``)."""
    chunk_index: int
    """``videos/<key>/chunk_index``."""
    file_index: int
    """``videos/<key>/file_index``."""
    from_timestamp: float
    """Start of the episode inside the MP4, seconds (float64, as stored)."""
    to_timestamp: float
    """End of the episode inside the MP4, seconds (float64, as stored)."""


@dataclass(frozen=True)
class EpisodeInfo:
    """One row of ``meta/episodes`` (``stats/*`` dropped)."""

    episode_index: int
    """Episode id (``episode_index`` column)."""
    length: int
    """Number of frames; equals ``dataset_to_index - dataset_from_index``."""
    dataset_from_index: int
    """Global ``index`` of the episode's first frame (inclusive)."""
    dataset_to_index: int
    """One past the global ``index`` of its last frame (half-open)."""
    data_path: str
    """Parquet file holding its rows, relative to the root."""
    data_chunk_index: int
    """``data/chunk_index``."""
    data_file_index: int
    """``data/file_index``."""
    videos: dict[str, EpisodeVideo] = field(default_factory=dict)
    """Per video key (camera): its window in a concatenated MP4."""
    tasks: tuple[str, ...] = ()
    """Task strings of the episode (``tasks`` column; empty when absent)."""
    shard: str = ""
    """The ``meta/episodes`` shard this row came from (for messages)."""


def _selected(episodes: Iterable[Any], held: np.ndarray) -> tuple[list[int], list[Any]]:
    """(sorted selected episode indices, the requested ones the dataset lacks) of ``episodes``:
    ints, or ``range`` objects whose part outside ``[held[0], held[-1]]`` is reported as one
    ``"a..b"`` entry instead of being expanded. ``held``: the dataset's episode indices, sorted."""
    lo, hi = (int(held[0]), int(held[-1])) if held.size else (0, -1)

    def has(i: int) -> bool:
        k = int(np.searchsorted(held, i))
        return k < held.size and int(held[k]) == i

    wanted: set[int] = set()
    unknown: list[Any] = []
    for e in episodes:
        if isinstance(e, range):
            if e.step != 1:
                raise TypeError(f"episode ranges must have step 1, got {e!r}")
            for a, b in ((e.start, min(e.stop, lo)), (max(e.start, hi + 1), e.stop)):
                if a < b:
                    unknown.append(f"{a}..{b - 1}" if b - a > 1 else a)
            for i in range(max(e.start, lo), min(e.stop, hi + 1)):  # at most the dataset's episodes
                if has(i):
                    wanted.add(i)
                else:
                    unknown.append(i)
        elif has(int(e)):
            wanted.add(int(e))
        else:
            unknown.append(int(e))
    return sorted(wanted), unknown


@dataclass(frozen=True)
class _Columns:
    """The columns of every ``meta/episodes`` row (all shards, file order), as numpy arrays."""

    ints: dict[str, np.ndarray]
    """int64 values of each required column (nulls read as 0; see ``null``)."""
    null: dict[str, np.ndarray]
    """bool, per required column: the row's value is null."""
    videos: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    """Per camera: chunk_index, file_index (int64), from/to_timestamp (float64), any null (bool)."""
    tasks: Any
    """``pyarrow`` list<string> array of each row's tasks (null: none)."""
    shard_id: np.ndarray
    """int32, the shard (index into ``shards``) of each row."""
    shards: list[str]
    data_tpl: str
    video_tpl: str | None

    @property
    def num_rows(self) -> int:
        return int(self.shard_id.shape[0])


class EpisodeRows(Sequence[EpisodeInfo]):
    """The ``meta/episodes`` rows of a selection, in ``episode_index`` order, kept as columns: an
    :class:`EpisodeInfo` is built when one is asked for (``rows[k]``, iteration), never kept, so
    a dataset of a million episodes costs its columns (~50 bytes per episode and camera), not a
    million Python objects. Slices and :meth:`take` give selections of it."""

    def __init__(self, cols: _Columns, rows: np.ndarray, video_ok: dict[str, np.ndarray]) -> None:
        self._cols = cols
        self._rows = np.asarray(rows, dtype=np.int64)
        self._video_ok = video_ok  # per camera, per raw row: its window is usable

    def __len__(self) -> int:
        return int(self._rows.shape[0])

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return self.take(np.arange(len(self))[k])
        n = len(self)
        k = int(k)
        if not -n <= k < n:
            raise IndexError(f"episode row {k} out of range ({n} rows)")
        return self._info(int(self._rows[k % n]))

    def __iter__(self):
        for i in self._rows.tolist():
            yield self._info(i)

    def __eq__(self, other: object) -> bool:
        """Equal to another sequence of the same :class:`EpisodeInfo` (an ``EpisodeRows`` or a list)."""
        if not isinstance(other, (EpisodeRows, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def take(self, positions: Sequence[int] | np.ndarray) -> EpisodeRows:
        """The rows at ``positions`` (indices into this selection), in that order."""
        return EpisodeRows(self._cols, self._rows[np.asarray(positions, dtype=np.int64)], self._video_ok)

    @property
    def episode_indices(self) -> np.ndarray:
        """int64 ``episode_index`` of each row (ascending)."""
        return self._cols.ints["episode_index"][self._rows]

    @property
    def lengths(self) -> np.ndarray:
        """int64 ``length`` of each row."""
        return self._cols.ints["length"][self._rows]

    def task_strings(self) -> list[str]:
        """Every distinct task string the rows name (first appearance order)."""
        import pyarrow.compute as pc

        tasks = self._cols.tasks.take(self._rows)
        flat = pc.list_flatten(tasks)
        return [str(t) for t in pc.unique(flat).to_pylist() if t is not None]

    def data_files(self) -> dict[str, np.ndarray]:
        """Each data Parquet path → the positions (into this selection) of the rows stored in it."""
        c = self._cols
        return self._groups(c.ints["data/chunk_index"], c.ints["data/file_index"], None, self._rows)

    def video_files(self) -> dict[str, tuple[str, np.ndarray]]:
        """Each MP4 path → (its camera, the positions of the rows whose window is in it)."""
        out: dict[str, tuple[str, np.ndarray]] = {}
        for key, (vc, vf, _t0, _t1, _null) in self._cols.videos.items():
            ok = self._video_ok[key][self._rows]
            for path, pos in self._groups(vc, vf, key, self._rows[ok]).items():
                out.setdefault(path, (key, np.flatnonzero(ok)[pos]))
        return out

    def _groups(self, chunk: np.ndarray, file: np.ndarray, key: str | None, rows: np.ndarray) -> dict[str, np.ndarray]:
        if rows.size == 0:
            return {}
        ch, fi = chunk[rows], file[rows]
        order = np.lexsort((fi, ch))  # positions grouped by (chunk, file), ascending within a group
        cs, fs = ch[order], fi[order]
        starts = np.flatnonzero(np.concatenate([[True], (cs[1:] != cs[:-1]) | (fs[1:] != fs[:-1])]))
        stops = np.append(starts[1:], order.size)
        return {self._path(key, int(cs[a]), int(fs[a])): order[a:b] for a, b in zip(starts.tolist(), stops.tolist())}

    def _path(self, key: str | None, chunk: int, file: int) -> str:
        if key is None:
            return self._cols.data_tpl.format(chunk_index=chunk, file_index=file)
        return self._cols.video_tpl.format(video_key=key, chunk_index=chunk, file_index=file)  # type: ignore[union-attr]

    def _info(self, i: int) -> EpisodeInfo:
        c = self._cols
        ints = {name: int(col[i]) for name, col in c.ints.items()}
        videos: dict[str, EpisodeVideo] = {}
        for key, (vc, vf, t0, t1, _null) in c.videos.items():
            if self._video_ok[key][i]:
                ch, fi = int(vc[i]), int(vf[i])
                videos[key] = EpisodeVideo(self._path(key, ch, fi), ch, fi, float(t0[i]), float(t1[i]))
        tasks = c.tasks[i].as_py()
        return EpisodeInfo(
            episode_index=ints["episode_index"],
            length=ints["length"],
            dataset_from_index=ints["dataset_from_index"],
            dataset_to_index=ints["dataset_to_index"],
            data_path=self._path(None, ints["data/chunk_index"], ints["data/file_index"]),
            data_chunk_index=ints["data/chunk_index"],
            data_file_index=ints["data/file_index"],
            videos=videos,
            tasks=tuple(str(t) for t in tasks) if tasks is not None else (),
            shard=c.shards[int(c.shard_id[i])],
        )


def _load_episode_rows(src: PrefetchedReads, info: Mapping[str, Any]) -> _Columns:
    """The non-``stats/*`` columns of every shard, as columns; each shard's footer is checked
    (rows, declared bytes: :data:`EPISODES_MAX`, :data:`EPISODES_MAX_BYTES`) before it is decoded."""
    try:
        listed = src.list(EPISODES_DIR)
    except FileNotFoundError:
        listed = []
    except SourceError as e:  # a folder that cannot be listed (EACCES) is not "no episode metadata"
        raise _read_error(src, getattr(e, "path", None) or EPISODES_DIR, "the episode metadata folder", e) from e
    shards = [p for p in listed if p.endswith(".parquet")]
    shards = sorted(p for p in shards if _is_shard_path(p))
    src.prefetch(*(("read_file", p) for p in shards))
    if not shards:
        raise MetadataError(
            f"no episode metadata: {_where(src, EPISODES_DIR)}/chunk-*/file-*.parquet not found", path=EPISODES_DIR
        )
    video_keys = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    wanted = (
        list(_REQUIRED_EPISODE_COLUMNS) + ["tasks"] + [f"videos/{k}/{s}" for k in video_keys for s in _VIDEO_SUFFIXES]
    )
    parts: dict[str, list] = {c: [] for c in wanted}
    shard_ids: list[np.ndarray] = []
    seen = {"rows": 0, "bytes": 0}

    def check_footer(shard: str, md: Any) -> None:
        seen["rows"] += int(md.num_rows)
        seen["bytes"] += declared_bytes(md, range(md.num_row_groups), wanted)
        if seen["rows"] > EPISODES_MAX or seen["bytes"] > EPISODES_MAX_BYTES:
            raise MetadataError(
                f"episode metadata shard {_where(src, shard)}: its footer declares {md.num_rows} rows, which "
                f"bring meta/episodes to {seen['rows']} rows and {seen['bytes']} bytes of columns once decoded; "
                f"at most {EPISODES_MAX} episodes and {EPISODES_MAX_BYTES} bytes are accepted (a damaged or "
                "hostile table): refused before decoding",
                path=shard,
                code="episodes_table_size",
            )

    for n_shard, shard in enumerate(shards):
        table = _read_parquet(
            src, shard, what="episode metadata shard", columns=wanted, check=lambda md, s=shard: check_footer(s, md)
        )
        missing = [c for c in wanted if c not in table.column_names and c != "tasks"]
        if missing:
            raise MetadataError(f"episode metadata shard {_where(src, shard)} lacks the columns {missing}", path=shard)
        for c in wanted:
            want_type = pa.list_(pa.string()) if c == "tasks" else _COLUMN_TYPES.get(c.rsplit("/", 1)[-1], pa.int64())
            col = table.column(c) if c in table.column_names else pa.nulls(table.num_rows, want_type)
            try:
                parts[c].append(col.cast(want_type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise MetadataError(
                    f"episode metadata shard {_where(src, shard)}: column {c!r} is {col.type}, not {want_type} ({e})",
                    path=shard,
                ) from e
        shard_ids.append(np.full(table.num_rows, n_shard, dtype=np.int32))
        del table

    def column(c: str) -> Any:
        chunks = [chunk for part in parts.pop(c) for chunk in part.chunks]
        return pa.chunked_array(chunks, type=parts_type[c]).combine_chunks()

    parts_type = {c: (parts[c][0].type if parts[c] else pa.int64()) for c in wanted}
    ints: dict[str, np.ndarray] = {}
    null: dict[str, np.ndarray] = {}
    for c in _REQUIRED_EPISODE_COLUMNS:
        arr = column(c)
        null[c] = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        ints[c] = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    videos = {}
    for k in video_keys:
        arrs = [column(f"videos/{k}/{s}") for s in _VIDEO_SUFFIXES]
        nulls = np.zeros(len(arrs[0]), dtype=bool)
        for a in arrs:
            nulls |= np.asarray(a.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        vc, vf = (np.asarray(a.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64) for a in arrs[:2])
        t0, t1 = (np.asarray(a.fill_null(0.0).to_numpy(zero_copy_only=False), dtype=np.float64) for a in arrs[2:])
        videos[k] = (vc, vf, t0, t1, nulls)
    return _Columns(
        ints=ints,
        null=null,
        videos=videos,
        tasks=column("tasks"),
        shard_id=np.concatenate(shard_ids) if shard_ids else np.zeros(0, np.int32),
        shards=shards,
        data_tpl=info["data_path"],
        video_tpl=info.get("video_path"),
    )


def _missing_runs(indices: np.ndarray, stop: int) -> list[tuple[int, int]]:
    """The half-open runs ``[a, b)`` of ``[0, stop)`` that the sorted, unique ``indices`` lack
    (negative indices ignored); at most ``len(indices) + 1`` runs, whatever the values."""
    held = indices[indices >= 0]
    edges = np.concatenate(([-1], held, [stop])).astype(np.int64)
    gaps = np.flatnonzero(np.diff(edges) > 1)
    return [(int(edges[g]) + 1, int(edges[g + 1])) for g in gaps]


def _runs_text(runs: Sequence[tuple[int, int]], shown: int = 5) -> str:
    """``[2, 5..9, ...]`` for half-open runs ``[a, b)``: the first ``shown`` runs, then a count."""
    parts = [f"{a}" if b - a == 1 else f"{a}..{b - 1}" for a, b in runs[:shown]]
    more = f", ... ({len(runs) - shown} more ranges)" if len(runs) > shown else ""
    total = sum(b - a for a, b in runs)
    return f"[{', '.join(parts)}{more}] ({total} episode{'s' if total != 1 else ''})"


def _listed(runs: Sequence[tuple[int, int]]) -> list[int]:
    """The episodes of ``runs`` as a list (a problem's ``episodes``) when there are at most
    :data:`MAX_LISTED_EPISODES`; else ``[]`` (the message carries the ranges)."""
    if sum(b - a for a, b in runs) > MAX_LISTED_EPISODES:
        return []
    return [e for a, b in runs for e in range(a, b)]


def _is_shard_path(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 4 and parts[2].startswith("chunk-") and parts[3].startswith("file-")


def _report(problems: list | None, error: MetadataError) -> None:
    """Raise ``error`` (``problems`` is None), or collect it as a :class:`~lerobotstream.errors.Problem`
    with the same code, message and fields and go on (the validator)."""
    if problems is None:
        raise error
    problems.append(as_problem(error))


def as_problem(error: MetadataError) -> Problem:
    """``error`` as the problem value the validator collects (its ``code`` else ``metadata``; its
    episode, camera, file and episodes)."""
    f = error.fields
    return Problem(
        f.get("code") or "metadata",
        error.message,
        f.get("episode_index"),
        f.get("camera"),
        f.get("path"),
        episodes=tuple(int(e) for e in f.get("episodes") or ()),
        severity=f.get("severity"),
    )


def _build_episodes(
    src: ByteSource, info: Mapping[str, Any], cols: _Columns, problems: list | None = None
) -> EpisodeRows:
    """Episode rows → :class:`EpisodeRows` (episode_index order), checked; ``problems`` as in
    :meth:`DatasetMeta.load` (collecting: a row that cannot be used is left out, once reported).
    The checks run on whole columns; only rows with a problem are visited one by one."""
    n = cols.num_rows
    shard_of = cols.shards
    sid = cols.shard_id
    if n == 0:
        raise MetadataError(
            f"the episode metadata shards under {_where(src, EPISODES_DIR)} hold no episodes", path=EPISODES_DIR
        )
    usable = np.ones(n, dtype=bool)
    for c in _REQUIRED_EPISODE_COLUMNS:
        bad = np.flatnonzero(cols.null[c])
        for i in bad[: 1 if problems is None else len(bad)].tolist():
            _report(
                problems,
                MetadataError(
                    f"episode row {i} of {_where(src, shard_of[sid[i]])} has a null {c!r}",
                    path=shard_of[sid[i]],
                    code="episode_row_null",
                ),
            )
        usable &= ~cols.null[c]
    rows = np.flatnonzero(usable)
    no_videos: dict[str, np.ndarray] = {k: np.zeros(n, dtype=bool) for k in cols.videos}
    if rows.size == 0:
        return EpisodeRows(cols, rows, no_videos)
    ep_all = cols.ints["episode_index"]
    ep_idx = ep_all[rows]
    order = rows[np.argsort(ep_idx, kind="stable")]
    sorted_idx = ep_all[order]
    dup = np.nonzero(sorted_idx[1:] == sorted_idx[:-1])[0]
    for d in dup[: 1 if problems is None else len(dup)].tolist():
        a, b = int(order[d]), int(order[d + 1])
        e = int(sorted_idx[d])
        _report(
            problems,
            MetadataError(
                f"episode {e} appears twice in meta/episodes: in {_where(src, shard_of[sid[a]])} and "
                f"{_where(src, shard_of[sid[b]])}",
                episode_index=e,
                path=shard_of[sid[b]],
                code="duplicate_episode",
            ),
        )
        usable[b] = False
    order = order[usable[order]]
    sorted_idx = ep_all[order]
    n_ok = int(sorted_idx.shape[0])
    top = int(sorted_idx[-1]) + 1 if n_ok else 0
    runs = _missing_runs(sorted_idx, max(n_ok, top))
    if runs:
        _report(
            problems,
            MetadataError(
                f"meta/episodes under {_where(src, EPISODES_DIR)} is missing episodes {_runs_text(runs)} "
                f"(episode indices must be 0..N-1; found {n} rows, max index {top - 1}); a shard may be missing",
                episode_index=runs[0][0],
                path=EPISODES_DIR,
                code="missing_episodes",
                episodes=_listed(runs),
            ),
        )
    info_eps = info.get("total_episodes")
    if info_eps is not None and int(info_eps) > max(n, top):
        lo = max(n, top)
        _report(
            problems,
            MetadataError(
                f"{_where(src, INFO_PATH)} says total_episodes={info_eps} but the shards under {_where(src, EPISODES_DIR)} "
                f"hold only episodes 0..{lo - 1}: episodes {lo}..{int(info_eps) - 1} are missing "
                "(a shard may be missing)",
                episode_index=lo,
                path=EPISODES_DIR,
                code="missing_episodes",
                episodes=_listed([(lo, int(info_eps))]),
            ),
        )
    # per-row rules on whole columns: the index range, overlaps, each camera's window
    length = cols.ints["length"][order]
    lo = cols.ints["dataset_from_index"][order]
    hi = cols.ints["dataset_to_index"][order]
    bad_range = (length <= 0) | (hi - lo != length) | (lo < 0)
    kept = length > 0
    prev_to = np.maximum.accumulate(np.where(kept, hi, np.iinfo(np.int64).min))
    prev_to = np.concatenate([[np.iinfo(np.int64).min], prev_to[:-1]])
    overlap = kept & (lo < prev_to)
    video_ok = {}
    bad_video = {}
    for key, (_vc, _vf, t0, t1, vnull) in cols.videos.items():
        a, b = t0[order], t1[order]
        with np.errstate(invalid="ignore"):
            window_ok = (a >= 0.0) & (a < b) & np.isfinite(b)
        ok = np.zeros(n, dtype=bool)
        ok[order] = ~vnull[order] & window_ok
        video_ok[key] = ok
        bad_video[key] = (vnull[order], ~vnull[order] & ~window_ok)
    any_bad = bad_range | overlap
    for nul, win in bad_video.values():
        any_bad |= (nul | win) & kept
    for k in np.flatnonzero(any_bad).tolist():
        i = int(order[k])
        e = int(ep_all[i])
        shard = shard_of[sid[i]]
        if bad_range[k]:
            _report(
                problems,
                MetadataError(
                    f"episode {e} in {_where(src, shard)}: length {int(length[k])} disagrees with [dataset_from_index, dataset_to_index) = [{int(lo[k])}, {int(hi[k])})",
                    episode_index=e,
                    path=shard,
                    code="index_range",
                ),
            )
            if not kept[k]:
                continue
        if overlap[k]:
            _report(
                problems,
                MetadataError(
                    f"episode {e} in {_where(src, shard)}: [dataset_from_index, dataset_to_index) = [{int(lo[k])}, {int(hi[k])}) overlaps the previous episode (ends at {int(prev_to[k])})",
                    episode_index=e,
                    path=shard,
                    code="index_overlap",
                ),
            )
        for key, (nul, win) in bad_video.items():
            if nul[k]:
                _report(
                    problems,
                    MetadataError(
                        f"episode {e}, camera {key!r}: null video location in {_where(src, shard)}",
                        episode_index=e,
                        camera=key,
                        path=shard,
                        code="video_location",
                    ),
                )
            elif win[k]:
                t0, t1 = float(cols.videos[key][2][i]), float(cols.videos[key][3][i])
                _report(
                    problems,
                    MetadataError(
                        f"episode {e}, camera {key!r}: bad video window from_timestamp={t0} to_timestamp={t1} in {_where(src, shard)}",
                        episode_index=e,
                        camera=key,
                        path=shard,
                        code="video_location",
                    ),
                )
    return EpisodeRows(cols, order[kept], video_ok)


def _check_files(src: PrefetchedReads, episodes: EpisodeRows, problems: list | None = None) -> None:
    """Every data Parquet and MP4 the episodes use is a file; ``problems`` as in
    :meth:`DatasetMeta.load` (collecting: one error per file, ``episodes`` listing its users).

    A path ``exists()`` denies is asked once more, for its size, to tell why (only on this failure
    path): nothing there is ``file_missing``; something there that cannot be read (a symlink loop,
    a folder, a device) is ``file_unreadable`` (a :class:`MetadataReadError`) with the reason."""
    users: dict[str, tuple[str | None, np.ndarray]] = {p: (None, pos) for p, pos in episodes.data_files().items()}
    for path, (key, pos) in episodes.video_files().items():
        users.setdefault(path, (key, pos))
    src.prefetch(*(("exists", p) for p in sorted(users)))
    indices = episodes.episode_indices
    for path in sorted(users):
        unreadable: SourceReadError | None = None
        try:
            if src.exists(path):
                continue
            src.size(path)  # exists() said no: why? (a size that answers: missing all the same)
        except FileNotFoundError:
            pass
        except SourceReadError as e:
            unreadable = e
        key, pos = users[path]
        ep = episodes[int(pos[0])]
        what = f"camera {key!r} video" if key else "data file"
        fields = dict(
            episode_index=ep.episode_index,
            camera=key,
            path=path,
            episodes=np.unique(indices[pos]).tolist(),
        )
        referenced = f"(referenced by {_where(src, ep.shard)})"
        if unreadable is None:
            error = MetadataError(
                f"episode {ep.episode_index}: {what} {_where(src, path)} is missing {referenced}",
                code="file_missing",
                **fields,
            )
        else:
            error = MetadataReadError(
                f"episode {ep.episode_index}: {what} {_where(src, path)} is there but cannot be read: "
                f"{read_reason(unreadable)} {referenced}",
                code="file_unreadable",
                errno=unreadable.errno,
                reason=read_reason(unreadable),
                **fields,
            )
            error.__cause__ = unreadable
        _report(problems, error)
