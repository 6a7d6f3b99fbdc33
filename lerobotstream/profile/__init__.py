"""Profiling: is the GPU waiting for data, and why? Stage timings, bytes, PSS, plots.

``python -m lerobotstream.profile --root DATASET`` runs the streaming dataset through the loader
training uses, without a model, and prints the report (:mod:`lerobotstream.profile._report`
documents each field). From Python::

    raw = profile_dataset(ds, num_workers=2, batch_size=8, steps=50)
    report = build_report(raw, ds, needed=needed_bytes(ds, raw["anchors"]))
    print(format_report(report))

Nothing in the library imports this package.
"""

from lerobotstream.profile._report import build_report, format_report, needed_bytes, plot_report
from lerobotstream.profile._run import profile_dataset

__all__ = ["build_report", "format_report", "needed_bytes", "plot_report", "profile_dataset"]
