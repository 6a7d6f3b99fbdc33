"""Seams of ``lerobotstream-train``'s dataset factory that the next LeRobot changes (issue 29, new-user
item 8; huggingface/lerobot main, 0.6.2.dev): ``resolve_delta_timestamps(cfg, meta, rename_map)``
(#4076) and ``--dataset.exclude_episodes``. Both must work on 0.6.1 (no such argument or flag) and on
main. No training run: the factory helpers are called directly."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import lerobot.datasets.factory as lerobot_factory
import pytest
from conftest import DATASET

from lerobotstream.errors import StreamingConfigError
from lerobotstream.integrations.lerobot import factory


@pytest.fixture(scope="module")
def meta():
    from lerobotstream.meta import DatasetMeta

    return DatasetMeta.load(str(DATASET), repo_id="local/g1_v30")


def _cfg(rename_map=None):
    policy = SimpleNamespace(observation_delta_indices=[-1, 0], action_delta_indices=[0, 1], reward_delta_indices=None)
    return SimpleNamespace(policy=policy, trainable_config=policy, rename_map=rename_map or {})


@pytest.mark.parametrize("takes_map", [True, False])
def test_rename_map_is_passed_where_lerobot_takes_it(monkeypatch, meta, takes_map):
    calls = []
    if takes_map:

        def resolve(cfg, ds_meta, rename_map=None):
            calls.append(rename_map)
            return {}
    else:

        def resolve(cfg, ds_meta):
            calls.append("no map")
            return {}

    monkeypatch.setattr(lerobot_factory, "resolve_delta_timestamps", resolve)
    factory._delta_timestamps(_cfg({"observation.images.cam_high": "observation.images.top"}), meta)
    factory._delta_timestamps(_cfg(), meta)  # no map: LeRobot's two-argument call
    assert calls == (
        [{"observation.images.cam_high": "observation.images.top"}, None] if takes_map else ["no map", "no map"]
    )


def test_delta_timestamps_with_the_installed_lerobot(meta):
    dt = factory._delta_timestamps(_cfg(), meta)
    fps = meta.fps
    assert dt["action"] == [0.0, 1 / fps] and dt["observation.state"] == [-1 / fps, 0.0]
    assert dt["observation.images.cam_high"] == [-1 / fps, 0.0]


def test_exclude_episodes(caplog):
    d = SimpleNamespace(episodes=None, exclude_episodes=None, repo_id="a/b")
    assert factory._selected_episodes(d, 5) is None  # nothing asked: every episode (0.6.1 has no such flag)
    d.exclude_episodes = [1, 9]
    with caplog.at_level(logging.WARNING, logger="lerobotstream.train"):
        assert factory._selected_episodes(d, 5) == [0, 2, 3, 4]
    assert "[9]" in caplog.text  # ignored with a warning, as LeRobot's resolve_episode_indices
    d.episodes, d.exclude_episodes = [3, 1, 4], [1]
    assert factory._selected_episodes(d, 5) == [3, 4]  # order kept
    d.exclude_episodes = [1, 3, 4]
    with pytest.raises(StreamingConfigError, match="leaves no episode of a/b"):
        factory._selected_episodes(d, 5)
