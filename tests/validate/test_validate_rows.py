"""Issues 35 (item 1) and 37 (items 1 and 4): the validator reports what training refuses.

Each defect of the break-it trials, planted in a copy of a dataset, is one error finding listing
its episodes (exit status 1): a row's ``episode_index`` set to 2**62, a ``frame_index`` of -1, a
NaN ``timestamp``, one byte flipped in an ``stco`` entry of the bundled G1 data or in an ``stsz``
entry of a generated dataset, episode 5's timestamps shifted by +1/30 s. The per-row columns are
read projected by default; ``--headers-only`` reads what it read before. A truncated MP4 is
``video_truncated`` whatever its box order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lerobotstream.validate import validate_dataset
from lerobotstream.validate.__main__ import main as validate_main
from tests.validate._defects import (
    CAM,
    DEFECTS,
    G1_CAM,
    PLANTED,
    copy,
    flip_table_byte,
    plant,
    shift_timestamps,
    table_entry_offset,
    video_file,
)

REPO = Path(__file__).resolve().parents[2]
G1 = REPO / "data" / "g1_v30"


def _json_report(root: Path, tmp_path: Path, *flags: str) -> tuple[int, dict]:
    out = tmp_path / "report.json"
    status = validate_main([str(root), "--json", str(out), "--no-progress", "--quiet", *flags])
    return status, json.loads(out.read_text())


@pytest.fixture(scope="module")
def planted_source(make_generated_dataset):
    return Path(make_generated_dataset(**PLANTED))


def test_the_clean_datasets_pass(planted_source, tmp_path):
    for root in (planted_source, G1):
        status, doc = _json_report(root, tmp_path)
        assert status == 0 and doc["counts"]["errors"] == 0, doc["findings"]


@pytest.mark.parametrize("kind", list(DEFECTS))
def test_each_planted_defect_is_one_error_listing_its_episodes(planted_source, tmp_path, kind):
    root = copy(G1 if kind == "stco_byte" else planted_source, tmp_path / "ds")
    plant(kind, root)
    status, doc = _json_report(root, tmp_path)
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    code, episodes = DEFECTS[kind]
    assert status == 1
    assert [(f["code"], f["episodes"]) for f in errors] == [(code, episodes)], errors


def test_every_defect_at_once(planted_source, tmp_path):
    """The five defects of a generated dataset in one copy: five findings, one each."""
    root = copy(planted_source, tmp_path / "ds")
    for kind in ("episode_index_2**62", "frame_index_-1", "timestamp_nan", "stsz_byte", "timestamps_shifted"):
        plant(kind, root)
    status, doc = _json_report(root, tmp_path)
    errors = sorted((f["code"], f["episodes"]) for f in doc["findings"] if f["severity"] == "error")
    assert status == 1
    assert errors == sorted(v for k, v in DEFECTS.items() if k != "stco_byte")
    messages = {f["code"]: f["message"] for f in doc["findings"]}
    assert "expected 30 rows, found 29" in messages["data_rows"] and str(2**62) in messages["data_rows"]
    assert "row 10 has -1, expected 10" in messages["data_frame_index"]
    assert "(row 5: nan)" in messages["data_timestamps"]
    assert "start at 0.033333 s, not 0" in messages["timestamp_shift"]


def test_shifted_timestamps_in_several_episodes_are_one_finding(planted_source, tmp_path):
    root = copy(planted_source, tmp_path / "ds")
    for ep in (1, 5, 6):
        shift_timestamps(root, ep, 1 / 30)
    report = validate_dataset(root=root)
    assert [(f.code, f.episodes) for f in report.errors] == [("timestamp_shift", [1, 5, 6])]
    assert report.errors[0].file is None  # two data files


def test_timestamps_that_land_off_their_frames(planted_source, tmp_path):
    """Each side within tolerance_s, together not: the timestamps 0.6 tolerance late, the
    episode's from_timestamp 0.6 tolerance late too; from_timestamp + timestamp then misses every
    frame by 1.2 tolerance (training: FrameTimestampError). The decoder's own rule finds it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = copy(planted_source, tmp_path / "ds")
    shard = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(shard)
    col = f"videos/{CAM}/from_timestamp"
    values = table.column(col).to_numpy().copy()
    values[6] += 0.6e-4
    table = table.set_column(table.column_names.index(col), table.schema.field(col), pa.array(values, pa.float64()))
    pq.write_table(table, shard)
    shift_timestamps(root, 6, 0.6e-4)
    report = validate_dataset(root=root)
    assert [(f.code, f.episodes) for f in report.errors] == [("timestamp_shift", [6])]
    assert "lands on no frame" in report.errors[0].message


def test_headers_only_reads_what_it_read_before(planted_source, tmp_path, monkeypatch):
    """--headers-only: no column chunk is read (one request less per small data file), the
    per-row defects are not seen, the moov-only table checks still are."""
    from lerobotstream.parquet import EpisodeParquetReader

    root = copy(planted_source, tmp_path / "ds")
    plant("timestamps_shifted", root)
    plant("stsz_byte", root)
    full = validate_dataset(root=root)

    def refuse(*a, **k):
        raise AssertionError("--headers-only read a column chunk")

    monkeypatch.setattr(EpisodeParquetReader, "read_columns", refuse)
    light = validate_dataset(root=root, headers_only=True)
    assert sorted(f.code for f in full.errors) == ["timestamp_shift", "video_tables"]
    assert [f.code for f in light.errors] == ["video_tables"] and light.dataset["headers_only"] is True
    assert light.scan["requests"] == full.scan["requests"] - full.scan["data_files"]
    assert light.scan["bytes_read"] < full.scan["bytes_read"]


def test_rows_of_a_partial_selection(planted_source, tmp_path):
    """With --episodes only the selected episodes' row groups are read, and their defects found."""
    root = copy(planted_source, tmp_path / "ds")
    plant("frame_index_-1", root)  # episode 2
    plant("timestamp_nan", root)  # episode 3
    report = validate_dataset(root=root, episodes=[2, 5])
    assert [(f.code, f.episodes) for f in report.errors] == [("data_frame_index", [2])]


@pytest.mark.parametrize("faststart", [False, True], ids=["moov-last", "faststart"])
def test_a_truncated_file_is_video_truncated_whatever_the_moov_position(make_generated_dataset, tmp_path, faststart):
    root = copy(
        Path(make_generated_dataset(episode_lengths=(10, 10), episodes_per_video_file=2, faststart=faststart)),
        tmp_path / "ds",
    )
    mp4 = video_file(root, 0)
    mp4.write_bytes(mp4.read_bytes()[: mp4.stat().st_size * 2 // 3])
    report = validate_dataset(root=root)
    assert [(f.code, f.episodes) for f in report.errors] == [("video_truncated", [0, 1])]
    assert f"its {'mdat' if faststart else 'moov'} box at byte" in report.errors[0].message
    from lerobotstream.validate._findings import render

    line = next(x for x in render(report).splitlines() if x.startswith("  - ") and ".mp4" in x)
    assert line.endswith(" (episodes 0, 1)"), line  # the text report says what training would lose


def test_a_missing_file_line_ends_with_every_episode_it_takes(planted_source, tmp_path):
    """A missing MP4's message names the first episode that uses it; its text line ends with all of
    them, as its JSON ``episodes`` lists them (the same on the bundled Rerun sample, whose one
    video is not shipped)."""
    from lerobotstream.validate._findings import render

    root = copy(planted_source, tmp_path / "ds")
    video_file(root, 1).unlink()  # episodes 4-7
    report = validate_dataset(root=root)
    assert [(f.code, f.episodes) for f in report.errors] == [("file_missing", [4, 5, 6, 7])]
    assert report.errors[0].message.startswith("episode 4: ")
    line = next(x for x in render(report).splitlines() if x.startswith("  - episode 4: "))
    assert line.endswith(" (episodes 4, 5, 6, 7)"), line

    rerun = validate_dataset(root=REPO / "data" / "testmedia" / "lerobot-v30-rerun-apple-storage")
    (missing,) = [f for f in rerun.errors if f.code == "file_missing"]
    line = next(x for x in render(rerun).splitlines() if x.startswith("  - episode 0: "))
    assert line.endswith(f" (episodes {', '.join(map(str, missing.episodes))})") and len(missing.episodes) > 1


def test_a_finding_naming_its_episodes_gets_no_second_list():
    """The text line lists a finding's episodes only where its message does not name them all."""
    from lerobotstream.validate._findings import _episodes, finding

    def suffix(message, episodes):
        return _episodes(finding("data_rows", message, episodes=episodes))

    assert suffix("episode 3, camera c: x", [3]) == ""
    assert suffix("episode 30, camera c: x", [3]) == " (episode 3)"
    assert suffix("3 episodes [1, 5, 6]; first: episode 1 in f: x", [1, 5, 6]) == ""
    assert suffix("79 episodes 10..88, camera c, file f: x", list(range(10, 89))) == ""
    assert suffix("meta/episodes is missing episodes [2, 5..9] (6 episodes)", [2, 5, 6, 7, 8, 9]) == ""
    assert suffix("camera c: 2 episode(s) have ... (first: episode 2, by +0.5 s)", [2, 7]) == " (episodes 2, 7)"
    assert suffix("f.mp4: the mdat box ...", [0, 1]) == " (episodes 0, 1)"


def test_a_flipped_chunk_offset_names_the_overlap(tmp_path):
    root = copy(G1, tmp_path / "g1")
    flip_table_byte(video_file(root, 0, G1_CAM), "stco", 3)
    (f,) = validate_dataset(root=root, headers_only=True).errors
    assert f.code == "video_tables" and "overlap the next one" in f.message and f.camera == G1_CAM


def test_no_table_finding_on_any_shipped_mp4(testdata):
    """The moov-only checks against every MP4 the parser accepts (real encoders and muxers:
    several tracks, leading bytes in mdat, 64-bit sizes, moov first or last): no false finding."""
    from lerobotstream.mp4.parse import parse_mp4
    from lerobotstream.validate._videos import RecordingRead, layout_problems, num_tracks, top_level_boxes

    checked = 0
    for path in sorted([*testdata.rglob("*.mp4"), *G1.rglob("*.mp4")]):
        data = path.read_bytes()
        read = RecordingRead(lambda o, n, data=data: data[o : o + n])
        try:
            table = parse_mp4(read, len(data), path=path.name)
        except Exception:  # noqa: BLE001 - files the parser refuses are other findings
            continue
        boxes, complete = top_level_boxes(read, len(data))
        assert layout_problems(table, boxes, complete, num_tracks(read, table)) == [], path
        checked += 1
    assert checked >= 40


def test_table_entry_helper_finds_the_video_tables(planted_source):
    """The planting helper walks the boxes (a byte string search could hit a payload)."""
    mp4 = video_file(planted_source, 1)
    data = mp4.read_bytes()
    at = table_entry_offset(mp4, "stsz", 40)
    assert data[at - 4 * 40 - 16 : at - 4 * 40 - 12] == b"stsz"  # size, type, version, sample_size, count


def test_an_episode_length_off_its_rows_is_one_data_rows_error(planted_source, tmp_path):
    """An episode's ``length`` edited to one less than its rows (and ``dataset_to_index`` with it):
    the reader refuses the file's footer (``data_rows``); that is reported once, not again by the
    per-row run reading the same file (the user trial had two ``data_rows`` errors, one per run)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = copy(planted_source, tmp_path / "ds")
    (shard,) = sorted((root / "meta" / "episodes").rglob("*.parquet"))
    rows = pq.read_table(shard).to_pylist()
    schema = pq.read_schema(shard)
    rows[5].update(length=rows[5]["length"] - 1, dataset_to_index=rows[5]["dataset_to_index"] - 1)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), shard)
    report = validate_dataset(root=root)
    found = [f for f in report.errors if f.code == "data_rows"]
    assert len(found) == 1, [(f.code, f.message) for f in report.errors]
    assert found[0].file == "data/chunk-000/file-001.parquet" and 5 in found[0].episodes
    assert found[0].message.count("data/chunk-000/file-001.parquet") == 1, found[0].message


def test_data_shape_names_the_row_as_training_does(planted_source, tmp_path):
    """A row of another width than info.json's shape: the validator's ``data_shape`` names the
    episode and ``row k (frame_index k)``, as item assembly's ``EpisodeDataError`` does; from the
    headers alone it can only say the rows differ."""
    from lerobotstream import StreamingLeRobotDataset
    from lerobotstream.errors import EpisodeDataError
    from tests.validate._defects import set_row_width

    root = copy(planted_source, tmp_path / "ds")
    set_row_width(root, 1, 3, "observation.state", 4)
    with pytest.raises(EpisodeDataError) as info:
        for _ in StreamingLeRobotDataset(root=root, episodes=[1]):
            pass
    (found,) = validate_dataset(root=root).errors
    named = "episode 1, file data/chunk-000/file-000.parquet: column 'observation.state' row 3 (frame_index 3) holds 4 values"
    assert found.code == "data_shape" and found.message.startswith(named), found.message
    assert named in str(info.value)
    (headers,) = validate_dataset(root=root, headers_only=True).errors
    assert headers.code == "data_shape" and "rows of different lengths" in headers.message


@pytest.mark.parametrize("column", ["episode_index", "frame_index"])
def test_an_index_column_stored_as_strings_is_named_by_its_type(planted_source, tmp_path, column):
    """A string ``episode_index`` once crashed the validator (``TypeError: '<' not supported``,
    exit 2) and read as "expected 30 rows, found 0" in training; a string ``frame_index`` read as
    "non-contiguous frame_index (row 0 has 0, expected 0)". Both now say the column's type."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lerobotstream import StreamingLeRobotDataset
    from lerobotstream.errors import EpisodeDataError
    from tests.validate._defects import data_file

    root = copy(planted_source, tmp_path / "ds")
    path = data_file(root, 0)
    table = pq.read_table(path)
    i = table.column_names.index(column)
    pq.write_table(table.set_column(i, column, pa.array([str(v) for v in table.column(column).to_pylist()])), path)
    status, doc = _json_report(root, tmp_path)
    assert status == 1
    (found,) = [f for f in doc["findings"] if f["severity"] == "error"]
    code = "data_rows" if column == "episode_index" else "data_frame_index"
    assert found["code"] == code and f"the {column} column " in found["message"], found
    assert "string" in found["message"] or "str values" in found["message"], found
    assert found["episodes"] == [0, 1, 2, 3]
    with pytest.raises(
        EpisodeDataError, match=rf"episode 0 in data/chunk-000/file-000.parquet .*: the {column} column holds"
    ):
        for _ in StreamingLeRobotDataset(root=root, episodes=[0]):
            pass
