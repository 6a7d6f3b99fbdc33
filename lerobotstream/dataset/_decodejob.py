"""The episode job: one (dataset, episode) unit of work in a process, from fetch to assembly.

The pipeline makes an :class:`EpisodeJob` when it first admits or prefetches an episode; it lives
until the byte cache frees the episode's payload (:meth:`~EpisodeJob.close`). Its steps:
:meth:`~EpisodeJob.fetch` (a byte-cache fetch thread: Parquet rows + mini-MP4s),
:meth:`~EpisodeJob.decode` (a decode thread: the chunk's frames by GOP, runs not held by the
:class:`DecodedGopCache` decoded in calls of about ``_CALL_FRAMES`` frames; image features too)
and :meth:`~EpisodeJob.assemble` (an assembly thread: one item from a :class:`Decoded`).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from lerobotstream import _heap
from lerobotstream.dataset._assemble import EpisodeRows, assemble_item, window_indices
from lerobotstream.dataset._images import decode_image
from lerobotstream.errors import DecodeError, EpisodeDataError

__all__ = ["DecodedGopCache", "Decoded", "EpisodeJob"]


#: longest GOP run decoded at once past the last needed frame (frames); longer GOPs are decoded in parts
_MAX_RUN = 64
#: frames per decoder call (whole GOP runs grouped up to this): one huge output per chunk is a fresh
#: mmap that page-faults (~0.5 ms per 640x480 frame); call-sized outputs are recycled by the allocator
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


class DecodedGopCache:
    """Bounded per-worker LRU of decoded GOP runs (keyframe → next keyframe, at most ``_MAX_RUN``
    frames past the last needed one), so a GOP is decoded once per episode, not once per chunk. A
    run stays until every use the episode makes of it was served (``demand``), the episode is
    freed, or the LRU evicts it. Cached frames <= ``capacity_bytes`` (0: off). Thread-safe; keys
    ``(episode, camera, payload serial, gop start)``.
    """

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = max(0, int(capacity_bytes))
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, tuple[int, torch.Tensor]] = OrderedDict()  # key -> (first frame, frames)
        self._demand: dict[Hashable, int] = {}
        self.nbytes = 0
        self.peak_nbytes = 0
        self.evictions = 0

    @staticmethod
    def _size(t: torch.Tensor) -> int:
        return int(t.numel()) * int(t.element_size())

    def get_run(self, key: Hashable) -> tuple[int, torch.Tensor] | None:
        """The cached run ``key`` as ``(first local frame, (T,C,H,W) frames)``, or None (one lock
        for all of a GOP's frames; counts as a use for the LRU order)."""
        with self._lock:
            ent = self._items.get(key)
            if ent is not None:
                self._items.move_to_end(key)
            return ent

    def put(self, key: Hashable, first: int, frames: torch.Tensor, demand: int) -> None:
        """Cache ``frames`` (T,C,H,W) = local frames ``first .. first+T-1`` of run ``key`` with
        ``demand`` remaining uses (replaces an older entry of the key)."""
        if self.capacity_bytes <= 0 or demand <= 0:
            return
        size = self._size(frames)
        if size > self.capacity_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.nbytes -= self._size(old[1])
            self._items[key] = (int(first), frames)
            self._demand[key] = int(demand)
            self.nbytes += size
            while self.nbytes > self.capacity_bytes and self._items:
                k, (_, t) = self._items.popitem(last=False)
                self._demand.pop(k, None)
                self.nbytes -= self._size(t)
                self.evictions += 1
            self.peak_nbytes = max(self.peak_nbytes, self.nbytes)

    def use_many(self, keys: list, counts: list) -> None:
        """``n`` uses of run ``key`` were served, for each ``(key, n)``: a run no use remains of is dropped."""
        with self._lock:
            for key, n in zip(keys, counts):
                left = self._demand.get(key)
                if left is None:
                    continue
                left -= int(n)
                if left > 0:
                    self._demand[key] = left
                    continue
                self._demand.pop(key, None)
                ent = self._items.pop(key, None)
                if ent is not None:
                    self.nbytes -= self._size(ent[1])

    def drop(self, prefix: tuple) -> None:
        """Forget every run whose key starts with ``prefix`` (e.g. ``(episode,)``)."""
        n = len(prefix)
        with self._lock:
            for k in [k for k in self._items if k[:n] == prefix]:
                self.nbytes -= self._size(self._items.pop(k)[1])
                self._demand.pop(k, None)
            for k in [k for k in self._demand if k[:n] == prefix]:
                self._demand.pop(k, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._demand.clear()
            self.nbytes = 0

    def __len__(self) -> int:
        return len(self._items)


@dataclass(slots=True)
class Decoded:
    """One :meth:`EpisodeJob.decode`'s result: rows and, per camera, the distinct decoded frames."""

    rows: EpisodeRows
    frames: dict[str, dict[int, torch.Tensor]] = field(default_factory=dict)  # camera -> local frame -> (C,H,W) view
    videos: dict[str, Any] = field(default_factory=dict)  # camera -> its EpisodeVideo
    images: dict[str, dict[int, torch.Tensor]] = field(default_factory=dict)  # key -> episode frame -> frame
    #: camera -> int64 (episode length,): local frame of each episode frame the anchors use, else -1
    local_of: dict[str, np.ndarray] = field(default_factory=dict)


class EpisodeJob:
    """One (dataset, episode) of a worker's stream (see the module doc); its :meth:`decode` calls
    run one at a time.

    Args:
        reader: its dataset's :class:`~lerobotstream.dataset._reader.DatasetReader`.
        key (int): the episode's id in the worker's caches (a mixture's ``offset + episode``).
        episode (int): the episode index in its dataset.
        cache, gops: the worker's ``EpisodeByteCache`` and :class:`DecodedGopCache`.
        size: ``size() -> bytes`` the byte cache reserves (checked against its plan's budget).
        transforms: image transforms applied on the assembly threads (None: none, or in-process).
        dataset_index (int | None): added to each item (a mixture), ``dropped``: keys removed.
    """

    def __init__(
        self,
        reader: Any,
        key: int,
        episode: int,
        cache: Any,
        gops: DecodedGopCache,
        size: Callable[[], int],
        *,
        transforms: Callable[[Any], Any] | None = None,
        dataset_index: int | None = None,
        dropped: tuple[str, ...] = (),
    ) -> None:
        self.reader, self.key, self.episode = reader, int(key), int(episode)
        self.cache, self.gops, self._size = cache, gops, size
        self.transforms, self.dataset_index, self.dropped = transforms, dataset_index, dropped
        self.serial: int | None = None  # the serial of the payload decoded last (decoder keys)
        self.demand: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self._nbytes: int | None = None

    @property
    def nbytes(self) -> int:
        """Bytes the byte cache reserves for the episode (sized when first asked)."""
        if self._nbytes is None:
            self._nbytes = int(self._size())
        return self._nbytes

    def fetch(self):
        """The episode's payload (runs on a fetch thread of the byte cache)."""
        return self.reader.fetch(self.episode)

    def needed(self, cam: str, frames: np.ndarray, n: int) -> np.ndarray:
        """Episode frames (int64, flat, repeats kept) that anchors ``frames`` of an ``n``-frame
        episode use from camera ``cam``: each anchor, or its ``delta_timestamps`` window."""
        windows = self.reader.cfg.windows
        if cam in windows.keys():
            return window_indices(frames, n, windows.frames[cam])[0].reshape(-1)
        return frames

    def _demand(self, cam: str, video, rows: EpisodeRows) -> dict[str, Any]:
        """Per local frame of the camera: uses over the episode (windows included) and uses served
        (int64 arrays); ``local_of``: the local frame of each episode frame some anchor uses (-1
        elsewhere; FrameTimestampError on the first decode when one has no frame within tolerance)."""
        d = self.demand.get(cam)
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
            self.demand[cam] = d
        return d

    def decode(self, frames: np.ndarray) -> Decoded:
        """Decode, once each, every frame the anchors ``frames`` of the episode need (whole GOP
        runs on first touch, kept in the :class:`DecodedGopCache` until the episode used them).

        Bytes served by the disk cache (``cache_dir``) that fail to decode are fetched once more
        from the store and decoded again (``DatasetReader.refetch_from_store``).

        Raises:
            DecodeError: the decoder failed on the store's bytes.
        """
        payload = self.cache.get(self.key)
        serial = payload.extra[1]
        try:
            return self._decode(frames, payload)
        except DecodeError as err:
            with self.lock:  # one refetch, whichever decode thread of the episode failed first
                again = payload.extra[1] != serial or self.reader.refetch_from_store(self.episode, err, payload)
            if not again:
                raise
        return self._decode(frames, payload)  # the same payload, refetched in place

    def _decode(self, frames: np.ndarray, payload: Any) -> Decoded:
        ep, reader = self.episode, self.reader
        rows, serial, _ = payload.extra
        if rows.episode_index != ep:
            raise EpisodeDataError(f"rows of episode {rows.episode_index} returned for episode {ep}", episode_index=ep)
        self.serial = serial
        out = Decoded(rows)
        n = rows.length
        frames = np.asarray(frames, dtype=np.int64)
        with self.lock:  # one decode of an episode at a time: a GOP run is decoded once, not twice
            for cam in reader.cfg.video_keys:
                idx = self.needed(cam, frames, n)
                video = reader.video(ep, cam, reader.checked_payload(ep, cam, payload), serial)
                out.videos[cam] = video
                demand = self._demand(cam, video, rows)
                out.local_of[cam] = demand["local_of"]
                local = demand["local_of"][idx]  # the chunk's anchors are among the episode's: never -1
                uniq, counts = np.unique(local, return_counts=True)
                keys, m = demand["keys"], demand["n"]
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
                    held = self.gops.get_run((self.key, cam, serial, g))
                    if held is not None and held[0] <= fs[0] and fs[-1] < held[0] + held[1].shape[0]:
                        f0, block = held
                        for f in fs:
                            got[f] = block[f - f0]
                        continue
                    end = int(ends[a])
                    stop = end if end - g <= _MAX_RUN else min(end, max(fs[-1] + 1, g + _MAX_RUN))
                    runs.append((g, stop, fs))
                t0 = t1 = time.perf_counter()
                opens = reader.decoders.opened
                decoded = calls = 0
                served, total = demand["served"], demand["total"]
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
                                    (self.key, cam, serial, g),
                                    g,
                                    block,
                                    int(total[g:e].sum() - served[g:e].sum()),
                                )
                t2 = time.perf_counter()
                # this chunk's uses are served (the chunk keeps its own references to the frames)
                demand["served"][uniq] += counts
                self.gops.use_many(
                    [(self.key, cam, serial, g) for g in gop_starts.tolist()],
                    np.add.reduceat(counts, first).tolist(),
                )
                reader.add(
                    open_s=(t1 - t0) if reader.decoders.opened != opens else 0.0,
                    decode_s=t2 - t1,
                    frames_decoded=decoded,
                    frames_returned=len(idx),
                    frames_unique=len(uniq),
                    decode_calls=calls,
                )
                out.frames[cam] = got
            info = reader.cfg.meta.episode(ep)
            for key in reader.cfg.image_keys:  # each distinct image of the chunk decoded once (Pillow)
                out.images[key] = {
                    f: decode_image(
                        rows.images[key][f],
                        key=key,
                        episode_index=ep,
                        frame_index=f,
                        path=info.data_path,
                        shape=rows.image_shapes.get(key),
                    )
                    for f in np.unique(self.needed(key, frames, n)).tolist()
                }
        return out

    def admitted(self, reused: bool) -> None:
        """The pipeline admitted the episode (payload ``reused`` from a kept entry, or fetched): counted;
        a reused episode keeps its decoders, and forgets what its previous admission served."""
        self.reader.count_admission(self.episode, reused)
        if reused:
            with self.lock:
                self.gops.drop((self.key,))
                self.demand.clear()

    def assemble(self, frame: int, dec: Decoded, slot=None) -> dict[str, Any]:
        """The item of anchor ``frame`` from a :meth:`decode` result (runs on an assembly thread;
        ``slot``: where its frames may be written, ``_assemble.SlotFn``)."""

        def frames(e: int, cam: str, idx: np.ndarray) -> list[torch.Tensor]:
            got = dec.frames[cam]
            local = dec.local_of[cam][idx].tolist()  # looked up once per episode by the decode
            if min(local) < 0:  # a frame no anchor was known to use: the full lookup (and its error)
                local = (
                    dec.videos[cam].local_indices(dec.videos[cam].from_timestamp + dec.rows.timestamp_s[idx]).tolist()
                )
            return [got[i] for i in local]

        reader = self.reader
        cfg = reader.cfg
        item = assemble_item(
            dec.rows,
            frame,
            windows=cfg.windows,
            video_keys=cfg.video_keys,
            frames=frames,
            tasks=cfg.meta.tasks,
            return_uint8=cfg.options.return_uint8,
            image_transforms=self.transforms,
            camera_keys=cfg.cameras.transform_keys,
            depth=cfg.cameras.dequantizers,
            images=dec.images,
            image_depth=cfg.cameras.image_depth,
            slot=slot,
        )
        reader.add(items=1)
        if reader.spans.deferring:
            reader.spans.serving()  # fetches verify from now on
        for key in self.dropped:
            item.pop(key, None)
        if self.dataset_index is not None:
            item["dataset_index"] = torch.tensor(self.dataset_index, dtype=torch.int64)
        return item

    def close(self) -> None:
        """The byte cache freed the episode's payload: forget its decoded GOPs and demand, close its
        decoders and give free heap memory back to the OS (:func:`lerobotstream._heap.trim`)."""
        self.gops.drop((self.key,))
        self.demand.clear()
        if self.serial is not None:
            for cam in self.reader.cfg.video_keys:
                self.reader.decoders.pop((self.episode, cam, self.serial))
        _heap.trim()
