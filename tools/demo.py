"""The main job (``make demo``): train ACT with ``lerobotstream-train --dataset.streaming=true`` on
the bundled real dataset (``data/g1_v30``: Unitree G1, 2 episodes, 736 frames, 640x480 AV1) with
``--num_workers=2`` (batches from ``StreamLoader``, the mode ``auto`` picks), then resume from its
mid-run checkpoint, check that the resumed run gets exactly the batches the first run got after
that step (sample-exact resume), train a few steps further, and print the streaming summaries.
Of the training output it prints what matters (:class:`OutputFilter`): the step/loss lines, the
``lerobotstream:`` lines, warnings and errors, and the streaming summary; LeRobot's config dump
and progress bars are left out.

Runs in the LeRobot venv (``make setup-lerobot``). ACT is kept small (dim 64, one layer each,
images resized to 96x128 by a LeRobot image transform) so it trains on 2 CPU cores in a few
minutes. If ``data/g1_v30`` is absent it is rebuilt from
``data/testmedia/lerobot-v21-g1-subset`` with :func:`lerobotstream.testing.convert_v21_to_v30`.

Usage::

    python tools/demo.py [--steps 40] [--resume-steps 20] [--batch-size 8] [--num-workers 2]
    python tools/demo.py --summary-only [DATASET_ROOT]     # metadata summary, no training
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The installed lerobotstream (in .venv-lerobot: the copy built there), not the working tree.

from lerobotstream.meta import DatasetMeta

BUNDLED = REPO / "data" / "g1_v30"
V21_SOURCE = REPO / "data" / "testmedia" / "lerobot-v21-g1-subset"


def summary(meta: DatasetMeta) -> str:
    """A readable multi-line summary of a dataset's metadata."""
    lines = [
        f"dataset     {meta.repo_id}  ({meta.codebase_version}, robot {meta.info.get('robot_type')})",
        f"fps         {meta.fps}",
        f"episodes    {meta.num_episodes} selected of {meta.total_episodes}; lengths {meta.episode_lengths.tolist()}",
        f"frames      {meta.num_frames} selected of {meta.total_frames} ({meta.num_frames / meta.fps:.1f} s)",
        "cameras",
    ]
    for key in meta.camera_keys:
        feat = meta.features[key]
        vinfo = feat.get("info") or {}
        lines.append(
            f"  {key}: {feat['dtype']} {vinfo.get('video.codec', '?')} {vinfo.get('video.width', '?')}x{vinfo.get('video.height', '?')} "
            f"{vinfo.get('video.pix_fmt', '')} shape {meta.shapes[key]}"
        )
    other = [k for k in meta.features if k not in meta.camera_keys]
    lines.append("features    " + ", ".join(f"{k} {meta.features[k]['dtype']}{list(meta.shapes[k])}" for k in other))
    lines.append("tasks")
    lines += [f"  [{i}] {t}" for i, t in enumerate(meta.tasks)]
    lines.append("episodes")
    for ep in meta.episodes:
        cams = "; ".join(
            f"{k.split('.')[-1]} [{v.from_timestamp:.4f}, {v.to_timestamp:.4f}) s" for k, v in ep.videos.items()
        )
        lines.append(
            f"  {ep.episode_index}: {ep.length} frames, index [{ep.dataset_from_index}, {ep.dataset_to_index}), {cams}"
        )
    lines.append("files")
    for path in meta.data_paths() + meta.video_paths():
        lines.append(f"  {path}  {meta.source.size(path) / 2**20:.2f} MiB")
    for note in meta.warnings:
        lines.append(f"note: {note}")
    return "\n".join(lines)


RESIZE = '{"resize": {"type": "Resize", "kwargs": {"size": [96, 128]}, "weight": 1.0}}'


def train_args(root: Path, out: Path, steps: int, batch_size: int, num_workers: int, save_freq: int) -> list[str]:
    """The demo's ``lerobotstream-train`` arguments (small ACT, resized images, streaming on)."""
    return [
        "--dataset.repo_id=local/g1_v30",
        f"--dataset.root={root}",
        "--dataset.streaming=true",
        "--dataset.image_transforms.enable=true",
        "--dataset.image_transforms.max_num_transforms=1",
        f"--dataset.image_transforms.tfs={RESIZE}",
        "--policy.type=act",
        "--policy.device=cpu",
        "--policy.push_to_hub=false",
        "--policy.dim_model=64",
        "--policy.n_heads=2",
        "--policy.dim_feedforward=128",
        "--policy.n_encoder_layers=1",
        "--policy.n_decoder_layers=1",
        "--policy.n_vae_encoder_layers=1",
        "--policy.latent_dim=8",
        "--policy.chunk_size=10",
        "--policy.n_action_steps=10",
        "--policy.pretrained_backbone_weights=null",
        "--policy.optimizer_lr=1e-3",
        "--policy.optimizer_lr_backbone=1e-3",
        f"--batch_size={batch_size}",
        f"--steps={steps}",
        f"--save_freq={save_freq}",
        "--log_freq=5",
        f"--num_workers={num_workers}",
        f"--output_dir={out}",
        "--wandb.enable=false",
    ]


class OutputFilter:
    """Which lines of a training run's output the demo prints: step/loss lines (their losses kept
    in ``losses``), ``lerobotstream:`` lines and the ``[lerobotstream]`` summary, warnings and
    errors, and a traceback from its first line to the end. Everything else (LeRobot's config dump,
    one log record spread over many lines; progress bars) is left out."""

    STEP = re.compile(r"\bstep:(\S+) .*\bloss:([0-9.]+)")
    LEVEL = re.compile(r"^(WARNING|ERROR|CRITICAL)\b")

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.traceback = False

    def __call__(self, line: str) -> bool:
        m = self.STEP.search(line)
        if m:
            self.losses.append(float(m.group(2)))
            return True
        if line.startswith("Traceback"):
            self.traceback = True
        return (
            self.traceback
            or "lerobotstream:" in line
            or line.startswith("[lerobotstream]")
            or bool(self.LEVEL.match(line))
            or line.startswith(("error: ", "interrupted"))
        )


def _run(cmd: list[str], env: dict[str, str]) -> tuple[int, list[float]]:
    """Run, print the lines that matter (:class:`OutputFilter`), and collect the logged losses."""
    import subprocess

    print(">> " + " ".join(cmd[:1] + [a if " " not in a else repr(a) for a in cmd[1:]]), flush=True)
    keep = OutputFilter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "\r" in line:
            line = line.rsplit("\r", 1)[-1]
        if keep(line):
            print(line, end="", flush=True)
    return proc.wait(), keep.losses


def main(argv: list[str] | None = None) -> int:
    import argparse
    import os
    import shutil

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", nargs="?", type=Path, default=BUNDLED)
    ap.add_argument("--summary-only", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--resume-steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--num-workers", type=int, default=2)
    ap.add_argument("--output-dir", type=Path, default=REPO / "outputs" / "demo")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    root = args.root
    if root == BUNDLED and not (root / "meta" / "info.json").is_file():
        from lerobotstream.testing import convert_v21_to_v30

        print(f">> {root} missing: converting {V21_SOURCE}")
        convert_v21_to_v30(V21_SOURCE, root)
    meta = DatasetMeta.load(root)
    print(summary(meta))
    if args.summary_only:
        return 0

    exe = shutil.which("lerobotstream-train", path=str(Path(sys.executable).parent)) or shutil.which(
        "lerobotstream-train"
    )
    if exe is None:
        print("lerobotstream-train is not installed here: run `make demo` (it sets up .venv-lerobot)", file=sys.stderr)
        return 2
    out = args.output_dir
    if out.exists():
        shutil.rmtree(out)
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false")
    mid = args.steps // 2
    total = args.steps + args.resume_steps
    traces = [out.parent / f"{out.name}-trace-run", out.parent / f"{out.name}-trace-resume"]
    for t in traces:
        Path(f"{t}.rank0").unlink(missing_ok=True)
    print(
        f"\n== 1/2: train {args.steps} steps, streaming, --num_workers={args.num_workers}, "
        f"checkpoints at {mid} and {args.steps} ==",
        flush=True,
    )
    rc, losses1 = _run(
        [exe, *train_args(root, out, args.steps, args.batch_size, args.num_workers, mid)],
        dict(env, LEROBOTSTREAM_TRAIN_TRACE=str(traces[0])),
    )
    if rc != 0:
        print(f"demo: training failed (exit {rc})", file=sys.stderr)
        return rc
    first = json.loads((out / "streaming_summary.json").read_text())
    cfg = out / "checkpoints" / f"{mid:06d}" / "pretrained_model" / "train_config.json"
    print(f"\n== 2/2: resume from checkpoint {cfg.parent.parent.name} up to step {total} ==", flush=True)
    rc, losses2 = _run(
        [exe, "--resume=true", f"--config_path={cfg}", f"--steps={total}", f"--save_freq={total}"],
        dict(env, LEROBOTSTREAM_TRAIN_TRACE=str(traces[1])),
    )
    if rc != 0:
        print(f"demo: resume failed (exit {rc})", file=sys.stderr)
        return rc
    a, b = (_trace(Path(f"{t}.rank0")) for t in traces)
    same = [s for s in range(mid, args.steps) if a.get(s) == b.get(s)]
    exact = len(same) == args.steps - mid
    second = json.loads((out / "streaming_summary.json").read_text())
    losses = losses1 + losses2
    print("\n== demo summary ==")
    if losses:
        print(
            f"loss: {losses[0]:.3f} (step 5) -> {losses[-1]:.3f} (step {total}); "
            f"{'decreased' if losses[-1] < losses[0] else 'did NOT decrease'}"
        )
    print(
        f"resume: steps {mid}..{args.steps} of the resumed run {'equal' if exact else 'DIFFER from'} the first "
        f"run's batches ({len(same)} of {args.steps - mid} identical): "
        f"{'sample-exact' if exact else 'NOT sample-exact'}"
    )
    for name, s in (("run", first), ("resume", second)):
        share = "?" if s["data_wait_share"] is None else f"{100 * s['data_wait_share']:.1f}%"
        print(
            f"{name:6s}: steps {s['start_step']}..{s['start_step'] + s['steps']}, {s['samples_per_s']} samples/s, "
            f"waiting for data {share} of step time, {s['loader']}, sidecar: {s['sidecar']}"
        )
    return 0 if exact else 1


def _trace(path: Path) -> dict[int, tuple]:
    """step -> (episode_index, frame_index) lists of that batch, from a LEROBOTSTREAM_TRAIN_TRACE file."""
    out = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        out[rec["step"]] = (rec["episode_index"], rec["frame_index"])
    return out


if __name__ == "__main__":
    sys.exit(main())
