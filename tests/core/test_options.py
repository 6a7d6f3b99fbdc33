"""``StreamOptions`` is the one table of options: the constructors, their checks, the mixture's
per-dataset options, the docs page and ``lerobotstream-train``'s flags are read from it
(the ``--help`` and config side: tests_lerobot/test_train_flags.py)."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

from lerobotstream import StreamingLeRobotDataset, StreamingMultiLeRobotDataset
from lerobotstream.errors import StreamingConfigError
from lerobotstream.options import (LEROBOT_POSITIONAL, StreamOptions, option_info, options_markdown,
                                   per_dataset_options)

REPO = Path(__file__).resolve().parents[2]
G1 = REPO / "data" / "g1_v30"


def test_docs_options_page_is_generated_from_stream_options():
    page = (REPO / "docs" / "options.md").read_text()
    assert page.strip() == options_markdown().strip(), (
        "docs/options.md is stale: regenerate it with `python -m lerobotstream.options > docs/options.md`")


def test_every_option_has_a_rule_a_help_text_and_a_way_from_lerobotstream_train():
    infos = list(option_info())
    assert len(infos) == len(dataclasses.fields(StreamOptions)) >= 33
    for i in infos:
        assert i.want and i.help and i.group, i.name
        assert i.flag or i.train, f"{i.name}: neither a --dataset flag nor a LeRobot setting sets it"
        assert i.check(i.default), f"{i.name}: its default {i.default!r} breaks its own rule"
    # the options that could not be set from lerobotstream-train before StreamOptions existed
    flags = {i.name: i.flag for i in infos}
    for name in ("decode_lookahead", "decoded_cache_gb", "ffmpeg_threads", "first_lookahead", "camera_keys"):
        assert flags[name] == f"streaming_{name}"


def test_the_constructor_signature_lists_every_option_with_its_default():
    params = inspect.signature(StreamingLeRobotDataset.__init__).parameters
    defaults = {i.name: i.default for i in option_info()}
    for name, default in defaults.items():
        assert params[name].default == default, name
    positional = [n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD][3:]
    assert tuple(positional) == LEROBOT_POSITIONAL  # LeRobot's order after self, repo_id, root


def test_options_object_and_keywords_are_the_same_dataset():
    a = StreamingLeRobotDataset(root=G1, episodes=[0, 1], decode_threads=1, byte_budget_gb=2)
    b = StreamingLeRobotDataset(root=G1, options=StreamOptions(episodes=[0, 1], decode_threads=1, byte_budget_gb=2))
    c = StreamingLeRobotDataset(root=G1, options=StreamOptions(episodes=[0, 1], decode_threads=3), decode_threads=1,
                                byte_budget_gb=2)  # keywords beside options override it
    for ds in (b, c):
        assert ds.options.as_dict() == a.options.as_dict()
        assert (ds.decode_threads, ds.byte_budget_gb, ds.episodes) == (1, 2.0, [0, 1])
        assert isinstance(ds.byte_budget_gb, float) and isinstance(ds.decode_threads, int)
    positional = StreamingLeRobotDataset("local/g1", G1, [0, 1], None, None, None, 1, 1e-4, True)
    assert positional.episodes == [0, 1] and positional.return_uint8 is True


@pytest.mark.parametrize("name", [i.name for i in option_info()])
def test_a_value_that_breaks_the_rule_names_the_option(name):
    bad = {"episodes": [-1], "delta_timestamps": [0.0], "image_transforms": 3, "revision": 3, "repeat": "yes",
           "return_uint8": 1, "drop_last": None, "repo_type": "model", "data_root": 3, "camera_keys": "front",
           "sampling_strategy": "uniform", "equalize": "pad", "device": "tpu", "video_backend": "pyav",
           "depth_output_unit": "cm", "seed": 1.5}.get(name, -1)
    with pytest.raises(StreamingConfigError, match=rf"^{name} must be"):
        StreamOptions(**{name: bad}).validate()


def test_unknown_or_repeated_arguments_are_type_errors_as_for_any_signature():
    with pytest.raises(TypeError, match="unexpected keyword argument 'byte_budget'"):
        StreamingLeRobotDataset(root=G1, byte_budget=1)
    with pytest.raises(TypeError, match="multiple values for argument 'episodes'"):
        StreamingLeRobotDataset("local/g1", G1, [0], episodes=[1])
    with pytest.raises(TypeError, match="options must be a StreamOptions"):
        StreamingLeRobotDataset(root=G1, options={"episodes": [0]})


def test_the_mixture_takes_the_per_dataset_options_from_stream_options():
    from lerobotstream.dataset._multi import PER_DATASET_OPTIONS

    assert PER_DATASET_OPTIONS == per_dataset_options()
    assert {"episodes", "delta_timestamps", "camera_keys", "tolerance_s"} <= set(PER_DATASET_OPTIONS)
    with pytest.raises(StreamingConfigError, match="unknown option"):
        StreamingMultiLeRobotDataset(["a/x", "b/y"], roots=[G1, G1], byte_budget=1)
