"""What ``lerobotstream-train``'s summary and logs say, without LeRobot: the loader named as it runs,
rank and world from the launch (also once the process group is gone), throughput per rank and
summed when every rank's figures were gathered, bytes without a misleading ratio, the MP4 payload
by origin carried from every process of each loader (a mixture's datasets summed, a disk cache
named), a mixture's weights and shares."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from lerobotstream.dataset._wiring import ORIGIN_KEYS
from lerobotstream.integrations.lerobot import accelerator, hooks
from lerobotstream.integrations.lerobot.summary import (
    ORIGINS,
    BatchCounters,
    format_summary,
    rank_figures,
    summarize,
)


def _summary(**kw):
    c = BatchCounters()
    c.start(0.0)
    c.samples, c.batches, c.last_t, c.first_batch_s = 48, 6, 4.5, 1.0
    c.timed_samples, c.timed_end = 40, 4.0  # the 5 steps before the last ended at 4.0 s
    args = dict(rank=0, world_size=2, num_workers=2, batch_size=8, seed=0, start_step=0, sidecar="built", collate=None)
    args.update(kw)
    return summarize(c, None, loader="StreamLoader threads, 2 shards", **args)


def test_the_summary_names_the_loader_and_labels_the_rate_per_rank():
    s = _summary()
    text = format_summary(s)
    head = text.splitlines()[0]
    assert head == "[lerobotstream] streaming summary (rank 0 of 2, StreamLoader threads, 2 shards, batch 8, seed 0)"
    assert "= 10.0 samples/s on this rank" in text and "DataLoader workers" not in text
    assert "all 2 ranks: not gathered (this rank's figures only)" in text
    assert "x the" not in text and "all epochs" not in text  # no ratio of all epochs' bytes to the files
    assert "payload fetched by this rank" in text and "prefetch ahead of the last step included" in text


def test_the_ranks_rates_are_summed_when_every_rank_is_known():
    s = _summary(ranks=[{"samples": 40, "elapsed_s": 4.0}, {"samples": 60, "elapsed_s": 3.0}])
    assert s["samples_per_s_all_ranks"] == 30.0
    assert "all 2 ranks: 30.0 samples/s in sum" in format_summary(s)
    assert _summary(ranks=[{"samples": 40, "elapsed_s": 4.0}])["samples_per_s_all_ranks"] is None  # one missing
    one = _summary(world_size=1)
    assert "on this rank" not in format_summary(one) and "all 1 ranks" not in format_summary(one)


def test_a_mixture_shows_each_datasets_weight_and_share():
    class Mix:
        mixture = {"repo_ids": ["a/x", "b/y", "c/z"], "weights": [3.0, 1.0, 0.0001]}

        def __getattr__(self, name):
            raise AttributeError(name)

    c = BatchCounters()
    c.samples_by_dataset = {0: 30, 1: 10}
    s = summarize(
        c,
        Mix(),
        rank=0,
        world_size=1,
        num_workers=0,
        batch_size=8,
        seed=0,
        start_step=0,
        sidecar="x",
        collate=None,
        loader="DataLoader, in the training process",
    )
    assert s["samples_by_dataset"] == {"a/x": 30, "b/y": 10, "c/z": 0}
    text = format_summary(s)
    assert "a/x: weight 0.750, share 0.750 (30 samples)" in text
    assert (
        "b/y: weight 0.250, share 0.250 (10 samples)" in text and "c/z: weight 0.000, share 0.000 (0 samples)" in text
    )


def test_rank_and_world_come_from_the_launch_without_a_process_group(monkeypatch):
    assert not torch.distributed.is_initialized()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert hooks.world() == (1, 2)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert hooks.world() == (0, 1)


def test_the_run_keeps_the_topology_it_started_with(monkeypatch):
    run = hooks.Run(types.SimpleNamespace(num_workers=2, batch_size=8))
    run.topology = (1, 2)  # saved while the process group was up; the environment no longer says it
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    s = run.summary()
    assert (s["rank"], s["world_size"]) == (1, 2)


def test_the_loader_is_named_as_it_runs():
    ns = types.SimpleNamespace
    assert accelerator.loader_name(ns(num_workers=2, multiprocessing_context=None, mode="threads")) == (
        "StreamLoader threads, 2 shards"
    )
    assert accelerator.loader_name(ns(num_workers=0, multiprocessing_context=None, mode="threads")) == (
        "StreamLoader threads, 1 shard"
    )
    assert accelerator.loader_name(ns(num_workers=2, multiprocessing_context="spawn", mode="processes")) == (
        "StreamLoader processes, 2 spawn workers"
    )
    dl = torch.utils.data.DataLoader([1, 2], num_workers=1, multiprocessing_context="spawn")
    assert accelerator.loader_name(dl) == "DataLoader, 1 spawn worker"
    assert accelerator.loader_name(torch.utils.data.DataLoader([1, 2])) == "DataLoader, in the training process"


def test_every_ranks_figures_are_gathered_before_the_process_group_ends(monkeypatch):
    calls = []

    class FakeAccelerator:
        def __init__(self, *a, **k):
            pass

        def end_training(self):
            calls.append("end_training")  # accelerate destroys the process group here

    monkeypatch.setitem(sys.modules, "accelerate", types.SimpleNamespace(Accelerator=FakeAccelerator))

    def gather(counters, hold):
        calls.append("gather")
        return [rank_figures(counters)] * 2

    monkeypatch.setattr(accelerator, "gather_ranks", gather)
    run = hooks.Run(types.SimpleNamespace(num_workers=2, batch_size=8))
    run.stream = object()
    accelerator.streaming_accelerator_class(run)().end_training()
    assert calls == ["gather", "end_training"] and len(run.ranks) == 2


def test_the_gathers_work_is_held_before_it_is_waited_on(monkeypatch):
    """gloo's worker thread must never drop the last reference to the gather's work: freeing its
    tensors would then wait for the GIL that the thread destroying the group holds (a hang at
    exit), so the caller's ``hold`` keeps the work from before the wait until the group is gone."""
    import torch.distributed as dist

    from lerobotstream.integrations.lerobot.summary import gather_ranks

    hold: list = []

    class Work:
        def wait(self):
            assert self in hold  # held before the wait returns
            for r, t in enumerate(self.out):
                t.copy_(torch.tensor([10.0 * (r + 1), 2.0], dtype=torch.float64))
            return True

    def all_gather(out, sent, async_op=False):
        assert async_op  # a work object to hold
        w = Work()
        w.out = out
        return w

    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda *a: 2)
    monkeypatch.setattr(dist, "all_gather", all_gather)
    c = BatchCounters()
    c.start(0.0)
    ranks = gather_ranks(c, hold)
    assert ranks == [{"samples": 10, "elapsed_s": 2.0}, {"samples": 20, "elapsed_s": 2.0}]
    assert len(hold) == 1 and isinstance(hold[0], Work)


FRAMES = 31  # tests/_streams.py's SMALL_DATASET: 7 + 5 + 9 + 4 + 6


def _trained(loader, ds, batches):
    """``summarize`` after ``batches`` batches of ``loader`` over ``ds``, taken as the training loop takes them."""
    c = BatchCounters()
    c.start(0.0)
    it = iter(loader)
    for i in range(batches):
        c.account(next(it), float(i), float(i) + 0.5)
    del it
    args = dict(rank=0, world_size=1, num_workers=2, batch_size=4, seed=0, start_step=0, sidecar="x", collate=None)
    return summarize(c, ds, loader="x", **args)


@pytest.mark.parametrize("mode", ["dataloader", "dataloader-workers", "threads", "processes"])
def test_the_payload_by_origin_comes_from_every_process_of_the_loader(small_dataset, mode):
    """Three epochs over a dataset within its byte budget, the items tagged where their shard runs:
    episodes come from the store (at most the MP4 files' bytes: each once), later epochs reuse them
    in memory; what the store gave was read through the payload source (``bytes_read`` also holds
    the Parquet rows and MP4 headers); the tags' totals never exceed what the stream counted in the end."""
    from lerobotstream import StreamLoader
    from lerobotstream.integrations.lerobot.factory import TrainingStream
    from tests._streams import BATCH, small_stream

    nw = 0 if mode == "dataloader" else 2
    ds = small_stream(small_dataset, nw, repeat=True, prefetch_episodes=1)
    ts = TrainingStream(ds, sidecar_status="x")
    if mode.startswith("dataloader"):
        loader = torch.utils.data.DataLoader(ts, batch_size=BATCH, num_workers=nw)
    else:
        loader = StreamLoader(ts, BATCH, num_workers=nw, mode=mode)
    s = _trained(loader, ds, 3 * FRAMES // BATCH)
    o = s["payload_bytes_by_origin"]
    assert 0 < o["store"] <= s["payload_bytes_fetched"] and o["store"] <= s["dataset_mp4_bytes"]
    assert o["disk_cache"] == 0  # no cache_dir
    assert 0 < o["reused"] <= o["needed"]  # later epochs: admitted again from memory
    if nw == 0 or mode == "threads":  # the training process's own counters: what the tags carried, or more
        final = ds.source_stats()
        assert all(o[name] <= final[key] for name, key in zip(ORIGINS, ORIGIN_KEYS)), (o, final)
    line = next(x for x in format_summary(s).splitlines() if "by origin" in x)
    assert line.startswith("[lerobotstream]   MP4 payload by origin: store ") and "reused in memory" in line


def test_a_mixtures_source_stats_sum_its_datasets_payload_by_origin(small_dataset, make_generated_dataset):
    from lerobotstream import StreamingMultiLeRobotDataset

    other = make_generated_dataset(
        repo_id="sum/b", episode_lengths=(5, 7), codec="h264", gop=4, cameras=(("observation.images.front", 32, 24),)
    )
    ds = StreamingMultiLeRobotDataset(
        ["sum/a", "sum/b"], roots=[small_dataset, other], repeat=True, batch_size=4, num_workers=0
    )
    assert ds.source_stats() == {}  # before iterating
    it = iter(ds)
    for _ in range(40):
        next(it)
    it.close()
    st = ds.stats()
    total = dict.fromkeys(ORIGIN_KEYS, 0)
    for part in st["datasets"]:
        assert any(row["needed_bytes"] for row in part["bytes_by_epoch"].values())  # both datasets played
        for row in part["bytes_by_epoch"].values():
            for k in total:
                total[k] += row[k]
    assert {k: ds.source_stats()[k] for k in ORIGIN_KEYS} == total and total["needed_bytes"] > 0


def test_a_second_run_says_its_payload_came_from_the_disk_cache(small_dataset, tmp_path):
    """Over a remote (loopback HTTP) store with ``cache_dir``: the first run reads the MP4 payload
    from the store, the second from the disk cache, which the fetched bytes (the store's) leave out."""
    import shutil

    from lerobotstream import StreamLoader
    from lerobotstream.integrations.lerobot.factory import TrainingStream
    from lerobotstream.testing import LoopbackServer
    from tests._streams import BATCH, small_stream

    shutil.copytree(small_dataset, tmp_path / "store" / "ds")
    server = LoopbackServer.start({"static": str(tmp_path / "store")})
    try:
        runs = []
        for _ in range(2):
            ds = small_stream(f"{server.static_url}ds/", 2, cache_dir=str(tmp_path / "cache"), prefetch_episodes=1)
            loader = StreamLoader(TrainingStream(ds, sidecar_status="x"), BATCH, num_workers=2, mode="threads")
            runs.append(_trained(loader, ds, FRAMES // BATCH))
    finally:
        server.close()
    first, again = (r["payload_bytes_by_origin"] for r in runs)
    assert first["store"] > 0 and first["disk_cache"] == 0
    assert again["store"] == 0 and again["disk_cache"] > 0
    assert runs[1]["payload_bytes_fetched"] < runs[0]["payload_bytes_fetched"]
    assert "store 0 B, disk cache " in format_summary(runs[1])


def test_the_first_batch_wait_names_what_it_includes():
    """The slow first batch's log line names the loader and whether worker processes start within it."""
    ns = types.SimpleNamespace
    dl = torch.utils.data.DataLoader([1, 2], num_workers=2, multiprocessing_context="spawn")
    assert hooks.first_batch_wait(dl) == (
        "waiting for the first batch (DataLoader, 2 spawn workers: worker process start-up, first fetches and decodes)"
    )
    assert hooks.first_batch_wait(torch.utils.data.DataLoader([1, 2])) == (
        "waiting for the first batch (DataLoader, in the training process: first fetches and decodes)"
    )
    assert hooks.first_batch_wait(ns(num_workers=2, multiprocessing_context="spawn", mode="processes")) == (
        "waiting for the first batch (StreamLoader processes, 2 spawn workers: worker process start-up, "
        "first fetches and decodes)"
    )
    assert hooks.first_batch_wait(ns(num_workers=2, multiprocessing_context=None, mode="threads")) == (
        "waiting for the first batch (StreamLoader threads, 2 shards: first fetches and decodes)"
    )
