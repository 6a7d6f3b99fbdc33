"""The small tools' command lines run from a checkout (no timing asserted): the v2.1 → v3.0
converter on the shipped v2.1 subset, and the GPU check's parity code importable and its ``--help``
(the check itself needs CUDA: ``tests/decode/test_cuda_parity.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_convert_v21_to_v30_cli(testdata, tmp_path, capsys):
    from tools.convert_v21_to_v30 import main

    out = tmp_path / "g1"
    assert main([str(testdata / "lerobot-v21-g1-subset"), str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 2


def test_gpu_check_is_a_tool():
    from tools.gpu_check import check_gpu_parity, gpu_parity_cases, make_parity_clip  # noqa: F401

    assert ("h264", 320, 182) in gpu_parity_cases() and ("av1", 320, 182) in gpu_parity_cases()
    proc = subprocess.run(
        [sys.executable, "-m", "tools.gpu_check", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "--keep" in proc.stdout, proc.stderr
