"""Error messages of the resume and partition rules name the dataset, the setting (and its
``lerobotstream-train`` flag) and what to do: partitions more than the selected episodes, fewer
than the streams of the run (raised when a StreamLoader asks for more workers), on a mixture; a
StreamLoader state given to a dataset, a dataset state given to a StreamLoader."""

from __future__ import annotations

from pathlib import Path

import pytest

from lerobotstream import StreamingLeRobotDataset, StreamingMultiLeRobotDataset, StreamLoader
from lerobotstream.errors import ResumeStateError, ShardingError, StreamingConfigError
from tests._streams import resigned

CAM = "observation.images.front"


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(
        make_generated_dataset(
            repo_id="msg/parts",
            episode_lengths=(4, 3, 5, 2),
            codec="av1",
            cameras=((CAM, 32, 24),),
            episodes_per_video_file=2,
        )
    )


def test_partitions_beyond_the_selected_episodes_name_the_dataset_and_flag(root):
    with pytest.raises(
        ShardingError,
        match=r"msg/parts: 3 non-empty selected episode\(s\) cannot fill "
        r"partitions=4.*--dataset.streaming_partitions.*--dataset.episodes",
    ):
        StreamingLeRobotDataset(root=root, partitions=4, episodes=[0, 2, 3])


def test_partitions_fewer_than_the_loaders_streams_name_the_dataset(root):
    ds = StreamingLeRobotDataset(root=root, partitions=2)  # 1 stream: fine until 3 workers ask
    with pytest.raises(
        StreamingConfigError,
        match=r"msg/parts: partitions=2 is fewer than the 3 streams.*"
        r"--dataset.streaming_partitions",
    ):
        next(iter(StreamLoader(ds, batch_size=2, num_workers=3, mode="threads")))


def test_partitions_on_a_mixture_name_the_dataset_and_the_flag(root):
    """Mixtures take partitions (issue 33); a dataset with fewer episodes than partitions is named."""
    StreamingMultiLeRobotDataset(["a/x", "b/y"], roots=[root, root], partitions=2)
    with pytest.raises(ShardingError, match=r"a/x.*cannot fill partitions=3.*--dataset.streaming_partitions"):
        StreamingMultiLeRobotDataset(
            ["a/x", "b/y"], roots=[root, root], partitions=3, episodes={"a/x": [0, 1], "b/y": None}
        )


@pytest.mark.parametrize("epoch", [-1, 1.5, True])
def test_a_bad_epoch_is_a_config_error_naming_it(root, epoch):
    """Issue 35 item 7: ``set_epoch(-1)`` is a lerobotstream error (a ValueError) naming the field."""
    ds = StreamingLeRobotDataset(root=root)
    with pytest.raises(StreamingConfigError, match=r"epoch must be an int >= 0, got") as err:
        ds.set_epoch(epoch)
    assert isinstance(err.value, ValueError) and err.value.option == "epoch"
    with pytest.raises(StreamingConfigError, match=r"epoch must be an int >= 0, got") as err:
        ds.seek(epoch)
    assert err.value.option == "epoch"
    with pytest.raises(StreamingConfigError, match=r"samples must be an int >= 0") as err:
        ds.seek(0, epoch)
    assert err.value.option == "samples"


def test_states_of_another_schema_are_refused_naming_it(root):
    """Issue 42 item 6: one schema and no conversion. A stream state or StreamLoader state written by
    an earlier (unreleased) build is refused with its schema named and the way out: a new run from
    the saved weights."""
    ds = StreamingLeRobotDataset(root=root)
    state = ds.state_dict()
    old = resigned({**{k: v for k, v in state.items() if k != "schema"}, "lerobotstream_planner_schema": 3})
    with pytest.raises(
        ResumeStateError, match="has schema 3 \\(under 'lerobotstream_planner_schema', the marker of an"
    ) as e:
        StreamingLeRobotDataset(root=root).load_state_dict(old)
    assert "new run from the saved weights" in str(e.value)
    loader = StreamLoader(StreamingLeRobotDataset(root=root), batch_size=2, num_workers=0)
    saved = loader.state_dict()
    assert saved["schema"] == "lerobotstream.loader/2" and saved["stream"]["schema"] == "lerobotstream.stream/1"
    older = {"schema": "lerobotstream.loader/1", "batches": 0, "mode": "threads", "dataset": state}
    with pytest.raises(ResumeStateError, match="schema 'lerobotstream.loader/1'; this build's StreamLoader reads") as e:
        loader.load_state_dict(older)
    assert "new run from the saved weights" in str(e.value)
    for other in ("lerobotstream.loader/3", None, ["lerobotstream.loader/2"]):  # a later build's, none, a list
        with pytest.raises(ResumeStateError) as e:
            loader.load_state_dict({**saved, "schema": other})
        assert f"schema {other!r}; this build's StreamLoader reads" in str(e.value)
        assert "earlier build" not in str(e.value) and "new run from the saved weights" in str(e.value)


def test_a_state_given_to_the_wrong_object_says_where_it_goes(root):
    loader = StreamLoader(StreamingLeRobotDataset(root=root), batch_size=2, num_workers=0)
    # where it goes, and no advice to start over (the state is fine)
    with pytest.raises(
        ResumeStateError, match="this is a StreamLoader state: pass it to StreamLoader.load_state_dict"
    ) as e:
        StreamingLeRobotDataset(root=root).load_state_dict(loader.state_dict())
    assert "new run" not in str(e.value)
    with pytest.raises(ResumeStateError, match=r"this is a dataset's state \(ds.state_dict\(\)\)") as e:
        loader.load_state_dict(StreamingLeRobotDataset(root=root).state_dict())
    assert "new run" not in str(e.value)
    with pytest.raises(ResumeStateError, match="is not a lerobotstream stream state"):
        StreamingLeRobotDataset(root=root).load_state_dict([1])


@pytest.mark.parametrize("field,value", [("seed", 1), ("partitions", 2), ("epoch", 3)])
def test_an_elastic_state_whose_origin_was_tampered_is_refused(root, field, value):
    """A state saved inside an elastic remainder carries the old run's state (``origin``); one that
    does not share the state's seed / selection / partitions, or lies in a later epoch, is refused
    (a spliced origin used to be replayed silently: another old run's order, wrong coverage)."""
    first = StreamLoader(StreamingLeRobotDataset(root=root), batch_size=2, num_workers=2, mode="threads")
    it = iter(first)
    next(it)
    state = first.state_dict()
    it.close()
    second = StreamLoader(StreamingLeRobotDataset(root=root), batch_size=3, num_workers=1, mode="threads")
    second.load_state_dict(state)
    it = iter(second)
    next(it)
    saved = second.state_dict()["stream"]
    it.close()
    StreamingLeRobotDataset(root=root, batch_size=3).load_state_dict(saved)  # as written: fine
    saved = resigned(saved, origin=resigned(saved["origin"], **{field: value}))  # spliced and re-signed
    with pytest.raises(ResumeStateError, match=f"its elastic origin does not belong to it: origin {field}={value}"):
        StreamingLeRobotDataset(root=root, batch_size=3).load_state_dict(saved)


def test_another_drop_n_last_frames_is_named_as_a_possible_cause(root):
    state = StreamingLeRobotDataset(root=root, batch_size=2).state_dict(samples_consumed=2)
    with pytest.raises(ResumeStateError, match="now 4 episodes .*another drop_n_last_frames"):
        StreamingLeRobotDataset(root=root, batch_size=2, drop_n_last_frames=1).load_state_dict(state)


@pytest.mark.parametrize("repeat", [False, True])
def test_a_state_no_run_over_this_stream_can_have_written_is_refused(root, repeat):
    """world_size 5 over 4 episodes: no such run exists (a rank would own no episode); the state was
    edited. ResumeStateError, not the planner's ShardingError from deep inside the replay."""
    state = StreamingLeRobotDataset(root=root, batch_size=2, repeat=repeat).state_dict(samples_consumed=2)
    with pytest.raises(ResumeStateError, match=r"no run over this stream has its settings \(.*5 ranks"):
        StreamingLeRobotDataset(root=root, batch_size=2, repeat=repeat).load_state_dict(resigned(state, world_size=5))
