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
from lerobotstream.options import (
    LEROBOT_ONLY,
    LEROBOT_POSITIONAL,
    StreamOptions,
    option_info,
    options_markdown,
    per_dataset_options,
)

REPO = Path(__file__).resolve().parents[2]
G1 = REPO / "data" / "g1_v30"


def test_docs_options_page_is_generated_from_stream_options():
    page = (REPO / "docs" / "options.md").read_text()
    assert page.strip() == options_markdown().strip(), (
        "docs/options.md is stale: regenerate it with `python -m lerobotstream.options > docs/options.md`"
    )


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
    # LeRobot 0.6.1's StreamingLeRobotDataset.__init__ after repo_id, root (its keyword-only
    # repo_type is an option, keyword-only here too; tests_lerobot compares with the installed class)
    assert LEROBOT_POSITIONAL == (
        "episodes",
        "image_transforms",
        "delta_timestamps",
        "tolerance_s",
        "revision",
        "force_cache_sync",
        "streaming",
        "buffer_size",
        "max_num_shards",
        "seed",
        "rng",
        "shuffle",
        "return_uint8",
        "depth_output_unit",
    )
    for name, arg in LEROBOT_ONLY.items():  # no option, but in the signature at LeRobot's default
        assert name not in defaults and params[name].default == arg.default, name
    assert params["repo_type"].kind == params["repo_type"].KEYWORD_ONLY
    # docs/options.md lists LeRobot's options in the same order
    lerobot_group = [i.name for i in option_info() if i.group == "lerobot"]
    assert [n for n in LEROBOT_POSITIONAL if n in defaults] == lerobot_group[: len(lerobot_group) - 2]


def test_positional_arguments_follow_lerobot_streaming_dataset():
    """Bug: positional arguments were mapped in another order (delta_timestamps second), so
    LeRobot's ``StreamingLeRobotDataset(repo_id, root, episodes, image_transforms, delta_timestamps)``
    raised ``delta_timestamps must be a dict ..., got <transform>``."""

    def transform(x):
        return x

    ds = StreamingLeRobotDataset("local/g1", G1, [0], transform, {"action": [0.0, 0.1]})
    assert ds.episodes == [0] and ds.image_transforms is transform
    assert dict(ds.delta_timestamps) == {"action": (0.0, 0.1)}
    # every positional argument, LeRobot's defaults for its arguments that are no option here
    ds = StreamingLeRobotDataset(
        "local/g1", G1, [1], None, None, 2e-4, None, False, True, 1000, 2, 5, None, True, True, "m"
    )
    assert (ds.episodes, ds.tolerance_s, ds.max_num_shards, ds.seed, ds.return_uint8, ds.depth_output_unit) == (
        [1],
        2e-4,
        2,
        5,
        True,
        "m",
    )
    assert "force_cache_sync" not in ds.options.as_dict()
    keywords = StreamingLeRobotDataset(
        root=G1, episodes=[1], force_cache_sync=False, streaming=True, buffer_size=1000, rng=None, shuffle=True
    )
    assert keywords.options == StreamingLeRobotDataset(root=G1, episodes=[1]).options


@pytest.mark.parametrize(
    "name, value, instead",
    [
        ("shuffle", False, "sampling_strategy='sequential'"),
        ("rng", object(), "seed="),
        ("buffer_size", 5000, "episode_pool_size"),
        ("streaming", False, "LeRobotDataset"),
        ("force_cache_sync", True, "hf://datasets/"),
    ],
)
def test_lerobot_arguments_that_are_no_option_refuse_what_the_stream_cannot_honour(name, value, instead):
    for build in (
        lambda: StreamingLeRobotDataset("local/g1", G1, **{name: value}),
        lambda: StreamingMultiLeRobotDataset(["a/x", "b/y"], roots=[G1, G1], **{name: value}),
    ):
        with pytest.raises(StreamingConfigError, match=rf"{name}=.*cannot be honoured: .*{instead}") as e:
            build()
        assert e.value.option == name and not isinstance(e.value, TypeError)
    at = LEROBOT_POSITIONAL.index(name)  # by position too
    args = [LEROBOT_ONLY[n].default if n in LEROBOT_ONLY else None for n in LEROBOT_POSITIONAL[:at]]
    args = [1e-4 if n == "tolerance_s" else a for n, a in zip(LEROBOT_POSITIONAL, args)]
    with pytest.raises(StreamingConfigError, match=rf"{name}="):
        StreamingLeRobotDataset("local/g1", G1, *args, value)


def test_options_object_and_keywords_are_the_same_dataset():
    a = StreamingLeRobotDataset(root=G1, episodes=[0, 1], decode_threads=1, byte_budget_gb=2)
    b = StreamingLeRobotDataset(root=G1, options=StreamOptions(episodes=[0, 1], decode_threads=1, byte_budget_gb=2))
    c = StreamingLeRobotDataset(
        root=G1, options=StreamOptions(episodes=[0, 1], decode_threads=3), decode_threads=1, byte_budget_gb=2
    )  # keywords beside options override it
    for ds in (b, c):
        assert ds.options.as_dict() == a.options.as_dict()
        assert (ds.decode_threads, ds.byte_budget_gb, ds.episodes) == (1, 2.0, [0, 1])
        assert isinstance(ds.byte_budget_gb, float) and isinstance(ds.decode_threads, int)
    positional = StreamingLeRobotDataset("local/g1", G1, [0, 1], None, None, 1e-4, None, False, True, 1000, 1, 3)
    assert positional.episodes == [0, 1] and positional.seed == 3


@pytest.mark.parametrize("name", [i.name for i in option_info()])
def test_a_value_that_breaks_the_rule_names_the_option(name):
    bad = {
        "episodes": [-1],
        "delta_timestamps": [0.0],
        "image_transforms": 3,
        "revision": 3,
        "repeat": "yes",
        "return_uint8": 1,
        "drop_last": None,
        "repo_type": "model",
        "data_root": 3,
        "camera_keys": "front",
        "sampling_strategy": "uniform",
        "equalize": "pad",
        "device": "tpu",
        "video_backend": "pyav",
        "depth_output_unit": "cm",
        "seed": 1.5,
    }.get(name, -1)
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
    with pytest.raises(StreamingConfigError, match="unexpected keyword argument 'byte_budget'"):
        StreamingMultiLeRobotDataset(["a/x", "b/y"], roots=[G1, G1], byte_budget=1)


def test_cli_flags_take_type_default_and_help_from_the_options():
    import argparse

    from lerobotstream.options import add_cli_flags, option_info

    ap = argparse.ArgumentParser()
    names = (
        "episodes",
        "camera_keys",
        "episode_pool_size",
        "byte_budget_gb",
        "sampling_strategy",
        "return_uint8",
        "delta_timestamps",
        "seed",
    )
    add_cli_flags(ap, names, defaults={"return_uint8": True}, aliases={"camera_keys": ["--cameras"]})
    a = ap.parse_args([])
    defaults = {i.name: i.default for i in option_info()}
    assert {n: getattr(a, n) for n in names} == {**{n: defaults[n] for n in names}, "return_uint8": True}
    a = ap.parse_args(
        [
            "--episodes",
            "0-2,7",
            "--cameras",
            "a,b",
            "--episode-pool-size",
            "none",
            "--byte-budget-gb",
            "1.5",
            "--no-return-uint8",
            "--delta-timestamps",
            '{"x": [-0.1, 0]}',
            "--seed",
            "3",
        ]
    )
    assert (
        a.episodes,
        a.camera_keys,
        a.episode_pool_size,
        a.byte_budget_gb,
        a.return_uint8,
        a.delta_timestamps,
        a.seed,
    ) == ([0, 1, 2, 7], ["a", "b"], None, 1.5, False, {"x": [-0.1, 0]}, 3)
    assert ap.parse_args(["--episode-pool-size", "4"]).episode_pool_size == 4
    helps = {x.dest: x.help for x in ap._actions}
    assert helps["byte_budget_gb"].startswith(next(i.help for i in option_info() if i.name == "byte_budget_gb"))
    with pytest.raises(TypeError, match="command-line"):
        add_cli_flags(argparse.ArgumentParser(), ["image_transforms"])


def test_a_stream_keeps_its_options_once_resolved_and_frozen_and_copies_none():
    """``ds.options`` is the resolved, frozen object every layer reads; the option attributes are
    read-only views of it, never copies (issue 34: following byte_budget_gb or num_workers from the
    constructor to their use passes no copied attribute)."""
    ds = StreamingLeRobotDataset(
        root=G1, episodes=[0, 1], seed=None, max_num_shards=3, byte_budget_gb=2, decoded_cache_gb=0.5
    )
    o = ds.options
    assert (o.seed, o.num_workers, o.byte_budget_gb, o.video_backend) == (42, 3, 2.0, "torchcodec")
    assert isinstance(o.byte_budget_gb, float) and o.byte_budget == 2 << 30 and o.decoded_cache_bytes == 1 << 29
    assert o.resolved() == o  # resolving again changes nothing
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.byte_budget_gb = 4
    names = {i.name for i in option_info()}
    assert not names & set(vars(ds)), "an option copied onto the dataset"
    assert (ds.byte_budget_gb, ds.num_workers, ds.seed) == (2.0, 3, 42)  # views of ds.options
    with pytest.raises(AttributeError):
        ds.num_workers = 0
    mix = StreamingMultiLeRobotDataset(
        ["a/x", "b/y"], roots=[G1, G1], episodes=[0, 1], byte_budget_gb=2, tolerance_s={"a/x": 1e-3}
    )
    assert not names & set(vars(mix)) and mix.byte_budget_gb == 2.0 and mix.options.byte_budget == 2 << 30
    assert [c.options.tolerance_s for c in mix.datasets] == [1e-3, 1e-4]  # per dataset: each dataset's options
    assert mix.options.tolerance_s == 1e-4 and not hasattr(mix, "tolerance_s")


def test_the_options_rules_are_the_only_rules():
    """Every layer that takes an option's value applies the option's own rule, with its text: the
    planner's settings, a loader's settings, a resume state's fields."""
    from lerobotstream.dataset._stream import LoaderSettings
    from lerobotstream.errors import ResumeStateError
    from lerobotstream.planner._streams import PlanSettings
    from tests._planners import make_planner

    want = {i.name: i.want for i in option_info()}
    for name, bad in (
        ("sampling_strategy", "uniform"),
        ("equalize", "pad"),
        ("episode_pool_size", 0),
        ("num_workers", 1025),
        ("batch_size", 0),
        ("partitions", 0),
        ("seed", 1.5),
    ):
        with pytest.raises(StreamingConfigError, match=rf"^{name} must be"):
            PlanSettings(**{name: bad})
        if name in ("batch_size", "num_workers"):
            with pytest.raises(StreamingConfigError, match=f"^{name} must be"):
                LoaderSettings(**{name: bad})
    with pytest.raises(StreamingConfigError, match="^batch_size must be an int >= 1"):
        PlanSettings(batch_size=None)  # the planner needs one: the rule without its "None or"
    state = make_planner({0: 4, 1: 4}).state_dict(samples_consumed=0)
    with pytest.raises(ResumeStateError) as err:
        make_planner({0: 4, 1: 4}).load_state_dict({**state, "sampling_strategy": "uniform", "episode_pool_size": 0})
    assert f"sampling_strategy='uniform' ({want['sampling_strategy']} is needed)" in str(err.value)
    assert f"episode_pool_size=0 ({want['episode_pool_size'].removeprefix('None or ')} is needed)" in str(err.value)


def test_every_planner_setting_is_named_as_its_option():
    """Adding a planner option is its StreamOptions entry, its PlanSettings field (same name:
    ``plan_settings`` maps them by name) and the planner code that uses it."""
    from lerobotstream.dataset._stream import LoaderSettings, plan_settings
    from lerobotstream.planner._streams import PlanSettings

    names = {i.name for i in option_info()}
    own = {f.name for f in dataclasses.fields(PlanSettings)} - names
    assert own == {"byte_budget", "rank", "world_size"}  # the budget in bytes (converted once), the rank
    assert {f.name for f in dataclasses.fields(LoaderSettings)} <= names
    o = StreamOptions(
        seed=7,
        episode_pool_size=3,
        sampling_strategy="round_robin",
        video_decoder_cache_size=5,
        byte_budget_gb=0.5,
        repeat=True,
        equalize="drop",
        partitions=4,
        batch_size=2,
    ).resolved()
    s = plan_settings(o, LoaderSettings(batch_size=6, num_workers=2, drop_last=True))
    assert (
        s.seed,
        s.episode_pool_size,
        s.sampling_strategy,
        s.video_decoder_cache_size,
        s.byte_budget,
        s.repeat,
        s.equalize,
        s.partitions,
    ) == (7, 3, "round_robin", 5, 1 << 29, True, "drop", 4)
    assert (s.batch_size, s.num_workers, s.drop_last) == (6, 2, True)  # the loader's, not the options'


def test_a_negative_seed_is_refused_at_construction_naming_the_option():
    """numpy's SeedSequence refuses negative entropy: the option's rule says so first (new-user trial)."""
    import numpy as np

    from lerobotstream.errors import StreamingConfigError

    for bad in (-1, np.int64(-3)):
        with pytest.raises(StreamingConfigError, match="seed"):
            StreamOptions(seed=bad).validate()
    StreamOptions(seed=0).validate()
    StreamOptions(seed=None).validate()
