"""lerobotstream-train's resume check: which setting changes resume elastically, which are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from lerobotstream.errors import ResumeStateError
from lerobotstream.integrations.lerobot.resume import ELASTIC_KEYS, check_resume

SETTINGS = {
    "repo_id": "o/n",
    "episodes": None,
    "world_size": 2,
    "batch_size": 8,
    "num_workers": 2,
    "seed": 1000,
    "sampling_strategy": "remaining",
    "episode_pool_size": None,
    "byte_budget_gb": 8.0,
    "drop_n_last_frames": 0,
    "eval_split": 0.0,
    "streaming_weights": None,
}


def test_elastic_settings_are_returned_the_rest_refused():
    doc = {"step": 5, "settings": dict(SETTINGS)}
    now = dict(SETTINGS, world_size=4, batch_size=6, num_workers=3)
    assert check_resume(doc, now, 5, Path("ck"), elastic=True) == [
        "world_size: checkpoint 2, now 4",
        "batch_size: checkpoint 8, now 6",
        "num_workers: checkpoint 2, now 3",
    ]
    assert check_resume(doc, dict(SETTINGS), 5, Path("ck"), elastic=True) == []
    with pytest.raises(ResumeStateError, match="(?s)seed: checkpoint 1000, now 7.*same dataset, episodes, seed"):
        check_resume(doc, dict(now, seed=7), 5, Path("ck"), elastic=True)
    with pytest.raises(ResumeStateError, match="world_size: checkpoint"):  # elastic=False: the sample-exact rule
        check_resume(doc, now, 5, Path("ck"), elastic=False)
    assert set(ELASTIC_KEYS) <= set(SETTINGS)


def test_the_resume_log_line_says_what_changed_and_what_is_left():
    from lerobotstream.integrations.lerobot.resume import describe_resume

    info = {
        "epoch": 0,
        "samples_left": 90,
        "rank_samples": 30,
        "unit": "episodes",
        "whole": 4,
        "started": 2,
        "samples_left_per_dataset": [60, 30],
    }  # Planner.remainder_info's one schema
    line = describe_resume(3, ["num_workers: checkpoint 2, now 3", "world_size: checkpoint 1, now 3"], info, 12)
    assert "elastic resume at step 3 (num_workers: checkpoint 2, now 3; world_size: checkpoint 1, now 3)" in line
    assert (
        "has 90 (60, 30 per dataset) samples left over all ranks (30 on this rank; 4 episodes whole, 2 started)" in line
    )
    assert (
        describe_resume(3, [], None, 12)
        == "lerobotstream: resuming the stream at step 3 (12 samples per rank consumed)"
    )
    assert "inside an elastic remainder" in describe_resume(5, [], info, 20)
