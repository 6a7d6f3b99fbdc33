"""Time and bytes of ``lerobotstream.validate`` — the default run (headers and the per-row
columns) and ``--headers-only`` side by side — on the bundled G1 data, a generated 1,000-episode
dataset, and both over the loopback HTTP store with a modelled round trip.

    .venv/bin/python -m tools.microbench validate                 # 50 ms round trip, 8 and 32 workers
    .venv/bin/python -m tools.microbench validate --latency-ms 20 --episodes 100 --json out.json

The generated dataset (``lerobotstream.testing.make_dataset``: AV1 64x48, seeded lengths 20-60 frames, 50
episodes per MP4, 100 per data file, 64-float state and action) is cached in ``--cache`` between runs. The 100k-file case is
``python -m tools.scale_sim validate``. Prints one markdown row per run: files, requests, bytes read (and
their share of the dataset's bytes), the same per 1,000 episodes, wall seconds, findings.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def _dataset_bytes(root: Path) -> tuple[int, int]:
    """(all bytes, MP4 bytes) of a dataset folder."""
    files = [p for p in root.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), sum(p.stat().st_size for p in files if p.suffix == ".mp4")


#: state and action widths of the generated dataset: 64 floats each (a bimanual robot's), so its
#: data files (100 episodes each, about 3 MB) are over the remote reader's whole-file limit
#: (``parquet.SMALL_FILE_BYTES``, 1 MiB) as most real datasets' are: the per-row columns then cost
#: their own read
STATE_DIM = 64


def generated(cache: Path, episodes: int) -> Path:
    from lerobotstream.testing import make_dataset

    root = cache / f"validate-bench-{episodes}-s{STATE_DIM}"
    if not (root / "meta" / "info.json").exists():
        lengths = np.random.default_rng(0).integers(20, 61, episodes).tolist()
        shutil.rmtree(root, ignore_errors=True)
        make_dataset(
            root,
            episode_lengths=lengths,
            episodes_per_video_file=50,
            episodes_per_data_file=100,
            state_dim=STATE_DIM,
            action_dim=STATE_DIM,
        )
    return root


def measure(name: str, root: str, nbytes: tuple[int, int], workers: int, headers_only: bool = False) -> dict:
    from lerobotstream.validate import validate_dataset

    r = validate_dataset(root=root, workers=workers, headers_only=headers_only)
    s = r.scan
    per = 1000 / max(1, r.dataset["episodes_checked"])
    return {
        "dataset": name,
        "mode": "--headers-only" if headers_only else "default",
        "workers": workers,
        "episodes": r.dataset["episodes_checked"],
        "requests_per_1000": s["requests"] * per,
        "bytes_per_1000": s["bytes_read"] * per,
        "files": s["video_files"] + s["data_files"],
        "requests": s["requests"],
        "bytes_read": s["bytes_read"],
        "dataset_bytes": nbytes[0],
        "video_bytes": nbytes[1],
        "share": s["bytes_read"] / nbytes[0],
        "elapsed_s": s["elapsed_s"],
        "errors": len(r.errors),
        "warnings": len(r.warnings),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--latency-ms", type=float, default=50.0, help="loopback round trip (default 50)")
    ap.add_argument("--episodes", type=int, default=1000, help="episodes of the generated dataset (default 1000)")
    ap.add_argument("--workers", default="8,32", help="header-reading threads to try over HTTP (default 8,32)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "lrs-bench-cache")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    from lerobotstream.testing import LoopbackServer

    a.cache.mkdir(parents=True, exist_ok=True)
    g1 = REPO / "data" / "g1_v30"
    gen = generated(a.cache, a.episodes)
    rows = [measure("g1 (local)", str(g1), _dataset_bytes(g1), 8, h) for h in (False, True)]
    rows += [measure(f"generated {a.episodes} ep (local)", str(gen), _dataset_bytes(gen), 8, h) for h in (False, True)]
    served = Path(tempfile.mkdtemp(prefix="lrs-validate-bench-"))
    try:
        shutil.copytree(g1, served / "g1")
        shutil.copytree(gen, served / "gen")
        server = LoopbackServer.start({"static": str(served), "latency_s": a.latency_ms / 1e3})
        try:
            for w in [int(x) for x in a.workers.split(",") if x]:
                for h in (False, True):
                    rows.append(
                        measure(f"g1 (HTTP, {a.latency_ms:g} ms)", f"{server.static_url}g1/", _dataset_bytes(g1), w, h)
                    )
                    rows.append(
                        measure(
                            f"generated {a.episodes} ep (HTTP, {a.latency_ms:g} ms)",
                            f"{server.static_url}gen/",
                            _dataset_bytes(gen),
                            w,
                            h,
                        )
                    )
        finally:
            server.close()
    finally:
        shutil.rmtree(served, ignore_errors=True)
    print(
        "| dataset | mode | workers | files | requests | bytes read | per 1,000 episodes | dataset (MP4) bytes | "
        "wall s | errors / warnings |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['dataset']} | {r['mode']} | {r['workers']} | {r['files']} | {r['requests']} | "
            f"{r['bytes_read'] / 1024:,.0f} KiB ({100 * r['share']:.1f}%) | {r['requests_per_1000']:,.0f} requests, "
            f"{r['bytes_per_1000'] / 1024:,.0f} KiB | {r['dataset_bytes'] / 1024:,.0f} ({r['video_bytes'] / 1024:,.0f}) "
            f"KiB | {r['elapsed_s']:.2f} | {r['errors']} / {r['warnings']} |"
        )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0
