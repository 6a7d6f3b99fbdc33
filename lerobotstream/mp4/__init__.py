"""MP4 (ISO/IEC 14496-12) sample tables, index, spans and mini-MP4 synthesis."""

from lerobotstream.mp4._table import SampleTable
from lerobotstream.mp4.parse import parse_mp4, parse_mp4_bytes

__all__ = ["SampleTable", "parse_mp4", "parse_mp4_bytes"]
from lerobotstream.mp4._index_file import Mp4Index  # noqa: E402  derived mmap index of the sidecar

# spans and mini-MP4 synthesis
from lerobotstream.mp4.spans import Span, episode_frame_range, plan_span  # noqa: E402
from lerobotstream.mp4.synth import synthesize, synthesize_header  # noqa: E402

__all__ += ["Span", "plan_span", "episode_frame_range", "synthesize", "synthesize_header"]

# the timestamp-tolerance rule (strictly under tolerance_s, LeRobot's), shared by decode, sidecar and validate
from lerobotstream.mp4._tolerance import frames_within_tolerance, within_tolerance  # noqa: E402

__all__ += ["frames_within_tolerance", "within_tolerance"]

# structural spot-check of fetched sample bytes (NAL length prefixes / AV1 OBUs)
from lerobotstream.mp4.framing import check_sample_framing, sample_framing  # noqa: E402

__all__ += ["check_sample_framing", "sample_framing"]

# the sidecar archive format (schema 5 NPZ members, derived-index helpers), shared with lerobotstream.sidecar
from lerobotstream.mp4._index_file import write_note  # noqa: E402
from lerobotstream.mp4._index_format import index_name, presentation_order_of, pts_seconds  # noqa: E402
from lerobotstream.mp4._npz_schema import (  # noqa: E402
    BYTES_KEYS,
    CANONICAL_FIELDS,
    ENTRY_KEYS,
    LAYOUT_KEYS,
    MANIFEST_MEMBER,
    MATRIX_KEYS,
    READABLE_SCHEMA_VERSIONS,
    SCALAR_KEYS,
    SIDECAR_SCHEMA_VERSION,
    SOURCES_MEMBER,
    SourceTable,
    block_member,
    column_member,
    iter_source_arrays,
    npz_generation,
    read_manifest,
    read_source_table,
)

__all__ += [
    "Mp4Index",
    "write_note",
    "index_name",
    "npz_generation",
    "presentation_order_of",
    "pts_seconds",
    "BYTES_KEYS",
    "CANONICAL_FIELDS",
    "ENTRY_KEYS",
    "LAYOUT_KEYS",
    "MANIFEST_MEMBER",
    "MATRIX_KEYS",
    "READABLE_SCHEMA_VERSIONS",
    "SCALAR_KEYS",
    "SIDECAR_SCHEMA_VERSION",
    "SOURCES_MEMBER",
    "SourceTable",
    "block_member",
    "column_member",
    "iter_source_arrays",
    "read_manifest",
    "read_source_table",
]
