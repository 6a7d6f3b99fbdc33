"""Every defect of a LeRobotDataset v3 in one report, from headers only.

``validate_dataset`` reads ``meta/``, the ``data/`` Parquet footers and statistics and the MP4
headers (never the video payload, unless ``decode_sample`` asks for frames) and reports each
defect once, where it is, as a :class:`Finding`, with a per-camera summary. Where training has a
rule, the validator calls it — ``DatasetMeta.load(problems=[])``, ``sidecar.validate_source``,
``parquet.episode_rows_problem`` / ``index_problem`` / ``task_index_problem`` / ``footer_rows_problem``,
``features.data_columns_problem`` — and collects the :class:`~lerobotstream.errors.Problem` s
training raises on. Its own checks (samples outside ``mdat``, shifted windows, ``meta/stats.json``,
index gaps) report a warning where training tolerates the defect.
CLI: ``python -m lerobotstream.validate`` (``lerobotstream-validate``); JSON layout: docs/validate.md.

Modules: ``_scan`` (the files, on a thread pool), ``_tables`` (metadata beyond the loader's checks,
Parquet footers), ``_rows`` (per-row columns), ``_videos`` / ``_codec`` (MP4 headers), ``_decode``
(``decode_sample``), ``_findings`` (codes, the report), ``_report`` (per camera, text).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from lerobotstream import constants
from lerobotstream.validate._findings import Finding, Report, problem_findings

__all__ = ["validate_dataset", "Report", "Finding"]


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
            (``_scan.check_arguments``; a ``ValueError``), or ``tolerance_s >= 0.5 / fps`` (training's
            ``check_tolerance``).
    """
    from lerobotstream.meta import DatasetMeta
    from lerobotstream.options import check_tolerance
    from lerobotstream.validate._report import camera_summaries, faststart_findings
    from lerobotstream.validate._scan import check_arguments, counters, scan_files
    from lerobotstream.validate._tables import depth_findings, index_gap_findings, stats_findings, to_timestamp_findings

    check_arguments(decode_sample=decode_sample, workers=workers, tolerance_s=tolerance_s)
    t0 = time.perf_counter()
    if source is None and root is None and not repo_id:
        raise ValueError("give root (a folder or URL) or repo_id (a Hub dataset)")
    if source is None:
        from lerobotstream.sources import open_source

        source = open_source(root, repo_id=repo_id, revision=revision, endpoint=endpoint)
    before = counters(source)
    problems: list = []
    meta = DatasetMeta.load(source, episodes=episodes, repo_id=repo_id, problems=problems)
    check_tolerance(tolerance_s, meta.fps, where=meta.repo_id)  # training's rule, once fps is known
    full = episodes is None
    # what DatasetMeta.load collected, then the metadata's checks beyond it
    findings = problem_findings(problems) + index_gap_findings(meta, full) + stats_findings(meta) + depth_findings(meta)
    scan = scan_files(
        source,
        meta,
        skip={f.file for f in findings if f.code in ("file_missing", "file_unreadable")},  # said once
        full=full,
        tolerance_s=tolerance_s,
        decode_sample=decode_sample,
        seed=seed,
        workers=workers,
        headers_only=headers_only,
        progress=progress,
    )
    findings += scan.findings
    findings += faststart_findings(scan.summaries)
    shifted = {(e, f.camera) for f in findings if f.code == "window_shift" for e in f.episodes}  # reported there
    findings += to_timestamp_findings(meta, tolerance_s, skip=shifted)
    after = counters(source)
    return Report(
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
        findings=sorted(findings, key=_order),
        cameras=camera_summaries(meta, scan.summaries, tolerance_s),
        scan={
            "video_files": scan.video_files,
            "data_files": scan.data_files,
            "requests": after[0] - before[0],
            "bytes_read": after[1] - before[1],
            "decoded_frames": scan.decoded_frames,
            "decoded_images": scan.decoded_images,
            "elapsed_s": round(time.perf_counter() - t0, 3),
        },
        checked=[int(ep.episode_index) for ep in meta.episodes],
    )


def _order(f: Finding) -> tuple:
    """Errors first, then by code, episode, camera, file (a stable order for reports and tests)."""
    return (
        f.severity != "error",
        f.code,
        -1 if f.episode_index is None else f.episode_index,
        f.camera or "",
        f.file or "",
    )
