"""Start-up says what it does: a step still running after a few seconds is logged with how long it
took (metadata listing, the wait for the first batch), the sidecar build shows its progress bar on a
terminal and is logged at INFO (a routine first-run event, not a warning). No timing: a step is
made "slow" with a threshold of 0 and waited for by its own log line."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import pytest

from lerobotstream import constants
from lerobotstream._slow import announce_if_slow

log = logging.getLogger("lerobotstream.test_slow")


def _wait_for(caplog, text: str, limit_s: float = 30.0) -> None:
    end = time.monotonic() + limit_s  # bounded: the timer thread logs as soon as it runs
    while text not in caplog.text:
        assert time.monotonic() < end, f"never logged {text!r}: {caplog.text!r}"
        time.sleep(0.01)


def test_a_slow_step_is_logged_with_its_time(caplog):
    with caplog.at_level(logging.INFO, logger="lerobotstream.test_slow"):
        with announce_if_slow(log, "reading the metadata of x", after_s=0):
            _wait_for(caplog, "reading the metadata of x... (")
    assert "reading the metadata of x: done in " in caplog.text
    assert all(r.levelno == logging.INFO for r in caplog.records)


def test_a_fast_step_says_nothing(caplog):
    with caplog.at_level(logging.INFO, logger="lerobotstream.test_slow"):
        with announce_if_slow(log, "reading the metadata of x", after_s=3600):
            pass
    assert caplog.text == ""


@pytest.mark.parametrize(
    ("value", "tty", "shown"), [("1", False, True), ("0", True, False), ("", True, True), ("", False, False)]
)
def test_progress_bars_on_a_terminal_unless_told(monkeypatch, value, tty, shown):
    class Stderr:
        def isatty(self):
            return tty

    monkeypatch.setenv("LEROBOTSTREAM_PROGRESS", value)
    monkeypatch.setattr(sys, "stderr", Stderr())
    assert constants.show_progress() is shown


def test_a_sidecar_build_is_info_and_its_bar_follows_the_terminal(
    make_generated_dataset, tmp_path, caplog, monkeypatch
):
    import lerobotstream.sidecar._build as build
    from lerobotstream import StreamingLeRobotDataset

    root = Path(make_generated_dataset(repo_id="t/startup", episode_lengths=(5, 6)))
    seen = []
    original = build.build_sidecar
    monkeypatch.setattr(build, "build_sidecar", lambda *a, **k: seen.append(k["progress"]) or original(*a, **k))
    monkeypatch.setenv("LEROBOTSTREAM_PROGRESS", "0")
    monkeypatch.setattr(constants, "SIDECAR_DIR", tmp_path / "sidecars")
    with caplog.at_level(logging.INFO, logger="lerobotstream"):
        StreamingLeRobotDataset(root=root)
    said = [r for r in caplog.records if "building the MP4 sidecar" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert seen == [False]


@pytest.mark.parametrize("value", ["abc", "-1", "inf", "nan", ""])
def test_a_bad_number_in_the_environment_falls_back_to_the_default(monkeypatch, value):
    """``LEROBOTSTREAM_SLOW_START_S`` (read at import) and ``LEROBOTSTREAM_MALLOC_TRIM_MIB`` never
    fail an import or a trim: a value that is not a finite number >= 0 gives the default."""
    monkeypatch.setenv("LEROBOTSTREAM_SLOW_START_S", value)
    assert constants.env_number("LEROBOTSTREAM_SLOW_START_S", 3.0) == 3.0
    monkeypatch.setenv("LEROBOTSTREAM_SLOW_START_S", "0.25")
    assert constants.env_number("LEROBOTSTREAM_SLOW_START_S", 3.0) == 0.25
