"""frames_to_u8_chw: the uint8 item copy (C de-interleave) gives torch's bytes, or declines."""

import pytest
import torch

from lerobotstream.decode._frames import frames_to_u8_chw


def _nhwc_views(t, h, w, pad=0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (t, h, w + pad, 3), dtype=torch.uint8, generator=g)
    return x[:, :, pad // 2:pad // 2 + w].permute(0, 3, 1, 2)  # torchcodec's NCHW view of NHWC memory


@pytest.mark.parametrize("h,w,pad", [(480, 640, 0), (96, 128, 0), (37, 53, 0), (5, 15, 0), (7, 17, 0),
                                     (1, 1, 0), (9, 33, 6)])
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
