"""GPU check: CPU vs NVDEC parity of lerobotstream's mini-MP4 decode, one command on a CUDA machine.

The clips and the check are :mod:`lerobotstream.testing` 's (``check_gpu_parity``), the same code the
``needs_cuda`` tests run (``python -m pytest -m needs_cuda``; they skip without a GPU). This script
prints the whole table at once:

    python -m tools.gpu_check [--keep DIR]
Exit status 0 when every row passes.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import torch

from lerobotstream.testing import check_gpu_parity, gpu_parity_cases, make_parity_clip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, default=None, help="write clips here instead of a temp dir")
    args = ap.parse_args(argv)
    print(f"torch {torch.__version__}, cuda available {torch.cuda.is_available()}",
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
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
