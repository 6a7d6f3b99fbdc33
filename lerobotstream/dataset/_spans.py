"""Per process: where each (episode, camera) of a dataset lies in its source MP4, and the episode's
exact synthesized size, planned when first asked and kept (only the episodes reached: docs/scale.md).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from lerobotstream.errors import FrameTimestampError, LeRobotStreamError, SidecarValidationError

__all__ = ["EpisodeSpans"]


class EpisodeSpans:
    """The spans of one dataset's episodes in this process (planned on first use, thread-safe).

    Args:
        index: ``table_for_path(path)``, a source MP4's sample table (``sidecar.VerifiedTables`` or
            an ``mp4.Mp4Index``).
        meta: ``meta.fps`` and ``meta.episode(ep)`` (``length``, ``videos[camera]``), as ``DatasetMeta``.
        video_keys: the cameras decoded; tolerance_s: timestamp tolerance, seconds.
    """

    def __init__(self, index: Any, meta: Any, video_keys: list[str], tolerance_s: float) -> None:
        self.index, self.meta = index, meta
        self.video_keys = list(video_keys)
        self.tolerance_s = float(tolerance_s)
        self.planned_s = 0.0
        self._spans: dict[tuple[int, str], tuple[Any, Any, str, float]] = {}
        self._lock = threading.Lock()
        #: until the first item is served (:meth:`serving`) fetches do not verify; :meth:`checked_span` does
        self.deferring = getattr(index, "verify", None) is not None
        self._pending: set[str] = set()  # sources fetched unverified, verified by later fetches

    def span(self, ep: int, cam: str) -> tuple[Any, Any, str, float]:
        """``(span, table, path, from_timestamp)`` of episode ``ep``'s camera ``cam``.

        Raises:
            FrameTimestampError (or the span planner's typed error): the episode's window does not
            resolve in its file (names the episode, camera and file).
        """
        from lerobotstream.mp4.spans import episode_frame_range, plan_span

        key = (ep, cam)
        s = self._spans.get(key)
        if s is not None:
            return s
        t0 = time.perf_counter()
        info = self.meta.episode(ep)
        v = info.videos[cam]

        def plan(table: Any) -> Any:
            a, b = episode_frame_range(table, v.from_timestamp, info.length, self.meta.fps, self.tolerance_s)
            return plan_span(table, a, b, path=v.path)

        try:
            table = self.index.table_for_path(v.path)
            try:
                span = plan(table)
            except (LeRobotStreamError, ValueError):
                # if verifying the source (as the fetch would) replaces the table, plan on the MP4's own
                verify = getattr(self.index, "verify", None)
                if verify is None:
                    raise
                verify(v.path)
                if self.index.table_for_path(v.path) is table:
                    raise
                table = self.index.table_for_path(v.path)
                span = plan(table)
        except LeRobotStreamError as exc:
            raise type(exc)(
                f"episode {ep}, camera {cam!r}, file {v.path}: {exc.message}", episode_index=ep, camera=cam, path=v.path
            ) from exc
        except ValueError as exc:
            raise FrameTimestampError(
                f"episode {ep}, camera {cam!r}, file {v.path}: {exc}", episode_index=ep, camera=cam, path=v.path
            ) from exc
        s = (span, table, v.path, float(v.from_timestamp))
        with self._lock:
            s = self._spans.setdefault(key, s)
            self.planned_s += time.perf_counter() - t0
        return s

    def verified_span(self, ep: int, cam: str) -> tuple[Any, Any, str, float]:
        """:meth:`span`, its source first verified against the MP4's own ``moov`` (once per source);
        planned again when the verification replaced its table.

        Raises:
            the errors of :meth:`span`; Mp4Error / SourceError: the MP4's header cannot be read
            (named by file); SidecarValidationError: see :func:`_no_larger`.
        """
        s = self.span(ep, cam)
        verify = getattr(self.index, "verify", None)
        if verify is None:
            return s
        verify(s[2])  # its errors name the file; the fetch adds the episode and camera, and tells a changed file
        current = self.index.table_for_path(s[2])
        if s[1] is current:
            return s
        with self._lock:
            if self._spans.get((ep, cam)) is s:
                del self._spans[(ep, cam)]  # the others of the file are planned again at their own fetch
        return _no_larger(ep, cam, s, self.span(ep, cam))

    def fetch_span(self, ep: int, cam: str) -> tuple[Any, Any, str, float]:
        """The span a fetch of ``(ep, cam)`` reads: before the first item is served, :meth:`span`
        unverified (:meth:`checked_span` verifies it); after, :meth:`verified_span`, once the
        sources fetched unverified are verified. Raises :meth:`verified_span`'s errors."""
        if self.deferring:
            s = self.span(ep, cam)
            with self._lock:
                self._pending.add(s[2])
            return s
        while self._pending:
            with self._lock:
                path = self._pending.pop() if self._pending else None
            if path is not None:
                try:
                    self.index.verify(path)
                except LeRobotStreamError:
                    pass  # raised, naming its episode, by checked_span when that source is decoded
        return self.verified_span(ep, cam)

    def checked_span(
        self, ep: int, cam: str, fetched: tuple[Any, Any, str, float]
    ) -> tuple[Any, Any, str, float] | None:
        """Before a fetched payload of ``(ep, cam)`` is decoded: its source verified; None when it was
        fetched from the current span, else the span to fetch again (:meth:`verified_span`'s errors)."""
        s = self.verified_span(ep, cam)
        return None if s[0] is fetched[0] else _no_larger(ep, cam, fetched, s)

    def serving(self) -> None:
        """The process served its first item: from now on fetches verify (:meth:`fetch_span`)."""
        self.deferring = False

    def episode_nbytes(self, ep: int) -> int:
        """Exact synthesized bytes of episode ``ep``: its cameras' mini-MP4s together."""
        return int(sum(self.span(int(ep), cam)[0].synth_nbytes for cam in self.video_keys))

    def __len__(self) -> int:
        """(episode, camera) spans planned so far."""
        return len(self._spans)


def _no_larger(ep: int, cam: str, old: tuple, new: tuple) -> tuple:
    """``new``, the span planned again after the verification replaced ``old``'s table.

    Raises:
        SidecarValidationError: ``new`` needs more bytes than ``old``, which the episode was sized
            (and its bytes reserved) from.
    """
    if new[0].synth_nbytes > old[0].synth_nbytes:
        raise SidecarValidationError(
            f"episode {ep}, camera {cam!r}, file {new[2]}: the MP4 sidecar disagreed with this file's own moov "
            f"(logged) and the episode was sized from it ({old[0].synth_nbytes} bytes, {new[0].synth_nbytes} "
            "needed); start again: the sidecar is rebuilt locally at the next start",
            episode_index=ep,
            camera=cam,
            path=new[2],
        )
    return new
