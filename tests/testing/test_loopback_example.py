"""docs/testing.md's ``LoopbackServer`` example runs as written: a generated dataset served as the
Hub dataset ``me/demo`` with a 50 ms round trip, streamed whole by a ``StreamLoader``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_loopback_example_runs_as_written(tmp_path):
    text = (REPO / "docs" / "testing.md").read_text(encoding="utf-8")
    section = text.split("## A slow Hub on your machine: `LoopbackServer`", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 12  # a short example
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEROBOTSTREAM_", "HF_"))}
    env.update(PYTHONPATH=str(REPO), HF_LEROBOT_HOME=str(tmp_path / "hf"))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.fullmatch(r"(\d+) frames streamed in (\d+) requests\n", proc.stdout)
    assert m and int(m.group(1)) == 30 + 45 + 20 and int(m.group(2)) > 0, proc.stdout
