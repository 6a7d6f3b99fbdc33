"""Item tensors: contiguous NCHW frames (float32 and uint8), bitwise equal to map-style's
``x.type(torch.float32) / 255`` for every uint8 value, from channels-last views and lists of views."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lerobotstream.dataset._assemble import _video_value
from lerobotstream.dataset._dataset import StreamingLeRobotDataset


def _all_values_nhwc(h: int = 48, w: int = 64, t: int = 3) -> torch.Tensor:
    """(T, C, H, W) uint8 view of NHWC memory (torchcodec's layout) holding every value 0..255."""
    n = t * h * w * 3
    nhwc = (torch.arange(n, dtype=torch.int64) * 7 % 256).to(torch.uint8).reshape(t, h, w, 3)
    return nhwc.permute(0, 3, 1, 2)


@pytest.mark.parametrize("large", [False, True])
def test_float_conversion_bitwise_equal_all_values(large):
    x = _all_values_nhwc(480 if large else 48, 640 if large else 64)
    assert not x.is_contiguous() and set(x.unique().tolist()) == set(range(256))
    ref = x.type(torch.float32) / 255
    for data in (x, list(x.unbind(0)), x[:1], [x[1]]):
        got = _video_value(data, return_uint8=False)
        want = ref if len(data) == 3 else ref[1 if isinstance(data, list) else 0]
        assert got.dtype == torch.float32 and got.is_contiguous()
        assert got.shape == want.shape
        assert torch.equal(got.view(torch.int32), want.contiguous().view(torch.int32))  # bitwise


def test_uint8_items_contiguous_and_owned():
    x = _all_values_nhwc()
    for data in (x, list(x.unbind(0)), x[:1]):
        got = _video_value(data, return_uint8=True)
        assert got.dtype == torch.uint8 and got.is_contiguous()
        assert torch.equal(got, x if len(data) == 3 else x[0])
        assert got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    got = _video_value(x[:1], return_uint8=True)
    got.fill_(0)
    assert x.max() == 255  # the item owns its data


def test_dataset_items_contiguous(make_generated_dataset):
    cam = (("observation.images.front", 64, 48),)
    root = Path(make_generated_dataset(episode_lengths=(7, 5), codec="av1", cameras=cam))
    for u8 in (False, True):
        ds = StreamingLeRobotDataset(
            root=root, return_uint8=u8, delta_timestamps={"observation.images.front": [-1 / 30, 0.0]} if u8 else None
        )
        n = 0
        for it in ds:
            v = it["observation.images.front"]
            assert v.is_contiguous() and v.dtype == (torch.uint8 if u8 else torch.float32)
            assert v.shape == ((2, 3, 48, 64) if u8 else (3, 48, 64))
            n += 1
        assert n == 12


def test_first_chunk_and_ffmpeg_threads_same_items(make_generated_dataset):
    cam = (("observation.images.front", 64, 48),)
    root = Path(make_generated_dataset(episode_lengths=(7, 5), codec="av1", cameras=cam))

    def epoch(**kw):
        ds = StreamingLeRobotDataset(root=root, decode_lookahead=4, **kw)
        out = [(int(i["episode_index"]), int(i["frame_index"]), i["observation.images.front"]) for i in ds]
        return out, ds.stats()

    ref, _ = epoch()
    for kw in (dict(first_lookahead=1), dict(first_lookahead=3, ffmpeg_threads=0), dict(ffmpeg_threads=2)):
        got, st = epoch(**kw)
        assert [g[:2] for g in got] == [r[:2] for r in ref]  # same planner order
        assert all(torch.equal(g[2], r[2]) for g, r in zip(got, ref))
        assert st["torchcodec_import_s"] >= 0
    with pytest.raises(ValueError):
        StreamingLeRobotDataset(root=root, ffmpeg_threads=-1)


def test_first_chunk_decoded_before_the_next_chunk_is_drawn(make_generated_dataset, monkeypatch):
    """The iterator's first chunk (``first_lookahead`` anchors) is decoded alone: drawn at once, the
    next chunk's job of the same episode raced it for the episode's decode lock (both wake when the
    episode's fetch ends) and won about half the time, so the first items waited for a whole
    ``decode_lookahead`` chunk's decode.

    Ordered by events, not by time: the first decode holds until the pipeline has either drawn the
    next chunk (the bug: its draw is logged as ``("draw", n)`` before the first decode's end) or
    started assembling the first item (the pipeline waits for the first chunk, as it must)."""
    import threading

    from lerobotstream.dataset import _decodejob, _pipeline

    cam = (("observation.images.front", 64, 48),)
    root = Path(make_generated_dataset(episode_lengths=(40,), codec="av1", cameras=cam))
    calls: list[tuple[str, int]] = []
    decode = _decodejob.EpisodeJob.decode
    chunks, assemble = _pipeline.Pipeline._chunks, _pipeline.Pipeline._assemble
    moved_on = threading.Event()  # the pipeline drew another chunk or started assembling

    def first_one_held(self, frames):
        calls.append(("start", len(frames)))
        if len(calls) == 1:
            moved_on.wait(60)  # a next chunk drawn already would be logged now, before this decode ends
        try:
            return decode(self, frames)
        finally:
            calls.append(("end", len(frames)))

    def chunks_logged(self, dec):
        for n, chunk in enumerate(chunks(self, dec), 1):
            yield chunk
            calls.append(("draw", n + 1))  # resumed: chunk n + 1 is being drawn
            moved_on.set()

    def assemble_marked(self, job, fr, decoded, *rest):
        moved_on.set()
        return assemble(self, job, fr, decoded, *rest)

    monkeypatch.setattr(_decodejob.EpisodeJob, "decode", first_one_held)
    monkeypatch.setattr(_pipeline.Pipeline, "_chunks", chunks_logged)
    monkeypatch.setattr(_pipeline.Pipeline, "_assemble", assemble_marked)
    ds = StreamingLeRobotDataset(root=root, first_lookahead=4, decode_lookahead=16)
    it = iter(ds)
    next(it)
    assert calls[:2] == [("start", 4), ("end", 4)]
    assert sum(1 for _ in it) == 39  # the rest of the epoch still comes, in full
    assert sum(n for kind, n in calls if kind == "start") == 40  # every anchor in one decode, once


@pytest.mark.parametrize("c,h,w", [(3, 1, 1), (3, 7, 5), (1, 9, 11), (4, 6, 10), (3, 481, 641)])
def test_c_conversion_layouts(c, h, w):
    """The one-pass C conversion: channels-last, planar, sliced and broadcast strides, odd sizes."""
    from lerobotstream.decode._frames import frames_to_float_chw

    g = torch.Generator().manual_seed(c * 1000 + h + w)
    nhwc = torch.randint(0, 256, (2, h, w, c), dtype=torch.uint8, generator=g)
    views = {
        "channels_last": nhwc.permute(0, 3, 1, 2)[1],
        "contiguous": nhwc.permute(0, 3, 1, 2)[0].contiguous(),
        "sliced": nhwc.permute(0, 3, 1, 2)[1][:, ::2, 1::2],
        "broadcast": nhwc[0, :, :, 0].expand(c, h, w),
    }
    for name, v in views.items():
        want = (v.type(torch.float32) / 255).contiguous()
        got = frames_to_float_chw([v])
        assert got.shape == v.shape and got.is_contiguous(), name
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), name
        both = frames_to_float_chw([v, v], squeeze=False)
        assert both.shape == (2, *v.shape) and torch.equal(both[1], want), name


def test_c_conversion_declines_what_it_cannot_convert():
    from lerobotstream.decode._frames import frames_to_float_chw

    x = torch.zeros(3, 4, 5, dtype=torch.uint8)
    assert frames_to_float_chw([]) is None
    assert frames_to_float_chw([x.float()]) is None  # not uint8
    assert frames_to_float_chw([x, torch.zeros(3, 4, 6, dtype=torch.uint8)]) is None  # shapes differ
    assert frames_to_float_chw([x[0]]) is None  # not 3-D
    got = _video_value([x.float()], return_uint8=False)  # torch's path takes over
    assert got.dtype == torch.float32 and got.shape == (3, 4, 5)
