"""Per-process state of one dataset of a stream: the derived MP4 index, per (episode, camera)
spans, payload fetch + mini-MP4 synthesis, decoders, counters.

A :class:`Worker` is built from a :class:`WorkerConfig` (what the dataset decided at
construction: metadata, sources, sidecar, cameras, windows, decode settings) in the process that
iterates (after a PID check, by the stream core), so DataLoader workers never inherit decoders,
descriptors, maps or threads from the training process, under ``fork``, ``spawn`` or
``forkserver`` alike; it is never pickled.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from lerobotstream import _heap
from lerobotstream.dataset._assemble import assemble_item, episode_rows
from lerobotstream.dataset._decodejob import ChunkDecoder, Decoded
from lerobotstream.dataset._pipeline import StageTimes
from lerobotstream.dataset._spans import EpisodeSpans
from lerobotstream.errors import DecodeError, LeRobotStreamError
from lerobotstream.payload_cache import EpisodeByteCache, EpisodePayload
from lerobotstream.sidecar import explain_payload_failure

__all__ = ["Worker", "WorkerConfig"]

_SERIAL = itertools.count(1)


@dataclass(frozen=True)
class WorkerConfig:
    """What a :class:`Worker` needs of its dataset (built by the dataset, picklable).

    Fields:
        meta: the dataset's :class:`~lerobotstream.meta.DatasetMeta` (its ``source`` reads Parquet).
        payload_source: the :class:`~lerobotstream.sources.ByteSource` of the MP4 payload.
        sidecar_npz (str): the validated MP4 sidecar.
        cameras: the ``camera_keys`` plan (``dataset._cameras.CameraPlan``).
        windows: ``delta_timestamps`` windows (``dataset._windows.DeltaWindows``).
        options: the dataset's resolved ``StreamOptions``, whole; the worker reads
            ``sidecar_lock_timeout_s``, ``tolerance_s``, ``device``, ``ffmpeg_threads``,
            ``return_uint8`` and ``image_transforms`` from it.
    """

    meta: Any
    payload_source: Any
    sidecar_npz: str
    cameras: Any
    windows: Any
    options: Any

    @property
    def video_keys(self) -> list[str]:
        return self.cameras.video_keys

    @property
    def image_keys(self) -> list[str]:
        return self.cameras.image_keys


class Worker:
    """Per-process state of one dataset (index, spans, decoders, counters): never crosses a fork.

    Per iterator the stream core binds it (:meth:`bind`) to the worker's shared byte cache (this
    dataset's episode ``e`` is ``offset + e`` there), decoded-GOP cache and decoder capacity.
    """

    def __init__(self, cfg: WorkerConfig) -> None:
        from lerobotstream.decode import FALLBACK_STATUS, OpenDecoderLRU
        from lerobotstream.mp4 import Mp4Index
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
        from lerobotstream.sidecar import VerifiedTables

        self.tables = VerifiedTables(self.index, self.source)  # each MP4 checked against its moov before use
        self.spans = EpisodeSpans(
            self.tables, cfg.meta, cfg.video_keys, cfg.options.tolerance_s, on_planned=lambda dt: self.add(spans_s=dt)
        )
        self.decoders = OpenDecoderLRU(1)
        self.fallback = FALLBACK_STATUS
        self.lock = threading.Lock()
        self.times = StageTimes()
        self.c: dict[str, float] = dict(
            fetch_s=0.0,
            synthesize_s=0.0,
            open_s=0.0,
            decode_s=0.0,
            parquet_s=0.0,
            transforms_s=0.0,
            spans_s=0.0,
            frames_decoded=0,
            frames_returned=0,
            frames_unique=0,
            decode_calls=0,
            bytes_needed=0,
            episodes_fetched=0,
            items=0,
        )
        #: epoch -> payload bytes by origin (:meth:`on_admit`, :meth:`fetch`), kept over iterators
        self.by_epoch: dict[int, dict[str, int]] = {}
        self.awaiting: dict[int, int] = {}  # episode admitted before its fetch ended -> that epoch
        self.counted: set[int] = set()  # episodes whose fetch ended before their next admission
        self.first_epoch = 0  # the iterator's first epoch
        self.admissions: dict[int, int] = {}  # episode -> admissions in this iterator
        self.cache: _CacheView | None = None
        self.disk = _disk_cache(cfg.options, self.source)
        self._identity: dict[str, str | None] = {}  # path -> what pins its bytes (disk cache keys)
        self.serial: dict[int, int] = {}  # episode -> serial of its resident payload (decoder keys)
        self.jobs = ChunkDecoder(self)
        #: image transforms run on the assembly threads (DataLoader workers) or when items are yielded
        self.transforms_in_threads = True

    def bind(
        self,
        cache: EpisodeByteCache,
        offset: int,
        gops: Any,
        namespace: tuple,
        *,
        video_decoder_cache_size: int,
        gop_capacity_bytes: int,
        transforms_in_threads: bool,
        epoch: int = 0,
    ) -> None:
        """Start an iterator: the worker's byte cache (episode ``e`` at ``offset + e``), the shared
        decoded-GOP cache (this dataset's keys under ``namespace``), the open-decoder cap (this
        worker's share of ``video_decoder_cache_size``, or its default)."""
        self.decoders.clear()
        self.decoders.capacity = max(1, int(video_decoder_cache_size))
        self.jobs.gops, self.jobs.namespace = gops, namespace
        self.reset_gops(gop_capacity_bytes)
        self.cache = _CacheView(cache, offset)
        self.transforms_in_threads = transforms_in_threads
        with self.lock:
            self.first_epoch = int(epoch)
            self.admissions, self.awaiting, self.counted = {}, {}, set()

    def release(self) -> None:
        """End an iterator: close decoders, forget decoded GOPs (counters are kept)."""
        self.decoders.clear()
        self.reset_gops()

    def add(self, **kw: float) -> None:
        with self.lock:
            for k, v in kw.items():
                self.c[k] += v

    def span(self, ep: int, cam: str):
        """(span, table, path, from_timestamp) of one (episode, camera) (:class:`EpisodeSpans`)."""
        return self.spans.span(ep, cam)

    def episode_nbytes(self, ep: int) -> int:
        """This worker's size provider (``planner._sizes.SizeProvider``, wrapped in ``EpisodeSizes``):
        episode ``ep``'s exact synthesized bytes, all cameras; plans its spans (opens the MP4
        index) the first time. Raises the span planner's typed errors, naming episode, camera
        and file (:meth:`EpisodeSpans.span`)."""
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
        )
        self.add(parquet_s=time.perf_counter() - t0)
        payloads, fetched = {}, {}
        origin = {"store_bytes": 0, "disk_cache_bytes": 0}
        for cam in self.cfg.video_keys:
            # verified against the MP4's moov first, once the process served its first item; before
            # that, verified by the consumer before decoding (EpisodeSpans.fetch_span / checked_span)
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

    def _explained(self, err: LeRobotStreamError, ep: int, cam: str, path: str) -> LeRobotStreamError:
        """``err`` of a fetch or verification of ``(ep, cam)`` from ``path``, named by episode,
        camera and file, and told as a file changed during the run when it did
        (``explain_payload_failure``); ``err`` itself when it names the episode already."""
        if f"episode {ep}" in err.message:
            return err
        exc = explain_payload_failure(err, self.source, self.index, path, self.cfg.sidecar_npz)
        msg = exc.message if exc.message.startswith(f"{path}:") else f"{path}: {exc.message}"
        fields = {**exc.fields, "episode_index": ep, "camera": cam, "path": path}
        return type(exc)(f"episode {ep}, camera {cam!r}, file {msg}", **fields)

    def _planned(self, ep: int, cam: str, plan: Callable[[int, str], Any]) -> Any:
        """``plan(ep, cam)`` (a span of :class:`EpisodeSpans`, its source verified or not), its
        errors :meth:`_explained`."""
        try:
            return plan(ep, cam)
        except LeRobotStreamError as err:
            exc = self._explained(err, ep, cam, self.spans.span(ep, cam)[2])
            if exc is err:
                raise
            raise exc from err

    def _fetch_camera(self, ep: int, cam: str, s: tuple, origin: dict[str, int] | None) -> bytes:
        """The mini-MP4 of one (episode, camera) from its span ``s`` (:meth:`EpisodeSpans.span`);
        the bytes read are added to ``origin`` (``store_bytes`` or ``disk_cache_bytes``) unless None."""
        from lerobotstream.mp4 import check_sample_framing, synthesize

        span, table, path, _ = s
        try:
            t1 = time.perf_counter()
            data, from_disk, key = self._read(path, span.byte_start, span.byte_stop - span.byte_start)
            t2 = time.perf_counter()
            check_sample_framing(table, span, data, path=path)  # wrong sidecar offsets/sizes: fail before decoding
            mini = synthesize(table, span, data)
            self.add(fetch_s=t2 - t1, synthesize_s=time.perf_counter() - t2, bytes_needed=len(data))
            if origin is not None:
                origin["disk_cache_bytes" if from_disk else "store_bytes"] += len(data)
            if key is not None:  # checked bytes only
                self.disk.put(key, data)
            return mini
        except LeRobotStreamError as err:
            exc = self._explained(err, ep, cam, path)
            if exc is err:
                raise
            raise exc from err
        except Exception as exc:
            raise DecodeError(
                f"episode {ep}, camera {cam!r}, file {path}: fetching/synthesizing the mini-MP4 failed: {exc!r}",
                episode_index=ep,
                camera=cam,
                path=path,
            ) from exc

    def checked_payload(self, ep: int, cam: str, payload: EpisodePayload) -> bytes:
        """The mini-MP4 of ``(ep, cam)`` to decode: its source verified against the MP4's own moov
        first (once per source); fetched again when the verification replaced the table it was
        fetched from (the payload is updated in place; that rare second read is not counted in
        ``bytes_by_epoch``)."""
        fetched = payload.extra[2][cam]
        s = self._planned(ep, cam, lambda e, c: self.spans.checked_span(e, c, fetched))
        if s is None:
            return payload.payloads[cam]
        # (the decode job holds the episode's lock: no other decode of it runs meanwhile)
        payload.payloads[cam] = self._fetch_camera(ep, cam, s, None)
        payload.extra[2][cam] = s
        return payload.payloads[cam]

    def _read(self, path: str, offset: int, length: int) -> tuple[bytes, bool, bytes | None]:
        """``(bytes, from_disk, key)``: the range from the disk cache, or from the store with the
        disk cache's key to keep it under (None without a disk cache or for a file without a
        stable identity)."""
        if self.disk is None:
            return self.source.read(path, offset, length), False, None
        from lerobotstream.disk_cache import source_identity

        if path not in self._identity:
            self._identity[path] = source_identity(self.source, path)
        ident = self._identity[path]
        if ident is None:
            return self.source.read(path, offset, length), False, None
        key = self.disk.key(ident, path, offset, length)
        data = self.disk.get(key, length)
        if data is not None:
            return data, True, None
        return self.source.read(path, offset, length), False, key

    def video(self, ep: int, cam: str, mini: bytes, serial: int):
        from lerobotstream.decode import EpisodeVideo

        span, table, path, from_ts = self.span(ep, cam)
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

    def assemble(self, ep: int, frame: int, dec: Decoded, slot=None) -> dict[str, Any]:
        def frames(e: int, cam: str, idx: np.ndarray) -> list[torch.Tensor]:
            got = dec.frames[cam]
            local = dec.local_of[cam][idx].tolist()  # looked up once per episode by the decode job
            if min(local) < 0:  # a frame no anchor was known to use: the full lookup (and its error)
                local = dec.videos[cam].local_indices(dec.from_timestamps[cam] + dec.rows.timestamp_s[idx]).tolist()
            return [got[i] for i in local]

        tfm = self.cfg.options.image_transforms if self.transforms_in_threads else None
        item = assemble_item(
            dec.rows,
            frame,
            windows=self.cfg.windows,
            video_keys=self.cfg.video_keys,
            frames=frames,
            tasks=self.cfg.meta.tasks,
            return_uint8=self.cfg.options.return_uint8,
            image_transforms=tfm,
            camera_keys=self.cfg.cameras.transform_keys,
            depth=self.cfg.cameras.dequantizers,
            images=dec.images,
            image_depth=self.cfg.cameras.image_depth,
            slot=slot,
        )
        with self.lock:
            self.c["items"] += 1
        if self.spans.deferring:
            self.spans.serving()  # fetches verify from now on
        return item

    def reset_gops(self, capacity_bytes: int | None = None) -> None:
        """Forget decoded GOPs and per-episode demand (iterator start/end); counters are kept."""
        self.jobs.reset(capacity_bytes)

    def _count(self, epoch: int, **kw: int) -> None:
        with self.lock:
            row = self.by_epoch.setdefault(
                epoch, {"store_bytes": 0, "disk_cache_bytes": 0, "reused_bytes": 0, "needed_bytes": 0}
            )
            for k, v in kw.items():
                row[k] += v

    def on_start_finished(self, ep: int) -> None:
        """The iterator resumed its first epoch after the episode's last frame: its next admission
        belongs to the next epoch."""
        with self.lock:
            self.admissions[ep] = 1

    def on_admit(self, ep: int, reused: bool) -> None:
        """The episode was admitted (its payload ``reused`` from a kept entry, or fetched): count
        its MP4 bytes for the epoch it belongs to (each episode is admitted once per epoch, so its
        n-th admission in an iterator is the iterator's n-th epoch); a fetch counts in the epoch of
        the admission its payload serves (one made before the fetch ended, else the next). A reused episode keeps its
        serial (its decoders stay open); what its previous admission's decode jobs served is
        forgotten."""
        nbytes = 0
        for cam in self.cfg.video_keys:
            span = self.span(ep, cam)[0]
            nbytes += int(span.byte_stop - span.byte_start)
        with self.lock:
            epoch = self.first_epoch + self.admissions.get(ep, 0)
            self.admissions[ep] = self.admissions.get(ep, 0) + 1
            if not reused and ep not in self.counted:
                self.awaiting[ep] = epoch  # its fetch is still running: it counts here
            self.counted.discard(ep)
        self._count(epoch, needed_bytes=nbytes, reused_bytes=nbytes if reused else 0)
        if reused:
            self.jobs.reset_episode(ep)

    def on_free(self, ep: int) -> None:
        """The episode's bytes were freed: close its decoders (their mini-MP4 leaves memory too) and,
        when the heap keeps much free memory resident, give it back to the OS
        (:func:`lerobotstream._heap.trim`: glibc's per-thread arenas would keep it)."""
        serial = self.serial.pop(ep, None)
        self.jobs.drop_episode(ep)
        if serial is not None:
            for cam in self.cfg.video_keys:
                self.decoders.pop((ep, cam, serial))
        _heap.trim()


def _disk_cache(options: Any, source: Any):
    """The node's payload disk cache (``cache_dir``, ``cache_limit_gb``), or None: off, or a local
    store (its bytes are already on disk)."""
    if options.cache_dir is None or source.local_path("") is not None:
        return None
    from lerobotstream import constants
    from lerobotstream.disk_cache import DiskCache

    return DiskCache(options.cache_dir, int(options.cache_limit_gb * constants.GIB))


class _CacheView:
    """One dataset's view of its worker's byte cache (its episode ``e`` is ``offset + e`` there)."""

    def __init__(self, cache: EpisodeByteCache, offset: int) -> None:
        self.cache, self.offset = cache, offset

    def get(self, episode_index: int, **kw: Any):
        return self.cache.get(self.offset + int(episode_index), **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cache, name)
