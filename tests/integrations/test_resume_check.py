"""lerobotstream-train's resume check: which setting changes resume elastically, which are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lerobotstream.errors import ResumeStateError
from lerobotstream.integrations.lerobot import resume
from lerobotstream.integrations.lerobot.resume import check_resume
from lerobotstream.planner._state import ELASTIC_SETTINGS
from tests._planners import make_planner

RUN = {"repo_id": "o/n", "episodes": None, "drop_n_last_frames": 0, "eval_split": 0.0, "streaming_weights": None}
LENGTHS = {e: 5 + e % 4 for e in range(24)}


def _state(**kw):
    """The stream's one resume state (what the dataset's ``state_dict()`` writes) for these settings."""
    s = {"seed": 1000, "batch_size": 8, "num_workers": 2, "world_size": 2, "rank": 0, **kw}
    return make_planner(LENGTHS, **s).state_dict(samples_consumed=0)


def test_elastic_settings_are_returned_the_rest_refused():
    doc = {"step": 5, "run": dict(RUN), "stream": _state()}
    now = _state(world_size=4, batch_size=6, num_workers=3)
    assert check_resume(doc, dict(RUN), now, 5, Path("ck")) == [
        "batch_size: checkpoint 8, now 6",
        "world_size: checkpoint 2, now 4",
        "num_workers: checkpoint 2, now 3",
    ]
    assert check_resume(doc, dict(RUN), _state(), 5, Path("ck")) == []
    with pytest.raises(ResumeStateError, match="(?s)seed: checkpoint 1000, now 7.*same dataset, episodes, seed"):
        check_resume(doc, dict(RUN), _state(seed=7), 5, Path("ck"))
    with pytest.raises(ResumeStateError, match="drop_n_last_frames: checkpoint 0, now 2"):  # the run's own settings
        check_resume(doc, dict(RUN, drop_n_last_frames=2), _state(), 5, Path("ck"))


def test_the_training_resume_uses_the_one_elastic_definition():
    """Bug: lerobotstream-train kept its own copy of the elastic keys, without ``repeat``,
    ``drop_last`` and ``equalize``: a resume the dataset replans elastically was refused. The
    record wraps the stream's state; what may change is ``planner._state.ELASTIC_SETTINGS``."""
    assert not hasattr(resume, "ELASTIC_KEYS")
    assert {"repeat", "drop_last", "equalize", "byte_budget", "episode_pool_size"} <= set(ELASTIC_SETTINGS)
    doc = {"step": 5, "run": dict(RUN), "stream": _state()}
    assert check_resume(doc, dict(RUN), _state(drop_last=True, repeat=True), 5, Path("ck")) == [
        "repeat: checkpoint False, now True",
        "drop_last: checkpoint False, now True",
    ]
    assert not set(RUN) & set(doc["stream"])  # the run's settings: only what the stream state lacks


def test_a_record_of_an_earlier_build_is_refused_naming_its_format(tmp_path):
    from lerobotstream.integrations.lerobot.resume import STATE_FILE, read_checkpoint_state

    path = tmp_path / "training_state" / STATE_FILE
    path.parent.mkdir()
    path.write_text(json.dumps({"format": "lerobotstream-train-stream/1", "step": 2, "settings": {}}))
    with pytest.raises(
        ResumeStateError, match="format 'lerobotstream-train-stream/1'; this build reads 'lerobotstream-train-stream/2'"
    ) as info:
        read_checkpoint_state(tmp_path)
    assert "new run from the saved weights" in str(info.value) and "pretrained_model" in str(info.value)
    old_stream = {k: v for k, v in _state().items() if k != "schema"} | {"lerobotstream_planner_schema": 2}
    with pytest.raises(
        ResumeStateError, match="has schema 2 \\(under 'lerobotstream_planner_schema', the marker of an earlier"
    ):
        check_resume({"step": 5, "run": dict(RUN), "stream": old_stream}, dict(RUN), _state(), 5, Path("ck"))


@pytest.mark.parametrize("text", ['{"format": "lerobotstream-train-str', "\xff\xfe", "", "[1, 2]", '{"format": null}'])
def test_a_truncated_or_undecodable_record_gets_the_new_run_advice(tmp_path, text):
    """User trial: a truncated or undecodable lerobotstream_stream.json said only "cannot read"; it
    (and a record that is not a dict, or has no format) now says to start a new run from the saved
    weights, as every other mismatch does."""
    from lerobotstream.integrations.lerobot.resume import STATE_FILE, read_checkpoint_state

    path = tmp_path / "training_state" / STATE_FILE
    path.parent.mkdir()
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ResumeStateError) as info:
        read_checkpoint_state(tmp_path)
    assert "new run from the saved weights" in str(info.value) and "pretrained_model" in str(info.value)


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


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(make_generated_dataset(repo_id="o/n", episode_lengths=(6, 5, 7, 4), codec="av1"))


def test_lerobotstream_train_writes_and_resumes_the_one_state(root, tmp_path):
    """The training hooks' record round trip (without LeRobot: a fake config): the checkpoint holds
    the dataset's own ``state_dict()`` under ``stream``; the same settings resume at
    ``step x batch_size``, another batch size resumes elastically from the checkpoint's state."""
    import types

    from lerobotstream import StreamingLeRobotDataset
    from lerobotstream.integrations.lerobot import hooks
    from lerobotstream.integrations.lerobot.resume import read_checkpoint_state, run_settings, write_checkpoint_state

    def cfg(batch_size):
        d = types.SimpleNamespace(repo_id="o/n", episodes=None, eval_split=0.0, streaming_weights=None)
        pol = types.SimpleNamespace(drop_n_last_frames=0)
        return types.SimpleNamespace(
            checkpoint_path=tmp_path, batch_size=batch_size, num_workers=0, seed=1000, dataset=d, policy=pol
        )

    first = StreamingLeRobotDataset(root=root, batch_size=2)
    (tmp_path / "training_state").mkdir()
    (tmp_path / "training_state" / "training_step.json").write_text(json.dumps({"step": 3}))
    write_checkpoint_state(tmp_path, 3, run_settings(cfg(2)), first.state_dict(samples_consumed=6))
    assert read_checkpoint_state(tmp_path)["stream"] == first.state_dict(samples_consumed=6)
    for batch_size, changes in ((2, []), (3, ["batch_size: checkpoint 2, now 3"])):
        ds = StreamingLeRobotDataset(root=root, batch_size=batch_size)
        run = hooks.Run(cfg(batch_size))
        run.run_settings = run_settings(cfg(batch_size))
        run._resume(cfg(batch_size), types.SimpleNamespace(dataset=ds))
        assert run.start_step == 3 and ds.resume_changes == changes
        assert ds.samples_consumed == (6 if not changes else 0)  # elastic: counted from the remainder's start
