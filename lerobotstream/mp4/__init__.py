"""MP4 (ISO/IEC 14496-12) sample tables, index, spans and mini-MP4 synthesis."""

from lerobotstream.mp4._table import SampleTable
from lerobotstream.mp4.parse import parse_mp4, parse_mp4_bytes

__all__ = ["SampleTable", "parse_mp4", "parse_mp4_bytes"]
