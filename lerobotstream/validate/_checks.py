"""Every check training makes on a dataset, and the validator's check that matches it.

Training refuses a dataset at construction (metadata, sidecar build) or mid-epoch (Parquet rows,
fetched samples, decoded frames). Each raise site of a data error in those modules is listed
here with the finding code(s) the validator reports for the same defect, and when it does so:

- ``same``: the validator calls the very function training calls (``DatasetMeta.load``,
  ``parse_mp4``, ``validate_source``, the Parquet footer read) and turns its problems into findings;
- ``headers``: every run, from headers (Parquet footers, MP4 ``moov``), ``--headers-only`` too;
- ``rows``: the default run, from the per-row columns (not with ``--headers-only``);
- ``decode_sample``: with ``--decode-sample N``, on the sampled frames (the training path itself);
  a ``headers`` check that names the same defect earlier is listed first when there is one.

``tests/validate/test_training_checks.py`` reads the raise sites of the library and fails when one
is not listed here (or an entry names a site that no longer raises), so a new training check
needs its validator counterpart. Sites that are not about the dataset's content (an option, the
sidecar cache, a missing package, an internal invariant) are in :data:`NOT_DATASET_CHECKS`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TrainingCheck", "TRAINING_CHECKS", "NOT_DATASET_CHECKS"]


@dataclass(frozen=True)
class TrainingCheck:
    """One check training makes and how the validator reports the same defect."""

    where: str
    """``module:function`` of the raise site(s), module relative to ``lerobotstream/``; ``*``: every
    function of the module."""
    what: str
    """The defect, in words."""
    codes: tuple[str, ...]
    """Finding codes the validator reports it under (keys of ``CODES``)."""
    mode: str
    """``same``, ``headers``, ``rows`` or ``decode_sample`` (see the module doc)."""


_WINDOWS = (
    "fps_mismatch",
    "no_frames",
    "bad_length",
    "window_outside_file",
    "window_off_frame",
    "video_short",
    "timestamp_drift",
    "window_frames",
    "episode_overlap",
    "window_shift",
)
_METADATA = (
    "metadata",
    "duplicate_episode",
    "missing_episodes",
    "episode_row_null",
    "index_range",
    "index_overlap",
    "video_location",
    "file_missing",
    "file_unreadable",
)
_MP4 = ("video_truncated", "video_tables", "video_unsupported", "video_unreadable")

TRAINING_CHECKS: tuple[TrainingCheck, ...] = (
    # construction: metadata
    TrainingCheck(
        "meta.py:*", "meta/ files: info.json, episode shards, tasks, stats, the files they name", _METADATA, "same"
    ),
    TrainingCheck("_meta_files.py:*", "a meta/ file missing, unreadable, not JSON or not Parquet", _METADATA, "same"),
    TrainingCheck(
        "_meta_episodes.py:*",
        "the episode shards: none, unreadable, lacking columns, holding no episode",
        _METADATA,
        "same",
    ),
    TrainingCheck(
        "features.py:depth_quantizer_of",
        "a depth camera's encoding is not LeRobot 0.6's",
        ("depth_unsupported",),
        "same",
    ),
    # construction: the sidecar build (parser, then the windows against the metadata)
    TrainingCheck(
        "mp4/parse.pyx:*", "MP4 boxes and sample tables (truncated, inconsistent, unsupported)", _MP4, "same"
    ),
    TrainingCheck(
        "sidecar/_validate.py:raise_problems",
        "a video's frame size against its declared shape, episode windows, fps, overlapping windows",
        ("shape_mismatch", *_WINDOWS),
        "same",
    ),
    TrainingCheck(
        "mp4/spans.pyx:plan_span",
        "an episode's frames have no samples, or two share a presentation time",
        ("no_frames", "timestamp_drift", "window_frames"),
        "headers",
    ),
    TrainingCheck(
        "dataset/_spans.py:EpisodeSpans.span", "an episode's frames cannot be located in its file", _WINDOWS, "same"
    ),
    # iteration: the episode's Parquet rows
    TrainingCheck(
        "parquet.py:EpisodeParquetReader._read_footer",
        "a data file's footer cannot be read, or declares more rows than its episodes hold",
        ("data_unreadable", "data_rows"),
        "same",
    ),
    TrainingCheck(
        "parquet.py:EpisodeParquetReader.candidate_row_groups",
        "a data file has no episode_index column",
        ("data_columns",),
        "headers",
    ),
    TrainingCheck(
        "parquet.py:EpisodeParquetReader.read", "a data file lacks a column it must have", ("data_columns",), "headers"
    ),
    TrainingCheck(
        "parquet.py:EpisodeParquetReader._read_groups",
        "the pages of a data file cannot be decoded (the per-row columns' pages; a page checksum), or "
        "declare more bytes than one read may decode",
        ("data_unreadable", "data_rows"),
        "rows",
    ),
    TrainingCheck(
        "parquet.py:_validate",
        "an episode's row count, rows of another episode, frame_index not 0..length-1",
        ("data_rows", "data_episode_absent", "data_frame_index"),
        "rows",
    ),
    TrainingCheck(
        "dataset/_assemble.py:episode_rows",
        "a declared column is missing, or a row's shape differs (every row, or one)",
        ("data_columns", "data_shape"),
        "headers",
    ),
    TrainingCheck(
        "dataset/_assemble.py:_check_index",
        "a row's index is not dataset_from_index + frame_index (parquet.index_problem)",
        ("data_index_range",),
        "rows",
    ),
    TrainingCheck(
        "dataset/_images.py:image_bytes", "an image column is not a {bytes, path} struct", ("data_image",), "headers"
    ),
    TrainingCheck(
        "dataset/_images.py:decode_image",
        "an image cell holds no bytes, bytes Pillow cannot decode, or an image of another shape",
        ("data_image",),
        "decode_sample",
    ),
    # iteration: fetched samples, the mini-MP4, decoded frames
    TrainingCheck(
        "mp4/framing.pyx:check_sample_framing",
        "fetched samples do not carry their codec's framing exactly (wrong stco/stsz, a damaged payload)",
        ("video_tables", "decode_failed"),
        "decode_sample",
    ),
    TrainingCheck(
        "mp4/synth.pyx:*",
        "the mini-MP4 cannot be written from the fetched samples",
        ("video_tables", "decode_failed"),
        "decode_sample",
    ),
    TrainingCheck(
        "dataset/_reader.py:DatasetReader._fetch_camera",
        "fetching or synthesizing the mini-MP4 failed",
        ("decode_failed",),
        "decode_sample",
    ),
    TrainingCheck(
        "decode/_decoder.py:EpisodeDecoder.__init__",
        "the decoder cannot open the mini-MP4",
        ("decode_failed",),
        "decode_sample",
    ),
    TrainingCheck(
        "decode/_decoder.py:EpisodeDecoder.decode",
        "a frame does not decode, or not at its PTS",
        ("decode_failed",),
        "decode_sample",
    ),
    TrainingCheck(
        "decode/_decoder.py:EpisodeDecoder._pyav_decode",
        "the PyAV fallback cannot decode a frame",
        ("decode_failed",),
        "decode_sample",
    ),
    TrainingCheck(
        "decode/_decoder.py:EpisodeVideo.local_indices",
        "from_timestamp + timestamp of a row has no frame within tolerance_s",
        ("data_timestamps", "timestamp_shift"),
        "rows",
    ),
    TrainingCheck(
        "decode/_depth.py:checked_request",
        "a depth frame request outside the episode's frames",
        ("decode_failed",),
        "decode_sample",
    ),
    TrainingCheck(
        "decode/_depth.py:DepthDecoder.__init__",
        "a depth video PyAV cannot open as gray12le",
        ("depth_unsupported", "decode_failed"),
        "decode_sample",
    ),
    TrainingCheck(
        "decode/_depth.py:DepthDecoder._codes",
        "a depth frame is not 12-bit gray",
        ("depth_unsupported", "decode_failed"),
        "decode_sample",
    ),
    TrainingCheck(
        "decode/_depth.py:DepthDecoder.decode",
        "a depth frame does not decode, or not at its PTS",
        ("decode_failed",),
        "decode_sample",
    ),
)

#: raise sites of data-error classes that are not about a dataset's content, and why
NOT_DATASET_CHECKS: dict[str, str] = {
    "dataset/_cameras.py:plan_cameras": "camera_keys names something that is not a camera (an option)",
    "dataset/_decodejob.py:EpisodeJob.decode": "internal invariant: the rows fetched for another episode",
    "dataset/_images.py:_pil": "Pillow is not installed (the environment)",
    "decode/_depth.py:_require_av": "PyAV is not installed (the environment)",
    "features.py:aggregate_stats": "a mixture's datasets disagree on a statistic's shape (the mixture, not one dataset)",
    "sidecar/__init__.py:check_sources": "a cached sidecar no longer describes the sources (the cache; rebuilt)",
    "sidecar/_validate.py:validate_index": "a cached sidecar no longer describes the sources (the cache; rebuilt)",
    "sidecar/_validate.py:validate_sidecar_file": "a sidecar an MP4's own moov contradicted (the sidecar; rebuilt)",
    "dataset/_spans.py:EpisodeSpans.verified_span": "a sidecar an MP4's own moov contradicted (the sidecar; rebuilt)",
    "dataset/_spans.py:EpisodeSpans.checked_span": "a sidecar an MP4's own moov contradicted (the sidecar; rebuilt)",
}
