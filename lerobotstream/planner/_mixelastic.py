"""Elastic resume of a mixture: per dataset, the samples of the old run's pass in progress that it
had not consumed (:func:`plan_mixture_remainder`; one dataset's rules: :mod:`._elastic`).

Each old (rank, logical worker) gave its anchors in the mixture's seeded dataset order (the
worker's ``_Phases``, from counts: ``MixturePlanner._worker_phases``), so the samples it gave
split into a count per dataset without replaying the stream; each dataset's pool of that worker
is then replayed to its own count in the C core.

* **Finite** (``repeat=False``): one pass of the mixture; every dataset's remainder belongs to
  that epoch.
* **Endless** (``repeat=True``): every dataset of every old worker chains its own exact-coverage
  epochs (after its share of an older remainder, when the old run was itself resumed
  elastically), so the pass in progress is **per dataset**: the earliest pass of that dataset any
  old worker was still in. Its unconsumed samples form that dataset's remainder (its own epoch
  label); samples that workers running ahead had already drawn from a later pass are drawn again
  there. The new run chains each dataset's remainder to its plain epochs and mixes them with the
  weights as rates (``MixturePlanner._remainder_planner``).
"""

from __future__ import annotations

from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._elastic import Collect, Remainder, cached, rank_batches, rank_given, replay
from lerobotstream.planner._state import StreamState

__all__ = ["plan_mixture_remainder"]


def plan_mixture_remainder(mix, state: StreamState, nbytes=None, shipped: list[Remainder] | None = None
                           ) -> list[Remainder]:
    """A mixture's :func:`~lerobotstream.planner._elastic.plan_remainder`: per dataset, the samples
    of ``state``'s pass in progress its run had not consumed (see the module doc).

    Args:
        mix: a ``MixturePlanner`` over the same datasets.
        state: the old run's rank-0 state.
        nbytes: per dataset, ``episode_nbytes`` for the replay (default: the planners').
        shipped: remainders computed elsewhere (``cached``: taken when they are this state's).

    Raises:
        ResumeStateError: the consumed count does not fit the state's epoch (finite), or the
        endless stream has no samples left.
    """
    compute = _endless if state.repeat else _finite
    return cached([state.to_dict(), [p.episodes_digest for p in mix.planners], "mixture"],
                  lambda: compute(mix._like(state, nbytes)), shipped, mix.rank)


def _finite(old) -> list[Remainder]:
    p = old._pass()
    rp = p if p is not old and not p._elastic_epoch_rolled else None
    epoch, s = p.position()
    cols = [Collect() for _ in p.planners]
    limits0 = p.worker_epoch_limits(0)
    given0, b, done = rank_batches(limits0, p.batch_size, s, p.drop_last)
    for r in range(p.world_size):
        given = given0 if r == 0 else rank_given(p.worker_epoch_limits(r), p.batch_size, s, b, done, p.drop_last)
        for w, g in enumerate(given):
            phases = p._worker_phases(r, w, epoch, g)
            if phases is None:
                continue
            for d, (dp, c) in enumerate(zip(p.planners, phases.consumed().tolist())):
                replay(cols[d], dp._plan_for(r, w), epoch, int(c))
    deeper = 1 + (rp.remainders[0].depth if rp is not None else 0)
    return [c.build(epoch, dp, deeper if rp is not None else 1) for c, dp in zip(cols, p.planners)]


def _endless(old) -> list[Remainder]:
    rp = old._remainder_planner() if old._elastic_active() else None
    src = rp if rp is not None else old  # what every old worker's stream starts with
    plain = old._plain()
    B, dl, s = old.batch_size, old.drop_last, old.samples_consumed
    n = len(old.planners)
    entries: list[list[tuple[int, int, int, int]]] = [[] for _ in range(n)]  # (pass, rank, worker, given)
    given0, b, done = rank_batches(src._endless_limits(0), B, s, dl)
    for r in range(old.world_size):
        given = given0 if r == 0 else rank_given(src._endless_limits(r), B, s, b, done, dl)
        first, after = src.dataset_worker_frames(r), plain.dataset_worker_frames(r)
        for w, g in enumerate(given):
            phases = src._worker_phases(r, w, src.epoch, g)
            if phases is None:
                continue
            for d, c in enumerate(phases.consumed().tolist()):
                rf, f = (int(first[d, w]) if rp is not None else 0), int(after[d, w])
                if c < rf:  # pass 0: still in its share of the old remainder
                    entries[d].append((0, r, w, c))
                elif f:
                    entries[d].append((1 + (c - rf) // f, r, w, (c - rf) % f))
    out = []
    deeper = 1 + (rp.remainders[0].depth if rp is not None else 0)
    for d, es in enumerate(entries):
        if not es:
            raise ResumeStateError(f"dataset {d} of the checkpointed mixture has no samples left (every worker "
                                   "holding it is idle)")
        k = min(e[0] for e in es)
        if k == 0:
            dp, epoch = rp.planners[d], rp.planners[d].epoch
        else:
            dp = plain.planners[d]
            epoch = (rp.planners[d].epoch if rp is not None else old.epoch - 1) + k
        col = Collect()
        for pas, r, w, g in es:
            if pas == k:
                replay(col, dp._plan_for(r, w), epoch, g)
        out.append(col.build(epoch, dp, deeper if k == 0 else 1))
    return out
