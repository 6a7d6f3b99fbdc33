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

from lerobotstream._meta_files import INFO_PATH, _read_error, _read_parquet, _where, read_reason
from lerobotstream.errors import MetadataError, MetadataReadError, SourceError, SourceReadError
from lerobotstream.sources import ByteSource, PrefetchedReads

EPISODES_DIR = "meta/episodes"
_REQUIRED_EPISODE_COLUMNS = (
    "episode_index",
    "length",
    "dataset_from_index",
    "dataset_to_index",
    "data/chunk_index",
    "data/file_index",
)
_VIDEO_SUFFIXES = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
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


def _selected(episodes: Iterable[Any], by_idx: Mapping[int, Any]) -> tuple[list[int], list[Any]]:
    """(sorted selected episode indices, the requested ones the dataset lacks) of ``episodes``:
    ints, or ``range`` objects whose part outside ``[min(by_idx), max(by_idx)]`` is reported as one
    ``"a..b"`` entry instead of being expanded."""
    lo, hi = (min(by_idx), max(by_idx)) if by_idx else (0, -1)
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
                if i in by_idx:
                    wanted.add(i)
                else:
                    unknown.append(i)
        elif int(e) in by_idx:
            wanted.add(int(e))
        else:
            unknown.append(int(e))
    return sorted(wanted), unknown


def _load_episode_rows(src: PrefetchedReads, info: Mapping[str, Any]) -> tuple[dict[str, list], list[str]]:
    """Concatenated non-``stats/*`` columns of every shard, and the shard of each row."""
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
    cols: dict[str, list] = {c: [] for c in wanted}
    shard_of: list[str] = []
    for shard in shards:
        table = _read_parquet(src, shard, what="episode metadata shard", columns=wanted)
        missing = [c for c in wanted if c not in table.column_names and c != "tasks"]
        if missing:
            raise MetadataError(f"episode metadata shard {_where(src, shard)} lacks the columns {missing}", path=shard)
        for c in wanted:
            if c in table.column_names:
                cols[c].extend(table.column(c).to_pylist())
            else:
                cols[c].extend([None] * table.num_rows)
        shard_of.extend([shard] * table.num_rows)
    return cols, shard_of


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
    """Raise ``error`` (``problems`` is None), or collect it and go on (the validator)."""
    if problems is None:
        raise error
    problems.append(error)


def _build_episodes(
    src: ByteSource, info: Mapping[str, Any], cols: dict[str, list], shard_of: list[str], problems: list | None = None
) -> list[EpisodeInfo]:
    """Episode rows → :class:`EpisodeInfo` list (episode_index order), checked; ``problems`` as in
    :meth:`DatasetMeta.load` (collecting: a row that cannot be used is left out, once reported)."""
    n = len(shard_of)
    if n == 0:
        raise MetadataError(
            f"the episode metadata shards under {_where(src, EPISODES_DIR)} hold no episodes", path=EPISODES_DIR
        )
    usable = np.ones(n, dtype=bool)
    for c in _REQUIRED_EPISODE_COLUMNS:
        bad = [i for i, v in enumerate(cols[c]) if v is None]
        for i in bad[: 1 if problems is None else len(bad)]:
            _report(
                problems,
                MetadataError(
                    f"episode row {i} of {_where(src, shard_of[i])} has a null {c!r}",
                    path=shard_of[i],
                    code="episode_row_null",
                ),
            )
            usable[i] = False
    rows = np.flatnonzero(usable)
    if rows.size == 0:
        return []
    ep_idx = np.asarray([cols["episode_index"][i] for i in rows], dtype=np.int64)
    order = rows[np.argsort(ep_idx, kind="stable")]
    sorted_idx = np.sort(ep_idx, kind="stable")
    dup = np.nonzero(sorted_idx[1:] == sorted_idx[:-1])[0]
    for d in dup[: 1 if problems is None else len(dup)]:
        a, b = order[d], order[d + 1]
        e = int(sorted_idx[d])
        _report(
            problems,
            MetadataError(
                f"episode {e} appears twice in meta/episodes: in {_where(src, shard_of[a])} and {_where(src, shard_of[b])}",
                episode_index=e,
                path=shard_of[b],
                code="duplicate_episode",
            ),
        )
        usable[b] = False
    order = np.asarray([i for i in order if usable[i]], dtype=np.int64)
    sorted_idx = np.asarray([cols["episode_index"][i] for i in order], dtype=np.int64)
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
    video_keys = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    data_tpl, video_tpl = info["data_path"], info.get("video_path")
    out: list[EpisodeInfo] = []
    prev_to = None
    for i in order.tolist():
        e = int(cols["episode_index"][i])
        shard = shard_of[i]
        length = int(cols["length"][i])
        lo, hi = int(cols["dataset_from_index"][i]), int(cols["dataset_to_index"][i])
        if length <= 0 or hi - lo != length or lo < 0:
            _report(
                problems,
                MetadataError(
                    f"episode {e} in {_where(src, shard)}: length {length} disagrees with [dataset_from_index, dataset_to_index) = [{lo}, {hi})",
                    episode_index=e,
                    path=shard,
                    code="index_range",
                ),
            )
            if length <= 0:
                continue
        if prev_to is not None and lo < prev_to:
            _report(
                problems,
                MetadataError(
                    f"episode {e} in {_where(src, shard)}: [dataset_from_index, dataset_to_index) = [{lo}, {hi}) overlaps the previous episode (ends at {prev_to})",
                    episode_index=e,
                    path=shard,
                    code="index_overlap",
                ),
            )
        prev_to = hi if prev_to is None else max(prev_to, hi)
        dc, df = int(cols["data/chunk_index"][i]), int(cols["data/file_index"][i])
        videos: dict[str, EpisodeVideo] = {}
        for key in video_keys:
            vals = [cols[f"videos/{key}/{s}"][i] for s in _VIDEO_SUFFIXES]
            if any(v is None for v in vals):
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
                continue
            vc, vf, t0, t1 = int(vals[0]), int(vals[1]), float(vals[2]), float(vals[3])
            if not (0.0 <= t0 < t1) or not np.isfinite(t1):
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
                continue
            videos[key] = EpisodeVideo(video_tpl.format(video_key=key, chunk_index=vc, file_index=vf), vc, vf, t0, t1)
        tasks = cols["tasks"][i]
        out.append(
            EpisodeInfo(
                episode_index=e,
                length=length,
                dataset_from_index=lo,
                dataset_to_index=hi,
                data_path=data_tpl.format(chunk_index=dc, file_index=df),
                data_chunk_index=dc,
                data_file_index=df,
                videos=videos,
                tasks=tuple(str(t) for t in tasks) if tasks is not None else (),
                shard=shard,
            )
        )
    return out


def _check_files(src: PrefetchedReads, episodes: Sequence[EpisodeInfo], problems: list | None = None) -> None:
    """Every data Parquet and MP4 the episodes use is a file; ``problems`` as in
    :meth:`DatasetMeta.load` (collecting: one error per file, ``episodes`` listing its users).

    A path ``exists()`` denies is asked once more, for its size, to tell why (only on this failure
    path): nothing there is ``file_missing``; something there that cannot be read (a symlink loop,
    a folder, a device) is ``file_unreadable`` (a :class:`MetadataReadError`) with the reason."""
    users: dict[str, list[tuple[EpisodeInfo, str | None]]] = {}
    for ep in episodes:
        users.setdefault(ep.data_path, []).append((ep, None))
        for key, v in ep.videos.items():
            users.setdefault(v.path, []).append((ep, key))
    src.prefetch(*(("exists", p) for p in sorted(users)))
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
        ep, key = users[path][0]
        what = f"camera {key!r} video" if key else "data file"
        fields = dict(
            episode_index=ep.episode_index,
            camera=key,
            path=path,
            episodes=sorted({int(u.episode_index) for u, _k in users[path]}),
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
