"""Findings and the report that holds them (the JSON layout is documented in docs/validate.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lerobotstream.errors import Problem, SourceReadError

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
    """``file_unreadable`` when ``e`` says the file is there but cannot be read (a refused
    permission, a symlink loop, a folder: ``SourceReadError``); the reader's own finding code when
    it refused the file by a rule (``data_rows``: a footer declaring more rows than its episodes);
    else ``code``."""
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
    return Finding(
        severity or default,
        code,
        None if episode_index is None else int(episode_index),
        camera,
        file,
        text,
        sorted(eps),
    )


def problem_findings(problems: Sequence[Problem]) -> list[Finding]:
    """Problems a training check returned (or ``DatasetMeta.load(problems=[])`` collected), as
    findings; a code the report does not know becomes ``metadata``."""
    return [
        finding(
            p.code if p.code in CODES else "metadata",
            p.message,
            episode_index=p.episode_index,
            camera=p.camera,
            file=p.path,
            episodes=list(p.episodes),
            severity=p.severity,
        )
        for p in problems
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
    """``files`` (MP4 and Parquet files read), ``requests``, ``bytes_read``, ``elapsed_s``, ``decoded_frames``."""
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
