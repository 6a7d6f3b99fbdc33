"""The peer benchmark's report: the trials summarised per setting (medians over rounds, ratios per
round then the median), the README table, the full table, ours' profiler stages, the goals met or
not (``python -m tools.bench``; the StreamLoader rows' report is in ``tools/bench_loader.py``).
"""

from __future__ import annotations

from typing import Any

from tools.bench_common import fmt, median
from tools.bench_datasets import DATASETS, DatasetFacts
from tools.bench_limit import LIMITS, best_limit

__all__ = ["format_all", "full_table", "goals", "readme_table", "stage_table", "summarize"]


def summarize(trials: list[dict], facts: dict[str, DatasetFacts], ours: str | None) -> list[dict]:
    """One row per setting: per contestant the medians, and per-round ratios ``ours`` (the label of
    the reference contestant) / peer and / limit."""
    limits: dict[tuple[str, int, str], dict] = {
        (t["dataset"], t["round"], t["contestant"]): t for t in trials if t["contestant"].startswith("limit")
    }
    settings = list(
        dict.fromkeys(
            (t["dataset"], t["transport"], t["items"], t["num_workers"], t["mp_context"])
            for t in trials
            if "transport" in t
        )
    )
    rows = []
    for key in settings:
        d, tr, items, nw, ctx = key
        f = facts[d]
        cams = len(f.video_keys)
        mine = [
            t
            for t in trials
            if (t.get("dataset"), t.get("transport"), t.get("items"), t.get("num_workers"), t.get("mp_context")) == key
        ]
        row: dict[str, Any] = {
            "dataset": d,
            "transport": tr,
            "items": items,
            "num_workers": nw,
            "mp_context": ctx,
            "cameras": cams,
            "contestants": {},
        }
        rounds = sorted({t["round"] for t in mine})
        lim = {lab: [limits.get((d, r, lab)) for r in rounds] for lab in LIMITS}
        lim_sps = {
            lab: [x["frames_per_s"] / cams if x and x.get("frames_per_s") else None for x in v]
            for lab, v in lim.items()
        }
        best = [best_limit({lab: limits.get((d, r, lab)) for lab in LIMITS}) for r in rounds]
        lim_sps["best"] = [x / cams if x else None for x in best]
        cpu_frame = median([x.get("cpu_ms_per_frame") for x in lim["limit-1thread"] if x])
        row["limit"] = {
            "samples_per_s": median(lim_sps["best"]),
            "samples_per_s_ffmpeg": median(lim_sps["limit-ffmpeg"]),
            "samples_per_s_cores": median(lim_sps["limit-cores"]),
            "samples_per_s_1thread": median(lim_sps["limit-1thread"]),
            "cpu_ms_per_frame_1thread": cpu_frame,
            "cpu_ms_per_frame_ffmpeg": median([x.get("cpu_ms_per_frame") for x in lim["limit-ffmpeg"] if x]),
        }
        by_c: dict[str, dict[int, dict]] = {}
        for t in mine:
            by_c.setdefault(t["contestant"], {})[t["round"]] = t
        for lab, per_round in by_c.items():
            ok = [t for t in per_round.values() if "error" not in t and "skipped" not in t]
            if not ok:
                bad = next(iter(per_round.values()))
                why = [x for x in str(bad.get("skipped") or bad.get("error")).splitlines() if x.strip()] or ["?"]
                row["contestants"][lab] = {"skipped": why[-1].strip()}  # a worker's error: its last line
                continue
            sps = [t.get("steady_samples_per_s") for t in ok]
            st = [t.get("ours_stats") for t in ok if t.get("ours_stats")]
            st_steady = [t.get("ours_stats_steady") or t.get("ours_stats") for t in ok if t.get("ours_stats")]
            if lab == ours or lab.startswith("ours"):
                dpr = median([s.get("frames_decoded_per_returned") for s in st])
            elif lab == "lerobot":
                dpr = f.seek_decoded_per_frame
            else:
                dpr = 1.0
            cpu = median([t.get("cpu_ms_per_sample") for t in ok])
            dec = dpr * cams * cpu_frame if dpr is not None and cpu_frame is not None else None
            if lab == "lerobot-streaming":
                dec = None  # it decodes into its shuffle buffer before the first batch: no decode in the steady part
            needed = [t.get("needed_bytes") for t in ok]
            if tr == "http":
                fetched = [t.get("served_bytes") for t in ok]
            else:
                fetched = [t["ours_stats"]["bytes_fetched"] if t.get("ours_stats") else None for t in ok]
            ratio = [a / b for a, b in zip(fetched, needed) if a and b]
            c = {
                "runs": len(ok),
                "steady_samples_per_s": median(sps),
                "spread": (min(x for x in sps if x) / max(x for x in sps if x)) if any(sps) else None,
                "first_batch_s": median([t.get("first_batch_s") for t in ok]),
                "construct_s": median([t.get("construct_s") for t in ok]),
                "download_s": median([t.get("download_s") for t in ok]),
                "cpu_ms_per_sample": cpu,
                "decode_cpu_ms_per_sample": dec,
                "rest_cpu_ms_per_sample": (cpu - dec) if cpu is not None and dec is not None else None,
                "frames_decoded_per_returned": dpr,
                "decoded_per_returned_counted": bool(st),
                "peak_pss_mib": median([t.get("peak_pss_mib") for t in ok]),
                "fetched_over_needed": median(ratio),
                "samples": median([t.get("samples") for t in ok]),
            }
            if st_steady:  # after the warm-up when each process reported twice, else the whole run
                c["stage_ms_per_item"] = {
                    k: median([s["stage_ms_per_item"].get(k) for s in st_steady])
                    for k in st_steady[0]["stage_ms_per_item"]
                }
            c["over_limit"] = median(
                [
                    t.get("steady_samples_per_s") / lim_sps["best"][rounds.index(t["round"])]
                    for t in ok
                    if t.get("steady_samples_per_s") and lim_sps["best"][rounds.index(t["round"])]
                ]
            )
            row["contestants"][lab] = c
        if ours in by_c:
            for lab, per_round in by_c.items():
                if lab == ours or lab not in row["contestants"] or "skipped" in row["contestants"][lab]:
                    continue
                rs = [
                    by_c[ours][r].get("steady_samples_per_s") / per_round[r].get("steady_samples_per_s")
                    for r in per_round
                    if r in by_c[ours]
                    and by_c[ours][r].get("steady_samples_per_s")
                    and per_round[r].get("steady_samples_per_s")
                ]
                fb = [
                    per_round[r].get("first_batch_s") / by_c[ours][r].get("first_batch_s")
                    for r in per_round
                    if r in by_c[ours] and by_c[ours][r].get("first_batch_s") and per_round[r].get("first_batch_s")
                ]
                row["contestants"][lab]["ours_over_this"] = median(rs)
                row["contestants"][lab]["this_first_over_ours_first"] = median(fb)
        rows.append(row)
    return rows


def _setting(r: dict) -> str:
    return f"{r['num_workers']}" + (f" ({r['mp_context']})" if r["mp_context"] else "")


def readme_table(rows: list[dict], ours: str = "ours") -> str:
    """The README table: one line per setting."""
    head = (
        "| data | store | items | workers | ours samples/s | LeRobot map-style | LeRobot streaming | "
        "ours ÷ map-style | ours ÷ decode limit | first batch s: ours / map / streaming | "
        "CPU ms/sample: ours (decode + rest) / map-style | decoded per returned: ours / map | "
        "peak PSS MiB: ours / map / streaming | fetched ÷ needed: ours / map |"
    )
    lines = [head, "|" + "---|" * 4 + "---:|" * 10]
    for r in rows:
        c = r["contestants"]
        o, m, s = c.get(ours, {}), c.get("lerobot", {}), c.get("lerobot-streaming", {})

        def sps(x):
            return "n/a" if "skipped" in x else fmt(x.get("steady_samples_per_s"))

        label = DATASETS[r["dataset"]][0] if r["dataset"] in DATASETS else r["dataset"]
        store = "local" if r["transport"] == "local" else "remote"
        lines.append(
            f"| {label} | {store} | {r['items']} | {_setting(r)} | {sps(o)} | {sps(m)} | {sps(s)} | "
            f"{fmt(m.get('ours_over_this'), '.2f')} | {fmt(o.get('over_limit'), '.2f')} | "
            f"{fmt(o.get('first_batch_s'), '.2f')} / {fmt(m.get('first_batch_s'), '.2f')} / {fmt(s.get('first_batch_s'), '.2f')} | "
            f"{fmt(o.get('cpu_ms_per_sample'), '.1f')} ({fmt(o.get('decode_cpu_ms_per_sample'), '.1f')} + "
            f"{fmt(o.get('rest_cpu_ms_per_sample'), '.1f')}) / {fmt(m.get('cpu_ms_per_sample'), '.1f')} | "
            f"{fmt(o.get('frames_decoded_per_returned'), '.2f')} / {fmt(m.get('frames_decoded_per_returned'), '.2f')} | "
            f"{fmt(o.get('peak_pss_mib'))} / {fmt(m.get('peak_pss_mib'))} / {fmt(s.get('peak_pss_mib'))} | "
            f"{fmt(o.get('fetched_over_needed'), '.2f')} / {fmt(m.get('fetched_over_needed'), '.2f')} |"
        )
    return "\n".join(lines)


def full_table(rows: list[dict]) -> str:
    """Every contestant of every setting, with the decode limit of the same rounds."""
    lines = [
        "| data | store | items | workers | contestant | runs | steady samples/s (spread) | ours ÷ this | "
        "÷ decode limit | first batch s (download) | CPU ms/sample (decode + rest) | decoded/returned | "
        "peak PSS MiB | fetched ÷ needed |",
        "|" + "---|" * 5 + "---:|" * 9,
    ]
    for r in rows:
        lim = r["limit"]
        lines.append(
            f"| {r['dataset']} | {r['transport']} | {r['items']} | {_setting(r)} | decode limit (best; FFmpeg threads / one decoder per core / 1 thread) | "
            f"{r['cameras']} cam | {fmt(lim['samples_per_s'])}; {fmt(lim.get('samples_per_s_ffmpeg'))} / "
            f"{fmt(lim.get('samples_per_s_cores'))} / {fmt(lim['samples_per_s_1thread'])} | | | | "
            f"{fmt(lim['cpu_ms_per_frame_1thread'], '.2f')} ms/frame (1 thread) | 1.00 | | |"
        )
        for lab, c in r["contestants"].items():
            if "skipped" in c:
                lines.append(f"| | | | | {lab} | 0 | {c['skipped']} | | | | | | | |")
                continue
            dl = f" ({fmt(c['download_s'], '.2f')})" if c.get("download_s") is not None else ""
            model = "" if c.get("decoded_per_returned_counted") or lab.startswith("ours") else " (model)"
            lines.append(
                f"| | | | | {lab} | {c['runs']} | {fmt(c['steady_samples_per_s'])} ({fmt(c['spread'], '.2f')}) | "
                f"{fmt(c.get('ours_over_this'), '.2f')} | {fmt(c.get('over_limit'), '.2f')} | "
                f"{fmt(c['first_batch_s'], '.2f')}{dl} | {fmt(c['cpu_ms_per_sample'], '.1f')} "
                f"({fmt(c['decode_cpu_ms_per_sample'], '.1f')} + {fmt(c['rest_cpu_ms_per_sample'], '.1f')}) | "
                f"{fmt(c['frames_decoded_per_returned'], '.2f')}{model} | {fmt(c['peak_pss_mib'])} | "
                f"{fmt(c['fetched_over_needed'], '.2f')} |"
            )
    return "\n".join(lines)


def stage_table(rows: list[dict], ours: str = "ours") -> str:
    """Ours' profiler stages per item (ms, wall time summed over threads and workers)."""
    stages = ("spans", "parquet", "fetch", "synthesize", "open", "decode", "assemble", "queue_wait", "decode_job")
    lines = [
        "| data | store | items | workers | " + " | ".join(stages) + " |",
        "|" + "---|" * 4 + "---:|" * len(stages),
    ]
    for r in rows:
        for lab, c in r["contestants"].items():
            if not lab.startswith("ours") or "stage_ms_per_item" not in c:
                continue
            s = c["stage_ms_per_item"]
            name = r["dataset"] + ("" if lab == ours else f" [{lab}]")
            lines.append(
                f"| {name} | {r['transport']} | {r['items']} | {_setting(r)} | "
                + " | ".join(fmt(s.get(k), ".2f") for k in stages)
                + " |"
            )
    return "\n".join(lines)


def goals(rows: list[dict], ours: str = "ours") -> list[tuple[str, str, str]]:
    """The performance goals on this machine (uint8 items): (goal, measured, "met" | "not met" | "not measured")."""

    def find(d, tr="local", items="uint8", nw=None, ctx=None):
        return [
            r
            for r in rows
            if r["dataset"] == d
            and r["transport"] == tr
            and r["items"] == items
            and (nw is None or r["num_workers"] == nw)
            and (ctx is None or r["mp_context"] == ctx)
        ]

    def c(r, lab):
        return r["contestants"].get(lab, {})

    out = []

    def add(goal, vals, ok):
        if not vals:
            out.append((goal, "–", "not measured"))
        else:
            out.append((goal, "; ".join(vals), "met" if ok else "not met"))

    for nw in (0, 2):
        rs = find("g1", nw=nw)
        vals = [f"{_setting(r)}: {fmt(c(r, ours).get('over_limit'), '.2f')}x" for r in rs]
        add(
            f"≥ 0.8x the raw decode limit, real AV1 g=2, uint8, {nw} workers",
            vals,
            rs and all((c(r, ours).get("over_limit") or 0) >= 0.8 for r in rs),
        )
    for nw, want in ((2, 2.0), (0, 3.0)):
        rs = find("g1", nw=nw)
        vals = [f"{_setting(r)}: {fmt(c(r, 'lerobot').get('ours_over_this'), '.2f')}x" for r in rs]
        add(
            f"≥ {want:.0f}x LeRobot 0.6.1 map-style, real AV1 g=2, uint8, {nw} workers",
            vals,
            rs and all((c(r, "lerobot").get("ours_over_this") or 0) >= want for r in rs),
        )
    vals, ok = [], True
    for d in dict.fromkeys(r["dataset"] for r in rows):
        for tr in ("local", "http"):
            for items in ("uint8", "float32"):
                z = find(d, tr, items, 0)
                for r in find(d, tr, items, 2):
                    if z and c(z[0], ours).get("steady_samples_per_s") and c(r, ours).get("steady_samples_per_s"):
                        q = c(r, ours)["steady_samples_per_s"] / c(z[0], ours)["steady_samples_per_s"]
                        vals.append(f"{d} {tr} {items} {_setting(r)}: {q:.2f}x")
                        ok = ok and q >= 1.0
    add("2 workers never slower than 0 (ours, 2 workers ÷ 0 workers)", vals, ok)
    rs = find("g1-h264")
    vals = [f"{_setting(r)}: {fmt(c(r, 'lerobot').get('ours_over_this'), '.2f')}x" for r in rs]
    add(
        "≥ 4x LeRobot map-style on long-GOP H.264",
        vals,
        rs and all((c(r, "lerobot").get("ours_over_this") or 0) >= 4 for r in rs),
    )
    rs = [r for r in rows if r["transport"] == "local" and r["num_workers"] == 2]
    vals = [
        f"{r['dataset']} {r['items']} {_setting(r)}: {fmt(c(r, ours).get('first_batch_s'), '.2f')} vs "
        f"{fmt(c(r, 'lerobot').get('first_batch_s'), '.2f')} s"
        for r in rs
        if c(r, "lerobot").get("first_batch_s")
    ]
    add(
        "first batch no slower than map-style's (warm sidecar), fork and spawn",
        vals,
        all(
            (c(r, ours).get("first_batch_s") or 1e9) <= c(r, "lerobot")["first_batch_s"]
            for r in rs
            if c(r, "lerobot").get("first_batch_s")
        )
        and bool(vals),
    )
    vals, ok, fb_ok, fb_vals = [], True, True, []
    for r in [r for r in rows if r["transport"] == "http"]:
        loc = find(r["dataset"], "local", r["items"], r["num_workers"], r["mp_context"])
        o = c(r, ours)
        if loc and o.get("steady_samples_per_s") and c(loc[0], ours).get("steady_samples_per_s"):
            q = o["steady_samples_per_s"] / c(loc[0], ours)["steady_samples_per_s"]
            vals.append(f"{r['dataset']} {_setting(r)}: {q:.2f}x")
            ok = ok and q >= 0.9
        if o.get("first_batch_s") is not None:
            fb_vals.append(
                f"{r['dataset']} {_setting(r)}: {o['first_batch_s']:.2f} s (map-style "
                f"{fmt(c(r, 'lerobot').get('first_batch_s'), '.2f')} s incl. download)"
            )
            fb_ok = fb_ok and o["first_batch_s"] <= 2.0
    add("remote store: steady ≥ 0.9x our local figure", vals, ok)
    add("remote store: first batch within 2 s", fb_vals, fb_ok)
    return out


def format_all(rows: list[dict], meta: dict, ours: str = "ours", *, for_docs: bool = False) -> str:
    """The run's tables; ``for_docs`` (the ``--markdown`` file, for docs/performance.md): without
    the run's date, commit and goals, which stay in the terminal text and the JSON."""
    load = meta.get("load") or {}
    when = "" if for_docs else f" {meta['date']} at {meta.get('git') or '?'}"
    parts = [
        f"Measured{when} on {meta['cpus']} CPU(s), {meta['rounds']} "
        f"interleaved round(s), batch {meta['batch_size']}, load average during the run "
        f"{fmt(load.get('min'), '.1f')}-{fmt(load.get('max'), '.1f')} (median {fmt(load.get('median'), '.1f')}); "
        f"{meta['minutes']:.1f} min in all. Remote store: {meta['remote']['latency_ms']:.0f} ms round trip, "
        f"{meta['remote']['bandwidth_mbit']:.0f} Mbit/s.",
        "",
        f"`{meta['command']}`",
        "",
        readme_table(rows, ours),
    ]
    if not for_docs:
        parts += ["", "Goals:", ""] + [f"- {g}: **{v}** — {m}" for g, m, v in goals(rows, ours)]
    parts += [
        "",
        "Every contestant, with the decode limit of the same rounds (spread = slowest ÷ fastest round):",
        "",
        full_table(rows),
        "",
        "Ours' profiler stages, ms per item (wall time summed over threads and workers):",
        "",
        stage_table(rows, ours),
    ]
    for n in meta.get("setup", {}).get("notes", []):
        parts.append(f"\nnote: {n}")
    return "\n".join(parts)
