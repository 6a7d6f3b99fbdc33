"""The stream core serves one dataset and a mixture with the same code: a mixture of one dataset
yields that dataset's frames in that dataset's order; a mixture's counters are each dataset's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lerobotstream import StreamingLeRobotDataset, StreamingMultiLeRobotDataset
from lerobotstream.testing import read_identity

FRONT = ("observation.images.front", 48, 32)
SPEC = dict(episode_lengths=(11, 7, 9, 5), codec="h264", gop=4, cameras=(FRONT,), episodes_per_video_file=2)


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(make_generated_dataset(repo_id="core/one", **SPEC))


def _stream(ds, num_workers):
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=num_workers)
    out = []
    for item in dl:
        ep, fr = int(item["episode_index"]), int(item["frame_index"])
        assert read_identity(item[FRONT[0]][-1])[:2] == (ep, fr)  # the window's last frame is the anchor
        out.append((ep, fr, item[FRONT[0]]))
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_mixture_of_one_dataset_yields_the_same_frames_in_the_same_order(root, num_workers):
    kw = dict(
        episode_pool_size=2,
        num_workers=num_workers,
        return_uint8=True,
        seed=7,
        delta_timestamps={FRONT[0]: [-2 / 30, 0.0]},
    )
    single = _stream(StreamingLeRobotDataset(repo_id="core/one", root=root, **kw), num_workers)
    mixed = _stream(StreamingMultiLeRobotDataset(["core/one"], roots=[root], **kw), num_workers)
    assert [(e, f) for e, f, _ in single] == [(e, f) for e, f, _ in mixed]
    assert len(single) == sum(SPEC["episode_lengths"])
    for (_, _, a), (_, _, b) in zip(single, mixed):
        assert torch.equal(a, b)


def test_a_mixtures_stats_give_each_dataset_its_own_counters(make_generated_dataset, root):
    other = Path(
        make_generated_dataset(repo_id="core/two", episode_lengths=(6, 8), codec="av1", gop=2, cameras=(FRONT,))
    )
    ds = StreamingMultiLeRobotDataset(["core/one", "core/two"], roots=[root, other], weights=[0.5, 0.5])
    counts = [0, 0]
    for item in ds:
        counts[int(item["dataset_index"])] += 1
    st = ds.stats()
    per = st["datasets"]
    assert [p["items"] for p in per] == counts and all(counts)
    assert st["items"] == sum(counts) == sum(SPEC["episode_lengths"]) + 14
    assert [p["episodes_fetched"] for p in per] == [4, 2]
    assert all(p["frames_returned"] > 0 and p["bytes_needed"] > 0 for p in per)
    assert st["chunks"] >= 1 and "chunks" not in per[0]  # the worker's pipeline is shared: counted once


def test_the_shard_interface_gives_the_dataloader_workers_items(root):
    """``prepare`` / ``shard`` / ``position`` / ``seek``: shard p of N (each with its own
    per-process state, in this process) yields what DataLoader worker p of N yields, from the
    position given; its ``source_stats`` are its own; ``close`` is idempotent."""
    from lerobotstream.dataset._stream import LoaderSettings, StreamPosition

    def ids(items):
        return [(int(x["episode_index"]), int(x["frame_index"])) for x in items]

    ds = StreamingLeRobotDataset(repo_id="core/one", root=root, episode_pool_size=2, num_workers=2, max_num_shards=2)
    start = ds.prepare(2)
    assert start == StreamPosition(0, 0) == ds.position
    shards = [ds.shard(p, 2, epoch=start.epoch, samples=start.samples, in_process=True) for p in range(2)]
    got = [ids(s.items) for s in shards]
    assert all(s.source_stats()["bytes_read"] > 0 for s in shards)
    for s in shards:
        s.close()
        s.close()
    ref = [[], []]
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    for n, item in enumerate(dl):  # one item per worker in turn (batch_size=None)
        ref[n % 2].append((int(item["episode_index"]), int(item["frame_index"])))
    assert got == ref
    one = list(ds.shard(None, 0, epoch=0, samples=5, in_process=True).items)
    assert ids(one) == ids(list(ds))[5:]  # iterated in this process: one stream, whatever num_workers says
    ds.seek(1, 3)
    assert ds.position == StreamPosition(1, 3) and ds.state_dict()["samples"] == 3
    assert ds.state_dict()["num_workers"] == 2 and ds.state_dict(loader=LoaderSettings(4, 0))["num_workers"] == 0
    with pytest.raises(ValueError):
        ds.seek(0, -1)
