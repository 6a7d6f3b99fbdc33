"""An MP4 header is untrusted: declared counts and box sizes are checked before anything is
allocated or read (small headers declaring huge sizes; tools/bomb_rss.py measures real-size ones)."""

from __future__ import annotations

import pytest

from lerobotstream.errors import Mp4InconsistentTablesError, Mp4UnsupportedError
from lerobotstream.mp4.parse import MAX_SAMPLES_PER_TRACK, MAX_TOP_LEVEL_BOXES, MOOV_MAX_BYTES, parse_mp4
from tools.bombs import mp4_header, sparse_reader, tiny_boxes, tiny_boxes_file

PATH = "videos/observation.images.top/chunk-000/file-000.mp4"


def _parse(head: bytes, file_size: int):
    read, calls = sparse_reader(head, file_size)
    return parse_mp4(read, file_size, path=PATH), calls


def test_plausible_header_parses():
    table, calls = _parse(mp4_header(1000, file_size=10_000), 10_000)
    assert table.num_samples == 1000 and len(calls) == 1


@pytest.mark.parametrize("num_samples", [20_000_000, 2_000_000_000, 0xFFFFFFFF])
def test_sample_count_over_the_track_cap(num_samples):
    # one 1-byte sample per byte of a (sparse) file: fits the file, not the per-track cap
    size = num_samples + 4096
    with pytest.raises(
        Mp4UnsupportedError, match=rf"declares {num_samples} samples, more than the {MAX_SAMPLES_PER_TRACK}"
    ) as e:
        _parse(mp4_header(num_samples, file_size=size), size)
    assert PATH in str(e.value) and e.value.box == "stsz"


def test_sample_count_over_the_file():
    # under the cap, but more 1-byte samples than the file has bytes outside moov
    with pytest.raises(Mp4InconsistentTablesError, match="cannot fit") as e:
        _parse(mp4_header(100_000, file_size=50_000), 50_000)
    assert PATH in str(e.value)


def test_moov_over_the_cap_is_not_read():
    size = MOOV_MAX_BYTES + (1 << 20)
    head = mp4_header(10, file_size=size)
    at = head.index(b"moov") - 4
    big = bytearray(head[: at + 8])  # ftyp + a moov header claiming more than the cap
    big[at : at + 4] = (MOOV_MAX_BYTES + 1).to_bytes(4, "big")
    with pytest.raises(Mp4UnsupportedError, match=f"larger than the {MOOV_MAX_BYTES} bytes") as e:
        _parse(bytes(big), size)
    assert PATH in str(e.value)


def test_moov_under_the_cap_parses():
    table, _ = _parse(mp4_header(10, file_size=1 << 20, moov_pad=200_000), 1 << 20)
    assert table.num_samples == 10 and table.moov_size > 200_000


def test_tiny_top_level_boxes_cost_one_read():
    data = tiny_boxes_file(20_000)  # 160 KB of 8-byte boxes
    with pytest.raises(Mp4UnsupportedError, match=f"more than {MAX_TOP_LEVEL_BOXES} top-level boxes") as e:
        _parse(data, len(data))
    assert PATH in str(e.value)


def test_tiny_boxes_past_the_probe_are_read_in_blocks():
    # 200 tiny boxes after a 200 KB one: their headers come in one block read, not one read each
    lead = (200_000).to_bytes(4, "big") + b"free" + bytes(200_000 - 8) + tiny_boxes(200)
    size = 1 << 20
    table, calls = _parse(mp4_header(10, file_size=size, lead=lead), size)
    assert table.num_samples == 10
    assert len(calls) <= 4, calls  # probe, the tiny boxes' block, moov, mdat's header
