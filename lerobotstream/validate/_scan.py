"""Reading the files: the ``data/`` Parquet files and the MP4s of the selection, on a thread pool,
each file checked as it arrives (``_tables.data_findings`` and ``_tables.file_rows`` per data file,
``_videos.check_video`` and ``_tables.landing_problems`` per MP4), then the per-episode row problems
grouped into findings.

``decode_sample`` N: N random frames per MP4 (and N images per data file with ``image`` features)
decoded the training way and checked against the metadata: a frame goes ``plan_span`` → the span's
bytes → ``check_sample_framing`` → ``synthesize`` → ``EpisodeVideo.frames_at`` (PTS checked against
the sample table), an image cell ``image_bytes`` → ``decode_image`` (the declared shape checked),
as item assembly does."""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from lerobotstream import constants
from lerobotstream.parquet import EpisodeParquetReader
from lerobotstream.sidecar._validate import check_window_detail, episode_windows, group_windows
from lerobotstream.validate._findings import Finding, finding
from lerobotstream.validate._tables import data_findings, file_rows, landing_problems, merged_findings, row_findings
from lerobotstream.validate._videos import check_video

#: default header-reading threads on a local folder / a remote store (round trips overlapped)
LOCAL_WORKERS, REMOTE_WORKERS = 8, 32


def check_arguments(
    *,
    decode_sample: Any = 0,
    workers: Any = None,
    tolerance_s: Any = constants.DEFAULT_TOLERANCE_S,
    cli: bool = False,
) -> None:
    """The rules of ``validate_dataset``'s numeric arguments (``cli``: named by their flags,
    ``--decode-sample``...): ``decode_sample`` an int >= 0, ``workers`` None (on the command line:
    the flag left out) or an int >= 1,
    ``tolerance_s`` the stream option's rule (a finite number > 0).

    Raises:
        StreamingConfigError: the first argument that breaks its rule (names it or its flag, and the value).
    """
    from lerobotstream.options import is_int, option_info, require

    name = (lambda k: "--" + k.replace("_", "-")) if cli else (lambda k: k)
    ok = is_int(decode_sample) and decode_sample >= 0
    require(name("decode_sample"), decode_sample, ok, "an int >= 0")
    ok = workers is None or (is_int(workers) and workers >= 1)
    default = f"{LOCAL_WORKERS} on a local folder, {REMOTE_WORKERS} on a remote store"
    require(name("workers"), workers, ok, f"an int >= 1 (left out: {default})" if cli else "None or an int >= 1")
    rule = next(o for o in option_info() if o.name == "tolerance_s")
    require(name("tolerance_s"), tolerance_s, rule.check(tolerance_s), rule.want)


def counters(source: Any) -> tuple[int, int]:
    """``(requests, bytes_read)`` of the source so far (0, 0 when it keeps no stats)."""
    st = getattr(source, "stats", None)
    return (int(getattr(st, "requests", 0) or 0), int(getattr(st, "bytes_read", 0) or 0))


def scan_files(
    source: Any,
    meta: Any,
    counts: dict[str, int],
    *,
    skip: set[str],
    full: bool,
    tolerance_s: float,
    decode_sample: int,
    seed: int,
    workers: int | None,
    headers_only: bool,
    progress: bool,
) -> tuple[list[Finding], list]:
    """Check every data file and MP4 of ``meta``'s selection but those in ``skip`` (missing or
    unreadable: reported once, by the metadata check): the findings, and the ``_videos.FileSummary``
    of every MP4 that parsed (sample tables dropped). ``counts`` gets ``video_files``,
    ``data_files``, ``decoded_frames`` and ``decoded_images``.

    Args:
        full: every episode is selected (file totals and unclaimed rows and frames are checked).
        decode_sample, seed: frames (and images) decoded per file, and the seed that draws them.
        workers: threads (None: :data:`LOCAL_WORKERS` on a local folder, :data:`REMOTE_WORKERS`
            on a remote store, whose round trips they overlap); data files are queued first (a
            video job waits on its episodes' timestamps, which only jobs already running compute).
        headers_only: footers and MP4 headers only, no per-row column.
        progress: a tqdm bar on stderr over the files.
    """
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
    counts.update(video_files=len(paths), data_files=len(data_paths))
    findings: list[Finding] = []
    summaries: list = []
    lock = threading.Lock()
    if workers is None:
        workers = REMOTE_WORKERS if source.local_path(constants.INFO_PATH) is None else LOCAL_WORKERS

    def data_job(p: str, i: int) -> tuple[list[Finding], Any]:
        found = data_findings(
            reader, p, by_data[p], meta.features, full, features=numeric, images=images, rows=not headers_only
        )
        if decode_sample > 0 and images and not any(f.severity == "error" for f in found):
            more, n = image_sample(reader, p, by_data[p], meta, decode_sample, seed=[seed, i, 1])
            found = found + more
            with lock:
                counts["decoded_images"] += n
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
                landing = landing_problems(summary, ts, fps, tolerance_s, data_of)
            if decode_sample > 0 and not any(f.severity == "error" for f in found):
                more, decoded = decode_frames(source, summary, w, meta, decode_sample, seed=[seed, i])
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

    from tqdm import tqdm

    total = len(paths) + len(data_paths)
    with (
        tqdm(total=total, desc="validating", unit="file", dynamic_ncols=True, disable=not progress) as bar,
        cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lrs-validate") as pool,
    ):
        # data jobs first: the pool takes jobs in order, so a video job that waits for its
        # episodes' timestamps waits only for jobs already running (never for a queued one)
        data_futs = {p: pool.submit(data_job, p, i) for i, p in enumerate(data_paths)}
        video_futs = {p: pool.submit(video_job, p, i) for i, p in enumerate(paths)}
        for fut in cf.as_completed([*data_futs.values(), *video_futs.values()]):
            fut.result()
            bar.update(1)
    data_found: list[Finding] = []
    row_problems: list = []
    for p in data_paths:
        found, rows = data_futs[p].result()
        data_found += found
        if rows is not None:
            row_problems += rows[0]
            findings += rows[1]
    findings += merged_findings(data_found)
    for p in paths:
        found, summary, n, landing = video_futs[p].result()
        findings += found
        counts["decoded_frames"] += n
        row_problems += landing
        if summary is not None:
            summaries.append(summary)
    return findings + row_findings(row_problems), summaries


def decode_frames(source: Any, summary: Any, windows: Sequence[Any], meta: Any, n: int, seed: Any) -> tuple[list, int]:
    """Findings of ``n`` frames of one MP4 (its ``FileSummary``, sample table kept), and how many
    frames were decoded; frames are drawn (seeded by ``seed``) uniformly over the windows' frames."""
    from lerobotstream.decode._decoder import EpisodeVideo
    from lerobotstream.features import frame_hwc, is_depth_feature
    from lerobotstream.mp4.framing import check_sample_framing
    from lerobotstream.mp4.spans import plan_span
    from lerobotstream.mp4.synth import synthesize

    path, camera, table = summary.path, summary.camera, summary.table
    picks: list[tuple[int, int, float, int]] = []  # (episode, source frame, from_timestamp, episode frame)
    for w in windows:
        res = check_window_detail(table, w.from_timestamp, w.length, float(meta.fps), 1e9)
        if res.first_frame is not None:
            picks.extend((w.episode_index, res.first_frame + i, float(w.from_timestamp), i) for i in range(w.length))
    num = int(np.asarray(table.presentation_order).shape[0])
    if not picks:
        pts = np.asarray(table.pts_s, dtype=np.float64)[np.asarray(table.presentation_order, dtype=np.int64)]
        picks = [(-1, k, float(pts[k]), 0) for k in range(num)]
    picks = [p for p in picks if 0 <= p[1] < num]
    if not picks:
        return [], 0
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(len(picks), size=min(n, len(picks)), replace=False).tolist())
    feat = meta.features.get(camera) or {}
    hwc, depth = frame_hwc(feat), is_depth_feature(feat)
    done = 0
    for j in chosen:
        ep, k, from_ts, i = picks[j]
        epi = None if ep < 0 else ep
        where = dict(episode_index=epi, camera=camera, file=path)
        try:
            span = plan_span(table, k, k + 1, path=path)
            payload = source.read(path, span.byte_start, span.byte_stop - span.byte_start)
            check_sample_framing(table, span, payload, path=path)
            mini = synthesize(table, span, payload)
            kw = dict(episode_index=ep, camera=camera, path=path, from_timestamp=from_ts, fps=meta.fps, depth=depth)
            video = EpisodeVideo(table, span, mini, device="cpu", **kw)
            try:
                frame = video.frames_at([i])
            finally:
                video.close()
            done += 1
        except Exception as e:  # noqa: BLE001 - every failure is this file's finding; the next frames would fail alike
            text = f"{path}: frame {k} (episode {epi}): {type(e).__name__}: {' '.join(str(e).split())[:300]}"
            return [finding("decode_failed", text, **where)], done
        if hwc is not None:
            _, c, h, w = (int(x) for x in frame.shape)
            if (h, w) != hwc[:2]:
                text = f"{path}: frame {k} decodes to {c}x{h}x{w} (CxHxW), info.json's shape for {camera} is {list(feat['shape'])}"
                return [finding("decode_shape", text, **where)], done
    return [], done


def image_sample(reader: Any, path: str, episodes: Sequence[Any], meta: Any, n: int, seed: Any) -> tuple[list, int]:
    """Findings of ``n`` sampled cells of each ``image`` feature of one data file (one finding per
    feature at most), and how many images were decoded.

    Cells are drawn (seeded) uniformly over the frames of ``episodes``; the sampled episodes' row
    groups are read with that feature's column (images are embedded: this reads their bytes).
    """
    from lerobotstream.dataset._images import declared_chw, decode_image, image_bytes

    keys = [k for k, f in meta.features.items() if f.get("dtype") == "image"]
    frames = [(int(e.episode_index), i) for e in episodes for i in range(int(e.length))]
    if not keys or not frames or n <= 0:
        return [], 0
    rng = np.random.default_rng(seed)
    chosen = [frames[j] for j in sorted(rng.choice(len(frames), size=min(n, len(frames)), replace=False).tolist())]
    eps = sorted({ep for ep, _ in chosen})
    out: list[Finding] = []
    done = 0
    for key in keys:
        shape = declared_chw(meta.features[key])
        try:
            table = reader.read_columns(path, (key, "episode_index", "frame_index"), episodes=eps)
            if key not in table.column_names:
                continue  # the footer check names the missing column
            cells = image_bytes(table.column(key), key=key, episode_index=eps[0], path=path)
            ep_col = table.column("episode_index").to_numpy()
            fi_col = np.zeros(ep_col.shape, np.int64)
            if "frame_index" in table.column_names:
                fi_col = table.column("frame_index").to_numpy()
            for ep, i in sorted(chosen):
                rows = np.flatnonzero((ep_col == ep) & (fi_col == i))
                if rows.shape[0] == 0:
                    continue  # the per-row checks name the episode's rows
                decode_image(cells[int(rows[0])], key=key, episode_index=ep, frame_index=i, path=path, shape=shape)
                done += 1
        except Exception as e:  # noqa: BLE001 - every failure is this feature's finding
            ep = getattr(e, "episode_index", None)
            ep = ep if ep is not None and ep >= 0 else None
            text = f"{path}: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
            out.append(finding("data_image", text, episode_index=ep, camera=key, file=path))
    return out, done
