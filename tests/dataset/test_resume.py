"""Sample-exact resume of StreamingLeRobotDataset through a real DataLoader (0/1/2 workers, batch 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lerobotstream.errors import ResumeStateError
from tests._streams import BATCH as B
from tests._streams import SMALL_DATASET, resigned, small_stream


@pytest.fixture(scope="module")
def root(small_dataset):
    return small_dataset


def _ds(root, nw, repeat, **kw):
    return small_stream(root, nw, repeat=repeat, prefetch_episodes=1, **kw)


def _batches(ds, nw, n=None):
    dl = torch.utils.data.DataLoader(ds, batch_size=B, num_workers=nw)
    out = []
    for batch in dl:
        out.append(list(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())))
        if n is not None and len(out) == n:
            break
    return out


@pytest.mark.parametrize("nw", [0, 1, 2])
def test_resume_endless_across_epoch_boundary(root, nw):
    total = 31  # frames per epoch; 12 batches of 4 cross the boundary
    ref = _batches(_ds(root, nw, True), nw, 12)
    flat = [a for b in ref for a in b]
    if nw <= 1:  # one stream: the first epoch has each frame once, then epoch 1 begins
        assert len(set(flat[:total])) == total and len(set(flat)) == total
    for k in (1, 5, 8):  # 8 batches = 32 samples: resumes inside epoch 1
        src = _ds(root, nw, True)
        state = src.state_dict(samples_consumed=k * B)
        assert state == src.state_dict(batches_consumed=k)
        ds = _ds(root, nw, True)
        ds.load_state_dict(state)
        assert _batches(ds, nw, 12 - k) == ref[k:], (nw, k)


@pytest.mark.parametrize("nw", [0, 2])
def test_resume_finite_epoch(root, nw):
    ref = _batches(_ds(root, nw, False), nw)
    lengths = SMALL_DATASET["episode_lengths"]
    assert sorted(a for b in ref for a in b) == sorted((e, f) for e, n in enumerate(lengths) for f in range(n))
    k = 3
    ds = _ds(root, nw, False)
    ds.load_state_dict(_ds(root, nw, False).state_dict(batches_consumed=k))
    assert _batches(ds, nw) == ref[k:]


def test_in_process_counter_is_exact(root):
    ds = _ds(root, 0, True)
    ref = _batches(_ds(root, 0, True), 0, 6)
    dl = iter(torch.utils.data.DataLoader(ds, batch_size=B, num_workers=0))
    for _ in range(3):
        next(dl)
    state = ds.state_dict()  # counted by the dataset itself (num_workers=0)
    assert state["samples"] == 3 * B
    again = _ds(root, 0, True)
    again.load_state_dict(state)
    assert _batches(again, 0, 3) == ref[3:]


def test_state_dict_without_a_count_is_refused_when_dataloader_workers_consume_the_stream(root):
    """User trial: with DataLoader workers (``num_workers > 0``) the training process never sees
    what they handed out, so ``state_dict()`` with no count wrote ``samples=0`` and the resumed run
    replayed consumed samples. It is refused (typed, naming what to pass) unless the training loop
    set the count; ``num_workers=0`` counts itself, as before."""
    from lerobotstream.errors import StreamingConfigError

    ds = _ds(root, 2, True)
    with pytest.raises(StreamingConfigError, match=r"num_workers=2.*samples_consumed=.*batches_consumed=") as e:
        ds.state_dict()
    assert e.value.option == "samples_consumed"
    assert ds.state_dict(samples_consumed=8)["samples"] == 8  # a count given
    assert ds.state_dict(batches_consumed=1)["samples"] == B
    ds.samples_consumed = 6  # or set by the training loop
    assert ds.state_dict()["samples"] == 6
    ds.set_epoch(1)  # a new epoch: the loop's count starts again
    with pytest.raises(StreamingConfigError, match="samples_consumed="):
        ds.state_dict()
    ds.seek(1, 4)
    assert ds.state_dict()["samples"] == 4
    loaded = _ds(root, 2, True)
    loaded.load_state_dict(ds.state_dict(samples_consumed=8))
    with pytest.raises(StreamingConfigError, match="samples_consumed="):  # the loaded count goes stale as workers run
        loaded.state_dict()
    assert _ds(root, 0, True).state_dict()["samples"] == 0  # num_workers=0: its own count


@pytest.mark.parametrize("bad", ["16", 16.7, 16.0, True, 10**20, -1, None])
def test_a_count_is_checked_by_the_state_rule_when_written(root, bad):
    """User trial: ``state_dict(samples_consumed=...)`` coerced with int() — "16", 16.7, True and
    10**20 were written, and a later load called them tampered. The state's own rule (an int >= 0
    within its bound, no bool) refuses them when the state is written (``batches_consumed`` and
    the ``samples_consumed`` attribute too); numpy ints pass."""
    import numpy as np

    from lerobotstream.errors import StreamingConfigError
    from lerobotstream.planner._state import MAX_SAMPLES

    ds = _ds(root, 0, False)
    if bad is not None:
        with pytest.raises(
            StreamingConfigError, match=rf"samples_consumed must be an int >= 0 and at most {MAX_SAMPLES}"
        ):
            ds.state_dict(samples_consumed=bad)
        with pytest.raises(StreamingConfigError, match="batches_consumed must be an int"):
            ds.state_dict(batches_consumed=bad)
        with pytest.raises(StreamingConfigError, match="samples_consumed must be an int"):
            ds.samples_consumed = bad
    assert ds.state_dict(samples_consumed=np.int64(3))["samples"] == 3


def test_mismatched_settings_raise(root):
    state = _ds(root, 2, True).state_dict(samples_consumed=8)
    with pytest.raises(ResumeStateError, match="seed"):
        small_stream(root, 2, repeat=True, seed=7).load_state_dict(state)
    for kw in (
        dict(batch_size=8),
        dict(sampling_strategy="round_robin"),
        dict(episode_pool_size=3),
        dict(byte_budget_gb=1.0),
    ):  # another topology: elastic resume (tests/dataset/test_elastic_resume.py)
        ds = small_stream(root, 2, repeat=True, **kw)
        ds.load_state_dict(state)
        assert ds.resume_changes
    _ds(root, 1, True).load_state_dict(state)  # worker count differs: elastic too
    with pytest.raises(ResumeStateError, match="not a lerobotstream stream state"):
        _ds(root, 2, True).load_state_dict({"epoch": 0, "offset": 8})
    with pytest.raises(ResumeStateError):  # ends inside a batch with several workers
        ds = _ds(root, 2, True)
        ds.load_state_dict(_ds(root, 2, True).state_dict(samples_consumed=6))
        _batches(ds, 2, 1)


def test_resume_refuses_a_different_episodes_selection(root):
    """Bug: ``episodes=[0, 1, 2]``'s state was accepted by a dataset over ``episodes=[0, 1, 3]``."""
    st = _ds(root, 0, False, episodes=[0, 1, 2]).state_dict(samples_consumed=B)
    _ds(root, 0, False, episodes=[2, 1, 0]).load_state_dict(st)
    with pytest.raises(ResumeStateError, match="episode selection"):
        _ds(root, 0, False, episodes=[0, 1, 3]).load_state_dict(st)


def test_a_state_without_digest_from_another_dataset_is_refused(root, make_generated_dataset):
    """Bug (issue 29): a digest-less state written for one dataset loaded into another and skipped
    56 samples silently; it cannot be checked, so it is refused."""
    other = Path(make_generated_dataset(episode_lengths=(9, 8), codec="av1", cameras=SMALL_DATASET["cameras"]))
    st = _ds(other, 0, False).state_dict(samples_consumed=B)
    legacy = resigned({k: v for k, v in st.items() if k != "episodes_digest"})  # re-signed: the digest is no secret
    with pytest.raises(ResumeStateError, match=r"missing fields \['episodes_digest'\]"):
        _ds(root, 0, False).load_state_dict(legacy)
    with pytest.raises(ResumeStateError, match="episode selection"):
        _ds(root, 0, False).load_state_dict(st)
    with pytest.raises(ResumeStateError, match="epoch"):
        _ds(root, 0, False).load_state_dict({**_ds(root, 0, False).state_dict(), "epoch": 3.7})
