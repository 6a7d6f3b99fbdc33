"""``lerobotstream-train``'s ``--dataset.*`` streaming flags are generated from ``StreamOptions``:
one field per option with a flag (same default, same rule, ``--help`` from its help text), and the
factory passes each one to the stream."""

from __future__ import annotations

import dataclasses
import re
import subprocess

import pytest
from conftest import BIN, env_for

from lerobotstream.errors import StreamingConfigError
from lerobotstream.integrations.lerobot.config import StreamingDatasetConfig
from lerobotstream.options import option_info, train_flags


def test_every_streaming_flag_is_a_stream_option_with_its_default():
    fields = {f.name: f for f in dataclasses.fields(StreamingDatasetConfig)}
    for info in train_flags():
        assert info.flag in fields, info.flag
        assert fields[info.flag].default == info.default, info.flag
    ours = {f for f in fields if f.startswith("streaming_")} - {"streaming_weights", "streaming_loader"}
    declared = {i.flag for i in train_flags()}
    assert ours <= declared, f"streaming flags not declared in StreamOptions: {sorted(ours - declared)}"
    # every option reaches lerobotstream-train: a flag of ours, or one of LeRobot's settings
    assert all(i.flag or i.train for i in option_info())


@pytest.mark.parametrize("info", train_flags(), ids=lambda i: i.flag)
def test_a_bad_flag_value_is_refused_by_the_options_rule(info):
    bad = {str: "nope", float: -1.0, int: -1}.get(info.flag_type, -1)
    if info.flag in ("streaming_data_root",):
        bad = 3
    if info.flag == "streaming_camera_keys":
        bad = "front"
    from lerobot.configs.default import DatasetConfig

    if info.flag in {f.name for f in dataclasses.fields(DatasetConfig)}:  # LeRobot's own flag: its check runs first
        with pytest.raises(ValueError, match=info.flag):
            StreamingDatasetConfig(repo_id="local/x", streaming=True, **{info.flag: bad})
        return
    with pytest.raises(StreamingConfigError, match=rf"--dataset\.{info.flag}=.*must be {re.escape(info.want[:12])}"):
        StreamingDatasetConfig(repo_id="local/x", streaming=True, **{info.flag: bad})


def test_help_shows_every_streaming_flag_with_its_help_text(tmp_path):
    proc = subprocess.run(
        [str(BIN / "lerobotstream-train"), "--help"],
        cwd=tmp_path,
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    text = " ".join(proc.stdout.split())
    for info in train_flags():
        assert f"--dataset.{info.flag}" in text, info.flag
        assert " ".join(info.help.split())[:40] in text, info.flag


def test_streaming_loader_flag_values():
    from lerobotstream.integrations.lerobot.config import STREAMING_LOADERS

    for value in STREAMING_LOADERS:
        assert (
            StreamingDatasetConfig(repo_id="local/x", streaming=True, streaming_loader=value).streaming_loader == value
        )
    assert StreamingDatasetConfig(repo_id="local/x", streaming=True).streaming_loader == "auto"
    with pytest.raises(StreamingConfigError, match=r"--dataset\.streaming_loader='gpu'.*must be one of auto"):
        StreamingDatasetConfig(repo_id="local/x", streaming=True, streaming_loader="gpu")


def test_no_older_flag_spelling_is_accepted():
    """Issue 42 item 6: one spelling per flag. ``--dataset.streaming_max_open_decoders``, the spelling
    of an unreleased build, is no field any more (LeRobot's parser refuses it as unknown);
    ``--dataset.video_decoder_cache_size`` is the flag."""
    fields = {f.name for f in dataclasses.fields(StreamingDatasetConfig)}
    assert "video_decoder_cache_size" in fields and "streaming_max_open_decoders" not in fields
    assert (
        StreamingDatasetConfig(repo_id="local/x", streaming=True, video_decoder_cache_size=6).video_decoder_cache_size
        == 6
    )
