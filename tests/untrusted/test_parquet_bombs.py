"""Parquet files and their image cells are untrusted: row counts and sizes are read from the
footer (or the image header) and checked before anything is decoded (small inputs declaring huge
sizes; tools/bomb_rss.py measures real-size ones)."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lerobotstream.parquet as lrs_parquet
from lerobotstream import StreamingLeRobotDataset
from lerobotstream.dataset._images import decode_image
from lerobotstream.errors import EpisodeDataError, MetadataError, ParquetCorruptError
from lerobotstream.meta import DatasetMeta
from lerobotstream.parquet import EpisodeParquetReader
from lerobotstream.sources import open_source
from lerobotstream.testing import make_dataset

DATA = "data/chunk-000/file-000.parquet"
IMG = ("observation.images.top", 32, 24)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("pq") / "ds", episode_lengths=(3, 4), cameras=(), image_cameras=(IMG,))


def _many_rows(rows: int) -> pa.Table:
    """``rows`` rows of episode 0 (constant columns: a few KB on disk whatever ``rows``)."""
    zeros = pa.array(np.zeros(rows, np.int64))
    return pa.table({"episode_index": zeros, "frame_index": zeros, "index": zeros})


def test_footer_declaring_more_rows_than_the_episodes_is_not_decoded(tmp_path):
    pq.write_table(_many_rows(1_000_000), tmp_path / "bomb.parquet", row_group_size=1_000_000)
    assert (tmp_path / "bomb.parquet").stat().st_size < 64 * 1024
    reader = EpisodeParquetReader(open_source(str(tmp_path)), file_rows={"bomb.parquet": 30})
    with pytest.raises(EpisodeDataError, match=r"declares 1000000 rows in 1 row groups .* have 30 frames") as e:
        reader.read("bomb.parquet", {0: 30})
    assert "bomb.parquet" in str(e.value) and e.value.code == "data_rows"
    assert reader.row_groups_read == 0


def test_declared_bytes_over_the_read_cap_are_not_decoded(tmp_path, monkeypatch):
    pq.write_table(_many_rows(30), tmp_path / "f.parquet")
    monkeypatch.setattr(lrs_parquet, "READ_MAX_BYTES", 100)
    reader = EpisodeParquetReader(open_source(str(tmp_path)), file_rows={"f.parquet": 30})
    with pytest.raises(EpisodeDataError, match=r"declare \d+ bytes .* more than the 100 one read may decode"):
        reader.read("f.parquet", {0: 30})
    assert reader.row_groups_read == 0


def test_footer_of_too_many_row_groups_is_not_decoded(tmp_path, monkeypatch):
    pq.write_table(_many_rows(30), tmp_path / "f.parquet", row_group_size=5)  # 6 row groups
    monkeypatch.setattr(lrs_parquet, "FOOTER_MAX_ITEMS", 4)
    reader = EpisodeParquetReader(open_source(str(tmp_path)), file_rows={"f.parquet": 30})
    with pytest.raises(ParquetCorruptError, match=r"cannot read the Parquet footer of f\.parquet.*size limit"):
        reader.read("f.parquet", {0: 30})


def test_training_refuses_a_data_file_with_a_huge_row_group(pristine, tmp_path):
    root = _copy(pristine, tmp_path)
    pq.write_table(_many_rows(1_000_000), root / DATA, row_group_size=1_000_000)
    assert DatasetMeta.load(root).data_file_rows == {DATA: 7}
    with pytest.raises(EpisodeDataError, match=rf"{DATA}.*declares 1000000 rows"):
        list(StreamingLeRobotDataset(root=root, sampling_strategy="sequential"))


def _png_header(width: int, height: int) -> bytes:
    """A PNG signature, an RGB IHDR of ``width`` x ``height`` and a few bytes of IDAT (no pixels)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b"")


def test_png_cell_declaring_a_huge_image_is_not_decoded():
    cell = _png_header(10_000, 8_000)  # 240 MB of RGB once decoded; 80 bytes here
    with pytest.raises(EpisodeDataError, match=r"10000x8000 .* declares \(3, 24, 32\)") as e:
        decode_image(cell, key=IMG[0], episode_index=1, frame_index=2, path=DATA, shape=(3, 24, 32))
    assert e.value.camera == IMG[0] and DATA in str(e.value) and "frame 2" in str(e.value)


def test_png_cell_of_the_declared_size_decodes():
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((24, 32, 3), 7, np.uint8)).save(buf, format="PNG")
    out = decode_image(buf.getvalue(), key=IMG[0], shape=(3, 24, 32))
    assert tuple(out.shape) == (3, 24, 32) and int(out[0, 0, 0]) == 7


# --- meta/episodes ----------------------------------------------------------------------------
SHARD = "meta/episodes/chunk-000/file-000.parquet"


def _copy(pristine: Path, tmp_path: Path) -> Path:
    import shutil

    root = tmp_path / "ds"
    shutil.copytree(pristine, root)
    return root


def _edit_shard(root: Path, fn) -> None:
    table = pq.read_table(root / SHARD)
    pq.write_table(fn(table), root / SHARD)


def test_episodes_table_over_the_row_cap_is_not_decoded(pristine, tmp_path, monkeypatch):
    import lerobotstream.meta as me

    root = _copy(pristine, tmp_path)
    monkeypatch.setattr(me, "EPISODES_MAX", 1)
    decoded, read = [], pq.ParquetFile.read

    def counting(self, *a, columns=None, **k):
        decoded.extend(c for c in columns or () if c == "length")  # the episodes table's columns
        return read(self, *a, columns=columns, **k)

    monkeypatch.setattr(pq.ParquetFile, "read", counting)
    with pytest.raises(MetadataError, match=r"declares 2 rows.* at most 1 episodes") as e:
        DatasetMeta.load(root)
    assert SHARD in str(e.value) and e.value.code == "episodes_table_size" and not decoded


def test_episodes_table_over_the_byte_cap_is_not_decoded(pristine, tmp_path, monkeypatch):
    import lerobotstream.meta as me

    root = _copy(pristine, tmp_path)
    monkeypatch.setattr(me, "EPISODES_MAX_BYTES", 64)
    with pytest.raises(MetadataError, match=r"bytes of columns once decoded; at most .* and 64 bytes"):
        DatasetMeta.load(root)


def test_episodes_table_is_kept_as_columns(pristine):
    from lerobotstream.meta import EpisodeRows

    meta = DatasetMeta.load(pristine)
    assert isinstance(meta.episodes, EpisodeRows) and len(meta.episodes) == 2
    assert [ep.length for ep in meta.episodes] == [3, 4] and meta.episode(1).length == 4
    assert meta.episodes[-1] == meta.episode(1) and [e.episode_index for e in meta.episodes[1:]] == [1]
    assert meta.data_file_rows == {DATA: 7} and meta.data_paths() == [DATA]


def test_huge_episode_index_gap_is_reported_as_a_range(pristine, tmp_path):
    root = _copy(pristine, tmp_path)

    def far(t: pa.Table) -> pa.Table:
        i = t.column_names.index("episode_index")
        return t.set_column(i, "episode_index", pa.array([0, 10**12], pa.int64()))

    _edit_shard(root, far)
    with pytest.raises(MetadataError, match=r"missing episodes \[1\.\.999999999999\] \(999999999999 episodes\)") as e:
        DatasetMeta.load(root)
    assert len(e.value.episodes) <= 1000


def test_huge_total_episodes_lists_a_range(pristine, tmp_path):
    import json

    root = _copy(pristine, tmp_path)
    info = json.loads((root / "meta/info.json").read_text())
    info["total_episodes"] = 100_000_000
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(MetadataError, match=r"episodes 2\.\.99999999 are missing") as e:
        DatasetMeta.load(root)
    assert len(e.value.episodes) <= 1000
