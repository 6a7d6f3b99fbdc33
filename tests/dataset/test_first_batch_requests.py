"""Requests to the first batch over a remote store: counted from the loopback server's log, never timed.

- ``HttpSource.read_file``: one GET, no HEAD; size and fingerprint from its headers; a file that
  changed since its HEAD is refused; errors typed and naming the URL.
- ``DatasetMeta.load`` over HTTP: no HEAD for metadata files, no existence check for
  ``stats.json``, every request once; listings of several folders; errors typed and named.
- ``EpisodeParquetReader``: concurrent readers of one footer / row group share one read
  (single-flight), small remote files are read whole once.
- ``StreamingLeRobotDataset`` on the bundled G1 data over HTTP: what construction (warm sidecar)
  and the first item request.
"""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerobotstream.errors import MetadataError, SourceChangedError, SourceError, SourceNotFoundError
from lerobotstream.meta import DatasetMeta
from lerobotstream.parquet import EpisodeParquetReader, _SingleFlight
from lerobotstream.sources import ByteSource, open_source
from lerobotstream.sources._http import HttpSource
from lerobotstream.sources._http_transport import RetryPolicy
from lerobotstream.sources._local import LocalSource
from lerobotstream.testing import LoopbackServer

G1 = Path(__file__).resolve().parents[2] / "data" / "g1_v30"
FAST = RetryPolicy(max_retries=2, backoff_base_s=0.001, backoff_cap_s=0.01)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A loopback server over a folder with copies of G1 (``g1``, ``nostats``, ``novideo``) and scratch files."""
    root = tmp_path_factory.mktemp("remote")
    shutil.copytree(G1, root / "g1")
    shutil.copytree(G1, root / "nostats")
    (root / "nostats" / "meta" / "stats.json").unlink()
    shutil.copytree(G1, root / "novideo")
    shutil.rmtree(root / "novideo" / "videos")
    shutil.copytree(G1, root / "chunks")  # its episodes shard split over two chunk folders
    t = pq.read_table(root / "chunks" / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    (root / "chunks" / "meta" / "episodes" / "chunk-001").mkdir()
    pq.write_table(t.slice(0, 1), root / "chunks" / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    pq.write_table(t.slice(1, 1), root / "chunks" / "meta" / "episodes" / "chunk-001" / "file-000.parquet")
    (root / "scratch").mkdir()
    server = LoopbackServer.start({"static": str(root)})
    server.folder = root
    yield server
    server.close()


def _src(store, name: str) -> HttpSource:
    store.clear_log()
    return open_source(f"{store.static_url}{name}/", retry=FAST, timeout_s=5.0)


def _requests(store, name: str) -> list[tuple[str, str]]:
    """(method, path under the dataset root; folders end with /) of every logged request."""
    prefix = f"/static/{name}/"
    return [(e["method"], e["path"][len(prefix) :]) for e in store.log() if e["path"].startswith(prefix)]


# --- HttpSource.read_file ------------------------------------------------------------------------
def test_read_file_is_one_get_and_answers_size_and_fingerprint(store):
    src = _src(store, "g1")
    data = src.read_file("meta/info.json")
    assert data == (G1 / "meta" / "info.json").read_bytes()
    assert _requests(store, "g1") == [("GET", "meta/info.json")]
    assert src.stats.requests == 1 and src.stats.metadata_requests == 0
    assert src.stats.bytes_read == src.stats.bytes_requested == len(data)
    fp = src.fingerprint("meta/info.json")
    assert src.size("meta/info.json") == len(data)
    assert len(_requests(store, "g1")) == 1  # size and fingerprint came with the GET
    fresh = _src(store, "g1")
    assert fresh.fingerprint("meta/info.json") == fp and fp.startswith("etag=")  # what a HEAD says
    assert _requests(store, "g1") == [("HEAD", "meta/info.json")]
    assert fresh.read_file("meta/info.json") == data  # after a HEAD: still one GET, sizes agree
    assert _requests(store, "g1") == [("HEAD", "meta/info.json"), ("GET", "meta/info.json")]


def test_read_file_refuses_a_file_changed_since_its_head(store):
    path = store.folder / "scratch" / "changing.json"
    path.write_bytes(b'{"v": 1}')
    src = _src(store, "scratch")
    assert src.size("changing.json") == 8
    path.write_bytes(b'{"v": 22}')
    with pytest.raises(
        SourceChangedError,
        match=r"'changing.json' at http://127\.0\.0\.1:\d+/static/scratch/"
        r"changing\.json changed while being read: it had 8 bytes",
    ) as ei:
        src.read_file("changing.json")
    assert ei.value.path == "changing.json"


def test_read_file_of_a_missing_file_is_typed_and_names_the_url(store):
    src = _src(store, "g1")
    with pytest.raises(
        SourceNotFoundError,
        match=r"'meta/nope\.json' not found \(HTTP 404\) at "
        r"http://127\.0\.0\.1:\d+/static/g1/meta/nope\.json",
    ):
        src.read_file("meta/nope.json")
    assert _requests(store, "g1") == [("GET", "meta/nope.json")]


def test_read_file_retries_a_failed_get(store):
    src = _src(store, "g1")
    store.set_faults([{"kind": "status", "status": 503, "match": "g1/meta/tasks", "count": 1}])
    try:
        assert src.read_file("meta/tasks.parquet") == (G1 / "meta" / "tasks.parquet").read_bytes()
    finally:
        store.set_faults([])
    assert _requests(store, "g1") == [("GET", "meta/tasks.parquet")] * 2 and src.stats.retries == 1


def test_listing_several_folders_matches_the_local_listing(store):
    src = _src(store, "chunks")
    local = LocalSource(store.folder / "chunks")
    assert (
        src.list("meta/episodes")
        == local.list("meta/episodes")
        == ["meta/episodes/chunk-000/file-000.parquet", "meta/episodes/chunk-001/file-000.parquet"]
    )
    assert src.list("") == local.list("")
    assert src.list("no/such") == []


# --- DatasetMeta.load over HTTP --------------------------------------------------------------------
def test_metadata_load_sends_each_request_once_and_no_head_for_metadata(store):
    src = _src(store, "g1")
    meta = DatasetMeta.load(src)
    assert meta.num_episodes == 2 and meta.stats
    reqs = _requests(store, "g1")
    assert Counter(reqs) == Counter(
        {
            ("GET", "meta/info.json"): 1,
            ("GET", "meta/tasks.parquet"): 1,
            ("GET", "meta/stats.json"): 1,
            ("GET", "meta/episodes/"): 1,
            ("GET", "meta/episodes/chunk-000/"): 1,
            ("GET", "meta/episodes/chunk-000/file-000.parquet"): 1,
            ("HEAD", "data/chunk-000/file-000.parquet"): 1,
            ("HEAD", "videos/observation.images.cam_high/chunk-000/file-000.mp4"): 1,
        }
    )
    local = DatasetMeta.load(G1)
    assert meta.episodes == local.episodes and meta.tasks == local.tasks and meta.stats == local.stats
    assert not [t for t in threading.enumerate() if t.name.startswith("lerobotstream-prefetch")]  # pool closed


def test_metadata_load_without_stats_json_sends_one_get(store):
    src = _src(store, "nostats")
    meta = DatasetMeta.load(src)
    assert meta.stats == {}
    reqs = _requests(store, "nostats")
    assert [r for r in reqs if "stats" in r[1]] == [("GET", "meta/stats.json")]
    assert not [r for r in reqs if r[0] == "HEAD" and r[1].startswith("meta/")]


def test_metadata_load_reads_every_shard_of_several_chunk_folders(store):
    src = _src(store, "chunks")
    meta = DatasetMeta.load(src)
    assert [ep.episode_index for ep in meta.episodes] == [0, 1]
    assert [ep.shard for ep in meta.episodes] == [
        "meta/episodes/chunk-000/file-000.parquet",
        "meta/episodes/chunk-001/file-000.parquet",
    ]
    shard_gets = Counter(r for r in _requests(store, "chunks") if r[1].endswith(".parquet") and "episodes" in r[1])
    assert set(shard_gets.values()) == {1} and len(shard_gets) == 2


def test_metadata_errors_over_http_stay_typed_and_named(store):
    with pytest.raises(
        MetadataError,
        match=r"meta/info\.json is missing: http://127\.0\.0\.1:\d+/static/scratch/"
        r"meta/info\.json",
    ):
        DatasetMeta.load(_src(store, "scratch"))
    with pytest.raises(
        MetadataError,
        match=r"episode 0: camera 'observation\.images\.cam_high' video "
        r"http://127\.0\.0\.1:\d+/static/novideo/videos/.*file-000\.mp4 is missing",
    ) as ei:
        DatasetMeta.load(_src(store, "novideo"))
    assert ei.value.episode_index == 0 and ei.value.camera == "observation.images.cam_high"
    store.set_faults([{"kind": "status", "status": 500, "match": "g1/meta/tasks", "count": 10}])
    try:
        with pytest.raises(
            MetadataError,
            match=r"could not read tasks file http://127\.0\.0\.1:\d+/static/g1/meta/"
            r"tasks\.parquet: .*gave up after 3 attempts",
        ) as ei:
            DatasetMeta.load(_src(store, "g1"))
        assert isinstance(ei.value.__cause__, SourceError) and ei.value.path == "meta/tasks.parquet"
    finally:
        store.set_faults([])


# --- EpisodeParquetReader: single flight -------------------------------------------------------------
class GatedSource(ByteSource):
    """A local source whose reads wait at a gate (opened by the test) and are counted."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.inner = LocalSource(root)
        self.root_display = self.inner.root_display
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.reads: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()

    def size(self, path):
        return self.inner.size(path)

    def _read_ranges(self, path, ranges):
        with self._lock:
            self.reads.extend((path, o, n) for o, n in ranges)
        self.entered.set()
        assert self.gate.wait(60), "the test never opened the gate"
        return self.inner.read_ranges(path, ranges)


def _two_episode_file(path: Path, lengths=(30, 40), row_groups: int = 1) -> None:
    n = sum(lengths)
    t = pa.table(
        {
            "episode_index": pa.array(np.repeat(np.arange(len(lengths)), lengths), pa.int64()),
            "frame_index": pa.array(np.concatenate([np.arange(k) for k in lengths]), pa.int64()),
            "index": pa.array(np.arange(n), pa.int64()),
            "action": pa.array(np.random.default_rng(0).random(n), pa.float32()),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(t, path, row_group_size=-(-n // row_groups))


def _wait_for(cond, what: str) -> None:
    """Block until ``cond()`` (a synchronisation, not a timed assertion)."""
    ev = threading.Event()
    for _ in range(6000):
        if cond():
            return
        ev.wait(0.01)
    raise AssertionError(f"never happened: {what}")


@pytest.mark.parametrize("cache_bytes", [0, 64 << 20], ids=["no-cache", "cache"])
def test_concurrent_episodes_of_one_row_group_share_one_footer_and_one_row_group_read(tmp_path, cache_bytes):
    _two_episode_file(tmp_path / "data" / "f.parquet")
    src = GatedSource(tmp_path)
    reader = EpisodeParquetReader(src, columns=["index", "action"], row_group_cache_bytes=cache_bytes)
    out: dict[int, pa.Table] = {}
    errors: list[BaseException] = []

    def read(ep, n):
        try:
            out.update(reader.read("data/f.parquet", {ep: n}))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    a = threading.Thread(target=read, args=(0, 30))
    a.start()
    assert src.entered.wait(60)  # A is reading the footer, behind the gate
    b = threading.Thread(target=read, args=(1, 40))
    b.start()
    _wait_for(lambda: reader._footers.shared == 1, "B waits for A's footer")
    src.gate.set()
    a.join(60)
    b.join(60)
    assert not errors, errors
    assert out[0].column("index").to_pylist() == list(range(30))
    assert out[1].column("index").to_pylist() == list(range(30, 70))
    assert reader._footers.computed == 1  # footers read from the source
    # decoded once when kept (B waits for it or finds it cached); without a cache B may decode the
    # in-memory bytes again, but never sends a read of its own
    assert reader.row_groups_read == 1 if cache_bytes else reader.row_groups_read in (1, 2)
    assert len(src.reads) == 1  # a small file on a non-local source: read whole, once


def test_row_group_single_flight_and_cache_with_range_reads(tmp_path, monkeypatch):
    monkeypatch.setattr("lerobotstream.parquet.SMALL_FILE_BYTES", 0)  # footer and row groups by range
    _two_episode_file(tmp_path / "data" / "f.parquet")
    src = GatedSource(tmp_path)
    src.gate.set()
    reader = EpisodeParquetReader(src, columns=["action"])
    reader.metadata("data/f.parquet")
    footer_reads = len(src.reads)
    src.gate.clear()
    src.entered.clear()
    out: dict[int, pa.Table] = {}
    a = threading.Thread(target=lambda: out.update(reader.read("data/f.parquet", {0: 30})))
    a.start()
    assert src.entered.wait(60)  # A reads row group 0
    b = threading.Thread(target=lambda: out.update(reader.read("data/f.parquet", {1: 40})))
    b.start()
    _wait_for(lambda: reader._groups.shared == 1, "B waits for A's row group")
    src.gate.set()
    a.join(60)
    b.join(60)
    assert sorted(out) == [0, 1] and reader.row_groups_read == 1
    group_reads = len(src.reads) - footer_reads
    reader.read("data/f.parquet", {1: 40})  # cached: no read at all
    assert len(src.reads) - footer_reads == group_reads and reader.row_groups_read == 1


def test_episode_spanning_row_groups_reads_them_in_one_pass_and_caches_each(tmp_path, monkeypatch):
    monkeypatch.setattr("lerobotstream.parquet.SMALL_FILE_BYTES", 0)
    _two_episode_file(tmp_path / "data" / "f.parquet", lengths=(30, 40), row_groups=7)  # 10 rows a group
    src = GatedSource(tmp_path)
    src.gate.set()
    reader = EpisodeParquetReader(src, columns=["index"])
    assert reader.read("data/f.parquet", {1: 40})[1].column("index").to_pylist() == list(range(30, 70))
    assert reader.row_groups_read == 4  # groups 3..6
    assert reader.read("data/f.parquet", {0: 30})[0].column("index").to_pylist() == list(range(30))
    assert reader.row_groups_read == 7  # 0..2 only: 3..6 came from the cache


def test_a_failed_shared_read_is_retried_by_the_waiter_with_its_own_error():
    sf = _SingleFlight(None)
    gate, entered = threading.Event(), threading.Event()
    results: dict[str, object] = {}

    def owner():
        entered.set()
        gate.wait(60)
        raise ValueError("owner's failure")

    def run_owner():
        try:
            sf.get("k", owner)
        except ValueError as e:
            results["a"] = e

    a = threading.Thread(target=run_owner)
    a.start()
    assert entered.wait(60)
    b = threading.Thread(target=lambda: results.setdefault("b", sf.get("k", lambda: "b's own value")))
    b.start()
    _wait_for(lambda: sf.shared == 1, "B waits")
    gate.set()
    a.join(60)
    b.join(60)
    assert str(results["a"]) == "owner's failure" and results["b"] == "b's own value"
    assert sf.computed == 2  # the owner's attempt and the waiter's own; neither kept (no failure is cached)
    assert sf.get("k", lambda: "again") == "again" and sf.get("k", lambda: "unused") == "again"


# --- the dataset's first item over HTTP ------------------------------------------------------------------
def test_dataset_construction_and_first_item_requests(store, tmp_path, monkeypatch):
    from lerobotstream import StreamingLeRobotDataset, constants

    monkeypatch.setattr(constants, "SIDECAR_DIR", tmp_path / "sidecars")
    monkeypatch.setattr(constants, "INDEX_DIR", tmp_path / "indexes")
    root = f"{store.static_url}g1/"
    StreamingLeRobotDataset(root=root)  # builds the sidecar (cold)
    store.clear_log()
    ds = StreamingLeRobotDataset(root=root, batch_size=8)  # warm sidecar
    construct = _requests(store, "g1")
    assert len(construct) == 8 and not [r for r in construct if r[0] == "HEAD" and r[1].startswith("meta/")]
    assert len(set(construct)) == len(construct)
    store.clear_log()
    it = iter(ds)
    item = next(it)
    assert int(item["index"]) >= 0
    first = _requests(store, "g1")
    del it
    kinds = Counter((m, p.split("/")[0]) for m, p in first)
    # one GET for the (small) data file, shared by both episodes' fetch threads; one per video span
    assert kinds[("GET", "data")] == 1, first
    assert kinds[("GET", "videos")] == 2 and kinds[("HEAD", "data")] == kinds[("HEAD", "videos")] == 0, first


def test_metadata_load_from_the_hub_lists_each_folder_once(tmp_path, monkeypatch):
    from huggingface_hub import constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)  # loopback only: endpoint is 127.0.0.1
    shutil.copytree(G1, tmp_path / "g1")
    sha = "1" * 40
    server = LoopbackServer.start(
        {"datasets": {"lerobot/g1": {"refs": {"main": sha}, "commits": {sha: str(tmp_path / "g1")}}}}
    )
    try:
        src = open_source("hf://datasets/lerobot/g1", endpoint=server.url, token=False, retry=FAST)
        server.clear_log()
        meta = DatasetMeta.load(src)
        assert meta.episodes == DatasetMeta.load(G1).episodes
        trees = Counter(e["path"].split(f"/tree/{sha}/", 1)[1] for e in server.log() if "/tree/" in e["path"])
        # the three meta/ files read at once share one listing of meta/ (single-flight per folder)
        assert trees["meta"] == 1 and max(trees.values()) == 1, trees
    finally:
        server.close()


def test_first_batch_tool_classifies_requests_and_counts_round_trips():
    from tools.microbench.first_batch import classify, critical_round_trips

    def e(method, path, t):
        return {"method": method, "path": f"/static/ds/{path}", "t": t}

    log = [
        e("GET", "meta/info.json", 0.0),
        e("GET", "meta/episodes/", 0.001),
        e("GET", "meta/episodes/chunk-000/", 0.05),
        e("HEAD", "data/f.parquet", 0.1),
        e("HEAD", "videos/c/f.mp4", 0.1005),
        e("GET", "videos/c/f.mp4", 0.2),
    ]
    assert [classify(x) for x in log] == ["GET meta", "list", "list", "HEAD", "HEAD", "GET videos"]
    assert critical_round_trips(log, 0.05) == 4  # the two overlapped pairs count once each
