"""Profile figure (matplotlib, optional: ``pip install lerobotstream[plot]``).

Three panels: throughput over time (cumulated samples/s per batch), memory over time (summed PSS
and RSS of all processes, byte-cache reserved/resident), and the stage breakdown as one bar.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["plot_report"]


def plot_report(report: dict, path: str | os.PathLike) -> Path:
    """Write the report's figure to ``path`` (PNG) atomically and return the path.

    Raises:
        ImportError: matplotlib is not installed (message says how to install it).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("--plot needs matplotlib: pip install 'lerobotstream[plot]'") from exc
    from lerobotstream.profile._report import STAGES

    path = Path(path)
    fig, axes = plt.subplots(3, 1, figsize=(9, 10))
    ser = report["cache"]["series"]
    t, n = ser["t_s"], ser["samples"]
    ax = axes[0]
    if t:
        rate = [0.0] + [(n[i] - n[i - 1]) / max(t[i] - t[i - 1], 1e-9) for i in range(1, len(t))]
        ax.plot(t, rate, ".", ms=3, alpha=0.5, label="per batch")
        avg = [n[i] / t[i] if t[i] > 0 else 0 for i in range(len(t))]
        ax.plot(t, avg, "-", label="cumulative")
    tmax = max([*(t or [0.0]), *(report["memory"].get("series", {}).get("t_s") or [0.0])]) or 1.0
    ax.set_xlim(0, tmax * 1.02)
    ax.set_xlabel("time since iter(loader) [s]")
    ax.set_ylabel("samples/s")
    ax.set_title("throughput")
    ax.legend(loc="best")
    ax = axes[1]
    mem = report["memory"].get("series", {})
    if mem.get("t_s"):
        ax.plot(mem["t_s"], [b / 2**20 for b in mem["pss_sum_bytes"]], label="PSS, all processes")
        ax.plot(mem["t_s"], [b / 2**20 for b in mem["rss_sum_bytes"]], "--", label="RSS sum (double counts)")
    ax.set_ylabel("process memory [MiB]")
    ax.set_xlim(0, tmax * 1.02)
    ax.legend(loc="upper left", fontsize=8)
    if t:
        ax2 = ax.twinx()
        ax2.step(t, [b / 2**20 for b in ser["reserved_bytes"]], "g", where="post", label="cache reserved")
        ax2.step(t, [b / 2**20 for b in ser["resident_bytes"]], "r:", where="post", label="cache resident")
        ax2.set_ylabel("byte cache [MiB]")
        ax2.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("time [s]")
    ax.set_title("memory (PSS sum = true footprint of main + workers)")
    ax = axes[2]
    secs = report["stages"]["seconds"]
    left = 0.0
    for name, _ in STAGES:
        v = secs.get(name) or 0.0
        if v > 0:
            ax.barh([0], [v], left=left, label=f"{name} {v:.2f}s")
            left += v
    ax.set_yticks([])
    ax.set_xlabel("seconds, summed over processes and threads")
    ax.set_title("stage breakdown")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
    os.replace(tmp, path)
    return path
