"""CPU vs NVDEC parity of the mini-MP4 decode, one test per clip (``needs_cuda``: runs where a CUDA
device is present, skips elsewhere; ``FAIL_WITHOUT_CUDA=1`` makes a missing device fail instead).

The clips and the check are ``tools/gpu_check.py``'s (``check_gpu_parity``), the same code the
one-command GPU script ``python -m tools.gpu_check`` runs: AV1/H.264/HEVC at even and odd heights,
two clips that share a coded size but not a display size; mean |diff| <= 2 and PSNR >= 35 dB per
frame, or a counted CPU fallback with equal frames where the GPU cannot decode the codec."""

from __future__ import annotations

import subprocess

import pytest

from tools.gpu_check import check_gpu_parity, gpu_parity_cases, make_parity_clip

pytestmark = pytest.mark.needs_cuda


@pytest.mark.parametrize("codec,width,height", gpu_parity_cases(), ids=lambda v: str(v))
def test_nvdec_frames_match_the_cpu_decode(tmp_path, codec, width, height):
    import torch

    if not torch.cuda.is_available():  # only reached with FAIL_WITHOUT_CUDA=1 (conftest skips otherwise)
        pytest.fail("no CUDA device, and FAIL_WITHOUT_CUDA=1 asks for one")
    try:
        clip = make_parity_clip(tmp_path / f"{codec}_{width}x{height}.mp4", codec, width, height)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"this ffmpeg cannot encode {codec} {width}x{height}: {exc}")
    row = check_gpu_parity(clip)
    assert row["result"] == "PASS", row
