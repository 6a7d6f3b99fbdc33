"""A source that fails for good ends the stream at its first failure (issue 29, fault trial item 3).

Over the loopback server: one episode's video file answers 404 (a dead file); the error must reach
the training loop as soon as that episode's *prefetch* fails, naming the file — not when the loop
reaches the episode after consuming every episode before it. Ordered with events, never timed.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from lerobotstream import StreamingLeRobotDataset
from lerobotstream.dataset import _reader
from lerobotstream.errors import SourceError, SourceNotFoundError
from lerobotstream.testing import LoopbackServer

LENGTHS = (20,) * 10
CAM = "observation.images.front"


@pytest.fixture(scope="module")
def server(make_generated_dataset, tmp_path_factory):
    src = Path(
        make_generated_dataset(
            episode_lengths=LENGTHS, codec="h264", cameras=((CAM, 32, 24),), episodes_per_video_file=1
        )
    )
    served = tmp_path_factory.mktemp("served")
    shutil.copytree(src, served / "ds")
    with LoopbackServer.start({"static": str(served)}) as s:
        yield s


def test_the_first_source_failure_ends_the_stream(server, monkeypatch):
    ds = StreamingLeRobotDataset(
        root=f"{server.static_url}ds/",
        sampling_strategy="sequential",
        episode_pool_size=1,
        prefetch_episodes=4,
        decode_lookahead=2,
        decoded_queue_size=2,
    )
    dead = "file-005.mp4"
    failed = threading.Event()
    fetched: list[int] = []
    original = _reader.DatasetReader.fetch

    def fetch(self, ep):
        fetched.append(int(ep))
        try:
            return original(self, ep)
        except SourceError:
            failed.set()
            raise

    monkeypatch.setattr(_reader.DatasetReader, "fetch", fetch)
    server.set_faults([{"kind": "status", "status": 404, "match": dead, "count": 10_000}])
    try:
        seen: list[int] = []
        with pytest.raises(SourceNotFoundError) as info:
            for item in ds:
                ep = int(item["episode_index"])
                if ep == 2 and 2 not in seen:  # episode 5 is in the prefetch frontier by now
                    assert failed.wait(60), "episode 5's fetch did not fail"
                seen.append(ep)
    finally:
        server.set_faults([])
    msg = str(info.value)
    assert dead in msg and "episode 5" in msg
    # before the fix every item of episodes 0-4 came first (100 items); now the stream ends by
    # episode 2 at the latest (earlier when episode 5's prefetch failed sooner): once the failure
    # is known only items already decoded ahead (a few chunks of 2 and the queue of 2) still come
    assert max(seen) <= 2 and seen.count(2) < LENGTHS[2]
    assert max(fetched) <= 6  # no fetch is started after the failure (5, plus one already in flight)
