"""NVDEC capability check and the counted, logged CPU fallback (:func:`resolve_device`): every
downgrade is counted per reason in :data:`FALLBACK_STATUS` and logged (a warning the first time
per reason, then debug)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

logger = logging.getLogger("lerobotstream.decode")

# Minimum compute capability whose NVDEC decodes the codec (NVIDIA Video Codec SDK support matrix).
NVDEC_MIN_CAPABILITY: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("avc1", "avc3", "h264"), (3, 0)),
    **dict.fromkeys(("hev1", "hvc1", "hevc"), (6, 0)),
    **dict.fromkeys(("av01", "av1"), (8, 6)),
}
#: compute capabilities at or above the minimum whose NVDEC still lacks the codec: Hopper (GH100,
#: H100/H200, 9.0) has no AV1 decode (Video Codec SDK 13 "NVDEC Hardware Capabilities"; GA10x 8.6,
#: Ada 8.9 and Blackwell 10.x/12.x have it)
NVDEC_MISSING: dict[str, frozenset[tuple[int, int]]] = {"av01": frozenset({(9, 0)}), "av1": frozenset({(9, 0)})}


@dataclass
class FallbackStatus:
    """Counts of decodes that ran elsewhere than requested (like torchcodec's ``CpuFallbackStatus``).

    Attributes:
        cpu_fallbacks: dict reason -> count of CUDA requests decoded on the CPU.
        pyav_fallbacks: count of mini-MP4s torchcodec rejected and PyAV decoded.
        last_reason: the last fallback reason ("" when none).
    """

    cpu_fallbacks: dict[str, int] = field(default_factory=dict)
    pyav_fallbacks: int = 0
    last_reason: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def fallback_count(self) -> int:
        return sum(self.cpu_fallbacks.values())

    def record_cpu(self, reason: str) -> None:
        self._record(reason, False, "NVDEC unavailable, decoding on CPU: %s")

    def record_pyav(self, reason: str) -> None:
        self._record(reason, True, "torchcodec rejected a mini-MP4, decoding with PyAV: %s")

    def _record(self, reason: str, pyav: bool, message: str) -> None:
        with self._lock:
            first = self.pyav_fallbacks == 0 if pyav else reason not in self.cpu_fallbacks
            if pyav:
                self.pyav_fallbacks += 1
            else:
                self.cpu_fallbacks[reason] = self.cpu_fallbacks.get(reason, 0) + 1
            self.last_reason = reason
        (logger.warning if first else logger.debug)(message, reason)


FALLBACK_STATUS = FallbackStatus()


def nvdec_capability(codec: str, device: str = "cuda") -> tuple[bool, str]:
    """``(ok, reason)``: whether NVDEC on ``device`` can decode ``codec`` (a fourcc like ``"av01"``),
    and why not (``""`` when it can)."""
    import torch

    if not torch.cuda.is_available():
        return False, "no CUDA device (torch.cuda.is_available() is False)"
    if getattr(torch.cuda, "_is_in_bad_fork", lambda: False)():
        return False, "CUDA was initialised in the parent of this forked process (use spawn workers for NVDEC)"
    key = (codec or "").strip().lower()
    need = NVDEC_MIN_CAPABILITY.get(key)
    if need is None:
        return False, f"codec {codec!r} has no NVDEC support"
    index = torch.device(device).index
    cap = tuple(torch.cuda.get_device_capability(0 if index is None else index))
    if cap < need or cap in NVDEC_MISSING.get(key, ()):
        name = torch.cuda.get_device_name(0 if index is None else index)
        why = f"needs >= {need[0]}.{need[1]}" + (", and not Hopper 9.0" if key in NVDEC_MISSING else "")
        return False, f"{name} (compute capability {cap[0]}.{cap[1]}) has no NVDEC for {codec} ({why})"
    return True, ""


def resolve_device(device: str | None, codec: str, *, status: FallbackStatus | None = None) -> str:
    """The device a decoder for ``codec`` should open on: ``device`` if usable, else ``"cpu"`` (the
    reason counted in ``status``, default :data:`FALLBACK_STATUS`, and logged)."""
    if device is None or str(device) == "cpu":
        return "cpu"
    dev = str(device)
    if not dev.startswith("cuda"):
        raise ValueError(f"unsupported decode device {device!r} (use 'cpu' or 'cuda[:N]')")
    ok, reason = nvdec_capability(codec, dev)
    if ok:
        return dev
    (status or FALLBACK_STATUS).record_cpu(reason)
    return "cpu"
