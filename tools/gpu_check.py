"""GPU check: CPU vs NVDEC parity of lerobotstream's mini-MP4 decode, one command on a CUDA machine.

Clips are made with the ffmpeg CLI (AV1/H.264/HEVC, even and odd heights, two clips that share a
coded size but not a display size, which an NVDEC decoder cache can mis-crop); each span is decoded
through :class:`~lerobotstream.decode._decoder.EpisodeVideo` on CPU and on ``cuda``. Parity: mean |diff| <= 2
and PSNR >= 35 dB per frame (colour conversion differs slightly between the paths). A codec the GPU
cannot decode must show a counted CPU fallback instead, with frames equal to the CPU's.

The ``needs_cuda`` tests (``tests/decode/test_cuda_parity.py``; ``python -m pytest -m needs_cuda``,
they skip without a GPU) run the same :func:`check_gpu_parity` per clip; this script prints the
whole table at once:

    python -m tools.gpu_check [--keep DIR]
Exit status 0 when every row passes.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

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
    subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "testsrc2=s=1280x720:r=30:d=2",
            "-vf",
            f"scale={w}:{h}",
            *GPU_PARITY_ENCODERS[codec],
            "-pix_fmt",
            "yuv420p",
            str(out),
        ],
        check=True,
    )
    return out


def _psnr(a, b) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return 99.0 if mse == 0 else 10 * np.log10(255.0**2 / mse)


def check_gpu_parity(path: Path, device: str = "cuda") -> dict:
    """Decode 10 frames of ``path`` on CPU and on ``device``; a row ``{"clip", "codec", "size",
    "device", "ms", "mean|d|", "minPSNR", "result" ("PASS"/"FAIL"), "detail"}``. Never raises for
    a decode failure on ``device``: the row says FAIL with the error."""
    from lerobotstream.decode._cuda import FallbackStatus, nvdec_capability
    from lerobotstream.decode._decoder import EpisodeVideo
    from lerobotstream.mp4.parse import parse_mp4_bytes
    from lerobotstream.mp4.spans import plan_span
    from lerobotstream.mp4.synth import synthesize

    data = Path(path).read_bytes()
    t = parse_mp4_bytes(data, path=Path(path).name)
    n = len(t.dts_ticks)
    row = {"clip": Path(path).name, "codec": t.codec, "size": f"{t.width}x{t.height}"}
    s = plan_span(t, n // 3, n // 3 + 10)
    mini = synthesize(t, s, data[s.byte_start : s.byte_stop])
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, default=None, help="write clips here instead of a temp dir")
    args = ap.parse_args(argv)
    print(
        f"torch {torch.__version__}, cuda available {torch.cuda.is_available()}",
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        for codec, w, h in gpu_parity_cases():
            try:
                clip = make_parity_clip(d / f"{codec}_{w}x{h}.mp4", codec, w, h)
            except subprocess.CalledProcessError as e:
                rows.append({"clip": f"{codec}_{w}x{h}", "result": "SKIP", "detail": f"encode failed {e}"})
                continue
            rows.append(check_gpu_parity(clip))
    cols = ["clip", "codec", "size", "device", "ms", "mean|d|", "minPSNR", "result", "detail"]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r.get(c, "")) for c in cols))
    failed = [r for r in rows if r.get("result") == "FAIL"]
    print(f"{len(rows) - len(failed)}/{len(rows)} pass")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
