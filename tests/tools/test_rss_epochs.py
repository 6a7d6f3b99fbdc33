"""tools/rss_epochs.py (the memory soak): runs, reports every field, and its verdict is the fitted slope."""

from __future__ import annotations

import json
import sys

import pytest

TINY = ["--frame-size", "64x48", "--episode-lengths", "5,4,6"]


def _linux():
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux/glibc only")


def test_rss_epochs_smoke(tmp_path, capsys):
    _linux()
    from tools.rss_epochs import FIELDS, main

    out = tmp_path / "r.json"
    assert main([*TINY, "--epochs", "2", "--warmup", "0", "--max-slope-mib", "1e9", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert [x["epoch"] for x in r["records"]] == [0, 1]
    for k in FIELDS:
        if k not in ("traced_kb", "pss_kb"):
            assert k in r["summary"] and r["records"][0][k] >= 0, k
    rec = r["records"][0]
    assert rec["malloc_in_use_kb"] > 0 and rec["threads"] >= 1 and rec["rss_peak_kb"] >= rec["rss_kb"]
    assert r["summary"]["verdict"] == "PASS"
    text = capsys.readouterr().out
    assert "per epoch" in text and "PASS: RSS grows" in text


def test_verdict_is_the_fitted_slope_after_the_warmup():
    from tools.rss_epochs import slope, summarize

    assert slope([0, 1, 2, 3], [5, 7, 9, 11]) == pytest.approx(2.0)
    assert slope([4], [1]) == 0.0

    def recs(rss_mib):
        return [
            {"epoch": i, "rss_kb": int(v * 1024), "rss_peak_kb": int(v * 1024) + 4096, "types": {}}
            for i, v in enumerate(rss_mib)
        ]

    # a steep warm-up, then flat with noise: PASS; a steady 3 MiB/epoch: FAIL
    flat = recs([100, 300, 500, 520, 518, 523, 519, 521, 520])
    s = summarize(flat, warmup=3, max_slope_mib=1.0)
    assert s["verdict"] == "PASS" and s["from_epoch"] == 3 and abs(s["slope_mib"]) < 1.0
    s = summarize(recs([100 + 3 * i for i in range(12)]), warmup=3, max_slope_mib=1.0)
    assert s["verdict"] == "FAIL" and s["slope_mib"] == pytest.approx(3.0, abs=0.01)


def test_variants_run_side_by_side(tmp_path, capsys):
    _linux()
    from tools.rss_epochs import main

    out = tmp_path / "v.json"
    rc = main(
        [
            *TINY,
            "--epochs",
            "2",
            "--warmup",
            "0",
            "--max-slope-mib",
            "1e9",
            "--json",
            str(out),
            "--variant",
            "off:LEROBOTSTREAM_MALLOC_TRIM=0",
            "--variant",
            "on:",
        ]
    )
    assert rc == 0
    v = json.loads(out.read_text())["variants"]
    assert [x["name"] for x in v] == ["off", "on"] and all(x["summary"]["verdict"] == "PASS" for x in v)
    assert v[0]["records"][-1]["heap_trims"] == 0  # trimming disabled in that child only
    assert "side by side" in capsys.readouterr().out
