"""Planner throughput: anchors/s for pools of 32, 512 and 8192 episodes on a ~1M-frame dataset.

Usage: python -m tools.microbench planner [--frames 1000000] [--episodes 10000] [--batch 4096]

Goal (issue 6): flat in pool size, > 1M samples/s. Measures the batched path
(``EpisodePool.fill`` into preallocated int64 arrays), one whole epoch per run, best of ``--repeats``;
the output is verified first (every frame exactly once).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lerobotstream.planner._planner import Planner
from lerobotstream.planner._streams import PlanSettings, Streams


def run(lengths: np.ndarray, pool_size: int, strategy: str, batch: int, repeats: int) -> float:
    settings = PlanSettings(episode_pool_size=pool_size, sampling_strategy=strategy, seed=1000)
    plain = Planner(Streams.of_dataset(lengths), settings).plain
    plan = plain.layouts[0].plan(0, plain.topo.rank)
    ep = np.empty(batch, dtype=np.int64)
    fr = np.empty(batch, dtype=np.int64)
    # verify once: every frame exactly once
    pool = plan.group_pool(0, 0)
    eps, frs = pool.next_anchors(plan.num_frames + 1)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = offsets[eps] + frs
    if len(flat) != plan.num_frames or len(np.unique(flat)) != plan.num_frames:
        raise SystemExit(f"coverage check failed for pool {pool_size} / {strategy}")
    best = 0.0
    for r in range(repeats):
        pool = plan.group_pool(0, r + 1)
        t0 = time.perf_counter()
        n = 0
        while True:
            k = pool.fill(ep, fr)
            n += k
            if k < batch:
                break
        dt = time.perf_counter() - t0
        best = max(best, n / dt)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    w = rng.uniform(0.5, 1.5, size=args.episodes)
    lengths = np.maximum(1, np.round(w / w.sum() * args.frames)).astype(np.int64)
    print(
        f"dataset: {args.episodes} episodes, {int(lengths.sum())} frames "
        f"(lengths {lengths.min()}..{lengths.max()}); batch {args.batch}"
    )
    print(f"{'strategy':<12} {'pool':>6} {'anchors/s':>14}")
    for strategy in ("remaining", "round_robin"):
        for pool_size in (32, 512, 8192):
            rate = run(lengths, pool_size, strategy, args.batch, args.repeats)
            print(f"{strategy:<12} {pool_size:>6} {rate:>14,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
