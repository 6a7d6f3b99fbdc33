"""The profile report's ``verdict``: is the GPU waiting for data, and why; or is the run too short
to judge (see :mod:`lerobotstream.profile._report`'s docstring for the fields)."""

from __future__ import annotations

from typing import Any

__all__ = ["WAIT_THRESHOLD", "MIN_STEADY_BATCHES", "verdict"]

WAIT_THRESHOLD = 0.05
"""Data-wait fraction above which the verdict says the GPU waits for data."""

_EXAMPLE_STEPS_MS = (10.0, 50.0, 100.0)

#: the fewest batches after the first that a verdict judges a rate from
MIN_STEADY_BATCHES = 20


def _too_short(report: dict, buffered: int) -> str | None:
    """Why the run's steady part is too short to judge (None: long enough)."""
    th = report["throughput"]
    later = max(0, int(th["steps"]) - 1)
    need = max(MIN_STEADY_BATCHES, 2 * int(buffered))
    first = report["latency"].get("first_batch_s") or 0.0
    steady_s = float(th["wall_s"]) - first
    if later >= need:
        return None
    ahead = f", and up to {buffered} can be made ahead while the first one is awaited" if buffered else ""
    return (
        f"too short to judge: {later} batches after the first in {steady_s:.2f} s{ahead}; "
        f"run at least --steps {need + 1} for a steady rate"
    )


def verdict(report: dict, batch_size: int, buffered: int = 0) -> dict:
    """The ``verdict`` section (see the module docstring); ``buffered``: the batches the loader can
    prepare ahead of the consumer."""
    th, la, st = report["throughput"], report["latency"], report["stages"]
    rate = th.get("steady_samples_per_s") or th.get("samples_per_s")
    step_ms = 1e3 * float(la.get("simulated_step_s") or 0.0)
    work = {k: v for k, v in st["seconds"].items() if st["kind"][k] == "work" and v}
    total_work = sum(work.values())
    top = (
        [
            {"stage": k, "seconds": v, "share_of_work": v / total_work}
            for k, v in sorted(work.items(), key=lambda kv: -kv[1])[:2]
        ]
        if total_work > 0
        else []
    )
    out: dict[str, Any] = {
        "loader_samples_per_s": rate,
        "batch_size": batch_size,
        "step_ms": step_ms or None,
        "loader_ms_per_batch": None,
        "predicted_wait_fraction": {},
        "measured_wait_fraction": la.get("steady_wait_fraction") if step_ms else None,
        "top_work": top,
        "waits": None,
        "too_short": None,
    }
    out["why"] = ""
    if top:
        out["why"] = (
            "why: most work is "
            + ", ".join(f"{t['stage']} {100 * t['share_of_work']:.0f}%" for t in top)
            + f" of {total_work:.2f} s summed over threads; {st['busy_threads']:.1f} threads busy on "
            f"average on {st['cpu_count']} CPU core(s)"
            + (" (CPU-bound: the cores are saturated)" if st["busy_threads"] >= 0.8 * st["cpu_count"] else "")
        )
    if not rate:
        out["text"] = "verdict: no batch was delivered: nothing to judge"
        return out
    per_batch_ms = 1e3 * batch_size / rate
    out["loader_ms_per_batch"] = per_batch_ms
    short = out["too_short"] = _too_short(report, buffered)
    if short:
        out["text"] = (
            f"verdict: {short} (this run: {rate:.1f} samples/s, an upper bound: batches made ahead came out at once)"
        )
        return out
    predict = {f"{t:g}": max(0.0, 1.0 - t / per_batch_ms) for t in (*_EXAMPLE_STEPS_MS, step_ms) if t > 0}
    out["predicted_wait_fraction"] = predict
    head = f"verdict: the loader delivers {rate:.1f} samples/s ({per_batch_ms:.1f} ms per batch of {batch_size})"
    if step_ms:
        measured = out["measured_wait_fraction"]
        waits = measured is not None and measured > WAIT_THRESHOLD
        out["waits"] = bool(waits)
        m = "n/a" if measured is None else f"{100 * measured:.0f}%"
        out["text"] = (
            f"verdict: with a model step of {step_ms:g} ms per batch of {batch_size} the run delivered "
            f"{rate:.1f} samples/s and the GPU waited {m} of the time (measured after the first batch): "
            + ("DATA-BOUND" if waits else "not waiting for data")
        )
    else:
        examples = ", ".join(f"{100 * predict[f'{t:g}']:.0f}% at {t:g} ms" for t in _EXAMPLE_STEPS_MS)
        out["text"] = (
            f"{head}: a model step of T ms per batch of {batch_size} would wait "
            f"{examples}, none at {per_batch_ms:.0f} ms or more (no --step-ms given: measure yours)"
        )
    return out
