"""What ``lerobotstream-train``'s summary and logs say, without LeRobot: the loader named as it runs,
rank and world from the launch (also once the process group is gone), throughput per rank and
summed when every rank's figures were gathered, bytes without a misleading ratio, a mixture's
weights and shares."""

from __future__ import annotations

import sys
import types

import torch

from lerobotstream.integrations.lerobot import accelerator, hooks
from lerobotstream.integrations.lerobot.summary import BatchCounters, format_summary, rank_figures, summarize


def _summary(**kw):
    c = BatchCounters()
    c.start(0.0)
    c.samples, c.batches, c.last_t, c.first_batch_s = 40, 5, 4.0, 1.0
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
