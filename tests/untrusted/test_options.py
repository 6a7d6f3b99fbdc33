"""Options are untrusted input: a value of the wrong kind, an implausible size, a misspelled name
or a tolerance the dataset's frame rate cannot honour is a typed refusal naming the option —
never a bare TypeError/OverflowError later, a silently wrong episode, or a confusing sidecar error."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import numpy as np
import pytest

from lerobotstream import StreamingLeRobotDataset, StreamingMultiLeRobotDataset, StreamOptions
from lerobotstream.errors import OptionArgumentError, StreamingConfigError
from lerobotstream.options import option_info

G1 = Path(__file__).resolve().parents[2] / "data" / "g1_v30"


@pytest.mark.parametrize("value", [b"1", "1", bytearray(b"\x01"), memoryview(b"\x01"), {1: "x"}, {0: 0}])
def test_episodes_of_str_bytes_or_a_mapping_are_refused(value):
    """Bug: ``episodes=b"1"`` was read as [49] (the byte's value) and streamed episode 49;
    ``{1: "x"}`` was read as its keys."""
    with pytest.raises(StreamingConfigError, match=r"^episodes must be .*not a str, bytes or dict") as e:
        StreamOptions(episodes=value).validate()
    assert e.value.option == "episodes"


@pytest.mark.parametrize("value", ["front", b"front", {"front": 1}])
def test_camera_keys_of_str_bytes_or_a_mapping_are_refused(value):
    with pytest.raises(StreamingConfigError, match=r"^camera_keys must be"):
        StreamOptions(camera_keys=value).validate()


def test_sequences_of_every_kind_are_still_episodes():
    for value in ([0, 2], (0, 2), range(0, 3, 2), np.array([0, 2]), {0, 2}, iter([0, 2])):
        opts = StreamOptions.from_arguments(None, (), {"episodes": value}, "test").resolved()
        assert opts.episodes == (0, 2), value


def _int_options():
    return [i for i in option_info() if i.check(1) and not i.check(1.5)]


@pytest.mark.parametrize("name", [i.name for i in _int_options()])
def test_every_int_option_has_a_plausible_maximum_shown_in_its_rule(name):
    """Bug: ``episode_pool_size`` / ``prefetch_episodes`` = 10**19 passed the rule, then an
    OverflowError (a C long) at iteration; ``max_num_shards=10**19`` got past the num_workers rule."""
    info = next(i for i in option_info() if i.name == name)
    assert "at most" in info.want or "in [" in info.want, info.want  # the docs show the bound
    for big in (2**64, 10**20):
        with pytest.raises(StreamingConfigError, match=rf"^{name} must be .*got {big}"):
            StreamOptions(**{name: big}).validate()


def test_max_num_shards_is_held_to_the_num_workers_bound():
    from lerobotstream import constants

    with pytest.raises(StreamingConfigError, match="^max_num_shards must be"):
        StreamOptions(max_num_shards=constants.MAX_NUM_WORKERS + 1).resolved()
    assert StreamOptions(max_num_shards=constants.MAX_NUM_WORKERS).resolved().num_workers == constants.MAX_NUM_WORKERS


@pytest.mark.parametrize("name", ["read_timeout_s", "sidecar_lock_timeout_s", "loader_timeout_s"])
def test_timeouts_have_a_maximum_thread_waits_can_take(name):
    """A timeout of 1e300 s was accepted; Python's thread waits raise OverflowError past ~9.2e9 s."""
    with pytest.raises(StreamingConfigError, match=rf"^{name} must be .*at most"):
        StreamOptions(**{name: 1e300}).validate()


class _BytesPath:
    def __fspath__(self):
        return b"/tmp"


@pytest.mark.parametrize("value", [b"/tmp", bytearray(b"/tmp"), _BytesPath(), 3])
def test_data_root_must_be_a_str_path(value):
    """Bug: ``data_root=b"..."`` gave a bare TypeError (``startswith``) when the source opened."""
    with pytest.raises(StreamingConfigError, match=r"^data_root must be"):
        StreamOptions(data_root=value).validate()
    assert StreamOptions(data_root=Path("/tmp")).validate().data_root == Path("/tmp")


def test_a_misspelled_keyword_is_one_error_type_for_a_dataset_and_a_mixture():
    """Bug: a TypeError on a dataset but a StreamingConfigError on a mixture. Now both raise
    OptionArgumentError, which is both (callers catching either keep working)."""
    errors = []
    for build in (
        lambda: StreamingLeRobotDataset(root=G1, byte_budget=1),
        lambda: StreamingMultiLeRobotDataset(["a/x", "b/y"], roots=[G1, G1], byte_budget=1),
    ):
        with pytest.raises(OptionArgumentError, match="unexpected keyword argument 'byte_budget'") as e:
            build()
        errors.append(e.value)
    assert all(isinstance(e, TypeError) and isinstance(e, StreamingConfigError) for e in errors)
    assert [e.option for e in errors] == ["byte_budget", "byte_budget"]
    with pytest.raises(OptionArgumentError, match="unexpected keyword argument 'byte_budget'"):
        StreamOptions().replace(byte_budget=1)
    with pytest.raises(OptionArgumentError, match="multiple values for argument 'episodes'"):
        StreamingLeRobotDataset("local/g1", G1, [0], episodes=[1])


def test_ds_options_holds_copies_never_the_callers_lists():
    """Bug: ``ds.options.episodes`` was the caller's own list: mutating it changed what
    ``ds.options`` reported."""
    episodes, cams, windows = [0, 1], None, {"action": [0.0, 1 / 30]}
    ds = StreamingLeRobotDataset(root=G1, episodes=episodes, camera_keys=cams, delta_timestamps=windows)
    episodes.append(2)
    windows["action"].append(2 / 30)
    assert ds.options.episodes == (0, 1) and ds.episodes == [0, 1]
    assert ds.options.delta_timestamps == {"action": (0.0, 1 / 30)}
    assert ds.options.delta_timestamps is not windows
    cams = StreamOptions(camera_keys=["a", "b"]).resolved().camera_keys
    assert cams == ("a", "b")


def test_tolerance_of_half_a_frame_or_more_names_the_option():
    """Bug: ``tolerance_s=1.5`` was accepted, then failed as a SidecarValidationError about the
    sidecar. Half a frame interval (0.5 / fps) is the bound: beyond it a frame matches two
    timestamps."""
    with pytest.raises(StreamingConfigError, match=r"tolerance_s must be below half a frame interval .* 30 fps") as e:
        StreamingLeRobotDataset(root=G1, tolerance_s=1.5)
    assert e.value.option == "tolerance_s"
    with pytest.raises(StreamingConfigError, match=r"dataset 1 \(b/y\).*tolerance_s must be below half"):
        StreamingMultiLeRobotDataset(["a/x", "b/y"], roots=[G1, G1], tolerance_s={"b/y": 0.5 / 30})


def test_mixture_roots_and_weights_must_be_sequences():
    with pytest.raises(StreamingConfigError, match="^roots must be"):
        StreamingMultiLeRobotDataset(["a/x", "b/y"], roots=os.fspath(G1)[:2])
    with pytest.raises(StreamingConfigError, match="^weights must be"):
        StreamingMultiLeRobotDataset(["a/x", "b/y"], roots=[G1, G1], weights=b"\x01\x02")


@pytest.mark.parametrize("epoch", [-1, 1.0, True, "1", None, np.float64(2)])
def test_an_epoch_number_has_one_rule(epoch):
    """``check_epoch``: the rule ``set_epoch`` holds an epoch to (an int >= 0), one message."""
    from lerobotstream.options import check_epoch

    with pytest.raises(StreamingConfigError, match=r"^epoch must be an int >= 0, got ") as e:
        check_epoch(epoch)
    assert e.value.option == "epoch"
    assert check_epoch(np.int64(3)) == 3 and type(check_epoch(np.int64(3))) is int


@pytest.mark.parametrize(
    ("given", "meant"),
    [("sampling_stratgy", "sampling_strategy"), ("strategy", "sampling_strategy"), ("pool_size", "episode_pool_size")],
)
def test_an_unknown_keyword_names_the_closest_option_wherever_it_is_given(given, meant):
    """User trial: a misspelled or old option name said only "not an option", and
    ``StreamOptions(...)`` raised Python's plain TypeError. Every place an option arrives now raises
    OptionArgumentError (a TypeError too) with "did you mean ...?" (difflib over the option names)."""
    hint = f"unexpected keyword argument '{given}' \\(not an option; did you mean '{meant}'\\?"
    for build in (
        lambda: StreamingLeRobotDataset(root=G1, **{given: 1}),
        lambda: StreamingMultiLeRobotDataset(["a/x", "b/y"], roots=[G1, G1], **{given: 1}),
        lambda: StreamOptions(**{given: 1}),
        lambda: StreamOptions().replace(**{given: 1}),
    ):
        with pytest.raises(OptionArgumentError, match=hint) as e:
            build()
        assert isinstance(e.value, TypeError) and e.value.option == given
    with pytest.raises(OptionArgumentError, match=r"'zzz_qq' \(not an option; see docs/options.md\)"):
        StreamOptions(zzz_qq=1)
    assert StreamOptions(seed=3).seed == 3 and "sampling_strategy" in inspect.signature(StreamOptions).parameters


def test_an_unknown_stream_loader_keyword_is_the_same_typed_error():
    from lerobotstream import StreamLoader

    ds = StreamingLeRobotDataset(root=G1)
    with pytest.raises(OptionArgumentError, match="'num_wokers' .*did you mean 'num_workers'\\?") as e:
        StreamLoader(ds, batch_size=2, num_wokers=2)
    assert isinstance(e.value, TypeError) and e.value.option == "num_wokers"
    assert list(inspect.signature(StreamLoader).parameters)[:2] == ["dataset", "batch_size"]


def test_a_mixture_option_given_per_dataset_that_is_not_per_dataset_says_so():
    with pytest.raises(StreamingConfigError, match="sampling_strategy is not a per-dataset option") as e:
        StreamingMultiLeRobotDataset(["a/x", "b/y"], roots=[G1, G1], sampling_strategy={"a/x": "sequential"})
    assert e.value.option == "sampling_strategy" and "episodes" in str(e.value)
    # a per-dataset option still takes its dict
    ds = StreamingMultiLeRobotDataset(["a/x", "b/y"], roots=[G1, G1], episodes={"a/x": [0]})
    assert ds.datasets[0].options.episodes == (0,)
