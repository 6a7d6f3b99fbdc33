"""What training refuses, the validator reports as an error (issue 35 item 1, issue 43 item 4).

The checks are written once, as functions that return problems (``DatasetMeta.load(problems=[])``,
``parquet.episode_rows_problem`` / ``index_problem`` / ``task_index_problem`` / ``footer_rows_problem``,
``features.data_columns_problem`` / ``row_shape_matches`` / ``is_image_column_type``,
``sidecar.validate_source``): training raises on them, the validator collects them. Each defect of
the break-it trials is planted here: training refuses it with its typed error, and the validator
reports it under its finding code (from the headers alone where the check reads only headers)."""

from __future__ import annotations

from pathlib import Path

import pytest

import lerobotstream.errors as errors
from lerobotstream.validate import validate_dataset
from lerobotstream.validate._findings import CODES
from tests.validate._defects import (
    CAM,
    DEFECTS,
    PLANTED,
    copy,
    plant,
    replace_file,
    set_feature,
    set_row_width,
    set_value,
    video_file,
)

G1 = Path(__file__).resolve().parents[2] / "data" / "g1_v30"


#: planted defect -> what training raises (the validator's code: ``DEFECTS[kind][0]``)
TRAINING_REFUSES = {
    "episode_index_2**62": errors.EpisodeDataError,  # parquet.episode_rows_problem
    "frame_index_-1": errors.EpisodeDataError,  # parquet.episode_rows_problem
    "timestamp_nan": errors.FrameTimestampError,  # decode: EpisodeVideo.local_indices
    "stsz_byte": errors.Mp4InconsistentTablesError,  # mp4: check_sample_framing
    "timestamps_shifted": errors.FrameTimestampError,  # decode: EpisodeVideo.local_indices
    "stco_byte": errors.Mp4InconsistentTablesError,  # mp4: check_sample_framing
}


@pytest.mark.parametrize("kind", list(DEFECTS))
def test_training_refuses_what_the_validator_reports(make_generated_dataset, tmp_path, kind):
    from lerobotstream import StreamingLeRobotDataset

    root = copy(G1 if kind == "stco_byte" else Path(make_generated_dataset(**PLANTED)), tmp_path / "ds")
    plant(kind, root)
    with pytest.raises(TRAINING_REFUSES[kind]):
        for _ in StreamingLeRobotDataset(root=root, episode_pool_size=2):
            pass
    (found,) = validate_dataset(root=root).errors
    assert found.code == DEFECTS[kind][0] and CODES[found.code][0] == "error"


def _widen_state(root: Path) -> None:
    """One more value per row in the first data file's ``observation.state`` than info.json declares."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    i = table.column_names.index("observation.state")
    rows = [r + [0.0] for r in table.column(i).to_pylist()]
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(rows, table.schema.field(i).type)), path)


def _rewrite_image_column(root: Path, key: str, edit) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    i = table.column_names.index(key)
    column = edit(table.column(key).combine_chunks())
    pq.write_table(table.set_column(i, pa.field(key, column.type), column), path)


def _image_bytes_only(col):
    return col.field("bytes")  # a plain binary column: not LeRobot's {bytes, path} struct


def _one_broken_image(col):
    import pyarrow as pa

    cells = col.field("bytes").to_pylist()
    cells[3] = b"not an image"
    return pa.StructArray.from_arrays([pa.array(cells, pa.binary()), col.field("path")], ["bytes", "path"])


IMAGE = "observation.images.wrist"
ONE_FILE = dict(episode_lengths=(6, 5))  # one video file, one data file
#: more planted defects: (dataset kwargs, plant, what training raises, the check's kind — "headers":
#: the validator finds it from the headers alone, "rows": from the per-row columns, "decode": by
#: decoding —, the code, validate_dataset kwargs)
MORE = {
    "state_shape": (
        PLANTED,
        _widen_state,
        errors.EpisodeDataError,
        "headers",
        "data_shape",
        {},
    ),
    "image_not_a_struct": (
        dict(episode_lengths=(6, 5), image_cameras=((IMAGE, 32, 24),)),
        lambda r: _rewrite_image_column(r, IMAGE, _image_bytes_only),
        errors.EpisodeDataError,
        "headers",
        "data_image",
        {},
    ),
    "image_undecodable": (
        dict(episode_lengths=(6, 5), image_cameras=((IMAGE, 32, 24),)),
        lambda r: _rewrite_image_column(r, IMAGE, _one_broken_image),
        errors.EpisodeDataError,
        "decode",
        "data_image",
        {"decode_sample": 11},
    ),
    # the new-user trial: validate said error where training went on (or said "missing")
    "state_row_short": (
        PLANTED,
        lambda r: set_row_width(r, 0, 3, "observation.state", 4),
        errors.EpisodeDataError,
        "headers",
        "data_shape",
        {},
    ),
    "index_999": (
        PLANTED,
        lambda r: set_value(r, 0, 6, "index", 999),
        errors.EpisodeDataError,
        "rows",
        "data_index_range",
        {},
    ),
    # a task_index naming no task of meta/tasks.parquet (1 task): 7 crashed item assembly with a bare
    # IndexError, -1 silently gave the last task's string; parquet.task_index_problem for both
    **{
        f"task_index_{value}": (
            PLANTED,
            lambda r, value=value: set_value(r, 1, 3, "task_index", value),
            errors.EpisodeDataError,
            "rows",
            "data_task_index",
            {},
        )
        for value in (7, -1)
    },
    "camera_shape": (
        ONE_FILE,
        lambda r: set_feature(r, CAM, shape=[96, 128, 3]),
        errors.SidecarValidationError,
        "headers",
        "shape_mismatch",
        {},
    ),
    **{
        f"video_{how}": (
            ONE_FILE,
            lambda r, how=how: replace_file(video_file(r, 0), how),
            errors.MetadataReadError,
            "headers",
            "file_unreadable",
            {},
        )
        for how in ("loop", "folder", "dev_null")
    },
}


@pytest.mark.parametrize("kind", list(MORE))
def test_training_refuses_what_the_validator_reports_more(make_generated_dataset, tmp_path, kind):
    from lerobotstream import StreamingLeRobotDataset

    kwargs, plant_it, cls, found_by, code, validate_kwargs = MORE[kind]
    root = copy(Path(make_generated_dataset(**kwargs)), tmp_path / "ds")
    plant_it(root)
    with pytest.raises(cls):
        for _ in StreamingLeRobotDataset(root=root, episode_pool_size=2):
            pass
    errs = validate_dataset(root=root, **validate_kwargs).errors
    assert [f.code for f in errs] == [code] and CODES[code][0] == "error", [(f.code, f.message) for f in errs]
    if found_by == "headers":
        assert [f.code for f in validate_dataset(root=root, headers_only=True).errors] == [code]


def test_a_missing_column_is_one_rule_with_one_message(make_generated_dataset, tmp_path):
    """``features.data_columns_problem``: item assembly raises on it, the validator reports it from
    the footer alone, both with the rule's own words."""
    import pyarrow.parquet as pq

    from lerobotstream import StreamingLeRobotDataset

    root = copy(Path(make_generated_dataset(**PLANTED)), tmp_path / "ds")
    path = root / "data/chunk-000/file-000.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["action"]), path)
    said = "the data file lacks the column(s) ['action'] that meta/info.json features declare"
    with pytest.raises(errors.EpisodeDataError) as e:
        for _ in StreamingLeRobotDataset(root=root, episode_pool_size=2):
            pass
    assert said in str(e.value) and e.value.column == "action"
    for headers_only in (False, True):
        (found,) = validate_dataset(root=root, headers_only=headers_only).errors
        assert found.code == "data_columns" and said in found.message and found.episodes == [0, 1, 2, 3]


@pytest.mark.parametrize("value", [7, -1])
def test_a_task_index_naming_no_task_is_one_rule_with_one_message(make_generated_dataset, tmp_path, value):
    """``parquet.task_index_problem``: item assembly raises a typed error naming the episode, the
    row and the file (not a bare ``IndexError``, nor the last task's string for -1); the validator
    reports the same message as an error of that episode."""
    import numpy as np

    from lerobotstream import StreamingLeRobotDataset
    from lerobotstream.parquet import task_index_problem

    root = copy(Path(make_generated_dataset(**PLANTED)), tmp_path / "ds")
    set_value(root, 1, 3, "task_index", value)
    with pytest.raises(errors.EpisodeDataError) as info:
        for _ in StreamingLeRobotDataset(root=root, episodes=[1]):
            pass
    msg = str(info.value)
    assert "episode 1" in msg and "file-000.parquet" in msg and f"row 3 (frame_index 3) has task_index {value}" in msg
    assert info.value.episode_index == 1 and info.value.column == "task_index"
    (found,) = validate_dataset(root=root).errors
    assert found.code == "data_task_index" and found.episodes == [1]
    assert f"row 3 (frame_index 3) has task_index {value}" in found.message
    # the rule itself, vectorised over the column
    assert task_index_problem(np.array([0, 1, 1]), 2) is None
    assert task_index_problem(np.array([0.0, np.nan]), 2).message.startswith(
        "row 1 (frame_index 1) has task_index null"
    )
    p = task_index_problem(np.array([5, 0, 9]), 1, frame_index=np.array([2, 0, 1]))
    assert p.message.startswith("row 0 (frame_index 2) has task_index 5 (2 rows out of range)")


def test_a_row_timestamp_off_frame_index_is_the_validators_rule(make_generated_dataset, tmp_path):
    """Training decodes a row at its ``timestamp``, as LeRobot does: a row moved +5 ms lands on no
    frame (``FrameTimestampError``), a row moved +0.5 s lands on frame 20 of its own episode and is
    served as ``frame_index`` 5 without an error (LeRobot 0.6.1's map-style dataset serves the same
    pixels). The validator reports both as ``data_timestamps`` (docs/validate.md, "What the
    validator adds beyond training")."""
    from lerobotstream import StreamingLeRobotDataset
    from lerobotstream.testing import read_identity

    source = Path(make_generated_dataset(**PLANTED))
    off = copy(source, tmp_path / "off")
    set_value(off, 4, 5, "timestamp", 5 / 30 + 0.005)
    with pytest.raises(errors.FrameTimestampError):
        for _ in StreamingLeRobotDataset(root=off, episodes=[4]):
            pass
    (found,) = validate_dataset(root=off).errors
    assert (found.code, found.episodes) == ("data_timestamps", [4])

    moved = copy(source, tmp_path / "moved")
    set_value(moved, 4, 5, "timestamp", 5 / 30 + 0.5)
    ds = StreamingLeRobotDataset(root=moved, episodes=[4], sampling_strategy="sequential")
    served = {int(it["frame_index"]): read_identity(it[CAM])[:2] for it in ds}
    assert served[5] == (4, 20) and served[4] == (4, 4) and served[6] == (4, 6)
    (found,) = validate_dataset(root=moved).errors
    assert (found.code, found.episodes) == ("data_timestamps", [4])
    assert "row 5 has 0.666667 s, frame_index 5 plays at 0.166667 s" in found.message
