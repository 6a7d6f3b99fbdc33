"""DecodedGopCache.get_run / use_many: the per-GOP lookups the decode job uses."""

import torch

from lerobotstream.dataset._decoded_gops import DecodedGopCache


def _block(t, first):
    return torch.arange(first, first + t, dtype=torch.uint8).view(t, 1, 1, 1).expand(t, 3, 2, 2).contiguous()


def test_get_run_returns_the_run_and_touches_lru():
    c = DecodedGopCache(3 * 12 * 4)  # room for 3 runs of 4 frames (3x2x2 bytes each)
    for g in (0, 4, 8):
        c.put(("e", g), g, _block(4, g), demand=4)
    first, frames = c.get_run(("e", 0))  # touched: the oldest is now ("e", 4)
    assert first == 0 and frames.shape == (4, 3, 2, 2) and int(frames[2, 0, 0, 0]) == 2
    assert c.get_run(("e", 99)) is None
    c.put(("e", 12), 12, _block(4, 12), demand=4)
    assert c.get_run(("e", 4)) is None and c.get_run(("e", 0)) is not None
    assert c.get(("e", 0), 3) is not None and c.get(("e", 0), 4) is None  # per-frame lookup agrees


def test_use_many_equals_use():
    a, b = DecodedGopCache(1 << 20), DecodedGopCache(1 << 20)
    for c in (a, b):
        for g in (0, 4, 8):
            c.put(("e", g), g, _block(4, g), demand=3)
    keys, uses = [("e", 0), ("e", 4), ("e", 8), ("e", 99)], [3, 1, 5, 2]
    a.use_many(keys, uses)
    for k, n in zip(keys, uses):
        b.use(k, n)
    assert len(a) == len(b) == 1 and a.nbytes == b.nbytes == 48
    assert a.get_run(("e", 4)) is not None and a.get_run(("e", 0)) is None
    a.use_many([("e", 4)], [2])  # the last remaining use releases it
    assert len(a) == 0 and a.nbytes == 0
