"""lerobot-train seams without LeRobot installed: version checks name what is missing, the
patches are always restored, the eval split follows LeRobot's rule (fake LeRobot modules)."""

from __future__ import annotations

import sys
import types

import pytest

from lerobotstream.errors import LeRobotIntegrationError, StreamingConfigError
from lerobotstream.integrations.lerobot import patching
from lerobotstream.integrations.lerobot.factory import split_episodes_by_task
from lerobotstream.meta import EpisodeInfo


def _fake_lerobot(monkeypatch, version, **names):
    lerobot = types.ModuleType("lerobot")
    scripts = types.ModuleType("lerobot.scripts")
    lt = types.ModuleType("lerobot.scripts.lerobot_train")
    for k, v in names.items():
        setattr(lt, k, v)
    scripts.lerobot_train = lt
    lerobot.scripts = scripts
    for mod in (lerobot, scripts, lt):
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
    accelerate = types.ModuleType("accelerate")
    accelerate.Accelerator = type("Accelerator", (), {})
    monkeypatch.setitem(sys.modules, "accelerate", accelerate)
    monkeypatch.setattr(patching, "lerobot_version", lambda: version)
    return lt, accelerate


def _train(cfg, accelerator=None):
    return cfg


def _wrapped():
    def train(cfg):
        return cfg

    train.__wrapped__ = _train
    return train


def test_old_version_is_refused(monkeypatch):
    _fake_lerobot(monkeypatch, (0, 3, 9))
    with pytest.raises(
        LeRobotIntegrationError, match=r"lerobot>=0\.4\.4 \(tested: 0\.6\.1 and 0\.4\.4\); found 0\.3\.9"
    ):
        patching.check_lerobot()


def test_missing_seams_are_named(monkeypatch):
    _fake_lerobot(monkeypatch, (0, 7, 0), cycle=iter, train=_wrapped())
    with pytest.raises(LeRobotIntegrationError) as e:
        patching.check_lerobot()
    text = str(e.value)
    assert "lerobot 0.7.0 is not supported" in text and "save_checkpoint" in text
    assert "make_train_eval_datasets or make_dataset" in text and "cycle," not in text


@pytest.mark.parametrize("seam", ["make_train_eval_datasets", "make_dataset"])
def test_patches_are_installed_and_restored(monkeypatch, seam):
    orig = object()
    lt, accelerate = _fake_lerobot(
        monkeypatch, (0, 6, 1), cycle=iter, save_checkpoint=print, train=_wrapped(), **{seam: orig}
    )
    if seam == "make_dataset":  # 0.4.4 imports Accelerator at module level
        lt.Accelerator = accelerate.Accelerator
    assert patching.dataset_seam(lt) == seam
    acc = accelerate.Accelerator
    mine = type("Mine", (acc,), {})
    with pytest.raises(RuntimeError, match="boom"):
        with patching.installed(**{seam: len}, cycle=sorted, Accelerator=mine):
            assert getattr(lt, seam) is len and lt.cycle is sorted and accelerate.Accelerator is mine
            assert patching.original(seam) is orig and patching.original("Accelerator") is acc
            if seam == "make_dataset":
                assert lt.Accelerator is mine
            raise RuntimeError("boom")
    assert getattr(lt, seam) is orig and lt.cycle is iter and accelerate.Accelerator is acc
    assert getattr(lt, "Accelerator", acc) is acc


def _ep(i, task):
    return EpisodeInfo(
        episode_index=i,
        length=3,
        dataset_from_index=3 * i,
        dataset_to_index=3 * i + 3,
        data_path="d",
        data_chunk_index=0,
        data_file_index=0,
        tasks=(task,) if task else (),
    )


def test_eval_split_is_lerobots_per_task_rule():
    eps = [_ep(0, "a"), _ep(1, "b"), _ep(2, "a"), _ep(3, "a"), _ep(4, "b"), _ep(5, None)]
    # a: [0, 2, 3] -> ceil(0.3) = 1 held out; b: [1, 4] -> 1; "": [5] -> 1 (so training keeps a and b)
    assert split_episodes_by_task(eps, 0.1) == ([0, 2, 1], [3, 4, 5])
    assert split_episodes_by_task(eps[:5], 0.5) == ([0, 1], [2, 3, 4])
    with pytest.raises(StreamingConfigError, match="leaves 0 training episodes from 1 total"):
        split_episodes_by_task([_ep(0, "a")], 0.2)


def test_the_train_command_without_lerobot_is_one_line(tmp_path):
    """``lerobotstream-train`` where LeRobot is not installed: one typed line, exit 2, no traceback
    (the entry point imports LeRobot only inside its checks)."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("lerobot") is not None:
        pytest.skip("LeRobot is installed here")
    proc = subprocess.run(
        [sys.executable, "-m", "lerobotstream.integrations.lerobot", "--dataset.repo_id=a/b"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert "LeRobotIntegrationError" in proc.stderr and "Traceback" not in proc.stderr
