"""A dataset's reader in one process: the derived MP4 index, per (episode, camera) spans (where
each lies in its source MP4, and so the episode's exact synthesized size, planned when first asked
and kept: only the episodes reached, docs/scale.md), payload fetch + mini-MP4 synthesis, the open
decoders, counters.

A :class:`DatasetReader` is built from a :class:`ReaderConfig` in the process that iterates (after
a PID check) and never pickled, so workers never inherit decoders, descriptors or threads. The
episode jobs call it; it calls no one back.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from lerobotstream.dataset._assemble import episode_rows
from lerobotstream.errors import DecodeError, FrameTimestampError, LeRobotStreamError, SidecarValidationError
from lerobotstream.payload_cache import EpisodePayload
from lerobotstream.sidecar._identity import explain_payload_failure

log = logging.getLogger("lerobotstream.dataset")

__all__ = ["DatasetReader", "EpisodeSpans", "ReaderConfig"]

_SERIAL = itertools.count(1)


@dataclass(frozen=True)
class ReaderConfig:
    """What a :class:`DatasetReader` needs of its dataset (built by the dataset, picklable)."""

    meta: Any  # the dataset's :class:`~lerobotstream.meta.DatasetMeta` (its ``source`` reads Parquet)
    payload_source: Any  # the :class:`~lerobotstream.sources.ByteSource` of the MP4 payload
    sidecar_npz: str  # the validated MP4 sidecar
    cameras: Any  # the ``camera_keys`` plan (``dataset._dataset.CameraPlan``)
    windows: Any  # ``delta_timestamps`` windows (``dataset._assemble.DeltaWindows``)
    options: Any  # the dataset's resolved ``StreamOptions``, whole

    @property
    def video_keys(self) -> list[str]:
        return self.cameras.video_keys

    @property
    def image_keys(self) -> list[str]:
        return self.cameras.image_keys


class DatasetReader:
    """One dataset's reader in one process (index, spans, decoders, counters), :meth:`prepare` d per iterator."""

    def __init__(self, cfg: ReaderConfig) -> None:
        from lerobotstream.decode._cuda import FALLBACK_STATUS
        from lerobotstream.decode._open_decoders import OpenDecoderLRU
        from lerobotstream.mp4._index_file import Mp4Index
        from lerobotstream.parquet import EpisodeParquetReader

        self.pid = os.getpid()
        self.cfg = cfg
        self.source = cfg.payload_source
        t0 = time.perf_counter()
        self.index = Mp4Index.open(cfg.sidecar_npz, lock_timeout_s=cfg.options.sidecar_lock_timeout_s)
        self.index_open_s = time.perf_counter() - t0
        self.parquet = EpisodeParquetReader(cfg.meta.source, file_rows=getattr(cfg.meta, "data_file_rows", None))
        if cfg.cameras.skipped_columns:  # image features not selected: their bytes are never read
            names = self.parquet.metadata(cfg.meta.episodes[0].data_path).schema.to_arrow_schema().names
            self.parquet.columns = [c for c in names if c not in set(cfg.cameras.skipped_columns)]
        from lerobotstream.sidecar._verify import VerifiedTables

        self.tables = VerifiedTables(self.index, self.source)  # each MP4 checked against its moov before use
        self.spans = EpisodeSpans(self.tables, cfg.meta, cfg.video_keys, cfg.options.tolerance_s)
        self.decoders = OpenDecoderLRU(1)
        self.fallback = FALLBACK_STATUS
        self.lock = threading.Lock()
        self.counts: dict[str, float] = {
            **dict.fromkeys(("fetch_s", "synthesize_s", "open_s", "decode_s", "parquet_s", "transforms_s"), 0.0),
            **dict.fromkeys(("frames_decoded", "frames_returned", "frames_unique", "decode_calls"), 0),
            **dict.fromkeys(("bytes_needed", "episodes_fetched", "items"), 0),
        }
        #: epoch -> payload bytes by origin (:meth:`count_admission`, :meth:`fetch`), kept over iterators
        self.by_epoch: dict[int, dict[str, int]] = {}
        self.awaiting: dict[int, int] = {}  # episode admitted before its fetch ended -> that epoch
        self.counted: set[int] = set()  # episodes whose fetch ended before their next admission
        self.first_epoch = 0  # the iterator's first epoch
        #: where ``by_epoch`` rows are also summed (``_wiring.PayloadOrigin``; set by its ``Readers``)
        self.origin: Any = None
        self.admissions: dict[int, int] = {}  # episode -> admissions in this iterator
        #: the node's payload disk cache (``cache_dir``), None: off, or a local store (already on disk)
        self.disk = None
        if cfg.options.cache_dir is not None and self.source.local_path("") is None:
            from lerobotstream import constants
            from lerobotstream.disk_cache import DiskCache

            self.disk = DiskCache(cfg.options.cache_dir, int(cfg.options.cache_limit_gb * constants.GIB))
        self._identity: dict[str, str | None] = {}  # path -> what pins its bytes (disk cache keys)
        #: (episode, camera) -> the disk cache key its current payload was read from (absent: the store)
        self.disk_served: dict[tuple[int, str], bytes] = {}

    def prepare(self, *, video_decoder_cache_size: int, epoch: int = 0) -> None:
        """Start an iterator: the open-decoder cap (this worker's share of
        ``video_decoder_cache_size``, or its default) and the iterator's first epoch."""
        self.decoders.clear()
        self.decoders.capacity = max(1, int(video_decoder_cache_size))
        with self.lock:
            self.first_epoch = int(epoch)
            self.admissions, self.awaiting, self.counted = {}, {}, set()

    def release(self) -> None:
        """End an iterator: close decoders (counters are kept)."""
        self.decoders.clear()

    def add(self, **kw: float) -> None:
        with self.lock:
            for k, v in kw.items():
                self.counts[k] += v

    def episode_nbytes(self, ep: int) -> int:
        """This dataset's size provider (``planner._sizes.SizeProvider``): episode ``ep``'s exact
        synthesized bytes, all cameras (:meth:`EpisodeSpans.episode_nbytes`, its errors)."""
        return self.spans.episode_nbytes(ep)

    def fetch(self, ep: int) -> EpisodePayload:
        """Parquet rows + every camera's mini-MP4 of one episode (runs on a cache fetch thread)."""
        info = self.cfg.meta.episode(ep)
        t0 = time.perf_counter()
        tables = self.parquet.read(info.data_path, {ep: info.length})
        rows = episode_rows(
            tables[ep],
            ep,
            info.dataset_from_index,
            image_keys=self.cfg.image_keys,
            path=info.data_path,
            features=self.cfg.meta.features,
            n_tasks=len(self.cfg.meta.tasks),
        )
        self.add(parquet_s=time.perf_counter() - t0)
        payloads, fetched = {}, {}
        origin = {"store_bytes": 0, "disk_cache_bytes": 0}
        for cam in self.cfg.video_keys:
            # verified against the MP4's moov here once the process served an item, else before decoding
            s = self._planned(ep, cam, self.spans.fetch_span)
            try:
                payloads[cam] = self._fetch_camera(ep, cam, s, origin)
            except LeRobotStreamError:
                v = self._planned(ep, cam, self.spans.verified_span)  # an unverified span may lie outside the file
                if v[0] is s[0]:
                    raise
                s, payloads[cam] = v, self._fetch_camera(ep, cam, v, origin)
            fetched[cam] = s
        self.add(episodes_fetched=1)
        with self.lock:  # the epoch of the admission this payload serves (made already, or next)
            epoch = self.awaiting.pop(ep, None)
            if epoch is None:
                epoch = self.first_epoch + self.admissions.get(ep, 0)
                self.counted.add(ep)
        self._count(epoch, **origin)
        return EpisodePayload(payloads, extra=(rows, next(_SERIAL), fetched))

    def _raise_explained(self, err: LeRobotStreamError, ep: int, cam: str, path: str) -> NoReturn:
        """Raise ``err`` of a fetch or verification of ``(ep, cam)`` from ``path`` naming episode,
        camera and file, told as a file changed during the run when it did (``explain_payload_failure``)."""
        if f"episode {ep}" in err.message:
            raise err
        exc = explain_payload_failure(err, self.source, self.index, path, self.cfg.sidecar_npz)
        msg = exc.message if exc.message.startswith(f"{path}:") else f"{path}: {exc.message}"
        fields = {**exc.fields, "episode_index": ep, "camera": cam, "path": path}
        raise type(exc)(f"episode {ep}, camera {cam!r}, file {msg}", **fields) from err

    def _planned(self, ep: int, cam: str, plan: Callable[[int, str], Any]) -> Any:
        """``plan(ep, cam)`` (an :class:`EpisodeSpans` method), its errors :meth:`_raise_explained`."""
        try:
            return plan(ep, cam)
        except LeRobotStreamError as err:
            self._raise_explained(err, ep, cam, self.spans.span(ep, cam)[2])

    def _fetch_camera(self, ep: int, cam: str, s: tuple, origin: dict[str, int] | None) -> bytes:
        """The mini-MP4 of one (episode, camera) from its span ``s`` (:meth:`EpisodeSpans.span`);
        the bytes read are added to ``origin`` (``store_bytes`` or ``disk_cache_bytes``) unless None."""
        from lerobotstream.mp4.framing import check_sample_framing
        from lerobotstream.mp4.synth import synthesize

        span, table, path, _ = s
        try:
            t1 = time.perf_counter()
            data, key, from_disk = self._read(path, span.byte_start, span.byte_stop - span.byte_start)
            t2 = time.perf_counter()
            try:
                check_sample_framing(table, span, data, path=path)  # wrong sidecar offsets/sizes: fail before decoding
                mini = synthesize(table, span, data)
            except LeRobotStreamError as err:
                if not from_disk:
                    raise
                # bytes from cache_dir the table refuses: the entry is dropped, the store read once
                log.warning("%s (bytes from the disk cache cache_dir=%s): fetching them again", err, self.disk.root)
                self.disk.drop(key)
                data, from_disk = self.source.read(path, span.byte_start, span.byte_stop - span.byte_start), False
                check_sample_framing(table, span, data, path=path)
                mini = synthesize(table, span, data)
            self.add(fetch_s=t2 - t1, synthesize_s=time.perf_counter() - t2, bytes_needed=len(data))
            if origin is not None:
                origin["disk_cache_bytes" if from_disk else "store_bytes"] += len(data)
            if from_disk:
                self.disk_served[(ep, cam)] = key
            else:
                self.disk_served.pop((ep, cam), None)
                if key is not None:  # checked bytes only
                    self.disk.put(key, data)
            return mini
        except LeRobotStreamError as err:
            self._raise_explained(err, ep, cam, path)
        except Exception as exc:
            raise DecodeError(
                f"episode {ep}, camera {cam!r}, file {path}: fetching/synthesizing the mini-MP4 failed: {exc!r}",
                episode_index=ep,
                camera=cam,
                path=path,
            ) from exc

    def refetch_from_store(self, ep: int, err: DecodeError, payload: EpisodePayload) -> bool:
        """A decode of episode ``ep`` failed with ``err``: when a camera's bytes came from the disk
        cache, its entry is deleted, its mini-MP4 fetched again from the store into ``payload`` (a
        new serial: no decoder or decoded GOP of the refused bytes is reused) and True returned, for
        the caller to decode once more; else False (the failure is the store's bytes'). Call it with
        the episode's decode lock held.

        Raises:
            LeRobotStreamError: the fetch from the store failed (as :meth:`fetch`).
        """
        cam = err.fields.get("camera")
        served = [(c, k) for (e, c), k in list(self.disk_served.items()) if e == ep and cam in (None, c)]
        if not served:
            return False
        rows, serial, fetched = payload.extra
        for c, k in served:
            log.warning(
                "%s (bytes from the disk cache cache_dir=%s, which anyone who can write it can change): "
                "the entry is deleted and the bytes fetched again from the store",
                err,
                self.cfg.options.cache_dir,
            )
            self.disk.drop(k)
            payload.payloads[c] = self._fetch_camera(ep, c, fetched[c], None)
            self.decoders.pop((ep, c, serial))
        payload.extra = (rows, next(_SERIAL), fetched)
        return True

    def checked_payload(self, ep: int, cam: str, payload: EpisodePayload) -> bytes:
        """The mini-MP4 of ``(ep, cam)`` to decode, its source verified against the MP4's moov first;
        fetched again (in place, not counted in ``bytes_by_epoch``) when that replaced its table."""
        fetched = payload.extra[2][cam]
        s = self._planned(ep, cam, lambda e, c: self.spans.checked_span(e, c, fetched))
        if s is None:
            return payload.payloads[cam]
        # (the episode job holds its lock: no other decode of the episode runs meanwhile)
        payload.payloads[cam] = self._fetch_camera(ep, cam, s, None)
        payload.extra[2][cam] = s
        return payload.payloads[cam]

    def _read(self, path: str, offset: int, length: int) -> tuple[bytes, bytes | None, bool]:
        """``(bytes, key, from_disk)``: the range from the disk cache or the store, with its disk cache
        key (None: no disk cache, or a file without a stable identity)."""
        if self.disk is None:
            return self.source.read(path, offset, length), None, False
        from lerobotstream.disk_cache import source_identity

        if path not in self._identity:
            self._identity[path] = source_identity(self.source, path)
        ident = self._identity[path]
        if ident is None:
            return self.source.read(path, offset, length), None, False
        key = self.disk.key(ident, path, offset, length)
        data = self.disk.get(key, length)
        if data is not None:
            return data, key, True
        return self.source.read(path, offset, length), key, False

    def video(self, ep: int, cam: str, mini: bytes, serial: int):
        from lerobotstream.decode._decoder import EpisodeVideo

        span, table, path, from_ts = self.spans.span(ep, cam)
        o = self.cfg.options
        return EpisodeVideo(
            table,
            span,
            mini,
            episode_index=ep,
            camera=cam,
            path=path,
            from_timestamp=from_ts,
            fps=self.cfg.meta.fps,
            tolerance_s=o.tolerance_s,
            device=o.device,
            num_threads=o.ffmpeg_threads,
            cache=self.decoders,
            cache_key=(ep, cam, serial),
            depth=cam in self.cfg.cameras.dequantizers,
        )

    def _count(self, epoch: int, **kw: int) -> None:
        with self.lock:
            row = self.by_epoch.setdefault(
                epoch, {"store_bytes": 0, "disk_cache_bytes": 0, "reused_bytes": 0, "needed_bytes": 0}
            )
            for k, v in kw.items():
                row[k] += v
        if self.origin is not None:
            self.origin.add(**kw)

    def count_finished(self, ep: int) -> None:
        """The iterator resumed its first epoch after the episode's last frame: its next admission
        belongs to the next epoch."""
        with self.lock:
            self.admissions[ep] = 1

    def count_admission(self, ep: int, reused: bool) -> None:
        """The episode was admitted (payload ``reused``, or fetched): count its MP4 bytes for its epoch
        (its n-th admission in an iterator is the n-th epoch); a fetch counts in the epoch of the
        admission it serves (one made before the fetch ended, else the next)."""
        nbytes = 0
        for cam in self.cfg.video_keys:
            span = self.spans.span(ep, cam)[0]
            nbytes += int(span.byte_stop - span.byte_start)
        with self.lock:
            epoch = self.first_epoch + self.admissions.get(ep, 0)
            self.admissions[ep] = self.admissions.get(ep, 0) + 1
            if not reused and ep not in self.counted:
                self.awaiting[ep] = epoch  # its fetch is still running: it counts here
            self.counted.discard(ep)
        self._count(epoch, needed_bytes=nbytes, reused_bytes=nbytes if reused else 0)


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
