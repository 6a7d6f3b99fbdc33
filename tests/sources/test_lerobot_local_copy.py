"""LeRobot's local-copy rule with ``root`` unset (issue 29, new-user item 1): ``$HF_LEROBOT_HOME/<repo_id>``
first, then the Hub, for the dataset, the mixture, the profiler and the sidecar CLI (one rule:
``sources.lerobot_local_copy`` inside ``open_source``). ``lerobotstream-train`` is tested in
tests_lerobot/test_train_cli.py. No network: the Hub is never reached (``HF_HUB_OFFLINE=1``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lerobotstream import StreamingLeRobotDataset, StreamingMultiLeRobotDataset, constants
from lerobotstream.errors import SourceError, StreamingConfigError
from lerobotstream.sources import open_source
from lerobotstream.sources._local import LocalSource
from lerobotstream.sources._open import lerobot_local_copy

CAM = ("observation.images.front", 32, 32)


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A private ``$HF_LEROBOT_HOME`` (the module constant, as the library reads it)."""
    h = tmp_path / "hf_lerobot"
    h.mkdir()
    monkeypatch.setattr(constants, "HF_LEROBOT_HOME", h)
    return h


@pytest.fixture(scope="module")
def tiny(make_generated_dataset) -> Path:
    return Path(make_generated_dataset(repo_id="local/tiny", episode_lengths=(6, 5), cameras=(CAM,)))


@pytest.fixture(scope="module")
def tiny10(make_generated_dataset) -> Path:
    return Path(make_generated_dataset(repo_id="local/tiny10", episode_lengths=(4, 3), fps=10, cameras=(CAM,)))


def _copy(src: Path, home: Path, repo_id: str) -> Path:
    dest = home / repo_id
    shutil.copytree(src, dest)
    return dest


def test_the_rule_follows_lerobot(home, tiny):
    assert lerobot_local_copy("local/tiny") is None  # nothing there: the Hub
    dest = _copy(tiny, home, "local/tiny")
    assert lerobot_local_copy("local/tiny") == dest
    assert lerobot_local_copy("local/tiny", "bucket") is None  # buckets: LeRobot caches meta/ only
    (dest / ".cache" / "huggingface" / "download").mkdir(parents=True)
    assert lerobot_local_copy("local/tiny") is None  # a legacy local_dir mirror: LeRobot re-fetches it
    shutil.rmtree(dest / ".cache")
    (dest / "meta" / "info.json").unlink()
    assert lerobot_local_copy("local/tiny") is None  # no metadata: not a copy


def test_open_source_uses_the_local_copy_whatever_the_revision(home, tiny):
    dest = _copy(tiny, home, "local/tiny")
    for revision in (None, "v3.0", "1" * 40):  # as LeRobot: a local copy is not checked against a revision
        src = open_source(repo_id="local/tiny", revision=revision)
        assert isinstance(src, LocalSource) and src.root == dest.resolve()
    other = open_source(tiny, repo_id="local/tiny")  # root given: that folder, as LeRobot
    assert other.root == tiny.resolve()


def test_a_repo_id_without_owner_is_refused_unless_a_local_copy_exists(home, tiny):
    with pytest.raises(StreamingConfigError) as ei:
        open_source(repo_id="tiny")
    msg = str(ei.value)
    assert "'tiny'" in msg and "OWNER/NAME" in msg and str(home / "tiny") in msg and "root=" in msg
    dest = _copy(tiny, home, "tiny")
    assert open_source(repo_id="tiny").root == dest.resolve()


def test_no_local_copy_goes_to_the_hub(home):
    with pytest.raises(SourceError, match="offline"):  # HF_HUB_OFFLINE=1 in the tests: the Hub was tried
        open_source(repo_id="lerobot/not-here")


def test_dataset_and_mixture_find_the_local_copies(home, tiny, tiny10):
    _copy(tiny, home, "local/tiny")
    _copy(tiny10, home, "local/tiny10")
    ds = StreamingLeRobotDataset("local/tiny")
    assert ds.num_frames == 11 and ds.meta.source.root == (home / "local/tiny").resolve()
    assert sorted((int(x["episode_index"]), int(x["frame_index"])) for x in ds) == [(0, f) for f in range(6)] + [
        (1, f) for f in range(5)
    ]
    mix = StreamingMultiLeRobotDataset(["local/tiny", "local/tiny10"])
    assert mix.num_frames == 18 and len(list(mix)) == 18
    assert mix.fps == 30 and [d.fps for d in mix.datasets] == [30, 10]  # documented: the first dataset's


def test_profiler_finds_the_local_copy(home, tiny, tmp_path, capsys):
    from lerobotstream.profile.__main__ import main as profile_main

    _copy(tiny, home, "local/tiny")
    out = tmp_path / "r.json"
    assert (
        profile_main(
            [
                "--repo-id",
                "local/tiny",
                "--num-workers",
                "0",
                "--batch-size",
                "2",
                "--steps",
                "2",
                "--json",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["throughput"]["samples"] == 4


def test_sidecar_cli_builds_from_the_local_copy(home, tiny, tmp_path, capsys):
    from lerobotstream.sidecar.__main__ import main as sidecar_main
    from lerobotstream.sidecar._archive import load_manifest

    dest = _copy(tiny, home, "local/tiny")
    out = tmp_path / "s.npz"
    assert sidecar_main(["build", "--repo-id", "local/tiny", "--output", str(out), "--no-progress"]) == 0
    m = load_manifest(str(out))
    assert m["repo_id"] == "local/tiny" and m["data_root"] == str(dest.resolve())
    capsys.readouterr()
    assert sidecar_main(["build", "--output", str(out)]) == 2  # no --root, --data-root nor --repo-id
    assert "give --root FOLDER, --data-root URL or --repo-id" in capsys.readouterr().err
