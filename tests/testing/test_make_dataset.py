"""lerobotstream.testing.make_dataset: LeRobot v3 layout, burned-in identities, roll-over, timestamps."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from lerobotstream.testing import identity_frame, make_dataset, read_identity

torchcodec_decoders = pytest.importorskip("torchcodec.decoders")


def _episode_rows(root):
    rows = []
    for shard in sorted(root.glob("meta/episodes/chunk-*/file-*.parquet")):
        rows += pq.read_table(shard).to_pylist()
    return sorted(rows, key=lambda r: r["episode_index"])


@pytest.mark.parametrize("shape", [(48, 64), (71, 97), (12, 16), (480, 640)])
def test_identity_roundtrip_exact_and_layouts(shape):
    h, w = shape
    frame = identity_frame(513, 4097, 7, h, w)
    assert frame.shape == (h, w, 3) and frame.dtype == np.uint8
    assert read_identity(frame) == (513, 4097, 7)
    assert read_identity(np.moveaxis(frame, -1, 0)) == (513, 4097, 7)  # (C, H, W)
    assert read_identity(frame.astype(np.float32) / 255.0) == (513, 4097, 7)  # float [0, 1]
    assert read_identity(frame[:, :, 0]) == (513, 4097, 7)  # grey (H, W)
    torch = pytest.importorskip("torch")
    assert read_identity(torch.from_numpy(np.moveaxis(frame, -1, 0).copy())) == (513, 4097, 7)


def test_identity_rejects_non_frames():
    for bad in (np.zeros((48, 64, 3), np.uint8), np.full((48, 64, 3), 255, np.uint8)):
        with pytest.raises(ValueError, match="checksum"):
            read_identity(bad)
    frame = identity_frame(1, 2, 0, 48, 64)
    frame[:8, :8] = 255 - frame[:8, :8]  # flip one cell
    with pytest.raises(ValueError, match="checksum"):
        read_identity(frame)
    blend = (identity_frame(1, 2, 0, 48, 64).astype(np.uint16) + identity_frame(1, 3, 0, 48, 64)) // 2
    with pytest.raises(ValueError):
        read_identity(blend.astype(np.uint8))
    with pytest.raises(ValueError):
        identity_frame(70000, 0, 0, 48, 64)


CODEC_CASES = [
    (
        "av1",
        (("observation.images.front", 64, 48), ("observation.images.odd", 97, 71), ("observation.images.big", 64, 64)),
    ),
    ("h264", (("observation.images.front", 64, 48),)),
    ("hevc", (("observation.images.front", 64, 48),)),
]


@pytest.mark.parametrize("codec,cameras", CODEC_CASES, ids=[c[0] for c in CODEC_CASES])
def test_every_decoded_frame_carries_its_identity(make_generated_dataset, codec, cameras):
    """Decode every file sequentially; each frame's identity matches the episode window that
    meta/episodes assigns to its timestamp."""
    root = make_generated_dataset(codec=codec, cameras=cameras, episodes_per_video_file=2)
    rows = _episode_rows(root)
    info = json.loads((root / "meta/info.json").read_text())
    fps = info["fps"]
    for cam_idx, (key, w, h) in enumerate(cameras):
        files = {}
        for r in rows:
            path = info["video_path"].format(
                video_key=key, chunk_index=r[f"videos/{key}/chunk_index"], file_index=r[f"videos/{key}/file_index"]
            )
            files.setdefault(path, []).append(r)
        assert len(files) == 2  # rolled over after two episodes
        for path, eps in files.items():
            dec = torchcodec_decoders.VideoDecoder(str(root / path))
            assert (dec.metadata.width, dec.metadata.height) == (w, h)
            expected = [(r["episode_index"], i, cam_idx) for r in eps for i in range(r["length"])]
            assert dec.metadata.num_frames == len(expected)
            for k, want in enumerate(expected):
                frame = dec.get_frame_at(k)
                assert read_identity(frame.data) == want, (path, k)
                ep_row = eps[[r["episode_index"] for r in eps].index(want[0])]
                # from_timestamp + frame_index / fps is the frame's pts in the concatenated file
                assert abs(ep_row[f"videos/{key}/from_timestamp"] + want[1] / fps - frame.pts_seconds) < 1e-4


def test_layout_tables_and_rollover(make_generated_dataset):
    root = make_generated_dataset(
        episode_lengths=(5, 6, 7, 8, 9),
        cameras=(("observation.images.front", 64, 48),),
        codec="h264",
        episodes_per_video_file=1,
        episodes_per_data_file=2,
        episodes_meta_per_file=2,
        chunks_size=2,
        tasks=("a", "b"),
    )
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    assert info["total_episodes"] == 5 and info["total_frames"] == 35 and info["total_tasks"] == 2
    assert info["splits"] == {"train": "0:5"}
    assert info["features"]["observation.images.front"]["info"]["video.codec"] == "h264"
    videos = sorted(p.relative_to(root).as_posix() for p in root.glob("videos/**/*.mp4"))
    assert videos == [
        "videos/observation.images.front/chunk-000/file-000.mp4",
        "videos/observation.images.front/chunk-000/file-001.mp4",
        "videos/observation.images.front/chunk-001/file-000.mp4",
        "videos/observation.images.front/chunk-001/file-001.mp4",
        "videos/observation.images.front/chunk-002/file-000.mp4",
    ]
    assert len(list(root.glob("data/chunk-*/file-*.parquet"))) == 3
    assert len(list(root.glob("meta/episodes/chunk-*/file-*.parquet"))) == 3
    rows = _episode_rows(root)
    assert [r["dataset_from_index"] for r in rows] == [0, 5, 11, 18, 26]
    assert all(r["dataset_to_index"] - r["dataset_from_index"] == r["length"] for r in rows)
    assert all(r["videos/observation.images.front/from_timestamp"] == 0.0 for r in rows)
    assert [r["tasks"] for r in rows] == [["a"], ["b"], ["a"], ["b"], ["a"]]
    # data rows encode their identity
    for r in rows:
        path = info["data_path"].format(chunk_index=r["data/chunk_index"], file_index=r["data/file_index"])
        t = pq.read_table(root / path).to_pydict()
        sel = [i for i, e in enumerate(t["episode_index"]) if e == r["episode_index"]]
        assert len(sel) == r["length"]
        for j, i in enumerate(sel):
            assert t["frame_index"][i] == j and t["index"][i] == r["dataset_from_index"] + j
            assert t["observation.state"][i][:3] == [r["episode_index"], j, r["dataset_from_index"] + j]
            assert t["task_index"][i] == r["episode_index"] % 2
    tasks = pq.read_table(root / "meta/tasks.parquet")
    assert tasks.column_names == ["task_index", "__index_level_0__"]
    stats = json.loads((root / "meta/stats.json").read_text())
    assert stats["index"]["max"] == [34] and len(stats["observation.images.front"]["mean"]) == 3


def test_faststart_and_size_rollover(tmp_path):
    root = make_dataset(
        tmp_path / "ds", episode_lengths=(4, 4, 4), codec="h264", video_file_size_mb=1e-9, faststart=True
    )
    mp4s = sorted(root.glob("videos/**/*.mp4"))
    assert len(mp4s) == 3  # every episode exceeds the (tiny) size limit
    data = mp4s[0].read_bytes()
    assert data.find(b"moov") < data.find(b"mdat")


def test_bad_options(tmp_path):
    with pytest.raises(ValueError, match="even"):
        make_dataset(tmp_path / "a", codec="h264", cameras=(("observation.images.x", 97, 71),))
    with pytest.raises(ValueError, match="codec"):
        make_dataset(tmp_path / "b", codec="vp9")
