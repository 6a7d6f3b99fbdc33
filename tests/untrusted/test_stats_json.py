"""Untrusted input, ``meta/stats.json`` values a mixture combines (``features.aggregate_stats``):
a value of the wrong type is a MetadataError naming the dataset, the feature and the statistic;
never a bare TypeError/ValueError, never a NaN mean."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from lerobotstream.errors import MetadataError
from lerobotstream.features import aggregate_stats

GOOD = {
    "observation.state": {
        "min": [0.0, -1.0],
        "max": [2.0, 1.0],
        "mean": [1.0, 0.0],
        "std": [0.5, 0.5],
        "count": [10],
        "q01": [0.1, -0.9],
    }
}


def _with(**stat):
    stats = copy.deepcopy(GOOD)
    stats["observation.state"].update(stat)
    return stats


@pytest.mark.parametrize(
    "bad,said",
    [
        (_with(mean={"a": 1}), "'observation.state'/mean is not a numeric array: {'a': 1}"),
        (_with(std="abc"), "'observation.state'/std is not a numeric array: 'abc'"),
        (_with(min=[[1.0], [2.0, 3.0]]), "'observation.state'/min is not a numeric array"),
        (_with(max=[True, False]), "'observation.state'/max is not a numeric array"),
        (_with(count="x"), "'observation.state'/count is not a numeric array: 'x'"),
        (_with(count=[]), "'observation.state'/count is []; it must be one number >= 0"),
        (_with(count=[3, 4]), "'observation.state'/count is [3, 4]; it must be one number >= 0"),
        (_with(count=[-5]), "'observation.state'/count is [-5]; it must be one number >= 0"),
        (_with(std=[0.5]), "'observation.state'/std has shape [1], the mean [2]"),
        (_with(q01=[0.1]), "'observation.state'/q01 has shape [1], the mean [2]"),
        ({"observation.state": [1, 2]}, "'observation.state' is [1, 2], not an object of statistics"),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_a_statistic_of_the_wrong_type_names_the_dataset_feature_and_stat(bad, said):
    with pytest.raises(MetadataError) as e:
        aggregate_stats([GOOD, bad], names=["a/one", "b/two"])
    assert type(e.value) is MetadataError and e.value.path == "meta/stats.json"
    assert f"meta/stats.json of b/two: {said}" in str(e.value)
    with pytest.raises(MetadataError, match="meta/stats.json of dataset 1: "):  # names left out: by position
        aggregate_stats([GOOD, bad])


def test_counts_summing_to_zero_are_refused_not_a_nan_mean():
    """LeRobot's aggregate_stats divides by the summed count: 0 made the mixture's mean and std NaN."""
    zero = _with(count=[0])
    with pytest.raises(MetadataError, match=r"'observation.state': its counts sum to 0 .*recompute meta/stats.json"):
        aggregate_stats([zero, zero])
    # one dataset's zero count is a weight of 0 among others: the others' stats
    got = aggregate_stats([GOOD, _with(count=[0], mean=[9.0, 9.0])])["observation.state"]
    assert got["mean"] == [1.0, 0.0] and got["count"] == [10]


def test_different_shapes_across_datasets_name_each_dataset():
    other = _with(mean=[1.0, 0.0, 0.0], std=[1.0, 1.0, 1.0], q01=[0.0, 0.0, 0.0])
    with pytest.raises(MetadataError, match=r"mean is \[2\] in meta/stats.json of a: .*\[3\] in meta/stats.json of b"):
        aggregate_stats([GOOD, other], names=["a", "b"])


def test_good_stats_combine_as_lerobot_does():
    other = _with(mean=[3.0, 2.0], count=30, min=[-1.0, -2.0])
    got = aggregate_stats([GOOD, other])["observation.state"]
    assert got["count"] == [40]
    np.testing.assert_allclose(got["mean"], [2.5, 1.5])
    np.testing.assert_allclose(got["std"], np.sqrt(0.25 + np.array([0.75, 0.75])))
    assert got["min"] == [-1.0, -2.0] and got["max"] == [2.0, 1.0]
    np.testing.assert_allclose(got["q01"], [0.1, -0.9])
