"""lerobotstream.meta: the LeRobot v3 metadata reader on bundled, generated, real and broken inputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerobotstream.errors import MetadataError, UnsupportedDatasetVersionError
from lerobotstream.meta import DatasetMeta, EpisodeVideo
from lerobotstream.sources._local import LocalSource

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "data" / "g1_v30"
CAM = "observation.images.cam_high"


# --- bundled real dataset ---------------------------------------------------------------------------
def test_bundled_dataset():
    meta = DatasetMeta.load(LocalSource(BUNDLED))
    assert meta.fps == 30 and meta.codebase_version == "v3.0"
    assert meta.camera_keys == [CAM] and meta.video_keys == [CAM] and meta.image_keys == []
    assert meta.total_episodes == 2 and meta.total_frames == 736 and meta.warnings == []
    assert meta.episode_lengths.tolist() == [393, 343] and meta.episode_lengths.dtype == np.int64
    ep0, ep1 = meta.episodes
    assert (ep0.dataset_from_index, ep0.dataset_to_index, ep1.dataset_from_index, ep1.dataset_to_index) == (
        0,
        393,
        393,
        736,
    )
    path = f"videos/{CAM}/chunk-000/file-000.mp4"
    assert ep0.videos[CAM] == EpisodeVideo(path, 0, 0, 0.0, pytest.approx(13.1))
    assert ep1.videos[CAM].from_timestamp == pytest.approx(13.1) and ep1.videos[CAM].to_timestamp == pytest.approx(
        13.1 + 11.433333, abs=1e-5
    )
    assert meta.video_paths() == [path] and meta.data_paths() == ["data/chunk-000/file-000.parquet"]
    assert meta.tasks == ["Pick up the yellow bottle on the table."] and meta.task_index(meta.tasks[0]) == 0
    assert ep0.tasks == (meta.tasks[0],)
    assert meta.shapes[CAM] == (480, 640, 3) and meta.shapes["observation.state"] == (26,)
    assert len(meta.names["observation.state"][0]) == 26
    assert set(meta.stats) >= {"observation.state", "action", CAM}
    assert meta.episode(1) == ep1  # rows are columns: each EpisodeInfo is built when asked for
    # a path works as well as a source
    assert DatasetMeta.load(BUNDLED).episode_lengths.tolist() == [393, 343]


def test_bundled_episode_matches_data_rows():
    meta = DatasetMeta.load(BUNDLED)
    table = pq.read_table(
        BUNDLED / meta.episodes[1].data_path, columns=["episode_index", "index", "frame_index"]
    ).to_pydict()
    ep = meta.episodes[1]
    rows = [i for i, e in enumerate(table["episode_index"]) if e == 1]
    assert len(rows) == ep.length
    assert table["index"][rows[0]] == ep.dataset_from_index and table["index"][rows[-1]] == ep.dataset_to_index - 1


def test_subset_selection_and_unknown_episode():
    meta = DatasetMeta.load(BUNDLED, episodes=[1, 1])
    assert [e.episode_index for e in meta.episodes] == [1] and meta.num_frames == 343 and meta.total_episodes == 2
    with pytest.raises(MetadataError, match="not in the selection"):
        meta.episode(0)
    with pytest.raises(MetadataError, match=r"episodes \[5\] are not in"):
        DatasetMeta.load(BUNDLED, episodes=[0, 5])


# --- generated datasets ------------------------------------------------------------------------------
def test_generated_three_cameras_many_files_chunks_and_shards(make_generated_dataset):
    cams = (("observation.images.a", 64, 48), ("observation.images.b", 32, 24), ("observation.images.c", 64, 48))
    root = make_generated_dataset(
        episode_lengths=(5, 6, 7, 8, 9),
        cameras=cams,
        codec="h264",
        episodes_per_video_file=2,
        episodes_per_data_file=2,
        episodes_meta_per_file=2,
        chunks_size=2,
        tasks=("t0", "t1", "t2"),
    )
    meta = DatasetMeta.load(root)
    assert meta.video_keys == [c[0] for c in cams]
    assert meta.episode_lengths.tolist() == [5, 6, 7, 8, 9] and meta.total_frames == 35
    assert meta.tasks == ["t0", "t1", "t2"] and [e.tasks for e in meta.episodes][3] == ("t0",)
    assert len({e.shard for e in meta.episodes}) == 3  # read every meta/episodes shard
    assert [e.data_path for e in meta.episodes] == [
        "data/chunk-000/file-000.parquet",
        "data/chunk-000/file-000.parquet",
        "data/chunk-000/file-001.parquet",
        "data/chunk-000/file-001.parquet",
        "data/chunk-001/file-000.parquet",
    ]
    v = [e.videos["observation.images.b"] for e in meta.episodes]
    assert [(x.chunk_index, x.file_index) for x in v] == [(0, 0), (0, 0), (0, 1), (0, 1), (1, 0)]
    assert v[1].from_timestamp == pytest.approx(5 / 30) and v[1].to_timestamp == pytest.approx(11 / 30)
    assert v[2].from_timestamp == 0.0
    assert len(meta.video_paths()) == 9
    sub = DatasetMeta.load(root, episodes=[4, 2])
    assert [e.episode_index for e in sub.episodes] == [2, 4]
    assert sub.video_paths() == sorted({e.videos[k].path for e in sub.episodes for k in sub.video_keys})


def test_generated_one_camera_column_form_tasks(make_generated_dataset):
    root = make_generated_dataset(tasks=("x", "y"), tasks_parquet_form="column")
    assert pq.read_table(root / "meta/tasks.parquet").column_names == ["task_index", "task"]
    meta = DatasetMeta.load(root)
    assert meta.tasks == ["x", "y"] and meta.camera_keys == ["observation.images.front"]
    assert meta.shapes["observation.images.front"] == (48, 64, 3)


# --- real v3 metadata (no MP4s, inconsistent info.json totals) ---------------------------------------
def test_real_v30_rerun_metadata(testdata):
    root = testdata / "lerobot-v30-rerun-apple-storage"
    with pytest.warns(UserWarning, match="total_frames=14983"):
        meta = DatasetMeta.load(root, check_files=False)
    assert meta.total_frames == 899 and meta.total_episodes == 3
    assert any("splits.train" in w for w in meta.warnings)
    assert meta.episode_lengths.tolist() == [299, 300, 300]
    assert [(e.dataset_from_index, e.dataset_to_index) for e in meta.episodes] == [(0, 299), (299, 599), (599, 899)]
    assert [e.videos["observation.image"].from_timestamp for e in meta.episodes] == pytest.approx(
        [0.0, 9.9667, 19.9667], abs=1e-4
    )
    assert meta.tasks == ["place the apple in the plate"]
    assert meta.shapes["observation.image"] == (3, 720, 960)
    # the MP4 is not in the snapshot: the default file check names it
    with (
        pytest.warns(UserWarning),
        pytest.raises(MetadataError, match=r"episode 0: camera 'observation.image' video .*file-000.mp4 is missing"),
    ):
        DatasetMeta.load(root)


# --- broken inputs: one per validation error ----------------------------------------------------------
@pytest.fixture
def broken(tmp_path, make_generated_dataset):
    """A writable copy of a small generated dataset (3 episodes, 2 meta/episodes shards)."""
    src = make_generated_dataset(episode_lengths=(3, 4, 5), episodes_meta_per_file=2, codec="h264")
    dst = tmp_path / "ds"
    shutil.copytree(src, dst)
    return dst


def _edit_info(root, **changes):
    p = root / "meta/info.json"
    info = json.loads(p.read_text())
    info.update(changes)
    p.write_text(json.dumps(info))


def _edit_shard(root, shard, fn):
    p = root / shard
    t = pq.read_table(p).to_pydict()
    fn(t)
    pq.write_table(pa.table(t), p)


SHARD0 = "meta/episodes/chunk-000/file-000.parquet"
SHARD1 = "meta/episodes/chunk-000/file-001.parquet"


def test_v21_rejected_with_conversion_hint(testdata):
    with pytest.raises(UnsupportedDatasetVersionError, match="v2.1.*convert_dataset_v21_to_v30"):
        DatasetMeta.load(testdata / "lerobot-v21-g1-subset")


def test_missing_codebase_version(broken):
    _edit_info(broken, codebase_version=None)
    with pytest.raises(UnsupportedDatasetVersionError):
        DatasetMeta.load(broken)


def test_missing_info(broken):
    (broken / "meta/info.json").unlink()
    with pytest.raises(MetadataError, match="meta/info.json is missing"):
        DatasetMeta.load(broken)


def test_bad_info_json(broken):
    (broken / "meta/info.json").write_text("{not json")
    with pytest.raises(MetadataError, match="not valid JSON"):
        DatasetMeta.load(broken)


def test_missing_shard_is_detected(broken):
    (broken / SHARD1).unlink()
    with pytest.raises(MetadataError, match="total_episodes=3.*episodes 2..2 are missing"):
        DatasetMeta.load(broken)


def test_no_shards(broken):
    shutil.rmtree(broken / "meta/episodes")
    with pytest.raises(MetadataError, match="no episode metadata"):
        DatasetMeta.load(broken)


def test_corrupt_shard(broken):
    (broken / SHARD1).write_bytes(b"garbage")
    with pytest.raises(MetadataError, match="file-001.parquet is not a readable Parquet"):
        DatasetMeta.load(broken)


def test_length_disagrees_with_index_range(broken):
    _edit_shard(broken, SHARD0, lambda t: t["length"].__setitem__(1, 99))
    with pytest.raises(MetadataError, match=r"episode 1 in .*file-000.parquet: length 99 disagrees") as exc:
        DatasetMeta.load(broken)
    assert exc.value.episode_index == 1


def test_duplicate_episode_index(broken):
    _edit_shard(broken, SHARD1, lambda t: t["episode_index"].__setitem__(0, 1))
    with pytest.raises(MetadataError, match="episode 1 appears twice.*file-000.parquet.*file-001.parquet"):
        DatasetMeta.load(broken)


def test_gap_in_episode_indices(broken):
    _edit_shard(broken, SHARD1, lambda t: t["episode_index"].__setitem__(0, 7))
    with pytest.raises(MetadataError, match=r"missing episodes \[2"):
        DatasetMeta.load(broken)


def test_overlapping_ranges(broken):
    def fn(t):
        t["dataset_from_index"][1] = 2
        t["dataset_to_index"][1] = 6

    _edit_shard(broken, SHARD0, fn)
    with pytest.raises(MetadataError, match="episode 1 .* overlaps"):
        DatasetMeta.load(broken)


def test_missing_video_column(broken):
    _edit_shard(broken, SHARD0, lambda t: t.pop("videos/observation.images.front/from_timestamp"))
    with pytest.raises(MetadataError, match="file-000.parquet lacks the columns"):
        DatasetMeta.load(broken)


def test_bad_video_window(broken):
    _edit_shard(broken, SHARD0, lambda t: t["videos/observation.images.front/to_timestamp"].__setitem__(0, -1.0))
    with pytest.raises(MetadataError, match="episode 0, camera 'observation.images.front': bad video window"):
        DatasetMeta.load(broken)


def test_missing_video_file(broken):
    next((broken / "videos").rglob("*.mp4")).unlink()
    with pytest.raises(MetadataError, match="episode 0: camera 'observation.images.front' video .* is missing"):
        DatasetMeta.load(broken)
    assert DatasetMeta.load(broken, check_files=False).total_episodes == 3


def test_missing_data_file(broken):
    (broken / "data/chunk-000/file-000.parquet").unlink()
    with pytest.raises(MetadataError, match="episode 0: data file .* is missing"):
        DatasetMeta.load(broken)


def test_missing_tasks(broken):
    (broken / "meta/tasks.parquet").unlink()
    with pytest.raises(MetadataError, match="tasks file is missing"):
        DatasetMeta.load(broken)


def test_episode_shards_without_a_tasks_column(broken):
    for shard in sorted((broken / "meta/episodes").rglob("*.parquet")):
        pq.write_table(pq.read_table(shard).drop(["tasks"]), shard)
    meta = DatasetMeta.load(broken)
    assert len(meta.episodes) == 3 and all(ep.tasks == () for ep in meta.episodes)


def test_episode_tasks_missing_from_the_tasks_file_are_noted(broken):
    pq.write_table(pa.table({"task_index": [0], "task": ["another task"]}), broken / "meta/tasks.parquet")
    with pytest.warns(UserWarning, match="task 'pick the cube' of an episode is not in .*tasks.parquet"):
        meta = DatasetMeta.load(broken)
    assert meta.tasks == ["another task"] and len(meta.warnings) == 1


def test_tasks_without_strings(broken):
    pq.write_table(pa.table({"task_index": [0]}), broken / "meta/tasks.parquet")
    with pytest.raises(MetadataError, match="tasks.parquet needs"):
        DatasetMeta.load(broken)


def test_stats_optional(broken):
    (broken / "meta/stats.json").unlink()
    assert DatasetMeta.load(broken).stats == {}


def test_bad_fps(broken):
    _edit_info(broken, fps=0)
    with pytest.raises(MetadataError, match="fps must be a positive integer"):
        DatasetMeta.load(broken)


def test_error_survives_pickling(broken):
    import pickle

    _edit_shard(broken, SHARD0, lambda t: t["length"].__setitem__(1, 99))
    with pytest.raises(MetadataError) as exc:
        DatasetMeta.load(broken)
    again = pickle.loads(pickle.dumps(exc.value))
    assert type(again) is MetadataError and again.episode_index == 1 and "episode 1" in str(again)


def test_stats_columns_are_not_read(make_generated_dataset, monkeypatch):
    root = make_generated_dataset(episode_lengths=(3, 4, 5), episodes_meta_per_file=2, codec="h264")
    seen = []
    orig = pq.ParquetFile.read

    def spy(self, columns=None, **kw):
        seen.append(columns)
        return orig(self, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read", spy)
    DatasetMeta.load(root)
    shard_reads = [c for c in seen if c is not None]
    assert shard_reads and all(not any(name.startswith("stats/") for name in cols) for cols in shard_reads)


def test_demo_summary_runs(capsys):
    from tools.demo import main

    assert main([str(BUNDLED), "--summary-only"]) == 0
    out = capsys.readouterr().out
    assert "episodes    2 selected of 2" in out and "av1 640x480" in out and "file-000.mp4" in out


def test_converter_reproduces_bundled(testdata, tmp_path):
    from lerobotstream.testing import convert_v21_to_v30 as convert

    out = convert(testdata / "lerobot-v21-g1-subset", tmp_path / "g1")
    meta = DatasetMeta.load(out)
    ref = DatasetMeta.load(BUNDLED)
    assert [(e.length, e.dataset_from_index, e.videos[CAM].from_timestamp) for e in meta.episodes] == [
        (e.length, e.dataset_from_index, e.videos[CAM].from_timestamp) for e in ref.episodes
    ]
    mp4 = (out / meta.video_paths()[0]).stat().st_size
    # stream copy: the concatenated file is about the sum of the two source MP4s (3797465 + 3275072 bytes)
    assert abs(mp4 - (3797465 + 3275072)) < 20000
    assert json.loads((out / "meta/episode_index_map.json").read_text())["new_to_original"] == {"0": 1, "1": 2}
