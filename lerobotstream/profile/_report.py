"""The profile report: raw run measurements → one JSON-able dict → a terminal table, and its figure
(matplotlib, optional: ``pip install lerobotstream[plot]``): the configuration and the verdict as
title; throughput over time (rolling, steady mean, the rate a ``--step-ms`` step allows), the GPU's
wait per batch, memory over time (summed PSS and RSS, the byte cache), one bar per stage.

Report fields (seconds are wall-clock; stage seconds are summed over every process's threads, so
they can exceed the wall time; docs/profiling.md says how to read them):

* ``throughput``: ``samples``, ``frames`` (camera frames delivered in the batches: samples ×
  cameras × window length; the frames the workers decoded are ``decoder.frames_decoded``),
  ``wall_s``, ``samples_per_s`` / ``frames_per_s`` (whole run), ``steady_samples_per_s`` (after the
  first batch), ``epoch_ended`` (the stream ended before ``--steps`` batches);
* ``latency``: ``first_batch_s`` (from ``iter(loader)``), ``batch_wait_p50_ms`` / ``p95`` / ``p99``
  / ``mean`` (time ``next(loader)`` blocked, first batch excluded), ``data_wait_fraction`` (summed
  waits / wall: without ``--step-ms`` the rest of the wall is the profiler's own per-batch
  bookkeeping (counters, memory readings) and a last ``next`` that found the epoch's end, not a
  model), ``steady_wait_fraction`` (the same
  after the first batch and its step), ``series`` (per batch: end time ``t_s``, ``batch_wait_s``);
* ``stages``: ``seconds`` per stage of :data:`STAGES` (None: not reported), ``kind`` per stage,
  ``work_s``, ``busy_threads`` (``work_s / wall_s``, against ``cpu_count``), ``worker_stage_sum_s``
  (all but metadata and the main wait), ``threads_bound`` (processes × (1 iterating + 2 × decode
  threads + fetch threads) >= ``worker_stage_sum_s / wall_s``; its terms in ``threads_bound_terms``);
* ``verdict``: ``loader_samples_per_s`` (steady) and ``loader_ms_per_batch``; ``too_short`` (fewer
  than :data:`MIN_STEADY_BATCHES` batches after the first, or fewer than twice the batches the
  loader makes ahead: the rate is then an upper bound); ``predicted_wait_fraction`` per step time
  (``max(0, 1 - step / loader time per batch)``); with ``--step-ms``, ``measured_wait_fraction``
  (waits after the first batch / wall after it) and ``waits``; ``top_work``; ``text`` and ``why``;
* ``bytes``: ``fetched_bytes``, ``requests``, ``span_payload_bytes`` (MP4 span bytes),
  ``needed_frame_bytes`` (coded size of every distinct camera frame delivered), ``span_bytes``
  (GOP-aligned spans of the delivered episodes), ``fetched_over_needed`` (MP4 payload / needed),
  ``fetched_over_span``, ``total_fetched_over_needed``, ``synthesized_bytes``;
* ``decoder``: ``opens``, ``fallbacks`` (CUDA → CPU), ``pyav_fallbacks``, ``frames_decoded`` /
  ``frames_returned`` by the workers, ``sidecar``;
* ``memory``: per process peak RSS/PSS, ``peak_pss_sum_bytes`` (true footprint of the tree),
  ``peak_rss_sum_bytes`` (double-counts shared pages), series over time;
* ``cache``: ``byte_budget``, ``peak_reserved_bytes``, series of summed ``reserved_bytes`` /
  ``resident_bytes`` / fetched bytes per batch.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lerobotstream.dataset._wiring import one_per_process
from lerobotstream.errors import MissingDependencyError
from lerobotstream.loader._loader import usable_cpus
from lerobotstream.mp4.parse import parse_mp4
from lerobotstream.mp4.spans import episode_frame_range, plan_span
from lerobotstream.profile._memory import NO_MEMORY
from lerobotstream.sources import open_source

STAGES = (
    ("metadata", "dataset construction: info.json, episodes, tasks (once, main process)"),
    ("sidecar", "MP4 sidecar lookup/build (once) + derived index open per process"),
    ("spans", "span planning per (episode, camera) from the index"),
    ("rows", "Parquet rows of fetched episodes"),
    ("fetch", "ranged reads of episode payloads (fetch threads)"),
    ("synthesize", "mini-MP4 synthesis (fetch threads)"),
    ("decoder_open", "torchcodec decoder construction per (episode, camera)"),
    ("decode", "frame decode (decode threads)"),
    ("decode_other", "rest of the decode jobs: waiting for a payload still in flight, bookkeeping"),
    ("assemble", "item assembly minus transforms (rows, windows, pads, float conversion)"),
    ("transforms", "image_transforms"),
    ("worker_queue_wait", "worker's iterating thread waiting for its assembly threads"),
    ("admit_wait", "admissions waiting for byte-budget room"),
    ("main_batch_wait", "main process blocked in next(loader): the GPU's wait"),
)
"""(name, meaning) of each stage in the breakdown, in pipeline order."""

_WAITS = ("decode_other", "worker_queue_wait", "admit_wait", "main_batch_wait")
STAGE_KIND = {n: "start-up" if n in ("metadata", "sidecar") else "wait" if n in _WAITS else "work" for n, _ in STAGES}
"""Each stage's kind: ``start-up`` (once per run or process), ``work`` (per item: a thread's CPU or
I/O producing items) or ``wait`` (a thread blocked on another)."""

WAIT_THRESHOLD = 0.05
"""Data-wait fraction above which the verdict says the GPU waits for data."""
MIN_STEADY_BATCHES = 20
"""The fewest batches after the first that a verdict judges a rate from."""
_EXAMPLE_STEPS_MS = (10.0, 50.0, 100.0)


def needed_bytes(ds: Any, anchors: list[tuple[int, int]]) -> dict[str, int] | None:
    """Compressed bytes the delivered samples needed, from the MP4 sample tables (read through a
    separate source: not counted in the run's bytes).

    ``anchors``: delivered ``(episode_index, frame_index)`` pairs (duplicates allowed), for a
    mixture ``(dataset_index, episode_index, frame_index)``. Returns ``{"needed_frame_bytes",
    "span_bytes", "episodes_touched"}``: the summed coded size of each distinct (camera, episode,
    frame) sample and of the GOP-aligned spans of each touched (episode, camera); None when the
    tables cannot be read.
    """
    if hasattr(ds, "datasets"):  # a mixture: each dataset's own anchors, summed
        parts = [needed_bytes(child, [(e, f) for d, e, f in anchors if d == i]) for i, child in enumerate(ds.datasets)]
        if any(p is None for p in parts):
            return None
        return {k: sum(p[k] for p in parts) for k in ("needed_frame_bytes", "span_bytes", "episodes_touched")}
    try:
        root = getattr(ds, "root", None)
        src = (
            open_source(root, repo_id=ds.repo_id, revision=ds.revision, repo_type=getattr(ds, "repo_type", "dataset"))
            if root is not None or ds.repo_id is not None
            else ds.meta.source
        )
    except Exception:  # noqa: BLE001 - a profiler degrades to "unknown", it never hides a run
        return None
    tables: dict[str, Any] = {}

    def table(path: str) -> Any:
        if path not in tables:
            tables[path] = parse_mp4(lambda off, n: src.read(path, off, n), src.size(path), path=path)
        return tables[path]

    return needed_bytes_of_tables(ds.meta, ds.video_keys, table, anchors, fps=ds.fps, tolerance_s=ds.tolerance_s)


def needed_bytes_of_tables(
    meta: Any, video_keys: Any, table: Callable[[str], Any], anchors: Any, *, fps: float, tolerance_s: float
) -> dict[str, int]:
    """:func:`needed_bytes` of one dataset from sample tables at hand (``tools/bench.py`` has them
    parsed): ``table`` maps a video path to its ``SampleTable`` (called once or more per path),
    ``anchors`` are ``(episode_index, frame_index)`` pairs, ``fps`` in Hz, ``tolerance_s`` in s."""
    by_ep: dict[int, set[int]] = {}
    for e, f in anchors:
        by_ep.setdefault(int(e), set()).add(int(f))
    frame_bytes = span_bytes = 0
    for ep, frames in sorted(by_ep.items()):
        info = meta.episode(ep)
        for cam in video_keys:
            v = info.videos[cam]
            t = table(v.path)
            a, b = episode_frame_range(t, v.from_timestamp, info.length, fps, tolerance_s)
            span = plan_span(t, a, b, path=v.path)
            span_bytes += int(span.byte_stop - span.byte_start)
            order = np.asarray(t.presentation_order, dtype=np.int64)
            sizes = np.asarray(t.size, dtype=np.int64)
            idx = np.clip(a + np.fromiter(frames, dtype=np.int64), a, b - 1)
            frame_bytes += int(sizes[order[idx]].sum())
    return {"needed_frame_bytes": frame_bytes, "span_bytes": span_bytes, "episodes_touched": len(by_ep)}


def _sum(snaps: list[dict], key: str) -> float | None:
    vals = [s[key] for s in snaps if s.get(key) is not None]
    return float(sum(vals)) if vals else None


def build_report(raw: dict, ds: Any = None, *, config: dict | None = None, needed: dict | None = None) -> dict:
    """Turn :func:`~lerobotstream.profile.profile_dataset`'s raw run into the report dict (JSON-able)."""
    snaps_full = raw.get("snapshots", [])
    snaps = [s["stats"] for s in snaps_full]
    waits = list(raw.get("batch_wait_s", []))
    later = waits[1:]
    wall = float(raw["wall_s"])
    samples, frames = int(raw["samples"]), int(raw["frames"])
    first = raw.get("first_batch_s")
    first_samples = raw["timeline"][0]["samples"] if raw.get("timeline") else 0
    has_steady = first is not None and wall > first and samples > first_samples
    steady = (samples - first_samples) / (wall - first) if has_steady else None
    stages = _stage_seconds(raw, snaps_full)
    # after the first batch and the model step that follows it: each later wait is paired with its step
    step_s = float(raw.get("step_s") or 0.0)
    steady_wall = wall - first - step_s if first is not None and wall > first + step_s else None
    tl = raw.get("timeline", [])
    report = {
        "config": dict(config or {}),
        "loader": raw.get("loader"),
        "throughput": {
            "samples": samples,
            "frames": frames,
            "wall_s": wall,
            "steps": int(raw.get("steps", len(waits))),
            "epoch_ended": bool(raw.get("epoch_ended", False)),
            "samples_per_s": samples / wall if wall > 0 else None,
            "frames_per_s": frames / wall if wall > 0 else None,
            "steady_samples_per_s": steady,
            "steady_frames_per_s": steady * frames / samples if steady and samples else None,
        },
        "latency": {
            "first_batch_s": first,
            **{f"batch_wait_p{q}_ms": 1e3 * float(np.percentile(later, q)) if later else None for q in (50, 95, 99)},
            "batch_wait_mean_ms": None if not later else 1e3 * float(np.mean(later)),
            "data_wait_fraction": float(sum(waits)) / wall if wall > 0 else None,
            "steady_wait_fraction": float(sum(later)) / steady_wall if later and steady_wall else None,
            "simulated_step_s": raw.get("step_s", 0.0),
            "series": {"t_s": list(raw.get("batch_t_s", [])), "batch_wait_s": waits},
        },
        "stages": _stage_summary(stages, ds, len(snaps_full), wall),
        "bytes": _byte_counts(snaps, needed),
        **_mixture_shares(raw.get("anchors", []), ds, raw.get("batch_samples")),
        "decoder": {
            **{
                k.removeprefix("decoder_"): int(sum(int(s.get(k, 0)) for s in snaps))
                for k in ("decoder_opens", "decoder_fallbacks", "pyav_fallbacks", "frames_decoded", "frames_returned")
            },
            "sidecar": next((s.get("sidecar") for s in snaps if s.get("sidecar")), None),
        },
        "memory": raw.get("memory", {}),
        "cache": {
            "byte_budget": int(sum(int(s.get("byte_budget", 0)) for s in snaps)),
            "peak_reserved_bytes": int(sum(int(s.get("cache", {}).get("peak_reserved_bytes", 0)) for s in snaps)),
            "series": {
                k: [p[k] for p in tl] for k in ("t_s", "reserved_bytes", "resident_bytes", "bytes_fetched", "samples")
            },
        },
        "per_process": [{"pid": s["pid"], "worker": s["worker"], **s["stats"]} for s in snaps_full],
    }
    report["verdict"] = verdict(report, int(raw.get("batch_size") or 1), int(raw.get("buffered_batches") or 0))
    return report


def _stage_seconds(raw: dict, snaps_full: list[dict]) -> dict[str, float | None]:
    """Seconds per stage of :data:`STAGES`, summed over the processes' ``stats()`` snapshots (None:
    no process reported it); transforms timed by ``TimedTransform`` are moved out of assembly."""
    snaps = [s["stats"] for s in snaps_full]
    timed_tf = float(sum(s.get("transforms_s", 0.0) for s in snaps_full))  # TimedTransform, every thread
    stats_tf = _sum(snaps, "transforms_s") or 0.0  # the dataset's own (main-thread transforms only)
    transforms_s = max(timed_tf, stats_tf)
    open_s, decode_s = _sum(snaps, "open_s"), _sum(snaps, "decode_s")
    assemble_s = _sum(snaps, "assemble_s")
    if assemble_s is not None:
        assemble_s = max(0.0, assemble_s - max(0.0, timed_tf - stats_tf))
    job_s = _sum(snaps, "decode_job_s")
    decode_other = None if job_s is None else max(0.0, job_s - (open_s or 0.0) - (decode_s or 0.0))
    once = lambda k: max((float(s[k]) for s in snaps if s.get(k) is not None), default=None)  # noqa: E731
    metadata = once("metadata_s")
    sidecar = once("sidecar_s")
    index_open = _sum(snaps, "index_open_s")
    if sidecar is not None or index_open is not None:
        sidecar = (sidecar or 0.0) + (index_open or 0.0)
    return {
        "metadata": metadata if metadata is not None else raw.get("metadata_s"),
        "sidecar": sidecar,
        "spans": _sum(snaps, "spans_s"),
        "rows": _sum(snaps, "parquet_s"),
        "fetch": _sum(snaps, "fetch_s"),
        "synthesize": _sum(snaps, "synthesize_s"),
        "decoder_open": open_s,
        "decode": decode_s,
        "decode_other": decode_other,
        "assemble": assemble_s,
        "transforms": transforms_s,
        "worker_queue_wait": _sum(snaps, "queue_wait_s"),
        "admit_wait": _sum(snaps, "admit_wait_s"),
        "main_batch_wait": float(sum(raw.get("batch_wait_s", []))),
    }


def _stage_summary(stages: dict[str, float | None], ds: Any, nproc: int, wall: float) -> dict[str, Any]:
    """The report's ``stages``: seconds, work and busy threads, and the threads bound (the most
    threads that can run stages at once: summed stage seconds <= wall x threads_bound)."""
    worker_stage_sum = float(
        sum(v for k, v in stages.items() if v is not None and k not in ("metadata", "main_batch_wait"))
    )
    decode_threads = int(getattr(ds, "decode_threads", 1) or 1) if ds is not None else 1
    fetch_threads = max(1, min(8, int(getattr(ds, "prefetch_episodes", 7)) + 1)) if ds is not None else 8
    nproc = max(1, nproc)
    # iterating thread + decode pool + assembly pool + the cache's fetch pool, per process
    threads_bound = nproc * (1 + 2 * decode_threads + fetch_threads)
    work_s = float(sum(v for k, v in stages.items() if v and STAGE_KIND[k] == "work"))
    return {
        "seconds": stages,
        "kind": dict(STAGE_KIND),
        "work_s": work_s,
        "busy_threads": work_s / wall if wall > 0 else None,
        "cpu_count": usable_cpus(),
        "worker_stage_sum_s": worker_stage_sum,
        "threads_bound": threads_bound,
        "threads_bound_terms": {
            "processes": nproc,
            "iterating": 1,
            "decode_threads": decode_threads,
            "assembly_threads": decode_threads,
            "fetch_threads": fetch_threads,
        },
        "processes": nproc,
        "meaning": dict(STAGES),
    }


def _byte_counts(snaps: list[dict], needed: dict | None) -> dict[str, Any]:
    """The report's ``bytes``: fetched (once per process: its shards share the source counters),
    requests, retries, synthesized and span bytes; ratios to ``needed`` when given."""
    procs = one_per_process(snaps)  # the source counters are shared by the shards of one process
    fetched = int(sum(int(s.get("bytes_fetched", s.get("source", {}).get("bytes_read", 0))) for s in procs))
    nb: dict[str, Any] = {
        "fetched_bytes": fetched,
        "requests": int(sum(int(s.get("source", {}).get("requests", 0)) for s in procs)),
        "retries": int(sum(int(s.get("source", {}).get("retries", 0)) for s in procs)),
        "synthesized_bytes": int(sum(int(s.get("cache", {}).get("payload_bytes", 0)) for s in snaps)),
        "span_payload_bytes": int(sum(int(s.get("bytes_needed", 0)) for s in snaps)),
        "metadata_fetched_bytes": int(sum(int(s.get("metadata_source", {}).get("bytes_read", 0)) for s in procs)),
        "episode_fetches": int(sum(int(s.get("cache", {}).get("fetches", 0)) for s in snaps)),
    }
    if needed:
        nb.update(needed)
        video = nb["span_payload_bytes"] or fetched
        frame_bytes, span = needed.get("needed_frame_bytes"), needed.get("span_bytes")
        nb["fetched_over_needed"] = video / frame_bytes if frame_bytes else None
        nb["fetched_over_span"] = video / span if span else None
        nb["total_fetched_over_needed"] = fetched / frame_bytes if frame_bytes else None
    return nb


def _mib(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{int(n)} B"


def _f(x: float | None, fmt: str = ".1f", unit: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:{fmt}}{unit}"


def _mixture_shares(anchors: list, ds: Any, batch_samples: list[int] | None = None) -> dict:
    """For a mixture (``(dataset, episode, frame)`` anchors): the delivered samples per dataset,
    and ``exhausted``: for each dataset of a stream that does not repeat whose every sample was
    delivered, ``{"repo_id", "step"}`` (the batch, 1-based, that carried its last sample; from then
    on the shares no longer follow the weights)."""
    mixture = getattr(ds, "mixture", None)
    if not mixture or not anchors or len(anchors[0]) != 3:
        return {}
    ids = np.array([a[0] for a in anchors], dtype=np.int64)
    counts = np.bincount(ids, minlength=len(mixture["repo_ids"]))
    total = float(sum(mixture["weights"]))
    exhausted = []
    if not getattr(ds, "repeat", True):
        ends = np.asarray(batch_samples or [], dtype=np.int64)  # cumulated samples at each batch end
        for d, child in enumerate(getattr(ds, "datasets", [])):
            size = _num_samples(child)
            if size and counts[d] >= size:
                last = int(np.flatnonzero(ids == d)[-1])  # position of its last sample in the run
                step = int(np.searchsorted(ends, last + 1)) + 1 if len(ends) else None
                exhausted.append({"repo_id": mixture["repo_ids"][d], "step": step})
    return {
        "mixture": {
            "repo_ids": list(mixture["repo_ids"]),
            "samples": counts.tolist(),
            "shares": (counts / max(1, counts.sum())).round(4).tolist(),
            "weight_shares": [round(w / total, 4) for w in mixture["weights"]],
            "repeat": bool(getattr(ds, "repeat", True)),
            "exhausted": exhausted,
        }
    }


def _num_samples(ds: Any) -> int | None:
    """Samples one pass over ``ds`` yields (its anchors: frames minus ``drop_n_last_frames``), None
    when unknown."""
    try:
        return int(sum(ds.anchor_lengths().values()))
    except Exception:  # noqa: BLE001 - a report detail only
        try:
            return int(ds.num_frames)
        except Exception:  # noqa: BLE001
            return None


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
    hint = f"run at least --steps {need + 1} for a steady rate"
    if th.get("epoch_ended"):  # more --steps alone cannot reach it
        hint = (
            f"the epoch ended after {th['steps']} batches: pass --repeat (epochs chained) with --steps {need + 1}, "
            "or a smaller --batch-size, for a steady rate"
        )
    return f"too short to judge: {later} batches after the first in {steady_s:.2f} s{ahead}; {hint}"


def verdict(report: dict, batch_size: int, buffered: int = 0) -> dict:
    """The ``verdict`` section (see the module docstring); ``buffered``: the batches the loader can
    prepare ahead of the consumer."""
    th, la, st = report["throughput"], report["latency"], report["stages"]
    rate = th.get("steady_samples_per_s") or th.get("samples_per_s")
    step_ms = 1e3 * float(la.get("simulated_step_s") or 0.0)
    work = {k: v for k, v in st["seconds"].items() if st["kind"][k] == "work" and v}
    total_work = sum(work.values())
    ranked = sorted(work.items(), key=lambda kv: -kv[1])[:2] if total_work > 0 else []
    top = [{"stage": k, "seconds": v, "share_of_work": v / total_work} for k, v in ranked]
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
        "why": "",
    }
    if top:
        shares = ", ".join(f"{t['stage']} {100 * t['share_of_work']:.0f}%" for t in top)
        busy = f"{st['busy_threads']:.1f} threads busy on average on {st['cpu_count']} CPU core(s)"
        bound = " (CPU-bound: the cores are saturated)" if st["busy_threads"] >= 0.8 * st["cpu_count"] else ""
        out["why"] = f"why: most work is {shares} of {total_work:.2f} s summed over threads; {busy}{bound}"
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


def format_report(r: dict) -> str:
    """The report as a readable terminal table."""
    cfg = r.get("config", {})
    lines = []
    if cfg:
        lines.append("config: " + ", ".join(f"{k}={v}" for k, v in cfg.items() if k != "as_lerobotstream_train"))
        defaults = "defaults (--loader auto, 4 workers, prefetch 4, uint8 frames, batch 8)"
        if cfg.get("as_lerobotstream_train"):
            lines.append(f"as lerobotstream-train runs it with lerobot-train 0.6's {defaults}")
        elif "as_lerobotstream_train" in cfg:
            lines.append(
                f"settings differ from lerobotstream-train's {defaults}: pass your training's values to compare"
            )
    if r.get("verdict"):
        lines.append(r["verdict"]["text"])
        if r["verdict"].get("why"):
            lines.append("  " + r["verdict"]["why"])
    lines.append("")
    lines += _throughput_lines(r["throughput"], r["latency"])
    lines += _stage_lines(r["stages"], r["throughput"], cfg)
    lines += _bytes_lines(r["bytes"], r.get("mixture"))
    lines += _resource_lines(r["decoder"], r["memory"], r["cache"])
    return "\n".join(lines)


def _throughput_lines(th: dict, la: dict) -> list[str]:
    """The report's throughput and latency sections."""
    step = la.get("simulated_step_s")
    how = "(no model step: time blocked in next(loader) / wall; the rest is the profiler's bookkeeping and the epoch's end)"
    if step:
        how = f"(simulated step {step * 1e3:.1f} ms; after the first batch {_f(la.get('steady_wait_fraction'), '.3f')})"
    return [
        "throughput",
        f"  samples/s            {_f(th['samples_per_s'])}   (steady, after first batch: {_f(th['steady_samples_per_s'])})",
        f"  frames delivered/s   {_f(th['frames_per_s'])}   (steady: {_f(th['steady_frames_per_s'])}; "
        "camera frames in the batches)",
        f"  samples / frames     {th['samples']} / {th['frames']} in {th['steps']} batches, {_f(th['wall_s'], '.2f', ' s')}",
        "latency",
        f"  time to first batch  {_f(la['first_batch_s'], '.3f', ' s')}",
        f"  batch wait p50/p95/p99  {_f(la['batch_wait_p50_ms'], '.2f')} / {_f(la['batch_wait_p95_ms'], '.2f')} / "
        f"{_f(la['batch_wait_p99_ms'], '.2f')} ms",
        f"  data-wait fraction   {_f(la['data_wait_fraction'], '.3f')}   {how}",
    ]


def _stage_lines(st: dict, th: dict, cfg: dict) -> list[str]:
    """Seconds per stage, grouped start-up / work / waits, and the busy-threads bound."""
    # StreamLoader's threads mode runs its shards in this process: each is a stream with its own threads
    streams = "shard(s)" if str(cfg.get("loader", "")).startswith("StreamLoader threads") else "process(es)"
    lines = [f"stages (seconds summed over {st['processes']} {streams} and their threads)"]
    kind = st.get("kind", STAGE_KIND)
    work_total = sum(v for k, v in st["seconds"].items() if v and kind.get(k) == "work")
    for group, title in (
        ("start-up", "start-up (once)"),
        ("work", "work (per item; share of the work)"),
        ("wait", "waits (a thread blocked; not work)"),
    ):
        lines.append(f"  {title}")
        for name, _meaning in STAGES:
            if kind.get(name) != group:
                continue
            v = st["seconds"].get(name)
            share = ""
            if group == "work" and v is not None and work_total > 0:
                share = f"{100 * v / work_total:5.1f}%"
            elif name == "main_batch_wait" and v is not None and th["wall_s"] > 0:
                share = f"{100 * v / th['wall_s']:5.1f}% of wall"
            lines.append(f"    {name:<18} {_f(v, '9.3f', ' s'):>12}  {share}")
    t = st.get("threads_bound_terms") or {}
    if st.get("busy_threads") is not None:
        lines.append(
            f"  work {work_total:.2f} s in {th['wall_s']:.2f} s wall: {st['busy_threads']:.1f} threads busy on "
            f"average ({st.get('cpu_count', '?')} CPU core(s) here; more busy threads than cores time-share them)"
        )
    if t:
        lines.append(
            f"  threads_bound {st['threads_bound']} = {t['processes']} {streams} x (1 iterating + "
            f"{t['decode_threads']} decode + {t['assembly_threads']} assembly + {t['fetch_threads']} fetch "
            "threads): at most that many threads run stages at once, so summed stage seconds "
            "<= wall x threads_bound (a consistency bound, not a target)"
        )
    return lines


def _bytes_lines(by: dict, mx: dict | None) -> list[str]:
    """Bytes fetched against what the delivered frames needed; a mixture's shares."""
    lines = [
        "bytes",
        f"  fetched              {_mib(by['fetched_bytes'])} in {by['requests']} requests ({by.get('retries', 0)} retries; "
        f"MP4 payload {_mib(by.get('span_payload_bytes'))}, rest Parquet/other)",
    ]
    if "needed_frame_bytes" in by:
        lines += [
            f"  needed (coded frames delivered) {_mib(by['needed_frame_bytes'])}; GOP spans of "
            f"{by['episodes_touched']} episodes {_mib(by['span_bytes'])}",
            f"  MP4 payload fetched / needed {_f(by.get('fetched_over_needed'), '.2f', 'x')}   "
            f"/ spans of delivered episodes {_f(by.get('fetched_over_span'), '.2f', 'x')}   "
            f"(all bytes / needed {_f(by.get('total_fetched_over_needed'), '.2f', 'x')}; > spans = prefetch ahead)",
        ]
    if mx:
        lines.append("mixture (samples delivered per dataset: share / weight share)")
        for rid, n, got, want in zip(mx["repo_ids"], mx["samples"], mx["shares"], mx["weight_shares"]):
            lines.append(f"  {rid:<30} {n:>8}   {got:.3f} / {want:.3f}")
        for ex in mx.get("exhausted") or []:
            lines.append(
                f"  dataset {ex['repo_id']} exhausted at step {ex['step']}: later batches come from the "
                "others, so the shares no longer follow the weights (--repeat keeps every dataset going)"
            )
    return lines


def _resource_lines(de: dict, me: dict, ca: dict) -> list[str]:
    """Decoder counters, peak memory per process, and the byte cache."""
    lines = [
        f"decoder opens / fallbacks  {de['opens']} / {de['fallbacks']} (PyAV {de['pyav_fallbacks']}); "
        f"frames decoded / returned by workers {de['frames_decoded']} / {de['frames_returned']}; "
        f"sidecar: {de['sidecar']}",
        "memory (peak)",
    ]
    for p in me.get("processes", []):
        lines.append(
            f"  {p['role']:<10} pid {p['pid']:<8} RSS {_mib(p['peak_rss_bytes']):>12}   PSS {_mib(p['peak_pss_bytes']):>12}"
        )
    if me.get("available"):
        lines.append(
            f"  all processes        PSS sum {_mib(me['peak_pss_sum_bytes'])} (true footprint); "
            f"RSS sum {_mib(me['peak_rss_sum_bytes'])} (double-counts shared pages)"
        )
    else:
        lines.append(f"  {NO_MEMORY}")
    ser = ca["series"]
    lines.append(
        f"byte cache  budget {_mib(ca['byte_budget'])}, peak reserved {_mib(ca['peak_reserved_bytes'])}, "
        f"last reserved {_mib(ser['reserved_bytes'][-1] if ser['reserved_bytes'] else None)}, "
        f"last resident {_mib(ser['resident_bytes'][-1] if ser['resident_bytes'] else None)}"
    )
    return lines


# --- the figure -------------------------------------------------------------------------------------
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
        t0, n0 = (t_s[j], samples[j]) if j < i else (0.0, 0)  # the first point: since the start
        dt = t_s[i] - t0
        out.append((samples[i] - n0) / dt if dt > 0 else 0.0)
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
        step, pace = ve.get("step_ms"), ve.get("loader_ms_per_batch")
        if step:
            ax.axhline(step, color="#7f7f7f", ls=":", lw=1.2, label=f"model step {step:g} ms")
        elif pace:  # with a step, the loader's time per batch is the run's pace
            ax.axhline(pace, color="#ff7f0e", ls="--", lw=1.2, label=f"loader time per batch {pace:.0f} ms")
        ymax = max(ymax, (step or pace or 0) * 1.15)
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
    how = " after the first batch)" if step else "; no model step: the rest is the profiler's bookkeeping)"
    ax.set_title("GPU wait per batch" + ("" if frac is None else f" ({100 * frac:.0f}% of the time{how}"), fontsize=10)
    ax.set_xlim(0, tmax * 1.02)
    ax.set_ylabel("ms")
    ax.set_xlabel("time [s]")


def _plot_memory(ax: Any, report: dict, tmax: float) -> None:
    """PSS and RSS sums of every process (MiB), and the byte cache (reserved, resident) beside."""
    ser, mem = report["cache"]["series"], report["memory"].get("series", {})
    mib = lambda xs: [b / 2**20 for b in xs]  # noqa: E731
    if mem.get("t_s"):
        ax.plot(mem["t_s"], mib(mem["pss_sum_bytes"]), color="#1f77b4", label="PSS, all processes")
        ax.plot(
            mem["t_s"], mib(mem["rss_sum_bytes"]), "--", color="#ff7f0e", label="RSS sum (double counts shared pages)"
        )
        ax.set_ylim(0, 1.35 * max(mem["rss_sum_bytes"]) / 2**20)  # room for the legends
        ax.legend(loc="upper left", fontsize=8)
    else:
        ax.text(0.5, 0.5, NO_MEMORY, transform=ax.transAxes, ha="center", fontsize=9, color="#7f7f7f")
    ax.set_ylabel("process memory [MiB]")
    ax.set_xlim(0, tmax * 1.02)
    if ser["t_s"]:
        ax2 = ax.twinx()
        ax2.step(ser["t_s"], mib(ser["reserved_bytes"]), color="#2ca02c", where="post", label="cache reserved")
        ax2.step(ser["t_s"], mib(ser["resident_bytes"]), ":", color="#9467bd", where="post", label="cache resident")
        ax2.set_ylim(0, max(1e-3, max(ser["reserved_bytes"]) / 2**20) * 1.35)
        ax2.set_ylabel("byte cache [MiB]")
        ax2.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("time [s]")
    ax.set_title("memory (PSS sum = true footprint of main + workers)", fontsize=10)


def _plot_stages(ax: Any, report: dict) -> None:
    """Seconds per stage: one bar each, grouped start-up / work / waits (hatched)."""
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
        style = dict(hatch="//", edgecolor="#404040") if group == "wait" else dict(hatch=None, edgecolor="white")
        ax.barh([yy], [v], color=STAGE_COLORS.get(name, "#7f7f7f"), lw=0.5, **style)
        share = f" ({100 * v / work_total:.0f}% of work)" if group == "work" and work_total > 0 else ""
        ax.text(v + vmax * 0.01, yy, f"{v:.2f} s{share}", va="center", fontsize=8)
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{name} [{group}]" for name, group, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, vmax * 1.3)
    st = report["stages"]
    label = f"seconds, summed over {st['processes']} process(es) and their threads"
    if st.get("busy_threads") is not None:
        label += f"; work {st['work_s']:.2f} s = {st['busy_threads']:.1f} threads busy on average, {st['cpu_count']} CPU core(s)"
    ax.set_xlabel(label, fontsize=9)
    ax.set_title("stage breakdown: start-up, work, waits (hatched: a thread blocked)", fontsize=10)
