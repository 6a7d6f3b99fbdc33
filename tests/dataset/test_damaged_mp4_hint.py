"""A damaged MP4 met by training (the sidecar build, at construction) names the file and points to
``lerobotstream-validate``, which names every damaged file and the episodes to train on."""

from __future__ import annotations

from pathlib import Path

import pytest

from lerobotstream import StreamingLeRobotDataset
from lerobotstream.errors import Mp4Error
from lerobotstream.testing import make_dataset


def test_a_truncated_mp4_points_to_the_validator(tmp_path):
    root = make_dataset(tmp_path / "ds", episode_lengths=[12, 9], cameras=(("observation.images.front", 64, 48),))
    mp4 = sorted(Path(root).rglob("*.mp4"))[0]
    data = mp4.read_bytes()
    mp4.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(Mp4Error) as ei:
        StreamingLeRobotDataset(root=root)
    msg = str(ei.value)
    assert "file-000.mp4" in msg and f"lerobotstream-validate {root}" in msg and "--print-good-episodes" in msg
    assert ei.value.path  # the fields survive the longer message
