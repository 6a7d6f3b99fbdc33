"""Building a schema-5 sidecar: parse every selected MP4, validate it, write the NPZ atomically.

Sources are parsed by ``workers`` threads with at most ``max_pending`` results alive at once
(memory bounded by the largest sources). Each goes straight into a temporary archive that replaces
the output only after every source parsed and validated: a failed, invalid or interrupted build
leaves a previous sidecar untouched.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lerobotstream import constants
from lerobotstream._version import __version__
from lerobotstream.errors import SourceChangedError
from lerobotstream.sidecar._archive import SidecarWriter, safe_data_root
from lerobotstream.sidecar._validate import episode_windows, group_windows, raise_problems, validate_source


@dataclass(frozen=True)
class BuildReport:
    """What a build wrote."""

    output: Path
    num_sources: int
    num_samples: int
    num_episodes: int
    subset: bool
    elapsed_s: float
    """Wall time of the build, seconds."""


def _parse_one(source: Any, path: str, parse: Callable[..., Any]) -> tuple[Any, int, str | None]:
    size = int(source.size(path))
    fingerprint = source.fingerprint(path)
    table = parse(lambda offset, n: source.read(path, offset, n), size, path=path)
    after = source.fingerprint(path)
    if after != fingerprint:
        raise SourceChangedError(f"{path} changed while it was being indexed ({fingerprint} -> {after})", path=path)
    return table, size, fingerprint


def build_sidecar(
    source: Any,
    *,
    output: str | os.PathLike,
    repo_id: str,
    revision: str | None = None,
    repo_type: str = "dataset",
    data_root: str | None = None,
    episodes: Sequence[int] | None = None,
    workers: int = 8,
    max_pending: int | None = None,
    tolerance_s: float = constants.DEFAULT_TOLERANCE_S,
    progress: bool = True,
    meta: Any = None,
    parse: Callable[..., Any] | None = None,
) -> BuildReport:
    """Build the schema-5 MP4 sidecar of a dataset (or of a subset of its episodes).

    Args:
        source: ``ByteSource`` of the dataset root.
        output: the sidecar ``.npz`` path; replaced atomically at the very end.
        repo_id: ``OWNER/NAME`` recorded in the manifest.
        revision: commit recorded in the manifest (default: the source's pinned commit, if any).
        repo_type: ``"dataset"`` or ``"bucket"``.
        data_root: payload root recorded (credentials stripped); default the source's root.
        episodes: episode indices to index (a subset build, marked as such); None = all.
        workers: parse threads (>= 1).
        max_pending: parse results alive at once (default ``2 * workers``).
        tolerance_s: allowed |frame PTS - (from_timestamp + i/fps)|, seconds.
        progress: show a tqdm bar on stderr.
        meta: an already loaded ``DatasetMeta`` (default: ``DatasetMeta.load(source, episodes=...)``).
        parse: the parser, ``parse(read, file_size, path=) -> SampleTable`` (default ``mp4.parse_mp4``).

    Returns:
        BuildReport.

    Raises:
        Mp4Error: a video cannot be indexed (names the file and box).
        SourceChangedError: a video changed while it was parsed.
        SidecarValidationError: the videos disagree with the metadata (names episode, camera, file).
        MetadataError / SourceError: from reading metadata or bytes.
    """
    t0 = time.perf_counter()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if meta is None:
        from lerobotstream.meta import DatasetMeta

        meta = DatasetMeta.load(source, episodes=episodes, repo_id=repo_id)
    if parse is None:
        from lerobotstream.mp4.parse import parse_mp4 as parse
    max_pending = max(1, max_pending or 2 * workers)
    windows = group_windows(episode_windows(meta))
    paths = sorted(set(meta.video_paths()) | set(windows))
    selected = [int(ep.episode_index) for ep in meta.episodes]
    subset = episodes is not None and selected != list(range(int(meta.total_episodes)))
    manifest = {
        "format": "lerobotstream-mp4-sidecar",
        "repo_id": repo_id,
        "repo_type": repo_type,
        "revision": revision if revision is not None else getattr(source, "commit", None),
        "data_root": safe_data_root(data_root if data_root is not None else getattr(source, "root_display", None)),
        "subset": bool(subset),
        "episodes": selected if subset else None,
        "total_episodes": int(meta.total_episodes),
        "fps": meta.fps,
        "video_keys": list(getattr(meta, "video_keys", [])),
        "created_by": f"lerobotstream {__version__}",
    }
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(paths), desc="indexing MP4s", unit="file", dynamic_ncols=True)
    num_samples = 0
    problems = []
    writer = SidecarWriter(output, manifest)
    pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lrs-sidecar")
    parsed = _parse_all(pool, source, paths, parse, max_pending)
    try:
        for sid, path, (table, size, fingerprint) in parsed:  # re-raises a parse error (names the file)
            features = getattr(meta, "features", None)
            problems.extend(
                validate_source(table, windows.get(path, []), meta.fps, tolerance_s, path, features=features)
            )
            writer.add_source(sid, table, path=path, size=size, fingerprint=fingerprint)
            num_samples += int(table.offset.shape[0])
            del table
            if bar is not None:
                bar.update(1)
        raise_problems(problems, sidecar=str(output))
        out = writer.commit()
    except BaseException:
        parsed.close()  # cancels the parses not started
        writer.abort()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if bar is not None:
            bar.close()
    return BuildReport(
        output=Path(out),
        num_sources=len(paths),
        num_samples=num_samples,
        num_episodes=len(selected),
        subset=bool(subset),
        elapsed_s=time.perf_counter() - t0,
    )


def _parse_all(
    pool: cf.ThreadPoolExecutor, source: Any, paths: list[str], parse: Callable[..., Any], max_pending: int
) -> Iterator[tuple[int, str, tuple[Any, int, str | None]]]:
    """``(source id, path, (table, size, fingerprint))`` of every path, in completion order, with
    at most ``max_pending`` parses alive (bounded memory). Closing it cancels the parses not started.

    Raises:
        the parse's error (``Mp4Error``, ``SourceChangedError``...), when its result is reached.
    """
    pending: dict[cf.Future, tuple[int, str]] = {}
    todo = iter(enumerate(paths))
    try:
        while True:
            for sid, path in itertools.islice(todo, max_pending - len(pending)):
                pending[pool.submit(_parse_one, source, path, parse)] = (sid, path)
            if not pending:
                return
            done, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                sid, path = pending.pop(fut)
                yield sid, path, fut.result()
    finally:
        for fut in pending:
            fut.cancel()
