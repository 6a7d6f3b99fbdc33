"""The sample table of one MP4 video track: per-sample arrays in decode order plus track scalars."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: ISO/IEC 14496-12 6.2.2 unity matrix (a, b, u, c, d, v, x, y, w; 16.16 except u, v, w in 2.30)
IDENTITY_MATRIX: tuple[int, ...] = (0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)


@dataclass(frozen=True, eq=False)
class SampleTable:
    """Sample table of the chosen video track of one MP4 (ISO/IEC 14496-12).

    All per-sample arrays have shape ``(num_samples,)`` and are in **decode order**.

    Attributes:
        offset: int64, file byte offset of each sample.
        size: int64, sample size in bytes.
        dts_ticks: int64, decode time (cumulative stts, starting at 0), media timescale.
        cts_ticks: int64, composition offset (ctts, signed; 0 without ctts), media timescale.
        pts_ticks: int64, ``dts + cts - media_time``, media timescale.
        is_sync: bool, sync sample (stss; every sample when stss is absent).
        pts_s: float64 seconds, ``pts_ticks / media_timescale + empty_edit_movie_ticks /
            movie_timescale`` computed exactly in integers and rounded once.
        presentation_order: int64 permutation; ``presentation_order[k]`` is the decode-order index
            of the k-th frame in presentation order (stable sort of ``pts_ticks``).
        media_timescale: mdhd ticks per second of the track (> 0).
        movie_timescale: mvhd ticks per second (> 0).
        media_time: start of the media edit in media ticks (0 without an edit list).
        empty_edit_movie_ticks: length of the leading empty edit(s) in movie ticks (0 if none).
        edit_duration_movie_ticks: segment_duration of the media edit in movie ticks (0 if none).
        codec: fourcc of the first sample entry, e.g. ``"av01"``, ``"avc1"``, ``"hev1"``.
        stsd: the whole stsd box payload (version/flags, entry_count, entries), verbatim.
        width, height: pixel size from the visual sample entry (tkhd size if not a visual entry).
        track_id: tkhd track_id of the chosen track.
        ctts_version: 0 or 1, or None without a ctts box.
        path: the MP4's path as given to the parser ("" if unknown).
        display_width, display_height: integer part of tkhd's 16.16 width/height.
        media_duration: mdhd duration in media ticks.
        has_edit: True when the track has a media edit (elst).
        video_track_ids: track_ids of every video track in the file, in moov order.
        moov_offset, moov_size: the moov box's file offset and total size in bytes.
        mdat_offset, mdat_size: first mdat box seen (header included; size clamped to the file),
            -1 when none was seen.
        faststart: True when moov comes before the first mdat.
        ftyp: the whole ftyp box (b"" if none).
        file_size: size of the MP4 in bytes.
        matrix: the chosen track's tkhd transformation matrix, 9 signed int32 as stored
            (a, b, u, c, d, v, x, y, w; 16.16 fixed point except u, v, w in 2.30).
        movie_matrix: the mvhd matrix as FFmpeg combines it with ``matrix`` (it multiplies the
            tkhd matrix by the movie matrix read so far): mvhd's matrix, or nine zeros when mvhd
            comes after the track's trak box. Decoders (FFmpeg, torchcodec) rotate/flip frames by
            the product; mini-MP4s write both verbatim so they decode to the same frame shape.
    """

    offset: np.ndarray
    size: np.ndarray
    dts_ticks: np.ndarray
    cts_ticks: np.ndarray
    pts_ticks: np.ndarray
    is_sync: np.ndarray
    pts_s: np.ndarray
    presentation_order: np.ndarray
    media_timescale: int
    movie_timescale: int
    media_time: int
    empty_edit_movie_ticks: int
    edit_duration_movie_ticks: int
    codec: str
    stsd: bytes
    width: int
    height: int
    track_id: int
    ctts_version: int | None
    path: str = ""
    display_width: int = 0
    display_height: int = 0
    media_duration: int = 0
    has_edit: bool = False
    video_track_ids: tuple[int, ...] = field(default_factory=tuple)
    moov_offset: int = -1
    moov_size: int = 0
    mdat_offset: int = -1
    mdat_size: int = 0
    faststart: bool = False
    ftyp: bytes = b""
    file_size: int = 0
    matrix: tuple[int, ...] = IDENTITY_MATRIX
    movie_matrix: tuple[int, ...] = IDENTITY_MATRIX

    @property
    def num_samples(self) -> int:
        """Number of samples (frames) of the track."""
        return int(self.offset.shape[0])

    def __repr__(self) -> str:
        return (
            f"SampleTable(path={self.path!r}, track_id={self.track_id}, codec={self.codec!r}, "
            f"{self.width}x{self.height}, num_samples={self.num_samples}, "
            f"media_timescale={self.media_timescale}, media_time={self.media_time}, "
            f"empty_edit_movie_ticks={self.empty_edit_movie_ticks})"
        )


def sample_durations(table: Any, start: int, stop: int) -> np.ndarray:
    """Per-sample ``stts`` deltas (media ticks, int64, shape ``(stop-start,)``) of samples [start, stop)
    of any sample-table view; the file's last sample takes ``media_duration - dts[-1]`` when
    positive, else the previous delta (or 1)."""
    start, stop = operator.index(start), operator.index(stop)
    n = len(table.dts_ticks)
    end = min(stop + 1, n)
    dts = np.asarray(table.dts_ticks[start:end], dtype=np.int64)
    out = np.empty(stop - start, dtype=np.int64)
    out[: len(dts) - 1] = np.diff(dts)
    if stop < n:  # the span ends before the file's last sample: delta to the next one
        return out
    last = 0
    media_duration = getattr(table, "media_duration", None)
    if media_duration is not None:
        last = int(media_duration) - int(table.dts_ticks[n - 1])
    if last <= 0:
        last = int(table.dts_ticks[n - 1]) - int(table.dts_ticks[n - 2]) if n >= 2 else 1
    out[-1] = max(last, 1)
    return out
