"""Smoke runs of the benchmarks in ``tools/`` on tiny inputs, so they keep working (no timing asserted:
performance is measured by running them, see docs/performance.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def test_bench_decode_smoke(capsys):
    from tools import bench_decode

    assert bench_decode.main(["--size", "64x48", "--episodes", "2", "--length", "6", "--repeats", "1",
                              "--random", "5", "--lookahead", "3"]) == 0
    out = capsys.readouterr().out
    assert "random planned (a')/(b)" in out and "sequential (a)/(c)" in out


def test_bench_decode_real_file_smoke(capsys):
    from tools import bench_decode

    mp4 = ROOT / "data" / "g1_v30" / "videos" / "observation.images.cam_high" / "chunk-000" / "file-000.mp4"
    assert bench_decode.main(["--mp4", str(mp4), "--episodes", "2", "--repeats", "1", "--random", "4"]) == 0
    assert "file-000.mp4, 2 episodes x 368 frames" in capsys.readouterr().out


def test_bench_dataset_smoke(tmp_path):
    from tools import bench_dataset

    out = tmp_path / "r.json"
    assert bench_dataset.main(["--size", "64x48", "--episodes", "2", "--length", "6", "--num-workers", "0",
                               "--repeats", "1", "--uint8", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["dataset"].endswith("uint8 items")
    r = res["results"][0]
    assert r["frames_decoded_per_returned"]["ours"] == 1.0
    assert r["ours_stats_per_process"][0]["items"] == 2 * 6  # one epoch: every anchor once


def test_bench_dataset_camera_copies(tmp_path):
    from tools import bench_dataset

    from lerobotstream.meta import DatasetMeta

    root = bench_dataset._copy_cameras(ROOT / "data" / "g1_v30", tmp_path / "ds", 2)
    meta = DatasetMeta.load(str(root))
    assert list(meta.video_keys) == ["observation.images.cam_high", "observation.images.cam_high_copy1"]
    ep = meta.episode(1)
    assert ep.videos["observation.images.cam_high_copy1"].from_timestamp == ep.videos[
        "observation.images.cam_high"].from_timestamp


def test_bench_dataset_real_root_transcoded(make_generated_dataset, tmp_path):
    """--root with --camera-copies and --transcode-h264: the copy decodes as H.264 with long GOPs."""
    from tools import bench_dataset

    from lerobotstream.mp4 import parse_mp4_bytes

    root = make_generated_dataset(episode_lengths=(9, 7), codec="av1", cameras=(("observation.images.c", 64, 48),))
    out = tmp_path / "r.json"
    assert bench_dataset.main(["--root", str(root), "--camera-copies", "2", "--transcode-h264", "8",
                               "--num-workers", "0", "--repeats", "1", "--only", "ours,map_style",
                               "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert "(2 cam, H.264 GOP 8)" in res["dataset"]
    assert res["results"][0]["ours_stats_per_process"][0]["items"] == 16
    assert res["results"][0]["frames_decoded_per_returned"]["map_style"] > 1.0  # long GOPs: seeks re-decode
    assert root.joinpath("videos").exists()  # the source dataset is not modified
    mp4 = next(root.joinpath("videos").rglob("*.mp4"))
    assert parse_mp4_bytes(mp4.read_bytes(), path=str(mp4)).codec == "av01"
