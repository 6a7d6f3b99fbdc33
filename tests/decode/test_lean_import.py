"""DataLoader workers that start a fresh interpreter (spawn, forkserver) decode with torchcodec
imported without ``torch._dynamo`` (issue 36 item 3: a worker never compiles, and ``torch._dynamo``
is most of torchcodec's import time); the training process keeps the real import (fork workers
inherit it). Each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
import torch
from lerobotstream import StreamingLeRobotDataset


def probe(items):  # the collate runs in the worker: what did it import?
    return {"dynamo": "torch._dynamo" in sys.modules, "torchcodec": "torchcodec.decoders" in sys.modules,
            "frames": int(sum(int(it["observation.images.front"].numel() > 0) for it in items))}


if __name__ == "__main__":
    ds = StreamingLeRobotDataset(root=sys.argv[1], max_num_shards=1)
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=1, multiprocessing_context=sys.argv[2],
                                         collate_fn=probe)
    worker = next(iter(loader))
    parent = {"dynamo": "torch._dynamo" in sys.modules, "torchcodec": "torchcodec.decoders" in sys.modules}
    import torchcodec.decoders  # the training process: the real torch._dynamo comes with it
    import torch._dynamo
    print(json.dumps({"worker": worker, "parent": parent, "real_dynamo": hasattr(torch._dynamo, "optimize")}))
"""


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_dataloader_worker_decodes_without_dynamo(make_generated_dataset, tmp_path, context):
    root = make_generated_dataset(episode_lengths=(5, 4), codec="av1", cameras=(("observation.images.front", 32, 24),))
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), str(root), context],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["worker"] == {"dynamo": False, "torchcodec": True, "frames": 2}
    # the training process imported torchcodec the usual way at construction (fork workers inherit it)
    assert got["parent"] == {"dynamo": True, "torchcodec": True}
    assert got["real_dynamo"]


def test_lean_import_is_a_no_op_outside_workers():
    """In the training process (no DataLoader worker info) nothing is imported the lean way."""
    code = (
        "import sys; from lerobotstream.decode._lean import import_in_worker; r = import_in_worker(); "
        "print(r, 'torchcodec.decoders' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False"]
