"""``lerobotstream.validate``: every planted defect reported once, where it is, in one run; no
error on clean data (every codec the generator makes, the bundled G1 data); the CLI's exit
statuses and JSON; the checks are the construction's own (the same messages)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerobotstream.errors import MetadataError, SidecarValidationError
from lerobotstream.validate import validate_dataset
from lerobotstream.validate.__main__ import main as validate_main
from lerobotstream.validate.__main__ import parse_episodes
from lerobotstream.validate._findings import CODES

REPO = Path(__file__).resolve().parents[2]
G1 = REPO / "data" / "g1_v30"
CAM = "observation.images.front"
SHARD = "meta/episodes/chunk-000/file-000.parquet"


def _copy(src: Path, tmp_path: Path, name: str = "ds") -> Path:
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def _edit_episodes(root: Path, edit) -> None:
    """Rewrite the first episodes shard: ``edit(dict of columns) -> dict of columns``."""
    path = root / SHARD
    table = pq.read_table(path)
    cols = {c: table.column(c).to_pylist() for c in table.column_names}
    cols = edit(cols)
    pq.write_table(pa.table({c: pa.array(v, table.schema.field(c).type) for c, v in cols.items()}), path)


def _edit_json(path: Path, edit) -> None:
    obj = json.loads(path.read_text())
    edit(obj)
    path.write_text(json.dumps(obj))


def _codes(report) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in report.findings:
        out.setdefault(f.code, []).append(f)
    return out


def _errors(report) -> list:
    return [f"{f.code}: {f.message}" for f in report.errors]


# --- clean data: no error finding (false positives are defects too) ------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(codec="av1"),
        dict(codec="h264", cameras=((CAM, 64, 48),)),
        dict(codec="hevc", cameras=((CAM, 64, 48),), faststart=True),
        dict(codec="h264", cameras=((CAM, 64, 48),), depth_cameras=(("observation.images.depth", 64, 48),)),
    ],
    ids=["av1", "h264-bframes", "hevc-faststart", "depth"],
)
def test_clean_generated_datasets_have_no_error(make_generated_dataset, kwargs):
    root = make_generated_dataset(episode_lengths=(12, 9, 7), episodes_per_video_file=2, **kwargs)
    report = validate_dataset(root=root)
    assert report.ok, _errors(report)
    assert {f.code for f in report.warnings} <= {"not_faststart"}
    cam = report.cameras[CAM]
    assert cam["files"] == 2 and cam["frames"] == 28 and cam["resolution"] == ["64x48"]
    assert cam["codec"] == [{"av1": "av1", "h264": "h264", "hevc": "hevc"}[kwargs["codec"]]]
    assert cam["pix_fmt"] == ["yuv420p"]
    assert cam["max_timestamp_error_s"] < 1e-9 and cam["bytes_per_frame"] > 0
    if kwargs["codec"] == "h264":
        assert cam["b_frames"] == 2  # x264 -bf 2: presentation order differs from decode order
    if kwargs.get("faststart"):
        assert cam["faststart"] == 2 and "not_faststart" not in _codes(report)
    if kwargs["codec"] == "av1":  # Turing/GA100/Hopper NVDEC has no AV1
        assert cam["nvdec"]["A100"] == cam["nvdec"]["H100/H200"] == "cpu"
        assert cam["nvdec"]["A10/L4/L40/RTX 30-40"] == "nvdec"
    if kwargs.get("depth_cameras"):
        depth = report.cameras["observation.images.depth"]
        assert depth["depth_map"] and depth["pix_fmt"] == ["gray12le"] and depth["codec"] == ["hevc"]
        assert set(depth["nvdec"].values()) == {"cpu"}


def test_bundled_g1_data_has_no_error():
    report = validate_dataset(root=G1)
    assert report.ok, _errors(report)
    cam = report.cameras["observation.images.cam_high"]
    assert cam["codec"] == ["av1"] and cam["resolution"] == ["640x480"] and cam["frames"] == 736
    assert report.scan["video_files"] == 1 and report.scan["data_files"] == 1
    video = sum(p.stat().st_size for p in (G1 / "videos").rglob("*.mp4"))
    assert 0 < report.scan["bytes_read"] < video / 4  # headers, not the payload


# --- planted defects, several at once ------------------------------------------------------------
@pytest.fixture
def broken(make_generated_dataset, tmp_path):
    """Seven one-episode files per camera, six of them broken differently."""
    root = _copy(
        make_generated_dataset(episode_lengths=(10,) * 7, episodes_per_video_file=1, episodes_per_data_file=1), tmp_path
    )
    fps = 30.0

    def edit(cols):
        k = f"videos/{CAM}/from_timestamp"
        cols[k][1] += 1 / fps  # ep 1: window runs one frame past its file's end
        cols[k][4] += 0.5 / fps  # ep 4: from_timestamp between two frames
        cols["dataset_from_index"][6] += 1000  # ep 6: global index range moved off the data file's
        cols["dataset_to_index"][6] += 1000
        return cols

    _edit_episodes(root, edit)
    (root / f"videos/{CAM}/chunk-000/file-002.mp4").unlink()  # ep 2: file missing
    mp4 = root / f"videos/{CAM}/chunk-000/file-003.mp4"  # ep 3: truncated
    mp4.write_bytes(mp4.read_bytes()[: mp4.stat().st_size * 2 // 3])
    data5 = root / "data/chunk-000/file-005.parquet"  # ep 5: a row lost
    table = pq.read_table(data5)
    pq.write_table(table.slice(0, table.num_rows - 1), data5)
    _edit_json(root / "meta/stats.json", lambda s: s["observation.state"].update(min=[0.0] * 5))
    return root


@pytest.mark.parametrize("headers_only", [False, True], ids=["rows", "headers-only"])
def test_every_planted_defect_in_one_run(broken, headers_only):
    """The same findings with and without the per-row columns: the rows name the episode where
    the footers can only name the file."""
    report = validate_dataset(root=broken, headers_only=headers_only)
    codes = _codes(report)
    errors = {(f.code, f.episode_index, f.file) for f in report.errors}
    v = lambda i: f"videos/{CAM}/chunk-000/file-{i:03d}.mp4"  # noqa: E731
    assert ("video_short", 1, v(1)) in errors
    assert ("file_missing", 2, v(2)) in errors
    assert ("video_truncated", 3, v(3)) in errors
    assert ("window_off_frame", 4, v(4)) in errors
    assert ("data_rows", 5, "data/chunk-000/file-005.parquet") in errors  # one row group per episode
    assert ("data_index_range", 6 if not headers_only else None, "data/chunk-000/file-006.parquet") in errors
    assert ("stats_shape", None, "meta/stats.json") in errors
    assert codes["data_index_range"][0].episodes == [6]
    # each defect once, where it is: the missing file once (plus the episodes it takes), nothing
    # else about it; the truncated file once; the clean episodes 0 has nothing
    assert [f.episodes for f in report.findings if f.file == v(2)] == [[2]]
    assert len([f for f in report.findings if f.file == v(3)]) == 1
    assert not [f for f in report.findings if f.episode_index == 0 or f.file == v(0)]
    assert len(report.errors) == 7, [(f.code, f.episode_index, f.file) for f in report.errors]
    assert {f.code for f in report.warnings} <= {"not_faststart", "to_timestamp_mismatch", "index_gap"}
    assert codes["index_gap"][0].episode_index == 6
    for f in report.findings:  # the documented layout
        assert f.severity in ("error", "warning") and f.code in CODES and "\n" not in f.message
        assert "fix:" in f.message


def test_the_dataset_still_raises_the_first_error(broken):
    """Construction keeps raising typed errors: the metadata's first (the missing file)."""
    from lerobotstream.meta import DatasetMeta

    with pytest.raises(MetadataError, match="file-002.mp4 is missing"):
        DatasetMeta.load(broken)


def test_window_findings_are_the_sidecar_builds_own_problems(make_generated_dataset, tmp_path):
    """A shifted episode overlapping its neighbour: the validator's message is the one the
    sidecar build raises (the same check, collected)."""
    from lerobotstream.sidecar._build import build_sidecar
    from lerobotstream.sources._local import LocalSource

    root = _copy(make_generated_dataset(episode_lengths=(8, 9, 7)), tmp_path)

    def edit(cols):
        cols[f"videos/{CAM}/from_timestamp"][1] -= 1 / 30  # ep 1 starts on ep 0's last frame
        return cols

    _edit_episodes(root, edit)
    with pytest.raises(SidecarValidationError) as ei:
        build_sidecar(LocalSource(root), output=tmp_path / "s.npz", repo_id="x/y", progress=False)
    report = validate_dataset(root=root)
    overlap = _codes(report)["episode_overlap"]
    assert [(f.episode_index, f.camera) for f in overlap] == [(0, CAM)]
    assert "episodes 0 and 1 overlap" in overlap[0].message
    for problem in ei.value.problems:
        reason = problem.split(": ", 1)[1] if problem.startswith("episode") else problem
        assert any(reason.split(" — ")[0][:80] in f.message for f in report.errors), problem


def test_a_window_shifted_by_one_frame_is_an_error(make_generated_dataset, tmp_path):
    """LeRobot's silent case: an episode's from_timestamp moved one frame on (to_timestamp left),
    and the next episode moved with its window: no overlap, no frame past the end, yet episode 1
    streams frames that are not its own."""
    root = _copy(make_generated_dataset(episode_lengths=(8, 9, 7, 6)), tmp_path)

    def edit(cols):
        cols[f"videos/{CAM}/from_timestamp"][1] += 1 / 30
        cols[f"videos/{CAM}/from_timestamp"][2] += 1 / 30
        cols[f"videos/{CAM}/to_timestamp"][2] += 1 / 30
        return cols

    _edit_episodes(root, edit)
    report = validate_dataset(root=root)
    codes = _codes(report)
    assert [(f.episode_index, f.camera) for f in codes["window_shift"]] == [(1, CAM)]
    assert codes["window_shift"][0].episodes == [1, 2]  # the run: ep 1 (from alone) and ep 2 (both) moved
    assert "frames [9, 18) instead of [8, 17)" in codes["window_shift"][0].message
    assert [f.episode_index for f in codes["episode_overlap"]] == [2]  # ep 2 moved onto ep 3's first frame
    assert "to_timestamp_mismatch" not in codes  # ep 1's short window is the shift, reported once


@pytest.mark.parametrize(
    "shifted, ends", [((1, 2, 3), "into episode 4's window"), ((3, 4, 5), "past the end of the file")]
)
def test_a_run_of_shifted_episodes_is_one_finding(make_generated_dataset, tmp_path, shifted, ends):
    """Several consecutive episodes moved one frame on (from_timestamp and to_timestamp both): each
    streams its successor's first frame; one finding names the run."""
    root = _copy(make_generated_dataset(episode_lengths=(8, 9, 7, 6, 8, 7)), tmp_path)

    def edit(cols):
        for e in shifted:
            cols[f"videos/{CAM}/from_timestamp"][e] += 1 / 30
            cols[f"videos/{CAM}/to_timestamp"][e] += 1 / 30
        return cols

    _edit_episodes(root, edit)
    report = validate_dataset(root=root)
    shift = _codes(report)["window_shift"]
    assert [(f.episode_index, f.episodes) for f in shift] == [(shifted[0], list(shifted))]
    assert ends in shift[0].message and "unclaimed_frames" not in _codes(report)


def test_metadata_defects_collected(make_generated_dataset, tmp_path):
    """Duplicate episode rows, a length that disagrees with its index range, an fps that does not
    match the videos, a wrong shape and codec in info.json, an unsupported depth encoding."""
    root = _copy(
        make_generated_dataset(
            episode_lengths=(8, 9, 7),
            cameras=((CAM, 64, 48),),
            codec="h264",
            depth_cameras=(("observation.images.depth", 64, 48),),
        ),
        tmp_path,
    )
    shard = pq.read_table(root / SHARD)
    pq.write_table(shard.slice(1, 1), root / "meta/episodes/chunk-000/file-001.parquet")  # ep 1 twice

    def edit(cols):
        cols["dataset_to_index"][2] += 1  # ep 2: length 7 but [from, to) holds 8
        return cols

    _edit_episodes(root, edit)

    def info(obj):
        obj["fps"] = 25
        obj["features"][CAM]["shape"] = [50, 64, 3]
        obj["features"][CAM]["info"]["video.codec"] = "av1"
        obj["features"]["observation.images.depth"]["info"]["video.pix_fmt"] = "gray16le"

    _edit_json(root / "meta/info.json", info)
    report = validate_dataset(root=root)
    codes = _codes(report)
    assert [f.episode_index for f in codes["duplicate_episode"]] == [1]
    assert [f.episode_index for f in codes["index_range"]] == [2]
    assert {f.camera for f in codes["fps_mismatch"]} == {CAM, "observation.images.depth"}
    assert "timestamp_drift" not in codes  # the windows drift because of the fps: said once, in its finding
    assert all(f.episodes == [0, 1, 2] for f in codes["fps_mismatch"])
    assert [f.camera for f in codes["shape_mismatch"]] == [CAM]
    assert [f.camera for f in codes["codec_mismatch"]] == [CAM] and codes["codec_mismatch"][0].severity == "warning"
    assert [f.camera for f in codes["depth_unsupported"]] == ["observation.images.depth"]
    assert "pix_fmt_mismatch" in codes  # the depth file is gray12le, info.json says gray16le


# --- the CLI -------------------------------------------------------------------------------------
def test_cli_exit_statuses_and_json(broken, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert validate_main(["--root", str(G1), "--no-progress"]) == 0
    assert validate_main(["--root", str(broken), "--json", str(out), "--no-progress"]) == 1
    text = capsys.readouterr().out
    assert "ERROR   file_missing  (1)" in text and "7 error(s)" in text.splitlines()[-1]
    doc = json.loads(out.read_text())
    assert doc["format"] == 1 and doc["ok"] is False and doc["counts"]["errors"] == 7
    assert set(doc["findings"][0]) == {"severity", "code", "episode_index", "camera", "file", "message", "episodes"}
    assert set(doc["cameras"][CAM]) >= {
        "codec",
        "resolution",
        "pix_fmt",
        "gop_length",
        "b_frames",
        "edit_lists",
        "bytes_per_frame",
        "nvdec",
    }
    assert set(doc["scan"]) >= {"requests", "bytes_read", "elapsed_s"}


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            [],
            "error: StreamingConfigError: give ROOT or --root (a dataset folder or URL) and/or --repo-id (a Hub "
            "dataset); see --help",
        ),
        (
            ["--root", str(G1), "--episodes", "3-x"],
            "error: StreamingConfigError: --episodes: '3-x' is not an episode index "
            "or a range a-b (e.g. --episodes 0-9 20)",
        ),
        (["--root", str(G1), "--episodes", "7"], None),
    ],
)
def test_cli_usage_errors_exit_2(argv, line, capsys):
    assert validate_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    if line is not None:
        assert err[0] == line


def test_module_runs_and_episode_ranges():
    p = subprocess.run(
        [sys.executable, "-m", "lerobotstream.validate", "--root", str(G1), "--episodes", "0-1", "--quiet"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert p.returncode == 0 and p.stdout.strip() == "0 error(s), 1 warning(s)" and "Traceback" not in p.stderr
    assert parse_episodes(["0-2", "5,7"]) == [range(0, 3), 5, 7] and parse_episodes(None) is None


def test_decode_sample_decodes_frames_of_every_file(make_generated_dataset):
    root = make_generated_dataset(episode_lengths=(12, 9, 7), episodes_per_video_file=2)
    report = validate_dataset(root=root, decode_sample=2)
    assert report.ok, _errors(report)
    assert report.scan["decoded_frames"] == 4


def test_over_loopback_http_with_latency(tmp_path):
    """Over HTTP (50 ms per request): the same findings, headers only."""
    from lerobotstream.testing import LoopbackServer

    shutil.copytree(G1, tmp_path / "g1")
    server = LoopbackServer.start({"static": str(tmp_path), "latency_s": 0.05})
    try:
        report = validate_dataset(root=f"{server.static_url}g1/")
    finally:
        server.close()
    local = validate_dataset(root=G1)
    assert [(f.code, f.file) for f in report.findings] == [(f.code, f.file) for f in local.findings]
    assert report.cameras == local.cameras
    video = sum(p.stat().st_size for p in (G1 / "videos").rglob("*.mp4"))
    assert report.scan["bytes_read"] < video / 4


def test_help_is_plain_text_and_names_the_console_script(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/lerobotstream-validate", "--help"])
    with pytest.raises(SystemExit):
        validate_main()
    text = capsys.readouterr().out
    assert text.startswith("usage: lerobotstream-validate ") and "``" not in text
    for flag in ("--repo-id", "--root", "--revision", "--episodes", "--json", "--decode-sample", "--tolerance-s"):
        assert flag in text
    assert 'lerobotstream-validate = "lerobotstream.validate.__main__:main"' in (REPO / "pyproject.toml").read_text()


def test_into_a_closed_pipe_ends_quietly():
    import os

    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(
            [sys.executable, "-m", "lerobotstream.validate", "--root", str(G1)],
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            timeout=120,
        )
    finally:
        os.close(w)
    assert p.returncode == 141 and p.stderr == ""


def test_every_code_is_documented():
    text = (REPO / "docs" / "validate.md").read_text()
    assert [c for c in CODES if f"| `{c}` | {CODES[c][0]} |" not in text] == []


def test_from_the_hub_by_repo_id_and_revision(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants as hf_constants

    from lerobotstream.testing import LoopbackServer

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)  # loopback only: the endpoint is 127.0.0.1
    shutil.copytree(G1, tmp_path / "g1")
    sha = "2" * 40
    server = LoopbackServer.start(
        {"datasets": {"lerobot/g1": {"refs": {"main": sha}, "commits": {sha: str(tmp_path / "g1")}}}}
    )
    try:
        out = tmp_path / "hub.json"
        assert (
            validate_main(
                [
                    "--repo-id",
                    "lerobot/g1",
                    "--revision",
                    "main",
                    "--endpoint",
                    server.url,
                    "--json",
                    str(out),
                    "--no-progress",
                ]
            )
            == 0
        )
    finally:
        server.close()
    doc = json.loads(out.read_text())
    assert doc["ok"] and doc["dataset"]["revision"] == sha and doc["scan"]["video_files"] == 1
    assert [f["code"] for f in doc["findings"]] == ["not_faststart"]


def test_unsupported_codec_unreadable_file_and_missing_episode(make_generated_dataset, tmp_path):
    """More kinds at once: an MPEG-4 Part 2 file, a file of garbage, an episode row lost."""
    root = _copy(
        make_generated_dataset(
            episode_lengths=(10, 10, 10, 10),
            episodes_per_video_file=1,
            episodes_per_data_file=1,
            codec="h264",
            cameras=((CAM, 64, 48),),
        ),
        tmp_path,
    )
    v = lambda i: root / f"videos/{CAM}/chunk-000/file-{i:03d}.mp4"  # noqa: E731
    subprocess.run(
        [
            "ffmpeg",
            "-hide_banner",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "testsrc=size=64x48:rate=30",
            "-frames:v",
            "10",
            "-c:v",
            "mpeg4",
            str(v(0)),
        ],
        check=True,
    )
    v(1).write_bytes(b"\0" * 5000)
    shard = pq.read_table(root / SHARD)
    pq.write_table(shard.slice(0, 3), root / SHARD)  # episode 3's row lost (info.json says 4 episodes)
    report = validate_dataset(root=root)
    codes = _codes(report)
    assert [(f.file, f.episode_index) for f in codes["codec_unsupported"]] == [(str(v(0).relative_to(root)), 0)]
    assert "'mp4v'" in codes["codec_unsupported"][0].message and "codec_mismatch" not in codes
    assert [(f.file, f.episode_index) for f in codes["video_unreadable"]] == [(str(v(1).relative_to(root)), 1)]
    assert [f.episodes for f in codes["missing_episodes"]] == [[3]]
    assert {f.code for f in report.errors} == {"codec_unsupported", "video_unreadable", "missing_episodes"}, _errors(
        report
    )


def test_pixel_formats_read_from_the_sample_description_agree_with_ffprobe():
    """The stsd reader (av1C / hvcC / avcC, including an avcC without its High-profile extension)
    against ffprobe on every parseable MP4 of data/testmedia and the G1 video."""
    from lerobotstream.mp4.parse import parse_mp4
    from lerobotstream.validate._videos import CODEC_NAMES, stream_format

    checked, seen = 0, {}
    for p in sorted((REPO / "data" / "testmedia").rglob("*.mp4")) + sorted((G1 / "videos").rglob("*.mp4")):
        data = p.read_bytes()
        try:
            table = parse_mp4(lambda o, n, data=data: data[o : o + n], len(data), path=str(p))
        except Exception:  # noqa: BLE001 - the corpus holds files the parser refuses on purpose
            continue
        if str(table.codec) not in CODEC_NAMES:
            continue
        fmt = stream_format(bytes(table.stsd), str(table.codec))
        key = (str(table.codec), fmt.pix_fmt, bytes(table.stsd)[:120])
        if seen.get(key[:2], 0) >= 2 or key in seen:  # two files per outcome keep the test short
            continue
        seen[key[:2]] = seen.get(key[:2], 0) + 1
        seen[key] = 1
        probe = subprocess.run(
            [
                "ffprobe",
                "-v",
                "error",
                "-select_streams",
                "v:0",
                "-show_entries",
                "stream=pix_fmt",
                "-of",
                "json",
                str(p),
            ],
            capture_output=True,
            text=True,
        )
        streams = json.loads(probe.stdout or "{}").get("streams") or [{}]
        if not streams[0].get("pix_fmt"):
            continue
        assert fmt.pix_fmt == streams[0]["pix_fmt"].replace("yuvj", "yuv"), p
        checked += 1
    assert checked >= 6 and {("avc1", "yuv444p"), ("av01", "yuv420p"), ("hev1", "yuv420p")} <= set(seen), seen.keys()


def test_decode_sample_finds_a_damaged_payload_the_headers_hide(make_generated_dataset, tmp_path):
    from lerobotstream.mp4.parse import parse_mp4

    root = _copy(make_generated_dataset(episode_lengths=(12, 9, 7), episodes_per_video_file=2), tmp_path)
    mp4 = root / f"videos/{CAM}/chunk-000/file-001.mp4"
    data = bytearray(mp4.read_bytes())
    table = parse_mp4(lambda o, n: bytes(data[o : o + n]), len(data))
    for off, size in zip(table.offset.tolist(), table.size.tolist()):
        data[off : off + size] = b"\0" * size  # the samples zeroed; every header intact
    mp4.write_bytes(bytes(data))
    assert validate_dataset(root=root).ok  # headers only: nothing to see
    report = validate_dataset(root=root, decode_sample=2)
    assert [(f.code, f.file) for f in report.errors] == [("decode_failed", str(mp4.relative_to(root)))]
    assert report.errors[0].episode_index == 2


def test_a_stats_entry_that_is_not_an_object_is_a_stats_shape_error():
    """Such an entry was skipped without a word; a mixture refuses it (``aggregate_stats``)."""
    from types import SimpleNamespace

    from lerobotstream.validate._tables import stats_findings

    meta = SimpleNamespace(stats={"observation.state": [1, 2]}, features={"observation.state": {"dtype": "float32"}})
    (found,) = stats_findings(meta)
    assert found.code == "stats_shape" and found.severity == "error" and found.file == "meta/stats.json"
    assert "observation.state is a list, not an object of statistics" in found.message
