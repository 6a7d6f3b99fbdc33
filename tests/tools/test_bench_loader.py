"""Smoke run of the StreamLoader benchmark (``python -m tools.bench --loader``) on the tiny dataset:
the report's structure (rows, ratios, the steps' columns, the goals), never its timings. LeRobot's
rows are skipped (no ``.venv-lerobot`` given); the GIL rows need py-spy and are reported as not
measured without it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

GOAL_STATUSES = {"met", "not met", "not measured"}


def _args(**kw):
    base = dict(
        rows="dataloader,threads,processes,lerobot,lerobot-streaming",
        datasets="g1,g1-3cam,g1-h264",
        workers="0,1,2,4",
        more_workers="0,2",
        spawn="2",
        steps="none,gil:20,nogil:20",
        py_spy="py-spy",
        gil="0,2",
        account="",
    )
    base.update(kw)
    return argparse.Namespace(**base)


def test_plan_matrix():
    """The first dataset gets every worker count, the steps, the spawn rows and the GIL rows; the
    others their worker counts at step none; LeRobot's rows run at step none only."""
    from tools import bench_loader

    groups = bench_loader.plan(_args(), ["ours"], ["lerobot", "lerobot-streaming"])
    names = {(d, g): {bench_loader.row_label(k, "ours") for k in keys} for d, g, keys in groups}
    assert set(names) == {
        ("g1", "none"),
        ("g1", "gil:20"),
        ("g1", "nogil:20"),
        ("g1", "gil"),
        ("g1-3cam", "none"),
        ("g1-h264", "none"),
    }
    assert names[("g1", "none")] == {
        "dataloader/0",
        "dataloader/1",
        "dataloader/2",
        "dataloader/4",
        "dataloader/2:spawn",
        "threads/0",
        "threads/1",
        "threads/2",
        "threads/4",
        "processes/1",
        "processes/2",
        "processes/4",
        "processes/2:spawn",
        "lerobot/0",
        "lerobot/1",
        "lerobot/2",
        "lerobot/4",
        "lerobot/2:spawn",
        "lerobot-streaming/0",
        "lerobot-streaming/1",
        "lerobot-streaming/2",
        "lerobot-streaming/4",
    }
    assert names[("g1", "gil:20")] == {f"{k}/{n}" for k in ("dataloader", "threads") for n in (0, 1, 2, 4)} | {
        "processes/1",
        "processes/2",
        "processes/4",
    }
    assert names[("g1", "gil")] == {"threads/0", "threads/2"}
    assert names[("g1-h264", "none")] == {
        "dataloader/0",
        "dataloader/2",
        "threads/0",
        "threads/2",
        "processes/2",
        "lerobot/0",
        "lerobot/2",
        "lerobot-streaming/0",
        "lerobot-streaming/2",
    }
    acc = bench_loader.plan(_args(datasets="g1,gen96-dp", account="threads/2,dataloader/2"), ["ours"], [])
    acc = {d: keys for d, g, keys in acc if g == "account"}
    assert set(acc) == {"g1", "gen96-dp"}  # every dataset gets the accounting
    assert [(k["row"], k["num_workers"], k["mp_context"], k["accounted"]) for k in acc["gen96-dp"]] == [
        ("threads", 2, None, True),
        ("dataloader", 2, "fork", True),
    ]
    two = bench_loader.plan(_args(datasets="g1", steps="none", spawn="", py_spy=None), ["ours", "ours@/x"], [])
    assert {bench_loader.row_label(k, "ours") for _, _, keys in two for k in keys} >= {
        "threads/2",
        "threads/2 [ours@/x]",
    }


@pytest.mark.slow
def test_bench_loader_smoke(tmp_path):
    from tools import bench_loader

    js, md = tmp_path / "b.json", tmp_path / "b.md"
    assert (
        bench_loader.main(
            [
                "--datasets",
                "tiny",
                "--workers",
                "0,1",
                "--more-workers",
                "0",
                "--spawn",
                "",
                "--steps",
                "none,gil:1",
                "--rounds",
                "1",
                "--samples",
                "16",
                "--contestants",
                f"ours,ours@{ROOT}",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--json",
                str(js),
                "--markdown",
                str(md),
                "--lerobot-python",
                str(tmp_path / "no-venv" / "python"),
                "--no-alloc",
                "--account",
                "threads/1,dataloader/1",
                "--account-seconds",
                "0.5",
                "--account-warm-samples",
                "0",
            ]
        )
        == 0
    )
    out = json.loads(js.read_text())
    other = f"ours@{ROOT}"
    accounted = {e["row"]: e for e in out["summary"] if e["step"] == "account" and e.get("contestant") == "ours"}
    assert set(accounted) == {"threads/1 (accounted)", "dataloader/1 (accounted)"}
    for e in accounted.values():
        acc = e["account"]
        assert set(acc["rows"]) >= {
            "fetch",
            "span_synth",
            "ffmpeg_decode",
            "colour_conversion",
            "frame_copy",
            "batch_assembly",
            "pipeline_python",
            "hand_offs",
            "page_faults",
            "unattributed",
            "others",
            "idle",
            "bench",
        }
        assert acc["whole_cpu_s"] > 0 and acc["sum_share"] is not None and acc["runs"] == 1
    rows = {(e["step"], e["row"]): e for e in out["summary"] if e.get("contestant") != other and e["step"] != "account"}
    ours = {f"{k}/{n}" for k in ("dataloader", "threads") for n in (0, 1)} | {"processes/1"}
    assert {r for s, r in rows if s == "none"} == ours | {"decode limit"}
    assert {r for s, r in rows if s == "gil:1"} == ours
    theirs = {
        (e["step"], e["row"]): e for e in out["summary"] if e.get("contestant") == other and e["step"] != "account"
    }
    assert set(theirs) == {(s, f"{r} [{other}]") for s in ("none", "gil:1") for r in ours}
    assert all(e["x_ours"] > 0 for e in theirs.values())
    for (step, name), e in rows.items():
        if name == "decode limit":
            assert e["steady_samples_per_s"] > 0 and e["limit_cores_samples_per_s"] > 0
            assert e["limit_ffmpeg_samples_per_s"] > 0 and e["cpu_ms_per_frame_1thread"] is not None
            continue
        assert e["runs"] == 1 and "skipped" not in e, e
        for k in (
            "steady_samples_per_s",
            "over_limit",
            "first_batch_s",
            "cpu_ms_per_sample",
            "peak_rss_mib",
            "peak_pss_mib",
            "steps_per_s",
            "wait_share",
        ):
            assert e[k] is not None and e[k] >= 0, (name, k)
        assert e["peak_pss_mib"] > 0
        if e["kind"] != "dataloader":
            assert e["x_dataloader"] > 0
        if step != "none":
            assert e["step_s"] > 0 and e["step_alone_s"] > 0 and "step_slowdown" in e
    assert rows[("none", "processes/1")]["x_threads"] > 0
    assert rows[("none", "dataloader/1")]["frames_decoded_per_returned_counted"] >= 1.0
    notes = " ".join(out["meta"]["notes"])
    assert "lerobot: skipped" in notes and "GIL-held time: not measured" in notes
    assert out["meta"]["auto"]["0"] == "threads"
    goals = out["goals"]
    assert len(goals) >= 10 and all(g["status"] in GOAL_STATUSES for g in goals)
    assert any("GIL-held" in g["goal"] and g["status"] == "not measured" for g in goals)
    text = md.read_text()
    assert "| row | samples/s" in text and out["meta"]["command"] in text
    assert "The README table" in text and "Another checkout beside ours" in text
    assert "CPU accounting" in text and "| idle cores |" in text
    # the markdown is for docs/performance.md: no goals, run date or commit (the JSON keeps them)
    assert "Goals" not in text and out["meta"]["date"] not in text and "Measured on " in text
    assert all(g["status"] in GOAL_STATUSES for g in out["goals_36"]) and len(out["goals_36"]) == 9
