"""``lerobotstream-train`` as a newcomer meets it (issue 29, new-user items 1, 3, 4, 5): the local copy
in ``$HF_LEROBOT_HOME/<repo_id>`` (LeRobot's rule), one-line typed errors with exit status 2
(``--debug`` / ``LEROBOTSTREAM_DEBUG=1``: the traceback), Ctrl-C as ``interrupted`` with 130, the
closest flag for a mistyped one, the streaming flags first in ``--help``, summary numbers that
say what they compare."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import DATASET, SMALL_ACT, dataset_args, run_train


def _one_error_line(proc, prefix: str) -> str:
    assert proc.returncode == 2, f"rc={proc.returncode}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(prefix), proc.stderr[-3000:]
    return last


def test_mistyped_streaming_flag_names_the_closest_flag(tmp_path):
    proc = run_train([*dataset_args(), "--dataset.streaming_decode_thread=2", *SMALL_ACT], tmp_path, timeout=200)
    line = _one_error_line(proc, "error: StreamingConfigError: ")
    assert line == (
        "error: StreamingConfigError: unknown flag --dataset.streaming_decode_thread: did you mean "
        "--dataset.streaming_decode_threads?"
    )
    assert len(proc.stderr.strip().splitlines()) <= 3 and "usage:" not in proc.stderr  # no 641-line usage


def test_help_starts_with_the_streaming_flags(tmp_path):
    import dataclasses

    from lerobotstream.integrations.lerobot.config import StreamingDatasetConfig

    proc = run_train(["--help"], tmp_path, timeout=200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("lerobotstream-train: lerobot-train plus streaming")
    head = proc.stdout.split("lerobot-train's flags:")[0]  # the streaming section, before LeRobot's list
    for f in dataclasses.fields(StreamingDatasetConfig):
        if f.name.startswith("streaming"):
            assert f"--dataset.{f.name} " in head, f.name
    assert "--dataset.streaming (default: False)" in head and "true: stream the dataset" in head
    assert "concatenates them" not in proc.stdout  # LeRobot's stale repo_id text is replaced
    assert "a weighted mixture" in " ".join(proc.stdout.split())
    assert "usage:" in proc.stdout  # LeRobot's whole list follows


def _v21(tmp: Path) -> Path:
    root = tmp / "v21"
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v2.1", "fps": 30, "features": {}}))
    return root


@pytest.mark.parametrize("case", ["wrong_root", "v21", "bad_episodes", "no_owner"])
def test_typed_start_up_errors_are_one_line(case, have_dataset, tmp_path):
    base = [a for a in dataset_args() if not a.startswith(("--dataset.root=", "--dataset.repo_id="))]
    flags, prefix, words = {
        "wrong_root": (
            ["--dataset.repo_id=local/g1_v30", f"--dataset.root={tmp_path / 'nope'}"],
            "error: SourceNotFoundError: ",
            "dataset root is not a folder",
        ),
        "v21": (
            ["--dataset.repo_id=local/v21", f"--dataset.root={_v21(tmp_path)}"],
            "error: UnsupportedDatasetVersionError: ",
            "v2.1",
        ),
        "bad_episodes": (
            ["--dataset.repo_id=local/g1_v30", f"--dataset.root={DATASET}", "--dataset.episodes=[7]"],
            "error: ",
            "7",
        ),
        "no_owner": (["--dataset.repo_id=g1_v30"], "error: StreamingConfigError: ", "OWNER/NAME"),
    }[case]
    args = [*base, *flags, *SMALL_ACT, "--steps=1", "--num_workers=0", f"--output_dir={tmp_path / 'out'}"]
    proc = run_train(args, tmp_path, timeout=300)
    assert words in _one_error_line(proc, prefix)
    if case == "wrong_root":
        debug = run_train([*args, "--debug"], tmp_path, timeout=300)
        assert debug.returncode != 0 and "Traceback" in debug.stderr and "SourceNotFoundError" in debug.stderr


def test_local_copy_in_hf_lerobot_home_is_used_without_root(have_dataset, tmp_path):
    """LeRobot's map-style dataset finds ``$HF_LEROBOT_HOME/<repo_id>``; the stream went to the Hub."""
    shutil.copytree(DATASET, tmp_path / "hf_lerobot" / "local" / "g1_v30")  # run_train's HF_LEROBOT_HOME
    args = [a for a in dataset_args() if not a.startswith("--dataset.root=")]
    out = tmp_path / "out"
    proc = run_train(
        [
            *args,
            *SMALL_ACT,
            "--batch_size=2",
            "--steps=2",
            "--num_workers=0",
            "--save_freq=100",
            f"--output_dir={out}",
            "--wandb.enable=false",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "streaming_summary.json").read_text())
    assert summary["steps"] == 2 and summary["samples"] == 4
    assert summary["dataset_mp4_bytes"] + summary["dataset_parquet_bytes"] == summary["dataset_bytes"] > 0
    assert "the selected episodes' files" in proc.stdout and "the first batch's" in proc.stdout


def test_ctrl_c_is_one_line_and_status_130(monkeypatch, capsys):
    from lerobotstream.integrations.lerobot import cli, train

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "_parse_and_train", interrupted)
    monkeypatch.delenv("LEROBOTSTREAM_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["lerobotstream-train", "--dataset.repo_id=a/b"])
    with pytest.raises(SystemExit) as ei:
        cli.main()
    assert ei.value.code == 130 and capsys.readouterr().err.strip() == "interrupted"
    monkeypatch.setattr(sys, "argv", ["lerobotstream-train", "--dataset.repo_id=a/b", "--debug"])
    with pytest.raises(KeyboardInterrupt):
        cli.main()
    assert "--debug" not in sys.argv  # removed before LeRobot parses the flags


def test_summary_says_what_it_compares():
    from lerobotstream.integrations.lerobot.summary import format_summary

    s = {
        "rank": 0,
        "world_size": 1,
        "num_workers": 2,
        "batch_size": 4,
        "seed": 1000,
        "start_step": 0,
        "steps": 6,
        "samples": 24,
        "timed_samples": 20,
        "elapsed_s": 10.0,
        "samples_per_s": 2.0,
        "first_batch_s": 9.59,
        "data_wait_share": 0.001,
        "payload_bytes_fetched": 4 * 51917,
        "payload_requests": 30,
        "dataset_bytes": 51917,
        "dataset_mp4_bytes": 41917,
        "dataset_parquet_bytes": 10000,
        "sidecar": "built",
    }
    text = format_summary(s)
    assert "%" not in text.split("payload fetched")[1]  # no percentage of unlike things
    assert "x the" not in text  # no ratio of all epochs' fetches (prefetch included) to the files
    assert (
        "payload fetched by this rank: 202.8 KiB in 30 requests (prefetch ahead of the last step included); "
        "the selected episodes' files: 50.7 KiB = MP4 40.9 KiB + Parquet 9.8 KiB" in text
    )
    assert (
        "waiting for data: 0.1% of step time after the first batch (the first batch's 9.59 s of start-up is "
        "not counted)" in text
    )
