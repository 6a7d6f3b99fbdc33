"""tools/loader_cpu_split.py (StreamLoader's CPU per sample split by thread clocks): a trial in
each mode reports its fields, the parts inside the whole (no number is asserted beyond that)."""

from __future__ import annotations

import sys

import pytest


@pytest.mark.parametrize("row", ["threads/0", "processes/1"])
def test_loader_cpu_split_trial(make_generated_dataset, row):
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only (/proc, pthread CPU clocks)")
    from tools.loader_cpu_split import trial

    root = make_generated_dataset(episode_lengths=(9, 7), codec="av1", cameras=(("observation.images.front", 32, 24),))
    got = trial(row, 8, str(root), 4)
    assert got["row"] == row and got["samples"] >= 8 and got["cpu"] > 0
    if row.startswith("threads"):
        assert set(got) >= {"decode", "beyond_decode", "copy", "held"}
        # the hooks saw the decoder and the frame copy (over the whole trial: within the measured
        # window the pipeline may already have decoded every frame it needs, so the window's
        # decode CPU can be 0 on a tiny dataset, depending on how far ahead the threads ran)
        assert got["decode_calls"] > 0 and got["copy_calls"] > 0
        assert got["decode"] >= 0 and got["copy"] >= 0
        assert abs(got["beyond_decode"] - (got["cpu"] - got["decode"])) < 1e-3
