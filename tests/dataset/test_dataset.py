"""StreamingLeRobotDataset through a real DataLoader; budget invariants; loud failures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lerobotstream.dataset._dataset import StreamingLeRobotDataset
from lerobotstream.errors import ByteBudgetError, DecodeError

CAM = (("observation.images.front", 64, 48),)


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(
        make_generated_dataset(episode_lengths=(7, 5, 9, 4), codec="av1", cameras=CAM, episodes_per_video_file=1)
    )


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_dataloader_exact_epoch(root, num_workers):
    ds = StreamingLeRobotDataset(
        root=root, episode_pool_size=2, prefetch_episodes=1, max_num_shards=max(1, num_workers)
    )
    dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=num_workers)
    seen = []
    for batch in dl:
        assert batch["observation.images.front"].shape[1:] == (3, 48, 64)
        seen += list(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist()))
    want = [(e, f) for e, n in enumerate((7, 5, 9, 4)) for f in range(n)]
    assert sorted(seen) == want


def test_oversize_episode_fails_before_fetch(root):
    ds = StreamingLeRobotDataset(root=root, byte_budget_gb=100 / 2**30)
    with pytest.raises(ByteBudgetError, match="episode"):
        next(iter(ds))
    st = ds.stats()
    assert st["bytes_needed"] == 0 and st["episodes_fetched"] == 0 and st["cache"].get("fetches", 0) == 0


def test_sizes_are_computed_for_the_pool_and_frontier_only(root):
    """Sizes on demand (issue 33): the first item needs the sizes of the first pool and prefetch
    frontier only; the epoch sizes each episode once."""
    ds = StreamingLeRobotDataset(
        root=root, episode_pool_size=1, prefetch_episodes=1, decode_lookahead=1, first_lookahead=1
    )  # anchors drawn one at a time: the first chunks stay in one episode
    it = iter(ds)
    next(it)
    assert 1 <= ds.stats()["episodes_sized"] <= 2  # the admitted episode, the prefetched one
    assert sum(1 for _ in it) == 24 and ds.stats()["episodes_sized"] == 4


def test_small_budget_invariants(root, monkeypatch):
    from lerobotstream import payload_cache as cache_mod

    events = []
    orig = cache_mod.EpisodeByteCache.__init__

    def init(self, budget, **kw):
        def on_event(name, snap):
            assert snap["reserved_bytes"] <= snap["byte_budget"], snap
            assert snap["resident_bytes"] <= snap["reserved_bytes"], snap
            events.append(name)

        kw["on_event"] = on_event
        orig(self, budget, **kw)

    monkeypatch.setattr(cache_mod.EpisodeByteCache, "__init__", init)
    probe = StreamingLeRobotDataset(root=root, episode_pool_size=1)
    w = probe._process_readers().readers[0]
    biggest = max(w.episode_nbytes(e) for e in range(4))
    ds = StreamingLeRobotDataset(
        root=root, episode_pool_size=2, prefetch_episodes=2, byte_budget_gb=(biggest + 10) / 2**30
    )
    n = sum(1 for _ in ds)
    assert n == 25 and "fetched" in events and "free" in events


def test_decode_failure_is_loud(root, monkeypatch):
    from lerobotstream.decode import _decoder

    class Broken:
        def __init__(self, mini, span, *, label="", **k):
            raise DecodeError(f"{label}: cannot open the mini-MP4")

    monkeypatch.setattr(_decoder, "EpisodeDecoder", Broken)
    ds = StreamingLeRobotDataset(root=root)
    with pytest.raises(DecodeError, match=r"episode \d+, camera 'observation.images.front', file"):
        for _ in ds:
            pass


@pytest.fixture(scope="module")
def root2cam(make_generated_dataset):
    cams = (("observation.images.front", 64, 48), ("observation.images.wrist", 64, 48))
    return Path(
        make_generated_dataset(
            episode_lengths=(9, 7, 8, 6, 9, 5, 7, 8), codec="h264", cameras=cams, episodes_per_video_file=2
        )
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_tiny_decoder_cache_with_decode_threads(root2cam, num_workers):
    """Bug: a decode thread's open evicted and closed the decoder another decode thread was using
    (``DecodeError: ... closed failed on local frames``). Decoders in use are pinned now."""
    want = sorted((e, f) for e, n in enumerate((9, 7, 8, 6, 9, 5, 7, 8)) for f in range(n))
    for _ in range(3):
        ds = StreamingLeRobotDataset(
            root=root2cam,
            max_num_shards=max(1, num_workers),
            video_decoder_cache_size=1,
            decode_threads=2,
            decode_lookahead=2,
            episode_pool_size=4,
            decoded_cache_gb=0,
        )
        dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=num_workers)
        seen = []
        for batch in dl:
            seen += list(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist()))
        assert sorted(seen) == want


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_video_decoder_cache_size_is_validated(root, bad):
    from lerobotstream.errors import StreamingConfigError

    with pytest.raises(StreamingConfigError, match="video_decoder_cache_size") as ei:
        StreamingLeRobotDataset(root=root, video_decoder_cache_size=bad)
    assert isinstance(ei.value, ValueError) and repr(bad) in str(ei.value)


def _epoch_orders(root, persistent, epochs=3):
    ds = StreamingLeRobotDataset(root=root, max_num_shards=2, episode_pool_size=2, prefetch_episodes=1, seed=7)
    dl = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=2, persistent_workers=persistent)
    out = []
    for e in range(epochs):
        ds.set_epoch(e)
        out.append([(int(a), int(b)) for batch in dl for a, b in zip(batch["episode_index"], batch["frame_index"])])
    return out


def test_set_epoch_reaches_persistent_workers(root):
    """Bug: with persistent_workers=True every epoch came out in the same order (the workers' copy
    never saw set_epoch). Each epoch now matches the non-persistent order of that epoch."""
    want = [(e, f) for e, n in enumerate((7, 5, 9, 4)) for f in range(n)]
    pers = _epoch_orders(root, True)
    fresh = _epoch_orders(root, False)
    assert pers == fresh
    assert all(sorted(o) == want for o in pers)
    assert pers[0] != pers[1] and pers[1] != pers[2]


def _rank_anchors(root, monkeypatch, rank, equalize, nw=2, bs=2, declare=("batch_size", "num_workers")):
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "2")
    declared = {"max_num_shards": max(1, nw), "num_workers": nw} if "num_workers" in declare else {}
    declared |= {"batch_size": bs} if "batch_size" in declare else {}
    ds = StreamingLeRobotDataset(
        root=root,
        **declared,
        equalize=equalize,
        episode_pool_size=2,
        prefetch_episodes=1,
    )
    dl = torch.utils.data.DataLoader(ds, batch_size=bs, num_workers=nw)
    batches = [list(zip(b["episode_index"].tolist(), b["frame_index"].tolist())) for b in dl]
    return batches


def test_equalize_drop_gives_every_rank_the_same_batch_count(root2cam, monkeypatch):
    """Bug: with repeat=False ranks got different sample counts (DDP hangs at the epoch end) and the
    planner's ``equalize="drop"`` was not reachable from the dataset."""
    none = [_rank_anchors(root2cam, monkeypatch, r, "none") for r in (0, 1)]
    assert len(none[0]) != len(none[1])  # 16 vs 15 batches: the episodes do not split evenly
    drop = [_rank_anchors(root2cam, monkeypatch, r, "drop") for r in (0, 1)]
    assert len(drop[0]) == len(drop[1]) == min(len(none[0]), len(none[1]))
    for r in (0, 1):  # drop only truncates: no anchor twice, none from the other rank
        flat = [a for b in drop[r] for a in b]
        assert len(set(flat)) == len(flat) and set(flat) <= {a for b in none[r] for a in b}
    from lerobotstream.errors import StreamingConfigError

    with pytest.raises(StreamingConfigError, match="equalize"):
        StreamingLeRobotDataset(root=root2cam, equalize="pad")


def test_equalize_drop_needs_the_batch_size_and_reads_the_worker_count_from_the_dataloader(root2cam, monkeypatch):
    """Bug: ``equalize="drop"`` was accepted without ``batch_size`` though the docs said it needs
    it (and ``num_workers``): over several DataLoader workers it then equalized samples, not
    batches, so the ranks' batch counts could still differ by one (a DDP hang). The worker count
    is the DataLoader's own (each worker reads it); the batch size the dataset cannot see."""
    from lerobotstream.errors import StreamingConfigError

    drop = [_rank_anchors(root2cam, monkeypatch, r, "drop") for r in (0, 1)]
    batch_size_only = [_rank_anchors(root2cam, monkeypatch, r, "drop", declare=("batch_size",)) for r in (0, 1)]
    assert batch_size_only == drop
    with pytest.raises(StreamingConfigError, match=r"equalize='drop' over 2 DataLoader workers needs .*batch_size="):
        _rank_anchors(root2cam, monkeypatch, 0, "drop", declare=("num_workers",))
    in_process = [_rank_anchors(root2cam, monkeypatch, r, "drop", nw=0, declare=()) for r in (0, 1)]
    assert len(in_process[0]) == len(in_process[1])  # one stream per rank: equal samples, equal batches


@pytest.mark.parametrize(
    "kw",
    [
        dict(byte_budget_gb=0),
        dict(byte_budget_gb=-1.0),
        dict(episode_pool_size=0),
        dict(episodes=[]),
        dict(delta_timestamps={"action": 0.1}),
        dict(delta_timestamps={"action": ["a"]}),
        dict(prefetch_episodes=-1),
        dict(decode_threads=0),
        dict(decoded_queue_size=0),
        dict(episodes=[-1]),
        dict(tolerance_s=0),
        dict(tolerance_s="1e-4"),
        dict(sampling_strategy="random"),
        dict(video_backend="pyav"),
        dict(max_num_shards=0),
        dict(sidecar_lock_timeout_s=-5),
        dict(device="gpu"),
        dict(device="cuda0"),
        dict(decode_lookahead=0),
        dict(decoded_cache_gb=float("nan")),
        dict(ffmpeg_threads=-1),
        dict(tolerance_s=2**64 * 10**400),
        dict(decoded_cache_gb=10**400),
        dict(byte_budget_gb=1e12),
        dict(device="cuda:１"),
        dict(batch_size=0),
        dict(batch_size=2.7),
        dict(batch_size="8"),
        dict(first_lookahead=0),
        dict(num_workers=-1),
        dict(seed="abc"),
        dict(seed=1.5),
        dict(return_uint8="no"),
        dict(repeat="no"),
        dict(camera_keys="observation.images.cam"),
    ],
)
def test_bad_options_raise_typed_errors_at_construction(root, kw):
    """Bug: these were accepted (or failed later with a bare TypeError / hang)."""
    from lerobotstream.errors import StreamingConfigError

    ((name, value),) = kw.items()
    with pytest.raises(StreamingConfigError) as ei:
        StreamingLeRobotDataset(root=root, **kw)
    msg = str(ei.value)
    assert isinstance(ei.value, ValueError) and name in msg and "got" in msg


def test_option_forms_that_are_accepted(root):
    """A generator of episodes is read once (not consumed by validation); torch.device and numpy
    scalars are accepted."""
    ds = StreamingLeRobotDataset(
        root=root,
        episodes=(e for e in [1]),
        device=torch.device("cpu"),
        tolerance_s=np.float64(1e-4),
        seed=np.int64(3),
        return_uint8=np.bool_(True),
    )
    assert ds.episodes == [1] and ds.device == "cpu"
    assert len({int(it["episode_index"]) for it in ds}) == 1


def test_state_dict_refuses_negative_samples(root):
    from lerobotstream.errors import StreamingConfigError

    with pytest.raises(StreamingConfigError, match="samples_consumed.*-1"):
        StreamingLeRobotDataset(root=root).state_dict(samples_consumed=-1)
