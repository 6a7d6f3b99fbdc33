"""Untrusted input at the sidecar boundary: a cached or published sidecar whose sample positions or
display matrix were edited is caught by the first-use verification against each MP4's own moov
(the right frames are streamed, one warning says why, the next start builds locally)."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from lerobotstream import constants
from lerobotstream.dataset import StreamingLeRobotDataset
from lerobotstream.mp4 import Mp4Index
from lerobotstream.sidecar import SidecarWriter, load_manifest
from lerobotstream.testing import read_identity

CAM = "observation.images.front"
LENGTHS = (8, 8)


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    # both episodes in one file, each its own GOPs: exchanging their rows keeps every timestamp
    return Path(
        make_generated_dataset(
            episode_lengths=LENGTHS, codec="h264", gop=4, cameras=((CAM, 32, 24),), episodes_per_video_file=2
        )
    )


@pytest.fixture
def caches(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "SIDECAR_DIR", tmp_path / "sidecars")
    monkeypatch.setattr(constants, "INDEX_DIR", tmp_path / "indexes")
    return tmp_path


def _rewrite(npz: Path, edit) -> None:
    """Replace the sidecar ``npz`` by a copy whose tables went through ``edit(table) -> table``."""
    manifest = load_manifest(npz)
    idx = Mp4Index.open(npz, index_dir=npz.parent / "scratch-index")
    tmp = npz.with_name("edited.npz")
    with SidecarWriter(tmp, {k: v for k, v in manifest.items() if k != "sources"}) as w:
        for sid in range(idx.num_sources):
            t = idx.table(sid)
            t = dataclasses.replace(t, **{f: np.array(getattr(t, f)) for f in ("offset", "size", "is_sync")})
            info = idx.source_info(sid)
            w.add_source(sid, edit(t), path=idx.path(sid), size=info["size"], fingerprint=info["fingerprint"])
        w.commit()
    os.replace(tmp, npz)


def _frames(ds) -> dict[tuple[int, int], tuple[int, int]]:
    """(episode, frame) of each item -> the (episode, frame) burned into its pixels."""
    out = {}
    for item in ds:
        img = item[CAM].numpy()
        out[(int(item["episode_index"]), int(item["frame_index"]))] = read_identity(img)[:2]
    return out


def _swap_episodes(t):
    n = LENGTHS[0]
    off, size = t.offset.copy(), t.size.copy()
    off[:n], off[n:] = t.offset[n:].copy(), t.offset[:n].copy()
    size[:n], size[n:] = t.size[n:].copy(), t.size[:n].copy()
    return dataclasses.replace(t, offset=off, size=size)


def _rotate_180(t):
    return dataclasses.replace(t, matrix=(-65536, 0, 0, 0, -65536, 0, 0, 0, 1 << 30))


@pytest.mark.parametrize("edit", [_swap_episodes, _rotate_180], ids=["gop_rows_exchanged", "matrix_180"])
def test_an_edited_cached_sidecar_is_caught_on_first_use(root, caches, caplog, edit):
    first = StreamingLeRobotDataset(root=root)
    assert first.sidecar_status == "built"
    npz = Path(first._sidecar_npz)
    _rewrite(npz, edit)
    ds = StreamingLeRobotDataset(root=root)
    assert ds.sidecar_status == "cache"  # the metadata checks at start cannot see the edit
    with caplog.at_level(logging.WARNING, logger="lerobotstream.sidecar"):
        got = _frames(ds)
    assert got == {k: k for k in got} and len(got) == sum(LENGTHS)  # every frame is its own
    warnings = [r for r in caplog.records if "disagrees with" in r.getMessage()]
    assert len(warnings) == 1 and "own moov" in warnings[0].getMessage()
    # the next start drops it and builds locally; that one verifies and is recorded
    assert StreamingLeRobotDataset(root=root).sidecar_status == "built"


def test_verification_is_recorded_once_per_source(root, caches, monkeypatch):
    from lerobotstream.sidecar import _verify

    StreamingLeRobotDataset(root=root)  # build
    parses = []
    orig = _verify.VerifiedTables._parse
    monkeypatch.setattr(_verify.VerifiedTables, "_parse", lambda self, p: parses.append(p) or orig(self, p))
    assert len(_frames(StreamingLeRobotDataset(root=root))) == sum(LENGTHS)
    assert len(parses) == 1  # one source, parsed once
    _frames(StreamingLeRobotDataset(root=root))
    assert len(parses) == 1  # recorded beside the derived index: not parsed again
