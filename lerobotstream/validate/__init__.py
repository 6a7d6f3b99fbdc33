"""Every defect of a LeRobotDataset v3 in one report, from headers only.

``validate_dataset`` reads ``meta/``, the ``data/`` Parquet footers and statistics and the MP4
headers (never the video payload, unless ``decode_sample`` asks for frames) and reports each
defect once, where it is, as a :class:`Finding`; per camera it summarises codec, resolution,
pixel format, GOPs, B-frames, edit lists, bytes per frame and NVDEC support. The checks are the
ones the dataset runs at construction — ``DatasetMeta.load`` and the sidecar's
``validate_source`` — collecting their problems instead of raising the first. CLI:
``python -m lerobotstream.validate`` (``lerobotstream-validate``); JSON layout: docs/validate.md.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from lerobotstream import constants
from lerobotstream.validate._findings import CODES, REPORT_FORMAT, Finding, Report, finding

__all__ = ["CODES", "REPORT_FORMAT", "Finding", "Report", "check_arguments", "validate_dataset"]

#: default header-reading threads on a local folder / a remote store (round trips overlapped)
LOCAL_WORKERS, REMOTE_WORKERS = 8, 32
INFO_PATH = "meta/info.json"


def check_arguments(
    *,
    decode_sample: Any = 0,
    workers: Any = None,
    tolerance_s: Any = constants.DEFAULT_TOLERANCE_S,
    names: dict[str, str] | None = None,
) -> None:
    """The rules of :func:`validate_dataset`'s numeric arguments (the CLI checks its flags here
    too, ``names`` mapping each argument to its flag): ``decode_sample`` an int >= 0, ``workers``
    None or an int >= 1, ``tolerance_s`` the stream option's own rule (a finite number > 0).

    Raises:
        StreamingConfigError: the first argument that breaks its rule (names it or its flag, and
            the value; a ``ValueError``).
    """
    from lerobotstream.options import is_int, option_info, require

    n = names or {}
    require(
        n.get("decode_sample", "decode_sample"),
        decode_sample,
        is_int(decode_sample) and decode_sample >= 0,
        "an int >= 0",
    )
    require(
        n.get("workers", "workers"),
        workers,
        workers is None or (is_int(workers) and workers >= 1),
        "None or an int >= 1",
    )
    rule = next(o for o in option_info() if o.name == "tolerance_s")
    require(n.get("tolerance_s", "tolerance_s"), tolerance_s, rule.check(tolerance_s), rule.want)


def validate_dataset(
    repo_id: str | None = None,
    *,
    root: Any = None,
    revision: str | None = None,
    endpoint: str | None = None,
    episodes: Sequence[int | range] | None = None,
    tolerance_s: float = constants.DEFAULT_TOLERANCE_S,
    decode_sample: int = 0,
    seed: int = 0,
    workers: int | None = None,
    headers_only: bool = False,
    progress: bool = False,
    source: Any = None,
) -> Report:
    """Check a dataset and return every finding.

    Args:
        repo_id: Hub dataset ``OWNER/NAME`` (with no ``root``: read from the Hub at ``revision``);
            with ``root``, only the name used in messages.
        root: local folder, ``http(s)://`` / fsspec URL or ``hf://`` root of the dataset.
        revision: branch, tag or commit of a Hub dataset.
        endpoint: Hub URL (default: ``HF_ENDPOINT`` through huggingface_hub).
        episodes: episode indices to check (default: all); ``range`` items are bounded by the
            dataset's episodes before they are expanded. Checks that compare whole files (row
            totals, rows of no episode, frames no episode claims) run only on a full selection.
        tolerance_s: allowed |frame PTS - (from_timestamp + i/fps)|, seconds (LeRobot's default 1e-4).
        decode_sample: frames to decode per MP4 at random (0: none).
        seed: seed of the frames ``decode_sample`` draws.
        workers: threads reading (>= 1; default 8 on a local folder, 32 on a remote store,
            whose round trips they overlap: about 2 requests per MP4).
        headers_only: read only the headers (Parquet footers and statistics, MP4 headers), not
            the per-row columns ``episode_index``, ``frame_index``, ``index``, ``timestamp``: the
            row counts then come from statistics where they can, and ``frame_index``, ``index``
            values and timestamps are not checked (docs/validate.md: what each costs).
        progress: a tqdm bar on stderr over the files.
        source: an already opened ``ByteSource`` (overrides ``root``/``revision``).

    Returns:
        Report: ``findings`` (each with severity, code, episode, camera, file, message, and
        ``episodes``: every episode it takes, ``[]`` for none), per-camera ``cameras`` summary,
        ``scan`` (files, requests, bytes read, elapsed seconds), ``good_episodes()``.

    Raises:
        MetadataError: ``meta/info.json``, an episode shard or ``tasks.parquet`` cannot be read at
            all, or ``episodes`` names an episode the dataset lacks (nothing else can be checked;
            ``code="episodes_unknown"``).
        UnsupportedDatasetVersionError: not a v3 dataset.
        SourceError: the root cannot be opened (``SourceProtocolError``: an unknown URL protocol).
        StreamingConfigError: ``workers``, ``decode_sample`` or ``tolerance_s`` break their rule
            (:func:`check_arguments`; a ``ValueError``).
    """
    from lerobotstream.features import REQUIRED_DATA_COLUMNS
    from lerobotstream.meta import DatasetMeta
    from lerobotstream.parquet import EpisodeParquetReader
    from lerobotstream.sidecar._validate import episode_windows, group_windows
    from lerobotstream.validate._rows import file_rows, row_findings
    from lerobotstream.validate._tables import (
        data_findings,
        index_gap_findings,
        merged_file_findings,
        metadata_findings,
        stats_findings,
    )

    check_arguments(decode_sample=decode_sample, workers=workers, tolerance_s=tolerance_s)
    t0 = time.perf_counter()
    if source is None:
        from lerobotstream.sources import open_source

        source = (
            open_source(root, repo_id=repo_id, revision=revision, endpoint=endpoint)
            if root is not None or repo_id
            else None
        )
        if source is None:
            raise ValueError("give root (a folder or URL) or repo_id (a Hub dataset)")
    if workers is None:
        workers = REMOTE_WORKERS if source.local_path(INFO_PATH) is None else LOCAL_WORKERS
    before = _counters(source)
    problems: list = []
    meta = DatasetMeta.load(source, episodes=episodes, repo_id=repo_id, problems=problems)
    full = episodes is None
    findings: list[Finding] = metadata_findings(problems)
    findings += index_gap_findings(meta, full)
    findings += stats_findings(meta)
    findings += _depth_findings(meta)
    missing = {f.file for f in findings if f.code in ("file_missing", "file_unreadable")}  # said once

    reader = EpisodeParquetReader(source, file_rows=meta.data_file_rows)
    by_data: dict[str, list] = defaultdict(list)
    for ep in meta.episodes:
        by_data[ep.data_path].append(ep)
    tabular = {k: f for k, f in meta.features.items() if f.get("dtype") != "video"}  # the rest is in data/
    required = list(dict.fromkeys(["episode_index", *REQUIRED_DATA_COLUMNS, *tabular]))  # the reader's, assembly's
    numeric = {k: f for k, f in tabular.items() if f.get("dtype") not in ("image", "string", "language")}
    images = [k for k, f in tabular.items() if f.get("dtype") == "image"]
    counts, counts_lock = {"images": 0}, threading.Lock()
    windows = group_windows(episode_windows(meta))
    paths = sorted(p for p in windows if p not in missing)
    data_paths = sorted(p for p in by_data if p not in missing)
    data_of = {int(ep.episode_index): ep.data_path for ep in meta.episodes}
    fps = float(meta.fps)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(paths) + len(data_paths), desc="validating", unit="file", dynamic_ncols=True)
    summaries = []
    decoded = 0
    results: dict[str, tuple] = {}
    data_results: dict[str, tuple] = {}
    row_problems: list = []

    def data_job(p: str, i: int) -> tuple[list[Finding], Any]:
        found = data_findings(
            reader, p, by_data[p], required, full, features=numeric, images=images, rows=not headers_only
        )
        if decode_sample > 0 and images and not any(f.severity == "error" for f in found):
            from lerobotstream.validate._decode import image_sample

            more, n = image_sample(reader, p, by_data[p], meta, decode_sample, seed=[seed, i, 1])
            found = found + more
            with counts_lock:
                counts["images"] += n
        if headers_only or any(f.code in ("data_unreadable", "file_unreadable", "data_columns") for f in found):
            return found, None
        return found, file_rows(reader, p, by_data[p], fps, tolerance_s, full)

    try:
        with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lrs-validate") as pool:
            # data jobs first: the pool takes jobs in order, so a video job that waits for its
            # episodes' timestamps waits only for jobs already running (never for a queued one)
            data_futs = {p: pool.submit(data_job, p, i) for i, p in enumerate(data_paths)}
            timestamps = None if headers_only else _Timestamps(data_futs, data_of)
            futs: dict[cf.Future, tuple[str, str]] = {f: ("data", p) for p, f in data_futs.items()}
            futs.update(
                {
                    pool.submit(
                        _check_file,
                        source,
                        p,
                        windows[p],
                        meta,
                        tolerance_s,
                        full,
                        decode_sample,
                        (seed, i),
                        timestamps,
                    ): ("video", p)
                    for i, p in enumerate(paths)
                }
            )
            for fut in cf.as_completed(futs):
                kind, p = futs[fut]
                if kind == "data":
                    data_results[p] = fut.result()
                else:
                    results[p] = fut.result()
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    data_found: list[Finding] = []
    for p in data_paths:
        found, rows = data_results[p]
        data_found += found
        if rows is not None:
            findings += rows.findings
            row_problems += rows.problems
    findings += merged_file_findings(data_found)
    for p in paths:
        found, summary, n, landing = results[p]
        findings += found
        decoded += n
        row_problems += landing
        if summary is not None:
            summaries.append(summary)
    findings += row_findings(row_problems)
    findings += _faststart_findings(summaries)
    shifted = {
        (e, f.camera)
        for f in findings
        if f.code == "window_shift"  # reported there
        for e in f.episodes
    }
    findings += _to_timestamp_findings(meta, tolerance_s, skip=shifted)
    after = _counters(source)
    report = Report(
        dataset={
            "repo_id": meta.repo_id,
            "root": getattr(source, "root_display", None),
            "revision": getattr(source, "commit", None) or revision,
            "fps": meta.fps,
            "total_episodes": meta.total_episodes,
            "episodes_checked": meta.num_episodes,
            "frames_checked": meta.num_frames,
            "tolerance_s": tolerance_s,
            "headers_only": bool(headers_only),
        },
        findings=_ordered(findings),
        cameras=_camera_summaries(meta, summaries, tolerance_s),
        scan={
            "video_files": len(paths),
            "data_files": len(data_paths),
            "requests": after[0] - before[0],
            "bytes_read": after[1] - before[1],
            "decoded_frames": decoded,
            "decoded_images": counts["images"],
            "elapsed_s": round(time.perf_counter() - t0, 3),
        },
        checked=[int(ep.episode_index) for ep in meta.episodes],
    )
    return report


class _Timestamps:
    """The timestamps of good episodes, from the data jobs (a video job asks for its episodes')."""

    def __init__(self, futures: dict[str, cf.Future], data_of: dict[int, str]) -> None:
        self._futures, self.data_of = futures, data_of

    def of(self, episodes: Sequence[int]) -> dict[int, Any]:
        out: dict[int, Any] = {}
        for p in sorted({self.data_of[e] for e in episodes if e in self.data_of}):
            fut = self._futures.get(p)
            if fut is None:  # the data file is missing (reported as such)
                continue
            _found, rows = fut.result()  # a running or finished job (see validate_dataset); its reads time out
            if rows is not None:
                out.update((e, rows.timestamps[e]) for e in episodes if e in rows.timestamps)
        return out


def _check_file(
    source: Any,
    path: str,
    windows: list,
    meta: Any,
    tolerance_s: float,
    full: bool,
    decode_sample: int,
    seed: tuple[int, int],
    timestamps: _Timestamps | None,
) -> tuple[list[Finding], Any, int, list]:
    """One MP4: its header checks, where its episodes' timestamps land (``timestamps``: the
    per-row columns were read), then (``decode_sample``, no error so far) sampled frames decoded;
    the sample table is dropped before returning (memory does not grow with the files)."""
    from lerobotstream.validate._videos import check_video

    found, summary = check_video(
        source,
        path,
        windows[0].camera,
        windows,
        meta,
        tolerance_s=tolerance_s,
        full_selection=full,
        keep_table=decode_sample > 0 or timestamps is not None,
    )
    decoded = 0
    landing: list = []
    if summary is not None and summary.table is not None:
        if timestamps is not None:
            from lerobotstream.validate._rows import landing_problems

            eps = sorted({w.episode_index for w in windows})
            landing = landing_problems(
                summary.table,
                summary.checked,
                timestamps.of(eps),
                float(meta.fps),
                tolerance_s,
                summary.camera,
                path,
                timestamps.data_of,
            )
        if decode_sample > 0 and not any(f.severity == "error" for f in found):
            from lerobotstream.validate._decode import decode_sample as decode

            more, decoded = decode(
                source, path, summary.camera, summary.table, windows, meta, decode_sample, seed=list(seed)
            )
            found = found + more
        summary.table, summary.checked = None, []
    return found, summary, decoded, landing


def _counters(source: Any) -> tuple[int, int]:
    st = getattr(source, "stats", None)
    return (int(getattr(st, "requests", 0) or 0), int(getattr(st, "bytes_read", 0) or 0))


def _ordered(findings: list[Finding]) -> list[Finding]:
    """Errors first, then by code, episode, camera, file (a stable order for reports and tests)."""
    return sorted(
        findings,
        key=lambda f: (
            f.severity != "error",
            f.code,
            -1 if f.episode_index is None else f.episode_index,
            f.camera or "",
            f.file or "",
        ),
    )


def _faststart_findings(summaries: list) -> list[Finding]:
    """One warning per camera whose files put ``moov`` after ``mdat`` (a property of the writer,
    not of one file: reported once, with the count)."""
    by_cam: dict[str, list] = defaultdict(list)
    for s in summaries:
        by_cam[s.camera].append(s)
    out = []
    for cam, items in sorted(by_cam.items()):
        late = [s.path for s in items if s.faststart is False]
        if late:
            out.append(
                finding(
                    "not_faststart",
                    f"camera {cam}: {len(late)} of {len(items)} MP4 file(s) have the moov "
                    f"box after mdat (first: {late[0]})",
                    camera=cam,
                )
            )
    return out


def _depth_findings(meta: Any) -> list[Finding]:
    """Depth cameras whose declared encoding cannot be decoded: the construction's own check
    (``DatasetMeta.depth_quantizer``)."""
    from lerobotstream.errors import MetadataError

    out = []
    for key in meta.depth_keys:
        if key not in meta.video_keys:
            continue
        try:
            meta.depth_quantizer(key)
        except MetadataError as e:
            out.append(finding("depth_unsupported", str(e), camera=key, file="meta/info.json"))
    return out


def _to_timestamp_findings(meta: Any, tolerance_s: float, skip: set = frozenset()) -> list[Finding]:
    """One warning per camera listing the episodes whose ``to_timestamp - from_timestamp`` is off
    ``length / fps`` by more than half a frame (or ``tolerance_s``, whichever is larger)."""
    limit = max(tolerance_s, 0.5 / float(meta.fps))
    bad: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for ep in meta.episodes:
        for cam, v in ep.videos.items():
            d = (v.to_timestamp - v.from_timestamp) - ep.length / float(meta.fps)
            if abs(d) > limit and (int(ep.episode_index), cam) not in skip:
                bad[cam].append((int(ep.episode_index), d))
    out = []
    for cam, items in sorted(bad.items()):
        e0, d0 = items[0]
        out.append(
            finding(
                "to_timestamp_mismatch",
                f"camera {cam}: {len(items)} episode(s) have to_timestamp - "
                f"from_timestamp off length/fps (first: episode {e0}, by {d0:+.6f} s)",
                camera=cam,
                episode_index=e0 if len(items) == 1 else None,
                episodes=[e for e, _ in items],
            )
        )
    return out


def _distribution(counts: Counter) -> dict[str, Any]:
    """min / median / max and the five most common values of a histogram ``{value: count}``."""
    if not counts:
        return {"min": None, "median": None, "max": None, "most_common": []}
    keys = np.asarray(sorted(counts), dtype=np.int64)
    cum = np.cumsum([counts[int(k)] for k in keys])
    total = int(cum[-1])
    lo, hi = keys[np.searchsorted(cum, (total - 1) // 2 + 1)], keys[np.searchsorted(cum, total // 2 + 1)]
    return {
        "min": int(keys[0]),
        "median": (float(lo) + float(hi)) / 2,
        "max": int(keys[-1]),
        "most_common": [[int(k), int(c)] for k, c in counts.most_common(5)],
    }


def _camera_summaries(meta: Any, summaries: list, tolerance_s: float) -> dict[str, dict[str, Any]]:
    from lerobotstream.features import is_depth_feature
    from lerobotstream.validate._codec import nvdec_support

    by_cam: dict[str, list] = defaultdict(list)
    for s in summaries:
        by_cam[s.camera].append(s)
    out: dict[str, dict[str, Any]] = {}
    for cam in meta.video_keys:
        items = by_cam.get(cam, [])
        frames = sum(s.frames for s in items)
        nbytes = sum(s.sample_bytes for s in items)
        depth = is_depth_feature(meta.features.get(cam) or {})
        gops: Counter = Counter()
        for s in items:
            gops.update(s.gop_lengths)
        errs = [s.max_error_s for s in items if s.max_error_s is not None]
        nv: dict[str, str] = {}
        for s in items:
            for g, v in nvdec_support(s.fmt, depth_map=depth).items():
                nv[g] = "cpu" if "cpu" in (nv.get(g), v) else v
        out[cam] = {
            "files": len(items),
            "codec": sorted({s.codec for s in items if s.codec}),
            "resolution": sorted({f"{s.width}x{s.height}" for s in items}),
            "pix_fmt": sorted({s.pix_fmt or "unknown" for s in items}),
            "depth_map": depth,
            "frames": frames,
            "bytes_per_frame": round(nbytes / frames, 1) if frames else None,
            "gop_length": _distribution(gops),
            "b_frames": sum(1 for s in items if s.reordered),
            "edit_lists": sum(1 for s in items if s.edit_list),
            "faststart": sum(1 for s in items if s.faststart),
            "max_timestamp_error_s": max(errs) if errs else None,
            "tolerance_margin_s": (tolerance_s - max(errs)) if errs else None,
            "nvdec": nv,
        }
    return out
