"""Elastic resume with real frames: an old run of W ranks x K DataLoader workers x batch B
consumes N batches per rank (ranks simulated with RANK/WORLD_SIZE), every rank of a new run
W' x K' x B' loads rank 0's state, and old + new give every (dataset, episode, frame) of the
epoch exactly once, each item's pixels (tools/make_dataset.py identity grid) those of its
(episode, frame). Endless streams (``repeat=True``): every new (rank, DataLoader worker) first
plays its share of the pass in progress, then plain epochs of the new topology."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import pytest
from torch.utils.data import DataLoader, default_collate, get_worker_info

from lerobotstream.dataset._dataset import StreamingLeRobotDataset
from lerobotstream.dataset._multi import StreamingMultiLeRobotDataset
from lerobotstream.testing import read_identity
from tests._streams import run_ranks

LENGTHS = (7, 5, 9, 4, 6, 8, 3)
CAM = "observation.images.front"
FPS = 10
MIX_WEIGHTS = [0.6, 0.4]


@pytest.fixture(scope="module")
def roots(make_generated_dataset):
    return {
        c: Path(
            make_generated_dataset(
                episode_lengths=LENGTHS, codec=c, cameras=((CAM, 32, 24),), fps=FPS, episodes_per_video_file=3
            )
        )
        for c in ("av1", "h264", "hevc")
    }


@pytest.fixture
def streams(roots, monkeypatch):
    """``streams(what)`` -> ``make(topo, rank, windows, repeat=False, **options)`` (:func:`_make`)."""
    return lambda what: functools.partial(_make, roots, monkeypatch, what)


def _full(what):
    """Every (dataset, episode, frame) of one pass of ``what`` (a codec, or a tuple: a mixture)."""
    n = 1 if isinstance(what, str) else len(what)
    return Counter((d, e, f) for d in range(n) for e, k in enumerate(LENGTHS) for f in range(k))


def _make(roots, monkeypatch, what, topo, rank, windows, repeat=False, **kw):
    """Rank ``rank``'s stream of ``topo`` = (world size, DataLoader workers, batch size) over
    ``what``: one codec's dataset, or a tuple of codecs (a mixture weighted MIX_WEIGHTS)."""
    w, k, b = topo
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(w))
    opts = dict(
        repeat=repeat,
        episode_pool_size=2,
        prefetch_episodes=1,
        max_num_shards=max(1, k),
        batch_size=b,
        num_workers=k,
        return_uint8=True,
        **kw,
    )
    if windows:
        opts["delta_timestamps"] = {CAM: [-1 / FPS, 0.0]}
    if isinstance(what, str):
        return StreamingLeRobotDataset(root=roots[what], **opts)
    return StreamingMultiLeRobotDataset(
        [f"t/{c}" for c in what], roots=[roots[c] for c in what], weights=MIX_WEIGHTS, **opts
    )


def _items(batch, windows):
    """(dataset, episode, frame) of each item, its pixels checked."""
    out = []
    ds = batch["dataset_index"].tolist() if "dataset_index" in batch else [0] * len(batch["episode_index"])
    for i, (d, e, f) in enumerate(zip(ds, batch["episode_index"].tolist(), batch["frame_index"].tolist())):
        img = batch[CAM][i]
        if windows:  # (2, C, H, W): the frame before (clamped to the episode's first) and the anchor
            assert read_identity(img[1])[:2] == (e, f)
            assert read_identity(img[0])[:2] == (e, max(0, f - 1))
            assert bool(batch[f"{CAM}_is_pad"][i][0]) == (f == 0)
        else:
            assert read_identity(img)[:2] == (e, f), f"pixels of another frame for ({d}, {e}, {f})"
        out.append((d, e, f))
    return out


def _run(make, topo, windows, n=None, state=None, repeat=False):
    """Every rank of ``topo`` iterates (``n`` batches, or to the end); (items, rank 0's state)."""
    return run_ranks(lambda r: make(topo, r, windows, repeat), topo, lambda b: _items(b, windows), n, state)


def _tagged(batch):
    """Collate in the DataLoader worker: (its worker id, the batch)."""
    info = get_worker_info()
    return (0 if info is None else info.id), default_collate(batch)


def _shares(ds, num_workers):
    """(dataset, logical worker) samples of this rank's share of the pass in progress, and of one
    plain epoch of the new topology, int64 (datasets, workers) each."""
    p = ds._rank_planner(num_workers)
    rp, plain = p.current_pass(), p.plain
    return rp.dataset_worker_frames(p.settings.rank), plain.dataset_worker_frames(p.settings.rank)


def _endless_resume(make, topo, windows, state):
    """Every rank of ``topo`` loads ``state`` (endless) and iterates until each DataLoader worker
    gave its share of the pass in progress and one plain epoch after it, per dataset; (the pass's
    items, the next epoch's items), each split per worker and dataset at the planned counts."""
    rem, nxt = Counter(), Counter()
    for r in range(topo[0]):
        ds = make(topo, r, windows, True)
        ds.load_state_dict(state)
        assert ds.resume_changes
        first, then = _shares(ds, topo[1])
        need = first + then
        streams: dict[int, list] = {w: [] for w in range(first.shape[1])}

        def done(w, streams=streams, need=need):
            c = Counter(x[0] for x in streams[w])
            return all(c[d] >= need[d, w] for d in range(len(need)))

        for i, (wid, batch) in enumerate(DataLoader(ds, batch_size=topo[2], num_workers=topo[1], collate_fn=_tagged)):
            assert i < 2000, "the endless stream never gave the planned counts"
            streams[wid] += _items(batch, windows)
            if all(done(w) for w in streams):
                break
        for w, s in streams.items():
            for d in range(len(need)):
                sub = [x for x in s if x[0] == d]
                rem.update(sub[: first[d, w]])
                nxt.update(sub[first[d, w] : need[d, w]])
    return rem, nxt


CASES = [
    ("av1", (2, 2, 4), (1, 3, 6), False),
    ("h264", (2, 2, 4), (3, 2, 5), True),
    ("hevc", (1, 0, 8), (2, 2, 4), False),
    ("av1", (2, 2, 4), (4, 1, 4), True),
]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("codec,old,new,windows", CASES)
def test_elastic_resume_with_real_frames(streams, codec, old, new, windows):
    make = streams(codec)
    consumed, state = _run(make, old, windows, n=2)
    assert len(consumed) == 2 * old[2] * old[0]
    got, _ = _run(make, new, windows, state=state)
    assert Counter(consumed) + Counter(got) == _full(codec)


def test_a_state_saved_in_the_remainder_resumes_again(streams):
    make = streams("av1")
    consumed, state = _run(make, (2, 2, 4), False, n=1)
    mid, state2 = _run(make, (3, 1, 3), False, n=1, state=state)
    assert state2["origin"] is not None
    got, _ = _run(make, (1, 2, 2), False, state=state2)
    assert Counter(consumed) + Counter(mid) + Counter(got) == _full("av1")


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(
    "what,old,new,windows",
    [(("av1", "hevc"), (2, 2, 4), (1, 3, 6), True), (("h264", "av1"), (1, 0, 8), (3, 2, 5), False)],
)
def test_mixture_elastic_resume_with_real_frames(streams, what, old, new, windows):
    make = streams(what)
    consumed, state = _run(make, old, windows, n=2)
    got, _ = _run(make, new, windows, state=state)
    assert Counter(consumed) + Counter(got) == _full(what)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(
    "what,old,new,windows",
    [
        ("av1", (2, 2, 4), (1, 3, 6), False),
        ("h264", (2, 2, 4), (3, 2, 5), True),
        ("h264", (2, 2, 4), (1, 3, 6), True),
        ("av1", (2, 2, 4), (3, 2, 5), False),
        (("av1", "h264"), (2, 2, 4), (1, 3, 6), True),
        (("h264", "av1"), (2, 2, 4), (3, 2, 5), False),
        (("av1", "h264"), (2, 2, 4), (3, 2, 5), True),
        (("h264", "av1"), (2, 2, 4), (1, 3, 6), False),
    ],
)
def test_endless_elastic_resume_plays_the_pass_in_progress_then_plain_epochs(streams, what, old, new, windows):
    make = streams(what)
    consumed, state = _run(make, old, windows, n=2, repeat=True)
    assert max(Counter(consumed).values()) == 1  # no old worker rolled into its next epoch yet
    rem, nxt = _endless_resume(make, new, windows, state)
    assert Counter(consumed) + rem == _full(what)
    assert nxt == _full(what)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_endless_elastic_resume_after_the_first_epoch(streams):
    """The old stream ran past its first epoch: the pass in progress is its second one."""
    make = streams("h264")
    consumed, state = _run(make, (1, 0, 8), False, n=7, repeat=True)
    total = sum(LENGTHS)
    assert Counter(consumed[:total]) == _full("h264")
    rem, nxt = _endless_resume(make, (2, 2, 4), False, state)
    assert Counter(consumed[total:]) + rem == _full("h264") and nxt == _full("h264")


def test_another_dataloader_worker_count_than_loaded_resumes_elastically(streams):
    """The state matched the dataset's num_workers, but the DataLoader runs another count: the
    workers resume elastically (they used to refuse)."""
    make = streams("av1")
    consumed, state = _run(make, (1, 2, 4), False, n=2)
    ds = make((1, 2, 4), 0, False, False)
    ds.load_state_dict(state)
    assert ds.resume_changes == []
    got = [a for b in DataLoader(ds, batch_size=4, num_workers=1) for a in _items(b, False)]
    assert Counter(consumed) + Counter(got) == _full("av1")


def _not_again(*_args, **_kw):
    raise AssertionError("the remainder was computed again after load_state_dict")


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("what", ["av1", ("av1", "h264")])
def test_workers_take_the_remainder_computed_where_the_state_was_loaded(streams, monkeypatch, what):
    """load_state_dict computes the remainder once and keeps this rank's part (started episodes'
    frames of its own episodes only); DataLoader workers (forked) and a pickled copy use it."""
    import pickle
    from collections import OrderedDict

    from lerobotstream.planner import _pass
    from lerobotstream.planner._planner import Planner

    make = streams(what)
    consumed, state = _run(make, (2, 2, 4), False, n=2)
    got = []
    for r in range(3):
        ds = make((3, 2, 5), r, False, False)
        ds.load_state_dict(state)
        assert [x.rank for x in ds._resume.at.remainders] == [r] * (1 if isinstance(what, str) else 2)
        with monkeypatch.context() as m:
            m.setattr(Planner, "_old_run", _not_again)
            m.setattr(_pass, "_CACHE", OrderedDict())
            copy = pickle.loads(pickle.dumps(ds))
            assert copy.resume_info()["samples_left"] == ds.resume_info()["samples_left"]
            got += [a for b in DataLoader(copy, batch_size=5, num_workers=2) for a in _items(b, False)]
    assert Counter(consumed) + Counter(got) == _full(what)
