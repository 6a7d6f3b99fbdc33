"""Decode frames of one (episode, camera) mini-MP4 with torchcodec (CPU or NVDEC), PyAV fallback.

No scan at open (torchcodec gets ``custom_frame_mappings`` built from the span); every returned
frame's PTS is checked against the PTS the sample table predicts.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial

import numpy as np
import torch

from lerobotstream.constants import DEFAULT_TOLERANCE_S
from lerobotstream.decode._cuda import FALLBACK_STATUS, FallbackStatus, resolve_device
from lerobotstream.decode._depth import DepthDecoder, checked_request
from lerobotstream.decode._frames import frames_to_float_chw
from lerobotstream.decode._lean import import_in_worker
from lerobotstream.errors import DecodeError, FrameTimestampError
from lerobotstream.mp4._tolerance import frames_within_tolerance


class EpisodeDecoder:
    """An open decoder over one mini-MP4 (bytes), addressed by local frame index.

    Args:
        mini_mp4, span: the file from ``mp4.synthesize`` (bytes-like) and the ``Span`` it was built from.
        codec: fourcc of the track (for the NVDEC check).
        device: ``"cpu"`` or ``"cuda[:N]"`` (NVDEC when capable, else counted CPU fallback).
        num_threads: FFmpeg threads per decoder (torchcodec ``num_ffmpeg_threads``).
        label: text naming episode/camera/file in errors.
        allow_pyav: decode with PyAV when torchcodec rejects the file (counted, logged).
        status: where fallbacks are counted (default: the process-wide ``FALLBACK_STATUS``).

    Raises:
        DecodeError: neither backend can open the file.
    """

    def __init__(
        self,
        mini_mp4,
        span,
        *,
        codec: str = "",
        device: str | None = "cpu",
        num_threads: int = 1,
        label: str = "",
        allow_pyav: bool = True,
        status: FallbackStatus | None = None,
    ) -> None:
        self.pid = os.getpid()
        self.span = span
        self.label = label
        self.status = status or FALLBACK_STATUS
        self.lock = threading.Lock()
        self._data = bytes(mini_mp4)
        self.expected_pts_ticks = np.asarray(span.local_pts_ticks, dtype=np.int64) - int(span.start_pts_ticks)
        self.timescale = int(span.media_timescale)
        self.expected_pts_s = self.expected_pts_ticks / self.timescale
        self._pts_tol_s = max(0.5 / self.timescale, 1e-7)
        self.device = resolve_device(device, codec, status=self.status)
        self.backend = "torchcodec"
        self._closed = False
        self._tc = None
        self._pyav_frames = None
        self.frames_decoded = 0
        try:
            self._tc = self._open_torchcodec(self.device, num_threads)
        except Exception as e:
            if self.device != "cpu":
                self.status.record_cpu(f"torchcodec could not open on {self.device}: {_short(e)}")
                self.device = "cpu"
                try:
                    self._tc = self._open_torchcodec("cpu", num_threads)
                except Exception as e2:
                    e = e2
            if self._tc is None:
                if not allow_pyav:
                    raise DecodeError(f"{label}: torchcodec cannot open the mini-MP4: {_short(e)}") from e
                self.status.record_pyav(f"{label}: {_short(e)}")
                self.backend = "pyav"

    def _open_torchcodec(self, device: str, num_threads: int):
        import_in_worker()  # a DataLoader worker's first decoder: torchcodec without torch._dynamo
        from torchcodec.decoders import VideoDecoder

        # the span's frames in local ticks (after the mini-MP4's edit list): no scan at open
        dur = np.asarray(self.span.local_duration, dtype=np.int64)
        key = np.asarray(self.span.local_key, dtype=bool)
        frames = [
            {"pts": int(p), "duration": int(d), "key_frame": int(k)}
            for p, d, k in zip(self.expected_pts_ticks, dur, key)
        ]
        mappings = json.dumps({"frames": frames})
        return VideoDecoder(self._data, device=device, num_ffmpeg_threads=num_threads, custom_frame_mappings=mappings)

    @property
    def num_frames(self) -> int:
        return len(self.expected_pts_ticks)

    def decode(self, local_indices: Sequence[int]) -> torch.Tensor:
        """Frames at local indices, in the requested order (repeats allowed); each distinct frame
        is decoded once, in ascending order.

        Returns:
            torch.uint8 tensor of shape ``(T, C, H, W)`` (on the decoder's device).

        Raises:
            DecodeError: backend failure, closed decoder, use across fork, or a returned PTS that
                differs from the sample table's.
        """
        idx = checked_request(self.label, self.pid, local_indices, self.num_frames)
        ascending = idx.size == 1 or bool((idx[1:] > idx[:-1]).all())
        if ascending:
            uniq, inverse = idx, None
        else:
            uniq, inverse = np.unique(idx, return_inverse=True)
        with self.lock:
            if self._closed:
                raise DecodeError(
                    f"{self.label}: internal error: decode() on a closed decoder (it was closed "
                    "while still in use; pin it with OpenDecoderLRU.acquire/pinned)"
                )
            try:
                if self.backend == "torchcodec":
                    first, last = int(uniq[0]), int(uniq[-1])
                    if last - first + 1 == uniq.size:  # contiguous run: one range call, no per-index checks
                        batch = self._tc.get_frames_in_range(first, last + 1)
                    else:
                        batch = self._tc.get_frames_at(uniq.tolist())
                    data, pts_s = batch.data, batch.pts_seconds.double().cpu().numpy()
                else:
                    data, pts_s = self._pyav_decode(uniq)
            except DecodeError:
                raise
            except Exception as e:
                raise DecodeError(
                    f"{self.label}: {self.backend} failed on local frames {uniq[:8].tolist()}: {_short(e)}"
                ) from e
            self.frames_decoded += int(uniq.size)
        want = self.expected_pts_s[uniq]
        if pts_s.shape != want.shape:
            raise DecodeError(f"{self.label}: decoder returned {pts_s.size} frames for {uniq.size} requested")
        bad = np.flatnonzero(~(np.abs(pts_s - want) < self._pts_tol_s))  # NaN is bad too
        if bad.size:
            b = int(bad[0])
            raise DecodeError(
                f"{self.label}: decoder returned pts {pts_s[b]:.6f} s for local frame "
                f"{int(uniq[b])}, the sample table says {want[b]:.6f} s"
            )
        if inverse is None:
            return data
        return data[torch.from_numpy(inverse.reshape(-1).astype(np.int64)).to(data.device)]

    def _pyav_decode(self, uniq: np.ndarray):
        if self._pyav_frames is None:
            self._pyav_frames = _pyav_decode_all(self._data, self.label)
        by_pts = self._pyav_frames
        out = []
        for i in uniq:
            t = int(self.expected_pts_ticks[i])
            if t not in by_pts:
                raise DecodeError(f"{self.label}: PyAV produced no frame with pts {t}/{self.timescale} s")
            out.append(by_pts[t])
        return torch.stack(out), self.expected_pts_ticks[uniq] / self.timescale

    def close(self) -> None:
        """Release the backend decoder (idempotent)."""
        with self.lock:
            self._closed = True
            self._tc = None
            self._pyav_frames = None
            self._data = b""

    @property
    def closed(self) -> bool:
        return self._closed


def _pyav_decode_all(data: bytes, label: str) -> dict[int, torch.Tensor]:
    """Every frame of a mini-MP4 with PyAV (no frame threading, flushed), keyed by pts in the
    *stream* time base (never ``frame.index``/``frame.time_base``)."""
    import av

    out: dict[int, torch.Tensor] = {}
    with av.open(io.BytesIO(data), "r") as container:
        stream = container.streams.video[0]
        packets = [p for p in container.demux(stream) if p.size] + [None]  # None: the flush
        for frame in (f for p in packets for f in stream.codec_context.decode(p)):
            if frame.pts is not None:
                rgb = frame.to_ndarray(format="rgb24")
                out[int(frame.pts)] = torch.from_numpy(np.ascontiguousarray(rgb.transpose(2, 0, 1)))
    return out


def _short(e: BaseException) -> str:
    s = f"{type(e).__name__}: {e}"
    return s if len(s) < 400 else s[:400] + "..."


class EpisodeVideo:
    """Frames of one (episode, camera) addressed like the map-style dataset.

    The episode's frame ``i`` is the source frame whose PTS is within ``tolerance_s`` (strictly)
    of ``from_timestamp + i / fps`` (float64, never the float32 ``timestamp`` column).

    Args:
        table, span, mini_mp4: the source's sample table (or index view), ``mp4.plan_span(table, ...)``
            covering the episode, and ``mp4.synthesize(table, span, payload)``.
        episode_index, camera, path: identify the episode in errors.
        from_timestamp: the episode's start in the source (``videos/<camera>/from_timestamp``).
        fps: dataset fps (int or Fraction-like).
        tolerance_s: strict bound on |source pts - query| (default 1e-4 s).
        device, num_threads, allow_pyav, status: passed to :class:`EpisodeDecoder`.
        cache, cache_key: an :class:`OpenDecoderLRU` holding the decoder under ``cache_key``
            (default ``(episode_index, camera)``), reopened after eviction.
        depth: a depth camera, decoded on the CPU by :class:`~lerobotstream.decode._depth.DepthDecoder`
            (a CUDA ``device`` is recorded as a CPU fallback in ``status``).
    """

    def __init__(
        self,
        table,
        span,
        mini_mp4,
        *,
        episode_index: int,
        camera: str,
        path: str,
        from_timestamp: float,
        fps,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        device: str | None = "cpu",
        num_threads: int = 1,
        allow_pyav: bool = True,
        status: FallbackStatus | None = None,
        cache=None,
        cache_key=None,
        depth: bool = False,
    ) -> None:
        if not tolerance_s > 0:
            raise ValueError(f"tolerance_s must be > 0, got {tolerance_s}")
        self.span = span
        self.episode_index = int(episode_index)
        self.camera = camera
        self.path = path
        self.from_timestamp = float(from_timestamp)
        self.fps = fps
        self.tolerance_s = float(tolerance_s)
        self.codec = str(getattr(table, "codec", ""))
        self.source_pts_s = np.asarray(table.pts_s, dtype=np.float64)[np.asarray(span.local_sample, dtype=np.int64)]
        self.depth = bool(depth)
        if self.depth:
            if device not in (None, "cpu"):
                (status or FALLBACK_STATUS).record_cpu(
                    f"camera {camera!r}: depth video (gray12le) is decoded on the CPU "
                    "with PyAV (NVDEC/torchcodec return 8-bit RGB only)"
                )
            self._factory = partial(DepthDecoder, mini_mp4, span, num_threads=num_threads, label=self.label)
        else:
            kw = dict(codec=self.codec, device=device, allow_pyav=allow_pyav, status=status, label=self.label)
            self._factory = partial(EpisodeDecoder, mini_mp4, span, num_threads=num_threads, **kw)
        self._cache = cache
        self._key = cache_key if cache_key is not None else (self.episode_index, camera)
        self._dec: EpisodeDecoder | None = None
        self._ep_local: np.ndarray | None = None

    @property
    def label(self) -> str:
        return f"episode {self.episode_index}, camera {self.camera!r}, file {self.path!r}"

    def decoder(self) -> EpisodeDecoder:
        """The open decoder (from the cache when one is attached), **not pinned**."""
        if self._cache is not None:
            return self._cache.get_or_open(self._key, self._factory)
        if self._dec is None or self._dec.closed or self._dec.pid != os.getpid():
            self._dec = self._factory()
        return self._dec

    @contextmanager
    def pinned_decoder(self) -> Iterator[EpisodeDecoder]:
        """``with video.pinned_decoder() as dec:``: the open decoder, pinned in the attached
        :class:`OpenDecoderLRU` for the block."""
        if self._cache is None:
            yield self.decoder()
            return
        with self._cache.pinned(self._key, self._factory) as dec:
            yield dec

    def query_times(self, frame_indices: Sequence[int]) -> np.ndarray:
        """Source times (float64 s) of episode frames: ``from_timestamp + i / fps``."""
        idx = np.asarray(frame_indices, dtype=np.int64).reshape(-1)
        return self.from_timestamp + idx / float(self.fps)

    def local_indices(self, source_times_s: np.ndarray) -> np.ndarray:
        """Local frame index of each source time (strictly within tolerance: ``mp4.within_tolerance``),
        else FrameTimestampError."""
        pts = self.source_pts_s
        q = np.asarray(source_times_s, dtype=np.float64).reshape(-1)
        pick, _, ok = frames_within_tolerance(pts, None, q, self.tolerance_s)
        bad = np.flatnonzero(~ok)
        if bad.size:
            b = int(bad[0])
            dist = np.abs(pts[pick] - q)
            raise FrameTimestampError(
                f"{self.label}: no frame within {self.tolerance_s} s of {q[b]:.6f} s "
                f"(episode time {q[b] - self.from_timestamp:.6f} s); nearest frame is at "
                f"{pts[pick[b]]:.6f} s (|diff| {dist[b]:.6f} s)",
                episode_index=self.episode_index,
                camera=self.camera,
                path=self.path,
                requested_s=float(q[b]),
                nearest_s=float(pts[pick[b]]),
            )
        return pick

    def _episode_to_local(self) -> np.ndarray:
        """Local index of episode frame ``i`` for ``i < len(span)`` (-1: none within tolerance), by
        :meth:`local_indices`' rule, computed once."""
        m = self._ep_local
        if m is None:
            pts = self.source_pts_s
            q = self.query_times(np.arange(len(pts), dtype=np.int64))
            pick, _, ok = frames_within_tolerance(pts, None, q, self.tolerance_s)
            m = self._ep_local = np.where(ok, pick, -1).astype(np.int64)
        return m

    def frames_at(self, frame_indices: Sequence[int], *, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
        """Frames of episode frame indices, shape ``(T, C, H, W)``, uint8 (or float32 in [0, 1]);
        a depth camera gives its int16 ``(T, 1, H, W)`` 12-bit codes whatever ``dtype`` says
        (dequantise with :class:`~lerobotstream.decode._depth.DepthDequantizer`)."""
        idx = np.asarray(frame_indices, dtype=np.int64).reshape(-1)
        m = self._episode_to_local()
        if idx.size and idx.min() >= 0 and idx.max() < m.size:
            local = m[idx]
            if local.min() >= 0:
                return self._decode_local(local, dtype)
        return self._decode_local(self.local_indices(self.query_times(idx)), dtype)  # FrameTimestampError

    def frames_played_at(self, timestamps_s: Sequence[float], *, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
        """Frames at episode-relative timestamps (seconds), shape ``(T, C, H, W)``."""
        t = np.asarray(timestamps_s, dtype=np.float64).reshape(-1)
        return self._decode_local(self.local_indices(self.from_timestamp + t), dtype)

    def _decode_local(self, local: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        with self.pinned_decoder() as dec:
            frames = dec.decode(local)
        if dtype == torch.uint8 or self.depth:
            return frames
        if dtype == torch.float32:
            out = frames_to_float_chw(list(frames.unbind(0)), squeeze=False)  # one C pass, CPU frames
            if out is not None:
                return out
        if dtype.is_floating_point:
            return frames.to(dtype) / 255.0
        raise ValueError(f"dtype must be torch.uint8 or a float dtype, got {dtype}")

    def close(self) -> None:
        if self._cache is not None:
            self._cache.pop(self._key)
        elif self._dec is not None:
            self._dec.close()
            self._dec = None
