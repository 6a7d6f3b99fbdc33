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
from lerobotstream.mp4 import Mp4Index
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
from lerobotstream.dataset import StreamingLeRobotDataset
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
    from lerobotstream.dataset import StreamingLeRobotDataset

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
    from lerobotstream.dataset import StreamingLeRobotDataset

    assert StreamingLeRobotDataset(root=root).sidecar_status == "built"


@pytest.mark.parametrize(
    "name,value,reason",
    [
        ("presentation_order", 1, "not a permutation"),
        ("sync_samples", 200, "sync_samples disagree"),
        ("is_sync", 7, "is_sync holds"),
        ("offset", 60000, "past the end"),
    ],
)
def test_every_value_a_lookup_indexes_with_is_checked(root, built, name, value, reason):
    _overwrite(_index(built), name, value)
    with pytest.raises(SidecarSchemaError, match=reason):
        Mp4Index(_index(built)).table(0)


def test_an_edited_index_without_its_note_is_converted_again(root, built):
    for note in (built / "indexes").glob("*.valid-*"):
        note.unlink()
    _overwrite(_index(built), "presentation_order", 255)
    got, log = _child(root, built)
    assert got == {"ok": True, "status": "cache"}, log
    assert "converting the derived index again" in log


def test_table_checks_name_what_is_wrong(root, built):
    idx = Mp4Index(_index(built))
    _, views = idx._views(idx._record(0))
    assert table_problem(views, idx._record(0)["size"]) is None
    bad = dict(views, presentation_order=np.zeros(sum(LENGTHS), dtype=np.int64))
    assert "permutation" in table_problem(bad, None)
    bad = dict(views, sync_samples=np.array([0, 99]))
    assert "sync_samples" in table_problem(bad, None)
    assert "past the end" in table_problem(views, 10)
    bad = dict(views, pts_s=np.full(sum(LENGTHS), np.nan))
    assert "finite" in table_problem(bad, None)
    _overwrite(_index(built), "presentation_order", 255)
    with pytest.raises(SidecarSchemaError, match="presentation_order is not a permutation"):
        Mp4Index(_index(built)).table(0)
