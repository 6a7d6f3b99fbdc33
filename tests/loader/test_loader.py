"""StreamLoader: the DataLoader's batches (single dataset, mixture, windows, uint8 and float), batches
kept by the caller never overwritten, loader resume exact in both modes and every start method,
``auto``'s choice. Shutdown without leaks: tests/loader/test_loader_shutdown.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lerobotstream import StreamingLeRobotDataset, StreamingMultiLeRobotDataset, StreamLoader
from lerobotstream.errors import ResumeStateError, StreamingConfigError
from lerobotstream.loader._loader import choose_mode

CAM = (("observation.images.front", 32, 24),)
LENGTHS = (7, 5, 9, 4, 6)
B = 4
CASES = [(0, "threads"), (2, "threads"), (1, "processes"), (2, "processes")]


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(make_generated_dataset(episode_lengths=LENGTHS, codec="av1", cameras=CAM, episodes_per_video_file=2))


@pytest.fixture(scope="module")
def mix_roots(make_generated_dataset):
    front = ("observation.images.front", 32, 24)
    return [
        Path(
            make_generated_dataset(
                repo_id="ldr/a", episode_lengths=(6, 9, 4), codec="av1", cameras=(front,), tasks=("task a",)
            )
        ),
        Path(
            make_generated_dataset(
                repo_id="ldr/b", episode_lengths=(5, 7), codec="h264", gop=4, cameras=(front,), tasks=("task b",)
            )
        ),
    ]


def _ds(root, nw, **kw):
    kw = {
        "episode_pool_size": 2,
        "prefetch_episodes": 1,
        "max_num_shards": max(1, nw),
        "batch_size": B,
        "num_workers": nw,
        "decode_lookahead": 5,
        **kw,
    }
    return StreamingLeRobotDataset(root=root, **kw)


def assert_batches_equal(ref: list, got: list) -> None:
    assert len(ref) == len(got), (len(ref), len(got))
    for j, (a, b) in enumerate(zip(ref, got)):
        assert list(a) == list(b), (j, list(a), list(b))
        for k in a:
            if isinstance(a[k], torch.Tensor):
                assert b[k].dtype == a[k].dtype and b[k].shape == a[k].shape, (j, k)
                assert torch.equal(a[k], b[k]), (j, k)
            else:
                assert a[k] == b[k], (j, k)


def _dataloader(make, nw, n=None, **kw):
    out = []
    for batch in torch.utils.data.DataLoader(make(nw), batch_size=B, num_workers=nw, **kw):
        out.append(batch)
        if n is not None and len(out) == n:
            break
    return out


@pytest.mark.parametrize("nw,mode", CASES)
@pytest.mark.parametrize("u8,window", [(False, False), (True, True)])
def test_same_batches_as_dataloader(root, nw, mode, u8, window):
    kw = {"return_uint8": u8}
    if window:
        kw["delta_timestamps"] = {"observation.images.front": [-1 / 30, 0.0], "action": [0.0, 1 / 30, 2 / 30]}

    def make(n):
        return _ds(root, n, **kw)

    ref = _dataloader(make, nw)
    loader = StreamLoader(make(nw), B, num_workers=nw, mode=mode)
    assert loader.mode == mode
    got = list(loader)
    assert_batches_equal(ref, got)
    assert sum(len(b["index"]) for b in got) == sum(LENGTHS)


@pytest.mark.parametrize("nw,mode", [(0, "threads"), (2, "threads"), (2, "processes")])
def test_drop_last_same_batches(root, nw, mode):
    ref = _dataloader(lambda n: _ds(root, n, drop_last=True), nw, drop_last=True)
    got = list(StreamLoader(_ds(root, nw), B, num_workers=nw, mode=mode, drop_last=True))
    assert_batches_equal(ref, got)
    assert all(len(b["index"]) == B for b in got)


@pytest.mark.parametrize("nw,mode", [(0, "threads"), (2, "threads"), (2, "processes")])
def test_mixture_same_batches(mix_roots, nw, mode):
    def make(n):
        return StreamingMultiLeRobotDataset(
            ["ldr/a", "ldr/b"],
            roots=mix_roots,
            weights=[2, 1],
            batch_size=B,
            num_workers=n,
            max_num_shards=max(1, n),
            episode_pool_size=2,
        )

    ref = _dataloader(make, nw)
    got = list(StreamLoader(make(nw), B, num_workers=nw, mode=mode))
    assert_batches_equal(ref, got)
    assert {int(i) for b in got for i in b["dataset_index"]} == {0, 1}


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_kept_batches_never_overwritten(root, mode):
    """100 batches kept by the caller: at the end each still equals the DataLoader's (no slot, ring
    or batch tensor reused under a batch the caller holds)."""
    nw = 2

    def make(n):
        return _ds(root, n, repeat=True, return_uint8=True)

    ref = _dataloader(make, nw, n=100)
    kept = []
    for batch in StreamLoader(make(nw), B, num_workers=nw, mode=mode, prefetch_batches=2):
        kept.append(batch)
        if len(kept) == 100:
            break
    assert_batches_equal(ref, kept)
    ptrs = {b["observation.images.front"].data_ptr() for b in kept}
    assert len(ptrs) == 100  # every kept batch owns its frames


@pytest.mark.parametrize("nw", [0, 2])
def test_threads_recycles_dropped_batches_never_kept_ones(root, nw):
    """Threads mode reuses the batch tensors of batches the caller let go of (fewer distinct frame
    buffers than batches), and every batch still equals the DataLoader's when it is handed out; a
    batch or a view of one the caller keeps is never reused: it equals the DataLoader's at the end."""
    from lerobotstream.loader._batch import _ALONE

    if _ALONE is None:
        pytest.skip("this torch cannot count a storage's references: no recycling")

    def make(n):
        return _ds(root, n, repeat=True, return_uint8=True)

    ref = _dataloader(make, nw, n=60)
    ptrs, kept, views = [], {}, {}
    for j, batch in enumerate(StreamLoader(make(nw), B, num_workers=nw, mode="threads")):
        assert_batches_equal(ref[j : j + 1], [batch])  # right when handed out
        ptrs.append(batch["observation.images.front"].data_ptr())
        if j % 10 == 3:
            kept[j] = batch  # the whole batch kept
        elif j % 10 == 7:
            views[j] = batch["observation.images.front"][1:]  # only a view of its frames kept
        del batch
        if j == 59:
            break
    assert len(set(ptrs)) < len(ptrs) // 2  # dropped batches' tensors were reused
    for j, b in kept.items():
        assert_batches_equal(ref[j : j + 1], [b])
    for j, v in views.items():
        assert torch.equal(v, ref[j]["observation.images.front"][1:]), j
    for j in (*kept, *views):  # no later batch got a held batch's tensor
        assert ptrs[j] not in ptrs[j + 1 :], j


@pytest.mark.parametrize(
    "nw,mode,ctx",
    [
        (0, "threads", None),
        (2, "threads", None),
        (2, "processes", "spawn"),
        (2, "processes", "fork"),
        (2, "processes", "forkserver"),
    ],
)
def test_loader_resume_exact(root, nw, mode, ctx):
    """k batches, state_dict, a new loader restored from it: the rest equals the uninterrupted run's,
    in this epoch and the next (set_epoch)."""
    full = list(StreamLoader(_ds(root, nw), B, num_workers=nw, mode=mode, multiprocessing_context=ctx))
    extra = ctx in (None, "fork")  # spawn/forkserver workers import torch: the one resume there
    for k in (1, 3) if extra else (3,):
        first = StreamLoader(_ds(root, nw), B, num_workers=nw, mode=mode, multiprocessing_context=ctx)
        got = []
        for batch in first:
            got.append(batch)
            if len(got) == k:
                break
        state = first.state_dict()
        assert state["stream"]["samples"] == sum(len(b["index"]) for b in got)
        second = StreamLoader(_ds(root, nw), B, num_workers=nw, mode=mode, multiprocessing_context=ctx)
        second.load_state_dict(torch.load(_roundtrip(state), weights_only=False))
        rest = list(second)
        assert_batches_equal(full, got + rest)
    if not extra:
        return
    # a finished epoch starts again from its first sample; set_epoch gives the next epoch's order
    again = list(second)
    assert_batches_equal(full, again)
    second.set_epoch(1)
    e1 = list(second)
    ref1 = _ds(root, nw)
    ref1.set_epoch(1)
    assert_batches_equal(_dataloader(lambda n: ref1, nw), e1)


def _roundtrip(state):
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return buf


def test_resume_on_another_worker_count_continues_the_epoch_elastically(root):
    first = StreamLoader(_ds(root, 2), B, num_workers=2, mode="threads")
    it = iter(first)
    consumed = [next(it), next(it)]
    state = first.state_dict()
    it.close()
    other = StreamLoader(_ds(root, 3), B, num_workers=3, mode="threads")
    other.load_state_dict(state)  # another topology: the rest of the epoch, each sample once
    seen = [
        (int(e), int(f))
        for batch in consumed + list(other)
        for e, f in zip(batch["episode_index"], batch["frame_index"])
    ]
    assert sorted(seen) == sorted((e, f) for e, n in enumerate(LENGTHS) for f in range(n))
    with pytest.raises(ResumeStateError, match="StreamLoader state"):
        other.load_state_dict({"epoch": 0})


def test_choose_mode_and_options(root):
    assert choose_mode(0, 64)[0] == "threads"
    assert choose_mode(4, 2)[0] == "threads"
    mode, reason = choose_mode(4, 32)
    assert mode == "processes" and "32" in reason
    loader = StreamLoader(_ds(root, 0), B, num_workers=0, mode="processes")
    assert loader.mode == "threads" and "num_workers=0" in loader.mode_reason
    for bad in (dict(batch_size=0), dict(num_workers=-1), dict(mode="gpu"), dict(prefetch_batches=0)):
        kw = {"batch_size": B, **bad}
        with pytest.raises(StreamingConfigError):
            StreamLoader(_ds(root, 0), kw.pop("batch_size"), **kw)
    with pytest.raises(StreamingConfigError, match="dataset"):
        StreamLoader([1, 2, 3], B)


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_multiprocessing_context_is_checked_at_construction(root, mode):
    """The DataLoader's rule, in either mode and before any batch: None, a start method of this
    platform or a context object; anything else is a StreamingConfigError naming the argument,
    the value and the start methods."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    for ok in (None, *methods, multiprocessing.get_context(methods[0])):
        assert StreamLoader(_ds(root, 0), B, num_workers=2, mode=mode, multiprocessing_context=ok)
    for bad in ("bogus", "SPAWN", 3):
        with pytest.raises(StreamingConfigError, match="multiprocessing_context must be None.*'spawn'") as err:
            StreamLoader(_ds(root, 0), B, num_workers=2, mode=mode, multiprocessing_context=bad)
        assert err.value.option == "multiprocessing_context" and err.value.value is bad


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_the_loader_hands_its_settings_to_the_stream_as_data(root, mode):
    """The loader's batch_size / num_workers / drop_last reach the stream as a LoaderSettings: the
    dataset and its options are not changed (``ds.options`` never goes stale), the numpy ints the
    options' rules accept are accepted here too (issue 34), and the loader's state describes its
    own settings while the dataset's own state_dict() still describes the options'."""
    import numpy as np

    from lerobotstream.dataset._stream import LoaderSettings

    ds = _ds(root, 0, batch_size=None)
    before = ds.options
    loader = StreamLoader(
        ds,
        np.int64(B),
        num_workers=np.int64(2),
        mode=mode,
        drop_last=np.bool_(False),
        prefetch_batches=np.int64(2),
        timeout=np.float64(0),
    )
    assert loader.settings == LoaderSettings(B, 2, False) and type(loader.batch_size) is int
    ref = _dataloader(lambda n: _ds(root, n), 2)
    assert_batches_equal(ref, list(loader))
    assert ds.options is before and (ds.options.batch_size, ds.options.num_workers) == (None, 0)
    assert ds.loader_settings() == LoaderSettings(None, 0, False)
    state = loader.state_dict()["stream"]
    assert (state["batch_size"], state["num_workers"]) == (B, 2)
    assert (ds.state_dict()["batch_size"], ds.state_dict()["num_workers"]) == (1, 0)
    for bad in (dict(batch_size=np.float64(4)), dict(num_workers=np.int64(-1)), dict(drop_last="yes")):
        kw = {"batch_size": B, **bad}
        with pytest.raises(StreamingConfigError, match=f"StreamLoader: {next(iter(bad))} must be"):
            StreamLoader(ds, kw.pop("batch_size"), **kw)


@pytest.mark.parametrize("nw,mode", [(0, "threads"), (2, "processes")])
def test_lerobot06_features_with_lerobot_collate(make_generated_dataset, nw, mode):
    """Depth video, ``image`` (RGB and depth) features and language columns, batched with
    LeRobot's language-aware collate: the DataLoader's batches."""
    pytest.importorskip("av")
    pytest.importorskip("PIL")
    from lerobotstream.dataset._collate import lerobot_collate_fn

    root = Path(
        make_generated_dataset(
            episode_lengths=(6, 5),
            fps=10,
            cameras=(("observation.images.front", 32, 24),),
            depth_cameras=(("observation.images.depth", 32, 24),),
            image_cameras=(("observation.images.wrist", 20, 16),),
            depth_image_cameras=(("observation.images.depth_img", 16, 12),),
            language=True,
            episodes_per_video_file=2,
        )
    )

    def make(n):
        return _ds(root, n, delta_timestamps={"observation.images.depth": [-0.1, 0.0]})

    ref = _dataloader(make, nw, collate_fn=lerobot_collate_fn)
    got = list(StreamLoader(make(nw), B, num_workers=nw, mode=mode, collate_fn=lerobot_collate_fn))
    assert_batches_equal(ref, got)
    assert got[0]["observation.images.depth"].shape[1:3] == (2, 1)


def test_frames_written_into_a_given_slot():
    """``frames_to_u8_chw`` / ``frames_to_float_chw(out=)``: the batch row is written and returned,
    values as without ``out``; a slot that does not fit gives None (the caller allocates)."""
    from lerobotstream.decode._frames import frames_to_float_chw, frames_to_u8_chw

    g = torch.Generator().manual_seed(0)
    frames = [torch.randint(0, 256, (24, 32, 3), dtype=torch.uint8, generator=g).permute(2, 0, 1) for _ in range(3)]
    batch = torch.empty((3, 3, 24, 32), dtype=torch.uint8)
    for i, f in enumerate(frames):
        row = batch[i]
        assert frames_to_u8_chw([f], out=row) is row
    assert torch.equal(batch, torch.stack([f.contiguous() for f in frames]))
    fb = torch.empty((2, 3, 24, 32), dtype=torch.float32)
    got = frames_to_float_chw(frames[:2], squeeze=False, out=fb)
    assert got.data_ptr() == fb.data_ptr() and torch.equal(fb, torch.stack(frames[:2]).to(torch.float32) / 255)
    assert frames_to_u8_chw([frames[0]], out=torch.empty((3, 24, 31), dtype=torch.uint8)) is None
    assert frames_to_u8_chw([frames[0]], out=torch.empty((3, 24, 32), dtype=torch.float32)) is None


def _plain_collate(items):  # "another collate function": items reach it unchanged
    from torch.utils.data import default_collate

    return default_collate(items)


@pytest.mark.parametrize("ring,collate", [(1, None), (3, None), (2, _plain_collate)])
def test_processes_frames_in_the_ring_kept_batches_never_overwritten(root, ring, collate):
    """processes mode writes frames straight into ring slots (the known collates) or copies fresh
    batch tensors in (another collate): with the tightest ring (1 slot: each batch waits for the
    previous one's return), a wider one and a window of frames, 100 kept batches still equal the
    DataLoader's at the end."""
    nw = 2
    kw = dict(
        repeat=True,
        return_uint8=True,
        decoded_queue_size=12,
        delta_timestamps={"observation.images.front": [-1 / 30, 0.0]},
    )
    ref = _dataloader(lambda n: _ds(root, n, **kw), nw, n=100, collate_fn=collate)
    kept = []
    for batch in StreamLoader(
        _ds(root, nw, **kw), B, num_workers=nw, mode="processes", prefetch_batches=ring, collate_fn=collate
    ):
        kept.append(batch)
        if len(kept) == 100:
            break
    assert_batches_equal(ref, kept)


class _Limited:
    """A ``wrap_items`` wrapper (lerobotstream-train's TrainingStream shape) ending each shard
    after ``limit`` items, while its pipeline has assembled items ahead (waiting for ring slots)."""

    def __init__(self, dataset, limit):
        self.dataset, self.limit = dataset, limit

    def wrap_items(self, items, wid, nw, source_stats):
        for n, item in enumerate(items):
            if n == self.limit:
                return
            yield item


def test_processes_shard_ended_early_by_a_wrapper_does_not_wait_for_slots(root):
    ds = _ds(root, 2, repeat=True, return_uint8=True, decoded_queue_size=16)
    got = list(StreamLoader(_Limited(ds, 2 * B + 1), B, num_workers=2, mode="processes", prefetch_batches=1))
    assert [len(b["index"]) for b in got] == [B, B, B, B, 1, 1]


def test_ring_slots_write_frames_in_place_and_wait_for_their_turn():
    """``RingSlots``: once the ring exists, a batch's tensors are views into its slot (b % size)
    and ``write`` copies only the other keys; batch b + size waits until batch b's slot is
    returned; a stopped ring wakes every waiter with ``RingStopped``."""
    import threading

    from lerobotstream.loader._procs import RingSlots, RingStopped, WorkerRing

    ring = WorkerRing(2)
    slots = RingSlots(2, ring)
    fresh = slots(0)("img", (3, 4), torch.uint8)  # before the ring: a fresh batch tensor
    assert fresh is not None and slots.take_slot(0) is None
    first = {"img": slots.take(0)["img"], "index": torch.arange(2)}
    storages = ring.create(first, 0)
    assert ring.acquire(0) == 0
    assert ring.entries({"img": torch.zeros(6, 3, 4, dtype=torch.uint8)}) is None  # more bytes than reserved
    rows = [slots(2 + i)("img", (3, 4), torch.uint8) for i in range(2)]  # batch 1 -> slot 1
    assert slots.take_slot(1) == 1
    assert rows[0].data_ptr() == storages[1].data_ptr()
    for i, r in enumerate(rows):
        r.fill_(i + 1)
    batch = {"img": slots.take(1)["img"], "index": torch.tensor([5, 6])}
    entries = ring.entries(batch)
    ring.write(1, batch, entries)
    view = torch.empty(0, dtype=torch.uint8).set_(storages[1], 0, (2, 3, 4))
    assert view.data_ptr() == batch["img"].data_ptr() and view[1].eq(2).all()
    idx = [e for k, e in entries if k == "index"][0]
    assert torch.equal(torch.empty(0, dtype=torch.int64).set_(storages[1], idx[3] // 8, (2,)), batch["index"])

    started, took = threading.Event(), []

    def batch2():  # slot 0 again: waits for batch 0's return
        started.set()
        slot = slots(4)
        took.append(slot("img", (3, 4), torch.uint8))

    t = threading.Thread(target=batch2)
    t.start()
    started.wait()
    assert not took  # (it can only have finished after the release below)
    ring.release(0)
    t.join()
    assert took[0].data_ptr() == storages[0].data_ptr() and slots.take_slot(2) == 0

    errors = []

    def batch3():  # slot 1, never returned: the stop wakes it
        try:
            slots(6)("img", (3, 4), torch.uint8)
        except RingStopped:
            errors.append("stopped")

    t = threading.Thread(target=batch3)
    t.start()
    ring.stop()
    t.join()
    assert errors == ["stopped"]


def test_small_keys_in_bulk_collate_as_default_collate():
    """``BatchSlots(bulk=True)``: an item's small keys written into the batch's arrays (the item
    carries ``IN_BATCH``) give default_collate's batch; an item whose value does not fit the
    batch's array (another dtype) keeps its own tensor, and the others' rows are made tensors
    again, so the batch is still default_collate's of the plain items."""
    import numpy as np
    from torch.utils.data import default_collate

    from lerobotstream.loader._batch import IN_BATCH, BatchSlots, collate_items

    def items_and_batch(values):
        slots = BatchSlots(4, bulk=True)
        items, plain = [], []
        for n, (state, index) in enumerate(values):
            s = slots(n)
            item = {"state": s.put("state", state), "index": s.put("index", index), "task": f"t{n}"}
            for k, v in (("state", state), ("index", index)):
                if item[k] is None:
                    item[k] = torch.from_numpy(np.array(v))
            items.append(item)
            plain.append(
                {
                    "state": torch.from_numpy(np.array(state)),
                    "index": torch.from_numpy(np.array(index)),
                    "task": f"t{n}",
                }
            )
        return items, plain, slots.take(0)

    col = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.arange(4, dtype=np.int64)
    items, plain, tensors = items_and_batch([(col[i], idx[i]) for i in range(3)])
    assert all(it["state"] is IN_BATCH for it in items)
    assert_batches_equal([default_collate(plain)], [collate_items(items, default_collate, tensors)])
    odd = [(col[0], idx[0]), (col[1], idx[1]), (col[2].astype(np.float64), idx[2])]
    items, plain, tensors = items_and_batch(odd)
    assert items[2]["state"].dtype == torch.float64 and items[0]["state"] is IN_BATCH
    assert_batches_equal([default_collate(plain)], [collate_items(items, default_collate, tensors)])


def _list_collate(items):  # a collate whose batch is not a dict: pickled through the pipe
    return [(int(it["episode_index"]), int(it["frame_index"])) for it in items]


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_a_short_last_batch_of_a_custom_collate_counts_its_own_samples(root, mode):
    """The loader counts each batch's items (what resume counts), also for a collate whose batch
    is a list: the short last batch of the shard counts its own samples, not batch_size."""
    loader = StreamLoader(_ds(root, 1), batch_size=B, num_workers=1, mode=mode, collate_fn=_list_collate)
    seen, counts = [], []
    for batch in loader:
        seen += batch
        counts.append(loader.samples_consumed)
    total = sum(LENGTHS)
    assert total % B and sorted(seen) == sorted((e, f) for e, n in enumerate(LENGTHS) for f in range(n))
    assert counts == [min(B * (i + 1), total) for i in range(len(counts))] and counts[-1] == total
