"""StreamingMultiLeRobotDataset on generated datasets with different codecs, fps and episode
lengths: exact-once passes with burned identities, dataset_index, shares vs weights in every
worker and rank, resume mid-mixture, refused resumes, feature mismatches, aggregated stats."""

from __future__ import annotations

import collections
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from lerobotstream import StreamingLeRobotDataset, StreamingMultiLeRobotDataset
from lerobotstream.errors import MixtureFeatureError, ResumeStateError, StreamingConfigError
from lerobotstream.testing import read_identity

FRONT = ("observation.images.front", 48, 32)
SPECS = {  # repo id -> (make_dataset kwargs); each dataset has its own task string
    "mix/av1": dict(
        episode_lengths=(11, 7, 9, 5),
        codec="av1",
        gop=2,
        cameras=(FRONT,),
        tasks=("task av1",),
        episodes_per_video_file=2,
    ),
    "mix/h264": dict(
        episode_lengths=(6, 13, 4),
        fps=15,
        codec="h264",
        gop=6,
        cameras=(FRONT, ("observation.images.wrist", 32, 32)),
        tasks=("task h264",),
    ),
    "mix/hevc": dict(
        episode_lengths=(8, 3, 10, 6, 4),
        codec="hevc",
        cameras=(FRONT,),
        tasks=("task hevc",),
        episodes_per_video_file=3,
    ),
}
REPOS = list(SPECS)


@pytest.fixture(scope="module")
def roots(make_generated_dataset):
    return [Path(make_generated_dataset(repo_id=r, **SPECS[r])) for r in REPOS]


def _mix(roots, repos=REPOS, **kw):
    return StreamingMultiLeRobotDataset(repos, roots=[roots[REPOS.index(r)] for r in repos], **kw)


def _expected(repos=REPOS):
    return {(repos.index(r), e, f) for r in repos for e, n in enumerate(SPECS[r]["episode_lengths"]) for f in range(n)}


def _check_item(item, repos=REPOS):
    d = int(item["dataset_index"])
    assert item["dataset_index"].dtype == torch.int64
    assert item["task"] == SPECS[repos[d]]["tasks"][0], "dataset_index names the dataset the item came from"
    ep, fr = int(item["episode_index"]), int(item["frame_index"])
    got = read_identity(item["observation.images.front"])
    assert got[:2] == (ep, fr), f"dataset {d}: frame of episode {got[0]} frame {got[1]} for ({ep}, {fr})"
    return d, ep, fr


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_pass_is_exact_once_with_identities(roots, num_workers):
    ds = _mix(roots, num_workers=num_workers, weights=[0.6, 0.3, 0.1], episode_pool_size=2, return_uint8=True)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=num_workers)
    seen = collections.Counter(_check_item(item) for item in dl)
    assert max(seen.values()) == 1
    assert set(seen) == _expected()
    assert "observation.images.wrist" not in ds.features  # only in mix/h264: dropped


def test_items_keep_the_common_keys_only(roots):
    item = next(iter(_mix(roots)))
    assert "observation.images.wrist" not in item
    assert {"observation.state", "action", "observation.images.front", "dataset_index", "task"} <= set(item)


def test_two_ranks_union_is_one_pass(roots, monkeypatch):
    seen = collections.Counter()
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        ds = _mix(roots, weights=[1, 1, 1])
        seen.update(_check_item(item) for item in ds)
    assert max(seen.values()) == 1 and set(seen) == _expected()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_endless_shares_follow_weights_in_every_worker(roots, num_workers):
    weights = [0.6, 0.3, 0.1]
    bs = 8
    ds = _mix(roots, weights=weights, repeat=True, num_workers=num_workers, batch_size=bs, episode_pool_size=2)
    dl = torch.utils.data.DataLoader(ds, batch_size=bs, num_workers=num_workers)
    per_worker = collections.defaultdict(collections.Counter)
    for i, batch in enumerate(dl):
        # endless workers give batches in turn: batch i comes from worker i mod N
        per_worker[i % max(1, num_workers)].update(batch["dataset_index"].tolist())
        if i == 2 * 128 - 1:
            break
    for counts in per_worker.values():
        total = sum(counts.values())
        for d, w in enumerate(weights):
            assert abs(counts[d] / total - w) < 0.02, (counts, weights)


def test_default_weights_follow_frame_counts(roots):
    ds = _mix(roots)
    frames = [sum(SPECS[r]["episode_lengths"]) for r in REPOS]
    assert ds.weights == [float(f) for f in frames]
    assert ds.mixture["repo_ids"] == REPOS


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_mid_mixture_is_sample_exact(roots, num_workers):
    kw = dict(weights=[0.5, 0.3, 0.2], repeat=True, num_workers=num_workers, batch_size=4, episode_pool_size=2)

    def batches(ds, n):
        dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=num_workers)
        out = []
        for b in dl:
            out.append(list(zip(b["dataset_index"].tolist(), b["episode_index"].tolist(), b["frame_index"].tolist())))
            if len(out) == n:
                return out
        return out

    full = batches(_mix(roots, **kw), 30)
    state = _mix(roots, **kw).state_dict(batches_consumed=11)
    resumed = _mix(roots, **kw)
    resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert batches(resumed, 19) == full[11:]


def test_resume_refuses_another_mixture(roots):
    state = _mix(roots, weights=[0.5, 0.3, 0.2], repeat=True, batch_size=4).state_dict(samples_consumed=8)
    assert state["mixture"]["repo_ids"] == REPOS
    with pytest.raises(ResumeStateError, match=r"mixture weights: checkpoint \[0.5, 0.3, 0.2\]") as e:
        _mix(roots, weights=[0.2, 0.3, 0.5], repeat=True, batch_size=4).load_state_dict(state)
    assert "integer_weights" not in str(e.value)  # derived from the weights: not named beside them
    with pytest.raises(ResumeStateError, match="mixture"):
        _mix(roots, REPOS[:2], weights=[0.5, 0.3], repeat=True, batch_size=4).load_state_dict(state)
    single = StreamingLeRobotDataset(root=roots[0], repeat=True, batch_size=4)
    with pytest.raises(ResumeStateError, match="mixture"):
        single.load_state_dict(state)
    with pytest.raises(ResumeStateError, match="single-dataset"):
        _mix(roots, weights=[0.5, 0.3, 0.2], repeat=True, batch_size=4).load_state_dict(single.state_dict())


def test_a_common_feature_with_another_shape_names_both(make_generated_dataset, roots):
    other = Path(make_generated_dataset(repo_id="mix/state9", episode_lengths=(5, 6), state_dim=9, cameras=(FRONT,)))
    with pytest.raises(MixtureFeatureError, match=r"observation.state.*mix/av1.*mix/state9"):
        StreamingMultiLeRobotDataset(["mix/av1", "mix/state9"], roots=[roots[0], other])


def test_bad_mixture_options(roots):
    with pytest.raises(StreamingConfigError, match="repo_ids"):
        StreamingMultiLeRobotDataset(["a", "a"], roots=[roots[0], roots[0]])
    with pytest.raises(StreamingConfigError, match="weights"):
        _mix(roots, weights=[1, 0, 1])
    with pytest.raises(StreamingConfigError, match="roots"):
        StreamingMultiLeRobotDataset(REPOS, roots=roots[:2])


def test_equalize_drop_gives_every_rank_of_a_mixture_the_same_batch_count(roots, monkeypatch):
    """Mixtures get ``equalize`` (issue 33: one planner for one dataset or many): every rank stops
    after the smallest rank's batch count, no sample twice."""
    counts, seen = [], collections.Counter()
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        ds = _mix(roots, equalize="drop", batch_size=4, episode_pool_size=2, return_uint8=True)
        plain = _mix(roots, batch_size=4, episode_pool_size=2)._planner(0).current_pass().batches_per_rank()
        items = [_check_item(item) for item in ds]
        counts.append(-(-len(items) // 4))
        assert counts[-1] == min(plain) and len(items) == ds._planner(0).current_pass().epoch_samples()
        seen.update(items)
    assert counts[0] == counts[1] and max(seen.values()) == 1 and plain[0] != plain[1]


def test_per_dataset_episodes_and_windows(roots):
    ds = _mix(
        roots,
        episodes={"mix/av1": [1, 3], "mix/hevc": [0]},
        delta_timestamps={r: {"action": [0.0, 1 / SPECS[r].get("fps", 30)]} for r in REPOS},
    )
    seen = set()
    for item in ds:
        d, ep, fr = _check_item(item)
        seen.add((d, ep, fr))
        assert item["action"].shape[0] == 2 and item["action_is_pad"].shape == (2,)
    want = {(0, e, f) for e in (1, 3) for f in range(SPECS["mix/av1"]["episode_lengths"][e])}
    want |= {(1, e, f) for e, n in enumerate(SPECS["mix/h264"]["episode_lengths"]) for f in range(n)}
    want |= {(2, 0, f) for f in range(SPECS["mix/hevc"]["episode_lengths"][0])}
    assert seen == want


def test_stats_are_aggregated_like_lerobot(roots):
    ds = _mix(roots)
    parts = [c.meta.stats["observation.state"] for c in ds.datasets]
    counts = np.array([p["count"][0] for p in parts], dtype=np.float64)
    means = np.array([p["mean"] for p in parts])
    want_mean = (means * counts[:, None]).sum(0) / counts.sum()
    got = ds.meta.stats["observation.state"]
    np.testing.assert_allclose(got["mean"], want_mean)
    assert got["count"] == [int(counts.sum())]
    np.testing.assert_allclose(got["min"], np.min([p["min"] for p in parts], axis=0))
    var = ((np.array([p["std"] for p in parts]) ** 2 + (means - want_mean) ** 2) * counts[:, None]).sum(
        0
    ) / counts.sum()
    np.testing.assert_allclose(got["std"], np.sqrt(var))


def test_spawn_workers_pickle_small(roots):
    ds = _mix(roots, num_workers=2)
    assert len(pickle.dumps(ds)) < 64 * 1024
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    seen = collections.Counter(_check_item(item) for item in dl)
    assert max(seen.values()) == 1 and set(seen) == _expected()


def test_profile_cli_accepts_a_mixture(roots, tmp_path):
    import json

    from lerobotstream.profile.__main__ import main

    out = tmp_path / "prof.json"
    rc = main(
        [
            "--repo-id",
            ",".join(REPOS),
            "--root",
            ",".join(map(str, roots)),
            "--weights",
            "0.5,0.3,0.2",
            "--num-workers",
            "0",
            "--batch-size",
            "4",
            "--steps",
            "6",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["config"]["mixture"]["repo_ids"] == REPOS
    assert report["throughput"]["samples"] == 24 and report["bytes"]["needed_frame_bytes"] > 0
    assert sum(report["mixture"]["samples"]) == 24 and report["mixture"]["weight_shares"] == [0.5, 0.3, 0.2]


def test_local_and_http_sources_mix(roots, tmp_path):
    import shutil

    from lerobotstream.testing import LoopbackServer

    served = tmp_path / "static"
    shutil.copytree(roots[1], served / "h264")
    server = LoopbackServer.start({"static": str(served)})
    try:
        ds = StreamingMultiLeRobotDataset(
            REPOS[:2], roots=[roots[0], f"{server.static_url}h264/"], weights=[1, 1], num_workers=2
        )
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
        seen = collections.Counter(_check_item(item, REPOS[:2]) for item in dl)
        assert max(seen.values()) == 1 and set(seen) == _expected(REPOS[:2])
        assert any(e["path"].startswith("/static/h264/videos/") for e in server.log())
    finally:
        server.close()


def test_a_window_the_fps_of_one_dataset_cannot_meet_names_it(roots):
    from lerobotstream.errors import DeltaTimestampsError

    with pytest.raises(DeltaTimestampsError, match="mix/h264"):  # 1/30 s is no frame step at 15 fps
        _mix(roots, delta_timestamps={"action": [0.0, 1 / 30]})


def _drop_notes(caplog):
    return [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]


def test_no_note_about_a_camera_the_user_did_not_ask_for(roots, caplog, monkeypatch):
    from lerobotstream.dataset import _multi

    monkeypatch.setattr(_multi, "_NOTED", set())
    with caplog.at_level("WARNING", logger="lerobotstream.dataset"):
        ds = _mix(roots, repos=["mix/av1", "mix/h264"], camera_keys=["observation.images.front"])
    assert ds.camera_keys == ["observation.images.front"] and _drop_notes(caplog) == []


def test_keys_the_mixture_drops_are_noted_once_per_mixture(roots, caplog, monkeypatch):
    from lerobotstream.dataset import _multi

    monkeypatch.setattr(_multi, "_NOTED", set())
    with caplog.at_level("WARNING", logger="lerobotstream.dataset"):
        for _ in range(3):  # lerobotstream-train builds a mixture more than once (train and eval streams)
            _mix(roots, repos=["mix/av1", "mix/h264"])
    assert _drop_notes(caplog) == [
        "lerobotstream: mixture ['mix/av1', 'mix/h264']: keys not in every dataset are "
        "dropped: ['observation.images.wrist'] of mix/h264"
    ]
