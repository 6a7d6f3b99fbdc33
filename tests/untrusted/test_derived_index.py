"""Untrusted input at the derived-index boundary: an edited ``.idx`` in a shared index cache never
crashes the process (each case runs in a subprocess: a signal would fail it, not the test run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lerobotstream.errors import SidecarSchemaError
from lerobotstream.mp4._index_file import Mp4Index
from lerobotstream.mp4._index_format import table_problem

REPO = Path(__file__).resolve().parents[2]
CAM = "observation.images.front"
LENGTHS = (6, 5)

# the child streams the dataset and prints what it saw: the frames' burned-in identities, or the error
CHILD = r"""
import json, logging, sys
from lerobotstream import constants
from pathlib import Path
constants.SIDECAR_DIR = Path(sys.argv[2]) / "sidecars"
constants.INDEX_DIR = Path(sys.argv[2]) / "indexes"
from lerobotstream.dataset._dataset import StreamingLeRobotDataset
from lerobotstream.testing import read_identity
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
try:
    ds = StreamingLeRobotDataset(root=sys.argv[1])
    ok = all(read_identity(it[sys.argv[3]].numpy())[:2] == (int(it["episode_index"]), int(it["frame_index"]))
             for it in ds)
    print(json.dumps({"ok": ok, "status": ds.sidecar_status}))
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}))
"""


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(make_generated_dataset(episode_lengths=LENGTHS, codec="av1", cameras=((CAM, 32, 24),)))


def _child(root: Path, caches: Path) -> tuple[dict, str]:
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), str(caches), CAM],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert p.returncode == 0, f"the child died (status {p.returncode}): {p.stderr[-2000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def _index(caches: Path) -> Path:
    (idx,) = (caches / "indexes").glob("*.idx")
    return idx


def _overwrite(idx_path: Path, name: str, value: int) -> None:
    """Overwrite every stored value of source 0's array ``name`` in the derived index."""
    spec = Mp4Index(idx_path)._record(0)["arrays"][name]
    dt = np.dtype(spec["dtype"])
    idx_path.chmod(0o644)
    with open(idx_path, "r+b") as f:
        f.seek(int(spec["offset"]))
        f.write(np.full(int(spec["count"]), value, dtype=np.int64).astype(dt).tobytes())


@pytest.fixture
def built(root, tmp_path, monkeypatch):
    """A dataset opened once: its sidecar, derived index and validation note are in the caches."""
    from lerobotstream import constants
    from lerobotstream.dataset._dataset import StreamingLeRobotDataset

    monkeypatch.setattr(constants, "SIDECAR_DIR", tmp_path / "sidecars")
    monkeypatch.setattr(constants, "INDEX_DIR", tmp_path / "indexes")
    assert StreamingLeRobotDataset(root=root).sidecar_status == "built"
    assert list((tmp_path / "indexes").glob("*.valid-*"))
    return tmp_path


def test_an_edited_index_behind_a_validation_note_serves_the_mp4s_own_tables(root, built):
    _overwrite(_index(built), "presentation_order", 255)  # the trial's SIGSEGV: reads far past the arrays
    got, log = _child(root, built)  # the note skips the metadata checks; the table checks still run
    assert got == {"ok": True, "status": "cache"}, log
    assert "derived index's table" in log and "is damaged" in log
    # the next start drops the rejected sidecar and builds one locally
    from lerobotstream.dataset._dataset import StreamingLeRobotDataset

    assert StreamingLeRobotDataset(root=root).sidecar_status == "built"


@pytest.mark.parametrize(
    "name,value,reason",
    [("presentation_order", 200, "presentation_order holds values outside"), ("sync_samples", 200, "sync_samples")],
)
def test_every_value_a_lookup_indexes_with_is_checked(root, built, name, value, reason):
    _overwrite(_index(built), name, value)
    with pytest.raises(SidecarSchemaError, match=reason):
        Mp4Index(_index(built)).table(0)


@pytest.mark.parametrize("name,value", [("presentation_order", 1), ("offset", 60000), ("pts_ticks", 3)])
def test_wrong_values_in_range_are_caught_against_the_moov(root, built, name, value, caplog):
    """Values no lookup can crash on, but wrong: the first-use verification serves the MP4's own table."""
    import logging

    from lerobotstream.dataset._dataset import StreamingLeRobotDataset
    from lerobotstream.testing import read_identity

    for rec in (built / "indexes").glob("*.verified"):
        rec.unlink()  # the opening fixture verified it; this edit is made afterwards
    _overwrite(_index(built), name, value)
    from lerobotstream.errors import SidecarValidationError

    seen = []
    with caplog.at_level(logging.WARNING, logger="lerobotstream.sidecar"):
        try:
            for it in StreamingLeRobotDataset(root=root):
                seen.append((read_identity(it[CAM].numpy())[:2], (int(it["episode_index"]), int(it["frame_index"]))))
        except SidecarValidationError as e:  # an episode sized from the wrong offsets is refused, typed
            assert name == "offset" and "sized from it" in str(e)
        else:
            assert len(seen) == sum(LENGTHS)
    assert all(a == b for a, b in seen)  # no frame served is another's
    assert " of sample " in caplog.text and "own moov" in caplog.text  # (a shared block may back several arrays)


def test_an_edited_index_without_its_note_is_converted_again(root, built):
    for note in (built / "indexes").glob("*.valid-*"):
        note.unlink()
    _overwrite(_index(built), "presentation_order", 255)
    got, log = _child(root, built)
    assert got == {"ok": True, "status": "cache"}, log
    assert "converting the derived index again" in log


def test_table_checks_name_what_is_wrong(root, built):
    from lerobotstream.mp4._index_format import samples_problem

    idx = Mp4Index(_index(built))
    _, views = idx._views(idx._record(0))
    assert table_problem(views) is None
    bad = dict(views, presentation_order=np.full(sum(LENGTHS), -1, dtype=np.int64))
    assert "presentation_order holds values outside" in table_problem(bad)
    bad = dict(views, sync_samples=np.array([0, 99]))
    assert "sync_samples" in table_problem(bad)
    bad = dict(views, pts_s=views["pts_s"][:3])
    assert "pts_s has 3 values" in table_problem(bad)
    assert "past the end" in samples_problem(views["offset"], views["size"], 10)
    assert "negative" in samples_problem(views["offset"].astype(np.int64) - 100, views["size"], None)
    assert "2**62" in samples_problem(views["offset"].astype(np.int64) + 2**62, views["size"], None)


def test_a_damaged_path_table_is_a_typed_error(root, built):
    idx_path = _index(built)
    idx = Mp4Index(idx_path)
    a = int(idx._path_off[0])
    path = idx.path(0)
    idx_path.chmod(0o644)
    with open(idx_path, "r+b") as f:
        f.seek(a)
        f.write(b"\xff" * len(path.encode()))
    with pytest.raises(SidecarSchemaError, match="path of source 0 is damaged"):
        Mp4Index(idx_path).source_id(path)
