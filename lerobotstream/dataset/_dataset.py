"""``StreamingLeRobotDataset``: the torch ``IterableDataset`` users train on.

Wiring (per process, created lazily after a PID check so DataLoader workers never inherit
decoders, handles or connections from the parent):

* metadata (``meta.DatasetMeta``) and the byte source are loaded in the constructor (small files);
* per video source an MP4 sample table (``mp4.parse_mp4`` over the ByteSource; the sidecar
  lifecycle will replace this) → per (episode, camera) a ``mp4.spans.plan_span`` with the exact
  ``synth_nbytes`` → the episode's reservation in :class:`~lerobotstream.cache.EpisodeByteCache`;
* rank shard, then worker shard (frame-balanced LPT), then an exact-coverage pool
  (``planner._poolcore.PoolCore``) yields the anchors;
* :class:`~lerobotstream.dataset._pipeline.Pipeline` drives fetches (Parquet rows + payloads of the
  same frontier), decode threads and the ordered bounded queue.
"""

from __future__ import annotations

import io
import os
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from lerobotstream import constants
from lerobotstream.cache import EpisodeByteCache, EpisodePayload
from lerobotstream.dataset._assemble import EpisodeRows, assemble_item, episode_rows
from lerobotstream.dataset._pipeline import Pipeline, StageTimes
from lerobotstream.dataset._windows import DeltaWindows
from lerobotstream.errors import (
    DecodeError,
    EpisodeDataError,
    FrameTimestampError,
    LeRobotStreamError,
    MetadataError,
    ResumeStateError,
    ShardingError,
)
from lerobotstream.meta import DatasetMeta
from lerobotstream.sources import open_source

__all__ = ["StreamingLeRobotDataset"]

GIB = 1 << 30


class _PoolPlan:
    """Anchor plan of one worker and one epoch over ``PoolCore`` (draws one anchor at a time)."""

    def __init__(self, episode_ids: np.ndarray, lengths: np.ndarray, nbytes: np.ndarray, *, seed: int, epoch: int,
                 rank: int, worker: int, pool_size: int, byte_budget: int, strategy: str) -> None:
        from lerobotstream.planner._poolcore import PoolCore, shuffled_order
        from lerobotstream.planner._seeds import TAG_ADMISSION, TAG_DRAWS, seed_words

        self.ids = np.asarray(episode_ids, dtype=np.int64)
        n = len(self.ids)
        order = np.ascontiguousarray(shuffled_order(seed_words(seed, epoch, rank, worker, TAG_ADMISSION), n), dtype=np.int64)
        self.core = PoolCore(
            np.ascontiguousarray(lengths, dtype=np.int64), np.ascontiguousarray(nbytes, dtype=np.int64), order,
            max(1, int(pool_size)), int(byte_budget), 1 if strategy == "round_robin" else 0,
            seed_words(seed, epoch, rank, worker, TAG_DRAWS),
        )
        _, kinds, eps = self.core.drain_events()
        self._initial = [int(self.ids[e]) for k, e in zip(kinds, eps) if k == 0]
        self._ep = np.empty(1, dtype=np.int64)
        self._fr = np.empty(1, dtype=np.int64)

    def skip(self, n: int) -> int:
        done = self.core.skip(n)
        _, kinds, eps = self.core.drain_events()
        self._initial = [int(self.ids[e]) for e in self.core.resident()]
        return done

    def initial_residents(self) -> list[int]:
        return list(self._initial)

    def draw(self):
        if self.core.fill(self._ep, self._fr, 1) == 0:
            return None
        _, kinds, eps = self.core.drain_events()
        evicted = [int(self.ids[e]) for k, e in zip(kinds, eps) if k == 1]
        admitted = [int(self.ids[e]) for k, e in zip(kinds, eps) if k == 0]
        return int(self.ids[self._ep[0]]), int(self._fr[0]), evicted, admitted

    def frontier(self, k: int) -> list[int]:
        return [int(self.ids[e]) for e in self.core.frontier(k)]


class _Decoder:
    """torchcodec decoder over one episode's mini-MP4 (one lock: calls are serialized)."""

    def __init__(self, mini: bytes, span: Any, path: str, episode_index: int, camera: str, device: str) -> None:
        from torchcodec.decoders import VideoDecoder

        self.span = span
        self.lock = threading.Lock()
        self.where = f"episode {episode_index}, camera {camera!r}, file {path}"
        try:
            self.dec = VideoDecoder(mini, seek_mode="exact", device=device)
        except Exception as exc:
            raise DecodeError(f"cannot open the mini-MP4 of {self.where}: {exc}", episode_index=episode_index,
                              camera=camera, path=path) from exc
        self.local_pts_s = np.asarray(span.local_pts_s(), dtype=np.float64)

    def frames(self, local: np.ndarray, tolerance_s: float) -> torch.Tensor:
        with self.lock:
            try:
                batch = self.dec.get_frames_at(indices=[int(j) for j in local])
            except Exception as exc:
                raise DecodeError(f"decoding local frames {local.tolist()} of {self.where} failed: {exc}") from exc
        got = batch.pts_seconds.to(torch.float64).numpy()
        want = self.local_pts_s[local]
        if not np.all(np.abs(got - want) < max(tolerance_s, 1e-6)):
            raise DecodeError(f"{self.where}: decoded pts {got.tolist()} != expected {want.tolist()}")
        return batch.data


class _Worker:
    """Per-process state (tables, spans, decoders): never crosses a fork."""

    def __init__(self, ds: "StreamingLeRobotDataset") -> None:
        self.pid = os.getpid()
        self.ds = ds
        self.source = open_source(ds._root_arg, repo_id=ds.repo_id, revision=ds.revision, repo_type=ds.repo_type) \
            if ds._root_arg is not None or ds.repo_id is not None else ds.meta.source
        self.tables: dict[str, Any] = {}
        self.spans: dict[tuple[int, str], Any] = {}
        self.decoders: "OrderedDict[tuple[int, str], _Decoder]" = OrderedDict()
        self.dec_lock = threading.Lock()
        self.decoder_opens = 0
        self.times = StageTimes()
        self.fetch_s = 0.0
        self.synth_s = 0.0
        self.open_s = 0.0
        self.decode_s = 0.0
        self.cache: EpisodeByteCache | None = None

    def table(self, path: str):
        from lerobotstream.mp4 import parse_mp4

        t = self.tables.get(path)
        if t is None:
            size = self.source.size(path)
            t = parse_mp4(lambda off, n: self.source.read(path, off, n), size, path=path)
            self.tables[path] = t
        return t

    def span(self, ep: int, cam: str):
        from lerobotstream.mp4.spans import episode_frame_range, plan_span

        key = (ep, cam)
        s = self.spans.get(key)
        if s is None:
            info = self.ds.meta.episode(ep)
            v = info.videos[cam]
            table = self.table(v.path)
            try:
                a, b = episode_frame_range(table, v.from_timestamp, info.length, self.ds.meta.fps, self.ds.tolerance_s)
            except ValueError as exc:
                raise FrameTimestampError(f"episode {ep}, camera {cam!r}, file {v.path}: {exc}",
                                          episode_index=ep, camera=cam, path=v.path) from exc
            s = (plan_span(table, a, b, path=v.path), table, v.path)
            self.spans[key] = s
        return s

    def episode_nbytes(self, ep: int) -> int:
        return int(sum(self.span(ep, cam)[0].synth_nbytes for cam in self.ds.video_keys))

    def fetch(self, ep: int) -> EpisodePayload:
        from lerobotstream.mp4.synth import synthesize

        info = self.ds.meta.episode(ep)
        t0 = time.perf_counter()
        rows = self.rows(info)
        payloads = {}
        for cam in self.ds.video_keys:
            span, table, path = self.span(ep, cam)
            try:
                t1 = time.perf_counter()
                data = self.source.read(path, span.byte_start, span.byte_stop - span.byte_start)
                t2 = time.perf_counter()
                payloads[cam] = synthesize(table, span, data)
            except LeRobotStreamError as exc:
                if f"episode {ep}" in exc.message:
                    raise
                raise type(exc)(f"episode {ep}, camera {cam!r}, file {path}: {exc.message}", episode_index=ep,
                                camera=cam, path=path) from exc
            except Exception as exc:
                raise DecodeError(f"episode {ep}, camera {cam!r}, file {path}: fetching/synthesizing the mini-MP4 "
                                  f"failed: {exc!r}", episode_index=ep, camera=cam, path=path) from exc
            self.synth_s += time.perf_counter() - t2
            self.fetch_s += t2 - t1
        self.times.extra["fetch_total_s"] = self.times.extra.get("fetch_total_s", 0.0) + time.perf_counter() - t0
        return EpisodePayload(payloads, extra=rows)

    def rows(self, info) -> EpisodeRows:
        path = info.data_path
        local = self.source.local_path(path)
        cols = None
        if local is not None:
            table = pq.read_table(local, filters=[("episode_index", "=", info.episode_index)], columns=cols)
        else:
            table = pq.read_table(io.BytesIO(self.source.read_file(path)))
            table = table.filter(pc.equal(table.column("episode_index"), info.episode_index))
        if "frame_index" in table.column_names:
            table = table.sort_by("frame_index")
        if table.num_rows != info.length:
            raise EpisodeDataError(f"episode {info.episode_index}: expected {info.length} rows in {path}, found {table.num_rows}",
                                   episode_index=info.episode_index, path=path)
        return episode_rows(table, info.episode_index, info.dataset_from_index)

    def decoder(self, ep: int, cam: str) -> _Decoder:
        key = (ep, cam)
        with self.dec_lock:
            d = self.decoders.get(key)
            if d is not None:
                self.decoders.move_to_end(key)
                return d
        assert self.cache is not None
        mini = self.cache.get(ep).payloads[cam]
        span, _, path = self.span(ep, cam)
        t0 = time.perf_counter()
        d = _Decoder(mini, span, path, ep, cam, self.ds.device)
        self.open_s += time.perf_counter() - t0
        with self.dec_lock:
            self.decoder_opens += 1
            old = self.decoders.get(key)
            if old is not None:
                return old
            self.decoders[key] = d
            while len(self.decoders) > self.ds._decoder_cap:
                self.decoders.popitem(last=False)
        return d

    def frames(self, ep: int, cam: str, idx: np.ndarray, query_s: np.ndarray) -> torch.Tensor:
        span, table, path = self.span(ep, cam)
        po = np.asarray(table.presentation_order, dtype=np.int64)
        pts = np.asarray(table.pts_s, dtype=np.float64)[po]
        pos = np.clip(np.searchsorted(pts, query_s), 1, len(pts) - 1)
        left, right = pts[pos - 1], pts[pos]
        src = np.where(np.abs(query_s - left) <= np.abs(right - query_s), pos - 1, pos)
        dist = np.abs(pts[src] - query_s)
        if not np.all(dist < self.ds.tolerance_s):
            bad = int(np.argmax(dist))
            raise FrameTimestampError(
                f"episode {ep}, camera {cam!r}, file {path}: no frame within tolerance_s={self.ds.tolerance_s} "
                f"of {query_s[bad]:.6f} s (nearest {pts[src[bad]]:.6f} s)",
                episode_index=ep, camera=cam, path=path, requested_s=float(query_s[bad]), nearest_s=float(pts[src[bad]]),
            )
        try:
            local = np.array([span.local_frame(int(s)) for s in src], dtype=np.int64)
        except IndexError as exc:
            raise FrameTimestampError(f"episode {ep}, camera {cam!r}, file {path}: {exc}", episode_index=ep,
                                      camera=cam, path=path) from exc
        d = self.decoder(ep, cam)
        t0 = time.perf_counter()
        out = d.frames(local, self.ds.tolerance_s)
        self.decode_s += time.perf_counter() - t0
        return out

    def assemble(self, ep: int, frame: int) -> dict[str, Any]:
        assert self.cache is not None
        payload = self.cache.get(ep)
        rows: EpisodeRows = payload.extra
        info = self.ds.meta.episode(ep)
        if rows.episode_index != ep:
            raise EpisodeDataError(f"rows of episode {rows.episode_index} returned for episode {ep}", episode_index=ep)
        tfm = self.ds.image_transforms if self.ds._transforms_in_threads else None
        return assemble_item(
            rows, frame, windows=self.ds.windows, video_keys=self.ds.video_keys,
            from_timestamps={k: info.videos[k].from_timestamp for k in self.ds.video_keys},
            frames=self.frames, tasks=self.ds.meta.tasks, return_uint8=self.ds.return_uint8,
            image_transforms=tfm, camera_keys=self.ds.video_keys,
        )


class StreamingLeRobotDataset(torch.utils.data.IterableDataset):
    """Stream a LeRobotDataset v3 (Parquet + concatenated MP4) with map-style-identical items.

    Args (LeRobot's): repo_id, root, episodes, delta_timestamps, image_transforms, revision,
        max_num_shards, tolerance_s (1e-4), return_uint8 (False), video_backend ("torchcodec"),
        seed (1000; None → 42), repeat (False).
    Args (streaming, SPEC §5): repo_type ("dataset"), data_root (payload root; default root),
        episode_pool_size (32 per rank, split over workers), prefetch_episodes (8),
        byte_budget_gb (8 per rank, split over workers), decode_threads (2),
        decoded_queue_size (8), video_decoder_cache_size (pool × cameras), sampling_strategy
        ("remaining" | "round_robin"), sidecar_lock_timeout_s (1800), device ("cpu" | "cuda"),
        camera_keys (decode only these video keys; None = all).

    Items: see :func:`lerobotstream.dataset._assemble.assemble_item`.

    Raises:
        MetadataError, DeltaTimestampsError, ShardingError at construction / iteration start;
        ByteBudgetError before any payload fetch; DecodeError / FrameTimestampError / SourceError
        during iteration (messages name episode, camera and file).
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
        device: str = "cpu",
        camera_keys: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        if tolerance_s <= 0:
            raise ValueError(f"tolerance_s must be > 0, got {tolerance_s}")
        if sampling_strategy not in constants.SAMPLING_STRATEGIES:
            raise ValueError(f"sampling_strategy must be one of {constants.SAMPLING_STRATEGIES}, got {sampling_strategy!r}")
        if video_backend not in (None, "torchcodec"):
            raise ValueError(f"video_backend {video_backend!r} is not supported (use 'torchcodec')")
        self.repo_id = repo_id
        self.revision = revision
        self.repo_type = repo_type
        self._root_arg = data_root if data_root is not None else root
        self.root = root
        source = open_source(self._root_arg, repo_id=repo_id, revision=revision, repo_type=repo_type)
        self.meta = DatasetMeta.load(source, episodes=episodes, repo_id=repo_id)
        self.episodes = None if episodes is None else sorted({int(e) for e in episodes})
        self.video_keys = list(self.meta.video_keys)
        if camera_keys is not None:
            unknown = [k for k in camera_keys if k not in self.meta.video_keys]
            if unknown:
                raise MetadataError(f"camera_keys {unknown} are not video keys of {self.meta.repo_id} ({self.meta.video_keys})")
            self.video_keys = [k for k in self.meta.video_keys if k in set(camera_keys)]
        self.windows = DeltaWindows(delta_timestamps, self.meta.fps, tolerance_s, self.meta.features)
        self.delta_timestamps = delta_timestamps
        self.image_transforms = image_transforms
        self.max_num_shards = max(1, int(max_num_shards))
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
        self._epoch = 0
        self._offset = 0
        self._worker: _Worker | None = None
        self._transforms_in_threads = True
        self._decoder_cap = 1

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

    def set_epoch(self, epoch: int) -> None:
        self._epoch = int(epoch)
        self._offset = 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self._epoch, "offset": self._offset, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        epoch, offset = int(state.get("epoch", 0)), int(state.get("offset", 0))
        if epoch < 0 or offset < 0:
            raise ResumeStateError(f"invalid stream state {state}")
        if "seed" in state and int(state["seed"]) != self.seed:
            raise ResumeStateError(f"checkpoint seed {state['seed']} != dataset seed {self.seed}")
        self._epoch, self._offset = epoch, offset

    # --- per process ------------------------------------------------------------------------------
    def _state(self) -> _Worker:
        if self._worker is None or self._worker.pid != os.getpid():
            self._worker = _Worker(self)  # never reuse a parent's decoders/connections
        return self._worker

    def _shard(self) -> tuple[np.ndarray, int, int, int]:
        from lerobotstream.planner._seeds import TAG_RANK_SHARDS, TAG_WORKER_SHARDS
        from lerobotstream.planner._shards import lpt_shards
        from lerobotstream.planner._world import current_worker, discover_world

        rank, world = discover_world()
        worker, num_workers = current_worker()
        worker = worker or 0
        num_workers = max(1, num_workers)
        ids, lengths = self.meta.episode_indices, self.meta.episode_lengths
        keep = lengths > 0
        ids, lengths = ids[keep], lengths[keep]
        if len(ids) < world:
            raise ShardingError(f"rank {rank} of {world} would own no episode of {self.meta.repo_id} "
                                f"({len(ids)} episodes); reduce the distributed world size", rank=rank)
        rank_pos = lpt_shards(lengths, world, (self.seed, TAG_RANK_SHARDS))[rank]
        r_ids, r_len = ids[rank_pos], lengths[rank_pos]
        w_pos = lpt_shards(r_len, num_workers, (self.seed, rank, TAG_WORKER_SHARDS))[worker]
        return r_ids[w_pos], rank, worker, num_workers

    def __iter__(self) -> Iterator[dict[str, Any]]:
        _, num_workers = __import__("lerobotstream.planner._world", fromlist=["x"]).current_worker()
        self._transforms_in_threads = num_workers > 0
        while True:
            n = 0
            for item in self._iter_once():
                n += 1
                yield item
            if not self.repeat or n == 0:
                return

    def _iter_once(self) -> Iterator[dict[str, Any]]:
        w = self._state()
        ids, rank, worker, num_workers = self._shard()
        epoch, offset = self._epoch, self._offset
        if len(ids) == 0:
            self._epoch += 1
            return
        pool = self.episode_pool_size or max(1, round(min(constants.DEFAULT_EPISODE_POOL_SIZE_PER_RANK, 32) / num_workers))
        self._decoder_cap = (self.video_decoder_cache_size // num_workers if self.video_decoder_cache_size
                             else pool * max(1, len(self.video_keys)) + self.prefetch_episodes)
        self._decoder_cap = max(1, self._decoder_cap)
        budget = max(1, int(self.byte_budget_gb * GIB) // num_workers)
        lengths = np.array([self.meta.episode(e).length for e in ids], dtype=np.int64)
        nbytes = np.array([w.episode_nbytes(int(e)) for e in ids], dtype=np.int64)
        cache = EpisodeByteCache(budget, dict(zip(ids.tolist(), nbytes.tolist())), w.fetch,
                                 max_workers=max(1, min(self.max_num_shards * 4, pool + self.prefetch_episodes)))
        w.cache = cache
        for e, nb in zip(ids.tolist(), nbytes.tolist()):
            cache.check_fits(e)  # oversize → ByteBudgetError before any fetch
        plan = _PoolPlan(ids, lengths, nbytes, seed=self.seed, epoch=epoch, rank=rank, worker=worker,
                         pool_size=pool, byte_budget=budget, strategy=self.sampling_strategy)
        if offset:
            plan.skip(offset)
        pipe = Pipeline(plan, cache, w.assemble, decode_threads=self.decode_threads,
                        decoded_queue_size=self.decoded_queue_size, prefetch_episodes=self.prefetch_episodes,
                        times=w.times)
        tfm = None if self._transforms_in_threads else self.image_transforms
        try:
            for item in pipe:
                if tfm is not None:
                    for k in self.video_keys:
                        item[k] = tfm(item[k])
                self._offset += 1
                yield item
        finally:
            with w.dec_lock:
                w.decoders.clear()
        self._epoch = epoch + 1
        self._offset = 0

    def stats(self) -> dict[str, Any]:
        """Per-process counters: bytes/requests fetched, decoder opens, stage seconds, budget bytes."""
        w = self._worker
        if w is None:
            return {}
        c = w.cache
        out: dict[str, Any] = {
            "source": w.source.stats.as_dict(),
            "decoder_opens": w.decoder_opens,
            "decoder_fallbacks": 0,
            "open_decoders": len(w.decoders),
            "fetch_s": w.fetch_s, "synthesize_s": w.synth_s, "open_s": w.open_s, "decode_s": w.decode_s,
            "assemble_s": w.times.assemble_s, "queue_wait_s": w.times.queue_wait_s,
            "admit_wait_s": w.times.admit_wait_s, "items": w.times.items, "first_item_s": w.times.first_item_s,
        }
        if c is not None:
            out.update(reserved_bytes=c.reserved_bytes, resident_bytes=c.resident_bytes, byte_budget=c.byte_budget,
                       cache=c.stats.as_dict())
        return out

    def __repr__(self) -> str:
        return f"StreamingLeRobotDataset({self.meta!r}, cameras={self.video_keys})"
