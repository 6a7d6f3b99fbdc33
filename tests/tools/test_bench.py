"""Smoke runs of the benchmarks in ``tools/`` on tiny inputs, so they keep working (no timing asserted:
performance is measured by running them, see docs/performance.md): the decode level
(``python -m tools.microbench decode``) and the peer benchmark (``python -m tools.bench``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_decode_smoke(capsys):
    from tools.microbench import decode as bench_decode

    assert (
        bench_decode.main(
            [
                "--size",
                "64x48",
                "--episodes",
                "2",
                "--length",
                "6",
                "--repeats",
                "1",
                "--random",
                "5",
                "--lookahead",
                "3",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "random planned (a')/(b)" in out and "sequential (a)/(c)" in out


@pytest.mark.slow
def test_bench_decode_real_file_smoke(capsys):
    from tools.microbench import decode as bench_decode

    mp4 = ROOT / "data" / "g1_v30" / "videos" / "observation.images.cam_high" / "chunk-000" / "file-000.mp4"
    assert bench_decode.main(["--mp4", str(mp4), "--episodes", "2", "--repeats", "1", "--random", "4"]) == 0
    assert "file-000.mp4, 2 episodes x 368 frames" in capsys.readouterr().out


@pytest.mark.slow
def test_bench_quick_smoke(tmp_path):
    """The peer benchmark end to end on the tiny dataset: local disk and the throttled loopback store,
    ours and a variant of ours (a dataset option) interleaved, the decode limit (LeRobot's contestants
    are not asked for: they need .venv-lerobot)."""
    from tools import bench

    js, md = tmp_path / "b.json", tmp_path / "b.md"
    assert (
        bench.main(
            [
                "--quick",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--json",
                str(js),
                "--markdown",
                str(md),
                "--latency-ms",
                "5",
                "--contestants",
                "ours,ours+decode_threads=1",
            ]
        )
        == 0
    )
    out = json.loads(js.read_text())
    rows = {(r["transport"], r["num_workers"]): r for r in out["summary"]}
    assert set(rows) == {("local", 0), ("http", 0)}
    for r in rows.values():
        ours = r["contestants"]["ours"]
        assert ours["runs"] == 1 and ours["steady_samples_per_s"] > 0 and ours["cpu_ms_per_sample"] >= 0
        assert ours["frames_decoded_per_returned"] >= 1.0 and ours["peak_pss_mib"] > 0
        assert r["limit"]["samples_per_s"] > 0 and r["limit"]["cpu_ms_per_frame_1thread"] >= 0  # 10 ms CPU ticks
        assert ours["over_limit"] > 0 and r["contestants"]["ours+decode_threads=1"]["ours_over_this"] > 0
    assert rows[("http", 0)]["contestants"]["ours"]["fetched_over_needed"] > 0  # the store's served bytes
    trials = [t for t in out["trials"] if t["contestant"].startswith("ours")]
    assert len(trials) == 4 and all(t["samples"] == 24 and "error" not in t for t in trials)
    text = md.read_text()
    assert "| data | store |" in text and out["meta"]["command"] in text
    # the markdown is for docs/performance.md: no goals, run date or commit (the JSON keeps them)
    assert "Goals:" not in text and out["meta"]["date"] not in text and "Measured on " in text


@pytest.mark.slow
def test_bench_spawn_worker(tmp_path):
    """A spawn DataLoader worker runs ours: the stats side channel pickles, its counters come back."""
    from tools import bench

    js = tmp_path / "b.json"
    assert (
        bench.main(
            [
                "--quick",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--json",
                str(js),
                "--transports",
                "local",
                "--workers",
                "1:spawn",
                "--no-limit",
            ]
        )
        == 0
    )
    (row,) = json.loads(js.read_text())["summary"]
    assert row["num_workers"] == 1 and row["mp_context"] == "spawn"
    ours = row["contestants"]["ours"]
    assert ours["runs"] == 1 and ours["frames_decoded_per_returned"] >= 1.0 and ours["stage_ms_per_item"]["decode"] >= 0


def test_bench_parse_contestant():
    from tools import bench
    from tools.bench_contestants import parse_contestant

    assert parse_contestant("ours") == ("ours", "ours", None, {})
    assert parse_contestant("ours@/tmp/x+decode_threads=1+env.A=b") == (
        "ours@/tmp/x+decode_threads=1+env.A=b",
        "ours",
        "/tmp/x",
        {"decode_threads": 1, "env.A": "b"},
    )
    assert bench.parse_workers("0,2:spawn,2:fork,1") == [(0, None), (2, "spawn"), (2, "fork"), (1, "spawn")]


def test_bench_copy_cameras(tmp_path):
    from lerobotstream.meta import DatasetMeta
    from tools.bench_datasets import copy_cameras

    root = copy_cameras(ROOT / "data" / "g1_v30", tmp_path / "ds", 3)
    meta = DatasetMeta.load(str(root))
    assert list(meta.video_keys) == [
        "observation.images.cam_high",
        "observation.images.cam_high_copy1",
        "observation.images.cam_high_copy2",
    ]
    ep = meta.episode(1)
    assert (
        ep.videos["observation.images.cam_high_copy2"].from_timestamp
        == ep.videos["observation.images.cam_high"].from_timestamp
    )


def test_bench_transcode_h264(make_generated_dataset, tmp_path):
    """The long-GOP variant: every video re-encoded as H.264 with the GOP asked for, same frames."""
    import shutil

    from lerobotstream.mp4.parse import parse_mp4_bytes
    from tools.bench_datasets import transcode_h264

    src = make_generated_dataset(episode_lengths=(9, 7), codec="av1", cameras=(("observation.images.c", 64, 48),))
    root = tmp_path / "ds"
    shutil.copytree(src, root)
    transcode_h264(root, 8)
    for mp4 in root.joinpath("videos").rglob("*.mp4"):
        t = parse_mp4_bytes(mp4.read_bytes(), path=str(mp4))
        assert t.codec == "avc1" and len(t.size) == 16 and int(sum(t.is_sync)) == 2  # GOP 8 over 16 frames
    assert parse_mp4_bytes(next(src.joinpath("videos").rglob("*.mp4")).read_bytes()).codec == "av01"  # source kept


@pytest.mark.slow
def test_bench_mixture_smoke(tmp_path):
    """A mixture (StreamingMultiLeRobotDataset over two generated datasets) through the peer
    benchmark, on local disk and the loopback store; LeRobot's contestants would be skipped."""
    from tools import bench

    js = tmp_path / "b.json"
    assert (
        bench.main(
            [
                "--quick",
                "--datasets",
                "tiny-mix",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--json",
                str(js),
                "--latency-ms",
                "5",
            ]
        )
        == 0
    )
    out = json.loads(js.read_text())
    rows = {(r["transport"], r["num_workers"]): r for r in out["summary"]}
    assert set(rows) == {("local", 0), ("http", 0)}
    for r in rows.values():
        ours = r["contestants"]["ours"]
        assert ours["steady_samples_per_s"] > 0 and r["limit"]["samples_per_s"] > 0
    trials = [t for t in out["trials"] if t["contestant"] == "ours"]
    assert all(t["samples"] == 24 and "error" not in t and t["needed_bytes"] > 0 for t in trials)


def test_microbench_runs_each_subcommand_by_name(capsys):
    """``python -m tools.microbench SUBCOMMAND ...`` reaches that subcommand's ``main`` (the planner's,
    tiny); an unknown one is refused with the list and exit status 2."""
    from tools import microbench

    assert set(microbench.SUBCOMMANDS) == {"decode", "first-batch", "index", "parse", "planner", "validate"}
    assert microbench.main(["planner", "--frames", "2000", "--episodes", "20", "--batch", "256", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "dataset: 20 episodes" in out and "round_robin" in out
    assert microbench.main(["nope"]) == 2
    assert "unknown subcommand 'nope'" in capsys.readouterr().err


def test_microbench_lists_name_every_subcommand():
    """docs/testing.md's row and ``tools/microbench/__main__.py``'s docstring list the subcommands the
    tool has, in its order."""
    from tools import microbench

    listed = "python -m tools.microbench {" + ",".join(microbench.SUBCOMMANDS) + "}"
    assert listed in (ROOT / "docs" / "testing.md").read_text()
    assert listed in (ROOT / "tools" / "microbench" / "__main__.py").read_text()
