"""CPU vs NVDEC parity of the mini-MP4 decode (run on a CUDA machine): clips, one check per clip.

Clips are made with the ffmpeg CLI (AV1/H.264/HEVC, even and odd heights, two clips that share a
coded size but not a display size, which an NVDEC decoder cache can mis-crop); each span is decoded
through :class:`~lerobotstream.decode.EpisodeVideo` on CPU and on ``cuda``. Parity: mean |diff| <= 2
and PSNR >= 35 dB per frame (colour conversion differs slightly between the paths). A codec the GPU
cannot decode must show a counted CPU fallback instead, with frames equal to the CPU's.

Used by the ``needs_cuda`` tests (``tests/decode/test_cuda_parity.py``) and by the one-command GPU
script ``python -m tools.gpu_check``.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np

#: ffmpeg encoder arguments per codec
GPU_PARITY_ENCODERS = {
    "av1": ["-c:v", "libsvtav1", "-g", "2", "-crf", "30", "-preset", "12"],
    "h264": ["-c:v", "libx264", "-bf", "2", "-g", "15"],
    "hevc": ["-c:v", "libx265", "-x265-params", "log-level=error:keyint=15"],
}
#: (width, height) of the clips; heights not a multiple of 16
GPU_PARITY_SIZES = [(320, 240), (320, 182), (322, 178), (1280, 532), (1280, 530)]


def gpu_parity_cases() -> list[tuple[str, int, int]]:
    """Every ``(codec, width, height)`` clip the check makes (SVT-AV1 needs >= 64 pixels)."""
    return [(c, w, h) for c in GPU_PARITY_ENCODERS for w, h in GPU_PARITY_SIZES if not (c == "av1" and h < 64)]


def make_parity_clip(out: Path, codec: str, w: int, h: int) -> Path:
    """A 2 s, 30 fps ``testsrc2`` clip at ``w`` x ``h`` in ``codec``; raises CalledProcessError
    when this ffmpeg cannot encode it."""
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc2=s=1280x720:r=30:d=2",
                    "-vf", f"scale={w}:{h}", *GPU_PARITY_ENCODERS[codec], "-pix_fmt", "yuv420p", str(out)], check=True)
    return out


def _psnr(a, b) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return 99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def check_gpu_parity(path: Path, device: str = "cuda") -> dict:
    """Decode 10 frames of ``path`` on CPU and on ``device``; a row ``{"clip", "codec", "size",
    "device", "ms", "mean|d|", "minPSNR", "result" ("PASS"/"FAIL"), "detail"}``. Never raises for
    a decode failure on ``device``: the row says FAIL with the error."""
    from lerobotstream.decode import EpisodeVideo, FallbackStatus, nvdec_capability
    from lerobotstream.mp4 import parse_mp4_bytes, plan_span, synthesize

    data = Path(path).read_bytes()
    t = parse_mp4_bytes(data, path=Path(path).name)
    n = len(t.dts_ticks)
    row = {"clip": Path(path).name, "codec": t.codec, "size": f"{t.width}x{t.height}"}
    s = plan_span(t, n // 3, n // 3 + 10)
    mini = synthesize(t, s, data[s.byte_start:s.byte_stop])
    po = np.asarray(t.presentation_order)
    start = float(t.pts_s[po[n // 3]])
    kw = dict(episode_index=0, camera="cam", path=Path(path).name, from_timestamp=start, fps=30)
    cpu = EpisodeVideo(t, s, mini, device="cpu", **kw).frames_at(range(10))
    st = FallbackStatus()
    ok_cap, why = nvdec_capability(t.codec, device)
    t0 = time.perf_counter()
    try:
        gpu = EpisodeVideo(t, s, mini, device=device, status=st, **kw).frames_at(range(10))
    except Exception as e:  # report, never hide
        row.update(result="FAIL", detail=f"{type(e).__name__}: {str(e)[:120]}")
        return row
    row["ms"] = f"{(time.perf_counter() - t0) * 1e3:.0f}"
    row["device"] = gpu.device.type
    gpu = gpu.cpu()
    if gpu.shape != cpu.shape:
        row.update(result="FAIL", detail=f"shape {tuple(gpu.shape)} vs {tuple(cpu.shape)}")
        return row
    mad = float((gpu.int() - cpu.int()).abs().float().mean())
    worst = min(_psnr(gpu[i], cpu[i]) for i in range(len(cpu)))
    row["mean|d|"] = f"{mad:.2f}"
    row["minPSNR"] = f"{worst:.1f}"
    if not ok_cap:
        good = st.fallback_count >= 1 and row["device"] == "cpu" and mad == 0
        row.update(result="PASS" if good else "FAIL", detail=f"fallback: {why}")
    else:
        good = row["device"] == "cuda" and mad <= 2.0 and worst >= 35.0
        row.update(result="PASS" if good else "FAIL", detail=str(st))
    return row
