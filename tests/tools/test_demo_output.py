"""``make demo`` prints what matters of a training run (``tools/demo.py``'s ``OutputFilter``): the
step/loss lines, the ``lerobotstream:`` lines, warnings, errors and the streaming summary; not
LeRobot's config dump, which one log record spreads over hundreds of lines."""

from __future__ import annotations

from tools.demo import OutputFilter

RUN = """\
INFO 2026-12-07 01:00:00 ot_train.py:120 {'batch_size': 8,
 'dataset': {'episodes': None,
             'image_transforms': {'enable': True,
                                  'tfs': {'resize': {'kwargs': {'size': [96, 128]},
  'repo_id': 'local/g1_v30', 'streaming': True, 'streaming_loader': 'lerobotstream'},
 'steps': 40}
INFO 2026-12-07 01:00:01 hooks.py:90 lerobotstream: 0.1.0 on lerobot 0.6.1: StreamingLeRobotDataset(...)
INFO 2026-12-07 01:00:02 rator.py:60 lerobotstream: --dataset.streaming_loader=auto: StreamLoader threads, 2 shards
WARNING 2026-12-07 01:00:02 anner.py:420 rank 0 owns 2 episode(s) for num_workers=4 ...
Training:  12%|#2        | 5/40 [00:03<00:20,  1.70step/s]
INFO 2026-12-07 01:00:05 ot_train.py:300 step:5 smpl:40 ep:0 epch:0.05 loss:3.512 grdn:12.1 lr:1.0e-03
INFO 2026-12-07 01:00:09 ot_train.py:310 Checkpoint policy after step 20
[lerobotstream] streaming summary (rank 0 of 1, StreamLoader threads, 2 shards, batch 8, seed 1000)
[lerobotstream]   steps 0..40: 320 samples in 20.0 s = 16.0 samples/s (first batch after 0.5 s)
"""


def test_the_demo_prints_only_what_matters():
    keep = OutputFilter()
    kept = [line for line in RUN.splitlines() if keep(line)]
    assert len(kept) == 6, kept
    assert not any("'dataset'" in line or "image_transforms" in line or "Training:" in line for line in kept)
    assert any("step:5" in line for line in kept) and keep.losses == [3.512]
    assert kept[-2].startswith("[lerobotstream] streaming summary") and kept[2].startswith("WARNING")


def test_a_traceback_is_printed_whole():
    keep = OutputFilter()
    lines = ["INFO x {'a': 1,", "Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: bad"]
    assert [keep(line) for line in lines] == [False, True, True, True]
