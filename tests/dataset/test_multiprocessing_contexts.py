"""StreamingLeRobotDataset under every DataLoader multiprocessing context (LeRobot 0.6's default is
``spawn`` with persistent workers and ``prefetch_factor=4``): clean pickles, exact epochs,
sample-exact resume; and the anchor options lerobot-train uses (``drop_n_last_frames``, the
``sequential`` evaluation order)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from lerobotstream.dataset._dataset import StreamingLeRobotDataset
from lerobotstream.errors import StreamingConfigError

CAM = (("observation.images.front", 32, 24),)
LENGTHS = (7, 5, 9, 4, 6)
B = 4
CONTEXTS = ("spawn", "forkserver", "fork")


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(make_generated_dataset(episode_lengths=LENGTHS, codec="av1", cameras=CAM, episodes_per_video_file=2))


def _ds(root, nw=2, **kw):
    kw = {
        "episode_pool_size": 2,
        "prefetch_episodes": 1,
        "max_num_shards": max(1, nw),
        "batch_size": B,
        "num_workers": nw,
        "decode_lookahead": 5,
        **kw,
    }
    return StreamingLeRobotDataset(root=root, **kw)


def _batches(ds, nw, n=None, ctx=None, epochs=1):
    dl = torch.utils.data.DataLoader(
        ds,
        batch_size=B,
        num_workers=nw,
        multiprocessing_context=ctx if nw else None,
        persistent_workers=bool(nw),
        prefetch_factor=4 if nw else None,
    )
    out = []
    for _ in range(epochs):
        for batch in dl:
            out.append(list(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())))
            if n is not None and len(out) == n:
                return out
    return out


def _pickled_types(obj) -> set[str]:
    """Names of the types inside a pickle (every global it references)."""
    import pickletools

    names = set()
    ops = list(pickletools.genops(pickle.dumps(obj)))
    strings = [arg for op, arg, _ in ops if isinstance(arg, str)]
    for op, arg, _ in ops:
        if op.name in ("GLOBAL", "STACK_GLOBAL") and isinstance(arg, str):
            names.add(arg)
    return names | {s for s in strings if "." in s and s[:1].isalpha()}


def test_pickle_holds_no_process_state(root):
    ds = _ds(root)
    next(iter(ds))  # iterate once in this process: decoders, descriptors and threads now exist here
    blob = pickle.dumps(ds)
    assert len(blob) < 200_000
    text = " ".join(sorted(_pickled_types(ds)))
    for banned in ("_thread", "threading", "VideoDecoder", "mmap", "Mp4Index", "EpisodeByteCache", "Pipeline"):
        assert banned not in text, banned
    clone = pickle.loads(blob)
    assert clone._reader is None
    assert [int(x["frame_index"]) for x in iter(clone)][:3] == [int(x["frame_index"]) for x in iter(_ds(root))][:3]


@pytest.mark.parametrize("ctx", CONTEXTS)
def test_exact_epochs_and_resume_under_each_context(root, ctx):
    want = sorted((e, f) for e, n in enumerate(LENGTHS) for f in range(n))
    ref = _batches(_ds(root, repeat=True), 2, n=12, ctx=ctx)
    assert sorted(a for b in _batches(_ds(root), 2, ctx=ctx) for a in b) == want
    k = 5
    ds = _ds(root, repeat=True)
    ds.load_state_dict(_ds(root, repeat=True).state_dict(batches_consumed=k))
    assert _batches(ds, 2, n=12 - k, ctx=ctx) == ref[k:]


def test_persistent_spawn_workers_run_consecutive_epochs(root):
    two = _batches(_ds(root), 2, ctx="spawn", epochs=2)
    flat = [a for b in two for a in b]
    n = sum(LENGTHS)
    assert len(flat) == 2 * n and len(set(flat[:n])) == n and len(set(flat[n:])) == n
    ds1 = _ds(root)
    ds1.set_epoch(1)
    assert [a for b in _batches(ds1, 2, ctx="spawn") for a in b] == flat[n:]  # epoch 1's own order


@pytest.mark.parametrize("nw", [0, 2])
def test_drop_n_last_frames_leaves_out_the_last_anchors(root, nw):
    got = [a for b in _batches(_ds(root, nw, drop_n_last_frames=4), nw) for a in b]
    want = [(e, f) for e, n in enumerate(LENGTHS) for f in range(n - 4)]  # episode 3 (4 frames) gives none
    assert sorted(got) == want and len(got) == len(set(got))


def test_drop_n_last_frames_windows_still_see_the_whole_episode(root):
    fps = _ds(root, 0).fps
    ds = _ds(root, 0, drop_n_last_frames=2, delta_timestamps={"action": [0.0, 2 / fps]}, sampling_strategy="sequential")
    items = list(ds)
    last = [x for x in items if int(x["episode_index"]) == 0][-1]
    assert int(last["frame_index"]) == LENGTHS[0] - 3
    assert last["action_is_pad"].tolist() == [
        False,
        False,
    ]  # frame +2, the episode's last, is not an anchor but is read


def test_drop_n_last_frames_that_leaves_nothing_is_refused(root):
    with pytest.raises(StreamingConfigError, match="drop_n_last_frames"):
        _ds(root, drop_n_last_frames=9)
    with pytest.raises(StreamingConfigError, match="drop_n_last_frames"):
        _ds(root, drop_n_last_frames=-1)


def test_sequential_order(root):
    got = [(int(x["episode_index"]), int(x["frame_index"])) for x in _ds(root, 0, sampling_strategy="sequential")]
    assert got == [(e, f) for e, n in enumerate(LENGTHS) for f in range(n)]
