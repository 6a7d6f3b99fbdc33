"""Findings and the report that holds them (the JSON layout is documented in docs/validate.md): the
codes, the per-camera summary from the files' :class:`~lerobotstream.validate._videos.FileSummary`
(codec, resolution, pixel format, GOPs, B-frames, edit lists, bytes per frame, the largest
timestamp error, NVDEC support; ``not_faststart``, a property of a camera's writer, reported once
per camera), and the text: findings grouped by code (counts, first examples), then the cameras."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from lerobotstream.errors import Problem, SourceReadError
from lerobotstream.features import is_depth_feature

#: JSON layout version of :meth:`Report.to_json`
REPORT_FORMAT = 1

#: finding code → its fix hint, by severity (:data:`CODES` joins them). Codes are stable: tools may
#: match on them. The message of each finding says where; the hint says what to do.
_ERRORS = {
    # metadata (meta/)
    "metadata": "fix the metadata the message names",
    "duplicate_episode": "keep one row per episode_index in meta/episodes",
    "missing_episodes": "episode indices must be 0..N-1: restore the missing meta/episodes shard or rows",
    "episode_row_null": "fill the null column of the meta/episodes row (or rewrite the shard)",
    "index_range": "length must equal dataset_to_index - dataset_from_index",
    "index_overlap": "episodes' [dataset_from_index, dataset_to_index) ranges must not overlap",
    "video_location": "the episode's videos/<camera>/* columns must name a file and a window",
    "file_missing": "restore the file (re-download, or fix the chunk/file indices of the episodes)",
    "file_unreadable": "the file is there but cannot be read: fix its permissions, or the link (a symlink loop, a folder or a device where the file should be)",
    "stats_shape": "recompute meta/stats.json (LeRobot: compute_stats / aggregate_stats)",
    "stats_values": "recompute meta/stats.json: min must not exceed max, std must not be negative",
    # data/ Parquet (footers and statistics)
    "data_unreadable": "re-download or rewrite the Parquet file",
    "data_rows": "the data file's rows must equal the lengths of the episodes in it",
    "data_columns": "the data file lacks columns info.json declares: rewrite it or fix info.json",
    "data_episode_absent": "the episode's rows are not in the data file meta/episodes names",
    "data_index_range": "the file's `index` column must be each row's dataset_from_index + frame_index, covering the episodes' [dataset_from_index, dataset_to_index)",
    "data_task_index": "each row's task_index must name a task of meta/tasks.parquet (0 <= task_index < number of tasks): rewrite the column or add the tasks",
    "data_frame_index": "frame_index must run 0..length-1 in each episode's rows: rewrite the episode's rows",
    "data_shape": "a column's per-row shape must be info.json's shape for that feature: fix meta/info.json or the file",
    "data_dtype": "a numeric feature's column must hold numbers its info.json dtype holds, with no null: fix meta/info.json or the file",
    "data_image": "an image feature's cells must be embedded PNG/JPEG bytes of its declared shape ({bytes, path} structs, as LeRobot writes them): re-encode the images or fix meta/info.json",
    "data_timestamps": "timestamp must be finite and frame_index / fps (LeRobot's writer) within tolerance_s: rewrite the column",
    "timestamp_shift": "the episode's timestamps must start at 0 and land on its own video frames (from_timestamp + timestamp): set timestamp = frame_index / fps",
    # videos (MP4 headers)
    "video_unreadable": "re-encode or re-download the MP4",
    "video_truncated": "the MP4 ends before its data: re-download or re-encode it",
    "video_tables": "the sample tables (stco/co64, stsz, stsc) do not describe the file's mdat: re-download or remux the MP4",
    "video_unsupported": "remux the MP4 (ffmpeg -i in.mp4 -c copy -movflags +faststart out.mp4)",
    "codec_unsupported": "re-encode as AV1, H.264 or HEVC (LeRobot's encoders)",
    "depth_unsupported": "re-encode the depth camera as LeRobot 0.6's default (HEVC gray12le, lossless)",
    "shape_mismatch": "info.json's shape/video.height/video.width must match the video's frames",
    "fps_mismatch": "info.json's fps must be the videos' frame rate (or re-encode at that rate)",
    "no_frames": "the video has no frames: re-encode it",
    "bad_length": "the episode's length must be positive",
    "window_outside_file": "from_timestamp must lie inside its file: fix the episode's video chunk/file indices or timestamps",
    "window_off_frame": "from_timestamp must be a frame's presentation time (within tolerance_s)",
    "video_short": "the file lacks the episode's last frames: re-encode the file, or shorten the episode",
    "timestamp_drift": "frames drift from from_timestamp + i/fps: re-encode at a constant frame rate",
    "window_frames": "the episode's window does not select exactly its frames: fix from_timestamp",
    "episode_overlap": "two episodes claim the same frames: one from_timestamp is shifted (recompute them from the videos' durations)",
    "window_shift": "the episodes' from_timestamp/to_timestamp were moved: set each from_timestamp back to the previous episode's to_timestamp in the file (recompute them from the videos' durations)",
    "decode_failed": "a sampled frame did not decode as its timestamps promise: re-encode the file",
    "decode_shape": "a decoded frame's shape differs from info.json's",
}
_WARNINGS = {
    "index_gap": "global indices usually run contiguously from 0; a gap means rows were removed",
    "info_count": "update info.json's total_episodes/total_frames/splits to the episode shards",
    "stats_nonfinite": "recompute meta/stats.json: a statistic is NaN or infinite",
    "stats_unknown_feature": "meta/stats.json names a feature info.json does not declare",
    "codec_mismatch": "info.json's video.codec differs from the file's codec: update info.json",
    "pix_fmt_mismatch": "info.json's video.pix_fmt differs from the file's: update info.json",
    "not_faststart": "moov after mdat costs an extra read per file: ffmpeg -i in.mp4 -c copy -movflags +faststart out.mp4",
    "to_timestamp_mismatch": "to_timestamp - from_timestamp should be length / fps: one of them was edited",
    "timestamp_margin": "frames sit close to the tolerance_s limit: a small float error turns them into FrameTimestampError",
    "unclaimed_frames": "frames of the file belong to no episode (an episode removed, or its window shifted)",
}
#: every finding code: (severity, hint)
CODES: dict[str, tuple[str, str]] = {
    **{k: ("error", v) for k, v in _ERRORS.items()},
    **{k: ("warning", v) for k, v in _WARNINGS.items()},
}


def read_code(e: BaseException, code: str) -> str:
    """``file_unreadable`` when ``e`` says the file is there but cannot be read (``SourceReadError``:
    a refused permission, a symlink loop, a folder); the reader's own finding code when it refused
    the file by a rule (``data_rows``: a footer declaring more rows than its episodes); else ``code``."""
    if isinstance(e, SourceReadError):
        return "file_unreadable"
    own = getattr(e, "code", None)
    return own if isinstance(own, str) and own in CODES else code


@dataclass(frozen=True)
class Finding:
    """One defect, reported once where it is.

    ``episode_index``, ``camera`` and ``file`` are None when they do not apply; ``episodes`` always
    lists every episode the defect takes (``[episode_index]`` for one, ``[]`` for none).
    """

    severity: str
    """``"error"`` (training would fail or read wrong frames) or ``"warning"``."""
    code: str
    """Stable identifier, a key of :data:`CODES`."""
    episode_index: int | None
    camera: str | None
    file: str | None
    """Path relative to the dataset root."""
    message: str
    """One line: what is wrong, where, and a fix hint."""
    episodes: list[int] = field(default_factory=list)
    """Every episode the defect takes, ascending (``[]`` when it takes none in particular)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def finding(
    code: str,
    message: str,
    *,
    episode_index: int | None = None,
    camera: str | None = None,
    file: str | None = None,
    episodes: list[int] | None = None,
    severity: str | None = None,
) -> Finding:
    """A :class:`Finding` of ``code`` (its severity from :data:`CODES` unless given), the message
    on one line with the code's fix hint."""
    default, hint = CODES[code]
    text = " ".join(str(message).split())
    if hint and hint not in text:
        text = f"{text} — fix: {hint}"
    eps = {int(e) for e in episodes or ()} | ({int(episode_index)} if episode_index is not None else set())
    one = None if episode_index is None else int(episode_index)
    return Finding(severity or default, code, one, camera, file, text, sorted(eps))


def problem_findings(problems: Sequence[Problem]) -> list[Finding]:
    """Problems a training check returned (or ``DatasetMeta.load(problems=[])`` collected), as
    findings; a code the report does not know becomes ``metadata``."""
    where = lambda p: dict(episode_index=p.episode_index, camera=p.camera, file=p.path, episodes=list(p.episodes))  # noqa: E731
    return [
        finding(p.code if p.code in CODES else "metadata", p.message, severity=p.severity, **where(p)) for p in problems
    ]


@dataclass
class Report:
    """What :func:`lerobotstream.validate.validate_dataset` found."""

    dataset: dict[str, Any]
    """``repo_id``, ``root``, ``revision``, ``fps``, ``total_episodes``, ``episodes_checked``, ``tolerance_s``."""
    findings: list[Finding] = field(default_factory=list)
    cameras: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per video key: the summary (see docs/validate.md)."""
    scan: dict[str, Any] = field(default_factory=dict)
    """``video_files``, ``data_files``, ``requests``, ``bytes_read``, ``decoded_frames``, ``decoded_images``, ``elapsed_s``."""
    checked: list[int] = field(default_factory=list)
    """The episodes checked, ascending (not in the JSON: ``dataset.episodes_checked`` counts them)."""

    def good_episodes(self) -> list[int]:
        """The checked episodes no error finding names, ascending: what ``--dataset.episodes``
        can take to train on the rest. An error naming no episode (``episodes == []``, e.g. a
        broken ``meta/stats.json``) is not fixed by leaving episodes out; it does not shrink this list."""
        bad = {e for f in self.errors for e in f.episodes}
        return [e for e in self.checked if e not in bad]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when no finding is an error."""
        return not self.errors

    @property
    def exit_status(self) -> int:
        """0 without errors, 1 with at least one."""
        return 0 if self.ok else 1

    def counts(self) -> dict[str, int]:
        """Findings per code, most frequent first."""
        return dict(Counter(f.code for f in self.findings).most_common())

    def to_json(self) -> dict[str, Any]:
        return {
            "format": REPORT_FORMAT,
            "ok": self.ok,
            "dataset": self.dataset,
            "counts": {"errors": len(self.errors), "warnings": len(self.warnings), "by_code": self.counts()},
            "findings": [f.to_json() for f in self.findings],
            "cameras": self.cameras,
            "scan": self.scan,
        }


#: examples printed per code
EXAMPLES_PER_CODE = 3
#: episodes named per finding whose message does not name them (a damaged file's)
EPISODES_PER_FINDING = 12


def _by_camera(summaries: list) -> dict[str, list]:
    by_cam: dict[str, list] = defaultdict(list)
    for s in summaries:
        by_cam[s.camera].append(s)
    return by_cam


def faststart_findings(summaries: list) -> list[Finding]:
    """One warning per camera whose files put ``moov`` after ``mdat`` (a property of the writer,
    not of one file: reported once, with the count)."""
    out = []
    for cam, items in sorted(_by_camera(summaries).items()):
        late = [s.path for s in items if s.faststart is False]
        if late:
            text = (
                f"camera {cam}: {len(late)} of {len(items)} MP4 file(s) have the moov box after mdat (first: {late[0]})"
            )
            out.append(finding("not_faststart", text, camera=cam))
    return out


def distribution(counts: Counter) -> dict[str, Any]:
    """min / median / max and the five most common values of a histogram ``{value: count}``."""
    if not counts:
        return {"min": None, "median": None, "max": None, "most_common": []}
    keys = sorted(counts)
    return {
        "min": int(keys[0]),
        "median": float(np.median(np.repeat(np.asarray(keys, np.int64), [counts[k] for k in keys]))),
        "max": int(keys[-1]),
        "most_common": [[int(k), int(c)] for k, c in counts.most_common(5)],
    }


def camera_summaries(meta: Any, summaries: list, tolerance_s: float) -> dict[str, dict[str, Any]]:
    """Per video key of ``meta``: the summary docs/validate.md describes (``files``, ``codec``,
    ``resolution``, ``pix_fmt``, ``depth_map``, ``frames``, ``bytes_per_frame``, ``gop_length``,
    ``b_frames``, ``edit_lists``, ``faststart``, ``max_timestamp_error_s`` and
    ``tolerance_margin_s`` in seconds, ``nvdec``: GPU family → ``"nvdec"`` or ``"cpu"``)."""
    by_cam = _by_camera(summaries)
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
            for g, v in s.nvdec.items():
                nv[g] = "cpu" if "cpu" in (nv.get(g), v) else v
        out[cam] = {
            "files": len(items),
            "codec": sorted({s.fmt.codec for s in items if s.fmt.codec}),
            "resolution": sorted({f"{s.width}x{s.height}" for s in items}),
            "pix_fmt": sorted({s.fmt.pix_fmt or "unknown" for s in items}),
            "depth_map": depth,
            "frames": frames,
            "bytes_per_frame": round(nbytes / frames, 1) if frames else None,
            "gop_length": distribution(gops),
            "b_frames": sum(1 for s in items if s.reordered),
            "edit_lists": sum(1 for s in items if s.edit_list),
            "faststart": sum(1 for s in items if s.faststart),
            "max_timestamp_error_s": max(errs) if errs else None,
            "tolerance_margin_s": (tolerance_s - max(errs)) if errs else None,
            "nvdec": nv,
        }
    return out


def _runs(eps: list[int]) -> list[str]:
    """``["2", "5..9"]``: the sorted, unique ``eps`` as runs of consecutive indices."""
    out: list[str] = []
    start = prev = None
    for e in eps + [None]:
        if start is not None and (e is None or e != prev + 1):
            out.append(str(start) if start == prev else f"{start}..{prev}")
            start = None
        if start is None:
            start = e
        prev = e
    return out


def _names_episodes(message: str, eps: list[int]) -> bool:
    """Whether ``message`` already names every episode of ``eps`` (ascending): ``episode 3`` for
    one, a list ``[0, 1, 2, ...`` or ``[2, 5..9, ...`` (a row finding's, a metadata finding's) or a
    range ``10..88`` of consecutive episodes (a run of shifted windows)."""
    if len(eps) == 1:
        return re.search(rf"\bepisode {eps[0]}\b", message) is not None
    runs = _runs(eps)
    listed = ("[" + ", ".join(str(e) for e in eps[:5]), "[" + ", ".join(runs[:5]))
    return any(x in message for x in listed) or (
        len(runs) == 1 and re.search(rf"\b{re.escape(runs[0])}\b", message) is not None
    )


def _episodes(f) -> str:
    """`` (episodes 0, 1, 2)`` for a finding whose message does not name all the episodes it takes
    (a file's defect: every episode in the file, where the message names the first or none), so
    the text report says what training would lose; "" otherwise."""
    eps = sorted({int(e) for e in f.episodes or []})
    if not eps or _names_episodes(f.message, eps):
        return ""
    shown = ", ".join(str(e) for e in eps[:EPISODES_PER_FINDING])
    more = f", ... {len(eps) - EPISODES_PER_FINDING} more" if len(eps) > EPISODES_PER_FINDING else ""
    return f" (episode{'s' if len(eps) > 1 else ''} {shown}{more})"


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def render(report: Report, *, examples: int = EXAMPLES_PER_CODE) -> str:
    """The report as text (one finding message per line; no line depends on the terminal)."""
    d = report.dataset
    lines = [
        f"dataset  {d.get('repo_id')}  root={d.get('root')}"
        + (f"  revision={d['revision']}" if d.get("revision") else ""),
        f"         fps={d.get('fps')}  episodes checked {d.get('episodes_checked')}/{d.get('total_episodes')}  "
        f"frames {d.get('frames_checked')}  tolerance_s={d.get('tolerance_s')}",
    ]
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for f in report.findings:
        groups[(f.severity, f.code)].append(f)
    lines += ["", "no findings"] if not report.findings else [""]
    for (severity, code), items in sorted(groups.items(), key=lambda kv: (kv[0][0] != "error", -len(kv[1]), kv[0][1])):
        lines.append(f"{severity.upper():7s} {code}  ({len(items)})")
        for f in items[:examples]:
            lines.append(f"  - {f.message}{_episodes(f)}")
        if len(items) > examples:
            lines.append(f"  ... and {len(items) - examples} more (--json lists all)")
    lines.append("")
    for cam, c in report.cameras.items():
        lines.append(f"camera {cam}{'  (depth map)' if c.get('depth_map') else ''}")
        g = c["gop_length"]
        gop = f"min {g['min']} / median {g['median']:g} / max {g['max']}" if g["min"] is not None else "n/a"
        bpf = c.get("bytes_per_frame")
        lines.append(
            f"  {c['files']} file(s), {c['frames']} frames; codec {', '.join(c['codec']) or '?'}; "
            f"{', '.join(c['resolution']) or '?'}; pix_fmt {', '.join(c['pix_fmt']) or '?'}"
        )
        lines.append(
            f"  GOP length {gop}; B-frames in {c['b_frames']} file(s); edit lists in {c['edit_lists']}; "
            f"faststart {c['faststart']}/{c['files']}; {_human_bytes(bpf) if bpf else '?'} per frame"
        )
        err = c.get("max_timestamp_error_s")
        if err is not None:
            lines.append(
                f"  largest timestamp error {err:.3g} s (margin {c['tolerance_margin_s']:.3g} s under tolerance_s)"
            )
        nv = c.get("nvdec") or {}
        if nv:
            lines.append(
                "  decode: with device=cuda, by GPU family (NVDEC: on the GPU; CPU: that GPU's decoder lacks this "
                "codec or profile, frames decode on the CPU): "
                + "; ".join(f"{g_} {'NVDEC' if v == 'nvdec' else 'CPU'}" for g_, v in nv.items())
            )
    s = report.scan
    lines += [
        "",
        f"scanned {s.get('video_files')} MP4 and {s.get('data_files')} Parquet file(s): {s.get('requests')} "
        f"request(s), {_human_bytes(s.get('bytes_read') or 0)} read in {s.get('elapsed_s')} s"
        + (f", {s['decoded_frames']} frame(s) decoded" if s.get("decoded_frames") else ""),
        f"{len(report.errors)} error(s), {len(report.warnings)} warning(s)",
    ]
    return "\n".join(lines)
