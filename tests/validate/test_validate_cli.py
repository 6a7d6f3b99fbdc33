"""``lerobotstream-validate`` as a command (issues 35 items 2-4 and 37 item 6): a positional root,
``episodes`` always a list, the good episodes printed for ``--dataset.episodes``, the JSON written
atomically or not at all, bounded ``--episodes``, flags refused with their name before anything is
read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lerobotstream.validate import validate_dataset
from lerobotstream.validate.__main__ import main as validate_main
from tests.validate._defects import PLANTED, copy, set_value, shift_timestamps

REPO = Path(__file__).resolve().parents[2]
G1 = REPO / "data" / "g1_v30"


@pytest.fixture(scope="module")
def two_bad(make_generated_dataset, tmp_path_factory):
    """8 episodes; episode 2's frame_index and episodes 5 and 6's timestamps broken."""
    root = copy(Path(make_generated_dataset(**PLANTED)), tmp_path_factory.mktemp("cli") / "ds")
    set_value(root, 2, 10, "frame_index", -1)
    shift_timestamps(root, 5, 1 / 30)
    shift_timestamps(root, 6, 1 / 30)
    return root


def _err(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_positional_root_and_root_flag(capsys):
    assert validate_main([str(G1), "--quiet", "--no-progress"]) == 0
    assert capsys.readouterr().out.strip() == "0 error(s), 1 warning(s)"
    assert validate_main(["--root", str(G1), str(G1), "--quiet"]) == 0  # the same root twice is fine
    capsys.readouterr()
    assert validate_main([str(G1), "--root", "/elsewhere", "--quiet"]) == 2
    assert _err(capsys).startswith("error: StreamingConfigError: give the dataset once: ROOT")


def test_positional_root_from_the_console(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "lerobotstream.validate", str(G1), "--quiet"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert p.returncode == 0 and p.stdout.strip() == "0 error(s), 1 warning(s)", p.stderr


def test_episodes_is_always_a_list(two_bad, tmp_path):
    out = tmp_path / "r.json"
    assert validate_main([str(two_bad), "--json", str(out), "--quiet"]) == 1
    findings = json.loads(out.read_text())["findings"]
    assert findings and all(isinstance(f["episodes"], list) for f in findings)
    for f in findings:
        if f["episode_index"] is not None:
            assert f["episode_index"] in f["episodes"]
    assert [f["episodes"] for f in findings if f["code"] == "not_faststart"] == [[]]
    assert {f["code"]: f["episodes"] for f in findings if f["severity"] == "error"} == {
        "data_frame_index": [2],
        "timestamp_shift": [5, 6],
    }


def test_single_episode_findings_list_their_episode(make_generated_dataset, tmp_path):
    """window_shift of one episode and episode_overlap were the findings with ``null`` episodes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = copy(Path(make_generated_dataset(**PLANTED)), tmp_path / "ds")
    shard = root / "meta/episodes/chunk-000/file-000.parquet"
    t = pq.read_table(shard)
    col = "videos/observation.images.front/from_timestamp"
    v = t.column(col).to_numpy().copy()
    v[1] += 1 / 30  # episode 1's window one frame late: it overlaps episode 2 (window_shift, episode_overlap)
    pq.write_table(t.set_column(t.column_names.index(col), t.schema.field(col), pa.array(v, pa.float64())), shard)
    report = validate_dataset(root=root)
    by_code = {f.code: f.episodes for f in report.errors}
    assert by_code.get("window_shift") == [1] and by_code.get("episode_overlap") == [1, 2], by_code


def test_print_good_episodes(two_bad, capsys):
    assert validate_main([str(two_bad), "--print-good-episodes", "--no-progress"]) == 1
    out = capsys.readouterr()
    assert out.out == "[0,1,3,4,7]\n" and out.err == ""
    assert validate_dataset(root=two_bad).good_episodes() == [0, 1, 3, 4, 7]


def test_the_documented_one_liner_prints_the_same_list(two_bad, tmp_path):
    """docs/validate.md's jq one-liner over the JSON report gives what --print-good-episodes gives."""
    import shutil

    doc = (REPO / "docs" / "validate.md").read_text()
    assert (
        "jq -c '[range(.dataset.total_episodes)] - [.findings[] | select(.severity == \"error\") | .episodes[]]'" in doc
    )
    out = tmp_path / "r.json"
    validate_main([str(two_bad), "--json", str(out), "--quiet"])
    report = json.loads(out.read_text())
    bad = {e for f in report["findings"] if f["severity"] == "error" for e in f["episodes"]}
    assert [e for e in range(report["dataset"]["total_episodes"]) if e not in bad] == [0, 1, 3, 4, 7]
    if shutil.which("jq"):
        p = subprocess.run(
            [
                "jq",
                "-c",
                '[range(.dataset.total_episodes)] - [.findings[] | select(.severity == "error") | .episodes[]]',
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.stdout.strip() == "[0,1,3,4,7]"


def test_errors_that_name_no_episode_are_noted(tmp_path, capsys):
    root = copy(G1, tmp_path / "g1")
    stats = json.loads((root / "meta/stats.json").read_text())
    key = next(k for k, v in stats.items() if isinstance(v, dict) and "min" in v and "max" in v)
    stats[key]["min"], stats[key]["max"] = stats[key]["max"], stats[key]["min"]
    (root / "meta/stats.json").write_text(json.dumps(stats))
    assert validate_main([str(root), "--print-good-episodes"]) == 1
    out = capsys.readouterr()
    assert out.out == "[0,1]\n"
    assert out.err.startswith("note: 1 error(s) name no episode (stats_values)")


def test_json_to_a_folder_is_refused_before_anything_is_read(tmp_path, capsys, monkeypatch):
    import lerobotstream.validate as v

    monkeypatch.setattr(v, "validate_dataset", lambda *a, **k: pytest.fail("the dataset was read"))
    before = sorted(os.listdir(tmp_path))
    assert validate_main([str(G1), "--json", str(tmp_path)]) == 2
    assert (
        _err(capsys)
        == f"error: StreamingConfigError: --json {str(tmp_path)!r} is a folder: give the path of a file to write"
    )
    assert validate_main([str(G1), "--json", str(tmp_path / "no" / "r.json")]) == 2
    assert "does not exist" in _err(capsys)
    assert (
        sorted(os.listdir(tmp_path)) == before and not (tmp_path.parent / f"{tmp_path.name}.tmp-{os.getpid()}").exists()
    )


def test_json_is_written_atomically_or_not_at_all(tmp_path, monkeypatch, capsys):
    out = tmp_path / "r.json"
    out.write_text("old")
    real = os.replace

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    assert validate_main([str(G1), "--json", str(out), "--quiet"]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert out.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["r.json"]  # no temporary left
    monkeypatch.setattr(os, "replace", real)
    assert validate_main([str(G1), "--json", str(out), "--quiet"]) == 0
    assert json.loads(out.read_text())["ok"] is True and sorted(os.listdir(tmp_path)) == ["r.json"]


def test_episode_ranges_are_bounded_by_the_dataset_before_they_grow(capsys):
    t0 = time.process_time()
    assert validate_main([str(G1), "--episodes", "0-99999999999", "--quiet"]) == 2
    err = _err(capsys)
    assert err.startswith("error: StreamingConfigError: --episodes: episodes ['2..99999999999'] are not in ")
    assert "meta/episodes holds 2 episodes, indices 0..1" in err
    assert time.process_time() - t0 < 30  # the range was never expanded (10**11 ints would not fit)
    assert validate_main([str(G1), "--episodes", "0-1", "--quiet"]) == 0


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--examples", "-1"], "--examples must be an int >= 0, got -1"),
        (["--decode-sample", "-1"], "--decode-sample must be an int >= 0, got -1"),
        (
            ["--workers", "0"],
            "--workers must be an int >= 1 (left out: 8 on a local folder, 32 on a remote store), got 0",
        ),
        (["--tolerance-s", "nan"], "--tolerance-s must be a number > 0 (seconds), got nan"),
        (["--tolerance-s", "inf"], "--tolerance-s must be a number > 0 (seconds), got inf"),
        (["--tolerance-s", "0"], "--tolerance-s must be a number > 0 (seconds), got 0.0"),
        (["--episodes", "-3"], "--episodes: '-3' is not an episode index or a range a-b (e.g. --episodes 0-9 20)"),
        (["--print-good-episodes", "--json", "-"], "--print-good-episodes and --json - both write to stdout"),
    ],
)
def test_bad_flags_are_refused_by_name(flags, message, capsys):
    assert validate_main([str(G1), *flags]) == 2
    assert _err(capsys).startswith(f"error: StreamingConfigError: {message}")


def test_a_tolerance_of_half_a_frame_or_more_is_refused_as_training_refuses_it(capsys):
    """``tolerance_s=1.5`` was accepted; training refuses ``tolerance_s >= 0.5 / fps`` once the fps
    is known (``check_tolerance``): the validator gives the same usage error."""
    from lerobotstream.errors import StreamingConfigError

    with pytest.raises(StreamingConfigError, match=r"tolerance_s must be below half a frame interval") as e:
        validate_dataset(root=G1, tolerance_s=1.5)
    assert e.value.option == "tolerance_s" and e.value.value == 1.5
    assert validate_main([str(G1), "--tolerance-s", "1.5", "--quiet"]) == 2
    err = _err(capsys)
    assert err.startswith("error: StreamingConfigError: ") and "--tolerance-s must be below half a frame" in err
    assert "got 1.5" in err


def test_cli_errors_name_the_flags_not_the_python_keywords(tmp_path, monkeypatch, capsys):
    """A library message naming ``root=`` or ``repo_id=`` reads ``--root`` / ``--repo-id`` on the
    command line (same error type); a placeholder such as ``<repo_id>`` stays as it is."""
    from huggingface_hub import constants as hf_constants

    from lerobotstream import constants
    from lerobotstream.errors import in_flag_words

    monkeypatch.setattr(constants, "HF_LEROBOT_HOME", str(tmp_path))  # no local copy to fall back on
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    assert validate_main(["--repo-id", "nobody/none-such"]) == 2
    err = _err(capsys)
    assert err.startswith("error: SourceError: ") and "use --root a local copy of the dataset" in err
    assert "root=" not in err
    assert validate_main(["--repo-id", "bad id"]) == 2
    err = _err(capsys)
    assert err.startswith("error: StreamingConfigError: --repo-id 'bad id' is not a Hub repository id")
    assert "pass --root the dataset folder" in err
    flags = {"root": "--root", "repo_id": "--repo-id", "num_workers": "--num-workers", "seed": "--seed"}
    hint = "no network? pass root= a local copy (or put one at $HF_LEROBOT_HOME/<repo_id>)"
    assert (
        in_flag_words(hint, flags) == "no network? pass --root a local copy (or put one at $HF_LEROBOT_HOME/<repo_id>)"
    )
    assert in_flag_words("seed must be None or an int >= 0, got -1", flags, "none") == (
        "--seed must be none or an int >= 0, got -1"
    )
    assert in_flag_words("the seed was None", flags, "none") == "the seed was None"  # names no flag: unchanged


@pytest.mark.parametrize(
    "entries,said",
    [
        ({"info": "nope"}, "has info 'nope'; info must be an object"),
        ({"names": 5}, "has names 5; names must be a list"),
        ({"info": {"video.height": "abc"}}, "has info['video.height'] = 'abc'; it must be a whole number"),
    ],
)
def test_a_camera_field_of_the_wrong_type_is_one_typed_error_line(
    make_generated_dataset, tmp_path, capsys, entries, said
):
    """These once ended the validator with ``error: AttributeError: 'str' object has no attribute
    'get'`` (or a TypeError/ValueError): info.json is the dataset's description, so exit 2 with the
    MetadataError training raises."""
    from tests.validate._defects import CAM, set_feature

    root = copy(Path(make_generated_dataset(episode_lengths=(5,))), tmp_path / "ds")
    set_feature(root, CAM, **entries)
    assert validate_main([str(root), "--no-progress"]) == 2
    line = _err(capsys)
    assert line.startswith("error: MetadataError: ") and f"meta/info.json: features.{CAM} {said}" in line, line
