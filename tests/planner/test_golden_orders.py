"""Golden sample orders: the exact anchors each strategy, a byte budget, ``repeat``, a resume point,
ranks, a mixture and partitions serve — and elastic resume points (another world size, workers,
batch size; endless), a resume inside partitions, ``equalize`` and a mixture's resume — recorded
as data. A change to fetching, caching or admission must leave every one of them as it is (the
sample order is a function of the seed and the plan only); a deliberate change of the order re-records them (run this module as a script)."""

from __future__ import annotations

from itertools import islice

import pytest

from tests._planners import make_mixture, make_partition_planner, make_planner

L = {0: 3, 1: 5, 2: 2, 3: 4, 4: 6, 5: 1, 7: 3}
M = {0: 4, 1: 2, 2: 5}
NB = {e: 100 * (1 + e % 3) for e in L}


def _anchors(p, wid, nw, n=None) -> list[tuple[int, int]]:
    return list(islice(p.iter_worker_anchors(wid, nw), n))


def _cases() -> dict[str, list[tuple[int, int]]]:
    out = {}
    for s in ("remaining", "round_robin", "sequential"):
        for ep in (0, 1):
            p = make_planner(L, seed=7, num_workers=2, batch_size=3, episode_pool_size=2, sampling_strategy=s)
            p.set_epoch(ep)
            for w in (0, 1):
                out[f"{s}/epoch{ep}/worker{w}"] = _anchors(p, w, 2)
        p = make_planner(
            L,
            seed=7,
            num_workers=0,
            batch_size=3,
            episode_pool_size=3,
            sampling_strategy=s,
            byte_budget=400,
            episode_nbytes=NB.__getitem__,
        )
        out[f"{s}/budget/in_process"] = _anchors(p, None, 0)
        p = make_planner(L, seed=7, num_workers=0, batch_size=3, episode_pool_size=2, sampling_strategy=s, repeat=True)
        out[f"{s}/repeat/in_process"] = _anchors(p, None, 0, 60)
        p = make_planner(L, seed=7, num_workers=2, batch_size=3, episode_pool_size=2, sampling_strategy=s)
        p.load_state_dict(p.state_dict(samples_consumed=6))
        for w in (0, 1):
            out[f"{s}/resume6/worker{w}"] = _anchors(p, w, 2)
    for r in (0, 1):
        p = make_planner(L, seed=3, num_workers=1, batch_size=2, episode_pool_size=2, world_size=2, rank=r)
        out[f"ranks/rank{r}"] = _anchors(p, 0, 1)
    ps = [make_planner(d, seed=11 + i, num_workers=0, episode_pool_size=2) for i, d in enumerate((L, M))]
    mixture = {"repo_ids": ["a", "b"], "weights": [2, 1]}
    mp = make_mixture(ps, [2, 1], [0, 100], seed=5, batch_size=3, repeat=False, mixture=mixture)
    out["mixture/in_process"] = _anchors(mp, None, 0)
    for w in (0, 1):
        p = make_partition_planner(L, partitions=3, num_workers=2, batch_size=2, episode_pool_size=2, seed=9)
        out[f"partitions/worker{w}"] = _anchors(p, w, 2)

    # elastic resume: a state of world 1 / 2 workers / batch 3 loaded on other topologies
    def old(**kw):
        return make_planner(L, seed=7, num_workers=2, batch_size=3, episode_pool_size=2, **kw)

    st = old().state_dict(samples_consumed=6)
    p = make_planner(L, seed=7, num_workers=3, batch_size=2, episode_pool_size=2)
    p.load_state_dict(st)
    for w in (0, 1, 2):
        out[f"elastic/workers3/worker{w}"] = _anchors(p, w, 3)
    for r in (0, 1):
        p = make_planner(L, seed=7, num_workers=1, batch_size=1, world_size=2, rank=r)
        p.load_state_dict(st)
        out[f"elastic/world2/rank{r}"] = _anchors(p, 0, 1)
    st = old(repeat=True).state_dict(samples_consumed=9)
    p = make_planner(L, seed=7, num_workers=0, batch_size=2, episode_pool_size=3, repeat=True)
    p.load_state_dict(st)
    out["elastic/repeat/in_process"] = _anchors(p, None, 0, 40)
    # resume inside partitions: the same topology, and another one
    st = make_partition_planner(L, partitions=3, num_workers=2, batch_size=2, episode_pool_size=2, seed=9).state_dict(
        samples_consumed=4
    )
    for w in (0, 1):
        p = make_partition_planner(L, partitions=3, num_workers=2, batch_size=2, episode_pool_size=2, seed=9)
        p.load_state_dict(st)
        out[f"partitions/resume4/worker{w}"] = _anchors(p, w, 2)
    p = make_partition_planner(L, partitions=3, num_workers=0, batch_size=1, episode_pool_size=2, seed=9)
    p.load_state_dict(st)
    out["partitions/elastic/in_process"] = _anchors(p, None, 0)
    # equalize: every rank stops after the smallest rank's batch count
    for r in (0, 1, 2):
        p = make_planner(L, seed=3, num_workers=2, batch_size=4, world_size=3, rank=r, equalize="drop")
        for w in (0, 1):
            out[f"equalize/rank{r}/worker{w}"] = _anchors(p, w, 2)

    # a mixture's resume: the same topology, and another one
    def mix(nw):
        ps = [make_planner(d, seed=11 + i, num_workers=nw, episode_pool_size=2) for i, d in enumerate((L, M))]
        return make_mixture(ps, [2, 1], [0, 100], seed=5, batch_size=3, repeat=False, mixture=mixture)

    st = mix(2).state_dict(samples_consumed=9)
    for w in (0, 1):
        mp = mix(2)
        mp.load_state_dict(st)
        out[f"mixture/resume9/worker{w}"] = _anchors(mp, w, 2)
    mp = mix(0)
    mp.load_state_dict(st)
    out["mixture/elastic/in_process"] = _anchors(mp, None, 0)
    return out


#: "episode:frame" anchors in serving order
GOLDEN = {
    "remaining/epoch0/worker0": "7:0 4:4 7:2 4:3 4:5 7:1 4:1 0:0 0:1 4:0 0:2 4:2",
    "remaining/epoch0/worker1": "1:4 1:3 5:0 1:1 1:0 1:2 3:1 3:3 3:2 2:1 3:0 2:0",
    "remaining/epoch1/worker0": "7:0 4:1 7:2 4:0 4:2 4:4 4:3 7:1 0:1 0:2 4:5 0:0",
    "remaining/epoch1/worker1": "3:3 1:1 1:3 1:4 3:1 1:0 1:2 3:0 3:2 2:0 2:1 5:0",
    "remaining/budget/in_process": "7:0 7:2 7:1 2:0 2:1 0:2 0:1 0:0 3:0 3:1 3:2 5:0 1:3 1:4 1:1 1:2 1:0 3:3 4:2 4:0 4:5 4:3 4:1 4:4",
    "remaining/repeat/in_process": "2:0 2:1 0:1 0:0 0:2 4:0 4:3 5:0 4:2 3:1 3:0 3:3 3:2 7:2 4:5 7:0 4:1 7:1 1:4 1:3 1:1 4:4 1:0 1:2 7:2 2:0 7:1 7:0 0:1 2:1 1:1 0:0 1:0 1:3 1:2 0:2 3:3 3:2 1:4 4:1 4:5 3:0 4:0 4:2 4:3 3:1 5:0 4:4 1:0 3:1 1:3 1:4 1:1 3:2 3:3 3:0 2:0 1:2 0:0 2:1",
    "remaining/resume6/worker0": "4:3 4:5 7:1 4:1 0:0 0:1 4:0 0:2 4:2",
    "remaining/resume6/worker1": "1:1 1:0 1:2 3:1 3:3 3:2 2:1 3:0 2:0",
    "round_robin/epoch0/worker0": "7:2 4:1 4:4 7:1 7:0 4:0 4:2 0:0 4:5 0:1 4:3 0:2",
    "round_robin/epoch0/worker1": "5:0 1:4 2:0 1:2 2:1 1:0 3:1 1:3 3:3 1:1 3:0 3:2",
    "round_robin/epoch1/worker0": "7:2 0:1 7:0 0:0 0:2 7:1 4:0 4:2 4:4 4:1 4:5 4:3",
    "round_robin/epoch1/worker1": "5:0 3:3 1:2 3:2 1:4 3:0 1:0 3:1 2:0 1:3 2:1 1:1",
    "round_robin/budget/in_process": "1:3 1:1 1:2 1:0 1:4 2:0 2:1 3:0 4:2 0:0 0:1 4:0 3:1 4:5 0:2 3:3 4:3 3:2 4:4 7:2 7:1 4:1 7:0 5:0",
    "round_robin/repeat/in_process": "7:0 3:2 7:1 3:3 7:2 3:1 2:1 3:0 0:1 2:0 1:3 0:2 0:0 1:0 5:0 1:2 4:4 1:1 4:0 1:4 4:2 4:3 4:1 4:5 4:0 1:2 1:4 4:2 4:1 1:1 1:0 4:5 4:3 1:3 4:4 7:2 5:0 7:1 7:0 2:1 3:0 2:0 3:2 0:2 3:1 0:1 3:3 0:0 4:5 0:1 0:2 4:1 4:0 0:0 5:0 4:4 3:3 4:2 3:1 4:3",
    "round_robin/resume6/worker0": "7:1 7:0 4:0 4:2 0:0 4:5 0:1 4:3 0:2",
    "round_robin/resume6/worker1": "1:2 2:1 1:0 3:1 1:3 3:3 1:1 3:0 3:2",
    "sequential/epoch0/worker0": "0:0 0:1 0:2 4:0 4:1 4:2 4:3 4:4 4:5 7:0 7:1 7:2",
    "sequential/epoch0/worker1": "1:0 1:1 1:2 1:3 1:4 2:0 2:1 3:0 3:1 3:2 3:3 5:0",
    "sequential/epoch1/worker0": "0:0 0:1 0:2 4:0 4:1 4:2 4:3 4:4 4:5 7:0 7:1 7:2",
    "sequential/epoch1/worker1": "1:0 1:1 1:2 1:3 1:4 2:0 2:1 3:0 3:1 3:2 3:3 5:0",
    "sequential/budget/in_process": "0:0 0:1 0:2 1:0 1:1 1:2 1:3 1:4 2:0 2:1 3:0 3:1 3:2 3:3 4:0 4:1 4:2 4:3 4:4 4:5 5:0 7:0 7:1 7:2",
    "sequential/repeat/in_process": "0:0 0:1 0:2 1:0 1:1 1:2 1:3 1:4 2:0 2:1 3:0 3:1 3:2 3:3 4:0 4:1 4:2 4:3 4:4 4:5 5:0 7:0 7:1 7:2 0:0 0:1 0:2 1:0 1:1 1:2 1:3 1:4 2:0 2:1 3:0 3:1 3:2 3:3 4:0 4:1 4:2 4:3 4:4 4:5 5:0 7:0 7:1 7:2 0:0 0:1 0:2 1:0 1:1 1:2 1:3 1:4 2:0 2:1 3:0 3:1",
    "sequential/resume6/worker0": "4:0 4:1 4:2 4:3 4:4 4:5 7:0 7:1 7:2",
    "sequential/resume6/worker1": "1:3 1:4 2:0 2:1 3:0 3:1 3:2 3:3 5:0",
    "ranks/rank0": "7:1 7:0 0:1 7:2 4:0 0:0 4:5 4:1 4:4 4:2 4:3 0:2",
    "ranks/rank1": "1:0 1:1 1:3 3:3 3:0 3:1 1:4 1:2 5:0 2:0 2:1 3:2",
    "mixture/in_process": "2:0 0:0 102:0 101:1 102:1 0:2 0:1 2:1 102:4 3:2 5:0 101:0 7:1 3:3 3:1 7:0 3:0 100:3 1:1 1:2 100:0 1:4 1:3 1:0 4:0 100:2 4:4 4:1 4:2 4:5 100:1 4:3 102:2 7:2 102:3",
    "partitions/worker0": "4:5 4:3 4:0 4:1 2:0 4:4 4:2 2:1 3:0 3:2 3:3 5:0 7:1 7:2 3:1 7:0",
    "partitions/worker1": "0:1 0:2 1:1 1:3 1:4 0:0 1:2 1:0",
    "elastic/workers3/worker0": "4:0 4:5 4:3 7:1 4:1 4:2",
    "elastic/workers3/worker1": "3:1 2:1 2:0 3:0 3:3 3:2",
    "elastic/workers3/worker2": "1:2 0:2 0:1 1:1 1:0 0:0",
    "elastic/world2/rank0": "7:1 0:0 0:1 4:5 4:0 4:1 4:3 0:2 4:2",
    "elastic/world2/rank1": "1:1 2:0 3:1 3:0 1:0 3:3 3:2 2:1 1:2",
    "elastic/repeat/in_process": "3:1 1:2 1:1 3:0 3:3 1:0 2:1 2:0 3:2 4:0 4:2 4:1 0:1 0:2 0:0 0:2 3:0 0:1 1:4 1:1 1:3 1:2 3:1 3:3 0:0 2:0 1:0 4:2 2:1 4:4 4:5 4:0 3:2 4:3 7:0 4:1 7:1 5:0 7:2 3:1",
    "partitions/resume4/worker0": "4:0 4:1 2:0 4:4 4:2 2:1 3:0 3:2 3:3 5:0 7:1 7:2 3:1 7:0",
    "partitions/resume4/worker1": "1:1 1:3 1:4 0:0 1:2 1:0",
    "partitions/elastic/in_process": "4:0 4:1 2:0 4:4 4:2 2:1 1:1 1:3 1:4 0:0 1:2 1:0 3:0 3:2 3:3 5:0 7:1 7:2 3:1 7:0",
    "equalize/rank0/worker0": "4:0 4:5 4:1 4:4",
    "equalize/rank0/worker1": "2:1 2:0",
    "equalize/rank1/worker0": "1:1 1:4 1:0 1:3",
    "equalize/rank1/worker1": "7:0 7:1 7:2",
    "equalize/rank2/worker0": "3:0 3:2 3:1 3:3",
    "equalize/rank2/worker1": "0:2 5:0 0:0 0:1",
    "mixture/resume9/worker0": "101:1 100:1 2:1 3:3 3:1 1:4 1:1 1:2 1:0 100:0 100:2 1:3 5:0 2:0 101:0",
    "mixture/resume9/worker1": "0:0 4:4 102:1 102:2 4:3 4:2 102:3 4:5 7:0 4:0 4:1",
    "mixture/elastic/in_process": "0:0 102:4 100:1 3:1 102:2 3:3 100:3 3:2 5:0 2:0 102:0 100:0 3:0 4:3 4:2 101:1 1:0 1:2 1:1 101:0 4:4 1:3 4:0 7:1 7:2 4:5",
}


@pytest.fixture(scope="module")
def served() -> dict[str, list[tuple[int, int]]]:
    return _cases()


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_served_anchors_equal_the_recorded_order(served, case):
    want = [tuple(int(x) for x in a.split(":")) for a in GOLDEN[case].split()]
    assert served[case] == want


def test_every_case_is_recorded(served):
    assert sorted(served) == sorted(GOLDEN)


if __name__ == "__main__":  # re-record (only for a deliberate change of the order)
    for k, v in _cases().items():
        print(f'    "{k}": "{" ".join(f"{e}:{f}" for e, f in v)}",')
