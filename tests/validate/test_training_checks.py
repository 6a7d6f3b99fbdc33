"""Every check training makes has a matching validator check (issue 35 item 1).

The raise sites of data errors in the modules training runs are read from the source (``ast`` for
``.py``, the ``raise``/``_raise(`` lines of ``.pyx``) and compared with
``lerobotstream.validate._checks``: a new training check without a validator counterpart fails
here, and so does an entry whose site no longer raises. Then each defect of the break-it trials is
planted: training refuses it with the class the registry names, and the validator reports it
under that entry's code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import lerobotstream.errors as errors
from lerobotstream.validate import CODES, validate_dataset
from lerobotstream.validate._checks import NOT_DATASET_CHECKS, TRAINING_CHECKS
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

PKG = Path(__file__).resolve().parents[2] / "lerobotstream"
G1 = PKG.parent / "data" / "g1_v30"
#: the modules training runs on a dataset's content (sources, planner, options: not about the data)
SCANNED = (
    "meta.py",
    "_meta_files.py",
    "_meta_episodes.py",
    "features.py",
    "parquet.py",
    "payload_cache.py",
    "dataset",
    "decode",
    "sidecar",
    "mp4",
)
#: error classes that say the dataset is wrong (and their subclasses)
DATA_BASES = (
    errors.MetadataError,
    errors.Mp4Error,
    errors.FrameTimestampError,
    errors.DecodeError,
    errors.SidecarValidationError,
    errors.SidecarStaleError,
)
DATA_CLASSES = {name for name in errors.__all__ if issubclass(getattr(errors, name), DATA_BASES)}
_PYX_DEF = re.compile(r"^(?:c?p?def|cdef class|class)\s+(?:[\w\[\], *]+\s+)?(\w+)\s*[(:]")
_PYX_RAISE = re.compile(r"\braise\s+(\w+)\s*\(|^\s*_raise\(")


def _py_sites(path: Path, rel: str) -> set[str]:
    sites, stack = set(), []

    class Visitor(ast.NodeVisitor):
        def _scoped(self, node):
            stack.append(node.name)
            self.generic_visit(node)
            stack.pop()

        visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

        def visit_Raise(self, node):
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = getattr(exc, "id", None) or getattr(exc, "attr", None)
            if name in DATA_CLASSES:
                sites.add(f"{rel}:{'.'.join(stack)}")

    Visitor().visit(ast.parse(path.read_text()))
    return sites


def _pyx_sites(path: Path, rel: str) -> set[str]:
    sites, func = set(), "<module>"
    for line in path.read_text().splitlines():
        m = _PYX_DEF.match(line)
        if m:
            func = m.group(1)
        r = _PYX_RAISE.search(line)
        if r and (r.group(1) is None or r.group(1) in DATA_CLASSES):
            sites.add(f"{rel}:{func}")
    return sites


def raise_sites() -> set[str]:
    out: set[str] = set()
    for entry in SCANNED:
        base = PKG / entry
        files = sorted(base.rglob("*.py")) + sorted(base.rglob("*.pyx")) if base.is_dir() else [base]
        for f in files:
            rel = f.relative_to(PKG).as_posix()
            out |= _pyx_sites(f, rel) if f.suffix == ".pyx" else _py_sites(f, rel)
    return out


def _covered(site: str, wheres: set[str]) -> bool:
    module = site.split(":")[0]
    return site in wheres or f"{module}:*" in wheres


def test_every_training_check_has_a_validator_check():
    sites = raise_sites()
    assert len(sites) > 30  # the scan sees the library (a broken scan would pass everything)
    wheres = {c.where for c in TRAINING_CHECKS} | set(NOT_DATASET_CHECKS)
    assert sorted(s for s in sites if not _covered(s, wheres)) == [], (
        "a training check without a validator check: add it to lerobotstream/validate/_checks.py"
    )
    stale = [w for w in wheres if not any(s == w or (w.endswith(":*") and s.startswith(w[:-1])) for s in sites)]
    assert stale == [], "entries whose site no longer raises a data error"


def test_the_registry_names_real_codes_and_modes():
    for c in TRAINING_CHECKS:
        assert c.codes and all(code in CODES and CODES[code][0] == "error" for code in c.codes), c
        assert c.mode in ("same", "headers", "rows", "decode_sample"), c
    assert len({c.where for c in TRAINING_CHECKS}) == len(TRAINING_CHECKS)
    assert not {c.where for c in TRAINING_CHECKS} & set(NOT_DATASET_CHECKS)


#: planted defect -> (what training raises, the registry entry of that raise site)
TRAINING_REFUSES = {
    "episode_index_2**62": (errors.EpisodeDataError, "parquet.py:_validate"),
    "frame_index_-1": (errors.EpisodeDataError, "parquet.py:_validate"),
    "timestamp_nan": (errors.FrameTimestampError, "decode/_decoder.py:EpisodeVideo.local_indices"),
    "stsz_byte": (errors.Mp4InconsistentTablesError, "mp4/framing.pyx:check_sample_framing"),
    "timestamps_shifted": (errors.FrameTimestampError, "decode/_decoder.py:EpisodeVideo.local_indices"),
    "stco_byte": (errors.Mp4InconsistentTablesError, "mp4/framing.pyx:check_sample_framing"),
}


@pytest.mark.parametrize("kind", list(DEFECTS))
def test_training_refuses_what_the_validator_reports(make_generated_dataset, tmp_path, kind):
    from lerobotstream import StreamingLeRobotDataset

    root = copy(G1 if kind == "stco_byte" else Path(make_generated_dataset(**PLANTED)), tmp_path / "ds")
    plant(kind, root)
    cls, where = TRAINING_REFUSES[kind]
    with pytest.raises(cls):
        for _ in StreamingLeRobotDataset(root=root, episode_pool_size=2):
            pass
    entry = next(c for c in TRAINING_CHECKS if c.where == where)
    (found,) = validate_dataset(root=root).errors
    assert found.code == DEFECTS[kind][0] and found.code in entry.codes


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
#: more planted defects: (dataset kwargs, plant, what training raises, its registry entry, the code,
#: validate_dataset kwargs)
MORE = {
    "state_shape": (
        PLANTED,
        _widen_state,
        errors.EpisodeDataError,
        "dataset/_assemble.py:episode_rows",
        "data_shape",
        {},
    ),
    "image_not_a_struct": (
        dict(episode_lengths=(6, 5), image_cameras=((IMAGE, 32, 24),)),
        lambda r: _rewrite_image_column(r, IMAGE, _image_bytes_only),
        errors.EpisodeDataError,
        "dataset/_images.py:image_bytes",
        "data_image",
        {},
    ),
    "image_undecodable": (
        dict(episode_lengths=(6, 5), image_cameras=((IMAGE, 32, 24),)),
        lambda r: _rewrite_image_column(r, IMAGE, _one_broken_image),
        errors.EpisodeDataError,
        "dataset/_images.py:decode_image",
        "data_image",
        {"decode_sample": 11},
    ),
    # the new-user trial: validate said error where training went on (or said "missing")
    "state_row_short": (
        PLANTED,
        lambda r: set_row_width(r, 0, 3, "observation.state", 4),
        errors.EpisodeDataError,
        "dataset/_assemble.py:episode_rows",
        "data_shape",
        {},
    ),
    "index_999": (
        PLANTED,
        lambda r: set_value(r, 0, 6, "index", 999),
        errors.EpisodeDataError,
        "dataset/_assemble.py:_check_index",
        "data_index_range",
        {},
    ),
    "camera_shape": (
        ONE_FILE,
        lambda r: set_feature(r, CAM, shape=[96, 128, 3]),
        errors.SidecarValidationError,
        "sidecar/_validate.py:raise_problems",
        "shape_mismatch",
        {},
    ),
    **{
        f"video_{how}": (
            ONE_FILE,
            lambda r, how=how: replace_file(video_file(r, 0), how),
            errors.MetadataReadError,
            "_meta_episodes.py:*",
            "file_unreadable",
            {},
        )
        for how in ("loop", "folder", "dev_null")
    },
}


@pytest.mark.parametrize("kind", list(MORE))
def test_training_refuses_what_the_validator_reports_more(make_generated_dataset, tmp_path, kind):
    from lerobotstream import StreamingLeRobotDataset

    kwargs, plant_it, cls, where, code, validate_kwargs = MORE[kind]
    root = copy(Path(make_generated_dataset(**kwargs)), tmp_path / "ds")
    plant_it(root)
    with pytest.raises(cls):
        for _ in StreamingLeRobotDataset(root=root, episode_pool_size=2):
            pass
    entry = next(c for c in TRAINING_CHECKS if c.where == where)
    errs = validate_dataset(root=root, **validate_kwargs).errors
    assert [f.code for f in errs] == [code] and code in entry.codes, [(f.code, f.message) for f in errs]
    if entry.mode in ("same", "headers"):  # found from the headers alone
        assert [f.code for f in validate_dataset(root=root, headers_only=True).errors] == [code]
