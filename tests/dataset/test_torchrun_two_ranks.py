"""Two ranks (``torchrun --nproc_per_node=2``, gloo on CPU): the union of their epochs is one exact epoch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CAM = (("observation.images.front", 32, 24),)
LENGTHS = (7, 5, 9, 4, 6, 3)


def test_two_ranks_union_is_one_epoch(make_generated_dataset, tmp_path):
    root = make_generated_dataset(episode_lengths=LENGTHS, codec="av1", cameras=CAM, episodes_per_video_file=2)
    out = tmp_path / "anchors"
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo), OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--standalone",
        str(Path(__file__).resolve().parent / "_torchrun_epoch.py"),
        str(root),
        str(out),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [[tuple(a) for a in json.loads((tmp_path / f"anchors.rank{r}").read_text())] for r in (0, 1)]
    assert ranks[0] and ranks[1], "each rank must get episodes"
    assert not {e for e, _ in ranks[0]} & {e for e, _ in ranks[1]}, "ranks own whole, disjoint episodes"
    union = ranks[0] + ranks[1]
    assert sorted(union) == sorted((e, f) for e, n in enumerate(LENGTHS) for f in range(n))
