"""Depth video: the 12-bit codes of a ``gray12le`` HEVC mini-MP4, losslessly, and LeRobot's dequantiser.

PyAV, not torchcodec (which converts to 8-bit RGB): PyAV hands out the decoder's own ``gray12le``
plane, as LeRobot 0.6.1's map-style reads depth. Frames are decoded from a safe seek point of the
span (``span.local_key``) and identified by PTS against the span's. Dequantisation is LeRobot
0.6.1's ``dequantize_depth`` torch path as a 65536-entry lookup table (see :class:`DepthDequantizer`).
"""

from __future__ import annotations

import io
import math
import os
import threading
from collections import deque
from collections.abc import Sequence

import numpy as np
import torch

from lerobotstream.errors import DecodeError

__all__ = ["DepthDecoder", "DepthDequantizer", "dequantize_reference", "DEPTH_QMAX", "MM_PER_METRE"]

#: highest 12-bit code (LeRobot's ``DEPTH_QMAX``)
DEPTH_QMAX = 4095
#: LeRobot's ``MM_PER_METRE``
MM_PER_METRE = 1000.0
_UINT16_MAX = 65535
_GRAY = "gray12le"


def dequantize_reference(
    codes: torch.Tensor, depth_min: float, depth_max: float, shift: float, use_log: bool, output_unit: str = "mm"
) -> torch.Tensor:
    """LeRobot 0.6.1's ``dequantize_depth`` (torch path, channel-first output), op for op.

    Args:
        codes: integer codes ``(..., 1, H, W)`` or ``(..., H, W)`` (int16 views of uint16 codes
            converted by the caller).
        depth_min, depth_max, shift: metres; use_log: log quantisation.
        output_unit: ``"mm"`` (millimetres, rounded, clamped to [0, 65535]) or ``"m"`` (metres
            clamped to [depth_min, depth_max]) of the returned float32 ``(..., 1, H, W)``.
    """
    if output_unit not in ("mm", "m"):
        raise ValueError(f"output_unit must be 'm' or 'mm', got {output_unit!r}")
    offset, top = float(depth_min), float(depth_max)
    if use_log:
        offset, top = math.log(offset + float(shift)), math.log(top + float(shift))
    scale = (top - offset) / DEPTH_QMAX
    q = codes
    if q.ndim >= 3:
        q = q.squeeze(-3) if q.shape[-3] == 1 else q.squeeze(-1)
    buf = q.to(dtype=torch.float32, copy=True)
    buf.mul_(scale).add_(offset)
    if use_log:
        buf.exp_().sub_(float(shift))
    buf.clamp_(float(depth_min), float(depth_max))
    buf.unsqueeze_(-3)
    if output_unit == "m":
        return buf
    return buf.mul_(MM_PER_METRE).round_().clamp_(0.0, _UINT16_MAX)


def checked_request(label: str, pid: int, local_indices, num_frames: int) -> np.ndarray:
    """A decoder request as flat int64 local frame indices, checked: same process as the decoder's
    opener (``pid``), at least one frame, every index in ``[0, num_frames)``.

    Raises:
        DecodeError: naming ``label`` (episode, camera, file).
    """
    if os.getpid() != pid:
        raise DecodeError(f"{label}: decoder opened in process {pid} used in {os.getpid()} (fork)")
    idx = np.asarray(local_indices, dtype=np.int64).reshape(-1)
    if idx.size == 0:
        raise DecodeError(f"{label}: no frames requested")
    if idx.min() < 0 or idx.max() >= num_frames:
        raise DecodeError(f"{label}: local frame index outside [0, {num_frames})")
    return idx


class DepthDequantizer:
    """Codes → depth in ``output_unit`` (``"mm"`` or ``"m"``), bitwise as LeRobot 0.6.1's map-style;
    ``depth_min, depth_max, shift, use_log``: the camera's quantiser (``DatasetMeta.depth_quantizer``).

    ``__call__(views)``: T int16 ``(1, H, W)`` code tensors (views of the decoder's uint16 codes)
    → a new contiguous float32 ``(T, 1, H, W)`` tensor. The lookup table is used only where it
    is checked to be independent of where a code sits in a tensor (torch's vectorised body vs.
    scalar tail); else the ops run on each item's tensor.
    """

    def __init__(
        self, depth_min: float, depth_max: float, shift: float, use_log: bool, output_unit: str = "mm"
    ) -> None:
        self.params = (float(depth_min), float(depth_max), float(shift), bool(use_log))
        self.output_unit = output_unit
        all_codes = torch.arange(_UINT16_MAX + 1, dtype=torch.int32).reshape(1, 1, -1)
        lut = dequantize_reference(all_codes, *self.params, output_unit=output_unit).reshape(-1).contiguous()
        self.lut = lut.numpy()
        self.exact_lut = self._position_independent(lut)

    def _position_independent(self, lut: torch.Tensor) -> bool:
        """Whether each code dequantises to the same value wherever it sits in a tensor."""
        perm = np.random.default_rng(0).permutation(_UINT16_MAX + 1).astype(np.int32)
        runs = [torch.arange(_UINT16_MAX + 1, dtype=torch.int32).flip(0)[1:], torch.from_numpy(perm)[:4099]]
        runs += [torch.tensor([c], dtype=torch.int32) for c in [*range(0, 4096, 97), 4095]]  # the scalar path only
        return all(
            torch.equal(
                dequantize_reference(r.reshape(1, 1, -1), *self.params, output_unit=self.output_unit).reshape(-1),
                lut[r.long()],
            )
            for r in runs
        )

    def __call__(self, views: Sequence[torch.Tensor]) -> torch.Tensor:
        views = list(views)
        shape = tuple(views[0].shape)
        if self.exact_lut:
            out = np.empty((len(views), *shape), dtype=np.float32)
            for t, v in enumerate(views):
                codes = v.numpy().view(np.uint16)
                np.take(self.lut, codes, out=out[t])
            return torch.from_numpy(out)
        codes = torch.stack([v.to(torch.int32) & 0xFFFF for v in views])  # map-style's (T, 1, H, W) layout
        return dequantize_reference(codes, *self.params, output_unit=self.output_unit).contiguous()


class DepthDecoder:
    """An open PyAV decoder over one depth (``gray12le`` HEVC) mini-MP4, by local frame index:
    :class:`~lerobotstream.decode._decoder.EpisodeDecoder`'s surface (``num_threads`` 0: FFmpeg
    chooses), but ``decode`` returns the 12-bit codes (see :meth:`decode`).

    Raises:
        DecodeError: PyAV is missing or cannot open the file, or its stream is not what the span
            describes (packet count / PTS).
    """

    def __init__(self, mini_mp4, span, *, num_threads: int = 1, label: str = "") -> None:
        try:
            import av
        except ImportError as e:  # pragma: no cover - av is a dependency of depth datasets
            raise DecodeError(
                "depth video needs PyAV (pip install av): torchcodec cannot return 12-bit gray codes"
            ) from e
        self.pid = os.getpid()
        self.span = span
        self.label = label
        self.backend = "pyav"
        self.device = "cpu"
        self.lock = threading.Lock()
        self.frames_decoded = 0
        self._closed = False
        self.expected_pts_ticks = np.asarray(span.local_pts_ticks, dtype=np.int64) - int(span.start_pts_ticks)
        self._local_of_pts = {int(p): j for j, p in enumerate(self.expected_pts_ticks.tolist())}
        keys = np.flatnonzero(np.asarray(span.local_key, dtype=bool))
        if keys.size == 0 or keys[0] != 0:
            keys = np.concatenate([[0], keys]).astype(np.int64)
        self._keys = keys
        try:
            with av.open(io.BytesIO(bytes(mini_mp4)), "r") as container:
                stream = container.streams.video[0]
                packets = [p for p in container.demux(stream) if p.size]
                name, extradata = stream.codec_context.name, stream.codec_context.extradata
            ctx = av.CodecContext.create(name, "r")
            if extradata:
                ctx.extradata = extradata
            ctx.thread_count = int(num_threads)
        except Exception as e:
            raise DecodeError(f"{label}: PyAV cannot open the depth mini-MP4: {type(e).__name__}: {e}") from e
        n_samples = int(span.sample_stop) - int(span.sample_start)
        if len(packets) != n_samples:
            raise DecodeError(
                f"{label}: the depth mini-MP4 demuxes to {len(packets)} packets, the span has {n_samples} samples"
            )
        self._packets = packets
        # packet (decode order) of each local frame's sample
        self._packet_of_local = np.asarray(span.local_sample, dtype=np.int64) - int(span.sample_start)
        for j in self._keys.tolist():
            p = packets[int(self._packet_of_local[j])]
            if p.pts is None or int(p.pts) != int(self.expected_pts_ticks[j]):
                raise DecodeError(
                    f"{label}: depth packet of local frame {j} has pts {p.pts}, the sample table says "
                    f"{int(self.expected_pts_ticks[j])}"
                )
        self._ctx = ctx
        self._next_packet = 0  # next packet to send after the last flush
        self._last_out = -1  # highest local frame output since the last flush
        self._eof = True  # a flush is needed before decoding
        self._pending: deque = deque()  # frames the codec returned but decode() did not take yet

    @property
    def num_frames(self) -> int:
        return len(self.expected_pts_ticks)

    @property
    def closed(self) -> bool:
        return self._closed

    def _restart(self, key: int) -> None:
        self._ctx.flush_buffers()
        self._pending.clear()
        self._next_packet = int(self._packet_of_local[key])
        self._last_out = key - 1
        self._eof = False

    def _next_frame(self):
        """The next decoded frame from the current position (sending packets as needed), or None."""
        while not self._pending:
            if self._next_packet < len(self._packets):
                packet = self._packets[self._next_packet]
                self._next_packet += 1
                self._pending.extend(self._ctx.decode(packet))
            elif not self._eof:
                self._eof = True
                self._pending.extend(self._ctx.decode(None))
            else:
                return None
        return self._pending.popleft()

    def decode(self, local_indices: Sequence[int]) -> torch.Tensor:
        """Codes of local frames, in the requested order (repeats allowed).

        Returns:
            torch.int16 ``(T, 1, H, W)`` (the uint16 codes' bits; values 0..4095).

        Raises:
            DecodeError: closed decoder, use across fork, an index outside the span, a frame the
                decoder skipped or never produced, or a stream that is not ``gray12le``.
        """
        idx = checked_request(self.label, self.pid, local_indices, self.num_frames)
        uniq, inverse = np.unique(idx, return_inverse=True)
        got: list[np.ndarray] = []
        with self.lock:
            if self._closed:
                raise DecodeError(f"{self.label}: internal error: decode() on a closed decoder")
            try:
                for t in uniq.tolist():
                    key = int(self._keys[np.searchsorted(self._keys, t, side="right") - 1])
                    if self._eof or t <= self._last_out or key > self._last_out + 1:
                        self._restart(key)  # behind, or a seek point lies between: jump there
                    arr = None
                    while (frame := self._next_frame()) is not None:
                        j = self._local_of_pts.get(int(frame.pts)) if frame.pts is not None else None
                        if j is None:
                            continue  # a leading picture before the span's first frame
                        self._last_out = max(self._last_out, j)
                        if j == t:
                            if frame.format.name != _GRAY:
                                raise DecodeError(
                                    f"{self.label}: the depth stream decodes as {frame.format.name!r}; only "
                                    f"{_GRAY!r} (12-bit gray, LeRobot 0.6's depth encoder) is decoded losslessly"
                                )
                            arr = frame.to_ndarray(format=_GRAY)
                            break
                        if j > t:
                            raise DecodeError(
                                f"{self.label}: the decoder skipped local frame {t} "
                                f"(pts {int(self.expected_pts_ticks[t])}), it output frame {j} next"
                            )
                    if arr is None:
                        raise DecodeError(
                            f"{self.label}: the decoder produced no frame with pts "
                            f"{int(self.expected_pts_ticks[t])} (local frame {t})"
                        )
                    got.append(arr)
                    self.frames_decoded += 1
            except DecodeError:
                raise
            except Exception as e:
                raise DecodeError(
                    f"{self.label}: PyAV failed on depth frames {uniq[:8].tolist()}: {type(e).__name__}: {e}"
                ) from e
        codes = np.stack(got)[:, None]  # (U, 1, H, W) uint16
        out = torch.from_numpy(codes.view(np.int16))
        if uniq.size == idx.size and bool((uniq == idx).all()):
            return out
        return out[torch.from_numpy(inverse.reshape(-1).astype(np.int64))]

    def close(self) -> None:
        """Release the codec and packets (idempotent)."""
        with self.lock:
            self._closed = True
            self._ctx = None
            self._packets = []
            self._pending = deque()
