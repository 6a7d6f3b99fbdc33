"""``lerobotstream-train``'s modules, one concept each : ``train.py`` is the thin glue
(install the hooks, run LeRobot's ``train``, print the summary); the hooks, the summary, the
accelerator, the model card and the command line live in their own modules. The summary's
counters are checked here without LeRobot."""

from __future__ import annotations

import ast
from pathlib import Path

import torch

from lerobotstream.integrations.lerobot.factory import TAG_BYTES, TAG_ORIGIN, TAG_PROCESS, TAG_REQUESTS, TAG_WORKER

HERE = Path(__file__).resolve().parents[2] / "lerobotstream" / "integrations" / "lerobot"

#: the concepts train.py held (issue 34) and where each lives now
CONCEPTS = {
    "hooks": ["Run"],
    "summary": ["BatchCounters", "summarize", "format_summary"],
    "accelerator": ["streaming_accelerator_class", "stream_loader"],
    "model_card": ["mixture_model_card"],
    "cli": ["run_command", "streaming_help", "unknown_dataset_flag", "one_line_error", "main"],
}


def test_train_py_is_only_the_glue():
    tree = ast.parse((HERE / "train.py").read_text())
    defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert defined == ["run_training", "_parse_and_train"]
    assert len((HERE / "train.py").read_text().splitlines()) <= 100
    for module, names in CONCEPTS.items():
        tree = ast.parse((HERE / f"{module}.py").read_text())
        top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert set(names) <= top, (module, set(names) - top)


def _batch(workers, nbytes, requests, datasets=None, pids=None, origin=None):
    b = {
        "frame_index": torch.arange(len(workers)),
        TAG_WORKER: torch.tensor(workers),
        TAG_PROCESS: torch.tensor([100 + w for w in workers] if pids is None else pids),
        TAG_BYTES: torch.tensor(nbytes),
        TAG_REQUESTS: torch.tensor(requests),
    }
    if datasets is not None:
        b["dataset_index"] = torch.tensor(datasets)
    if origin is not None:  # per item: [store, disk cache, reused, needed]
        b[TAG_ORIGIN] = torch.tensor(origin, dtype=torch.int64)
    return b


def _summarize(c):
    from lerobotstream.integrations.lerobot.summary import summarize

    return summarize(
        c,
        None,
        rank=0,
        world_size=1,
        num_workers=2,
        batch_size=2,
        seed=0,
        start_step=0,
        sidecar="built",
        collate=None,
        loader="DataLoader, 2 fork workers",
    )


def test_batch_counters_strip_the_tags_and_leave_the_first_batch_out_of_the_wait_share():
    from lerobotstream.integrations.lerobot.summary import BatchCounters, format_summary, summarize

    c = BatchCounters()
    c.start(10.0)
    first = _batch([0, 0], [100, 150], [1, 2], datasets=[0, 1])
    assert c.account(first, 10.0, 13.0) == [0, 0]  # 3 s of start-up: the first batch
    assert set(first) == {"frame_index", "dataset_index"}  # LeRobot never sees the tags
    c.account(_batch([1, 1], [50, 70], [1, 1], datasets=[1, 1]), 13.5, 14.0)  # waited 0.5 s of 1 s
    c.account(_batch([0, 1], [300, 80], [3, 2], datasets=[0, 1]), 14.0, 14.0)  # no wait, 0 s step
    assert (c.batches, c.samples, c.first_batch_s) == (3, 6, 3.0)
    assert c.process_bytes == {100: 300, 101: 80} and c.process_requests == {100: 3, 101: 2}  # the largest
    assert c.samples_by_dataset == {0: 2, 1: 4}
    s = summarize(
        c,
        None,
        rank=0,
        world_size=1,
        num_workers=2,
        batch_size=2,
        seed=1000,
        start_step=0,
        sidecar="built",
        collate="default",
        loader="StreamLoader threads",
    )
    assert s["data_wait_share"] == 0.5 and s["payload_bytes_fetched"] == 380 and s["payload_requests"] == 5
    # the 4 samples of the first two steps (done when the third batch was asked for, at 14.0) over 4 s
    assert (s["elapsed_s"], s["timed_samples"], s["samples_per_s"], s["dataset_bytes"]) == (4.0, 4, 1.0, None)
    assert "waiting for data: 50.0% of step time after the first batch" in format_summary(s)


def test_batch_counters_count_a_process_once_when_its_shards_share_its_source():
    """Threads mode: the shards of one process report its one source's running totals."""
    from lerobotstream.integrations.lerobot.summary import BatchCounters

    c = BatchCounters()
    c.start(0.0)
    c.account(_batch([0, 1], [100, 120], [1, 2], pids=[7, 7]), 0.0, 1.0)
    c.account(_batch([1, 0], [200, 200], [3, 3], pids=[7, 7]), 1.0, 2.0)
    assert c.process_bytes == {7: 200} and c.process_requests == {7: 3}


def test_batch_counters_sum_the_payload_by_origin_of_each_processs_largest_totals():
    """Each process's by-origin totals run up (its shards share them): the largest per process,
    summed over the processes; the summary's dict and line give them beside the spans needed."""
    from lerobotstream.integrations.lerobot.summary import BatchCounters, format_summary

    c = BatchCounters()
    c.start(0.0)
    first = _batch([0, 1], [100, 120], [1, 2], pids=[7, 8], origin=[[10, 0, 0, 10], [20, 5, 0, 25]])
    c.account(first, 0.0, 1.0)
    assert TAG_ORIGIN not in first  # stripped with the other tags
    c.account(_batch([0, 0], [100, 300], [1, 3], pids=[7, 7], origin=[[10, 0, 30, 40], [50, 0, 30, 80]]), 1.0, 2.0)
    c.account(_batch([1], [120], [2], pids=[8], origin=[[20, 5, 0, 25]]), 2.0, 3.0)
    assert c.process_origin == {7: [50, 0, 30, 80], 8: [20, 5, 0, 25]} and not c.origin_unknown
    s = _summarize(c)
    assert s["payload_bytes_by_origin"] == {"store": 70, "disk_cache": 5, "reused": 30, "needed": 105}
    line = [x for x in format_summary(s).splitlines() if "by origin" in x]
    assert line == [
        "[lerobotstream]   MP4 payload by origin: store 70 B, disk cache 5 B, reused in memory 30 B; the "
        "admitted episodes' spans needed 105 B"
    ]


def test_an_unknown_payload_origin_is_said_not_summed_as_zero():
    from lerobotstream.integrations.lerobot.summary import BatchCounters, format_summary

    unknown = "[lerobotstream]   MP4 payload by origin: unknown (not reported by the stream)"
    for batches in (
        [_batch([0], [100], [1])],  # a wrapper without the by-origin tag
        [_batch([0, 1], [100, 5], [1, 1], pids=[7, 8], origin=[[10, 0, 0, 10], [-1, -1, -1, -1]])],  # one process
        [],  # no batch
    ):
        c = BatchCounters()
        c.start(0.0)
        for b in batches:
            c.account(b, 0.0, 1.0)
        s = _summarize(c)
        assert s["payload_bytes_by_origin"] == {"store": None, "disk_cache": None, "reused": None, "needed": None}
        assert unknown in format_summary(s).splitlines()
    legacy = dict(s)
    del legacy["payload_bytes_by_origin"]  # a summary dict written without it: no line
    assert "by origin" not in format_summary(legacy)


def test_the_rate_times_the_steps_before_the_last():
    """A step ends when the loop asks for the next batch: the samples of the batches before the last
    are timed from the loop's start to the last request (start-up included; the loop's own work after
    its last step, a checkpoint or an upload, is not); the data-wait share is the waits after the
    first batch over the time between receipts."""
    from lerobotstream.integrations.lerobot.summary import BatchCounters, format_summary, rank_figures

    c = BatchCounters()
    c.start(10.0)
    c.account(_batch([0, 0], [1, 1], [1, 1]), 10.0, 13.0)  # the first batch: 3 s of start-up
    c.account(_batch([0, 0], [1, 1], [1, 1]), 13.5, 14.0)  # step 1 took 0.5 s, then a 0.5 s wait
    c.account(_batch([0, 0, 0], [1, 1, 1], [1, 1, 1]), 15.0, 15.0)  # step 2 ended at 15.0: 4 samples timed
    s = _summarize(c)
    assert (s["samples"], s["timed_samples"], s["elapsed_s"], s["samples_per_s"]) == (7, 4, 5.0, 0.8)
    assert rank_figures(c) == {"samples": 4, "elapsed_s": 5.0}
    assert s["data_wait_share"] == 0.25  # 0.5 s of the 2 s between the first and the last receipt
    text = format_summary(s)
    assert (
        "steps 0..3: 7 samples; 4 in the steps before the last took 5.0 s (start-up included) = 0.8 samples/s "
        "(first batch after 3.0 s)"
    ) in text
    assert "waiting for data: 25.0% of step time after the first batch" in text


def test_one_step_says_why_its_rate_and_wait_share_are_not_measured():
    """One step, resumed: no step ended before the last batch was asked for, so no rate; its only wait
    is the first batch's start-up, so no share; the lines say why."""
    from lerobotstream.integrations.lerobot.summary import BatchCounters, format_summary

    c = BatchCounters()
    c.start(100.0)
    c.account(_batch([0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]), 100.0, 100.25)
    s = _summarize(c)
    assert (s["steps"], s["samples"], s["timed_samples"], s["samples_per_s"]) == (1, 4, 0, None)
    assert s["first_batch_s"] == 0.25 and s["data_wait_share"] is None
    lines = format_summary(s).splitlines()
    assert (
        "[lerobotstream]   steps 0..1: 4 samples; samples/s not measured (a rate needs a second step: a step "
        "ends when the next batch is asked for) (first batch after 0.25 s)" in lines
    )
    assert (
        "[lerobotstream]   waiting for data: not measured (one step: its batch's 0.25 s wait is the start-up, "
        "a share needs a second step)" in lines
    )
    text = format_summary(_summarize(BatchCounters()))
    assert "samples/s not measured" in text and "waiting for data: not measured (no step taken)" in text
    assert "?" not in text and "None" not in text.split("sidecar")[0]
