"""``lerobotstream-train`` end to end on the LeRobot of this venv (0.6.1 by default, with its default
DataLoader settings: ``spawn`` workers, ``persistent_workers=True``, ``prefetch_factor=4``): train,
checkpoint, sample-exact resume, elastic resume (another --batch_size, --num_workers, number of
processes; a mixture), refused resume, ``eval_split`` with a diffusion policy
(``drop_n_last_frames``), map-style path unchanged, two-rank gloo run with disjoint episodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SMALL_ACT, dataset_args, read_trace, run_train

STEPS, SAVE, BS, WORKERS = 6, 3, 4, 2


def _common(out: Path, *, steps: int = STEPS, workers: int = WORKERS, bs: int = BS) -> list[str]:
    return [
        *dataset_args(),
        *SMALL_ACT,
        f"--batch_size={bs}",
        f"--steps={steps}",
        f"--save_freq={SAVE}",
        "--log_freq=1",
        f"--num_workers={workers}",
        f"--output_dir={out}",
        "--wandb.enable=false",
    ]


def _ok(proc) -> None:
    assert proc.returncode == 0, (
        f"rc={proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-8000:]}"
    )


@pytest.fixture(scope="module", params=[1, WORKERS], ids=lambda w: f"workers{w}")
def first_run(have_dataset, tmp_path_factory, request):
    """A 6-step run checkpointing at step 3 (1 and 2 DataLoader workers)."""
    tmp = tmp_path_factory.mktemp(f"train_w{request.param}")
    out = tmp / "out"
    trace = tmp / "trace_a"
    proc = run_train(_common(out, workers=request.param), tmp, trace=trace)
    _ok(proc)
    return tmp, out, trace, proc, request.param


def test_trains_and_checkpoints_stream_state(first_run):
    tmp, out, trace, proc, workers = first_run
    batches = read_trace(Path(f"{trace}.rank0"))
    assert sorted(batches) == list(range(STEPS))
    for rec in batches.values():
        assert len(rec["episode_index"]) == BS
    summary = json.loads((out / "streaming_summary.json").read_text())
    assert summary["steps"] == STEPS and summary["samples"] == STEPS * BS
    assert summary["payload_bytes_fetched"] > 0
    assert summary["sidecar"] == "built"  # a fresh HF_LEROBOT_HOME: built once, at start
    # LeRobot's collate (default_collate without language columns) in fewer shared-memory files
    assert summary["collate"] == "PackedCollate('default_collate')"
    assert "[lerobotstream] streaming summary" in proc.stdout
    from importlib.metadata import version

    log = proc.stdout + proc.stderr
    assert f"on lerobot {version('lerobot')}" in log
    if version("lerobot").startswith("0.6"):  # LeRobot's own DataLoader defaults, and uint8 frames
        assert "'dataloader_multiprocessing_context': 'spawn'" in log and "'persistent_workers': True" in log
        assert "uint8 frames" in log
    for step in (SAVE, STEPS):
        doc = json.loads(
            (out / "checkpoints" / f"{step:06d}" / "training_state" / "lerobotstream_stream.json").read_text()
        )
        assert doc["step"] == step
        assert doc["format"] == "lerobotstream-train-stream/2" and doc["stream"]["schema"] == "lerobotstream.stream/1"
        assert doc["stream"]["seed"] == 1000 and doc["stream"]["batch_size"] == BS  # the stream's one state, wrapped
        assert doc["stream"]["num_workers"] == workers and doc["stream"]["world_size"] == 1
    # every (episode, frame) at most once inside the first epoch
    seen = [(e, f) for rec in batches.values() for e, f in zip(rec["episode_index"], rec["frame_index"])]
    assert len(seen) == len(set(seen))


def test_resume_continues_sample_exactly(first_run):
    tmp, out, trace_a, _, _ = first_run
    cfg = out / "checkpoints" / f"{SAVE:06d}" / "pretrained_model" / "train_config.json"
    trace_b = tmp / "trace_b"
    proc = run_train(["--resume=true", f"--config_path={cfg}"], tmp, trace=trace_b)
    _ok(proc)
    a, b = read_trace(Path(f"{trace_a}.rank0")), read_trace(Path(f"{trace_b}.rank0"))
    assert sorted(b) == list(range(SAVE, STEPS))
    for step in range(SAVE, STEPS):
        assert (b[step]["episode_index"], b[step]["frame_index"]) == (
            a[step]["episode_index"],
            a[step]["frame_index"],
        ), step
    assert "resuming the stream at step 3" in proc.stderr + proc.stdout
    assert "sidecar: cache" in proc.stderr + proc.stdout  # the resumed run reuses the first run's sidecar


def test_mismatched_resume_is_refused(first_run):
    tmp, out, _, _, workers = first_run
    if workers != WORKERS:
        pytest.skip("checked once, on the 2-worker run")
    cfg = out / "checkpoints" / f"{SAVE:06d}" / "pretrained_model" / "train_config.json"
    proc = run_train(["--resume=true", f"--config_path={cfg}", "--seed=7"], tmp, timeout=200)
    assert proc.returncode == 2, proc.stderr[-3000:]  # one line, no traceback (issue 29, new user, item 3)
    assert "Traceback" not in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith(
        "error: ResumeStateError: "
    )
    text = proc.stdout + proc.stderr
    assert "ResumeStateError" in text and "sample-exactly" in text, text[-3000:]
    assert "seed: checkpoint" in text and "same dataset, episodes, seed" in text


@pytest.mark.parametrize("override", ["--batch_size=2", "--num_workers=3"])
def test_elastic_resume_continues_the_epoch(first_run, override):
    """Another --batch_size or --num_workers: the epoch continues with samples the first run had
    not consumed (each once), and the log says what changed and how many samples are left."""
    tmp, out, trace_a, _, workers = first_run
    if workers != WORKERS:
        pytest.skip("checked once, on the 2-worker run")
    cfg = out / "checkpoints" / f"{SAVE:06d}" / "pretrained_model" / "train_config.json"
    trace_b = tmp / f"trace_elastic_{override[2:].split('=')[0]}"
    proc = run_train(["--resume=true", f"--config_path={cfg}", override], tmp, trace=trace_b)
    _ok(proc)
    text = proc.stdout + proc.stderr
    assert "elastic resume at step 3" in text and "samples left over all ranks" in text, text[-3000:]
    assert override[2:].split("=")[0] + ": checkpoint" in text
    a, b = read_trace(Path(f"{trace_a}.rank0")), read_trace(Path(f"{trace_b}.rank0"))
    consumed = {(e, f) for s in range(SAVE) for e, f in zip(a[s]["episode_index"], a[s]["frame_index"])}
    after = [(e, f) for s in sorted(b) for e, f in zip(b[s]["episode_index"], b[s]["frame_index"])]
    assert sorted(b) == list(range(SAVE, STEPS)) and after
    assert not consumed & set(after) and len(after) == len(set(after))


def test_map_style_path_is_unchanged(have_dataset, tmp_path):
    out = tmp_path / "out"
    args = [a for a in _common(out, steps=1, workers=0, bs=2) if a != "--dataset.streaming=true"]
    args = [a for a in args if not a.startswith("--dataset.streaming_")] + ["--dataset.streaming=false"]
    proc = run_train(args, tmp_path)
    _ok(proc)
    assert "[lerobotstream] streaming summary" not in proc.stdout
    assert not (out / "checkpoints" / "000001" / "training_state" / "lerobotstream_stream.json").exists()


def test_torchrun_two_ranks_own_disjoint_episodes(have_dataset, tmp_path):
    import sys

    torchrun = str(Path(sys.executable).parent / "torchrun")
    out = tmp_path / "out"
    trace = tmp_path / "trace"
    proc = run_train(
        _common(out, steps=3, workers=1, bs=2),
        tmp_path,
        trace=trace,
        launcher=[torchrun, "--nproc_per_node=2", "--master_port=29517"],
    )
    _ok(proc)
    eps = {}
    for rank in (0, 1):
        recs = read_trace(Path(f"{trace}.rank{rank}"))
        assert sorted(recs) == [0, 1, 2]
        eps[rank] = {e for r in recs.values() for e in r["episode_index"]}
    assert eps[0] and eps[1] and not (eps[0] & eps[1]), eps
    # the summary (rank 0) knows the launch's world, after LeRobot destroyed the process group
    summary = json.loads((out / "streaming_summary.json").read_text())
    assert (summary["rank"], summary["world_size"]) == (0, 2)
    assert "rank 0 of 2" in proc.stdout and "samples/s on this rank" in proc.stdout
    assert summary["samples_per_s_all_ranks"] is not None and "all 2 ranks: " in proc.stdout


DIFFUSION = [
    "--policy.type=diffusion",
    "--policy.device=cpu",
    "--policy.push_to_hub=false",
    "--policy.pretrained_backbone_weights=null",
    "--policy.use_group_norm=true",
    "--policy.down_dims=[16,32]",
    "--policy.diffusion_step_embed_dim=16",
    "--policy.num_train_timesteps=10",
    "--policy.crop_shape=[96,128]",
    "--policy.spatial_softmax_num_keypoints=8",
]


def test_eval_split_and_diffusion_drop_n_last_frames(have_dataset, tmp_path):
    from importlib.metadata import version

    if not version("lerobot").startswith("0.6"):
        pytest.skip("eval_split and lerobot-train's diffusion drop_n_last_frames are LeRobot 0.6's")
    out, trace = tmp_path / "out", tmp_path / "trace"
    args = [
        *dataset_args(),
        *DIFFUSION,
        "--batch_size=4",
        "--steps=4",
        "--save_freq=4",
        "--log_freq=1",
        "--num_workers=2",
        "--output_dir=" + str(out),
        "--wandb.enable=false",
        "--dataset.eval_split=0.5",
        "--eval_steps=2",
        "--max_eval_samples=8",
    ]
    proc = run_train(args, tmp_path, trace=trace)
    _ok(proc)
    log = proc.stdout + proc.stderr
    assert "train/eval split of local/g1_v30: 1 train, 1 eval episodes" in log
    assert "eval stream" in log and "step 2: eval_loss=" in log and "step 4: eval_loss=" in log
    import json as _json

    lengths = {0: 393, 1: 343}  # data/g1_v30
    drop = 16 - 8 - 2 + 1  # diffusion: horizon - n_action_steps - n_obs_steps + 1
    recs = read_trace(Path(f"{trace}.rank0"))
    assert sorted(recs) == [0, 1, 2, 3]
    for rec in recs.values():
        assert set(rec["episode_index"]) == {0}  # episode 1 is held out for eval
        assert max(rec["frame_index"]) < lengths[0] - drop
    doc = _json.loads((out / "checkpoints" / "000004" / "training_state" / "lerobotstream_stream.json").read_text())
    assert doc["run"]["drop_n_last_frames"] == drop and doc["run"]["eval_split"] == 0.5


def test_elastic_resume_on_two_processes(first_run):
    """The 1-process checkpoint resumed by 2 processes (torchrun): the epoch continues with samples
    the first run had not consumed, each once over both ranks, and the log says what changed."""
    import sys

    tmp, out, trace_a, _, workers = first_run
    if workers != WORKERS:
        pytest.skip("checked once, on the 2-worker run")
    cfg = out / "checkpoints" / f"{SAVE:06d}" / "pretrained_model" / "train_config.json"
    trace_b = tmp / "trace_elastic_ranks"
    torchrun = str(Path(sys.executable).parent / "torchrun")
    proc = run_train(
        ["--resume=true", f"--config_path={cfg}"],
        tmp,
        trace=trace_b,
        launcher=[torchrun, "--nproc_per_node=2", "--master_port=29519"],
    )
    _ok(proc)
    text = proc.stdout + proc.stderr
    assert "elastic resume at step 3 (world_size: checkpoint 1, now 2)" in text, text[-3000:]
    a = read_trace(Path(f"{trace_a}.rank0"))
    consumed = {(e, f) for s in range(SAVE) for e, f in zip(a[s]["episode_index"], a[s]["frame_index"])}
    after = []
    for rank in (0, 1):
        b = read_trace(Path(f"{trace_b}.rank{rank}"))
        assert sorted(b) == list(range(SAVE, STEPS))
        after += [(e, f) for s in sorted(b) for e, f in zip(b[s]["episode_index"], b[s]["frame_index"])]
    assert len(after) == 2 * (STEPS - SAVE) * BS
    assert not consumed & set(after) and len(after) == len(set(after))


def test_mixture_of_two_datasets_trains_resumes_and_is_recorded(have_dataset, tmp_path):
    """``--dataset.repo_id='[a,b]'`` with ``--dataset.streaming_weights``: both datasets reach the
    batches (``dataset_index``), the checkpoint and summary record the mixture, resume is
    sample-exact, and another mixture is refused."""
    import shutil

    copy = tmp_path / "g1_copy"
    shutil.copytree(have_dataset, copy)
    mix = [
        "--dataset.repo_id=[local/g1_a,local/g1_b]",
        f"--dataset.root=[{have_dataset},{copy}]",
        "--dataset.streaming_weights=[0.75,0.25]",
    ]
    args = [
        *mix,
        *dataset_args()[2:],
        *SMALL_ACT,
        "--batch_size=4",
        "--steps=8",
        "--save_freq=4",
        "--log_freq=1",
        "--num_workers=2",
        f"--output_dir={tmp_path / 'out'}",
        "--wandb.enable=false",
    ]
    trace = tmp_path / "trace_a"
    proc = run_train(args, tmp_path, trace=trace)
    _ok(proc)
    recs = read_trace(Path(f"{trace}.rank0"))
    assert sorted(recs) == list(range(8))
    taken = [d for rec in recs.values() for d in rec["dataset_index"]]
    assert set(taken) == {0, 1} and taken.count(0) > taken.count(1)
    summary = json.loads((tmp_path / "out" / "streaming_summary.json").read_text())
    assert summary["mixture"]["repo_ids"] == ["local/g1_a", "local/g1_b"]
    assert summary["mixture"]["weights"] == [0.75, 0.25]
    assert sum(summary["samples_by_dataset"].values()) == 32
    ckpt = tmp_path / "out" / "checkpoints" / "000004"
    doc = json.loads((ckpt / "training_state" / "lerobotstream_stream.json").read_text())
    assert doc["stream"]["mixture"]["repo_ids"] == ["local/g1_a", "local/g1_b"]
    assert doc["run"]["streaming_weights"] == [0.75, 0.25]
    cfg = json.loads((ckpt / "pretrained_model" / "train_config.json").read_text())
    assert cfg["dataset"]["streaming_weights"] == [0.75, 0.25]

    trace_b = tmp_path / "trace_b"
    cfg_path = ckpt / "pretrained_model" / "train_config.json"
    proc = run_train(["--resume=true", f"--config_path={cfg_path}"], tmp_path, trace=trace_b)
    _ok(proc)
    b = read_trace(Path(f"{trace_b}.rank0"))
    assert sorted(b) == list(range(4, 8))
    for step in range(4, 8):
        key = ("dataset_index", "episode_index", "frame_index")
        assert tuple(b[step][k] for k in key) == tuple(recs[step][k] for k in key), step

    # another --num_workers and --batch_size: elastic, each dataset's remainder mixed at the weights
    trace_c = tmp_path / "trace_c"
    proc = run_train(
        ["--resume=true", f"--config_path={cfg_path}", "--num_workers=1", "--batch_size=3"], tmp_path, trace=trace_c
    )
    _ok(proc)
    text = proc.stdout + proc.stderr
    assert "elastic resume at step 4 (batch_size: checkpoint 4, now 3; num_workers: checkpoint 2, now 1)" in text, text[
        -3000:
    ]
    assert "per dataset) samples left over all ranks" in text
    key = ("dataset_index", "episode_index", "frame_index")
    consumed = {x for step in range(4) for x in zip(*(recs[step][k] for k in key))}
    c = read_trace(Path(f"{trace_c}.rank0"))
    after = [x for step in sorted(c) for x in zip(*(c[step][k] for k in key))]
    assert sorted(c) == list(range(4, 8)) and len(after) == 4 * 3
    assert not consumed & set(after) and len(after) == len(set(after))

    proc = run_train(
        ["--resume=true", f"--config_path={cfg_path}", "--dataset.streaming_weights=[0.5,0.5]"], tmp_path, timeout=200
    )
    assert proc.returncode != 0 and "streaming_weights: checkpoint" in proc.stdout + proc.stderr


def test_mixture_model_card_lists_every_dataset(monkeypatch):
    """For a mixture the patched ``generate_model_card`` lists both datasets and the weights."""
    from types import SimpleNamespace

    from huggingface_hub import ModelCard, ModelCardData

    from lerobotstream.integrations.lerobot import model_card, patching

    captured = {}

    def fake_original(self, dataset_repo_id, *args, **kwargs):  # LeRobot's, without the Hub validation
        captured["datasets"] = dataset_repo_id
        return ModelCard.from_template(
            ModelCardData(datasets=dataset_repo_id), template_str="---\n{{ card_data }}\n---\n# policy\n"
        )

    monkeypatch.setattr(patching, "original", lambda name: fake_original)
    monkeypatch.setattr(patching, "model_card_target", lambda: (None, True))  # 0.6.1's method form
    stream = SimpleNamespace(
        dataset=SimpleNamespace(mixture={"repo_ids": ["a/x", "b/y"], "weights": [3.0, 1.0], "weights_given": True})
    )
    run = SimpleNamespace(stream=stream)
    card = model_card.mixture_model_card(run)(object(), "[a/x,b/y]")
    assert captured["datasets"] == ["a/x", "b/y"]
    assert "| a/x | 0.7500 |" in card.text and "| b/y | 0.2500 |" in card.text
    assert "a/x" in str(card.data.datasets) and "b/y" in str(card.data.datasets)


def test_mixture_model_card_with_the_free_function_of_lerobot_main(monkeypatch):
    """LeRobot main (after 0.6.1) renders cards with ``generate_model_card(model_cfg, cfg, dataset_meta)``,
    whose ``datasets`` is ``cfg.dataset.repo_id`` (the string '[a/x,b/y]' for a mixture)."""
    from types import SimpleNamespace

    from huggingface_hub import ModelCard, ModelCardData

    from lerobotstream.integrations.lerobot import model_card, patching

    def fake_original(model_cfg, cfg=None, dataset_meta=None):
        return ModelCard.from_template(
            ModelCardData(datasets=cfg.dataset.repo_id), template_str="---\n{{ card_data }}\n---\n# policy\n"
        )

    monkeypatch.setattr(patching, "original", lambda name: fake_original)
    monkeypatch.setattr(patching, "model_card_target", lambda: (None, False))
    stream = SimpleNamespace(
        dataset=SimpleNamespace(mixture={"repo_ids": ["a/x", "b/y"], "weights": [1.0, 1.0], "weights_given": False})
    )
    card = model_card.mixture_model_card(SimpleNamespace(stream=stream))(
        object(), SimpleNamespace(dataset=SimpleNamespace(repo_id="[a/x,b/y]")), None
    )
    assert card.data.datasets == ["a/x", "b/y"] and "| a/x | 0.5000 |" in card.text
    assert "in proportion to its frames" in card.text


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--dataset.repo_id=[a/x,b/y]", "--dataset.root=[/x]"], "one root per dataset"),
        (["--dataset.repo_id=[a/x,b/y]", "--dataset.streaming_weights=[1,0]"], "numbers > 0"),
        (["--dataset.repo_id=a/x", "--dataset.streaming_weights=[1,2]"], "needs several datasets"),
    ],
)
def test_bad_mixture_flags_give_one_error_line(tmp_path, flags, message):
    proc = run_train([*flags, "--dataset.streaming=true", "--policy.type=act"], tmp_path, timeout=200)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "error: StreamingConfigError: " in proc.stderr and message in proc.stderr


def test_streaming_loader_modes_give_the_dataloaders_batches(have_dataset, tmp_path):
    """--dataset.streaming_loader: StreamLoader's threads and processes modes train on the batches
    torch's DataLoader gives (the trace: episode and frame of every sample of every step, and the
    worker that made it); the summary names the loader."""
    traces = {}
    for mode in ("dataloader", "threads", "processes"):
        out, trace = tmp_path / f"out_{mode}", tmp_path / f"trace_{mode}"
        proc = run_train(
            [*_common(out, steps=4, workers=2), f"--dataset.streaming_loader={mode}"], tmp_path, trace=trace
        )
        _ok(proc)
        summary = json.loads((out / "streaming_summary.json").read_text())
        assert summary["loader"].startswith("DataLoader, 2 " if mode == "dataloader" else f"StreamLoader {mode}, 2 ")
        assert f"{summary['loader']}, batch" in proc.stdout  # the summary's first line names it
        traces[mode] = {
            s: (r["episode_index"], r["frame_index"], r["worker"])
            for s, r in read_trace(Path(f"{trace}.rank0")).items()
        }
    assert traces["threads"] == traces["dataloader"] == traces["processes"]
    assert sorted(traces["dataloader"]) == list(range(4))
