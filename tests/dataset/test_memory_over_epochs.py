"""Memory: no growth over epochs (peak RSS after 20 epochs ≈ after 2), bounded decoders and fds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CAM = (("observation.images.front", 64, 48), ("observation.images.wrist", 64, 48))
LENGTHS = (7, 5, 9, 4, 6)

SCRIPT = r"""
import json, os, resource, sys
import torch
from lerobotstream.dataset._dataset import StreamingLeRobotDataset
root, n_frames = sys.argv[1], int(sys.argv[2])
ds = StreamingLeRobotDataset(root=root, repeat=True, episode_pool_size=2, prefetch_episodes=1, decode_lookahead=8)
out, max_dec, max_fds = {}, 0, 0
for i, item in enumerate(ds, 1):
    st = ds.stats()
    max_dec = max(max_dec, st["open_decoders"])
    assert st["reserved_bytes"] <= st["byte_budget"]
    if i % n_frames == 0:
        max_fds = max(max_fds, len(os.listdir("/proc/self/fd")))
        ep = i // n_frames
        if ep in (2, 20):
            out[ep] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
        if ep == 20:
            break
out.update(max_dec=max_dec, cap=ds.stats()["decoder_capacity"], max_fds=max_fds,
           fpr=ds.stats()["frames_decoded_per_returned"])
print(json.dumps(out))
"""


@pytest.mark.slow
def test_no_growth_over_20_epochs(make_generated_dataset):
    root = make_generated_dataset(episode_lengths=LENGTHS, codec="av1", cameras=CAM, episodes_per_video_file=2)
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root), str(sum(LENGTHS))],
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    growth_kib = r["20"] - r["2"]
    assert growth_kib < 16 * 1024, f"peak RSS grew by {growth_kib} KiB from epoch 2 to 20: {r}"
    assert r["max_dec"] <= r["cap"], r
    assert r["max_fds"] < 64, r
