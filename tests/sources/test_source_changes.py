"""A dataset file replaced during a run is reported as changed (issue 29, fault trial item 6):
``SourceChangedError`` naming the file, raised on the first read that shows it (an HTTP range
answer for another size or ETag: no retries), or by the framing check's follow-up (a local file's
size or mtime no longer the sidecar's); a same-size, same-mtime replacement's framing error says
what to do."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from lerobotstream import StreamingLeRobotDataset
from lerobotstream.errors import Mp4InconsistentTablesError, RangeReadError, SourceChangedError
from lerobotstream.sources import open_source
from lerobotstream.sources._http_transport import RetryPolicy
from lerobotstream.testing import LoopbackServer

FAST = RetryPolicy(max_retries=5, backoff_base_s=0.001, backoff_cap_s=0.01)
CAM = "observation.images.front"
DEAD = f"videos/{CAM}/chunk-000/file-002.mp4"


@pytest.fixture
def served(tmp_path):
    folder = tmp_path / "served"
    folder.mkdir()
    (folder / "f.bin").write_bytes(bytes(range(256)) * 40)
    with LoopbackServer.start({"static": str(folder)}) as s:
        s.folder = folder
        yield s


def _gets(server) -> int:
    return sum(1 for e in server.log() if e["method"] == "GET" and e["path"].endswith("f.bin"))


@pytest.mark.parametrize(
    "replacement", [bytes(range(256)) * 30, bytes(reversed(range(256))) * 40], ids=["other-size", "same-size"]
)
def test_http_range_read_of_a_replaced_file(served, replacement):
    src = open_source(f"{served.static_url}", retry=FAST, timeout_s=5.0)
    assert src.read("f.bin", 100, 50) == (bytes(range(256)) * 40)[100:150]
    (served.folder / "f.bin").write_bytes(replacement)  # replaced while the run reads it
    served.clear_log()
    with pytest.raises(
        SourceChangedError,
        match=r"'f.bin' at http://127\.0\.0\.1:\d+/static/f\.bin changed during "
        r"the run: its? ",
    ) as e:
        src.read("f.bin", 100, 50)
    assert not isinstance(e.value, RangeReadError)
    assert _gets(served) == 1  # refused on the first answer: no retries on "wrong Content-Range"
    assert src.stats.retries == 0


@pytest.fixture(scope="module")
def pristine(make_generated_dataset) -> Path:
    return Path(
        make_generated_dataset(
            episode_lengths=(6, 5, 7, 4), codec="h264", cameras=((CAM, 32, 24),), episodes_per_video_file=1
        )
    )


@pytest.fixture
def local(pristine, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(pristine, root)
    return root


def _run(ds):
    return sum(1 for _ in ds)


def _overwrite(path: Path, *, keep_mtime: bool) -> None:
    st = path.stat()
    noise = np.random.default_rng(7).integers(0, 256, st.st_size, dtype=np.uint8).tobytes()
    with open(path, "r+b") as f:  # in place: the same inode, as a copy over the file does
        f.write(noise)
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_local_file_changed_during_the_run(local):
    ds = StreamingLeRobotDataset(root=local, sampling_strategy="sequential")  # the sidecar indexes the old files
    _overwrite(local / DEAD, keep_mtime=False)
    with pytest.raises(
        SourceChangedError,
        match=rf"episode 2, camera '{CAM}', file {DEAD}: the file changed during "
        r"the run .*restart",
    ) as e:
        _run(ds)
    assert e.value.path == DEAD and e.value.episode_index == 2


def test_local_file_truncated_during_the_run(local):
    ds = StreamingLeRobotDataset(root=local, sampling_strategy="sequential")
    os.truncate(local / DEAD, (local / DEAD).stat().st_size // 3)
    with pytest.raises(SourceChangedError, match=rf"file {DEAD}: the file changed during the run"):
        _run(ds)


def test_same_size_same_mtime_replacement_says_what_to_do(local):
    ds = StreamingLeRobotDataset(root=local, sampling_strategy="sequential")
    _overwrite(local / DEAD, keep_mtime=True)  # no stat can tell: the framing check catches it
    with pytest.raises(
        Mp4InconsistentTablesError,
        match=r"does not frame.*\[cached sidecar: .*\.npz\]\. The file "
        r"still has the size and fingerprint.*replaced by another "
        r"file of the same size and mtime.*delete that sidecar",
    ):
        _run(ds)
