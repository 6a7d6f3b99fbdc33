"""Elastic resume with real frames: an old run of W ranks x K DataLoader workers x batch B
consumes N batches per rank (ranks simulated with RANK/WORLD_SIZE), every rank of a new run
W' x K' x B' loads rank 0's state, and old + new give every (episode, frame) of the epoch exactly
once, each item's pixels (tools/make_dataset.py identity grid) those of its (episode, frame)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from lerobotstream.dataset import StreamingLeRobotDataset
from lerobotstream.testing import read_identity

LENGTHS = (7, 5, 9, 4, 6, 8, 3)
CAM = "observation.images.front"
FPS = 10


@pytest.fixture(scope="module")
def roots(make_generated_dataset):
    return {c: Path(make_generated_dataset(episode_lengths=LENGTHS, codec=c, cameras=((CAM, 32, 24),), fps=FPS,
                                           episodes_per_video_file=3)) for c in ("av1", "h264", "hevc")}


def _ds(root, topo, monkeypatch, rank, windows, **kw):
    w, k, b = topo
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(w))
    extra = dict(delta_timestamps={CAM: [-1 / FPS, 0.0]}) if windows else {}
    return StreamingLeRobotDataset(root=root, repeat=False, episode_pool_size=2, prefetch_episodes=1,
                                   max_num_shards=max(1, k), batch_size=b, num_workers=k, return_uint8=True,
                                   **extra, **kw)


def _anchors(batch, windows):
    out = []
    for i, (e, f) in enumerate(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())):
        img = batch[CAM][i]
        if windows:  # (2, C, H, W): the frame before (clamped to the episode's first) and the anchor
            assert read_identity(img[1])[:2] == (e, f)
            assert read_identity(img[0])[:2] == (e, max(0, f - 1))
            assert bool(batch[f"{CAM}_is_pad"][i][0]) == (f == 0)
        else:
            assert read_identity(img)[:2] == (e, f), f"pixels of another frame for ({e}, {f})"
        out.append((e, f))
    return out


def _run(root, topo, monkeypatch, windows, n=None, state=None):
    """Every rank of ``topo`` iterates (``n`` batches, or to the end); (anchors, rank 0's state)."""
    got, state0 = [], None
    for r in range(topo[0]):
        ds = _ds(root, topo, monkeypatch, r, windows)
        if state is not None:
            ds.load_state_dict(state)
        dl = torch.utils.data.DataLoader(ds, batch_size=topo[2], num_workers=topo[1])
        k = 0
        for batch in dl:
            got += _anchors(batch, windows)
            k += 1
            if k == n:
                break
        if r == 0 and n is not None:
            state0 = ds.state_dict(batches_consumed=k)
    return got, state0


FULL = Counter((e, f) for e, n in enumerate(LENGTHS) for f in range(n))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("codec,old,new,windows", [
    ("av1", (2, 2, 4), (1, 3, 6), False),
    ("h264", (2, 2, 4), (3, 2, 5), True),
    ("hevc", (1, 0, 8), (2, 2, 4), False),
    ("av1", (2, 2, 4), (4, 1, 4), True),
])
def test_elastic_resume_with_real_frames(roots, monkeypatch, codec, old, new, windows):
    consumed, state = _run(roots[codec], old, monkeypatch, windows, n=2)
    assert len(consumed) == 2 * old[2] * old[0]
    got, _ = _run(roots[codec], new, monkeypatch, windows, state=state)
    assert Counter(consumed) + Counter(got) == FULL


def test_a_state_saved_in_the_remainder_resumes_again(roots, monkeypatch):
    root = roots["av1"]
    consumed, state = _run(root, (2, 2, 4), monkeypatch, False, n=1)
    mid, state2 = _run(root, (3, 1, 3), monkeypatch, False, n=1, state=state)
    assert "origin" in state2
    got, _ = _run(root, (1, 2, 2), monkeypatch, False, state=state2)
    assert Counter(consumed) + Counter(mid) + Counter(got) == FULL


def _mix(roots, topo, monkeypatch, rank, windows):
    from lerobotstream.dataset import StreamingMultiLeRobotDataset

    w, k, b = topo
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(w))
    extra = dict(delta_timestamps={CAM: [-1 / FPS, 0.0]}) if windows else {}
    return StreamingMultiLeRobotDataset(["t/av1", "t/hevc"], roots=[roots["av1"], roots["hevc"]], weights=[0.6, 0.4],
                                        repeat=False, episode_pool_size=2, prefetch_episodes=1, num_workers=k,
                                        max_num_shards=max(1, k), batch_size=b, return_uint8=True, **extra)


def _mix_run(roots, topo, monkeypatch, windows, n=None, state=None):
    got, state0 = [], None
    for r in range(topo[0]):
        ds = _mix(roots, topo, monkeypatch, r, windows)
        if state is not None:
            ds.load_state_dict(state)
        k = 0
        for batch in torch.utils.data.DataLoader(ds, batch_size=topo[2], num_workers=topo[1]):
            got += [(d, e, f) for d, (e, f) in zip(batch["dataset_index"].tolist(), _anchors(batch, windows))]
            k += 1
            if k == n:
                break
        if r == 0 and n is not None:
            state0 = ds.state_dict(batches_consumed=k)
    return got, state0


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("old,new,windows", [((2, 2, 4), (1, 3, 6), True), ((1, 0, 8), (3, 2, 5), False)])
def test_mixture_elastic_resume_with_real_frames(roots, monkeypatch, old, new, windows):
    consumed, state = _mix_run(roots, old, monkeypatch, windows, n=2)
    got, _ = _mix_run(roots, new, monkeypatch, windows, state=state)
    full = Counter((d, e, f) for d in (0, 1) for e, n in enumerate(LENGTHS) for f in range(n))
    assert Counter(consumed) + Counter(got) == full


def test_another_dataloader_worker_count_than_loaded_resumes_elastically(roots, monkeypatch):
    """The state matched the dataset's num_workers, but the DataLoader runs another count: the
    workers resume elastically (they used to refuse)."""
    root = roots["av1"]
    consumed, state = _run(root, (1, 2, 4), monkeypatch, False, n=2)
    ds = _ds(root, (1, 2, 4), monkeypatch, 0, False)
    ds.load_state_dict(state)
    assert ds.resume_changes == []
    got = [a for b in torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1) for a in _anchors(b, False)]
    assert Counter(consumed) + Counter(got) == FULL
