"""StreamLoader beside the DataLoader path and LeRobot 0.6.1's loaders, with and without a synthetic
training step, against the whole-machine decode limit (``python -m tools.bench --loader ...``).

Rows, per dataset (``g1``, ``g1-3cam``, ``g1-h264`` of :data:`tools.DATASETS`) and worker count:

- ``dataloader/N``: ``torch.utils.data.DataLoader(ds, B, num_workers=N, collate_fn=packed_collate,
  prefetch_factor=4)`` (``lerobotstream-train --dataset.streaming_loader=dataloader``);
- ``threads/N``, ``processes/N``: ``StreamLoader(ds, B, num_workers=N, mode=..., collate_fn=packed_collate)``;
- ``lerobot/N``, ``lerobot-streaming/N``: LeRobot 0.6.1's map-style ``LeRobotDataset`` (shuffled) and
  its ``StreamingLeRobotDataset`` in a DataLoader, run by ``.venv-lerobot`` (``--lerobot-python``;
  skipped, with a note, when it is absent);
- ``.../N:spawn``: the same under ``spawn`` (workers otherwise ``fork``): the first batch with a
  spawn worker's imports.

Every contestant is a long-lived process of :mod:`tools.bench_contestants` (its ``Contestant`` machinery:
imports paid once, one trial at a time over a pipe; a fresh dataset and loader per trial, ours'
sidecar warm). ``--contestants ours,ours@PATH`` adds the ours rows of another checkout (its
``lerobotstream`` first on ``sys.path``), labelled ``row [ours@PATH]``. Rounds are interleaved:
within a round every (dataset, step) group's rows run back to back in rotating order; medians over
rounds, ratios per round then the median.

Per row: steady samples/s (after every worker's first batch); ÷ the decode limit of the same round
(the faster of FFmpeg's threads and one decoder per core: :func:`tools.run_limits`); ÷
LeRobot map-style at the same workers; CPU ms per sample (process + workers, ``/proc``) split into
decode (frames decoded per sample × the limit's one-thread CPU per frame: for ours one decode
per returned frame, a lower bound — its sequential shards decode 1.00-1.12 frames per returned
one in longer runs, and a short trial's counters mostly count the decode lookahead's frames
decoded ahead, kept as ``frames_decoded_per_returned_counted``; map-style's one-seek model) and
the rest (for ours an upper bound); first batch s (from
the dataset's construction, warm sidecar); peak RSS and PSS sums (process + workers, sampled every
0.5 s: the sampler's own CPU is a row of the accounting, ~4-9 % of the machine at 0.2 s).

With ``--steps``: ``gil:MS`` (a pure-Python loop of MS ms after every batch: the step's Python holds
the GIL) and ``nogil:MS`` (MS ms of torch CPU matmuls: it releases the GIL); steps/s, the share of
wall time spent waiting in ``next()``, and the step's slowdown against the step alone in the same
process after the round (a loader never waited on).

GIL: ``threads/N`` runs once more per round under ``py-spy record --gil --idle --nonblocking``
(``--py-spy``; :class:`tools.bench_trial.GilProfile`) for ``--gil-seconds`` of its steady part: the
samples in which some thread of the training process held the GIL ÷ the rate = GIL-held seconds;
per sample, and the samples/s ceiling of one process it implies (1000 / ms).

CPU accounting (``--account``, default ``threads/2,dataloader/2``; ``tools/bench_account.py``): each
of those rows runs once more per round and dataset with the stage hooks installed (and ``perf``
recording, ``--account-perf``); its window starts 3 decode lookaheads (64 anchors each, per shard)
after the first batches and lasts ``--account-seconds`` and at least 12 lookaheads of samples (a
chunk's frames are decoded in one job: the window's edges cut through at most a chunk or two,
and the frames decoded ahead of the first batches stay out of it); its wall time × usable
CPUs is split into CPU per stage (fetch, span/synth, FFmpeg decode, colour conversion, frame copy,
batch assembly, Python in the pipeline, hand-offs, page faults, unattributed), the benchmark's
own, other processes and idle cores, and the measured parts are checked against the whole: a
table per dataset, columns per row, in the text and ``summary[...]["account"]`` in the JSON.

Datasets: ``g1``, ``g1-3cam``, ``g1-h264`` and ``gen96-dp`` (generated 96x96, 2 cameras, the
diffusion policy's window: 2 frames per camera and state, 16 actions, for every contestant;
:func:`tools.bench_datasets.delta_timestamps`), or any of :data:`tools.bench_datasets.DATASETS`.

Goals: each goal of issue 36 and of issue 26 met / not met / not measured with the measured figure
(printed and in the JSON and ``--markdown``).

    python -m tools.bench --loader --lerobot-python .venv-lerobot/bin/python --py-spy py-spy \\
        --rounds 2 --samples 160                       # the full run (docs/loader.md)
    python -m tools.bench --loader --datasets g1 --workers 0,2 --steps none --rounds 3
    python -m tools.bench --loader --contestants ours,ours@/tmp/other-checkout --datasets g1 --workers 0,2
    python -m tools.bench --loader --startup --rounds 3      # a spawn worker's imports, lean or not

Also ``alloc``: a fresh ``torch.empty`` batch tensor per batch written by the C de-interleave vs
one recycled tensor (what StreamLoader's threads mode saves by recycling its batch tensors).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tools.bench_account import median_accounts
from tools.bench_common import LEROBOT_PYTHON, ROOT, atomic_write, fmt, git_head, load_average, load_summary, median
from tools.bench_contestants import Contestant, contestant_env, make_contestants, warm_up
from tools.bench_datasets import DATASETS, dataset_facts, delta_timestamps, ensure_dataset
from tools.bench_limit import best_limit, run_limits
from tools.bench_loader_report import LEROBOT_ROWS, OURS_ROWS, format_report, goals, goals_36
from tools.bench_trial import cpu_s, step_fn

_med = median
_fmt = fmt


def _cpu_s(pids) -> float:
    """CPU seconds (user + system, ``/proc``) of the processes ``pids`` together (one gone counts 0)."""
    return sum(cpu_s(int(p)) for p in pids)


# --- the plan -------------------------------------------------------------------------------------------
def _workers(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def plan(args, ours: list[str], lerobot: list[str]) -> list[tuple[str, str, list[dict]]]:
    """``[(dataset, group, [trial key, ...])]``: a trial key is ``{dataset, step, contestant, row,
    num_workers, mp_context}``; groups (``step`` or ``gil``) are what one round rotates."""
    rows = args.rows.split(",")
    datasets = args.datasets.split(",")
    out = []
    for i, d in enumerate(datasets):
        workers = _workers(args.workers if i == 0 else args.more_workers)
        spawn = _workers(args.spawn) if i == 0 else []
        for step in args.steps.split(",") if i == 0 else ["none"]:
            keys = []
            for label in ours + (lerobot if step == "none" else []):
                kinds = [
                    r
                    for r in rows
                    if (r in OURS_ROWS) == label.startswith("ours") and (label.startswith("ours") or r == label)
                ]
                for kind in kinds:
                    for nw, ctx in [(n, "fork" if n else None) for n in workers] + (
                        [(n, "spawn") for n in spawn if n] if step == "none" else []
                    ):
                        if nw == 0 and kind == "processes":
                            continue  # StreamLoader runs 0 workers in threads mode
                        if ctx == "spawn" and kind in ("threads", "lerobot-streaming"):
                            continue  # no worker process / its first batch is its shuffle buffer
                        keys.append(
                            {
                                "dataset": d,
                                "step": step,
                                "contestant": label,
                                "row": kind,
                                "num_workers": nw,
                                "mp_context": ctx,
                            }
                        )
            out.append((d, step, keys))
        if i == 0 and args.py_spy and "threads" in rows:
            out.append(
                (
                    d,
                    "gil",
                    [
                        {
                            "dataset": d,
                            "step": "none",
                            "contestant": label,
                            "row": "threads",
                            "num_workers": nw,
                            "mp_context": None,
                            "gil_profile": True,
                        }
                        for label in ours
                        for nw in _workers(args.gil)
                    ],
                )
            )
        accounted = [r.split("/") for r in (args.account or "").split(",") if r.strip()]
        if accounted:  # the CPU accounting (tools/bench_account.py): every dataset
            out.append(
                (
                    d,
                    "account",
                    [
                        {
                            "dataset": d,
                            "step": "none",
                            "contestant": label,
                            "row": kind,
                            "num_workers": int(n),
                            "mp_context": "fork" if int(n) and kind != "threads" else None,
                            "accounted": True,
                        }
                        for label in ours
                        for kind, n in accounted
                    ],
                )
            )
    return out


def row_label(key: dict, ours0: str) -> str:
    """``threads/2``, ``processes/2:spawn``, ``lerobot/0``, ``threads/2 [ours@/path]``."""
    name = f"{key['row']}/{key['num_workers']}" + (":spawn" if key["mp_context"] == "spawn" else "")
    c = key["contestant"]
    return name if c == ours0 or not c.startswith("ours") else f"{name} [{c}]"


def _spec(key: dict, c: Contestant, args, rnd: int, root: Path, py_spy: str | None) -> dict:
    spec = {
        "kind": c.kind,
        "num_workers": key["num_workers"],
        "mp_context": key["mp_context"],
        "uint8": not args.float32,
        "batch_size": args.batch_size,
        "samples": args.samples,
        "seed": args.seed + rnd,
        "repo_id": f"bench/{key['dataset']}",
        "options": c.options,
        "prefetch_factor": 4,
        "root": str(root),
        "mixture": None,
        "step": key["step"],
    }
    if c.kind == "ours":
        spec["loader"] = key["row"]
    if key.get("gil_profile"):  # drawn until the profile ends: a stream that does not end
        spec["options"] = {**c.options, "repeat": True}
        spec["gil"] = {"py_spy": py_spy, "rate": args.gil_rate, "duration_s": args.gil_seconds}
    if key.get("accounted"):  # drawn for the accounting's window: a stream that does not end
        spec["options"] = {**c.options, "repeat": True}
        warm = args.account_warm_samples
        chunk = 64 * max(1, key["num_workers"])  # decode_lookahead's default anchors, per shard
        spec["account"] = {
            "seconds": args.account_seconds,
            "perf": args.account_perf != "off",
            "warm_samples": 3 * chunk if warm is None else warm,
            "min_samples": 0 if warm == 0 else 12 * chunk,
        }
    spec["delta_timestamps"] = delta_timestamps(key["dataset"])
    return spec


# --- the run --------------------------------------------------------------------------------------------
def run(args) -> dict:
    cache = Path(args.cache_dir).expanduser()
    datasets = args.datasets.split(",")
    roots = {d: ensure_dataset(cache, d) for d in datasets}
    facts = {d: dataset_facts(r) for d, r in roots.items()}
    logs = Path(tempfile.mkdtemp(prefix="bench-loader-logs-"))
    env = contestant_env(cache)
    ours_texts = [c for c in args.contestants.split(",") if c]
    if not ours_texts or any(not c.startswith("ours") for c in ours_texts):
        raise SystemExit("--contestants: ours[@PATH][+k=v], ... (LeRobot's rows are chosen by --rows)")
    lerobot_texts = [r for r in args.rows.split(",") if r in LEROBOT_ROWS]
    contestants, notes = make_contestants(ours_texts + lerobot_texts, Path(args.lerobot_python), env, logs)
    by_label = {c.label: c for c in contestants}
    limit_side = Contestant("limit", "limit", Path(sys.executable), env, logs / "limit.log")
    ours = [c for c in ours_texts if c in by_label]
    lerobot = [c for c in lerobot_texts if c in by_label]
    py_spy = args.py_spy and (shutil.which(args.py_spy) or (args.py_spy if os.path.exists(args.py_spy) else None))
    if args.py_spy and not py_spy:
        notes.append(f"GIL rows: py-spy not found at {args.py_spy!r}")
    args.py_spy = py_spy
    if not args.py_spy:
        notes.append("GIL-held time: not measured (no --py-spy)")
    groups = plan(args, ours, lerobot)
    setup: dict[str, Any] = {"notes": notes, "logs": str(logs)}
    trials: list[dict] = []
    alone: dict[str, list[dict]] = {}
    load = [load_average()]
    t_start = time.time()
    try:
        warm_up([*contestants, limit_side], setup, args.trial_timeout_s)
        for d in datasets:
            for label in ours:
                r = by_label[label].call(
                    {"kind": "prepare", "root": str(roots[d]), "mixture": None}, args.trial_timeout_s
                )
                setup[f"prepare {label} {d}"] = r
        for rnd in range(args.rounds):
            for d in datasets:
                trials += run_limits(limit_side, roots[d], facts[d], d, rnd, args.samples, args.trial_timeout_s)
            for d, _group, keys in groups:
                order = keys[rnd % max(1, len(keys)) :] + keys[: rnd % max(1, len(keys))]
                for key in order:
                    c = by_label[key["contestant"]]
                    row = {"round": rnd, **key}
                    if c.error:
                        trials.append({**row, "skipped": c.error})
                        continue
                    la = load_average()
                    r = c.call(_spec(key, c, args, rnd, roots[d], args.py_spy), args.trial_timeout_s)
                    r.pop("anchors", None)
                    row.update(r, load_before=la, load_after=load_average())
                    trials.append(row)
                    atomic_write(Path(args.json), json.dumps({"partial": True, "trials": trials}, default=str))
                    g = (r.get("gil") or {}).get("gil_ms_per_sample")
                    print(
                        f"round {rnd} {d:<8} {key['step']:<9} {row_label(key, ours[0]):<28} "
                        + (
                            r.get("error")
                            or f"{_fmt(r.get('steady_samples_per_s'))} samples/s, first "
                            f"{_fmt(r.get('first_batch_s'), '.2f')} s, {_fmt(r.get('cpu_ms_per_sample'), '.2f')} "
                            f"CPU ms/sample, wait {_fmt(100 * (r.get('wait_share') or 0), '.0f')}%"
                            + (f", GIL {g:.3f} ms/sample" if g is not None else "")
                            + f", load {la:.1f}"
                        ),
                        file=sys.stderr,
                        flush=True,
                    )
            for label in ours:  # the step alone, in the process that ran the rows (torch's OpenMP state)
                steps = [s for s in args.steps.split(",") if s != "none"]
                if steps and not by_label[label].error:
                    alone.setdefault(label, []).append(
                        by_label[label].call({"kind": "step_alone", "steps": steps}, args.trial_timeout_s)
                    )
            load.append(load_average())
    except BaseException:
        for c in [*contestants, limit_side]:
            c.close(kill=True)
        raise
    finally:
        for c in [*contestants, limit_side]:
            c.close()
    if any("error" in t for t in trials):
        notes.append(f"contestants' logs: {logs}")
    else:
        shutil.rmtree(logs, ignore_errors=True)
    summary = summarize(trials, facts, alone, ours[0] if ours else "ours")
    from lerobotstream.loader._loader import choose_mode, usable_cpus

    meta = {
        "command": "python -m tools.bench --loader " + " ".join(args.argv),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t_start)),
        "minutes": (time.time() - t_start) / 60,
        "cpus": usable_cpus(),
        "rounds": args.rounds,
        "batch_size": args.batch_size,
        "samples": args.samples,
        "items": "float32" if args.float32 else "uint8",
        "load": load,
        "load_trials": load_summary(trials),
        "git": git_head(),
        "setup": setup,
        "ours": ours,
        "notes": notes,
        "auto": {str(n): choose_mode(n)[0] for n in (0, 1, 2, 4)},
        "primary": datasets[0],
    }
    return {
        "meta": meta,
        "summary": summary,
        "goals": goals(summary, meta),
        "goals_36": goals_36(summary, meta),
        "trials": trials,
        "step_alone": alone,
    }


# --- the summary ----------------------------------------------------------------------------------------
def summarize(trials: list[dict], facts: dict, alone: dict[str, list[dict]], ours0: str) -> list[dict]:
    """One entry per (dataset, step, row): medians over rounds and per-round ratios (module doc)."""
    lim = {}
    for t in trials:
        if t.get("contestant", "").startswith("limit"):
            lim.setdefault((t["dataset"], t["round"]), {})[t["contestant"]] = t
    cpu_frame = {
        d: _med([x.get("limit-1thread", {}).get("cpu_ms_per_frame") for (dd, _), x in lim.items() if dd == d])
        for d in facts
    }
    runs = [t for t in trials if "row" in t]
    keyf = ("dataset", "step", "contestant", "row", "num_workers", "mp_context", "gil_profile", "accounted")
    groups: dict[tuple, list[dict]] = {}
    for t in runs:
        groups.setdefault(tuple(t.get(k) for k in keyf), []).append(t)

    def by_round(d, step, contestant, row, nw, ctx, gil=None):
        return {
            t["round"]: t
            for t in groups.get((d, step, contestant, row, nw, ctx, gil, None), [])
            if t.get("steady_samples_per_s")
        }

    def ratio(a: dict, b: dict):
        return _med([a[r]["steady_samples_per_s"] / b[r]["steady_samples_per_s"] for r in a if r in b])

    out = []
    for key, ts in groups.items():
        d, step, contestant, row, nw, ctx, gil, acct = key
        cams = len(facts[d].video_keys)
        ok = [t for t in ts if "error" not in t and "skipped" not in t]
        e: dict[str, Any] = {
            "dataset": d,
            "step": step,
            "row": row_label(dict(zip(keyf, key)), ours0),
            "kind": row,
            "contestant": contestant,
            "num_workers": nw,
            "mp_context": ctx,
            "runs": len(ok),
        }
        if gil:
            e["row"] += " (py-spy)"
            e["gil"] = True
        if acct:  # its own step: no other table or ratio reads these trials (hooks and perf ran)
            e["row"] += " (accounted)"
            e["step"] = "account"
        if not ok:
            why = [x for x in str(ts[0].get("skipped") or ts[0].get("error")).splitlines() if x.strip()] or ["?"]
            e["skipped"] = why[-1].strip()
            out.append(e)
            continue
        sps = [t.get("steady_samples_per_s") for t in ok]
        for k in (
            "steady_samples_per_s",
            "first_batch_s",
            "cpu_ms_per_sample",
            "peak_rss_mib",
            "peak_pss_mib",
            "steps_per_s",
            "wait_share",
            "step_s",
        ):
            e[k] = _med([t.get(k) for t in ok])
        e["spread"] = min(sps) / max(sps) if all(sps) else None
        if acct:  # the accounting's trials: their table (medians over rounds), no ratios
            e["account"] = median_accounts([t["account"] for t in ok if t.get("account")])
            out.append(e)
            continue
        e["over_limit"] = _med(
            [
                t["steady_samples_per_s"] / (best_limit(lim.get((d, t["round"]), {})) / cams)
                for t in ok
                if t.get("steady_samples_per_s") and best_limit(lim.get((d, t["round"]), {}))
            ]
        )
        # frames decoded per returned frame: ours' sequential shards decode each frame once (1.00-1.12 in
        # tools/bench.py's 640-sample runs); a 160-sample trial's counters are dominated by the decode
        # lookahead's frames decoded ahead (whole trial) or decoded before the steady part (steady
        # part), so decode CPU takes 1 (a lower bound: "rest" is an upper bound) and the counted
        # whole-trial figure is kept (DataLoader rows and threads/0). Map-style: the one-seek model;
        # LeRobot streaming decodes into its shuffle buffer before its first batch (not priced).
        if contestant.startswith("ours"):
            e["frames_decoded_per_returned_counted"] = _med(
                [(t.get("ours_stats") or {}).get("frames_decoded_per_returned") for t in ok]
            )
            dpr = 1.0
        elif row == "lerobot":
            dpr = facts[d].seek_decoded_per_frame
        else:
            dpr = None
        e["frames_decoded_per_returned"] = dpr
        dec = dpr * cams * cpu_frame[d] if dpr is not None and cpu_frame.get(d) is not None else None
        e["decode_cpu_ms_per_sample"] = dec
        e["rest_cpu_ms_per_sample"] = (
            e["cpu_ms_per_sample"] - dec if dec is not None and e["cpu_ms_per_sample"] is not None else None
        )
        mine = by_round(d, step, contestant, row, nw, ctx, gil)
        if row != "lerobot":
            e["x_lerobot"] = ratio(mine, by_round(d, "none", "lerobot", "lerobot", nw, ctx)) if step == "none" else None
        if row in ("threads", "processes"):
            e["x_dataloader"] = ratio(
                mine, by_round(d, step, contestant, "dataloader", nw, ctx or ("fork" if nw else None))
            )
        if row == "processes":
            e["x_threads"] = ratio(mine, by_round(d, step, contestant, "threads", nw, "fork" if nw else None))
        if contestant != ours0 and contestant.startswith("ours"):  # another checkout: ÷ the same row of ours
            e["x_ours"] = ratio(mine, by_round(d, step, ours0, row, nw, ctx, gil))
        if step != "none" and e.get("step_s"):
            base = _med([a.get("step_alone_s", {}).get(step) for a in alone.get(contestant, [])])
            e["step_alone_s"] = base
            e["step_slowdown"] = e["step_s"] / base - 1 if base else None
        if gil:
            g = [t.get("gil") or {} for t in ok]
            e["gil_ms_per_sample"] = _med([x.get("gil_ms_per_sample") for x in g])
            e["gil_ceiling_samples_per_s"] = 1e3 / e["gil_ms_per_sample"] if e["gil_ms_per_sample"] else None
            e["gil_samples"] = [x.get("gil_samples") for x in g]
            e["gil_window_samples"] = [x.get("window_samples") for x in g]
            e["gil_warnings"] = sorted({w for x in g for w in x.get("warnings") or []})
        out.append(e)
    # the limit, per dataset
    for d in facts:
        rs = [x for (dd, _), x in lim.items() if dd == d]
        cams = len(facts[d].video_keys)

        def sps(label, rs=rs, cams=cams):
            fps = _med([(x.get(label) or {}).get("frames_per_s") for x in rs])
            return fps / cams if fps else None

        out.append(
            {
                "dataset": d,
                "step": "none",
                "row": "decode limit",
                "kind": "limit",
                "runs": len(rs),
                "steady_samples_per_s": _med([best_limit(x) / cams for x in rs if best_limit(x)]),
                "limit_ffmpeg_samples_per_s": sps("limit-ffmpeg"),
                "limit_cores_samples_per_s": sps("limit-cores"),
                "limit_1thread_samples_per_s": sps("limit-1thread"),
                "cores_cpu_per_wall": _med([(x.get("limit-cores") or {}).get("cpu_per_wall") for x in rs]),
                "cpu_ms_per_frame_1thread": cpu_frame.get(d),
            }
        )
    return out


# --- the extra rows of this file ------------------------------------------------------------------------
def alloc_rows(batch: int, h: int = 480, w: int = 640, reps: int = 30) -> dict:
    """ms per batch: fresh ``torch.empty`` + C de-interleave of every frame vs a recycled tensor."""
    import torch

    from lerobotstream.decode._frames import frames_to_u8_chw

    frames = [torch.randint(0, 255, (h, w, 3), dtype=torch.uint8).permute(2, 0, 1) for _ in range(batch)]
    out: dict[str, list[float]] = {}
    for mode in ("fresh", "recycled", "fresh", "recycled"):
        keep = torch.empty((batch, 3, h, w), dtype=torch.uint8)
        t0 = time.perf_counter()
        for _ in range(reps):
            t = torch.empty((batch, 3, h, w), dtype=torch.uint8) if mode == "fresh" else keep
            for i, f in enumerate(frames):
                frames_to_u8_chw([f], out=t[i])
        out.setdefault(mode, []).append(1000 * (time.perf_counter() - t0) / reps)
    return {k: min(v) for k, v in out.items()}


_IMPORTS = {
    "torch": "import torch",
    "torchcodec": "import torch, torchcodec.decoders",
    "torchcodec-lean": "import torch; from lerobotstream.decode._lean import import_decoder_lean; "
    "import_decoder_lean(); import torchcodec.decoders",
}


def startup_rows(rounds: int) -> dict:
    """Seconds to import what a spawn worker imports, each in a fresh interpreter, interleaved:
    torch alone, torch + torchcodec, torch + torchcodec without ``torch._dynamo`` (ours); and
    whether ``torch._dynamo`` ended up imported."""
    import subprocess

    out: dict[str, list[float]] = {}
    dyn: dict[str, bool] = {}
    for r in range(rounds):
        names = list(_IMPORTS)
        for name in names[r % len(names) :] + names[: r % len(names)]:
            code = (
                "import sys, time; t = time.perf_counter(); "
                + _IMPORTS[name]
                + "; print(time.perf_counter() - t, 'torch._dynamo' in sys.modules)"
            )
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
            secs, d = res.stdout.split()
            out.setdefault(name, []).append(float(secs))
            dyn[name] = d == "True"
    return {k: {"median_s": statistics.median(v), "runs": v, "dynamo_imported": dyn[k]} for k, v in out.items()}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--datasets",
        default="g1,g1-3cam,g1-h264",
        help=f"of {', '.join(DATASETS)}; the first "
        "gets --workers, --steps, --spawn and the GIL rows, the others --more-workers and step none",
    )
    ap.add_argument("--rows", default=",".join(OURS_ROWS + LEROBOT_ROWS))
    ap.add_argument("--workers", default="0,1,2,4", help="worker counts of the first dataset (fork)")
    ap.add_argument("--more-workers", default="0,2", help="worker counts of the other datasets")
    ap.add_argument("--spawn", default="2", help="worker counts also run under spawn (first dataset, step none)")
    ap.add_argument(
        "--steps", default="none,gil:20,nogil:20", help="none, gil:MS, nogil:MS (first dataset; ours' rows)"
    )
    ap.add_argument("--contestants", default="ours", help="checkouts for ours' rows: ours[@PATH][+k=v], ...")
    ap.add_argument("--lerobot-python", default=str(LEROBOT_PYTHON))
    ap.add_argument("--py-spy", default=None, help="py-spy executable for the GIL rows (absent: not measured)")
    ap.add_argument("--gil", default="0,2", help="threads worker counts profiled for the GIL (first dataset)")
    ap.add_argument("--gil-seconds", type=int, default=2, help="py-spy --duration (whole seconds)")
    ap.add_argument("--gil-rate", type=int, default=250)
    ap.add_argument(
        "--account",
        default="threads/2,dataloader/2",
        help="rows whose CPU is accounted per stage on every dataset (tools/bench_account.py; '' for none)",
    )
    ap.add_argument(
        "--account-seconds",
        type=float,
        default=3.0,
        help="steady seconds of each accounted trial (and at least 12 decode lookaheads of samples)",
    )
    ap.add_argument(
        "--account-warm-samples",
        type=int,
        default=None,
        help="samples drawn before an accounted trial's window starts (default: 3 decode lookaheads "
        "of 64 anchors per shard, so the frames decoded ahead of the first batches are out of it; "
        "0: right after the first batches, and no minimum window)",
    )
    ap.add_argument(
        "--account-perf",
        default="auto",
        choices=("auto", "off"),
        help="split FFmpeg decode from colour conversion with perf samples (auto: when perf can record)",
    )
    ap.add_argument("--batch-size", "--batch", type=int, default=8)
    ap.add_argument("--samples", type=int, default=160)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--float32", action="store_true")
    ap.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "lerobotstream" / "bench"))
    ap.add_argument("--trial-timeout-s", type=float, default=600)
    ap.add_argument("--json", default="bench-loader.json")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--no-alloc", action="store_true", help="skip the alloc line")
    ap.add_argument("--startup", action="store_true", help="only the worker import rows (fresh interpreters)")
    args = ap.parse_args(argv)
    args.argv = argv
    if args.startup:
        res = startup_rows(args.rounds)
        base = res["torchcodec"]["median_s"]
        for k, v in res.items():
            print(
                f"startup {k:16} {v['median_s']:6.2f} s (x{v['median_s'] / base:.2f} of torch + torchcodec), "
                f"torch._dynamo imported: {v['dynamo_imported']}; runs {[round(x, 2) for x in v['runs']]}"
            )
        print(f"load average {os.getloadavg()[0]:.1f}")
        return 0
    for d in args.datasets.split(","):
        if d not in DATASETS or DATASETS[d][1]["kind"] == "mixture":
            raise SystemExit(f"unknown or mixture dataset {d!r}")
    for s in args.steps.split(","):
        step_fn(s)  # a ValueError here, not in every trial
    res = run(args)
    if not args.no_alloc:
        res["alloc"] = alloc_rows(args.batch_size)
    alloc = (
        f"\n\nalloc: fresh batch tensor {res['alloc']['fresh']:.2f} ms vs recycled {res['alloc']['recycled']:.2f} "
        f"ms per batch of {args.batch_size} 640x480 uint8 frames (best of 2)"
        if "alloc" in res
        else ""
    )
    print(format_report(res) + alloc)
    atomic_write(Path(args.json), json.dumps(res, indent=1, default=str))
    if args.markdown:  # for docs/performance.md: no date, commit or goals
        atomic_write(Path(args.markdown), format_report(res, for_docs=True) + alloc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
