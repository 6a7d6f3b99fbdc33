"""``lerobotstream-train``'s modules, one concept each : ``train.py`` is the thin glue
(install the hooks, run LeRobot's ``train``, print the summary); the hooks, the summary, the
accelerator, the model card and the command line live in their own modules. The summary's
counters are checked here without LeRobot."""

from __future__ import annotations

import ast
from pathlib import Path

import torch

from lerobotstream.integrations.lerobot.factory import TAG_BYTES, TAG_PROCESS, TAG_REQUESTS, TAG_WORKER

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


def _batch(workers, nbytes, requests, datasets=None, pids=None):
    b = {
        "frame_index": torch.arange(len(workers)),
        TAG_WORKER: torch.tensor(workers),
        TAG_PROCESS: torch.tensor([100 + w for w in workers] if pids is None else pids),
        TAG_BYTES: torch.tensor(nbytes),
        TAG_REQUESTS: torch.tensor(requests),
    }
    if datasets is not None:
        b["dataset_index"] = torch.tensor(datasets)
    return b


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
    assert s["elapsed_s"] == 4.0 and s["samples_per_s"] == 1.5 and s["dataset_bytes"] is None
    assert "waiting for data: 50.0% of step time after the first batch" in format_summary(s)


def test_batch_counters_count_a_process_once_when_its_shards_share_its_source():
    """Threads mode: the shards of one process report its one source's running totals."""
    from lerobotstream.integrations.lerobot.summary import BatchCounters

    c = BatchCounters()
    c.start(0.0)
    c.account(_batch([0, 1], [100, 120], [1, 2], pids=[7, 7]), 0.0, 1.0)
    c.account(_batch([1, 0], [200, 200], [3, 3], pids=[7, 7]), 1.0, 2.0)
    assert c.process_bytes == {7: 200} and c.process_requests == {7: 3}
