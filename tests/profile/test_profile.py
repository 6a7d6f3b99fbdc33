"""Profiling tools on a tiny generated dataset: report fields present and consistent.

Runs ``python -m lerobotstream.profile`` (torch's DataLoader in process and with 2 workers,
``StreamLoader`` in threads and processes mode; the peer benchmark
``tools/bench.py`` has its smoke runs in ``tests/tools/test_bench.py``). No timing assertions: only
relations that must hold whatever the machine's speed.
"""

from __future__ import annotations

import json
import os

import pytest

from lerobotstream.profile import build_report, format_report
from lerobotstream.profile.__main__ import main as profile_main
from lerobotstream.profile._memory import read_memory
from lerobotstream.profile._report import STAGES


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from lerobotstream.testing import make_dataset

    root = tmp_path_factory.mktemp("prof") / "ds"
    return make_dataset(
        root,
        episode_lengths=[12, 16, 10, 14],
        codec="av1",
        cameras=(("observation.images.front", 64, 48), ("observation.images.wrist", 64, 48)),
    )


def _check_report(r: dict, *, batch_size: int, steps: int, workers: int) -> None:
    th, la, st, by, me = r["throughput"], r["latency"], r["stages"], r["bytes"], r["memory"]
    assert 0 < th["steps"] <= steps
    assert 0 < th["samples"] <= batch_size * th["steps"]
    assert th["frames"] == 2 * th["samples"]  # two cameras, no windows
    assert th["wall_s"] > 0 and th["samples_per_s"] > 0 and th["frames_per_s"] == pytest.approx(2 * th["samples_per_s"])
    assert 0 < la["first_batch_s"] <= th["wall_s"]
    if th["steps"] > 1:
        assert 0 <= la["batch_wait_p50_ms"] <= la["batch_wait_p95_ms"] <= la["batch_wait_p99_ms"]
    assert set(st["seconds"]) == {name for name, _ in STAGES}
    for name in (
        "metadata",
        "sidecar",
        "fetch",
        "synthesize",
        "decoder_open",
        "decode",
        "assemble",
        "transforms",
        "worker_queue_wait",
        "main_batch_wait",
    ):
        assert st["seconds"][name] is not None and st["seconds"][name] >= 0, name
    assert st["processes"] == max(1, workers)
    assert st["worker_stage_sum_s"] <= th["wall_s"] * st["threads_bound"] + 1e-6
    assert st["seconds"]["main_batch_wait"] <= th["wall_s"] + 1e-6
    # bytes: what travelled covers what the delivered samples needed
    assert by["needed_frame_bytes"] > 0 and by["span_bytes"] >= by["needed_frame_bytes"]
    assert by["span_payload_bytes"] >= by["span_bytes"]  # every delivered episode's spans were fetched
    assert by["fetched_bytes"] >= by["span_payload_bytes"]
    assert by["fetched_over_needed"] >= 1.0 and by["requests"] >= by["episodes_touched"]
    assert r["decoder"]["opens"] >= 1 and r["decoder"]["fallbacks"] == 0
    assert r["decoder"]["frames_returned"] >= th["frames"]
    if me["available"]:
        roles = {p["role"] for p in me["processes"]}
        assert "main" in roles and len(roles) == 1 + workers
        for p in me["processes"]:
            assert 0 < p["peak_pss_bytes"] <= p["peak_rss_bytes"]
        assert me["peak_pss_sum_bytes"] <= me["peak_rss_sum_bytes"]
    ser = r["cache"]["series"]
    assert len(ser["t_s"]) == th["steps"] and ser["samples"][-1] == th["samples"]
    assert all(res <= resv for res, resv in zip(ser["resident_bytes"], ser["reserved_bytes"]))
    assert max(ser["reserved_bytes"]) <= r["cache"]["byte_budget"]


@pytest.mark.parametrize("workers", [0, 2])
def test_profile_cli_report(tiny, tmp_path, capsys, workers):
    out = tmp_path / "r.json"
    png = tmp_path / "r.png"
    argv = ["--root", str(tiny), "--loader", "dataloader", "--num-workers", str(workers), "--batch-size", "4"]
    argv += ["--steps", "5", "--json", str(out)]
    if workers:
        pytest.importorskip("matplotlib")
        argv += ["--plot", str(png)]
    assert profile_main(argv) == 0
    text = capsys.readouterr().out
    for word in ("samples/s", "time to first batch", "p50/p95/p99", "decoder_open", "fetched", "PSS"):
        assert word in text
    r = json.loads(out.read_text())
    _check_report(r, batch_size=4, steps=5, workers=workers)
    if workers:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_read_memory_self():
    m = read_memory(os.getpid())
    if m is None:
        pytest.skip("/proc/<pid>/smaps_rollup unavailable")
    rss, pss = m
    assert 0 < pss <= rss
    assert read_memory(2**22 + 12345) is None


def test_profile_cli_error_is_one_line_exit_2(tmp_path):
    """Bug: ``--root /nonexistent`` printed a raw traceback. One typed line, exit 2; --debug keeps it."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LEROBOTSTREAM_DEBUG"}
    cmd = [sys.executable, "-m", "lerobotstream.profile", "--root", str(tmp_path / "nonexistent"), "--steps", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and lines and lines[-1].startswith("error: ") and "Traceback" not in p.stderr
    p = subprocess.run(cmd + ["--debug"], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode != 0 and "Traceback" in p.stderr


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--steps", "0"], "StreamingConfigError: --steps must be an int >= 1, got 0"),
        (["--num-workers", "-1"], "StreamingConfigError: --num-workers must be an int in [0, 1024], got -1"),
        (["--step-ms", "nan"], "StreamingConfigError: --step-ms must be a number >= 0 (0: no step), got nan"),
        (["--episode-pool-size", "0"], "StreamingConfigError: --episode-pool-size must be none or an int >= 1"),
        (["--decode-threads", "0"], "StreamingConfigError: --decode-threads must be an int >= 1"),
    ],
)
def test_cli_errors_name_the_flags_and_their_values(tiny, flags, message, capsys):
    """The run flags are checked before the dataset is opened; a stream option refused by the
    dataset is named by its flag, None spelled as the command line takes it (``none``)."""
    assert profile_main(["--root", str(tiny), "--quiet", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {message}"), err


def test_cli_offline_hint_names_the_root_flag(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants as hf_constants

    from lerobotstream import constants

    monkeypatch.setattr(constants, "HF_LEROBOT_HOME", str(tmp_path))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    assert profile_main(["--repo-id", "nobody/none-such", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "use --root a local copy of the dataset" in err and "root=" not in err


def test_every_worker_is_read_whatever_the_timer(tiny, tmp_path, capsys):
    """Bug (issue 17.1): memory was read only by a 0.1 s timer, so on a loaded machine a run on a
    tiny dataset could end before it saw a worker (``len(roles) == 1 + workers`` failed). Readings
    are also taken once the workers have started and before they stop: with a timer that never
    ticks during the run every worker is still there."""
    if read_memory(os.getpid()) is None:
        pytest.skip("/proc/<pid>/smaps_rollup unavailable")
    out = tmp_path / "r.json"
    argv = [
        "--root",
        str(tiny),
        "--loader",
        "dataloader",
        "--num-workers",
        "2",
        "--batch-size",
        "4",
        "--steps",
        "3",
        "--memory-interval-ms",
        "1e9",
        "--json",
        str(out),
        "--quiet",
    ]
    assert profile_main(argv) == 0
    r = json.loads(out.read_text())
    assert {p["role"] for p in r["memory"]["processes"]} == {"main", "worker 0", "worker 1"}
    assert len(r["memory"]["series"]["t_s"]) >= 2  # at the workers' start and before their stop
    assert r["memory"]["series"]["t_s"] == sorted(r["memory"]["series"]["t_s"])


def _zero_mdat(mp4) -> None:
    data = bytearray(mp4.read_bytes())
    pos = 0
    while pos + 8 <= len(data):
        size, kind = int.from_bytes(data[pos : pos + 4], "big"), bytes(data[pos + 4 : pos + 8])
        if kind == b"mdat":
            data[pos + 8 : pos + size] = bytes(size - 8)
            mp4.write_bytes(bytes(data))
            return
        pos += size
    raise AssertionError(f"no mdat in {mp4}")


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 1])
def test_worker_error_is_the_original_typed_line(tiny, tmp_path, workers):
    """Bug (issue 17.13): with DataLoader workers the CLI's one error line carried torch's whole
    wrapped worker traceback ("Caught ... Original Traceback ...", ~5,000 characters). It is the
    original typed error, naming the worker; --debug still shows both tracebacks."""
    import shutil
    import subprocess
    import sys

    root = tmp_path / "ds"
    shutil.copytree(tiny, root)
    for mp4 in sorted(root.rglob("*.mp4")):
        _zero_mdat(mp4)  # headers intact (the sidecar builds), payload no longer frames as AV1
    env = {k: v for k, v in os.environ.items() if k != "LEROBOTSTREAM_DEBUG"}
    cmd = [
        sys.executable,
        "-m",
        "lerobotstream.profile",
        "--root",
        str(root),
        "--loader",
        "dataloader",
        "--num-workers",
        str(workers),
        "--batch-size",
        "2",
        "--steps",
        "2",
        "--quiet",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert p.returncode == 2, p.stderr
    assert len(errors) == 1 and errors[0].startswith("error: Mp4InconsistentTablesError: "), p.stderr
    for junk in ("Traceback", "Caught", 'File "', "Original"):
        assert junk not in p.stderr
    assert "episode" in errors[0] and ".mp4" in errors[0] and len(errors[0]) < 1500
    if workers:
        assert errors[0].endswith("(in DataLoader worker process 0)")
        p = subprocess.run(cmd + ["--debug"], capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode != 0 and "Original Traceback" in p.stderr and "The above exception" in p.stderr


def test_worker_error_unwraps_torch_copies_only():
    from lerobotstream.errors import DecodeError, worker_error

    tb = (
        "Caught DecodeError in DataLoader worker process 3.\nOriginal Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n    raise DecodeError("inner")\n'
        "lerobotstream.errors.DecodeError: inner\n\nThe above exception was the direct cause of the following "
        'exception:\n\nTraceback (most recent call last):\n  File "y.py", line 2, in g\n    g()\n'
        "lerobotstream.errors.DecodeError: episode 4, camera 'front', file v.mp4: cannot decode\nsecond line\n"
    )
    e = worker_error(DecodeError(tb))
    assert type(e) is DecodeError
    assert (
        str(e) == "episode 4, camera 'front', file v.mp4: cannot decode\nsecond line (in DataLoader worker process 3)"
    )
    assert worker_error(DecodeError("plain message")) is None
    assert worker_error(ValueError(tb)) is None  # the type torch names must be the raised type
    k = worker_error(
        KeyError(
            "Caught KeyError in DataLoader worker process 0.\nOriginal Traceback (most recent call "
            "last):\n  File \"x.py\", line 1, in f\n    d[k]\nKeyError: 'observation.state'\n"
        )
    )
    assert type(k) is KeyError and k.args == ("'observation.state' (in DataLoader worker process 0)",)


def _raw(*, step_s: float = 0.0, waits=(0.5, 0.1, 0.1, 0.1), batch: int = 8) -> dict:
    """A synthetic raw run: 4 batches of 8, the last three 0.1 s apart after a 0.5 s first batch."""
    t = []
    acc = 0.0
    for i, w in enumerate(waits):  # the loop: next(loader) (the wait), then the model step
        acc += w + (step_s if i else 0.0)
        t.append(acc)
    stats = {
        "decode_s": 3.0,
        "assemble_s": 1.0,
        "fetch_s": 0.5,
        "open_s": 0.1,
        "decode_job_s": 4.0,
        "queue_wait_s": 0.7,
        "admit_wait_s": 0.0,
        "spans_s": 0.01,
        "parquet_s": 0.02,
        "synthesize_s": 0.03,
        "transforms_s": 0.0,
        "sidecar_s": 0.05,
        "metadata_s": 0.01,
        "index_open_s": 0.0,
    }
    return {
        "wall_s": t[-1] + step_s,
        "first_batch_s": waits[0],
        "batch_wait_s": list(waits),
        "batch_t_s": t,
        "samples": batch * len(waits),
        "frames": batch * len(waits),
        "anchors": [],
        "snapshots": [{"pid": 1, "worker": 0, "stats": stats}],
        "timeline": [
            {
                "t_s": x,
                "samples": batch * (i + 1),
                "frames": batch * (i + 1),
                "reserved_bytes": 0,
                "resident_bytes": 0,
                "bytes_fetched": 0,
            }
            for i, x in enumerate(t)
        ],
        "memory": {"available": False, "processes": [], "series": {}},
        "num_workers": 1,
        "batch_size": batch,
        "steps": len(waits),
        "step_s": step_s,
        "metadata_s": 0.01,
    }


STEADY = (0.5,) + (0.1,) * 25  # a first batch, then 25 batches 0.1 s apart: long enough to judge


def test_verdict_without_a_step_predicts_the_wait():
    """Without --step-ms the data-wait fraction is the time blocked in next(loader) over the wall
    (the rest: the profiler's bookkeeping, the epoch's end), and says so. The verdict gives the
    loader's rate and what a model step would wait."""
    r = build_report(_raw(waits=STEADY))
    ve = r["verdict"]
    assert ve["too_short"] is None
    assert ve["loader_samples_per_s"] == pytest.approx(200 / 2.5)  # 25 batches of 8 in 2.5 s
    assert ve["loader_ms_per_batch"] == pytest.approx(100.0)
    assert ve["predicted_wait_fraction"] == pytest.approx({"10": 0.9, "50": 0.5, "100": 0.0})
    assert ve["measured_wait_fraction"] is None and ve["waits"] is None
    assert [t["stage"] for t in ve["top_work"]] == ["decode", "assemble"]
    text = format_report(r)
    first = text.splitlines()[0]
    assert first.startswith("verdict: the loader delivers 80.0 samples/s (100.0 ms per batch of 8)")
    assert "90% at 10 ms, 50% at 50 ms, 0% at 100 ms, none at 100 ms or more" in first
    assert "why: most work is decode" in text
    assert "by construction" not in text
    assert "data-wait fraction   1.000   (no model step: time blocked in next(loader) / wall; the rest is" in text
    # the frames line counts the frames in the batches; decoded frames are the decoder line's
    assert "frames delivered/s" in text and "frames decoded/s" not in text
    # work and waits are apart; threads_bound is explained
    assert text.index("work (per item") < text.index("    decode ") < text.index("waits (a thread blocked")
    assert text.index("waits (a thread blocked") < text.index("    decode_other") < text.index("    main_batch_wait")
    assert "threads_bound " in text and "1 iterating +" in text and "threads busy on average" in text
    st = r["stages"]
    assert st["work_s"] == pytest.approx(3.0 + 1.0 + 0.5 + 0.1 + 0.01 + 0.02 + 0.03)
    assert st["busy_threads"] == pytest.approx(st["work_s"] / r["throughput"]["wall_s"])


def test_verdict_says_when_a_run_is_too_short_to_judge():
    """12 batches that were already made ahead came out at once: no steady rate to judge from."""
    raw = _raw(waits=(2.0,) + (0.001,) * 12)
    raw["buffered_batches"] = 16
    ve = build_report(raw)["verdict"]
    assert ve["too_short"] and ve["waits"] is None and not ve["predicted_wait_fraction"]
    assert ve["text"].startswith("verdict: too short to judge: 12 batches after the first in 0.01 s")
    assert "up to 16 can be made ahead" in ve["text"] and "--steps 33" in ve["text"] and "upper bound" in ve["text"]
    raw = _raw(waits=STEADY)
    raw["buffered_batches"] = 16  # 25 later batches, fewer than twice what can be made ahead
    assert "--steps 33" in build_report(raw)["verdict"]["text"]


def test_too_short_because_the_epoch_ended_suggests_repeat():
    """A dataset of 12 batches with --repeat off cannot reach --steps 21: the verdict says the epoch
    ended and names --repeat (or a smaller batch)."""
    raw = _raw(waits=(0.5,) + (0.1,) * 11)
    raw["epoch_ended"] = True
    r = build_report(raw)
    assert r["throughput"]["epoch_ended"] is True
    text = r["verdict"]["text"]
    assert "too short to judge: 11 batches after the first" in text
    assert "the epoch ended after 12 batches: pass --repeat (epochs chained) with --steps 21" in text
    assert "smaller --batch-size" in text and "run at least --steps" not in text
    raw["epoch_ended"] = False  # --steps 12 asked: more steps reach it
    assert "run at least --steps 21 for a steady rate" in build_report(raw)["verdict"]["text"]


def test_a_small_dataset_without_repeat_reports_its_epoch_end(tiny, tmp_path, capsys):
    """The run itself records that the stream ended before --steps (56 frames, batch 8: 7 batches)."""
    out = tmp_path / "r.json"
    argv = ["--root", str(tiny), "--num-workers", "0", "--steps", "50", "--json", str(out), "--quiet"]
    assert profile_main(argv) == 0
    r = json.loads(out.read_text())
    assert r["throughput"]["steps"] == 7 and r["throughput"]["epoch_ended"] is True
    assert "pass --repeat" in r["verdict"]["text"]
    assert profile_main([*argv, "--repeat", "--steps", "9"]) == 0
    r = json.loads(out.read_text())
    assert r["throughput"]["steps"] == 9 and r["throughput"]["epoch_ended"] is False


def test_verdict_with_a_step_is_measured():
    r = build_report(_raw(step_s=0.05, waits=(0.5,) + (0.05,) * 25))
    ve = r["verdict"]
    assert ve["measured_wait_fraction"] == pytest.approx(0.5)  # 0.05 s wait of each 0.1 s batch
    assert ve["waits"] is True and "DATA-BOUND" in ve["text"] and "50%" in ve["text"]
    r = build_report(_raw(step_s=0.2, waits=(0.5,) + (0.0,) * 25))
    assert r["verdict"]["waits"] is False and "not waiting for data" in r["verdict"]["text"]


def test_units_are_binary_everywhere():
    """Issue 17.18: one convention, binary units (KiB/MiB/GiB; the byte budget is GiB)."""
    import re

    from lerobotstream.profile._report import _mib

    assert _mib(3 * 2**20) == "3.0 MiB" and _mib(2**30) == "1.0 GiB" and _mib(1536) == "1.5 KiB"
    raw = _raw()
    raw["snapshots"][0]["stats"].update(byte_budget=8 * 2**30, bytes_fetched=5 * 2**20)
    text = format_report(build_report(raw))
    assert "8.0 GiB" in text and "5.0 MiB" in text
    assert not re.search(r"\d (KB|MB|GB)\b", text)


def test_plot_answers_the_question(tmp_path):
    """Issue 17.16: distinct stage colours, a rolling throughput line (not per-batch dots that reach
    thousands of samples/s when two batches arrive together), a title with the config and verdict."""
    pytest.importorskip("matplotlib")
    from lerobotstream.profile._report import STAGE_COLORS, _title, plot_report, rolling_rate

    assert set(STAGE_COLORS) == {name for name, _ in STAGES}
    assert len(set(STAGE_COLORS.values())) == len(STAGE_COLORS)
    # batches in pairs 1 ms apart every 0.266 s: ~60 samples/s, per-batch "rates" of 8,000/s
    t, n = [], []
    for k in range(40):
        t += [0.5 + 0.266 * k, 0.501 + 0.266 * k]
        n += [16 * k + 8, 16 * k + 16]
    roll = rolling_rate(t, n, 10)
    assert max(roll[10:]) < 70 and min(roll[10:]) > 50
    r = build_report(
        _raw(),
        config={
            "root": "/data/x",
            "num_workers": 1,
            "batch_size": 8,
            "episodes": 3,
            "cameras": ["front"],
            "decode_threads": 2,
        },
    )
    title = _title(r)
    assert "/data/x" in title and "1 workers" in title and "batch 8" in title and "verdict:" in title
    png = plot_report(r, tmp_path / "f.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- issue 29 (new user, item 2): the profiler measures what lerobotstream-train runs ----------
def test_defaults_are_what_lerobotstream_train_runs():
    from lerobotstream.profile.__main__ import TRAIN_DEFAULTS, _parser

    a = _parser().parse_args(["--root", "x"])
    assert (
        a.loader,
        a.num_workers,
        a.batch_size,
        a.prefetch_factor,
        a.persistent_workers,
        a.multiprocessing_context,
        a.return_uint8,
        a.repeat,
    ) == ("auto", 4, 8, 4, True, "spawn", True, None)
    assert TRAIN_DEFAULTS == {
        "loader": "auto",
        "num_workers": 4,
        "batch_size": 8,
        "prefetch_factor": 4,
        "persistent_workers": True,
        "multiprocessing_context": "spawn",
        "return_uint8": True,
    }
    assert _parser().parse_args(["--root", "x", "--no-return-uint8"]).return_uint8 is False


def test_report_says_which_dataloader_it_measured(tiny, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert profile_main(["--root", str(tiny), "--num-workers", "1", "--steps", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    cfg = json.loads(out.read_text())["config"]
    assert (cfg["frames"], cfg["prefetch_factor"], cfg["persistent_workers"], cfg["multiprocessing_context"]) == (
        "uint8",
        4,
        True,
        "spawn",
    )
    assert cfg["as_lerobotstream_train"] is False and "differ from lerobotstream-train's defaults" in text


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_streamloader_modes_report_every_shard(tiny, tmp_path, capsys, mode):
    """--loader threads / processes profile StreamLoader as lerobotstream-train runs it: the report
    names the loader and carries each shard's counters (threads: in this process; processes: one
    worker process each)."""
    out = tmp_path / "r.json"
    argv = ["--root", str(tiny), "--loader", mode, "--num-workers", "2", "--batch-size", "4", "--steps", "5"]
    argv += ["--multiprocessing-context", "fork", "--json", str(out), "--quiet"]
    assert profile_main(argv) == 0
    r = json.loads(out.read_text())
    unit = "shards" if mode == "threads" else "workers"
    assert r["loader"].startswith(f"StreamLoader {mode}, 2 {unit}") and r["config"]["loader"] == r["loader"]
    assert sorted(p["worker"] for p in r["per_process"]) == [0, 1]
    pids = {p["pid"] for p in r["per_process"]}
    assert (pids == {os.getpid()}) if mode == "threads" else (os.getpid() not in pids and len(pids) == 2)
    assert r["throughput"]["samples"] == 20 and r["decoder"]["frames_returned"] >= 2 * 20
    assert r["bytes"]["fetched_bytes"] > 0 and r["verdict"]["too_short"]


def test_auto_is_the_default_and_says_what_it_picked(tiny, tmp_path, capsys):
    from lerobotstream.loader._loader import choose_mode

    out = tmp_path / "r.json"
    argv = ["--root", str(tiny), "--num-workers", "1", "--steps", "2", "--json", str(out), "--quiet"]
    assert profile_main(argv) == 0
    mode, _ = choose_mode(1)
    assert json.loads(out.read_text())["loader"].startswith(f"StreamLoader {mode}, 1 ")


def _mixture(make_generated_dataset):
    a = make_generated_dataset(repo_id="p/a", episode_lengths=(5, 5), cameras=(("observation.images.front", 32, 32),))
    b = make_generated_dataset(repo_id="p/b", episode_lengths=(20, 20), cameras=(("observation.images.front", 32, 32),))
    return [
        "--repo-id",
        "p/a,p/b",
        "--root",
        f"{a},{b}",
        "--weights",
        "0.3,0.7",
        "--num-workers",
        "0",
        "--batch-size",
        "5",
    ]


def test_mixture_without_repeat_reports_the_exhausted_dataset(make_generated_dataset, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert profile_main([*_mixture(make_generated_dataset), "--no-repeat", "--steps", "20", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    mx = json.loads(out.read_text())["mixture"]
    assert mx["repeat"] is False and mx["samples"] == [10, 40]  # one pass: every sample once
    ex = next(e for e in mx["exhausted"] if e["repo_id"] == "p/a")
    assert 1 <= ex["step"] < 10  # before the last of the 10 batches
    assert f"dataset p/a exhausted at step {ex['step']}" in text


def test_mixture_repeats_by_default(make_generated_dataset, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert profile_main([*_mixture(make_generated_dataset), "--steps", "16", "--json", str(out), "--quiet"]) == 0
    mx = json.loads(out.read_text())["mixture"]
    assert mx["repeat"] is True and mx["exhausted"] == [] and sum(mx["samples"]) == 80
    assert mx["samples"][0] > 10  # p/a went on past its 10 samples: the weights hold
    assert abs(mx["shares"][0] - 0.3) < 0.1


def test_plot_needs_matplotlib_before_the_run(tiny, tmp_path, monkeypatch, capsys):
    import sys

    import lerobotstream.profile.__main__ as cli

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # not installed
    monkeypatch.setattr(cli, "run_profile", lambda args: pytest.fail("the run started before --plot was checked"))
    assert profile_main(["--root", str(tiny), "--plot", str(tmp_path / "r.png")]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: MissingDependencyError: --plot needs matplotlib: pip install 'lerobotstream[plot]' (or drop --plot)"
    )
    from lerobotstream.errors import MissingDependencyError
    from lerobotstream.profile._report import require_matplotlib

    with pytest.raises(ImportError) as e:  # still the built-in callers caught before
        require_matplotlib()
    assert isinstance(e.value, MissingDependencyError) and e.value.package == "matplotlib"


def test_json_to_a_folder_is_refused_before_the_run(tiny, tmp_path, monkeypatch, capsys):
    """Bug: ``--json DIR`` ran the whole profile, then wrote ``DIR.tmpPID`` beside the folder and
    failed on ``os.replace``, leaving it behind; a missing folder also failed only after the run."""
    import lerobotstream.profile.__main__ as cli

    monkeypatch.setattr(cli, "run_profile", lambda args: pytest.fail("the run started before --json was checked"))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    assert profile_main(["--root", str(tiny), "--json", str(out_dir)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: StreamingConfigError: --json {str(out_dir)!r} is a folder: give the path of a file to write"
    )
    assert profile_main(["--root", str(tiny), "--json", str(tmp_path / "no" / "r.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not any(out_dir.iterdir())


def test_json_is_written_atomically_or_not_at_all(tmp_path, monkeypatch):
    """``_write_json`` goes through ``lerobotstream._atomic``: a failed write keeps the old file
    and leaves no temporary file (before, ``r.json.tmpPID`` stayed behind)."""
    import lerobotstream._atomic as atomic
    from lerobotstream.profile.__main__ import _write_json

    out = tmp_path / "r.json"
    out.write_text("old")

    def replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(OSError, match="No space left"):
        _write_json({"a": 1}, str(out))
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    monkeypatch.undo()
    _write_json({"a": 1}, str(out))
    assert json.loads(out.read_text()) == {"a": 1} and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
