"""Metadata that disagrees with the data is refused with EpisodeDataError naming the episode, the
file and the column or feature (issue 29, fault trial items 2 and 5): a declared shape the rows do
not have, a declared column missing from one data file, ``timestamp``/``task_index`` missing, an
``image`` of another size or channel count than declared."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerobotstream import StreamingLeRobotDataset
from lerobotstream.dataset._images import declared_chw
from lerobotstream.errors import EpisodeDataError

pytest.importorskip("PIL")

IMG = ("observation.images.wrist", 64, 48)
KW = dict(
    episode_lengths=(6, 5, 7, 4),
    cameras=(("observation.images.front", 32, 24),),
    image_cameras=(IMG,),
    episodes_per_data_file=2,
    episodes_per_video_file=2,
)
SECOND = "data/chunk-000/file-001.parquet"  # episodes 2 and 3


@pytest.fixture(scope="module")
def pristine(make_generated_dataset) -> Path:
    return Path(make_generated_dataset(**KW))


@pytest.fixture
def root(pristine, tmp_path) -> Path:
    out = tmp_path / "ds"
    shutil.copytree(pristine, out)
    return out


def _consume(root: Path, **kw) -> list[tuple[int, int]]:
    ds = StreamingLeRobotDataset(root=root, sampling_strategy="sequential", **kw)
    return [(int(it["episode_index"]), int(it["frame_index"])) for it in ds]


def _rewrite(root: Path, rel: str, fn) -> None:
    path = root / rel
    table = pq.read_table(path)
    pq.write_table(fn(table), path)


def test_the_pristine_copy_streams(root):
    assert len(_consume(root)) == sum(KW["episode_lengths"])


def test_a_declared_shape_the_rows_do_not_have(root):
    info_path = root / "meta/info.json"
    info = json.loads(info_path.read_text())
    assert info["features"]["observation.state"]["shape"] == [6]
    info["features"]["observation.state"]["shape"] = [7]
    info["features"]["observation.state"]["names"] = [f"s{i}" for i in range(7)]
    info_path.write_text(json.dumps(info))
    with pytest.raises(
        EpisodeDataError,
        match=r"episode 0, file data/chunk-000/file-000.parquet: column "
        r"'observation.state' holds \[6\] values per row.*\[7\]",
    ) as e:
        _consume(root)
    assert e.value.column == "observation.state" and e.value.episode_index == 0


@pytest.mark.parametrize("drop", [["action", "observation.state", "index"], ["timestamp"], ["task_index"]])
def test_a_column_missing_from_one_data_file(root, drop):
    _rewrite(root, SECOND, lambda t: t.drop_columns(drop))
    with pytest.raises(EpisodeDataError, match=rf"episode 2, file {SECOND}: the data file lacks the column") as e:
        _consume(root)
    assert e.value.path == SECOND and e.value.episode_index == 2
    assert all(repr(c) in str(e.value) for c in drop)


def _png(h: int, w: int, mode: str) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.zeros((h, w, 3), np.uint8)).convert(mode).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize(
    "h,w,mode,got", [(24, 32, "RGB", (3, 24, 32)), (48, 64, "L", (1, 48, 64)), (48, 64, "RGBA", (4, 48, 64))]
)
def test_an_image_of_another_size_or_mode(root, h, w, mode, got):
    key = IMG[0]

    def swap(t: pa.Table) -> pa.Table:
        cells = t.column(key).to_pylist()
        cells[1] = {"bytes": _png(h, w, mode), "path": cells[1]["path"]}  # episode 2, frame 1
        return t.set_column(t.column_names.index(key), key, pa.array(cells, t.schema.field(key).type))

    _rewrite(root, SECOND, swap)
    with pytest.raises(
        EpisodeDataError,
        match=rf"episode 2, frame 1, image feature '{key}', file {SECOND}: .*"
        rf"{re.escape(str(got))}.*declares \(3, 48, 64\)",
    ) as e:
        _consume(root)
    assert e.value.camera == key
    assert len(_consume(root, camera_keys=["observation.images.front"])) == sum(KW["episode_lengths"])  # not decoded


def test_declared_chw_reads_names():
    assert declared_chw({"shape": [48, 64, 3], "names": ["height", "width", "channels"]}) == (3, 48, 64)
    assert declared_chw({"shape": [3, 48, 64], "names": ["channel", "height", "width"]}) == (3, 48, 64)
    assert declared_chw({"shape": [48, 64, 1]}) == (1, 48, 64)
    assert declared_chw({"shape": [48, 64]}) is None
