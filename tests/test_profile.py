"""Profiling tools on a tiny generated dataset: report fields present and consistent.

Runs ``python -m lerobotstream.profile`` (in process, 0 and 2 workers) and ``tools/bench.py --quick``
(local + loopback HTTP, LeRobot peers skipped). No timing assertions: only relations that must
hold whatever the machine's speed.
"""

from __future__ import annotations

import json
import os

import pytest

from lerobotstream.profile import STAGES, read_memory
from lerobotstream.profile.__main__ import main as profile_main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tools.make_dataset import make_dataset

    root = tmp_path_factory.mktemp("prof") / "ds"
    return make_dataset(root, episode_lengths=[12, 16, 10, 14], codec="av1",
                        cameras=(("observation.images.front", 64, 48), ("observation.images.wrist", 64, 48)))


def _check_report(r: dict, *, batch_size: int, steps: int, workers: int) -> None:
    th, la, st, by, me = r["throughput"], r["latency"], r["stages"], r["bytes"], r["memory"]
    assert 0 < th["steps"] <= steps
    assert 0 < th["samples"] <= batch_size * th["steps"]
    assert th["frames"] == 2 * th["samples"]  # two cameras, no windows
    assert th["wall_s"] > 0 and th["samples_per_s"] > 0 and th["frames_per_s"] == pytest.approx(2 * th["samples_per_s"])
    assert 0 < la["first_batch_s"] <= th["wall_s"]
    if th["steps"] > 1:
        assert 0 <= la["batch_wait_p50_ms"] <= la["batch_wait_p95_ms"] <= la["batch_wait_p99_ms"]
    assert set(st["seconds"]) == {name for name, _ in STAGES}
    for name in ("metadata", "sidecar", "fetch", "synthesize", "decoder_open", "decode", "assemble",
                 "transforms", "worker_queue_wait", "main_batch_wait"):
        assert st["seconds"][name] is not None and st["seconds"][name] >= 0, name
    assert st["processes"] == max(1, workers)
    assert st["worker_stage_sum_s"] <= th["wall_s"] * st["threads_bound"] + 1e-6
    assert st["seconds"]["main_batch_wait"] <= th["wall_s"] + 1e-6
    # bytes: what travelled covers what the delivered samples needed
    assert by["needed_frame_bytes"] > 0 and by["span_bytes"] >= by["needed_frame_bytes"]
    assert by["span_payload_bytes"] >= by["span_bytes"]  # every delivered episode's spans were fetched
    assert by["fetched_bytes"] >= by["span_payload_bytes"]
    assert by["fetched_over_needed"] >= 1.0 and by["requests"] >= by["episodes_touched"]
    assert r["decoder"]["opens"] >= 1 and r["decoder"]["fallbacks"] == 0
    assert r["decoder"]["frames_returned"] >= th["frames"]
    if me["available"]:
        roles = {p["role"] for p in me["processes"]}
        assert "main" in roles and len(roles) == 1 + workers
        for p in me["processes"]:
            assert 0 < p["peak_pss_bytes"] <= p["peak_rss_bytes"]
        assert me["peak_pss_sum_bytes"] <= me["peak_rss_sum_bytes"]
    ser = r["cache"]["series"]
    assert len(ser["t_s"]) == th["steps"] and ser["samples"][-1] == th["samples"]
    assert all(res <= resv for res, resv in zip(ser["resident_bytes"], ser["reserved_bytes"]))
    assert max(ser["reserved_bytes"]) <= r["cache"]["byte_budget"]


@pytest.mark.parametrize("workers", [0, 2])
def test_profile_cli_report(tiny, tmp_path, capsys, workers):
    out = tmp_path / "r.json"
    png = tmp_path / "r.png"
    argv = ["--root", str(tiny), "--num-workers", str(workers), "--batch-size", "4", "--steps", "5",
            "--json", str(out)]
    if workers:
        pytest.importorskip("matplotlib")
        argv += ["--plot", str(png)]
    assert profile_main(argv) == 0
    text = capsys.readouterr().out
    for word in ("samples/s", "time to first batch", "p50/p95/p99", "decoder_open", "fetched", "PSS"):
        assert word in text
    r = json.loads(out.read_text())
    _check_report(r, batch_size=4, steps=5, workers=workers)
    if workers:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_read_memory_self():
    m = read_memory(os.getpid())
    if m is None:
        pytest.skip("/proc/<pid>/smaps_rollup unavailable")
    assert 0 < m.pss_bytes <= m.rss_bytes
    assert read_memory(2**22 + 12345) is None


def test_bench_quick(tmp_path, capsys):
    from tools.bench import main as bench_main

    js, png = tmp_path / "b.json", tmp_path / "b.png"
    rc = bench_main(["--quick", "--cache-dir", str(tmp_path / "cache"), "--methods", "ours,mapstyle,lerobot,limit",
                     "--json", str(js), "--png", str(png), "--num-workers", "1"])
    assert rc == 0
    out = json.loads(js.read_text())
    rows = {(r["transport"], r["method"]): r for r in out["summary"]}
    for t in ("local", "http"):
        for m in ("ours", "mapstyle", "limit"):
            assert rows[(t, m)]["steady_frames_per_s"] and rows[(t, m)]["steady_frames_per_s"] > 0, (t, m)
        assert rows[(t, "ours")]["ours_over_this"] == pytest.approx(1.0)
        assert rows[(t, "mapstyle")]["ours_over_this"] > 0
    assert rows[("http", "lerobot")]["skipped"]
    # over HTTP the map-style decoder reads whole files; ours reads spans: both bytes are counted
    assert rows[("http", "ours")]["served_bytes_per_frame"] > 0
    assert rows[("http", "mapstyle")]["served_bytes_per_frame"] > 0
    assert "ours / method" in capsys.readouterr().out


def test_profile_cli_error_is_one_line_exit_2(tmp_path):
    """Bug: ``--root /nonexistent`` printed a raw traceback. One typed line, exit 2; --debug keeps it."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LEROBOTSTREAM_DEBUG"}
    cmd = [sys.executable, "-m", "lerobotstream.profile", "--root", str(tmp_path / "nonexistent"), "--steps", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and lines and lines[-1].startswith("error: ") and "Traceback" not in p.stderr
    p = subprocess.run(cmd + ["--debug"], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode != 0 and "Traceback" in p.stderr
