"""Profile figure (matplotlib, optional: ``pip install lerobotstream[plot]``): is my GPU waiting, and why?

The title states the configuration, the verdict and what the work went into; four panels below:
throughput over time (rolling samples/s, the steady mean, the rate a ``--step-ms`` step allows),
the GPU's wait per batch (ms; the first batch marked as start-up), memory over time (summed PSS
and RSS, the byte cache), and one bar per stage grouped start-up / work / waits (hatched).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

from lerobotstream.errors import MissingDependencyError

__all__ = ["plot_report", "require_matplotlib", "STAGE_COLORS", "rolling_rate"]

STAGE_COLORS = {
    # start-up: greys
    "metadata": "#9e9e9e",
    "sidecar": "#616161",
    # work: distinct hues
    "spans": "#8c564b",
    "rows": "#e377c2",
    "fetch": "#17becf",
    "synthesize": "#bcbd22",
    "decoder_open": "#9467bd",
    "decode": "#1f77b4",
    "assemble": "#2ca02c",
    "transforms": "#ff7f0e",
    # waits: warm/dark tones, drawn hatched
    "decode_other": "#c49c94",
    "worker_queue_wait": "#f7b6d2",
    "admit_wait": "#ffbb78",
    "main_batch_wait": "#d62728",
}
"""One distinct colour per stage (no two stages share one)."""


def rolling_rate(t_s: list[float], samples: list[int], window: int) -> list[float]:
    """Samples/s over the last ``window`` batches at each batch end (cumulated ``samples``,
    end times ``t_s`` in seconds); the first points use the batches since the first one."""
    out = []
    for i in range(len(t_s)):
        j = max(0, i - window)
        if j == i:
            out.append(samples[i] / t_s[i] if t_s[i] > 0 else 0.0)
            continue
        dt = t_s[i] - t_s[j]
        out.append((samples[i] - samples[j]) / dt if dt > 0 else 0.0)
    return out


def _title(report: dict) -> str:
    cfg, th, ve = report.get("config", {}), report["throughput"], report.get("verdict") or {}
    where = cfg.get("root") or cfg.get("repo_id") or "dataset"
    cams = cfg.get("cameras")
    parts = [
        f"{where}: {cfg.get('episodes', '?')} episode(s)",
        f"{len(cams)} camera(s)" if isinstance(cams, list) else None,
        f"{cfg.get('num_workers', '?')} workers x {cfg.get('decode_threads', '?')} decode threads",
        f"batch {cfg.get('batch_size', '?')}",
        f"{th['steps']} batches in {th['wall_s']:.1f} s",
    ]
    head = "lerobotstream profile: " + ", ".join(p for p in parts if p)
    text = [head] + textwrap.wrap(ve.get("text", ""), 120) + textwrap.wrap(ve.get("why", ""), 120)
    return "\n".join(text)


def require_matplotlib():
    """``matplotlib.pyplot`` on the Agg backend (the CLI calls it before a ``--plot`` run).

    Raises:
        MissingDependencyError: matplotlib is not installed (an ``ImportError``; the message says
            how to install it).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependencyError(
            "--plot needs matplotlib: pip install 'lerobotstream[plot]' (or drop --plot)",
            package="matplotlib",
            name=getattr(exc, "name", None) or "matplotlib",
        ) from exc
    return plt


def plot_report(report: dict, path: str | os.PathLike) -> Path:
    """Write the report's figure to ``path`` (PNG) atomically and return the path.

    Raises:
        MissingDependencyError: matplotlib is not installed (an ``ImportError``).
    """
    plt = require_matplotlib()
    path = Path(path)
    height_in = 14.0
    title = _title(report)
    fig, axes = plt.subplots(4, 1, figsize=(10, height_in), gridspec_kw={"height_ratios": [3, 2, 3, 4.5]})
    fig.suptitle(title, fontsize=9.5, x=0.02, ha="left", y=0.995)
    title_top = 1.0 - (0.17 * (title.count("\n") + 1) + 0.2) / height_in
    t = report["cache"]["series"]["t_s"]
    tmax = max([*(t or [0.0]), *(report["memory"].get("series", {}).get("t_s") or [0.0])]) or 1.0

    _plot_throughput(axes[0], report, tmax)
    _plot_waits(axes[1], report, tmax)
    _plot_memory(axes[2], report, tmax)
    _plot_stages(axes[3], report)
    fig.tight_layout()
    fig.subplots_adjust(top=title_top - 0.015)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def _plot_throughput(ax: Any, report: dict, tmax: float) -> None:
    """Samples/s: rolling line, steady mean, the model step's ceiling."""
    th, ve = report["throughput"], report.get("verdict") or {}
    t, n = report["cache"]["series"]["t_s"], report["cache"]["series"]["samples"]
    if t:
        window = max(3, min(20, len(t) // 5))
        roll = rolling_rate(t, n, window)
        ax.plot(t, roll, "-", color="#1f77b4", lw=1.8, label=f"rolling, last {window} batches")
        top = max(roll)
        steady = th.get("steady_samples_per_s")
        if steady:
            ax.axhline(steady, color="#ff7f0e", ls="--", lw=1.2, label=f"steady mean {steady:.1f} samples/s")
            top = max(top, steady)
        step_ms = ve.get("step_ms")
        if step_ms:
            cap = 1e3 * int(ve.get("batch_size") or 1) / step_ms
            ax.axhline(
                cap, color="#7f7f7f", ls=":", lw=1.2, label=f"model step {step_ms:g} ms allows {cap:.0f} samples/s"
            )
            top = max(top, cap)
        ax.set_ylim(0, 1.25 * top if top > 0 else 1)
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlim(0, tmax * 1.02)
    ax.set_xlabel("time since iter(loader) [s]")
    ax.set_ylabel("samples/s")
    ax.set_title("throughput", fontsize=10)


def _plot_waits(ax: Any, report: dict, tmax: float) -> None:
    """What the GPU waits for, batch by batch (ms), against the model step or the loader's pace."""
    la, ve = report["latency"], report.get("verdict") or {}
    bt, bw = la.get("series", {}).get("t_s") or [], la.get("series", {}).get("batch_wait_s") or []
    if bw:
        ms = [1e3 * w for w in bw]
        ax.vlines(bt[1:], 0, ms[1:], color="#d62728", lw=1.5, label="next(loader) blocked")
        later = ms[1:] or ms
        ymax = max(later) * 1.15 if max(later) > 0 else 1.0
        if ve.get("step_ms"):
            ax.axhline(ve["step_ms"], color="#7f7f7f", ls=":", lw=1.2, label=f"model step {ve['step_ms']:g} ms")
            ymax = max(ymax, ve["step_ms"] * 1.15)
        if ve.get("loader_ms_per_batch") and not ve.get("step_ms"):  # with a step it is the run's pace
            ax.axhline(
                ve["loader_ms_per_batch"],
                color="#ff7f0e",
                ls="--",
                lw=1.2,
                label=f"loader time per batch {ve['loader_ms_per_batch']:.0f} ms",
            )
            ymax = max(ymax, ve["loader_ms_per_batch"] * 1.15)
        ax.set_ylim(0, ymax)
        ax.annotate(
            f"first batch {bw[0]:.2f} s (start-up)",
            xy=(bt[0], min(ms[0], ymax * 0.95)),
            xytext=(4, -12),
            textcoords="offset points",
            fontsize=8,
            color="#9e9e9e",
        )
        ax.vlines([bt[0]], 0, min(ms[0], ymax), color="#9e9e9e", lw=1.5)
        ax.legend(loc="upper right", fontsize=8)
    step = la.get("simulated_step_s")
    frac = la.get("steady_wait_fraction") if step else la.get("data_wait_fraction")
    how = " after the first batch)" if step else "; no model step, so ~100% by construction)"
    ax.set_title("GPU wait per batch" + ("" if frac is None else f" ({100 * frac:.0f}% of the time{how}"), fontsize=10)
    ax.set_xlim(0, tmax * 1.02)
    ax.set_ylabel("ms")
    ax.set_xlabel("time [s]")


def _plot_memory(ax: Any, report: dict, tmax: float) -> None:
    """PSS and RSS sums of every process (MiB), and the byte cache (reserved, resident) beside."""
    ser = report["cache"]["series"]
    t = ser["t_s"]
    mem = report["memory"].get("series", {})
    if mem.get("t_s"):
        ax.plot(mem["t_s"], [b / 2**20 for b in mem["pss_sum_bytes"]], color="#1f77b4", label="PSS, all processes")
        ax.plot(
            mem["t_s"],
            [b / 2**20 for b in mem["rss_sum_bytes"]],
            "--",
            color="#ff7f0e",
            label="RSS sum (double counts shared pages)",
        )
        ax.set_ylim(0, 1.35 * max(mem["rss_sum_bytes"]) / 2**20)  # room for the legends
        ax.legend(loc="upper left", fontsize=8)
    else:
        ax.text(
            0.5,
            0.5,
            "/proc/<pid>/smaps_rollup unavailable: no RSS/PSS",
            transform=ax.transAxes,
            ha="center",
            fontsize=9,
            color="#7f7f7f",
        )
    ax.set_ylabel("process memory [MiB]")
    ax.set_xlim(0, tmax * 1.02)
    if t:
        ax2 = ax.twinx()
        ax2.step(t, [b / 2**20 for b in ser["reserved_bytes"]], color="#2ca02c", where="post", label="cache reserved")
        ax2.step(
            t, [b / 2**20 for b in ser["resident_bytes"]], ":", color="#9467bd", where="post", label="cache resident"
        )
        ax2.set_ylim(0, max(1e-3, max(ser["reserved_bytes"]) / 2**20) * 1.35)
        ax2.set_ylabel("byte cache [MiB]")
        ax2.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("time [s]")
    ax.set_title("memory (PSS sum = true footprint of main + workers)", fontsize=10)


def _plot_stages(ax: Any, report: dict) -> None:
    """Seconds per stage: one bar each, grouped start-up / work / waits (hatched)."""
    from lerobotstream.profile._report import STAGE_KIND, STAGES

    secs = report["stages"]["seconds"]
    kind = report["stages"].get("kind", STAGE_KIND)
    work_total = sum(v for k, v in secs.items() if v and kind.get(k) == "work")
    rows: list[tuple[str, str, float]] = []
    for group in ("start-up", "work", "wait"):
        rows += [(name, group, float(secs.get(name) or 0.0)) for name, _ in STAGES if kind.get(name) == group]
    ys, y = [], 0.0
    for i, (_name, group, _v) in enumerate(rows):
        if i and rows[i - 1][1] != group:
            y += 0.6  # a gap between groups
        ys.append(y)
        y += 1.0
    vmax = max([v for _, _, v in rows] + [1e-9])
    for yy, (name, group, v) in zip(ys, rows):
        ax.barh(
            [yy],
            [v],
            color=STAGE_COLORS.get(name, "#7f7f7f"),
            hatch="//" if group == "wait" else None,
            edgecolor="white" if group != "wait" else "#404040",
            lw=0.5,
        )
        share = f" ({100 * v / work_total:.0f}% of work)" if group == "work" and work_total > 0 else ""
        ax.text(v + vmax * 0.01, yy, f"{v:.2f} s{share}", va="center", fontsize=8)
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{name} [{group}]" for name, group, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, vmax * 1.3)
    st = report["stages"]
    ax.set_xlabel(
        f"seconds, summed over {st['processes']} process(es) and their threads"
        + (
            f"; work {st['work_s']:.2f} s = {st['busy_threads']:.1f} threads busy on average, "
            f"{st['cpu_count']} CPU core(s)"
            if st.get("busy_threads") is not None
            else ""
        ),
        fontsize=9,
    )
    ax.set_title("stage breakdown: start-up, work, waits (hatched: a thread blocked)", fontsize=10)
