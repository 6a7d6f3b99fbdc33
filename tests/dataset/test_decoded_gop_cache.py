"""Decoded-GOP cache: each GOP decoded once per episode (long-GOP H.264, random anchor order), items
equal with the cache on, off and under eviction pressure; DecodedGopCache accounting, and its
per-GOP lookups an episode job's decode uses (``get_run`` / ``use_many``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lerobotstream.dataset._dataset import StreamingLeRobotDataset
from lerobotstream.dataset._decodejob import DecodedGopCache

CAM = (("observation.images.front", 64, 48),)
LENGTHS = (61, 45, 33)


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(make_generated_dataset(episode_lengths=LENGTHS, codec="h264", cameras=CAM, episodes_per_video_file=2))


def _epoch(ds):
    out = {}
    for it in ds:
        out[(int(it["episode_index"]), int(it["frame_index"]))] = it["observation.images.front"]
    return out


def test_each_gop_decoded_once_per_episode(root):
    ds = StreamingLeRobotDataset(
        root=root, episode_pool_size=3, prefetch_episodes=1, decode_lookahead=8, decode_threads=2
    )
    ref = _epoch(ds)
    st = ds.stats()
    assert len(ref) == sum(LENGTHS)
    assert st["frames_returned"] == sum(LENGTHS)
    assert st["frames_decoded"] == sum(LENGTHS), st  # every frame decoded exactly once
    assert st["gop_cache_bytes"] == 0 and st["gop_cache_peak_bytes"] > 0
    # cache off: more decoding, same items
    off = StreamingLeRobotDataset(
        root=root, episode_pool_size=3, prefetch_episodes=1, decode_lookahead=8, decoded_cache_gb=0
    )
    got = _epoch(off)
    assert off.stats()["frames_decoded"] > sum(LENGTHS)
    assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref)
    # tiny bound: evictions, still the same items
    tiny = StreamingLeRobotDataset(
        root=root,
        episode_pool_size=3,
        prefetch_episodes=1,
        decode_lookahead=8,
        decoded_cache_gb=64 * 48 * 3 * 40 / 2**30,
    )
    got = _epoch(tiny)
    s = tiny.stats()
    assert s["gop_cache_peak_bytes"] <= s["gop_cache_capacity_bytes"]
    assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref)


def test_windows_with_gop_cache(root):
    dt = {"observation.images.front": [-0.1, 0.0, 0.2]}
    a = StreamingLeRobotDataset(root=root, delta_timestamps=dt, episode_pool_size=2, decode_lookahead=8)
    b = StreamingLeRobotDataset(
        root=root, delta_timestamps=dt, episode_pool_size=2, decode_lookahead=8, decoded_cache_gb=0, return_uint8=True
    )
    ra = {(int(i["episode_index"]), int(i["frame_index"])): i for i in a}
    rb = {(int(i["episode_index"]), int(i["frame_index"])): i for i in b}
    assert ra.keys() == rb.keys() and len(ra) == sum(LENGTHS)
    for k in ra:
        x, y = ra[k]["observation.images.front"], rb[k]["observation.images.front"]
        assert x.shape == (3, 3, 48, 64) and x.dtype == torch.float32 and y.dtype == torch.uint8
        assert torch.equal(x, y.type(torch.float32) / 255)
        assert torch.equal(ra[k]["observation.images.front_is_pad"], rb[k]["observation.images.front_is_pad"])
    assert a.stats()["frames_decoded"] == sum(LENGTHS)


def _get(c, key, frame):
    """Frame ``frame`` of run ``key`` (a view), or None."""
    run = c.get_run(key)
    return None if run is None or not run[0] <= frame < run[0] + run[1].shape[0] else run[1][frame - run[0]]


def test_decoded_gops_accounting():
    c = DecodedGopCache(2 * 10)
    t = torch.zeros(2, 1, 1, 5, dtype=torch.uint8)  # 10 bytes
    c.put((1, "a", 0, 0), 0, t, demand=3)
    assert _get(c, (1, "a", 0, 0), 1) is not None and _get(c, (1, "a", 0, 0), 2) is None
    c.use_many([(1, "a", 0, 0)], [2])
    assert c.nbytes == 10
    c.use_many([(1, "a", 0, 0)], [1])
    assert c.nbytes == 0 and len(c) == 0
    for g in range(3):
        c.put((2, "a", 0, g), 0, t, demand=5)
    assert c.nbytes == 20 and c.evictions == 1 and _get(c, (2, "a", 0, 0), 0) is None
    c.drop((2,))
    assert c.nbytes == 0 and len(c) == 0
    c.put((3, "a", 0, 0), 0, torch.zeros(30, dtype=torch.uint8), demand=1)  # larger than the bound
    assert len(c) == 0


# --- DecodedGopCache.get_run / use_many: the per-GOP lookups an episode job's decode uses ---------------------
def _block(t, first):
    return torch.arange(first, first + t, dtype=torch.uint8).view(t, 1, 1, 1).expand(t, 3, 2, 2).contiguous()


def test_get_run_returns_the_run_and_touches_lru():
    c = DecodedGopCache(3 * 12 * 4)  # room for 3 runs of 4 frames (3x2x2 bytes each)
    for g in (0, 4, 8):
        c.put(("e", g), g, _block(4, g), demand=4)
    first, frames = c.get_run(("e", 0))  # touched: the oldest is now ("e", 4)
    assert first == 0 and frames.shape == (4, 3, 2, 2) and int(frames[2, 0, 0, 0]) == 2
    assert c.get_run(("e", 99)) is None
    c.put(("e", 12), 12, _block(4, 12), demand=4)
    assert c.get_run(("e", 4)) is None and c.get_run(("e", 0)) is not None
    assert _get(c, ("e", 0), 3) is not None and _get(c, ("e", 0), 4) is None  # per-frame lookup agrees


def test_use_many_equals_one_at_a_time():
    a, b = DecodedGopCache(1 << 20), DecodedGopCache(1 << 20)
    for c in (a, b):
        for g in (0, 4, 8):
            c.put(("e", g), g, _block(4, g), demand=3)
    keys, uses = [("e", 0), ("e", 4), ("e", 8), ("e", 99)], [3, 1, 5, 2]
    a.use_many(keys, uses)
    for k, n in zip(keys, uses):
        b.use_many([k], [n])
    assert len(a) == len(b) == 1 and a.nbytes == b.nbytes == 48
    assert a.get_run(("e", 4)) is not None and a.get_run(("e", 0)) is None
    a.use_many([("e", 4)], [2])  # the last remaining use releases it
    assert len(a) == 0 and a.nbytes == 0
