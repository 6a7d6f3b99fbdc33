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


def test_cli_flags_take_type_default_and_help_from_the_options():
    import argparse

    from lerobotstream._option_flags import add_cli_flags
    from lerobotstream.options import option_info

    ap = argparse.ArgumentParser()
    names = ("episodes", "camera_keys", "episode_pool_size", "byte_budget_gb", "sampling_strategy", "return_uint8",
             "delta_timestamps", "seed")
    add_cli_flags(ap, names, defaults={"return_uint8": True}, aliases={"camera_keys": ["--cameras"]})
    a = ap.parse_args([])
    defaults = {i.name: i.default for i in option_info()}
    assert {n: getattr(a, n) for n in names} == {**{n: defaults[n] for n in names}, "return_uint8": True}
    a = ap.parse_args(["--episodes", "0-2,7", "--cameras", "a,b", "--episode-pool-size", "none", "--byte-budget-gb",
                       "1.5", "--no-return-uint8", "--delta-timestamps", '{"x": [-0.1, 0]}', "--seed", "3"])
    assert (a.episodes, a.camera_keys, a.episode_pool_size, a.byte_budget_gb, a.return_uint8, a.delta_timestamps,
            a.seed) == ([0, 1, 2, 7], ["a", "b"], None, 1.5, False, {"x": [-0.1, 0]}, 3)
    assert ap.parse_args(["--episode-pool-size", "4"]).episode_pool_size == 4
    helps = {x.dest: x.help for x in ap._actions}
    assert helps["byte_budget_gb"].startswith(next(i.help for i in option_info() if i.name == "byte_budget_gb"))
    with pytest.raises(TypeError, match="command-line"):
        add_cli_flags(argparse.ArgumentParser(), ["image_transforms"])
