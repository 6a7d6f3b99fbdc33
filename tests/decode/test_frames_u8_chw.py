"""frames_to_u8_chw: the uint8 item copy (C de-interleave) gives torch's bytes, or declines."""

import pytest
import torch

from lerobotstream.decode._frames import frames_to_u8_chw


def _nhwc_views(t, h, w, pad=0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (t, h, w + pad, 3), dtype=torch.uint8, generator=g)
    return x[:, :, pad // 2 : pad // 2 + w].permute(0, 3, 1, 2)  # torchcodec's NCHW view of NHWC memory


@pytest.mark.parametrize(
    "h,w,pad", [(480, 640, 0), (96, 128, 0), (37, 53, 0), (5, 15, 0), (7, 17, 0), (1, 1, 0), (9, 33, 6)]
)
def test_bitwise_equal_to_torch_copy(h, w, pad):
    x = _nhwc_views(3, h, w, pad)
    got = frames_to_u8_chw(list(x), squeeze=False)
    assert got.is_contiguous() and got.dtype == torch.uint8 and got.shape == (3, 3, h, w)
    assert torch.equal(got, x.contiguous())
    one = frames_to_u8_chw([x[1]])
    assert one.shape == (3, h, w) and one.is_contiguous() and torch.equal(one, x[1].contiguous())
    assert frames_to_u8_chw([x[1]], squeeze=False).shape == (1, 3, h, w)


def test_output_owns_its_memory():
    x = _nhwc_views(1, 8, 16)
    got = frames_to_u8_chw([x[0]])
    x.fill_(0)
    assert got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert int(got.sum()) > 0


def test_declines_what_it_cannot_take():
    x = _nhwc_views(2, 8, 16)
    assert frames_to_u8_chw([]) is None
    assert frames_to_u8_chw([x[0].contiguous()]) is None  # planar already: torch's copy
    assert frames_to_u8_chw([x[0].float()]) is None
    assert frames_to_u8_chw([torch.zeros(4, 8, 16, dtype=torch.uint8)]) is None  # 4 channels
    assert frames_to_u8_chw([x[0], x[1][:, :4]]) is None  # shapes differ
    assert frames_to_u8_chw([torch.zeros(8, 16, dtype=torch.uint8)]) is None


def test_new_frames_reuse_freed_memory():
    """A new item frame comes from malloc (``empty_frames``), which reuses the block of the frame
    freed just before: no fresh page (a minor fault each) per frame, unlike torch's
    ``posix_memalign`` (issue 36: page faults were the largest CPU item beyond decode)."""
    import resource
    import sys

    from lerobotstream.decode._frames import empty_frames, frames_to_float_chw

    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only (RUSAGE_THREAD)")
    x = _nhwc_views(1, 480, 640)
    for make, pages in (
        (lambda: frames_to_u8_chw([x[0]]), 225),
        (lambda: frames_to_float_chw([x[0]]), 900),
        (lambda: empty_frames((3, 480, 640), torch.uint8).fill_(1), 225),
    ):
        make()
        f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        for _ in range(10):
            got = make()
            del got
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0
        assert faults <= pages, faults  # ten new frames: at most one frame's pages fresh in all
    t = empty_frames((2, 3), torch.float32)
    assert t.dtype == torch.float32 and t.shape == (2, 3) and t.is_contiguous()
