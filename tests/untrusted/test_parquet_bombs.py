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
from lerobotstream.dataset import decode_image
from lerobotstream.errors import EpisodeDataError
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


def test_training_refuses_a_data_file_with_a_huge_row_group(pristine, tmp_path):
    root = tmp_path / "ds"
    import shutil

    shutil.copytree(pristine, root)
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
