"""A data Parquet column is untrusted: each cell must hold numbers of the feature ``meta/info.json``
declares (its dtype; nulls refused), else a typed ``EpisodeDataError`` names the episode, the
column, the row and what was declared and found — never a torch/numpy error, an item holding a
str, dict or None, or a tensor of another dtype. Numbers of another Arrow type are cast to the
declared dtype as LeRobot's loader casts them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from lerobotstream import StreamingLeRobotDataset
from lerobotstream.errors import EpisodeDataError
from lerobotstream.parquet import data_column_problem
from lerobotstream.testing import make_dataset

DATA = "data/chunk-000/file-000.parquet"
LENGTHS = (3, 4)
ROW = LENGTHS[0] + 2  # episode 1, frame 2


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("types") / "ds", episode_lengths=LENGTHS, cameras=())


def _rewrite(pristine: Path, tmp_path: Path, column: str, make) -> Path:
    """A copy of the dataset whose data file's ``column`` is ``make(old column)`` (a pyarrow array)."""
    root = tmp_path / "ds"
    shutil.copytree(pristine, root)
    table = pq.read_table(root / DATA)
    i = table.column_names.index(column)
    pq.write_table(table.set_column(i, column, make(table.column(column))), root / DATA)
    return root


def _with_row(col: pa.ChunkedArray, value, type_=None) -> pa.Array:
    rows = col.to_pylist()
    rows[ROW] = value
    return pa.array(rows, type_ or col.type)


def _items(root: Path, episodes=(1,)) -> list[dict]:
    return list(StreamingLeRobotDataset(root=root, episodes=list(episodes), sampling_strategy="sequential"))


NULLS = {
    "null_element": ("observation.state", lambda c: _with_row(c, [1.0, None, 3.0, 4.0, 5.0, 6.0])),
    "null_cell": ("observation.state", lambda c: _with_row(c, None)),
    "null_timestamp": ("timestamp", lambda c: _with_row(c, None)),
}


@pytest.mark.parametrize("case", sorted(NULLS))
def test_a_null_where_numbers_are_declared_is_a_typed_error_naming_the_row(pristine, tmp_path, case):
    column, make = NULLS[case]
    root = _rewrite(pristine, tmp_path, column, make)
    with pytest.raises(EpisodeDataError) as e:
        _items(root)
    msg = str(e.value)
    assert msg.startswith(f"episode 1, file {DATA}: column {column!r} row 2 (frame_index 2) holds a null value"), msg
    assert "meta/info.json declares float32 values" in msg
    assert (e.value.episode_index, e.value.column, e.value.path) == (1, column, DATA)


NOT_NUMBERS = {
    "action_strings": (
        "action",
        lambda c: pa.array([[str(x) for x in r] for r in c.to_pylist()]),
        "list<element: string>",
    ),
    "state_binary": ("observation.state", lambda c: pa.array([b"\0" * 24] * len(c)), "binary"),
    "state_string": ("observation.state", lambda c: pa.array([str(r) for r in c.to_pylist()]), "string"),
    "state_dictionary": (
        "observation.state",
        lambda c: pa.array([str(r) for r in c.to_pylist()]).dictionary_encode(),
        "dictionary<values=string, indices=int32, ordered=0>",
    ),
    "state_struct": (
        "observation.state",
        lambda c: pa.array([{"a": r[0]} for r in c.to_pylist()]),
        "struct<a: double>",
    ),
    "timestamp_string": ("timestamp", lambda c: pa.array([str(x) for x in c.to_pylist()]), "string"),
}


@pytest.mark.parametrize("case", sorted(NOT_NUMBERS))
def test_a_column_of_other_values_than_numbers_is_a_typed_error(pristine, tmp_path, case):
    column, make, found = NOT_NUMBERS[case]
    root = _rewrite(pristine, tmp_path, column, make)
    with pytest.raises(EpisodeDataError) as e:
        _items(root)
    msg = str(e.value)
    want = f"column {column!r} holds values of Arrow type {found} where meta/info.json declares float32 values"
    assert msg.startswith(f"episode 1, file {DATA}: {want}"), msg
    assert (e.value.episode_index, e.value.column) == (1, column)


def test_a_number_the_declared_dtype_cannot_hold_is_a_typed_error(pristine, tmp_path):
    """int64 2**62 under ``float32`` (LeRobot's loader refuses the cast too)."""

    def ints(c: pa.ChunkedArray) -> pa.Array:
        rows = [[2**62] * 6 if i == ROW else [round(x) for x in r] for i, r in enumerate(c.to_pylist())]
        return pa.array(rows, pa.list_(pa.int64()))

    root = _rewrite(pristine, tmp_path, "observation.state", ints)
    with pytest.raises(EpisodeDataError) as e:
        _items(root)
    msg = str(e.value)
    assert msg.startswith(f"episode 1, file {DATA}: column 'observation.state' row 2 (frame_index 2) holds a value"), (
        msg
    )
    assert "(int64) that float32 cannot hold (Integer value 4611686018427387904 not in range" in msg
    assert e.value.column == "observation.state"


def test_numbers_of_another_arrow_type_are_served_as_the_declared_dtype(pristine, tmp_path):
    """As LeRobot's loader casts them: ints and bools under ``float32`` → float32, an integral
    double ``task_index`` → int64 (and the task it names)."""
    want = _items(pristine)
    root = _rewrite(pristine, tmp_path, "action", lambda c: pa.array([[round(x) for x in r] for r in c.to_pylist()]))
    root = _rewrite(
        root, tmp_path / "b", "observation.state", lambda c: pa.array([[x > 0 for x in r] for r in c.to_pylist()])
    )
    root = _rewrite(root, tmp_path / "c", "task_index", lambda c: c.cast(pa.float64()))
    got = _items(root)
    assert len(got) == len(want) == LENGTHS[1]
    for g, w in zip(got, want):
        assert g["action"].dtype == g["observation.state"].dtype == torch.float32
        assert torch.equal(g["action"], torch.round(w["action"]))
        assert torch.equal(g["observation.state"], (w["observation.state"] > 0).float())
        assert g["task_index"].dtype == torch.int64 and g["task"] == w["task"]
        assert torch.equal(g["timestamp"], w["timestamp"])


def test_the_rule_checks_nulls_at_every_nesting_level():
    nested = pa.chunked_array([pa.array([[[1.0, 2.0]], [[3.0, None]]])])
    problem = data_column_problem(nested, "float32", "x")
    assert problem.message.startswith("column 'x' row 1 (frame_index 1) holds a null value") and problem.column == "x"
    assert data_column_problem(nested.slice(0, 1), "float32", "x") is None
    assert data_column_problem(pa.chunked_array([pa.array(["a"])]), "string", "x") is None  # not a number dtype
    fractions = pa.chunked_array([pa.array([1.0, 2.0]), pa.array([3.0, 3.5, 4.0])])
    problem = data_column_problem(fractions, "int64", "x")
    assert problem.message.startswith("column 'x' row 3 (frame_index 3) holds a value (double) that int64 cannot hold")


@pytest.mark.parametrize("case", ["null_cell", "null_element", "state_string", "state_struct", "timestamp_string"])
def test_the_validator_reports_what_training_refuses_as_data_dtype(pristine, tmp_path, case):
    """The same rule from the file's footer (Arrow types, null counts): one ``data_dtype`` error
    naming the file and the column, where the validator found nothing before."""
    from lerobotstream.validate import validate_dataset

    column, make = {**NULLS, **{k: v[:2] for k, v in NOT_NUMBERS.items()}}[case]
    root = _rewrite(pristine, tmp_path, column, make)
    found = [f for f in validate_dataset(root=root).findings if f.code == "data_dtype"]
    assert len(found) == 1 and found[0].severity == "error", found
    assert found[0].message.startswith(f"{DATA}: column {column!r} holds "), found[0].message
    assert not [f for f in validate_dataset(root=pristine).findings if f.code == "data_dtype"]
