"""Untrusted input, ``meta/info.json`` values: every problem is a MetadataError naming the file and
the field, found before anything is allocated from the value."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from lerobotstream.errors import MetadataError
from lerobotstream.meta import MAX_LISTED_EPISODES, DatasetMeta, _listed, _missing_runs, _runs_text, template_problem

GOOD = {
    "codebase_version": "v3.0",
    "fps": 30,
    "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
    "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
    "features": {
        "observation.images.top": {"dtype": "video", "shape": [48, 64, 3]},
        "action": {"dtype": "float32", "shape": [6]},
    },
    "total_episodes": 2,
    "total_frames": 7,
}


def _load_info_only(tmp_path: Path, **edits):
    """Load a root holding only ``meta/info.json``: info is checked before any other file is read."""
    info = json.loads(json.dumps(GOOD))
    for key, value in edits.items():
        if value is _DROP:
            info.pop(key)
        else:
            info[key] = value
    (tmp_path / "meta").mkdir(exist_ok=True)
    (tmp_path / "meta" / "info.json").write_text(json.dumps(info, allow_nan=True))
    return DatasetMeta.load(tmp_path)


_DROP = object()

CASES = [
    ("fps", float("nan")),
    ("fps", float("inf")),
    ("fps", float("-inf")),
    ("fps", 0),
    ("fps", -30),
    ("fps", 29.5),
    ("fps", "30"),
    ("fps", True),
    ("fps", None),
    ("fps", 10**30),
    ("fps", _DROP),
    ("total_episodes", "abc"),
    ("total_episodes", -1),
    ("total_episodes", 1.5),
    ("total_episodes", 10**19),
    ("total_frames", [1]),
    ("total_frames", -5),
    ("data_path", "{foo}"),
    ("data_path", "{0}"),
    ("data_path", "{}"),
    ("data_path", "data/{chunk_index!r}.parquet"),
    ("data_path", "data/{chunk_index.real}.parquet"),
    ("data_path", "data/{chunk_index:2000000000d}.parquet"),
    ("data_path", "data/{chunk_index:021d}.parquet"),
    ("data_path", "data/{chunk_index:{file_index}}.parquet"),
    ("data_path", "data/{chunk_index:/>9}.parquet"),
    ("data_path", "data/{episode_index:06d}.parquet"),
    ("data_path", "data/{video_key}.parquet"),
    ("data_path", "data/{chunk_index"),
    ("data_path", 5),
    ("data_path", None),
    ("data_path", ["data"]),
    ("data_path", _DROP),
    ("video_path", "videos/{video_key:>99}/{chunk_index}.mp4"),
    ("video_path", 7),
    ("video_path", _DROP),
    ("video_path", ""),
    ("features", []),
    ("features", {"a": 1}),
    ("features", {"a": {"shape": [1]}}),
    ("features", {"a": {"dtype": 5}}),
    ("features", {"a": {"dtype": "float32", "shape": "abc"}}),
    ("features", {"a": {"dtype": "float32", "shape": [-1]}}),
    ("features", {"a": {"dtype": "float32", "shape": [1.5]}}),
    ("features", {"a": {"dtype": "float32", "shape": [2**40, 2**40]}}),
    ("features", {"a": {"dtype": "float32", "shape": [1] * 9}}),
    ("features", {"a": {"dtype": "float32", "shape": [1], "names": 5}}),
    ("features", {"a": {"dtype": "float32", "shape": [1], "info": "x"}}),
    ("features", {"a": {"dtype": "float32", "names": "xyz"}}),
    ("repo_id", 5),
    ("repo_id", "a\\b"),
    ("splits", ["0:2"]),
    ("tools", "say"),
    ("tools", [1]),
]


@pytest.mark.parametrize("field,value", CASES, ids=lambda v: repr(v)[:40])
def test_every_info_value_problem_names_the_file_and_the_field(tmp_path, field, value):
    with pytest.raises(MetadataError) as e:
        _load_info_only(tmp_path, **{field: value})
    err = e.value
    assert type(err) is MetadataError
    assert "meta/info.json" in str(err) and err.path == "meta/info.json"
    assert err.field.split(".")[0] in (field, "video_path"), err.field  # a missing video_path names itself
    assert len(str(err)) < 600


def test_a_huge_template_width_is_refused_before_formatting(tmp_path):
    """``{chunk_index:2000000000d}`` once reached 9.9 GiB, then a bare MemoryError."""
    with pytest.raises(MetadataError, match=r"data_path formats \{chunk_index\} with '2000000000d'"):
        _load_info_only(tmp_path, data_path="data/{chunk_index:2000000000d}.parquet")


@pytest.mark.parametrize(
    "template,fields",
    [
        ("data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet", ("chunk_index", "file_index")),
        ("data/{chunk_index}/{file_index:020d}.parquet", ("chunk_index", "file_index")),
        ("data/all.parquet", ("chunk_index", "file_index")),
        ("videos/{video_key}/{{literal}}/{chunk_index:3}.mp4", ("video_key", "chunk_index", "file_index")),
    ],
)
def test_templates_the_reader_can_fill_pass(template, fields):
    assert template_problem(template, fields) is None


def test_a_plain_v3_info_passes(tmp_path):
    """The checks pass a LeRobot v3 info.json (the load then fails on the missing tasks file)."""
    with pytest.raises(MetadataError, match="tasks file is missing"):
        _load_info_only(tmp_path)


# --- error messages carry ranges, not lists -------------------------------------------------------------
def test_total_episodes_of_a_hundred_million_is_one_short_message(make_generated_dataset, tmp_path):
    """``total_episodes: 100000000`` once cost 4.1 GiB to build one error message."""
    src = make_generated_dataset(episode_lengths=(3, 4), codec="h264")
    root = tmp_path / "ds"
    shutil.copytree(src, root)
    info = json.loads((root / "meta/info.json").read_text())
    info["total_episodes"] = 100_000_000
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(MetadataError, match=r"episodes 2\.\.99999999 are missing") as e:
        DatasetMeta.load(root)
    assert e.value.episodes == [] and e.value.episode_index == 2 and len(str(e.value)) < 600


def test_an_episode_index_near_2_to_the_62_is_one_range(make_generated_dataset, tmp_path):
    src = make_generated_dataset(episode_lengths=(3, 4), codec="h264")
    root = tmp_path / "ds"
    shutil.copytree(src, root)
    shard = next((root / "meta/episodes").rglob("*.parquet"))
    table = pq.read_table(shard).to_pydict()
    table["episode_index"][1] = 2**62
    import pyarrow as pa

    pq.write_table(pa.table(table), shard)
    with pytest.raises(MetadataError, match=rf"missing episodes \[1\.\.{2**62 - 1}\]") as e:
        DatasetMeta.load(root)
    assert e.value.episodes == []


def test_missing_runs_are_bounded_by_the_rows_not_the_values():
    runs = _missing_runs(np.array([-4, 0, 3, 4, 2**62], dtype=np.int64), 2**62 + 1)
    assert runs == [(1, 3), (5, 2**62)]
    assert _listed(runs) == []
    assert _listed([(1, 3)]) == [1, 2]
    assert _listed([(0, MAX_LISTED_EPISODES + 1)]) == []
    assert _runs_text([(2, 3)]) == "[2] (1 episode)"
    assert (
        _runs_text([(i * 3, i * 3 + 2) for i in range(7)])
        == "[0..1, 3..4, 6..7, 9..10, 12..13, ... (2 more ranges)] (14 episodes)"
    )


def test_a_json_metadata_file_above_its_cap_is_not_parsed(tmp_path):
    from lerobotstream.meta import MAX_JSON_NBYTES

    (tmp_path / "meta").mkdir()
    (tmp_path / "meta/info.json").write_bytes(b"[" + b"{}," * (MAX_JSON_NBYTES // 3) + b"{}]")
    with pytest.raises(MetadataError, match=rf"info.json has \d+ bytes, more than the {MAX_JSON_NBYTES} bytes"):
        DatasetMeta.load(tmp_path)


# --- a feature's own fields: names, info, video_info ----------------------------------------------------
CAM = "observation.images.top"
_BAD_FIELDS = [
    ({"info": "nope"}, "has info 'nope'; info must be an object"),
    ({"info": [1, 2]}, "has info [1, 2]; info must be an object"),
    ({"video_info": "x"}, "has video_info 'x'; video_info must be an object"),
    ({"names": 5}, "has names 5; names must be a list"),
    ({"info": {"video.height": "abc"}}, "has info['video.height'] = 'abc'; it must be a whole number"),
    ({"info": {"video.width": -3}}, "has info['video.width'] = -3; it must be a whole number"),
    ({"info": {"video.codec": ["h264"]}}, "has info['video.codec'] = ['h264']; it must be a string"),
    ({"info": {"video.pix_fmt": 420}}, "has info['video.pix_fmt'] = 420; it must be a string"),
    # LeRobot reads any truthy value as a depth map: a string "false" would be one
    ({"info": {"video.is_depth_map": "false"}}, "has info['video.is_depth_map'] = 'false'; it must be true or false"),
    ({"info": {"is_depth_map": 1}}, "has info['is_depth_map'] = 1; it must be true or false"),
    ({"video_info": {"video.is_depth_map": "true"}}, "has video_info['video.is_depth_map'] = 'true'"),
    ({"info": {"depth_unit": {"x": 1}}}, "has info['depth_unit'] = {'x': 1}; it must be \"mm\" or \"m\""),
]


@pytest.mark.parametrize("dtype", ["video", "image"])
@pytest.mark.parametrize("fields,said", _BAD_FIELDS, ids=lambda v: repr(v)[:40])
def test_a_camera_field_of_the_wrong_type_is_refused_at_load_naming_the_camera(tmp_path, dtype, fields, said):
    """Such fields once failed as an AttributeError/TypeError deep inside the constructor, the
    validator, or (an image's ``names``) the first decoded image."""
    feats = {CAM: {"dtype": dtype, "shape": [48, 64, 3], **fields}, "action": {"dtype": "float32", "shape": [6]}}
    with pytest.raises(MetadataError) as e:
        _load_info_only(tmp_path, features=feats)
    err = e.value
    assert type(err) is MetadataError
    assert f"meta/info.json: features.{CAM} {said}" in str(err)
    assert (err.path, err.field, err.camera) == ("meta/info.json", f"features.{CAM}", CAM)


def test_the_declared_fields_of_the_types_lerobot_writes_pass(tmp_path):
    info = {
        "video.height": 48,
        "video.width": 64,
        "video.codec": "av1",
        "video.pix_fmt": "yuv420p",
        "video.is_depth_map": False,
        "video.fps": 30.0,  # a field lerobotstream does not read is not checked
        "has_audio": False,
    }
    feats = {
        CAM: {"dtype": "video", "shape": [48, 64, 3], "names": ["height", "width", "channels"], "info": info},
        "depth": {
            "dtype": "image",
            "shape": [48, 64, 1],
            "names": None,
            "info": {"is_depth_map": True, "depth_unit": "m"},
        },
        "action": {"dtype": "float32", "shape": [2], "names": {"motors": ["a", "b"]}, "info": None, "video_info": {}},
    }
    with pytest.raises(MetadataError, match="tasks file is missing"):  # past info.json
        _load_info_only(tmp_path, features=feats)


def test_fifty_thousand_declared_columns_the_data_file_lacks_make_one_short_message():
    """Such an info.json once made a 1.29 MB EpisodeDataError message (and validator line)."""
    from lerobotstream.features import data_columns_problem

    feats = {f"observation.extra{k}": {"dtype": "float32", "shape": [1]} for k in range(50_000)}
    problem = data_columns_problem(["timestamp", "task_index"], feats)
    assert problem.column == "observation.extra0"
    assert problem.message == (
        "the data file lacks the column(s) ['observation.extra0', 'observation.extra1', 'observation.extra2', "
        "'observation.extra3', 'observation.extra4', 'observation.extra5', 'observation.extra6', "
        "'observation.extra7', ... 49992 more] that meta/info.json features declare"
    )
    few = data_columns_problem(["timestamp"], {"action": {"dtype": "float32"}})
    assert (
        few.message == "the data file lacks the column(s) ['task_index', 'action'] that meta/info.json features declare"
    )
