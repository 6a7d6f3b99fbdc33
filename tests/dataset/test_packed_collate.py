"""``PackedCollate``: the batches of ``default_collate`` / ``lerobot_collate_fn``, in fewer storages.

The oracle is the inner collate itself: same keys in the same order, dtypes, shapes and values,
batch by batch, in-process and through DataLoader workers (fork and spawn), on streamed items
with video and state windows and ``*_is_pad`` masks (frame identities burned into the pixels).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from torch.utils.data._utils.collate import default_collate

import lerobotstream
from lerobotstream.dataset._collate import PackedCollate, lerobot_collate_fn, packed_collate
from lerobotstream.dataset._dataset import StreamingLeRobotDataset

CAM = (("observation.images.front", 64, 48), ("observation.images.wrist", 32, 24))
LENGTHS = (9, 6, 11, 7)
B = 4


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(
        make_generated_dataset(episode_lengths=LENGTHS, codec="h264", gop=4, cameras=CAM, episodes_per_video_file=2)
    )


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.stride() == b.stride()
            and torch.equal(a, b)
        )
    return type(a) is type(b) and a == b


def _assert_same_batches(ref: list, got: list) -> None:
    assert len(ref) == len(got) > 1
    for a, b in zip(ref, got):
        assert list(a) == list(b)
        for k in a:
            assert _equal(a[k], b[k]), k


def _loader_batches(root, collate_fn, nw, ctx=None, **kw):
    ds = StreamingLeRobotDataset(
        root=root, max_num_shards=max(1, nw), batch_size=B, seed=3, return_uint8=True, decode_lookahead=6, **kw
    )
    dl = torch.utils.data.DataLoader(
        ds, batch_size=B, num_workers=nw, collate_fn=collate_fn, multiprocessing_context=ctx if nw else None
    )
    return list(dl)


WINDOWS = {"observation.images.front": [-0.1, 0.0], "observation.state": [-0.1, 0.0], "action": [0.0, 0.1, 0.2]}


@pytest.mark.parametrize("nw,ctx", [(0, None), (2, "fork"), (2, "spawn")])
def test_streamed_batches_equal_default_collate(root, nw, ctx):
    kw = {"delta_timestamps": WINDOWS}
    ref = _loader_batches(root, None, nw, ctx, **kw)
    got = _loader_batches(root, packed_collate, nw, ctx, **kw)
    _assert_same_batches(ref, got)
    assert sum(len(b["index"]) for b in got) == sum(LENGTHS)  # the short last batches too
    b = got[0]
    assert b["observation.images.front"].shape[:2] == (B, 2) and b["action_is_pad"].dtype == torch.bool


@pytest.fixture
def in_worker(monkeypatch):
    """Collate as inside a DataLoader worker (where PackedCollate packs; shared memory is real)."""
    from lerobotstream.dataset import _collate

    monkeypatch.setattr(_collate, "get_worker_info", lambda: object())


def _ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def test_small_keys_share_one_storage_per_dtype_frames_own_one(root):
    batch = _loader_batches(root, packed_collate, 2, "fork")[0]  # through the process boundary
    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
    frames = {k for k, v in tensors.items() if v.dim() >= 4}
    small = set(tensors) - frames
    assert frames == {c for c, _, _ in CAM} and len(small) >= 6
    for dtype in {tensors[k].dtype for k in small}:
        assert len({_ptr(tensors[k]) for k in small if tensors[k].dtype == dtype}) == 1, dtype
    assert len({_ptr(tensors[k]) for k in small}) == len({tensors[k].dtype for k in small})
    assert len({_ptr(tensors[k]) for k in frames} | {_ptr(tensors[k]) for k in small}) == len(frames) + len(
        {tensors[k].dtype for k in small}
    )
    assert all(tensors[k].is_contiguous() for k in tensors)


def test_in_process_it_is_the_inner_collate_itself():
    items = [{"state": torch.full((6,), float(i)), "n": torch.tensor(i)} for i in range(B)]
    got = packed_collate(items)  # no DataLoader worker: nothing crosses a process
    assert _ptr(got["state"]) != _ptr(got["n"]) and got["n"].storage_offset() == 0


def test_packing_in_a_worker(in_worker, tmp_path):
    items = [
        {
            "frames": torch.full((3, 256, 512), i, dtype=torch.uint8),
            "state": torch.full((6,), float(i)),
            "action": torch.full((4, 6), -float(i)),
            "flag": torch.tensor(bool(i % 2)),
            "n": torch.tensor(i),
            "m": torch.tensor(2 * i),
            "big": torch.zeros(32 << 10),
            "task": "pick",
        }
        for i in range(B)
    ]
    ref, got = default_collate(items), packed_collate(items)
    assert list(ref) == list(got) and all(_equal(ref[k], got[k]) for k in ref)
    assert all(got[k].is_shared() for k in got if k != "task")
    assert _ptr(got["state"]) == _ptr(got["action"]) != _ptr(got["n"]) == _ptr(got["m"]) != _ptr(got["flag"])
    assert got["frames"].untyped_storage().nbytes() == B * 3 * 256 * 512  # image-like: its own
    assert got["big"].untyped_storage().nbytes() == B * (32 << 10) * 4  # >= 64 KiB per batch: its own
    offsets = [got[k].storage_offset() * got[k].element_size() for k in ("state", "action", "n", "m")]
    assert all(o % 64 == 0 for o in offsets)
    torch.save(got, tmp_path / "batch.pt")  # one dtype per storage: torch.save takes it
    back = torch.load(tmp_path / "batch.pt")
    assert all(_equal(back[k], got[k]) for k in got)
    one = [{"frame": torch.zeros(3, 8, 8, dtype=torch.uint8), "index": torch.tensor(i)} for i in range(1)]
    got = packed_collate(one)  # a small frame (batch of one) still keeps its own storage
    assert got["frame"].untyped_storage().nbytes() == 3 * 8 * 8 and _ptr(got["frame"]) != _ptr(got["index"])


def test_lerobot_collate_fn_inner_keeps_lists_drops_language_and_none(in_worker):
    items = [
        {
            "observation.state": torch.full((2,), float(i)),
            "task": "t",
            "messages": [{"role": "user"}],
            "language_events": [{"text": "x"}],
            "index": torch.tensor(i),
            "target_message_indices": torch.tensor([i]),
        }
        for i in range(3)
    ]
    ref = lerobot_collate_fn(items + [None])
    got = PackedCollate(lerobot_collate_fn)(items + [None])
    assert list(ref) == list(got) and "language_events" not in got and got["messages"] == ref["messages"]
    assert all(
        _equal(ref[k], got[k])
        if isinstance(ref[k], torch.Tensor)
        else all(_equal(a, b) for a, b in zip(ref[k], got[k]))
        for k in ref
    )
    assert isinstance(got["target_message_indices"], list)  # a LeRobot list key stays a list
    assert PackedCollate(lerobot_collate_fn)([None, None]) is None


def test_what_it_cannot_pack_goes_to_the_inner_collate_unchanged(in_worker):
    ragged = [{"x": torch.zeros(2)}, {"x": torch.zeros(3)}]
    with pytest.raises(RuntimeError):
        default_collate(ragged)
    with pytest.raises(RuntimeError):
        packed_collate(ragged)  # the same error as default_collate
    mixed = [{"x": torch.zeros(2)}, {"x": torch.zeros(2, dtype=torch.int64)}]
    assert _equal(packed_collate(mixed)["x"], default_collate(mixed)["x"])
    grads = [{"x": torch.zeros(2, requires_grad=True)} for _ in range(2)]
    assert packed_collate(grads)["x"].requires_grad  # default_collate's own stack
    late_grad = [{"x": torch.zeros(2)}, {"x": torch.zeros(2, requires_grad=True)}]
    assert packed_collate(late_grad)["x"].requires_grad
    empty = [{"x": torch.zeros(0, 3), "y": torch.tensor(i)} for i in range(3)]
    assert all(_equal(a, b) for a, b in zip(packed_collate(empty).values(), default_collate(empty).values()))
    sparse = [{"x": torch.eye(2).to_sparse()} for _ in range(2)]
    with pytest.raises(RuntimeError, match="sparse"):
        packed_collate(sparse)  # default_collate's own refusal
    nested = [{"obs": {"state": torch.full((2,), float(i))}, "n": torch.tensor(i)} for i in range(2)]
    ref, got = default_collate(nested), packed_collate(nested)
    assert list(ref) == list(got) and _equal(ref["obs"]["state"], got["obs"]["state"]) and _equal(ref["n"], got["n"])
    tuples = [(torch.zeros(2), 1), (torch.ones(2), 2)]
    assert all(_equal(a, b) for a, b in zip(packed_collate(tuples), default_collate(tuples)))
    calls = []

    def mine(batch):
        calls.append(len(batch))
        return batch

    items = [{"x": torch.zeros(2)}] * 3
    assert PackedCollate(mine)(items) is items and calls == [3]  # unknown collate: called as is


def test_public_names_and_pickle():
    assert lerobotstream.packed_collate is packed_collate and lerobotstream.PackedCollate is PackedCollate
    again = pickle.loads(pickle.dumps(PackedCollate(lerobot_collate_fn)))
    assert again.inner is lerobot_collate_fn and again._packs
    assert repr(packed_collate) == "PackedCollate('default_collate')"
