"""Reading the files: the ``data/`` Parquet files and the MP4s of the selection, on a thread pool,
each file checked as it arrives (``_tables.data_findings`` and ``_rows.file_rows`` per data file,
``_videos.check_video`` and ``_rows.landing_problems`` per MP4, ``_decode`` for
``decode_sample``), then the per-episode row problems grouped into findings."""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lerobotstream import constants
from lerobotstream.validate._findings import Finding

#: default header-reading threads on a local folder / a remote store (round trips overlapped)
LOCAL_WORKERS, REMOTE_WORKERS = 8, 32


def check_arguments(
    *,
    decode_sample: Any = 0,
    workers: Any = None,
    tolerance_s: Any = constants.DEFAULT_TOLERANCE_S,
    names: dict[str, str] | None = None,
) -> None:
    """The rules of ``validate_dataset``'s numeric arguments (the CLI checks its flags here too,
    ``names`` mapping each argument to its flag): ``decode_sample`` an int >= 0, ``workers`` None
    or an int >= 1, ``tolerance_s`` the stream option's own rule (a finite number > 0).

    Raises:
        StreamingConfigError: the first argument that breaks its rule (names it or its flag, and
            the value; a ``ValueError``).
    """
    from lerobotstream.options import is_int, option_info, require

    n = names or {}
    ok = is_int(decode_sample) and decode_sample >= 0
    require(n.get("decode_sample", "decode_sample"), decode_sample, ok, "an int >= 0")
    ok = workers is None or (is_int(workers) and workers >= 1)
    require(n.get("workers", "workers"), workers, ok, "None or an int >= 1")
    rule = next(o for o in option_info() if o.name == "tolerance_s")
    require(n.get("tolerance_s", "tolerance_s"), tolerance_s, rule.check(tolerance_s), rule.want)


def counters(source: Any) -> tuple[int, int]:
    """``(requests, bytes_read)`` of the source so far (0, 0 when it keeps no stats)."""
    st = getattr(source, "stats", None)
    return (int(getattr(st, "requests", 0) or 0), int(getattr(st, "bytes_read", 0) or 0))


@dataclass
class Scan:
    """What reading the files found."""

    findings: list[Finding] = field(default_factory=list)
    summaries: list = field(default_factory=list)
    """``_videos.FileSummary`` of every MP4 that parsed (their sample tables dropped)."""
    video_files: int = 0
    data_files: int = 0
    decoded_frames: int = 0
    decoded_images: int = 0


def scan_files(
    source: Any,
    meta: Any,
    *,
    skip: set[str],
    full: bool,
    tolerance_s: float,
    decode_sample: int,
    seed: int,
    workers: int | None,
    headers_only: bool,
    progress: bool,
) -> Scan:
    """Check every data file and MP4 of ``meta``'s selection but those in ``skip`` (missing or
    unreadable: reported once, by the metadata check).

    Args:
        full: every episode is selected (file totals and unclaimed rows and frames are checked).
        decode_sample, seed: frames (and images) decoded per file, and the seed that draws them.
        workers: threads (None: :data:`LOCAL_WORKERS` on a local folder, :data:`REMOTE_WORKERS`
            on a remote store, whose round trips they overlap); data files are queued first (a
            video job waits on its episodes' timestamps, which only jobs already running compute).
        headers_only: footers and MP4 headers only, no per-row column.
        progress: a tqdm bar on stderr over the files.
    """
    from lerobotstream.parquet import EpisodeParquetReader
    from lerobotstream.sidecar._validate import episode_windows, group_windows
    from lerobotstream.validate._rows import file_rows, landing_problems, row_findings
    from lerobotstream.validate._tables import data_findings, merged_file_findings
    from lerobotstream.validate._videos import check_video

    reader = EpisodeParquetReader(source, file_rows=meta.data_file_rows)
    by_data: dict[str, list] = defaultdict(list)
    for ep in meta.episodes:
        by_data[ep.data_path].append(ep)
    tabular = {k: f for k, f in meta.features.items() if f.get("dtype") != "video"}  # the rest is in data/
    numeric = {k: f for k, f in tabular.items() if f.get("dtype") not in ("image", "string", "language")}
    images = [k for k, f in tabular.items() if f.get("dtype") == "image"]
    windows = group_windows(episode_windows(meta))
    paths = sorted(p for p in windows if p not in skip)
    data_paths = sorted(p for p in by_data if p not in skip)
    data_of = {int(ep.episode_index): ep.data_path for ep in meta.episodes}
    fps = float(meta.fps)
    scan = Scan(video_files=len(paths), data_files=len(data_paths))
    lock = threading.Lock()
    if workers is None:
        workers = REMOTE_WORKERS if source.local_path(constants.INFO_PATH) is None else LOCAL_WORKERS

    def data_job(p: str, i: int) -> tuple[list[Finding], Any]:
        found = data_findings(
            reader, p, by_data[p], meta.features, full, features=numeric, images=images, rows=not headers_only
        )
        if decode_sample > 0 and images and not any(f.severity == "error" for f in found):
            from lerobotstream.validate._decode import image_sample

            more, n = image_sample(reader, p, by_data[p], meta, decode_sample, seed=[seed, i, 1])
            found = found + more
            with lock:
                scan.decoded_images += n
        # a footer the reader refused (unreadable, or declaring other rows than the episodes': data_rows,
        # the per-row columns are not checked in this run, so any data_rows here is the refusal) is
        # reported once: reading the rows would refuse it again
        refused = ("data_unreadable", "file_unreadable", "data_columns", "data_rows")
        if headers_only or any(f.code in refused for f in found):
            return found, None
        return found, file_rows(reader, p, by_data[p], fps, tolerance_s, full, n_tasks=len(meta.tasks))

    def video_job(p: str, i: int) -> tuple[list[Finding], Any, int, list]:
        """One MP4: its header checks, where its episodes' timestamps land (the per-row columns were
        read), then (``decode_sample``, no error so far) sampled frames decoded; the sample table is
        dropped before returning (memory does not grow with the files)."""
        w, keep = windows[p], decode_sample > 0 or not headers_only
        found, summary = check_video(
            source, p, w[0].camera, w, meta, tolerance_s=tolerance_s, full_selection=full, keep_table=keep
        )
        decoded, landing = 0, []
        if summary is not None and summary.table is not None:
            if not headers_only:
                ts = timestamps(sorted({x.episode_index for x in w}))
                landing = landing_problems(
                    summary.table, summary.checked, ts, fps, tolerance_s, summary.camera, p, data_of
                )
            if decode_sample > 0 and not any(f.severity == "error" for f in found):
                from lerobotstream.validate._decode import decode_sample as decode

                more, decoded = decode(source, p, summary.camera, summary.table, w, meta, decode_sample, seed=[seed, i])
                found = found + more
            summary.table, summary.checked = None, []
        return found, summary, decoded, landing

    def timestamps(episodes: Sequence[int]) -> dict[int, Any]:
        """The timestamps of good episodes, from the data jobs (running or finished: queued first)."""
        out: dict[int, Any] = {}
        for p in sorted({data_of[e] for e in episodes if e in data_of}):
            fut = data_futs.get(p)  # None: the data file is missing (reported as such)
            rows = None if fut is None else fut.result()[1]  # its reads time out
            if rows is not None:
                out.update((e, rows[2][e]) for e in episodes if e in rows[2])
        return out

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(paths) + len(data_paths), desc="validating", unit="file", dynamic_ncols=True)
    results: dict[tuple[str, str], Any] = {}
    try:
        with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lrs-validate") as pool:
            # data jobs first: the pool takes jobs in order, so a video job that waits for its
            # episodes' timestamps waits only for jobs already running (never for a queued one)
            data_futs = {p: pool.submit(data_job, p, i) for i, p in enumerate(data_paths)}
            futs: dict[cf.Future, tuple[str, str]] = {f: ("data", p) for p, f in data_futs.items()}
            futs.update({pool.submit(video_job, p, i): ("video", p) for i, p in enumerate(paths)})
            for fut in cf.as_completed(futs):
                results[futs[fut]] = fut.result()
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    data_found: list[Finding] = []
    row_problems: list = []
    for p in data_paths:
        found, rows = results[("data", p)]
        data_found += found
        if rows is not None:
            row_problems += rows[0]
            scan.findings += rows[1]
    scan.findings += merged_file_findings(data_found)
    for p in paths:
        found, summary, n, landing = results[("video", p)]
        scan.findings += found
        scan.decoded_frames += n
        row_problems += landing
        if summary is not None:
            scan.summaries.append(summary)
    scan.findings += row_findings(row_problems)
    return scan
