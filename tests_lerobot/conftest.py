"""End-to-end tests of ``lerobotstream-train`` in the LeRobot venv (``make test-lerobot``).

They run the installed console script in subprocesses on the bundled real dataset
(``data/g1_v30``, 2 episodes, 480x640 AV1), with tiny ACT dimensions and images resized to 96x128
by a LeRobot image transform so a step takes well under a second on a CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATASET = REPO / "data" / "g1_v30"
BIN = Path(sys.executable).parent

RESIZE = json.dumps({"resize": {"type": "Resize", "kwargs": {"size": [96, 128]}, "weight": 1.0}})

SMALL_ACT = [
    "--policy.type=act",
    "--policy.device=cpu",
    "--policy.push_to_hub=false",
    "--policy.dim_model=32",
    "--policy.n_heads=2",
    "--policy.dim_feedforward=64",
    "--policy.n_encoder_layers=1",
    "--policy.n_decoder_layers=1",
    "--policy.n_vae_encoder_layers=1",
    "--policy.latent_dim=8",
    "--policy.chunk_size=8",
    "--policy.n_action_steps=8",
    "--policy.pretrained_backbone_weights=null",
    "--policy.optimizer_lr=1e-3",
]


def dataset_args(root: Path = DATASET) -> list[str]:
    return [
        "--dataset.repo_id=local/g1_v30",
        f"--dataset.root={root}",
        "--dataset.streaming=true",
        "--dataset.image_transforms.enable=true",
        "--dataset.image_transforms.max_num_transforms=1",
        f"--dataset.image_transforms.tfs={RESIZE}",
        "--dataset.streaming_decode_threads=1",
        "--dataset.streaming_prefetch_episodes=1",
    ]


def env_for(tmp: Path, trace: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEROBOTSTREAM_", "HF_"))}
    env.update(
        HF_HUB_OFFLINE="1",
        HF_LEROBOT_HOME=str(tmp / "hf_lerobot"),
        HF_HOME=str(tmp / "hf"),
        WANDB_MODE="disabled",
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
    )
    if trace is not None:
        env["LEROBOTSTREAM_TRAIN_TRACE"] = str(trace)
    return env


def run_train(
    args: list[str], tmp: Path, *, trace: Path | None = None, launcher: list[str] | None = None, timeout: float = 400
) -> subprocess.CompletedProcess:
    cmd = (launcher or []) + [str(BIN / "lerobotstream-train")] + args
    return subprocess.run(cmd, cwd=tmp, env=env_for(tmp, trace), capture_output=True, text=True, timeout=timeout)


def read_trace(path: Path) -> dict[int, dict]:
    """step -> batch record (later records for the same step replace earlier ones)."""
    out = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        out[rec["step"]] = rec
    return out


@pytest.fixture(scope="session")
def have_dataset() -> Path:
    if not (DATASET / "meta" / "info.json").is_file():
        pytest.fail(f"bundled dataset missing: {DATASET}")
    if shutil.which(str(BIN / "lerobotstream-train")) is None:
        pytest.fail("lerobotstream-train is not installed in this venv (make setup-lerobot)")
    return DATASET


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here is ``needs_lerobot`` (``pytest -m needs_lerobot`` selects them; LeRobot's venv,
    ``make test-lerobot``); without LeRobot installed they skip instead of failing."""
    import importlib.util

    here = Path(__file__).resolve().parent
    missing = importlib.util.find_spec("lerobot") is None
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.needs_lerobot)
            if missing:
                item.add_marker(pytest.mark.skip(reason="needs LeRobot (make test-lerobot)"))
