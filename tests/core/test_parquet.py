"""Episode Parquet reader: projection, row-group pruning (counted bytes), validation errors."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerobotstream.errors import EpisodeDataError
from lerobotstream.parquet import EpisodeParquetReader
from lerobotstream.sources import ByteSource, open_source


def read_episode_rows(source, data_path, episode_lengths, columns=None):
    """One read with a fresh reader (no footer cache across calls)."""
    return EpisodeParquetReader(source, columns).read(data_path, episode_lengths)


class RecordingSource(ByteSource):
    """Wraps a source and records every (path, offset, length) read."""

    def __init__(self, inner: ByteSource) -> None:
        super().__init__()
        self.inner = inner
        self.root_display = inner.root_display
        self.reads: list[tuple[str, int, int]] = []

    def size(self, path):
        return self.inner.size(path)

    def _read_ranges(self, path, ranges):
        self.reads.extend((path, o, n) for o, n in ranges)
        return self.inner.read_ranges(path, ranges)


LENGTHS = {0: 30, 1: 45, 2: 20, 3: 33, 4: 25, 5: 40}
FILES = {"data/chunk-000/file-000.parquet": [0, 1, 2], "data/chunk-000/file-001.parquet": [3, 4, 5]}


def _episode_table(ep: int, n: int, start: int) -> pa.Table:
    rng = np.random.default_rng(ep)
    return pa.table(
        {
            "episode_index": pa.array(np.full(n, ep), pa.int64()),
            "frame_index": pa.array(np.arange(n), pa.int64()),
            "index": pa.array(start + np.arange(n), pa.int64()),
            "timestamp": pa.array(np.arange(n) / 30, pa.float32()),
            "observation.state": pa.array(rng.random((n, 64)).tolist(), pa.list_(pa.float32(), 64)),
            "action": pa.array(rng.random((n, 64)).tolist(), pa.list_(pa.float32(), 64)),
        }
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("pq")
    start = 0
    for rel, eps in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        with pq.ParquetWriter(root / rel, _episode_table(0, 1, 0).schema) as w:
            for ep in eps:  # one row group per episode
                w.write_table(_episode_table(ep, LENGTHS[ep], start))
                start += LENGTHS[ep]
    return root


def test_projection_and_pruning_read_only_needed_row_groups(dataset, monkeypatch):
    monkeypatch.setattr("lerobotstream.parquet.SMALL_FILE_BYTES", 0)  # ranges, not the whole small file
    src = RecordingSource(open_source(dataset))
    reader = EpisodeParquetReader(src, columns=["index", "action"])
    path = "data/chunk-000/file-001.parquet"
    reader.metadata(path)
    src.reads.clear()
    out = reader.read(path, {4: LENGTHS[4]})
    assert list(out) == [4] and out[4].column_names == ["index", "action"]
    assert out[4].column("index").to_pylist() == list(range(128, 128 + 25))
    assert reader.row_groups_read == 1
    md = pq.ParquetFile(dataset / path).metadata
    rg = md.row_group(1)  # episode 4 is the second row group
    allowed = []
    for j in range(rg.num_columns):
        c = rg.column(j)
        if c.path_in_schema.split(".")[0] in ("index", "action", "episode_index", "frame_index"):
            start = c.dictionary_page_offset or c.data_page_offset
            allowed.append((start, start + c.total_compressed_size))
    merged: list[list[int]] = []  # pre_buffer joins touching column chunks into one read
    for a, b in sorted(allowed):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    for _, off, n in src.reads:  # every byte read lies inside needed column chunks of row group 1
        assert any(a <= off and off + n <= b for a, b in merged), (off, n, merged)
    needed = sum(b - a for a, b in allowed)
    assert sum(n for *_, n in src.reads) == needed  # nothing of the pruned groups or other columns


def test_several_episodes_and_files(dataset):
    src = open_source(dataset)
    reader = EpisodeParquetReader(src, columns=["episode_index", "frame_index", "observation.state"])
    for path, eps in FILES.items():
        out = reader.read(path, {e: LENGTHS[e] for e in eps[::2]})
        assert sorted(out) == eps[::2]
        for e, t in out.items():
            assert t.column("frame_index").to_pylist() == list(range(LENGTHS[e]))
            assert set(t.column("episode_index").to_pylist()) == {e}
    assert reader.row_groups_read == 4


def test_mixed_row_group_and_file_without_statistics(tmp_path):
    t = pa.concat_tables([_episode_table(e, LENGTHS[e], 0) for e in (0, 1, 2)])
    pq.write_table(t, tmp_path / "nostats.parquet", row_group_size=40, write_statistics=False)
    src = open_source(tmp_path)
    reader = EpisodeParquetReader(src, columns=["frame_index"])
    assert reader.candidate_row_groups("nostats.parquet", [1]) == [0, 1, 2]  # no bounds: all stay
    out = reader.read("nostats.parquet", {1: 45, 2: 20})
    assert out[1].column("frame_index").to_pylist() == list(range(45))
    pq.write_table(t, tmp_path / "mixed.parquet", row_group_size=40)
    assert EpisodeParquetReader(src).candidate_row_groups("mixed.parquet", [1]) == [0, 1]
    assert read_episode_rows(src, "mixed.parquet", {1: 45})[1].num_rows == 45


def test_validation_errors_name_episode_and_file(tmp_path):
    good = _episode_table(7, 10, 0)
    pq.write_table(good, tmp_path / "a.parquet")
    src = open_source(tmp_path)
    with pytest.raises(EpisodeDataError, match=r"episode 7 in a.parquet .*expected 11 rows, found 10"):
        read_episode_rows(src, "a.parquet", {7: 11})
    with pytest.raises(EpisodeDataError, match=r"episode 8 in a.parquet .*expected 5 rows, found 0"):
        read_episode_rows(src, "a.parquet", {8: 5})
    bad = good.set_column(1, "frame_index", pa.array([0, 1, 2, 3, 5, 5, 6, 7, 8, 9], pa.int64()))
    pq.write_table(bad, tmp_path / "b.parquet")
    with pytest.raises(EpisodeDataError, match=r"episode 7 in b.parquet .*non-contiguous frame_index \(row 4"):
        read_episode_rows(src, "b.parquet", {7: 10})
    with pytest.raises(EpisodeDataError, match=r"missing projected columns \['nope'\]"):
        read_episode_rows(src, "a.parquet", {7: 10}, columns=["nope"])
    (tmp_path / "c.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(EpisodeDataError, match="c.parquet"):
        read_episode_rows(src, "c.parquet", {7: 10})


def test_generated_dataset_through_memory_fsspec(tmp_path):
    import fsspec

    t = pa.concat_tables([_episode_table(e, LENGTHS[e], 0) for e in (3, 4)])
    buf = pa.BufferOutputStream()
    pq.write_table(t, buf, row_group_size=25)
    fs = fsspec.filesystem("memory")
    fs.pipe("memory://pqtest/data/f.parquet", buf.getvalue().to_pybytes())
    out = read_episode_rows(open_source("memory://pqtest"), "data/f.parquet", {4: 25}, ["index"])
    assert out[4].num_rows == 25


# --- damaged files (issue 17 item 10) -----------------------------------------------------------
def _damage_column(path, column: str, *, row_group: int = 0, at: float = 0.5, nbytes: int = 8) -> None:
    """Flip ``nbytes`` bytes inside the data of ``column`` in ``row_group`` (footer left intact)."""
    md = pq.ParquetFile(path).metadata
    rg = md.row_group(row_group)
    c = next(rg.column(j) for j in range(rg.num_columns) if rg.column(j).path_in_schema.startswith(column))
    start = c.dictionary_page_offset or c.data_page_offset
    pos = start + int(c.total_compressed_size * at)
    data = bytearray(path.read_bytes())
    for i in range(pos, pos + nbytes):
        data[i] ^= 0xA5
    path.write_bytes(bytes(data))


def test_page_checksums_are_verified(tmp_path):
    from lerobotstream.errors import ParquetCorruptError

    t = _episode_table(3, 40, 0)
    pq.write_table(t, tmp_path / "crc.parquet", write_page_checksum=True, use_dictionary=False, compression="none")
    src = open_source(tmp_path)
    assert read_episode_rows(src, "crc.parquet", {3: 40})[3].num_rows == 40  # intact: reads
    _damage_column(tmp_path / "crc.parquet", "action")
    # without verification the flipped bytes decode as wrong floats, silently
    pq.read_table(tmp_path / "crc.parquet")
    with pytest.raises(
        ParquetCorruptError,
        match=r"episodes \[3\] in crc.parquet in .*CRC checksum verification failed"
        r".*re-download or rewrite it",
    ) as ei:
        read_episode_rows(src, "crc.parquet", {3: 40})
    assert ei.value.path == "crc.parquet" and ei.value.episode_index == 3
    assert isinstance(ei.value, EpisodeDataError)


def test_corrupt_pages_are_a_typed_error_naming_file_and_episodes(tmp_path):
    from lerobotstream.errors import ParquetCorruptError

    t = pa.concat_tables([_episode_table(e, LENGTHS[e], 0) for e in (0, 1)])
    n = t.num_rows  # compressible values, so that snappy really compresses (and notices damage)
    state = pa.array((np.arange(n * 64) % 7).reshape(n, 64).astype(np.float32).tolist(), pa.list_(pa.float32(), 64))
    t = t.set_column(t.column_names.index("observation.state"), "observation.state", state)
    pq.write_table(t, tmp_path / "bad.parquet", compression="snappy", use_dictionary=False, row_group_size=1000)
    _damage_column(tmp_path / "bad.parquet", "observation.state")
    with pytest.raises(OSError):
        pq.read_table(tmp_path / "bad.parquet")  # what pyarrow alone says: a bare OSError, no file, no episode
    reader = EpisodeParquetReader(open_source(tmp_path), columns=["observation.state"])
    with pytest.raises(
        ParquetCorruptError,
        match=r"episodes \[0, 1\] in bad.parquet in .*: the Parquet data cannot "
        r"be decoded \(row groups \[0\].*OSError: .*snappy",
    ) as ei:
        reader.read("bad.parquet", {0: LENGTHS[0], 1: LENGTHS[1]})
    assert ei.value.episode_index == 0
    # a truncated file: the footer itself is unreadable
    data = (tmp_path / "bad.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(ParquetCorruptError, match=r"footer of cut.parquet .*\(reading episodes \[0\]\).*truncated"):
        reader.read("cut.parquet", {0: LENGTHS[0]})
