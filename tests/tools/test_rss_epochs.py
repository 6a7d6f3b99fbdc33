"""tools/rss_epochs.py (the worker-memory experiment of issue 17.14) runs and reports every field."""

from __future__ import annotations

import json
import sys

import pytest


def test_rss_epochs_smoke(tmp_path, capsys):
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux/glibc only")
    from tools.rss_epochs import FIELDS, main

    out = tmp_path / "r.json"
    assert main(["--epochs", "2", "--warmup", "0", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert [x["epoch"] for x in r["records"]] == [0, 1]
    for k in FIELDS:
        if k != "traced_kb":
            assert k in r["summary"] and r["records"][0][k] >= 0, k
    assert r["records"][0]["malloc_in_use_kb"] > 0 and r["records"][0]["threads"] >= 1
    assert "per epoch" in capsys.readouterr().out
