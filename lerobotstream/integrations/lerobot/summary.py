"""The streaming summary of a ``lerobotstream-train`` run: what the training loop saw of the train
stream (:class:`BatchCounters`), the dict written to ``<output_dir>/streaming_summary.json``
(:func:`summarize`) and its terminal lines (:func:`format_summary`).

Figures: this rank's samples/s over the loop's steps before the last (from the loop's start, worker
start-up included, to the request of the last batch, when the step before it ended: the loop's own
work after its last step, a checkpoint or an upload, is not counted) and, when gathered
(:func:`gather_ranks`), the ranks' sum; the share of step time spent waiting for a batch after the first; the payload this rank's shards fetched (carried on the items' tags, ``factory.TAG_KEYS``)
beside the selected episodes' file bytes; its MP4 payload by origin (store, disk cache, reused in
memory) beside what the admitted episodes' spans needed; the sidecar status, the collate and the loader.
"""

from __future__ import annotations

from typing import Any

from lerobotstream.integrations.lerobot.factory import (
    ORIGIN_KEYS,
    TAG_BYTES,
    TAG_ORIGIN,
    TAG_PROCESS,
    TAG_REQUESTS,
    TAG_WORKER,
)

__all__ = ["BatchCounters", "summarize", "format_summary", "rank_figures", "gather_ranks", "ORIGINS"]

#: ``payload_bytes_by_origin``'s keys, in ``factory.ORIGIN_KEYS``' order
ORIGINS = tuple(k.removesuffix("_bytes") for k in ORIGIN_KEYS)  # "store", "disk_cache", "reused", "needed"


class BatchCounters:
    """Batches, samples, data wait (seconds, ``time.perf_counter``) and each process's fetched bytes,
    requests and MP4 payload bytes by origin of the train stream, as the training loop takes its
    batches. A step ends when the loop asks for the next batch: the samples of every batch but the
    last (``timed_samples``) are timed from :meth:`start` to the request of the last (``elapsed_s``)."""

    def __init__(self) -> None:
        self.batches = 0
        self.samples = 0
        self.wait_s = 0.0
        self.first_batch_s: float | None = None
        self.loop_start: float | None = None
        self.last_t: float | None = None  # the last batch received
        self.timed_samples = 0  # samples of the batches before the last: their steps are done
        self.timed_end: float | None = None  # when the last batch was asked for: the step before it ended
        self.steady_wait_s = 0.0  # waits after the first batch
        self.steady_s = 0.0  # loop time after the first batch (receipt to receipt)
        self.process_bytes: dict[int, int] = {}  # by pid
        self.process_requests: dict[int, int] = {}
        #: by pid: the largest running MP4 payload bytes by origin (``factory.ORIGIN_KEYS`` order)
        self.process_origin: dict[int, list[int]] = {}
        self.origin_unknown: set[int] = set()  # pids whose items carried no (or an unknown) by-origin tag
        self.samples_by_dataset: dict[int, int] = {}

    def start(self, t: float) -> None:
        """The loop starts at ``t`` (before the DataLoader's workers start)."""
        self.loop_start = t

    @property
    def elapsed_s(self) -> float:
        """Seconds from :meth:`start` to the request of the last batch (the steps of
        ``timed_samples``); 0.0 before a second batch."""
        if self.timed_end is None or self.loop_start is None:
            return 0.0
        return max(0.0, self.timed_end - self.loop_start)

    def account(self, batch: dict[str, Any], t0: float, t1: float) -> list[int]:
        """Count ``batch``, asked for at ``t0`` and received at ``t1``; its bookkeeping tags are
        removed from it (LeRobot never sees them). Returns the DataLoader worker of each sample."""
        wait = t1 - t0
        self.wait_s += wait
        if self.first_batch_s is None:
            self.first_batch_s = t1 - (self.loop_start if self.loop_start is not None else t0)
        else:  # asked for at t0: the steps of the batches before it are done
            self.steady_wait_s += wait
            self.steady_s += t1 - self.last_t
            self.timed_samples, self.timed_end = self.samples, t0
        self.last_t = t1
        wids = batch.pop(TAG_WORKER).tolist()
        pids = batch.pop(TAG_PROCESS).tolist()
        nbytes = batch.pop(TAG_BYTES).tolist()
        nreq = batch.pop(TAG_REQUESTS).tolist()
        origin = batch.pop(TAG_ORIGIN, None)  # absent: a wrapper without it
        rows = [None] * len(pids) if origin is None else origin.tolist()
        # each process's running source totals (its shards share them): keep the largest seen
        for p, b, r, row in zip(pids, nbytes, nreq, rows):
            self.process_bytes[p] = max(self.process_bytes.get(p, 0), b)
            self.process_requests[p] = max(self.process_requests.get(p, 0), r)
            if row is None or len(row) != len(ORIGIN_KEYS) or min(row) < 0:
                self.origin_unknown.add(p)
            else:
                kept = self.process_origin.get(p)
                self.process_origin[p] = list(row) if kept is None else [max(a, v) for a, v in zip(kept, row)]
        self.samples += len(wids)
        if "dataset_index" in batch:  # a mixture: samples per dataset
            for d in batch["dataset_index"].tolist():
                self.samples_by_dataset[int(d)] = self.samples_by_dataset.get(int(d), 0) + 1
        self.batches += 1
        return wids


def summarize(
    counters: BatchCounters,
    dataset: Any,
    *,
    rank: int,
    world_size: int,
    num_workers: int,
    batch_size: int,
    seed: Any,
    start_step: int,
    sidecar: Any,
    collate: str | None,
    loader: str,
    ranks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The summary dict (JSON-able) of one rank: the run's settings, the counters' figures, the
    selected episodes' file bytes (None when unknown), a mixture's weights and shares, and with
    ``ranks`` (every rank's :func:`rank_figures`) the ranks' summed samples/s."""
    c = counters
    elapsed = c.elapsed_s
    every = _all_ranks(ranks, world_size)
    return {
        "rank": rank,
        "world_size": world_size,
        "num_workers": int(num_workers),
        "batch_size": int(batch_size),
        "seed": seed,
        "start_step": start_step,
        "steps": c.batches,
        "samples": c.samples,
        "elapsed_s": round(elapsed, 3),
        "timed_samples": c.timed_samples,
        "samples_per_s": round(c.timed_samples / elapsed, 2) if elapsed > 0 else None,
        "samples_per_s_all_ranks": every,
        "first_batch_s": None if c.first_batch_s is None else round(c.first_batch_s, 3),
        # a share of the steps after the first: none with one step (its wait is the start-up)
        "data_wait_share": round(c.steady_wait_s / c.steady_s, 4) if c.batches > 1 and c.steady_s > 0 else None,
        "data_wait_s": round(c.wait_s, 3),
        "payload_bytes_fetched": sum(c.process_bytes.values()),
        "payload_requests": sum(c.process_requests.values()),
        "payload_bytes_by_origin": _by_origin(c),
        **_dataset_bytes(dataset),
        "sidecar": sidecar,
        "collate": collate,
        "loader": loader,
        **_mixture_summary(dataset, c.samples_by_dataset),
    }


def _by_origin(c: BatchCounters) -> dict[str, int | None]:
    """This rank's MP4 payload bytes by origin (:data:`ORIGINS`), its processes' totals summed; every
    value None when unknown (no tagged batch, or a process that did not report them)."""
    if not c.process_origin or c.origin_unknown:
        return dict.fromkeys(ORIGINS, None)
    return {name: sum(row[i] for row in c.process_origin.values()) for i, name in enumerate(ORIGINS)}


def rank_figures(counters: BatchCounters) -> dict[str, Any]:
    """What one rank contributes to the summed figures: its timed samples and their loop time
    (seconds, its summary's ``timed_samples`` and ``elapsed_s``)."""
    return {"samples": counters.timed_samples, "elapsed_s": counters.elapsed_s}


def gather_ranks(counters: BatchCounters, hold: list[Any]) -> list[dict[str, Any]] | None:
    """Every rank's :func:`rank_figures`, gathered over ``torch.distributed`` while its process
    group is still up (a collective: every rank calls it); None without one, or if it fails (the
    summary then gives this rank's figures only).

    The collective's work object is appended to ``hold``, and the caller keeps it until the process
    group is gone. Gloo's worker thread drops its reference to a finished collective while holding
    the group's work lock; were that the last reference, freeing the collective's tensors would need
    the GIL, which the thread destroying the group holds while it waits for that lock: both ranks
    would hang at exit (PyTorch issue 56297). Holding the work object keeps the worker's reference
    from being the last, so the tensors are freed later, by the thread that drops ``hold``."""
    import torch
    import torch.distributed as dist

    mine = rank_figures(counters)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    try:
        sent = torch.tensor([float(mine["samples"]), float(mine["elapsed_s"])], dtype=torch.float64)
        got = [torch.zeros(2, dtype=torch.float64) for _ in range(dist.get_world_size())]
        work = dist.all_gather(got, sent, async_op=True)
        hold.append(work)
        work.wait()
        return [{"samples": int(t[0].item()), "elapsed_s": float(t[1].item())} for t in got]
    except Exception:  # summary only: never fail a finished training run over it
        return None


def _all_ranks(ranks: list[dict[str, Any]] | None, world_size: int) -> float | None:
    """The ranks' summed samples/s, when every rank's figures are known."""
    if not ranks or len(ranks) != world_size or any(r is None or r["elapsed_s"] <= 0 for r in ranks):
        return None
    return round(sum(r["samples"] / r["elapsed_s"] for r in ranks), 2)


def _mixture_summary(ds: Any, counts: dict[int, int]) -> dict[str, Any]:
    """For a mixture: its repo ids and weights, and the samples this rank took from each dataset
    (every dataset named, 0 for one that gave none)."""
    mixture = getattr(ds, "mixture", None)
    if not mixture:
        return {}
    total = sum(counts.values()) or 1
    ids = mixture["repo_ids"]
    return {
        "mixture": mixture,
        "samples_by_dataset": {r: counts.get(d, 0) for d, r in enumerate(ids)},
        "share_by_dataset": {r: round(counts.get(d, 0) / total, 4) for d, r in enumerate(ids)},
    }


def _dataset_bytes(ds: Any) -> dict[str, int | None]:
    """``dataset_bytes`` / ``dataset_mp4_bytes`` / ``dataset_parquet_bytes``: the MP4 (sized at
    ``data_root``) and Parquet files of the selected episodes (None if unknown)."""
    mp4 = parquet = None
    try:
        if ds is not None:
            mp4 = parquet = 0
            for child in getattr(ds, "datasets", [ds]):  # a mixture: every dataset's files
                source = child.reader_config().payload_source
                mp4 += int(sum(source.size(p) for p in child.meta.video_paths()))
                parquet += int(sum(source.size(p) for p in child.meta.data_paths()))
    except Exception:  # summary only: never fail a finished training run over it
        mp4 = parquet = None
    total = None if mp4 is None else mp4 + parquet
    return {"dataset_bytes": total, "dataset_mp4_bytes": mp4, "dataset_parquet_bytes": parquet}


def _fmt_bytes(n: int | None) -> str:
    """Bytes in binary units (KiB, MiB, GiB), as the byte budget and the profiler state them."""
    if n is None:
        return "?"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _mixture_lines(s: dict[str, Any]) -> list[str]:
    """One line per dataset of a mixture: its weight (normalised) and its share of this rank's samples."""
    mix = s.get("mixture")
    if not mix:
        return []
    total = sum(mix["weights"]) or 1
    lines = ["[lerobotstream]   mixture (weight / share of this rank's samples):"]
    for r, w in zip(mix["repo_ids"], mix["weights"]):
        n = s["samples_by_dataset"].get(r, 0)
        lines.append(
            f"[lerobotstream]     {r}: weight {w / total:.3f}, share {s['share_by_dataset'].get(r, 0):.3f} ({n} samples)"
        )
    return lines


def _origin_lines(s: dict[str, Any]) -> list[str]:
    """The MP4 payload by origin beside the admitted episodes' spans ("unknown" when not reported)."""
    if "payload_bytes_by_origin" not in s:
        return []
    o = s["payload_bytes_by_origin"] or {}
    if any(o.get(k) is None for k in ORIGINS):
        return ["[lerobotstream]   MP4 payload by origin: unknown (not reported by the stream)"]
    return [
        f"[lerobotstream]   MP4 payload by origin: store {_fmt_bytes(o['store'])}, disk cache "
        f"{_fmt_bytes(o['disk_cache'])}, reused in memory {_fmt_bytes(o['reused'])}; the admitted "
        f"episodes' spans needed {_fmt_bytes(o['needed'])}"
    ]


def _wait_line(s: dict[str, Any]) -> str:
    """The data-wait share of the steps after the first, or why it was not measured."""
    first = s["first_batch_s"]
    if s["data_wait_share"] is not None:
        return (
            f"[lerobotstream]   waiting for data: {100 * s['data_wait_share']:.1f}% of step time after the first "
            f"batch (the first batch's {first} s of start-up is not counted)"
        )
    steps = s.get("steps", 0)
    if not steps:
        why = "no step taken"
    elif steps == 1:
        why = f"one step: its batch's {first} s wait is the start-up, a share needs a second step"
    else:
        why = "no step time after the first batch"
    return f"[lerobotstream]   waiting for data: not measured ({why})"


def format_summary(s: dict[str, Any]) -> str:
    """The summary's terminal lines: the loader as it ran; this rank's samples/s over its steps
    before the last (and the ranks' sum when known); the data-wait share of the
    steps after the first, which leaves the first batch (worker start-up, first fetches) out and
    says so, or why it was not measured (one step, no step); the payload this rank fetched
    (prefetch ahead included) beside the selected episodes' files; its MP4 payload by origin; a
    mixture's weights and shares."""
    files = ""
    if s.get("dataset_bytes"):
        parts = ""
        if s.get("dataset_mp4_bytes") is not None and s.get("dataset_parquet_bytes") is not None:
            parts = f" = MP4 {_fmt_bytes(s['dataset_mp4_bytes'])} + Parquet {_fmt_bytes(s['dataset_parquet_bytes'])}"
        files = f"; the selected episodes' files: {_fmt_bytes(s['dataset_bytes'])}{parts}"
    world = s["world_size"]
    if s["samples_per_s"] is None:
        rate = "; samples/s not measured (a rate needs a second step: a step ends when the next batch is asked for)"
    else:
        on = " on this rank" if world > 1 else ""
        rate = (
            f"; {s['timed_samples']} in the steps before the last took {s['elapsed_s']:.1f} s (start-up "
            f"included) = {s['samples_per_s']} samples/s{on}"
        )
    first = "" if s["first_batch_s"] is None else f" (first batch after {s['first_batch_s']} s)"
    lines = [
        f"[lerobotstream] streaming summary (rank {s['rank']} of {world}, {s.get('loader', 'DataLoader')}, "
        f"batch {s['batch_size']}, seed {s['seed']})",
        f"[lerobotstream]   steps {s['start_step']}..{s['start_step'] + s['steps']}: {s['samples']} samples"
        f"{rate}{first}",
    ]
    if world > 1:
        every = s.get("samples_per_s_all_ranks")
        lines.append(
            f"[lerobotstream]   all {world} ranks: {every} samples/s in sum"
            if every is not None
            else f"[lerobotstream]   all {world} ranks: not gathered (this rank's figures only)"
        )
    lines += [
        _wait_line(s),
        f"[lerobotstream]   payload fetched by this rank: {_fmt_bytes(s['payload_bytes_fetched'])} in "
        f"{s['payload_requests']} requests (prefetch ahead of the last step included){files}",
        *_origin_lines(s),
        *_mixture_lines(s),
        f"[lerobotstream]   sidecar: {s['sidecar']}",
    ]
    return "\n".join(lines)
