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
