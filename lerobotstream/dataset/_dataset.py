"""``StreamingLeRobotDataset``: the torch ``IterableDataset`` users train on.

Wiring (per process, created lazily after a PID check so DataLoader workers never inherit
decoders, handles or connections from the parent):

* constructor (training process): byte sources (``sources.open_source``; metadata from ``root``
  / ``repo_id``, payload from ``data_root`` when given, else the same place), metadata
  (``meta.DatasetMeta``), the MP4 index sidecar (``sidecar.ensure_sidecar``: revision-keyed cache →
  published → locked local build) opened and validated once (``sidecar.open_sidecar``);
* per process: the sidecar's derived mmap index (``Mp4Index``: only the sources this process's
  episodes use are materialised) → per (episode, camera) ``mp4.plan_span`` with the exact
  ``synth_nbytes`` → the planner (``planner.Planner``: rank shard, worker shard, exact-coverage
  pools, sample-exact resume) and the worker's :class:`~lerobotstream.payload_cache.EpisodeByteCache`;
* :class:`~lerobotstream.dataset._pipeline.Pipeline` drives fetches (Parquet rows through
  ``parquet.EpisodeParquetReader`` + mini-MP4 payloads of the same frontier), chunked decodes
  (each GOP once per chunk; ``decode.EpisodeVideo`` over a bounded ``decode.OpenDecoderLRU``) and the
  ordered bounded queue.

Resume (sample-exact through a real DataLoader, any ``num_workers`` and ``batch_size``)::

    ds = StreamingLeRobotDataset(root=..., repeat=True, batch_size=B, num_workers=N)
    dl = DataLoader(ds, batch_size=B, num_workers=N)
    for step, batch in enumerate(dl):
        ...
        if checkpoint_now:
            # the training process only sees batches: tell the dataset what it consumed
            state = ds.state_dict(samples_consumed=(step + 1) * B)   # or batches_consumed=step + 1
    # later, a new process:
    ds = StreamingLeRobotDataset(root=..., repeat=True, batch_size=B, num_workers=N)
    ds.load_state_dict(state)   # ResumeStateError when seed/world/batch/workers/strategy/pool differ
    dl = DataLoader(ds, batch_size=B, num_workers=N)   # continues with the next sample exactly

With ``num_workers=0`` the dataset counts the items it yielded itself, so ``ds.state_dict()``
without arguments is exact at batch boundaries. Each DataLoader worker derives its own offset
from the rank's consumed count (``Planner.worker_start`` replays the DataLoader's batch turns).
"""

from __future__ import annotations

import os
import time
from collections import abc
from typing import Any, Callable, Iterator, Sequence

import torch

from lerobotstream import constants
from lerobotstream.payload_cache import EpisodeByteCache
from lerobotstream.dataset._cameras import plan_cameras
from lerobotstream.dataset._options import is_int, require, validate_options
from lerobotstream.dataset._pipeline import Pipeline
from lerobotstream.dataset._windows import DeltaWindows
from lerobotstream.dataset._worker import Worker
from lerobotstream.errors import ResumeStateError, StreamingConfigError
from lerobotstream.meta import DatasetMeta
from lerobotstream.sources import open_source
from lerobotstream.sources._http import DEFAULT_READ_TIMEOUT_S

__all__ = ["StreamingLeRobotDataset"]

GIB = 1 << 30


def _no_nbytes(episode_index: int) -> int:
    """Stand-in size for planners that only compute states (never build a worker plan)."""
    raise AssertionError("a state-only planner must not build worker plans")


class ResumableStream:
    """Epochs and sample-exact resume of a stream of one rank, shared by
    :class:`StreamingLeRobotDataset` and the mixture. Needs ``_planner(num_workers)`` (a planner
    with ``set_epoch``, ``worker_epoch_limits``, ``batch_size``, ``state_dict`` and
    ``load_state_dict``) and the attributes ``num_workers``, ``repeat``, ``drop_last``,
    ``batch_size``, ``_epoch``, ``_samples``, ``_yielded``, ``_state_num_workers``."""

    @property
    def samples_consumed(self) -> int:
        """Samples of this rank consumed since the current epoch (or loaded state) began: the loaded
        count plus the items this process yielded (exact with ``num_workers=0``). Set it from the
        training loop with DataLoader workers (``ds.samples_consumed = step * batch_size``)."""
        return self._samples + self._yielded

    @samples_consumed.setter
    def samples_consumed(self, value: int) -> None:
        self._samples, self._yielded = int(value), 0

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first sample (its own seeded order)."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._epoch, self._samples, self._yielded = int(epoch), 0, 0

    def state_dict(self, samples_consumed: int | None = None, *, batches_consumed: int | None = None) -> dict[str, Any]:
        """Resume state of this rank (``planner.StreamState`` layout, schema-versioned).

        Args:
            samples_consumed: samples the training loop consumed from this rank since the epoch
                (or the loaded state's epoch) began — the sum of the consumed batches' sizes.
            batches_consumed: alternatively, batches consumed (converted by replaying the
                DataLoader's batch turns, exact with short last batches).
            Neither: :attr:`samples_consumed` (exact with ``num_workers=0``).
        """
        planner = self._planner(self.num_workers)
        planner.set_epoch(self._epoch)
        if batches_consumed is not None:
            from lerobotstream.planner import replay_turns

            require("batches_consumed", batches_consumed, is_int(batches_consumed) and batches_consumed >= 0,
                     "an int >= 0")

            if self.repeat:
                limits = [None if f else 0 for f in planner.worker_epoch_limits()]
            else:
                limits = planner.worker_epoch_limits()
            given, _, _ = replay_turns(limits, planner.batch_size, batches=int(batches_consumed),
                                       drop_last=self.drop_last)
            samples_consumed = sum(given)
        s = self.samples_consumed if samples_consumed is None else int(samples_consumed)
        require("samples_consumed", s, s >= 0, "an int >= 0 (samples consumed since the epoch began)")
        return planner.state_dict(samples_consumed=s)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (before iterating).

        Raises:
            ResumeStateError: no schema marker, or a setting that fixes the order or the batch turns
            (seed, world size, batch size, DataLoader workers, strategy, pool size, byte budget,
            repeat, drop_last) differs from this dataset's.
        """
        from lerobotstream.planner import StreamState

        st = StreamState.from_dict(state)
        if self.batch_size is None:
            self.batch_size = st.batch_size
        planner = self._planner(self.num_workers)
        fixed = dict(state)
        if {int(st.num_workers), self.num_workers} <= {0, 1}:
            fixed["num_workers"] = self.num_workers  # one shard either way: the same stream
        planner.load_state_dict(fixed)
        self._epoch, self._samples, self._yielded = st.epoch, st.samples, 0
        self._state_num_workers = int(st.num_workers)


class StreamingLeRobotDataset(ResumableStream, torch.utils.data.IterableDataset):
    """Stream a LeRobotDataset v3 (Parquet + concatenated MP4) with map-style-identical items.

    Args (LeRobot's): repo_id, root, episodes, delta_timestamps, image_transforms, revision,
        max_num_shards, tolerance_s (1e-4), return_uint8 (False), video_backend ("torchcodec"),
        seed (1000; None → 42), repeat (False).
    Args (streaming): repo_type ("dataset" | "bucket"), data_root (payload root when the
        MP4/Parquet payload is mirrored elsewhere; metadata still comes from ``root``/``repo_id``),
        episode_pool_size (per worker; default 32 per rank split over the workers),
        prefetch_episodes (8), byte_budget_gb (8 per rank, split over workers), decode_threads (2),
        decoded_queue_size (8), video_decoder_cache_size (per rank, split over workers; unset:
        (episode pool + prefetch_episodes) × cameras, per worker), sampling_strategy ("remaining" | "round_robin"),
        sidecar_lock_timeout_s (1800), read_timeout_s (120: seconds one read from an HTTP(S) or Hub
        root may take, retries and backoff included; then SourceTimeoutError naming the URL and the
        time waited), device ("cpu" | "cuda": NVDEC through
        ``decode.resolve_device``, counted CPU fallback), camera_keys (decode only these camera keys,
        video or image features as LeRobot's ``meta.camera_keys``; None = all; a window on a camera
        left out is a StreamingConfigError), depth_output_unit (``"mm"`` | ``"m"``: depth maps and
        depth stats, as LeRobot 0.6.1's), decode_lookahead (anchors decoded together per chunk, 64; see the memory bound
        in ``dataset._pipeline``), decoded_cache_gb (decoded GOP frames kept so each GOP is decoded
        once per episode, per rank split over the workers, 1.0; 0 disables; see
        ``dataset._decoded_gops``), ffmpeg_threads (FFmpeg threads per decoder, torchcodec's
        ``num_ffmpeg_threads``; 0 lets FFmpeg decide; default 1: the ``decode_threads`` already
        run decoders in parallel),
        first_lookahead (anchors of each iterator's first decode chunk; default ``batch_size``
        or 8: the first batch leaves before a whole ``decode_lookahead`` chunk is decoded).
    Args (resume): batch_size (the DataLoader's; None: taken from a loaded state, else 1),
        drop_last (the DataLoader's), num_workers (the DataLoader's, for ``state_dict`` in the
        training process; default ``max_num_shards`` when > 1, else 0; 0 and 1 are equivalent).
    Args (distributed): equalize (``"none"`` | ``"drop"``; ``repeat=False`` only): ranks own whole
        episodes, so their epochs can differ in length and DDP then hangs at the epoch end waiting
        for the shorter rank. ``"drop"`` stops every rank after the smallest rank's batch count
        (needs the DataLoader's ``batch_size``/``num_workers``/``drop_last`` passed here); the
        anchors it skips are skipped in that epoch only (each epoch reshuffles). Default ``"none"``:
        every frame exactly once per epoch, unequal rank lengths possible.
    Args (anchors): drop_n_last_frames (0): the last n frames of every episode are never anchors
        (LeRobot's ``EpisodeAwareSampler(drop_n_last_frames=n)``, used by diffusion-style policies
        whose action window must not run past the episode); an episode of at most n frames gives
        no anchor; exactly-once coverage holds for the other anchors. Their windows still see the
        whole episode. ``sampling_strategy="sequential"``: ascending episodes, frames in order
        (an evaluation stream; the same order every epoch).

    Epochs: ``repeat=False`` yields one epoch per iterator (call ``set_epoch(e)`` for the next
    epoch's order, like ``DistributedSampler``); ``repeat=True`` chains epochs endlessly. With
    ``DataLoader(persistent_workers=True)`` the workers keep the copy made at their start and never
    see later ``set_epoch`` calls: each worker counts the iterators started on it, so the k-th
    epoch of the DataLoader runs epoch ``e0 + k`` (``e0``: the epoch when the workers started) —
    the same orders as ``set_epoch(e0 + k)`` without persistent workers, provided the epochs are
    consecutive (a ``set_epoch`` that skips epochs cannot reach persistent workers).

    Items: see :func:`lerobotstream.dataset._assemble.assemble_item`.

    Raises:
        StreamingConfigError (a ValueError naming the option and its value) at construction for any
        invalid option; MetadataError, DeltaTimestampsError, ShardingError at construction / iteration start;
        Sidecar* errors at construction; ByteBudgetError before any payload fetch;
        ResumeStateError from ``load_state_dict`` (or the first worker batch when the DataLoader's
        worker count differs); DecodeError / FrameTimestampError / SourceError during iteration
        (messages name episode, camera and file).
    """

    def __init__(
        self,
        repo_id: str | None = None,
        root: str | os.PathLike | None = None,
        episodes: Sequence[int] | None = None,
        delta_timestamps: dict[str, list[float]] | None = None,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
        revision: str | None = None,
        max_num_shards: int = 1,
        tolerance_s: float = constants.DEFAULT_TOLERANCE_S,
        return_uint8: bool = False,
        video_backend: str | None = "torchcodec",
        seed: int | None = constants.DEFAULT_SEED,
        repeat: bool = False,
        *,
        repo_type: str = "dataset",
        data_root: str | os.PathLike | None = None,
        episode_pool_size: int | None = None,
        prefetch_episodes: int = constants.DEFAULT_PREFETCH_EPISODES,
        byte_budget_gb: float = constants.DEFAULT_BYTE_BUDGET_GB,
        decode_threads: int = constants.DEFAULT_DECODE_THREADS,
        decoded_queue_size: int = constants.DEFAULT_DECODED_QUEUE_SIZE,
        video_decoder_cache_size: int | None = None,
        sampling_strategy: str = constants.DEFAULT_SAMPLING_STRATEGY,
        sidecar_lock_timeout_s: float = constants.DEFAULT_SIDECAR_LOCK_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        device: str = "cpu",
        camera_keys: Sequence[str] | None = None,
        decode_lookahead: int = 64,
        decoded_cache_gb: float = 1.0,
        ffmpeg_threads: int = 1,
        first_lookahead: int | None = None,
        batch_size: int | None = None,
        drop_last: bool = False,
        num_workers: int | None = None,
        equalize: str = "none",
        drop_n_last_frames: int = 0,
        depth_output_unit: str = "mm",
    ) -> None:
        super().__init__()
        # one-shot iterables (generators) are read once, here, not consumed by validation
        episodes = list(episodes) if isinstance(episodes, abc.Iterator) else episodes
        camera_keys = list(camera_keys) if isinstance(camera_keys, abc.Iterator) else camera_keys
        if isinstance(device, torch.device):
            device = str(device)
        validate_options(
            byte_budget_gb=byte_budget_gb, episode_pool_size=episode_pool_size, episodes=episodes,
            delta_timestamps=delta_timestamps, prefetch_episodes=prefetch_episodes, decode_threads=decode_threads,
            decoded_queue_size=decoded_queue_size, video_decoder_cache_size=video_decoder_cache_size,
            equalize=equalize, tolerance_s=tolerance_s, sampling_strategy=sampling_strategy,
            video_backend=video_backend, max_num_shards=max_num_shards, sidecar_lock_timeout_s=sidecar_lock_timeout_s,
            device=device, flags={"return_uint8": return_uint8, "repeat": repeat, "drop_last": drop_last}, seed=seed,
            batch_size=batch_size, first_lookahead=first_lookahead, num_workers=num_workers, camera_keys=camera_keys,
            decode_lookahead=decode_lookahead, decoded_cache_gb=decoded_cache_gb, ffmpeg_threads=ffmpeg_threads,
            read_timeout_s=read_timeout_s, depth_output_unit=depth_output_unit)
        t0 = time.perf_counter()
        self.repo_id = repo_id
        self.revision = revision
        self.repo_type = repo_type
        self.root = root
        self.data_root = data_root
        self.read_timeout_s = float(read_timeout_s)
        meta_source = open_source(root, repo_id=repo_id, revision=revision, repo_type=repo_type,
                                  read_timeout_s=self.read_timeout_s)
        self._payload_source = meta_source if data_root is None else open_source(data_root,
                                                                                 read_timeout_s=self.read_timeout_s)
        self.meta = DatasetMeta.load(meta_source, episodes=episodes, repo_id=repo_id)
        self.episodes = None if episodes is None else sorted({int(e) for e in episodes})
        self.depth_output_unit = depth_output_unit
        self.select_cameras(camera_keys, delta_timestamps)
        self.meta.rescale_depth_stats(depth_output_unit)  # as LeRobot 0.6.1: stats match the returned unit
        self.windows = DeltaWindows(delta_timestamps, self.meta.fps, tolerance_s, self.meta.features)
        self.delta_timestamps = delta_timestamps
        self.image_transforms = image_transforms
        self.max_num_shards = int(max_num_shards)
        self.tolerance_s = float(tolerance_s)
        self.return_uint8 = bool(return_uint8)
        self.video_backend = video_backend or "torchcodec"
        self.seed = constants.SEED_WHEN_NONE if seed is None else int(seed)
        self.repeat = bool(repeat)
        self.episode_pool_size = episode_pool_size
        self.prefetch_episodes = int(prefetch_episodes)
        self.byte_budget_gb = float(byte_budget_gb)
        self.decode_threads = int(decode_threads)
        self.decoded_queue_size = int(decoded_queue_size)
        self.video_decoder_cache_size = video_decoder_cache_size
        self.sampling_strategy = sampling_strategy
        self.sidecar_lock_timeout_s = float(sidecar_lock_timeout_s)
        self.device = device
        self.decode_lookahead = int(decode_lookahead)
        self.decoded_cache_gb = float(decoded_cache_gb)
        self.ffmpeg_threads = int(ffmpeg_threads)
        self.first_lookahead = None if first_lookahead is None else int(first_lookahead)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.drop_last = bool(drop_last)
        self.equalize = equalize
        require("drop_n_last_frames", drop_n_last_frames, is_int(drop_n_last_frames) and drop_n_last_frames >= 0,
                "an int >= 0")
        self.drop_n_last_frames = int(drop_n_last_frames)
        if self.drop_n_last_frames and not (self.meta.episode_lengths > self.drop_n_last_frames).any():
            raise StreamingConfigError(
                f"drop_n_last_frames={self.drop_n_last_frames} leaves no anchor: every selected episode of "
                f"{self.meta.repo_id} has at most that many frames")
        self.num_workers = (self.max_num_shards if self.max_num_shards > 1 else 0) if num_workers is None else int(num_workers)
        self._epoch = 0
        self._samples = 0  # consumed samples of the rank since _epoch began (loaded or set)
        self._yielded = 0  # items yielded in this process since then (num_workers=0 counting)
        self._state_num_workers: int | None = None
        self._iter_pid: int | None = None  # DataLoader worker process that counts iterator starts
        self._iter_starts = 0  # iterators started on this copy in that worker (persistent_workers)
        self._worker: Worker | None = None
        self._transforms_in_threads = True
        self._setup = {"metadata_s": time.perf_counter() - t0}
        t1 = time.perf_counter()
        self._sidecar_npz, self._sidecar_how = self._ensure_sidecar()
        self._setup["sidecar_s"] = time.perf_counter() - t1
        # import torchcodec (~1 s) and the per-worker modules here, in the training process, so
        # DataLoader workers fork with them loaded instead of each importing them before its first
        # batch (no decoder, file handle or thread is created here)
        t2 = time.perf_counter()
        import lerobotstream.decode  # noqa: F401
        import lerobotstream.parquet  # noqa: F401
        import lerobotstream.planner  # noqa: F401

        try:
            import torchcodec.decoders  # noqa: F401
        except Exception:  # reported by the first decode, with episode/camera/file
            pass
        self._setup["torchcodec_import_s"] = time.perf_counter() - t2

    def select_cameras(self, camera_keys: Sequence[str] | None, delta_timestamps: dict | None = None) -> None:
        """Decode only ``camera_keys`` (None: every camera); raises as the constructor does."""
        windows = delta_timestamps if delta_timestamps is not None else getattr(self, "delta_timestamps", None)
        self._cameras = plan_cameras(self.meta, camera_keys, list((windows or {}).keys()), self.depth_output_unit)
        self.video_keys = self._cameras.video_keys  # decoded videos, RGB and depth
        self.image_keys = self._cameras.image_keys  # decoded image features
        self.depth_keys = self._cameras.depth_keys  # decoded depth videos

    def _ensure_sidecar(self):
        from lerobotstream.sidecar import ensure_sidecar, open_sidecar

        rid = self.repo_id or self.meta.repo_id or f"local/{_root_name(self.root)}"
        npz, how = ensure_sidecar(self._payload_source, self.meta, repo_id=rid, revision=self.revision,
                                  repo_type=self.repo_type, lock_timeout_s=self.sidecar_lock_timeout_s,
                                  tolerance_s=self.tolerance_s,
                                  data_root=None if self.data_root is None else os.fspath(self.data_root))
        open_sidecar(npz, self.meta, source=self._payload_source, tolerance_s=self.tolerance_s,
                     lock_timeout_s=self.sidecar_lock_timeout_s)  # validate once, in the training process
        return str(npz), how

    def __getstate__(self) -> dict[str, Any]:
        st = dict(self.__dict__)
        st["_worker"] = None  # never ship decoders, maps or threads to a worker
        return st

    # --- LeRobot-like surface ---------------------------------------------------------------------
    @property
    def fps(self) -> int:
        return self.meta.fps

    @property
    def features(self) -> dict:
        return self.meta.features

    @property
    def num_frames(self) -> int:
        return self.meta.num_frames

    @property
    def num_episodes(self) -> int:
        return self.meta.num_episodes

    @property
    def sidecar_status(self) -> str:
        """How the MP4 sidecar was obtained: ``"cache"``, ``"published"`` or ``"built"``."""
        return self._sidecar_how

    # --- planner and resume -----------------------------------------------------------------------
    def anchor_lengths(self) -> dict[int, int]:
        """Anchors per selected episode: its length minus ``drop_n_last_frames`` (LeRobot's
        ``EpisodeAwareSampler``: those last frames are never anchors; windows still read them)."""
        return {int(e): max(0, int(n) - self.drop_n_last_frames)
                for e, n in zip(self.meta.episode_indices, self.meta.episode_lengths)}

    def _planner(self, num_workers: int, episode_nbytes: Callable[[int], int] | None = None, *,
                 seed: int | None = None, pool_size: int | None = None, byte_budget_gb: float | None = None,
                 decoder_cache_size: int | None = None, batch_size: int | None = None):
        """This dataset's planner (the keyword overrides serve a mixture: its share of the budget)."""
        from lerobotstream.planner import Planner

        gb = self.byte_budget_gb if byte_budget_gb is None else byte_budget_gb
        return Planner(self.anchor_lengths(), seed=self.seed if seed is None else seed, num_workers=int(num_workers),
                       pool_size=self.episode_pool_size if pool_size is None else pool_size,
                       strategy=self.sampling_strategy, byte_budget=max(1, int(gb * GIB)),
                       episode_nbytes=episode_nbytes or _no_nbytes,
                       decoder_cache_size=self.video_decoder_cache_size if decoder_cache_size is None else decoder_cache_size,
                       repeat=self.repeat, batch_size=(batch_size or self.batch_size or 1), drop_last=self.drop_last,
                       equalize=self.equalize)

    # --- per process ------------------------------------------------------------------------------
    def _state(self) -> Worker:
        if self._worker is None or self._worker.pid != os.getpid():
            self._worker = Worker(self)  # never reuse a parent's decoders/connections
        return self._worker

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from lerobotstream.planner import current_worker

        wid, nw = current_worker()
        in_process = nw == 0
        self._transforms_in_threads = not in_process
        epoch, samples = iteration_start(self, nw)
        w = self._state()
        planner = self._planner(nw, episode_nbytes=w.episode_nbytes)
        planner.set_epoch(epoch)
        planner.samples_consumed = samples
        start = planner.worker_start(wid, nw)
        plan = planner.worker_plan(start.logical_worker)  # ByteBudgetError here, before any fetch
        if len(plan.episode_indices) == 0:
            return
        n_cams = max(1, len(self.video_keys))
        cap = plan.decoder_cache_size or plan.pool_size * n_cams + self.prefetch_episodes * n_cams
        w.decoders.clear()
        w.decoders.capacity = max(1, int(cap))
        w.reset_gops(int(self.decoded_cache_gb * GIB) // max(1, nw))
        nbytes = dict(zip(plan.episode_indices.tolist(), plan.nbytes.tolist()))
        cache = EpisodeByteCache(int(plan.byte_budget), nbytes, w.fetch,
                                 max_workers=max(1, min(8, self.prefetch_episodes + 1)))
        w.cache = cache
        pipe = Pipeline(plan.iter_pools(start.epoch, start.offset, repeat=self.repeat), start.limit, cache,
                        w.jobs.decode_group, w.assemble, decode_threads=self.decode_threads,
                        decoded_queue_size=self.decoded_queue_size, prefetch_episodes=self.prefetch_episodes,
                        lookahead=self.decode_lookahead, on_free=w.on_free, times=w.times,
                        first_lookahead=self.first_lookahead or self.batch_size or 8)
        try:
            yield from yield_items(self, pipe, w.add, self._cameras.transform_keys, in_process)
        finally:
            w.decoders.clear()
            w.reset_gops()

    def source_stats(self) -> dict[str, Any]:
        """This process's payload-source counters (``ByteSource.stats``: ``requests``,
        ``bytes_read``, ``bytes_requested``, ``retries``, ...; bytes), cheap enough to read per item
        (a fraction of a microsecond; :meth:`stats` builds every counter). Empty before iterating."""
        w = self._worker
        return {} if w is None else w.source.stats.as_dict()

    def stats(self) -> dict[str, Any]:
        """Per-process counters (stable names; the profiler reads them). Empty before iterating.

        Keys:
            sidecar (str): ``"cache"`` | ``"published"`` | ``"built"``.
            source (dict): payload ``ByteSource.stats`` (requests, bytes_read, bytes_requested, retries,
                metadata_requests); metadata_source (dict) when metadata comes from another root.
            bytes_fetched (int), requests (int): payload source totals of this process.
            bytes_needed (int): MP4 payload bytes of the fetched spans (what had to travel).
            episodes_fetched (int).
            decoder_opens (int), decoder_evictions (int), open_decoders (int), decoder_capacity (int).
            decoder_fallbacks (int): CUDA requests decoded on the CPU; pyav_fallbacks (int);
                fallback_reasons (dict reason → count).
            frames_decoded (int): frames the decoders had to decode (whole GOP runs from their seek
                point, each once while it stays in the decoded-GOP cache); frames_returned (int): frames put into items (window frames
                included); frames_unique (int); decode_calls (int);
                frames_decoded_per_returned (float | None).
            seconds (per stage, summed over threads): metadata_s, sidecar_s (training process setup),
                torchcodec_import_s, index_open_s, spans_s, parquet_s, fetch_s, synthesize_s, open_s, decode_s, assemble_s,
                transforms_s, queue_wait_s, admit_wait_s, decode_job_s; first_item_s.
            items (int), chunks (int).
            gop_cache_bytes, gop_cache_peak_bytes, gop_cache_capacity_bytes (int, bytes of decoded
                uint8 frames kept), gop_cache_evictions (int): the decoded-GOP cache.
            reserved_bytes, resident_bytes, byte_budget (int, bytes); cache (dict: ``CacheStats``).
        """
        w = self._worker
        if w is None:
            return {}
        src = w.source.stats.as_dict()
        fb = w.fallback
        out: dict[str, Any] = {
            "sidecar": self._sidecar_how,
            "source": src,
            "bytes_fetched": int(src.get("bytes_read", 0)),
            "requests": int(src.get("requests", 0)),
            "decoder_opens": w.decoders.opened,
            "decoder_evictions": w.decoders.evicted,
            "open_decoders": len(w.decoders),
            "decoder_capacity": w.decoders.capacity,
            "decoder_fallbacks": fb.fallback_count,
            "pyav_fallbacks": fb.pyav_fallbacks,
            "fallback_reasons": dict(fb.cpu_fallbacks),
            **self._setup,
            "index_open_s": w.index_open_s,
            "assemble_s": w.times.assemble_s, "queue_wait_s": w.times.queue_wait_s,
            "admit_wait_s": w.times.admit_wait_s, "decode_job_s": w.times.decode_job_s,
            "items": w.times.items, "chunks": w.times.chunks, "first_item_s": w.times.first_item_s,
            "gop_cache_bytes": w.jobs.gops.nbytes, "gop_cache_peak_bytes": w.jobs.gops.peak_nbytes,
            "gop_cache_capacity_bytes": w.jobs.gops.capacity_bytes, "gop_cache_evictions": w.jobs.gops.evictions,
        }
        with w.lock:
            out.update({k: (int(v) if k.startswith(("frames", "decode_calls", "bytes", "episodes")) else v)
                        for k, v in w.c.items()})
        out["frames_decoded_per_returned"] = (out["frames_decoded"] / out["frames_returned"]
                                              if out["frames_returned"] else None)
        if self.meta.source is not w.source:
            out["metadata_source"] = self.meta.source.stats.as_dict()
        c = w.cache
        if c is not None:
            out.update(reserved_bytes=c.reserved_bytes, resident_bytes=c.resident_bytes, byte_budget=c.byte_budget,
                       cache=c.stats.as_dict())
        else:
            out.update(reserved_bytes=0, resident_bytes=0, byte_budget=0, cache={})
        return out

    def __repr__(self) -> str:
        return f"StreamingLeRobotDataset({self.meta!r}, cameras={self.video_keys + self.image_keys})"


def yield_items(ds: Any, items: Iterator[dict[str, Any]], add: Callable[..., None], transform_keys: Sequence[str],
                in_process: bool) -> Iterator[dict[str, Any]]:
    """``items`` with ``ds.image_transforms`` applied here when they do not run on the assembly
    threads (in-process iteration), counting the yielded items for ``ds.state_dict``."""
    tfm = None if ds._transforms_in_threads else ds.image_transforms
    for item in items:
        if tfm is not None:
            t0 = time.perf_counter()
            for k in transform_keys:
                if k in item:
                    item[k] = tfm(item[k])
            add(transforms_s=time.perf_counter() - t0)
        if in_process:
            ds._yielded += 1
        yield item


def iteration_start(ds: Any, nw: int) -> tuple[int, int]:
    """(epoch, consumed samples) an iterator of ``ds`` starts from in this process, with ``nw``
    DataLoader workers (0: in-process).

    A DataLoader worker holds a copy of the dataset: with ``persistent_workers=True`` the same copy
    serves every epoch and never sees the training process's ``set_epoch()``; the k-th iterator
    started on it is epoch (copied epoch + k), from its first sample.

    Raises:
        ResumeStateError: the loaded state was written with another DataLoader worker count.
    """
    if ds._state_num_workers is not None and ds._state_num_workers != nw and not (
            {ds._state_num_workers, nw} <= {0, 1}):
        raise ResumeStateError(
            f"the resume state was written with {ds._state_num_workers} DataLoader worker(s) but this "
            f"DataLoader runs {nw}: sample-exact resume needs the same worker count (it fixes the batch "
            "turns); restore it, or start a new run from the policy weights")
    epoch, samples = ds._epoch, ds._samples
    if nw:
        pid = os.getpid()
        if ds._iter_pid != pid:
            ds._iter_pid, ds._iter_starts = pid, 0
        if ds._iter_starts:
            epoch, samples = ds._epoch + ds._iter_starts, 0
        ds._iter_starts += 1
    return epoch, samples


def _root_name(root: Any) -> str:
    return os.path.basename(os.fspath(root).rstrip("/")) if root is not None else "dataset"
