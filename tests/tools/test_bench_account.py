"""The CPU accounting of the StreamLoader benchmark (``tools/bench_account.py``): nested stages
are counted exclusively, the parts of a window add up to wall time × CPUs by the arithmetic the
tables use, and the tables name every stage. No figure is asserted beyond that (timing belongs to
the benchmark)."""

from __future__ import annotations

import mmap
import sys
import types

import pytest

from tools import bench_account as ba

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (/proc, RUSAGE_THREAD)")


def _fake_module():
    mod = types.ModuleType("lrs_fake_stages")

    def inner(pages):
        m = mmap.mmap(-1, pages * mmap.PAGESIZE)  # fresh pages: minor faults inside the inner stage
        for off in range(0, pages * mmap.PAGESIZE, mmap.PAGESIZE):
            m[off] = 1
        m.close()

    def outer(pages):
        return mod.inner(pages)

    mod.inner, mod.outer = inner, outer
    sys.modules[mod.__name__] = mod
    return mod


def test_nested_stages_count_exclusively_and_uninstall():
    mod = _fake_module()
    acct = ba.Accounting().install(
        targets=(("lrs_fake_stages", "outer", "fetch"), ("lrs_fake_stages", "inner", "span_synth"))
    )
    try:
        assert acct.installed == ["lrs_fake_stages.outer", "lrs_fake_stages.inner"] and not acct.missing
        before = acct.snapshot()
        mod.outer(256)
        after = acct.snapshot()
    finally:
        acct.uninstall()
        del sys.modules["lrs_fake_stages"]
    assert ba.current() is None and not hasattr(mod.outer, "_lrs_account")
    tid = next(iter(after["regions"]))
    regs = after["regions"][tid]
    assert regs["fetch"][2] == 1 and regs["span_synth"][2] == 1  # one call each
    assert regs["fetch"][3] == 0  # frames are counted for decode calls only
    assert regs["span_synth"][1] >= 200  # the faults are the inner stage's ...
    assert regs["fetch"][1] <= regs["span_synth"][1] // 10  # ... not the outer's as well
    assert all(v[0] >= 0 for v in regs.values())
    assert tid in after["threads"] and after["faults"] >= before["faults"]


def test_missing_targets_are_listed_not_fatal():
    acct = ba.Accounting().install(
        targets=(
            ("lerobotstream.no_such_module", "f", "fetch"),
            ("lerobotstream.dataset._reader", "DatasetReader.no_such", "fetch"),
        )
    )
    try:
        assert acct.installed == [] and len(acct.missing) == 2
    finally:
        acct.uninstall()


def _snap(pid, cpu, regions, threads, cost=2e-6):
    return {"pid": pid, "cpu_s": cpu, "fault_cost_s": cost, "threads": threads, "regions": regions}


def test_account_parts_add_up():
    """One process, two threads: a decode thread (a decode call of 0.5 s with 1,000 faults, 0.1 s of
    bookkeeping) and the main thread (0.2 s of collate, 0.3 s of pipeline Python); the machine's
    other 1.0 s busy, 0.9 s idle, over a 1.5 s window on 2 CPUs (3.0 CPU s)."""
    a = _snap(1, 0.0, {}, {"11": ["lrs-decode_0", 0.0, 0], "1": ["MainThread", 0.0, 0]})
    b = _snap(
        1,
        1.1,
        {"11": {"decode_call": [0.5, 1000, 4, 150]}, "1": {"batch_assembly": [0.2, 0, 10]}},
        {"11": ["lrs-decode_0", 0.6, 1000], "1": ["MainThread", 0.5, 0]},
    )
    acc = ba.account(
        wall_s=1.5,
        samples=100,
        cpus=2,
        machine=((0.0, 0.0), (2.1, 0.9)),
        tree=({1: (0.0, 0)}, {1: (1.1, 1000)}),
        snaps={1: (a, b)},
        main_pid=1,
        main_role="pipeline_python",
        perf_samples={11: {"libdav1d.so.6": 90, "libswscale.so.6": 10}},
    )
    rows = {k: v["cpu_s"] for k, v in acc["rows"].items() if v}
    assert rows["page_faults"] == pytest.approx(1000 * 2e-6)
    assert rows["ffmpeg_decode"] + rows["colour_conversion"] == pytest.approx(0.5 - 1000 * 2e-6)
    assert rows["colour_conversion"] == pytest.approx(0.1 * (0.5 - 1000 * 2e-6))
    assert rows["batch_assembly"] == pytest.approx(0.2)
    assert rows["pipeline_python"] == pytest.approx(0.1 + 0.3)
    assert rows["others"] == pytest.approx(1.0) and rows["idle"] == pytest.approx(0.9)
    assert rows["unattributed"] == pytest.approx(0.0, abs=1e-9)
    assert acc["sum_share"] == pytest.approx(1.0) and acc["machine_share"] == pytest.approx(1.0)
    assert acc["rows"]["ffmpeg_decode"]["ms_per_sample"] == pytest.approx(1e3 * rows["ffmpeg_decode"] / 100)
    assert acc["colour_split"].startswith("perf") and acc["frames_decoded_per_sample"] == pytest.approx(1.5)
    text = ba.format_account([("threads/2", acc), ("dataloader/2", ba.median_accounts([acc, acc]))])
    for label, _ in ba.STAGES:
        assert f"| {label} |" in text
    assert "idle cores" in text and "100.0 %" in text


def test_account_without_perf_keeps_decode_whole():
    a = _snap(1, 0.0, {}, {"11": ["lrs-decode_0", 0.0, 0]})
    b = _snap(1, 0.5, {"11": {"decode_call": [0.5, 0, 4]}}, {"11": ["lrs-decode_0", 0.5, 0]})
    acc = ba.account(
        wall_s=1.0,
        samples=10,
        cpus=1,
        machine=(None, None),
        tree=({1: (0.0, 0)}, {1: (0.5, 0)}),
        snaps={1: (a, b)},
        main_pid=1,
        main_role="pipeline_python",
        perf_error="perf not found",
    )
    assert acc["rows"]["ffmpeg_decode"]["cpu_s"] == pytest.approx(0.5)
    assert acc["colour_split"] == "not split: perf not found" and acc["rows"]["idle"] is None
    assert "not split" in ba.format_account([("threads/0", acc)])
