"""Decode jobs of one worker process: every frame a chunk of anchors needs, each GOP decoded once.

A job (:meth:`ChunkDecoder.decode_group`, run on a decode thread of the
:class:`~lerobotstream.dataset._pipeline.Pipeline`) gets up to ``decode_lookahead`` anchors of one
episode. Per camera it maps the anchors (or their ``delta_timestamps`` windows) to local frames of
the episode's mini-MP4, groups them by GOP (sync sample to the next sync sample), and decodes the
GOP runs not yet held by the :class:`~lerobotstream.dataset._decoded_gops.DecodedGopCache` in batched decoder
calls of about ``_CALL_FRAMES`` frames. Per (episode, camera) it keeps the *demand*: how often each
local frame is used over the whole episode and how often it was served, so a decoded GOP leaves
the cache once its last use was served. Image features are decoded here too (Pillow), each
distinct frame once per job.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import torch

from lerobotstream.dataset._assemble import EpisodeRows
from lerobotstream.dataset._decoded_gops import DecodedGopCache
from lerobotstream.dataset._images import decode_images
from lerobotstream.dataset._windows import window_indices
from lerobotstream.errors import EpisodeDataError

__all__ = ["ChunkDecoder", "Decoded"]


#: longest GOP run decoded at once past the last needed frame (frames); longer GOPs are decoded in parts
_MAX_RUN = 64


#: frames per decoder call (whole GOP runs are grouped up to this; a longer run is one call): one
#: huge output tensor per chunk is a fresh mmap that page-faults (~0.5 ms per 640x480 frame, more
#: than decoding it), while call-sized outputs are recycled by the allocator
_CALL_FRAMES = 16


def _call_groups(runs: list, cap: int) -> list:
    """Split GOP runs ``(start, stop)`` into consecutive groups of about ``cap`` frames."""
    groups: list = []
    cur: list = []
    n = 0
    for r in runs:
        if cur and n + (r[1] - r[0]) > cap:
            groups.append(cur)
            cur, n = [], 0
        cur.append(r)
        n += r[1] - r[0]
    if cur:
        groups.append(cur)
    return groups


class Decoded:
    """One decode job's result: rows and, per camera, the distinct decoded frames."""

    __slots__ = ("rows", "frames", "videos", "images", "local_of", "from_timestamps")

    def __init__(self, rows: EpisodeRows) -> None:
        self.rows = rows
        self.frames: dict[str, dict[int, torch.Tensor]] = {}  # camera -> local frame -> (C,H,W) uint8 view
        self.videos: dict[str, Any] = {}
        self.images: dict[str, dict[int, torch.Tensor]] = {}  # image key -> episode frame -> decoded frame
        #: camera -> int64 (episode length,): local frame of each episode frame the episode's anchors
        #: use (the map-style query ``from_timestamp + timestamp``), -1 for frames none uses
        self.local_of: dict[str, np.ndarray] = {}
        self.from_timestamps: dict[str, float] = {}  # camera -> the episode's start in its file (s)


class ChunkDecoder:
    """The decode jobs of one worker process (its :class:`~lerobotstream.dataset._worker.Worker`:
    payload cache, decoders, counters) and the state they share: decoded GOPs and demand.

    Thread-safe: jobs of different episodes run in parallel; jobs of one episode one at a time.
    """

    def __init__(self, worker: Any) -> None:
        self.w = worker
        self.gops = DecodedGopCache(0)
        #: prefix of this decoder's keys in ``gops`` (a mixture shares one cache between its
        #: datasets' workers, each under its own namespace: their episode indices overlap)
        self.namespace: tuple = ()
        self.demand: dict[tuple[int, str], dict[str, Any]] = {}
        self.ep_locks: dict[int, threading.Lock] = {}
        self.lock = threading.Lock()

    def needed(self, cam: str, frames: np.ndarray, n: int) -> np.ndarray:
        """Episode frames (int64, flat, repeats kept) that anchors ``frames`` of an ``n``-frame
        episode use from camera ``cam``: each anchor, or its ``delta_timestamps`` window."""
        if cam in self.w.cfg.windows.keys():
            return window_indices(frames, n, self.w.cfg.windows.frames[cam])[0].reshape(-1)
        return frames

    def _demand(self, ep: int, cam: str, video, rows: EpisodeRows) -> dict[str, np.ndarray]:
        """Per local frame of (ep, cam): uses over the whole episode (every anchor once, windows
        included) and uses served so far (int64 arrays, length = local frames); ``local_of``: the
        local frame of each episode frame some anchor uses (-1 elsewhere; FrameTimestampError
        here, on the episode's first job, when one has no frame within tolerance)."""
        key = (ep, cam)
        d = self.demand.get(key)
        if d is None:
            idx = self.needed(cam, np.arange(rows.length, dtype=np.int64), rows.length)
            local = video.local_indices(video.from_timestamp + rows.timestamp_s[idx])
            local_of = np.full(rows.length, -1, dtype=np.int64)
            local_of[idx] = local
            m = len(video.span.local_key)
            keys = np.flatnonzero(np.asarray(video.span.local_key, dtype=bool))
            if keys.size == 0 or keys[0] != 0:
                keys = np.concatenate([[0], keys]).astype(np.int64)
            d = {
                "total": np.bincount(local, minlength=m).astype(np.int64),
                "served": np.zeros(m, np.int64),
                "keys": keys,
                "n": m,
                "local_of": local_of,
            }
            self.demand[key] = d
        return d

    def decode_group(self, ep: int, frames: np.ndarray) -> Decoded:
        """Decode, once each, every frame the anchors ``frames`` of episode ``ep`` need.

        Whole GOP runs are decoded on first touch (one batched decoder call per camera and chunk)
        and kept in the process's :class:`~lerobotstream.dataset._decoded_gops.DecodedGopCache` until the
        episode has used them (see its module doc for the memory bound)."""
        assert self.w.cache is not None
        payload = self.w.cache.get(ep)
        rows, serial, _ = payload.extra
        if rows.episode_index != ep:
            raise EpisodeDataError(f"rows of episode {rows.episode_index} returned for episode {ep}", episode_index=ep)
        self.w.serial[ep] = serial
        out = Decoded(rows)
        n = rows.length
        frames = np.asarray(frames, dtype=np.int64)
        with self.lock:
            ep_lock = self.ep_locks.setdefault(ep, threading.Lock())
        with ep_lock:  # one job of an episode at a time: a GOP run is decoded once, not by two jobs
            for cam in self.w.cfg.video_keys:
                idx = self.needed(cam, frames, n)
                video = self.w.video(ep, cam, self.w.checked_payload(ep, cam, payload), serial)
                out.videos[cam] = video
                out.from_timestamps[cam] = video.from_timestamp
                dm = self._demand(ep, cam, video, rows)
                out.local_of[cam] = dm["local_of"]
                local = dm["local_of"][idx]  # the chunk's anchors are among the episode's: never -1
                uniq, counts = np.unique(local, return_counts=True)
                keys, m = dm["keys"], dm["n"]
                gi = np.searchsorted(keys, uniq, side="right") - 1
                starts = keys[gi]
                ends = np.where(gi + 1 < keys.size, keys[np.minimum(gi + 1, keys.size - 1)], m)
                # the chunk's distinct local frames by GOP: uniq is sorted, so each GOP is one slice
                gop_starts, first, nfr = np.unique(starts, return_index=True, return_counts=True)
                uniq_l = uniq.tolist()
                got: dict[int, torch.Tensor] = {}
                runs: list[tuple[int, int, list[int]]] = []  # (gop start, decode stop, frames the chunk needs)
                for g, a, c in zip(gop_starts.tolist(), first.tolist(), nfr.tolist()):
                    fs = uniq_l[a : a + c]
                    held = self.gops.get_run((*self.namespace, ep, cam, serial, g))
                    if held is not None and held[0] <= fs[0] and fs[-1] < held[0] + held[1].shape[0]:
                        f0, block = held
                        for f in fs:
                            got[f] = block[f - f0]
                        continue
                    end = int(ends[a])
                    stop = end if end - g <= _MAX_RUN else min(end, max(fs[-1] + 1, g + _MAX_RUN))
                    runs.append((g, stop, fs))
                t0 = time.perf_counter()
                opens = self.w.decoders.opened
                decoded = 0
                calls = 0
                served, total = dm["served"], dm["total"]
                t1 = t0
                if runs:  # pinned: another decode thread's open cannot evict and close it mid-call
                    with video.pinned_decoder() as dec:
                        t1 = time.perf_counter()
                        for group in _call_groups(runs, _CALL_FRAMES):
                            want = np.concatenate([np.arange(g, e, dtype=np.int64) for g, e, _ in group])
                            data = dec.decode(want)
                            calls += 1
                            o = 0
                            for g, e, fs in group:
                                block = data[o : o + (e - g)]
                                o += e - g
                                decoded += e - g
                                for f in fs:
                                    got[f] = block[f - g]
                                self.gops.put(
                                    (*self.namespace, ep, cam, serial, g),
                                    g,
                                    block,
                                    int(total[g:e].sum() - served[g:e].sum()),
                                )
                t2 = time.perf_counter()
                # this chunk's uses are served (the chunk keeps its own references to the frames)
                dm["served"][uniq] += counts
                self.gops.use_many(
                    [(*self.namespace, ep, cam, serial, g) for g in gop_starts.tolist()],
                    np.add.reduceat(counts, first).tolist(),
                )
                self.w.add(
                    open_s=(t1 - t0) if self.w.decoders.opened != opens else 0.0,
                    decode_s=t2 - t1,
                    frames_decoded=decoded,
                    frames_returned=len(idx),
                    frames_unique=len(uniq),
                    decode_calls=calls,
                )
                out.frames[cam] = got
            info = self.w.cfg.meta.episode(ep)
            for key in self.w.cfg.image_keys:  # each distinct image of the chunk decoded once (Pillow)
                out.images[key] = decode_images(
                    rows.images[key],
                    self.needed(key, frames, n),
                    key=key,
                    episode_index=ep,
                    path=info.data_path,
                    shape=rows.image_shapes.get(key),
                )
        return out

    def reset(self, capacity_bytes: int | None = None) -> None:
        """Forget decoded GOPs and per-episode demand (iterator start/end)."""
        self.gops.clear()
        if capacity_bytes is not None:
            self.gops.capacity_bytes = max(0, int(capacity_bytes))
        self.demand.clear()
        with self.lock:
            self.ep_locks.clear()

    def reset_episode(self, ep: int) -> None:
        """The episode was admitted again (its payload kept): forget its decoded GOPs and demand,
        after any job of its previous admission (the episode's lock)."""
        with self.lock:
            ep_lock = self.ep_locks.setdefault(ep, threading.Lock())
        with ep_lock:
            self.gops.drop((*self.namespace, ep))
            for cam in self.w.cfg.video_keys:
                self.demand.pop((ep, cam), None)

    def drop_episode(self, ep: int) -> None:
        """The episode left the pool: forget its decoded GOPs, demand and lock."""
        self.gops.drop((*self.namespace, ep))
        for cam in self.w.cfg.video_keys:
            self.demand.pop((ep, cam), None)
        with self.lock:
            self.ep_locks.pop(ep, None)
