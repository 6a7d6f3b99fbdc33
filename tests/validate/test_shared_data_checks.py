"""What the new-user break-it trial found: checks training and ``lerobotstream-validate`` share.

One row of ``observation.state`` 4 values wide where info.json says 6 streamed as a (4,) item
(then a bare collate error); a row's ``index`` of 999 and a camera declared 96x128 over a 64x48
video streamed on while validate said ``error``; a video that is a symlink loop, a folder or
``/dev/null`` was "missing"; a permission-denied MP4 got "re-encode or re-download the MP4"; an
unreadable ``meta/episodes/chunk-000`` folder was "no episode metadata ... not found"."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pyarrow as pa
import pytest

from lerobotstream import StreamingLeRobotDataset
from lerobotstream.errors import EpisodeDataError, MetadataError, MetadataReadError, SidecarValidationError
from lerobotstream.meta import DatasetMeta
from lerobotstream.validate import validate_dataset
from lerobotstream.validate.__main__ import main as validate_main
from lerobotstream.validate._findings import CODES
from tests.validate._defects import (
    CAM,
    PLANTED,
    copy,
    data_file,
    replace_file,
    set_feature,
    set_row_width,
    set_value,
    video_file,
)

DATA0 = "data/chunk-000/file-000.parquet"
VIDEO0 = f"videos/{CAM}/chunk-000/file-000.mp4"


def _stream(root: Path) -> None:
    for _ in StreamingLeRobotDataset(root=root, episode_pool_size=2):
        pass


@pytest.fixture
def planted(make_generated_dataset, tmp_path) -> Path:
    return copy(Path(make_generated_dataset(**PLANTED)), tmp_path / "ds")


# --- 1. one row of the wrong width -----------------------------------------------------------------
def test_one_short_row_is_refused_naming_episode_feature_row_and_file(planted):
    set_row_width(planted, 0, 3, "observation.state", 4)
    with pytest.raises(EpisodeDataError) as e:
        _stream(planted)
    assert str(e.value).startswith(
        f"episode 0, file {DATA0}: column 'observation.state' row 3 (frame_index 3) holds 4 values but "
        "meta/info.json declares shape [6]"
    )
    assert (e.value.episode_index, e.value.column, e.value.frame_index, e.value.path) == (
        0,
        "observation.state",
        3,
        DATA0,
    )


def test_row_off_shape_reads_list_lengths_only():
    from lerobotstream.features import row_off_shape

    f32 = pa.float32()
    assert row_off_shape(pa.array([[1.0] * 6] * 3, pa.list_(f32)), [6]) is None
    assert row_off_shape(pa.array([[1.0] * 6, [1.0] * 4, [1.0] * 6], pa.list_(f32)), [6]) == (1, 0, 4)
    assert row_off_shape(pa.array([[1.0] * 6] * 2, pa.list_(f32, 6)), [6]) is None  # fixed size: no look
    # rows all of one (wrong) shape: row_shape_matches decides, on the converted array
    assert row_off_shape(pa.array([[1.0] * 4] * 3, pa.list_(f32)), [6]) is None
    assert row_off_shape(pa.array([[1.0] * 4] * 2, pa.list_(f32, 4)), [6]) is None
    chunked = pa.chunked_array([pa.array([[1.0] * 6] * 5, pa.list_(f32)), pa.array([[1.0] * 6, [1.0]], pa.list_(f32))])
    assert row_off_shape(chunked, [6]) == (6, 0, 1)  # rows counted across chunks
    nested = pa.array([[[1, 2, 3]] * 2, [[1, 2, 3], [1, 2]], [[1, 2, 3]] * 2], pa.list_(pa.list_(pa.int64())))
    assert row_off_shape(nested, [2, 3]) == (1, 1, 2)  # row 1's second list holds 2
    assert row_off_shape(pa.array([1.0, 2.0]), [1]) is None  # a scalar column: the converted array decides
    language = pa.array([[{"a": 1}, {"a": 2}]], pa.list_(pa.struct([("a", pa.int64())])))
    assert row_off_shape(language, [1]) is None  # not numeric: kept as rows of dicts


# --- 3a. an index value that is not dataset_from_index + frame_index -------------------------------
@pytest.mark.parametrize("value", [999, 7])  # the trial's; a value inside the file's range (no statistic shows it)
def test_a_wrong_index_value_is_refused(planted, value):
    set_value(planted, 0, 6, "index", value)
    with pytest.raises(EpisodeDataError) as e:
        _stream(planted)
    assert str(e.value).startswith(
        f"episode 0, file {DATA0}: row 6 (frame_index 6) has index {value}, dataset_from_index + frame_index is 6"
    )
    assert (e.value.episode_index, e.value.path) == (0, DATA0)
    (found,) = validate_dataset(root=planted).errors
    assert found.code == "data_index_range" and found.episodes == [0]


# --- 3b. a camera's declared shape that is not its video's -----------------------------------------
def test_a_declared_frame_size_the_video_lacks_is_refused_at_construction(make_generated_dataset, tmp_path):
    root = copy(Path(make_generated_dataset(episode_lengths=(6, 5))), tmp_path / "ds")
    next(iter(StreamingLeRobotDataset(root=root)))  # sidecar built, validated and the validation noted
    set_feature(root, CAM, shape=[96, 128, 3])
    with pytest.raises(SidecarValidationError) as e:  # the noted validation does not cover the new shape
        StreamingLeRobotDataset(root=root)
    assert (
        f"file {VIDEO0}: the video's frames are 64x48 (width x height) but meta/info.json declares shape "
        f"[96, 128, 3] for {CAM} (height 96, width 128)" in str(e.value)
    )
    assert (e.value.camera, e.value.path) == (CAM, VIDEO0)
    (found,) = validate_dataset(root=root).errors
    assert found.code == "shape_mismatch" and found.file == VIDEO0 and found.episodes == [0, 1]


def test_channel_first_and_depth_shapes_are_read_as_declared(make_generated_dataset, tmp_path):
    root = copy(
        Path(
            make_generated_dataset(
                episode_lengths=(6, 5), depth_cameras=(("observation.images.depth", 64, 48),), codec="hevc"
            )
        ),
        tmp_path / "ds",
    )
    set_feature(root, CAM, shape=[3, 48, 64], names=["channels", "height", "width"])
    ds = StreamingLeRobotDataset(root=root)
    item = next(iter(ds))
    assert tuple(item[CAM].shape) == (3, 48, 64) and tuple(item["observation.images.depth"].shape) == (1, 48, 64)
    set_feature(root, "observation.images.depth", shape=[64, 48, 1])  # height and width swapped
    with pytest.raises(SidecarValidationError, match=r"declares shape \[64, 48, 1\] for observation\.images\.depth"):
        StreamingLeRobotDataset(root=root)


# --- 2. a data or video file that is there but cannot be read --------------------------------------
@pytest.mark.parametrize(
    "how, reason",
    [
        ("loop", "Too many levels of symbolic links (ELOOP)"),
        ("folder", "Is a directory (EISDIR)"),
        ("dev_null", "not a regular file (a character device)"),
    ],
)
@pytest.mark.parametrize("which", ["video", "data"])
def test_a_file_there_but_unreadable_is_not_missing(planted, how, reason, which):
    path = VIDEO0 if which == "video" else DATA0
    replace_file(video_file(planted, 0) if which == "video" else data_file(planted, 0), how)
    what = f"camera '{CAM}' video" if which == "video" else "data file"
    with pytest.raises(MetadataReadError) as e:
        DatasetMeta.load(planted)
    assert isinstance(e.value, OSError) and isinstance(e.value, MetadataError)
    assert str(e.value) == (
        f"episode 0: {what} {planted}/{path} is there but cannot be read: {reason} "
        f"(referenced by {planted}/meta/episodes/chunk-000/file-000.parquet)"
    )
    assert (e.value.code, e.value.path, e.value.episodes, e.value.reason) == (
        "file_unreadable",
        path,
        [0, 1, 2, 3],
        reason,
    )
    assert e.value.camera == (CAM if which == "video" else None)
    (found,) = validate_dataset(root=planted).errors  # once, not again as video_unreadable
    assert found.code == "file_unreadable" and found.file == path and found.episodes == [0, 1, 2, 3]
    assert found.message.endswith(f"— fix: {CODES['file_unreadable'][1]}")


def test_a_missing_file_is_still_missing(planted):
    video_file(planted, 0).unlink()
    with pytest.raises(MetadataError, match=r"file-000\.mp4 is missing") as e:
        DatasetMeta.load(planted)
    assert not isinstance(e.value, MetadataReadError) and e.value.code == "file_missing"


def test_an_fsspec_symlink_loop_is_unreadable_too(planted):
    from lerobotstream.sources._fsspec import FsspecSource

    replace_file(video_file(planted, 0), "loop")
    with pytest.raises(MetadataReadError, match=r"is there but cannot be read: Too many levels of symbolic links"):
        DatasetMeta.load(FsspecSource(f"file://{planted}"))


# --- 4. messages -----------------------------------------------------------------------------------
def _deny(monkeypatch, name: str, suffix: str) -> None:
    """``os.<name>`` is refused (EACCES) for a path ending with ``suffix``, as for a user without
    the permission (the suite may run as root, which chmod does not stop)."""
    real = getattr(os, name)

    def fake(target, *args, **kwargs):
        if str(target).endswith(suffix):
            raise PermissionError(errno.EACCES, "Permission denied", str(target))
        return real(target, *args, **kwargs)

    monkeypatch.setattr(os, name, fake)


def test_a_permission_denied_mp4_gets_a_permission_hint(planted, monkeypatch):
    _deny(monkeypatch, "open", VIDEO0)
    (found,) = validate_dataset(root=planted).errors
    assert found.code == "file_unreadable" and found.file == VIDEO0 and found.episodes == [0, 1, 2, 3]
    assert "Permission denied (EACCES)" in found.message and "re-encode" not in found.message
    assert "fix its permissions" in found.message


def test_a_permission_denied_data_file_gets_a_permission_hint(planted, monkeypatch):
    _deny(monkeypatch, "open", DATA0)
    (found,) = validate_dataset(root=planted).errors
    assert found.code == "file_unreadable" and found.file == DATA0 and "Permission denied (EACCES)" in found.message


def test_an_episode_folder_that_cannot_be_listed_is_a_read_error(planted, monkeypatch, capsys):
    _deny(monkeypatch, "scandir", "meta/episodes/chunk-000")
    with pytest.raises(MetadataReadError) as e:
        DatasetMeta.load(planted)
    assert str(e.value) == (
        f"could not read the episode metadata folder {planted}/meta/episodes/chunk-000: Permission denied (EACCES)"
    )
    assert e.value.path == "meta/episodes/chunk-000" and e.value.errno == errno.EACCES
    assert validate_main([str(planted)]) == 2
    assert capsys.readouterr().err.startswith("error: MetadataReadError: could not read the episode metadata folder")


def test_a_video_size_only_info_json_states_is_a_warning(planted):
    """``video.height``/``video.width`` off the file's, with no 3-d ``shape`` to hold the frames to:
    training reads the file's size (nothing refuses it), so the validator warns, it does not fail."""
    import json

    info = json.loads((planted / "meta/info.json").read_text())
    feat = info["features"][CAM]
    set_feature(planted, CAM, shape=None, info={**(feat.get("info") or {}), "video.height": 999})
    report = validate_dataset(root=planted)
    assert report.ok, [(f.code, f.message) for f in report.errors]
    found = [f for f in report.warnings if f.code == "shape_mismatch"]  # one per file of the camera
    assert VIDEO0 in {f.file for f in found} and all("video.height=999 in info.json" in f.message for f in found)
