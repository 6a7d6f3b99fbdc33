"""Profiling: is the GPU waiting for data, and why? Stage timings, bytes, PSS, plots.

``python -m lerobotstream.profile --root DATASET --num-workers 2 --batch-size 8 --steps 50``
runs the streaming dataset through a real DataLoader without a model and prints the report
(:mod:`lerobotstream.profile._report` documents each field). From Python::

    raw = profile_dataset(ds, num_workers=2, batch_size=8, steps=50)
    report = build_report(raw, ds, needed=needed_bytes(ds, raw["anchors"]))
    print(format_report(report))

Nothing in the library imports this package.
"""

from lerobotstream.profile._memory import MemorySampler, read_memory
from lerobotstream.profile._plot import plot_report
from lerobotstream.profile._report import (
    STAGE_KIND,
    STAGES,
    build_report,
    format_report,
    needed_bytes,
    needed_bytes_of_tables,
)
from lerobotstream.profile._run import STATS_KEY, ProfiledStream, TimedTransform, profile_dataset, worker_error

__all__ = [
    "STAGES",
    "STAGE_KIND",
    "STATS_KEY",
    "MemorySampler",
    "ProfiledStream",
    "TimedTransform",
    "build_report",
    "format_report",
    "needed_bytes",
    "needed_bytes_of_tables",
    "plot_report",
    "profile_dataset",
    "read_memory",
    "worker_error",
]
