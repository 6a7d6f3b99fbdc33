"""Canonical partitions with real frames: each partition's (episode, frame) sequence is the same on
1 rank in-process and on 2 ranks x 2 DataLoader workers (ranks simulated with RANK/WORLD_SIZE),
an elastic resume 2x2x4 -> 3x1x5 plays exactly each partition's tail, every item's pixels are its
(episode, frame) (the generator burns the indices into the frames), several episodes per MP4."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest

from lerobotstream.dataset._dataset import StreamingLeRobotDataset
from lerobotstream.dataset._multi import StreamingMultiLeRobotDataset
from lerobotstream.errors import ResumeStateError, ShardingError, StreamingConfigError
from tests._planners import partition_episodes, stream_planners
from tests._streams import checked_anchors, run_ranks

LENGTHS = (7, 5, 9, 4, 6, 8, 3, 6, 5)
CAM = "observation.images.front"
P = 4
FULL = Counter((e, f) for e, n in enumerate(LENGTHS) for f in range(n))


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(
        make_generated_dataset(
            episode_lengths=LENGTHS, codec="h264", cameras=((CAM, 32, 24),), fps=10, episodes_per_video_file=3
        )
    )


def _ds(root, topo, monkeypatch, rank, **kw):
    w, k, b = topo
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(w))
    kw.setdefault("partitions", P)
    return StreamingLeRobotDataset(
        root=root,
        repeat=False,
        episode_pool_size=2,
        prefetch_episodes=1,
        max_num_shards=max(1, k),
        batch_size=b,
        num_workers=k,
        return_uint8=True,
        **kw,
    )


def _run(root, topo, monkeypatch, n=None, state=None, **kw):
    """Every rank of ``topo`` iterates (``n`` batches, or to the end); (anchors, rank 0's state)."""
    return run_ranks(lambda r: _ds(root, topo, monkeypatch, r, **kw), topo, checked_anchors, n, state)


def _by_partition(root, monkeypatch, anchors):
    planner = _ds(root, (1, 0, 1), monkeypatch, 0)._planner(0)
    part_of = {int(e): q for q in range(P) for e in partition_episodes(planner, q)}
    out = defaultdict(list)
    for a in anchors:
        out[part_of[a[0]]].append(a)
    return dict(out)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_partition_order_and_elastic_tails_with_real_frames(root, monkeypatch):
    one, _ = _run(root, (1, 0, 4), monkeypatch)
    assert Counter(one) == FULL
    ref = _by_partition(root, monkeypatch, one)
    four, _ = _run(root, (2, 2, 4), monkeypatch)
    assert Counter(four) == FULL and _by_partition(root, monkeypatch, four) == ref
    from lerobotstream import StreamLoader  # its threads mode: the same partitions, the same orders

    loader = StreamLoader(_ds(root, (1, 2, 4), monkeypatch, 0), batch_size=4, num_workers=2, mode="threads")
    assert _by_partition(root, monkeypatch, [a for batch in loader for a in checked_anchors(batch)]) == ref

    consumed, state = _run(root, (2, 2, 4), monkeypatch, n=2)
    assert len(consumed) == 2 * 2 * 4 and state["partitions"] == P
    got, _ = _run(root, (3, 1, 5), monkeypatch, state=state)
    assert Counter(consumed) + Counter(got) == FULL
    c, g = _by_partition(root, monkeypatch, consumed), _by_partition(root, monkeypatch, got)
    for q in range(P):
        assert c.get(q, []) + g.get(q, []) == ref[q], q


def test_refused_partition_cases(root, monkeypatch):
    ds = _ds(root, (2, 2, 4), monkeypatch, 0)
    state = ds.state_dict(samples_consumed=8)
    with pytest.raises(ResumeStateError, match="partitions: checkpoint 4, now None"):
        _ds(root, (2, 2, 4), monkeypatch, 0, partitions=None).load_state_dict(state)
    with pytest.raises(ResumeStateError, match="partitions: checkpoint 4, now 3"):
        _ds(root, (1, 2, 4), monkeypatch, 0, partitions=3).load_state_dict(state)
    with pytest.raises(StreamingConfigError, match="partitions=4 is fewer than the 6 streams"):
        _ds(root, (3, 2, 4), monkeypatch, 0)  # at construction, before any fetch
    with pytest.raises(ShardingError, match="cannot fill partitions=10"):
        _ds(root, (1, 2, 4), monkeypatch, 0, partitions=10)
    with pytest.raises(StreamingConfigError, match="partitions"):
        StreamingLeRobotDataset(root=root, partitions=0)
    with pytest.raises(StreamingConfigError, match="partitions=4 is fewer than the 6 streams"):
        _mixture(root, (3, 2, 4), monkeypatch, 0)  # a mixture's rules too, at construction


def _mixture(root, topo, monkeypatch, rank, **kw):
    w, k, b = topo
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(w))
    return StreamingMultiLeRobotDataset(
        ["p/a", "p/b"],
        roots=[root, root],
        weights=[2, 1],
        partitions=P,
        repeat=False,
        episode_pool_size=2,
        prefetch_episodes=1,
        max_num_shards=max(1, k),
        batch_size=b,
        num_workers=k,
        return_uint8=True,
        **kw,
    )


def _mixed_anchors(batch):
    return [(d, e, f) for d, (e, f) in zip(batch["dataset_index"].tolist(), checked_anchors(batch))]


def _by_dataset_partition(root, monkeypatch, anchors):
    """{(dataset, partition): its anchors in order} (each dataset has its own partitions: its seed)."""
    streams = stream_planners(_mixture(root, (1, 0, 1), monkeypatch, 0)._planner(0))
    part_of = {(d, int(e)): q for d, p in enumerate(streams) for q in range(P) for e in partition_episodes(p, q)}
    out = defaultdict(list)
    for d, e, f in anchors:
        out[d, part_of[d, e]].append((d, e, f))
    return dict(out)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_mixture_gets_partitions_and_resumes_from_their_offsets(root, monkeypatch):
    """Mixtures get canonical partitions (issue 33): each dataset's partitions play the same
    (episode, frame) sequence whatever the topology; an elastic resume plays each partition's
    tail, from counts (``unit`` partitions), and old + new is every frame of both once."""
    full = Counter({(d, e, f): 1 for d in (0, 1) for (e, f) in FULL})

    def run(topo, **kw):
        return run_ranks(lambda r: _mixture(root, topo, monkeypatch, r), topo, _mixed_anchors, **kw)

    one, _ = run((1, 0, 4))
    four, _ = run((2, 2, 4))
    assert Counter(one) == Counter(four) == full
    ref = _by_dataset_partition(root, monkeypatch, one)
    assert _by_dataset_partition(root, monkeypatch, four) == ref  # each partition: one order on any topology
    consumed, state = run((2, 2, 4), n=2)
    assert state["partitions"] == P and state["mixture"]["repo_ids"] == ["p/a", "p/b"]
    ds = _mixture(root, (3, 1, 5), monkeypatch, 0)
    ds.load_state_dict(state)
    assert ds.resume_info()["unit"] == "partitions" and ds.resume_info()["consumed"] == len(consumed)
    got, _ = run((3, 1, 5), state=state)
    assert Counter(consumed) + Counter(got) == full
    c, g = _by_dataset_partition(root, monkeypatch, consumed), _by_dataset_partition(root, monkeypatch, got)
    for key in ref:  # each partition's consumed prefix, then its tail: its one order
        assert c.get(key, []) + g.get(key, []) == ref[key], key
