"""``lerobotstream-train --dataset.streaming_partitions``: a run with 2 DataLoader workers resumed
with 1 continues each canonical partition in its own order (the bundled dataset's 2 episodes are
the 2 partitions), each sample once."""

from __future__ import annotations

from pathlib import Path

from conftest import SMALL_ACT, dataset_args, read_trace, run_train

STEPS, SAVE, BS = 6, 3, 4


def _ok(proc) -> None:
    assert proc.returncode == 0, (
        f"rc={proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-8000:]}"
    )


def _anchors(trace: Path, steps) -> list[tuple[int, int]]:
    rec = read_trace(Path(f"{trace}.rank0"))
    return [(e, f) for s in steps for e, f in zip(rec[s]["episode_index"], rec[s]["frame_index"])]


def test_partitions_resume_on_another_worker_count_keeps_each_partition_order(have_dataset, tmp_path):
    out, trace_a, trace_b = tmp_path / "out", tmp_path / "trace_a", tmp_path / "trace_b"
    common = [
        *dataset_args(),
        *SMALL_ACT,
        f"--batch_size={BS}",
        f"--steps={STEPS}",
        f"--save_freq={SAVE}",
        "--log_freq=1",
        f"--output_dir={out}",
        "--wandb.enable=false",
        "--dataset.streaming_partitions=2",
    ]
    _ok(run_train([*common, "--num_workers=2"], tmp_path, trace=trace_a))
    cfg = out / "checkpoints" / f"{SAVE:06d}" / "pretrained_model" / "train_config.json"
    proc = run_train(["--resume=true", f"--config_path={cfg}", "--num_workers=1"], tmp_path, trace=trace_b)
    _ok(proc)
    text = proc.stdout + proc.stderr
    assert "elastic resume at step 3" in text and "partitions whole" in text, text[-3000:]
    a, done, b = _anchors(trace_a, range(STEPS)), _anchors(trace_a, range(SAVE)), _anchors(trace_b, range(SAVE, STEPS))
    assert len(b) == (STEPS - SAVE) * BS and not set(done) & set(b) and len(set(b)) == len(b)
    for ep in (0, 1):  # each partition (one episode here): checkpoint prefix + resumed = the first run's order
        ref = [x for x in a if x[0] == ep]
        mine = [x for x in done + b if x[0] == ep]
        n = min(len(ref), len(mine))
        assert mine[:n] == ref[:n], ep
