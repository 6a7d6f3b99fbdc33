"""Synthetic sample tables, metadata and sources for the sidecar / index tests (no media needed)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from lerobotstream.mp4._index_format import presentation_order_of, pts_seconds
from lerobotstream.mp4._table import SampleTable


def synth_table(
    n: int,
    *,
    fps: int = 30,
    timescale: int = 15360,
    bframes: bool = False,
    gop: int = 5,
    media_time: int = 0,
    empty_edit: int = 0,
    movie_timescale: int = 1000,
    base_offset: int = 48,
    sizes: np.ndarray | None = None,
    path: str = "",
) -> SampleTable:
    """A plausible video track of ``n`` frames at ``fps`` (constant duration). With ``bframes``
    the decode order is I P B P B ... (composition offsets 2*dur / 0 pattern) and media_time =
    one frame duration, like ffmpeg's H.264 output."""
    dur = timescale // fps
    dts = np.arange(n, dtype=np.int64) * dur
    if bframes:
        # I(pts 0) P(pts 2) B(pts 1) P(pts 4) B(pts 3) ... (in frame durations, after the edit)
        cts = np.array([dur] + [2 * dur if i % 2 == 1 else 0 for i in range(1, n)], dtype=np.int64)
        if n % 2 == 0 and n > 1:
            cts[-1] = dur  # a trailing P with no B after it
        media_time = dur if media_time == 0 else media_time
    else:
        cts = np.zeros(n, dtype=np.int64)
    if sizes is None:
        sizes = (np.arange(n, dtype=np.int64) * 37) % 500 + 100
    offset = base_offset + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    pts = dts + cts - media_time
    is_sync = (np.arange(n) % gop) == 0
    return SampleTable(
        offset=offset,
        size=np.asarray(sizes, dtype=np.int64),
        dts_ticks=dts,
        cts_ticks=cts,
        pts_ticks=pts,
        is_sync=is_sync,
        pts_s=pts_seconds(pts, timescale, movie_timescale, empty_edit),
        presentation_order=presentation_order_of(pts),
        media_timescale=timescale,
        movie_timescale=movie_timescale,
        media_time=media_time,
        empty_edit_movie_ticks=empty_edit,
        edit_duration_movie_ticks=0,
        codec="avc1",
        stsd=b"\x00\x00\x00\x00\x00\x00\x00\x01stsd-entry",
        width=64,
        height=48,
        track_id=1,
        ctts_version=0 if bframes else None,
        path=path,
        ftyp=b"ftypisom",
        file_size=int(offset[-1] + sizes[-1]) if n else 0,
    )


def fake_meta(
    episodes: list[tuple[int, int, dict[str, tuple[str, float]]]], *, fps: int = 30, total_episodes: int | None = None
) -> SimpleNamespace:
    """DatasetMeta look-alike: ``episodes`` = [(episode_index, length, {camera: (path, from_ts)})]."""
    eps = [
        SimpleNamespace(
            episode_index=e, length=n, videos={c: SimpleNamespace(path=p, from_timestamp=t) for c, (p, t) in v.items()}
        )
        for e, n, v in episodes
    ]
    paths = sorted({v.path for ep in eps for v in ep.videos.values()})
    cams = sorted({c for ep in eps for c in ep.videos})
    return SimpleNamespace(
        fps=fps, episodes=eps, total_episodes=total_episodes or len(eps), video_keys=cams, video_paths=lambda: paths
    )


class FakeSource:
    """ByteSource look-alike over in-memory sample tables (``parse`` returns the table)."""

    root_display = "memory://fake"

    def __init__(self, tables: dict[str, SampleTable]) -> None:
        self.tables = tables

    def size(self, path: str) -> int:
        return int(self.tables[path].file_size)

    def fingerprint(self, path: str) -> str:
        return f"fake:{path}:{self.size(path)}"

    def read(self, path: str, offset: int, n: int) -> bytes:
        return b"\0" * n


def fake_parse(source: FakeSource, fail_on: str | None = None, exc: type[BaseException] = RuntimeError):
    def parse(read, size, *, path=""):
        if path == fail_on:
            raise exc(f"simulated failure while parsing {path}")
        return source.tables[path]

    return parse
