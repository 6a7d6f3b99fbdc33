"""Workers beyond the rank's episode count stay idle and the log says so once per run.

Bug (issue 17.6): every DataLoader worker builds its own planner, so the warning was printed once
per worker (4 times with 4 workers) although the README says once. Real DataLoaders in a
subprocess (the workers' stderr is the subprocess's), fork and spawn, persistent workers over two
epochs, and a state_dict() in the training process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
import sys, torch
from lerobotstream.dataset._dataset import StreamingLeRobotDataset
ctx, root = sys.argv[1], sys.argv[2]
ds = StreamingLeRobotDataset(root=root, max_num_shards=4, num_workers=4, batch_size=2, episode_pool_size=1,
                             prefetch_episodes=1)
dl = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=4, multiprocessing_context=ctx,
                                 persistent_workers=True)
n = 0
for epoch in range(2):
    for batch in dl:
        n += int(batch["index"].shape[0])
ds.state_dict(samples_consumed=n)
print("samples", n)
"""


@pytest.mark.slow
@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_idle_worker_warning_once_per_run(make_generated_dataset, ctx):
    root = Path(
        make_generated_dataset(episode_lengths=(5, 3), codec="av1", cameras=(("observation.images.front", 32, 24),))
    )
    env = {k: v for k, v in os.environ.items() if k != "LEROBOTSTREAM_DEBUG"}
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, ctx, str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert p.returncode == 0, p.stderr
    assert "samples 16" in p.stdout  # two epochs of 8 frames: the idle workers yield nothing
    said = [line for line in p.stderr.splitlines() if "yield nothing" in line]
    assert len(said) == 1, p.stderr
    assert "num_workers=4 (DataLoader workers or StreamLoader shards): 2..3 get no episode" in said[0]
