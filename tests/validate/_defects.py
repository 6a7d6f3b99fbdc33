"""Defects planted in a copy of a dataset, as the break-it trials of issues 35 and 37 planted
them (one row's ``episode_index`` set to 2**62, a ``frame_index`` of -1, a NaN ``timestamp``, a
byte flipped in an ``stco`` or ``stsz`` entry, an episode's timestamps shifted by one frame), and
as the new-user trial did (one row of ``observation.state`` 4 values wide, one ``index`` of 999, a
camera's declared shape that is not its video's, a video that is a symlink loop, a folder or
``/dev/null``)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CAM = "observation.images.front"
G1_CAM = "observation.images.cam_high"
#: the generated dataset the planted-defect tests copy: 8 episodes of 30 frames, 4 per video file
#: and per data file (episodes 0-3 in file-000, 4-7 in file-001)
PLANTED = dict(episode_lengths=(30,) * 8, episodes_per_video_file=4, episodes_per_data_file=4)


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def data_file(root: Path, episode: int) -> Path:
    return root / f"data/chunk-000/file-{episode // 4:03d}.parquet"


def set_value(root: Path, episode: int, frame: int, column: str, value) -> None:
    """Set ``column`` of one row (the episode's ``frame``) of a generated dataset (4 episodes of
    30 frames per data file)."""
    path = data_file(root, episode)
    table = pq.read_table(path)
    ep = table.column("episode_index").to_numpy()
    fi = table.column("frame_index").to_numpy()
    row = int(np.flatnonzero((ep == episode) & (fi == frame))[0])
    values = table.column(column).to_numpy().copy()
    values[row] = value
    i = table.column_names.index(column)
    pq.write_table(
        table.set_column(i, table.schema.field(column), pa.array(values, table.schema.field(column).type)), path
    )


def set_row_width(root: Path, episode: int, frame: int, column: str, width: int) -> None:
    """Keep only the first ``width`` values of one row's list ``column`` (a variable-size list
    column, as LeRobot writes ``observation.state``)."""
    path = data_file(root, episode)
    table = pq.read_table(path)
    ep = table.column("episode_index").to_numpy()
    fi = table.column("frame_index").to_numpy()
    row = int(np.flatnonzero((ep == episode) & (fi == frame))[0])
    values = table.column(column).to_pylist()
    values[row] = values[row][:width]
    i = table.column_names.index(column)
    field = table.schema.field(column)
    pq.write_table(table.set_column(i, field, pa.array(values, field.type)), path)


def set_feature(root: Path, key: str, **entries) -> None:
    """Set entries of one feature of ``meta/info.json`` (``shape=[96, 128, 3]``)."""
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    info["features"][key].update(entries)
    path.write_text(json.dumps(info, indent=2))


def replace_file(path: Path, how: str) -> None:
    """Put something that is not a readable file where ``path`` was: ``loop`` (a link to itself),
    ``folder``, ``dev_null`` (a link to ``/dev/null``)."""
    path.unlink()
    if how == "loop":
        path.symlink_to(path.name)
    elif how == "folder":
        path.mkdir()
    elif how == "dev_null":
        path.symlink_to("/dev/null")
    else:
        raise ValueError(how)


def shift_timestamps(root: Path, episode: int, seconds: float) -> None:
    """Add ``seconds`` to every ``timestamp`` of one episode."""
    path = data_file(root, episode)
    table = pq.read_table(path)
    ep = table.column("episode_index").to_numpy()
    ts = table.column("timestamp").to_numpy().copy()
    ts[ep == episode] += np.float32(seconds)
    i = table.column_names.index("timestamp")
    pq.write_table(table.set_column(i, table.schema.field("timestamp"), pa.array(ts, pa.float32())), path)


def _child(data: bytes, start: int, end: int, kind: bytes) -> tuple[int, int]:
    """(offset, end) of the first ``kind`` box among the boxes in ``data[start:end]``."""
    pos = start
    while pos + 8 <= end:
        size, k = struct.unpack_from(">I4s", data, pos)
        if size == 1:
            size = struct.unpack_from(">Q", data, pos + 8)[0]
        if k == kind:
            return pos, pos + size
        pos += size
    raise LookupError(f"no {kind!r} box")


def table_entry_offset(mp4: Path, box: str, entry: int) -> int:
    """File offset of entry ``entry`` of the first video track's ``stco``/``stsz`` box."""
    data = mp4.read_bytes()
    a, b = _child(data, 0, len(data), b"moov")
    for kind in (b"trak", b"mdia", b"minf", b"stbl"):
        a, b = _child(data, a + 8, b, kind)
    a, b = _child(data, a + 8, b, box.encode())
    first = a + 8 + 4 + (8 if box == "stsz" else 4)  # header, version/flags, (sample_size,) count
    count = struct.unpack_from(">I", data, first - 4)[0]
    if box == "stsz" and struct.unpack_from(">I", data, a + 12)[0] != 0:
        raise LookupError("stsz with one size for every sample")
    if not 0 <= entry < count:
        raise IndexError(f"{box} has {count} entries, not {entry + 1}")
    return first + 4 * entry


def flip_table_byte(mp4: Path, box: str, entry: int, byte: int = 2) -> None:
    """Flip the lowest bit of byte ``byte`` (0 = most significant) of one ``stco``/``stsz`` entry:
    the entry changes by 2**(8 * (3 - byte)) either way."""
    at = table_entry_offset(mp4, box, entry) + byte
    data = bytearray(mp4.read_bytes())
    data[at] ^= 0x01
    mp4.write_bytes(bytes(data))


def video_file(root: Path, index: int, camera: str = CAM) -> Path:
    return root / f"videos/{camera}/chunk-000/file-{index:03d}.mp4"


def plant(kind: str, root: Path) -> None:
    """Plant one defect of :data:`DEFECTS` (``stco_byte`` in a copy of G1, the others in a copy of
    the :data:`PLANTED` dataset)."""
    if kind == "episode_index_2**62":
        set_value(root, 1, 10, "episode_index", 2**62)
    elif kind == "frame_index_-1":
        set_value(root, 2, 10, "frame_index", -1)
    elif kind == "timestamp_nan":
        set_value(root, 3, 5, "timestamp", np.nan)
    elif kind == "stsz_byte":
        flip_table_byte(video_file(root, 1), "stsz", 40)
    elif kind == "timestamps_shifted":
        shift_timestamps(root, 5, 1 / 30)
    elif kind == "stco_byte":
        flip_table_byte(video_file(root, 0, G1_CAM), "stco", 3)
    else:
        raise ValueError(kind)


#: planted defect -> (finding code, the episodes it lists)
DEFECTS = {
    "episode_index_2**62": ("data_rows", [1]),
    "frame_index_-1": ("data_frame_index", [2]),
    "timestamp_nan": ("data_timestamps", [3]),
    "stsz_byte": ("video_tables", [4, 5, 6, 7]),
    "timestamps_shifted": ("timestamp_shift", [5]),
    "stco_byte": ("video_tables", [0, 1]),
}
