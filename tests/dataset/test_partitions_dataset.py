"""Canonical partitions with real frames: each partition's (episode, frame) sequence is the same on
1 rank in-process and on 2 ranks x 2 DataLoader workers (ranks simulated with RANK/WORLD_SIZE),
an elastic resume 2x2x4 -> 3x1x5 plays exactly each partition's tail, every item's pixels are its
(episode, frame) (the generator burns the indices into the frames), several episodes per MP4."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest

from lerobotstream.dataset import StreamingLeRobotDataset, StreamingMultiLeRobotDataset
from lerobotstream.errors import ResumeStateError, ShardingError, StreamingConfigError
from tests._streams import checked_anchors, run_ranks

LENGTHS = (7, 5, 9, 4, 6, 8, 3, 6, 5)
CAM = "observation.images.front"
P = 4
FULL = Counter((e, f) for e, n in enumerate(LENGTHS) for f in range(n))


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    return Path(make_generated_dataset(episode_lengths=LENGTHS, codec="h264", cameras=((CAM, 32, 24),), fps=10,
                                       episodes_per_video_file=3))


def _ds(root, topo, monkeypatch, rank, **kw):
    w, k, b = topo
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(w))
    kw.setdefault("partitions", P)
    return StreamingLeRobotDataset(root=root, repeat=False, episode_pool_size=2, prefetch_episodes=1,
                                   max_num_shards=max(1, k), batch_size=b, num_workers=k, return_uint8=True, **kw)


def _run(root, topo, monkeypatch, n=None, state=None, **kw):
    """Every rank of ``topo`` iterates (``n`` batches, or to the end); (anchors, rank 0's state)."""
    return run_ranks(lambda r: _ds(root, topo, monkeypatch, r, **kw), topo, checked_anchors, n, state)


def _by_partition(root, monkeypatch, anchors):
    planner = _ds(root, (1, 0, 1), monkeypatch, 0)._planner(0)
    part_of = {int(e): q for q in range(P) for e in planner.partition_episodes(q)}
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
    with pytest.raises(StreamingConfigError, match="not supported for mixtures"):
        StreamingMultiLeRobotDataset(["a", "b"], roots=[root, root], partitions=4)
