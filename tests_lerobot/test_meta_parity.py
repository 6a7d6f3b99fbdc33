"""``TrainingStream.meta`` against LeRobot's own ``LeRobotDatasetMetadata`` on the same dataset,
and LeRobot's own code paths (delta timestamps, policy factory, model card, eval split) run on it."""

from __future__ import annotations

import math
import pickle
from importlib.metadata import version as _version

import numpy as np
import pytest
from conftest import DATASET

from lerobotstream import StreamingLeRobotDataset
from lerobotstream.errors import StreamingConfigError
from lerobotstream.integrations.lerobot.factory import TrainingStream, split_episodes_by_task

if not _version("lerobot").startswith("0.6"):
    pytest.skip("parity with LeRobot 0.6's LeRobotDatasetMetadata", allow_module_level=True)


@pytest.fixture(scope="module")
def both(have_dataset):
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata

    theirs = LeRobotDatasetMetadata("local/g1_v30", root=DATASET)
    ours = TrainingStream(StreamingLeRobotDataset(repo_id="local/g1_v30", root=DATASET)).meta
    return ours, theirs


@pytest.mark.parametrize(
    "name",
    [
        "fps",
        "features",
        "camera_keys",
        "video_keys",
        "image_keys",
        "depth_keys",
        "has_language_columns",
        "robot_type",
        "total_episodes",
        "total_frames",
        "total_tasks",
        "chunks_size",
        "data_path",
        "video_path",
        "repo_id",
        "names",
        "shapes",
        "data_files_size_in_mb",
        "video_files_size_in_mb",
    ],
)
def test_attribute_equals_lerobots(both, name):
    ours, theirs = both
    a, b = getattr(ours, name), getattr(theirs, name)
    if name == "shapes":
        a, b = {k: tuple(v) for k, v in a.items()}, {k: tuple(v) for k, v in b.items()}
    assert a == b, (name, a, b)


def test_tasks_frame_and_task_index(both):
    ours, theirs = both
    assert list(ours.tasks.index) == list(theirs.tasks.index)
    assert ours.tasks.index.name == theirs.tasks.index.name
    assert ours.tasks["task_index"].tolist() == theirs.tasks["task_index"].tolist()
    task = theirs.tasks.index[0]
    assert ours.get_task_index(task) == theirs.get_task_index(task) == 0
    assert ours.get_task_index("no such task") is theirs.get_task_index("no such task") is None


def test_stats_are_numpy_like_lerobots(both):
    ours, theirs = both
    assert set(ours.stats) == set(theirs.stats)
    for key, d in theirs.stats.items():
        assert set(ours.stats[key]) == set(d), key
        for stat, value in d.items():
            assert isinstance(ours.stats[key][stat], np.ndarray)
            np.testing.assert_array_equal(ours.stats[key][stat], value, err_msg=f"{key}/{stat}")


def test_episode_columns_and_rows(both):
    ours, theirs = both
    for col in (
        "episode_index",
        "length",
        "dataset_from_index",
        "dataset_to_index",
        "tasks",
        "data/chunk_index",
        "data/file_index",
        "videos/observation.images.cam_high/from_timestamp",
    ):
        assert list(ours.episodes[col]) == list(theirs.episodes[col]), col
        assert ours.episodes[col][1] == theirs.episodes[col][1]
    assert len(ours.episodes) == len(theirs.episodes)
    assert ours.episodes[0]["length"] == theirs.episodes[0]["length"]
    assert ours.episodes.to_pandas()["length"].tolist() == theirs.episodes.to_pandas()["length"].tolist()


def test_view_pickles(both):
    ours, _ = both
    clone = pickle.loads(pickle.dumps(ours))
    assert clone.camera_keys == ours.camera_keys and list(clone.tasks.index) == list(ours.tasks.index)


def test_lerobots_own_code_paths_run_on_the_view(both):
    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy

    try:
        from lerobot.policies.pretrained import _build_card_context  # 0.6.1
    except ImportError:  # LeRobot main (0.6.2.dev): a public function beside generate_model_card
        from lerobot.common.train_utils import build_card_context as _build_card_context

    ours, theirs = both
    cfg = ACTConfig(
        device="cpu",
        pretrained_backbone_weights=None,
        dim_model=16,
        n_heads=2,
        dim_feedforward=32,
        n_encoder_layers=1,
        n_decoder_layers=1,
        chunk_size=4,
        n_action_steps=4,
        push_to_hub=False,
    )
    assert resolve_delta_timestamps(cfg, ours) == resolve_delta_timestamps(cfg, theirs)
    policy = make_policy(cfg, ds_meta=ours)
    assert set(policy.config.input_features) == set(make_policy(cfg, ds_meta=theirs).config.input_features)
    card = _build_card_context(None, ours, policy.config.input_features, policy.config.output_features)
    assert card["dataset"] == _build_card_context(None, theirs, None, None)["dataset"]
    assert card["cameras"] == ["cam_high"]


def test_eval_split_matches_lerobots_rule(both):
    ours, theirs = both
    with pytest.raises(StreamingConfigError, match="leaves 0 training episodes"):
        split_episodes_by_task(list(ours._meta.episodes), 0.9)  # LeRobot raises ValueError too
    for split in (0.1, 0.5):
        train, held = split_episodes_by_task(list(ours._meta.episodes), split)
        # LeRobot 0.6.1 make_train_eval_datasets, on its metadata
        by_task: dict = {}
        for ep in range(theirs.total_episodes):
            t = theirs.episodes["tasks"][ep]
            by_task.setdefault(t[0] if t else "", []).append(ep)
        want_train, want_eval = [], []
        for eps in by_task.values():
            n = math.ceil(len(eps) * split)
            want_train += eps[: len(eps) - n]
            want_eval += eps[len(eps) - n :]
        assert (train, held) == (want_train, want_eval), split


def test_imagenet_stats_skip_depth_keys():
    from types import SimpleNamespace

    from lerobotstream.integrations.lerobot.factory import _streams

    feats = {
        "observation.images.rgb": {"dtype": "video", "shape": [3, 4, 4]},
        "observation.images.depth": {
            "dtype": "video",
            "shape": [1, 4, 4],
            "info": {"is_depth_map": True, "depth_unit": "mm"},
        },
    }
    meta = SimpleNamespace(
        features=feats,
        stats={"observation.images.depth": {"mean": [1.0]}},
        episodes=[],
        depth_keys=["observation.images.depth"],
        camera_keys=list(feats),
    )
    cfg = SimpleNamespace(
        dataset=SimpleNamespace(use_imagenet_stats=True, image_transforms=SimpleNamespace(enable=False)),
        policy=SimpleNamespace(),
        max_eval_samples=0,
    )
    dataset = SimpleNamespace(meta=meta, sidecar_status="cache")
    stream, _ = _streams(cfg, lambda **kw: dataset, "cache", None, None, {}, {})
    assert set(stream.meta.stats["observation.images.rgb"]) == {"mean", "std"}
    assert stream.meta.stats["observation.images.depth"]["mean"].tolist() == [1.0]  # untouched
    with pytest.raises(AttributeError, match="already in the dataset's depth_output_unit"):
        stream.meta.rescale_depth_stats("m")
