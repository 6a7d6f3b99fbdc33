"""Weighted mixtures of several datasets: one stream per worker over every dataset's pools.

A mixture keeps one :class:`~lerobotstream.planner.Planner` per dataset (its own rank and
worker shards, pools, byte-budget share and seeds) and adds, per worker, a seeded **mix
sequence** that says which dataset gives each next sample:

* **Blocks.** Positions are grouped in blocks of ``K`` samples. Up to the end of block ``b``,
  dataset ``d`` (other than the heaviest one) has given exactly ``floor(w_d * b * K)`` samples
  (integer weights, exact arithmetic); the heaviest dataset takes the rest of each block. Inside a
  block the order is a seeded permutation. So the share of every dataset follows its weight to
  within one sample per block in every prefix, in every rank and worker, and the count of each
  dataset at any position is computed in O(log) without replaying the stream (resume).
* **Phases** (finite mixtures, ``repeat=False``): when a dataset has given every frame of its
  worker shard it leaves the mixture; the others continue with their weights renormalised (a new
  phase, its own seeded blocks). One pass therefore visits every selected frame of every dataset
  exactly once; the weights only shape the order.
* **Endless** (``repeat=True``): each dataset is its own endless chain of exact-coverage epochs
  (its pools roll over on their own); the weights set the rates.

:class:`MixedPool` presents the datasets' pools to the worker pipeline as one pool over **global
episode ids** (``offset[d] + episode_index``): its admissions and evictions are the datasets'
own, moved to the mixture's sample positions, so the pipeline, byte cache and decoders serve the
whole mixture. Resident bytes stay within the worker's budget because each dataset's pool keeps
to its own share of it (the shares sum to the budget).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from lerobotstream import constants
from lerobotstream.errors import naming
from lerobotstream.planner import _seeds
from lerobotstream.planner._base import PlannerBase, WorkerStart
from lerobotstream.planner._planner import Planner, WorkerPlan
from lerobotstream.planner._pool import EpisodePool, PoolEvent
from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._state import StreamState, episode_selection_diffs
from lerobotstream.planner._mixseq import TAG_MIXTURE, WEIGHT_SCALE, MixSequence, _Phases, integer_weights, mixture_shares
from lerobotstream.planner._mixelastic import plan_mixture_remainder

__all__ = ["MixSequence", "MixedPool", "MixturePlanner", "integer_weights", "mixture_shares"]

GIB = 1 << 30
_SEED_RULE_KEY = "seed_rule"  # a mixture of one dataset's state records that the dataset used the seed itself
_BUDGET_KEY = "byte_budget_gb"  # in the state's mixture record (the exact option an elastic replay rebuilds from)


def _no_nbytes(episode_index: int) -> int:
    """Stand-in size for planners that only compute states (never build a worker plan)."""
    raise AssertionError("a state-only planner must not build worker plans")


class _DatasetStream:
    """One dataset's anchors in one worker: its pools (``plan.iter_pools``), chained over epochs
    when endless (an endless elastic remainder: its share of the remainder, then plain epochs)."""

    def __init__(self, plan: WorkerPlan, offset: int, epoch: int, start: int, repeat: bool) -> None:
        self.plan, self.offset, self.repeat = plan, int(offset), bool(repeat)
        self.pools = plan.iter_pools(epoch, start, repeat=repeat)  # the first one skipped to start
        self.pool: EpisodePool | None = next(self.pools, None)
        if self.pool is not None:
            self.pool.drain_events()

    def resident(self) -> np.ndarray:
        return np.empty(0, np.int64) if self.pool is None else self.pool.resident() + self.offset

    def frontier(self, k: int) -> np.ndarray:
        return np.empty(0, np.int64) if self.pool is None else self.pool.frontier(k) + self.offset

    def take(self, count: int) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str, int]]]:
        """``count`` anchors (global episode ids, frames) and their events as ``(j, kind, global
        episode)``: ``j`` = anchors of this call before the event (an admission at j is drawn from
        anchor j on; an eviction at j follows anchor j-1)."""
        eps, frs, evs = [], [], []
        got = 0
        while got < count and self.pool is not None:
            q0 = self.pool.emitted
            e, f = self.pool.next_anchors(count - got)
            evs += [(got + ev.position - q0, ev.kind, ev.episode_index + self.offset)
                    for ev in self.pool.drain_events()]
            eps.append(e)
            frs.append(f)
            got += len(e)
            if got < count:
                pool = next(self.pools, None)
                if pool is None:
                    raise AssertionError("a dataset stream was asked past its end")
                self.pool = pool
                self.pool.drain_events()
                evs += [(got, "admit", int(ep) + self.offset) for ep in self.pool.resident().tolist()]
        ep = np.concatenate(eps) + self.offset if eps else np.empty(0, np.int64)
        fr = np.concatenate(frs) if frs else np.empty(0, np.int64)
        return ep, fr, evs


class MixedPool:
    """The pool interface of :class:`~lerobotstream.planner.EpisodePool` over a mixture (global
    episode ids): one per finite epoch, or one endless pool with ``repeat=True``.

    Args:
        streams: one ``_DatasetStream`` per dataset, positioned at the worker's start.
        phases: the worker's mix sequence, positioned at the same start.
        emitted: samples of the worker's stream before the start (positions count from there).
    """

    def __init__(self, streams: list[_DatasetStream], phases: _Phases, emitted: int) -> None:
        self.streams, self.phases = streams, phases
        self._emitted = int(emitted)
        self._events: list[PoolEvent] = []

    @property
    def emitted(self) -> int:
        return self._emitted

    def resident(self) -> np.ndarray:
        parts = [s.resident() for s in self.streams]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def frontier(self, k: int) -> np.ndarray:
        """The next admissions of every dataset, interleaved (prefetch hints), int64 (<= k,)."""
        fronts = [s.frontier(k).tolist() for s in self.streams]
        out: list[int] = []
        for i in range(k):
            out += [f[i] for f in fronts if i < len(f)]
        return np.asarray(out[:k], dtype=np.int64)

    def drain_events(self) -> list[PoolEvent]:
        out, self._events = self._events, []
        return out

    def next_anchors(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``n`` anchors (global episode id int64 (k,), frame int64 (k,)); k < n at the end."""
        which = self.phases.take(int(n))
        k = len(which)
        out_ep = np.empty(k, np.int64)
        out_fr = np.empty(k, np.int64)
        events: list[tuple[int, int, str, int]] = []
        for d in np.unique(which).tolist():
            pos = np.flatnonzero(which == d)
            ep, fr, evs = self.streams[d].take(len(pos))
            out_ep[pos], out_fr[pos] = ep, fr
            for j, kind, gid in evs:
                if kind == "evict":
                    local = int(pos[j - 1]) + 1 if j > 0 else 0
                else:
                    local = int(pos[j]) if j < len(pos) else k
                events.append((local, 0 if kind == "evict" else 1, kind, gid))
        events.sort(key=lambda e: (e[0], e[1]))
        self._events += [PoolEvent(self._emitted + p, kind, gid) for p, _, kind, gid in events]
        self._emitted += k
        return out_ep, out_fr

    def skip(self, n: int) -> int:
        got = 0
        while got < n:
            ep, _ = self.next_anchors(min(4096, n - got))
            got += len(ep)
            if len(ep) == 0:
                break
        self._events = []
        return got


class MixturePlanner(PlannerBase):
    """The planner of one rank over a weighted mixture (pure: no I/O, no torch import).

    Args:
        planners: one :class:`Planner` per dataset, built with the same world, ``num_workers``
            and ``repeat`` (their byte budgets and pool sizes are the datasets' shares).
        weights: sampling weight per dataset (> 0 each), e.g. the frame counts.
        offsets: global episode id offset per dataset (``offsets[d] + episode_index``).
        seed, repeat, batch_size, drop_last, equalize: as :class:`Planner`'s.
        mixture: a JSON-able description recorded in the state and compared on resume (repo ids,
            weights).
        byte_budget, pool_size: the mixture's rank byte budget (bytes) and per-worker pool option
            (recorded in the state; each planner holds its share).

    Raises:
        ValueError: planners disagree on world size, rank, workers or ``repeat``; bad weights.
    """

    def __init__(self, planners: Sequence[Planner], weights: Sequence[float], offsets: Sequence[int], *,
                 seed: int, repeat: bool, batch_size: int = 1, drop_last: bool = False, equalize: str = "none",
                 mixture: dict[str, Any] | None = None, byte_budget: int | None = None,
                 pool_size: int | None = None) -> None:
        self.planners = list(planners)
        if not self.planners or len(weights) != len(self.planners) or len(offsets) != len(self.planners):
            raise ValueError("a mixture needs one weight and one offset per planner")
        p0 = self.planners[0]
        for p in self.planners:
            if (p.rank, p.world_size, p.num_workers, p.repeat) != (p0.rank, p0.world_size, p0.num_workers, repeat):
                raise ValueError("the planners of a mixture must share rank, world size, num_workers and repeat")
        self.weights = integer_weights(weights)
        self._float_weights = [float(x) for x in weights]  # as given: the shares are computed from them
        self.offsets = [int(o) for o in offsets]
        self.seed, self.repeat = int(seed), bool(repeat)
        self.batch_size, self.drop_last, self.equalize = int(batch_size), bool(drop_last), equalize
        self.rank, self.world_size = p0.rank, p0.world_size
        self.num_workers, self.num_shards = p0.num_workers, p0.num_shards
        self.mixture = dict(mixture or {})
        self.byte_budget, self.pool_size = byte_budget, pool_size
        self.names = [str(n) for n in self.mixture.get("repo_ids", range(len(self.planners)))]
        self.shares = mixture_shares(weights)
        self.byte_budget_gb: float | None = None
        self._fit: dict[int, np.ndarray] = {}
        self.num_active_workers = int(self._held(self.rank).any(axis=0).sum())
        self.epoch = 0
        self.samples_consumed = 0
        self._init_elastic()

    _kind = "mixture"

    @classmethod
    def for_datasets(cls, anchor_lengths: Sequence[Mapping[int, int]], weights: Sequence[float],
                     offsets: Sequence[int], *, seed: int, num_workers: int, pool_size: int | None,
                     byte_budget_gb: float, decoder_cache_size: int | None, strategy: str, repeat: bool,
                     batch_size: int | None, drop_last: bool,
                     episode_nbytes: Sequence[Callable[[int], int]] | None = None,
                     mixture: dict[str, Any] | None = None, rank: int | None = None,
                     world_size: int | None = None) -> MixturePlanner:
        """The mixture planner of one rank, with each dataset's :class:`Planner` built from the
        mixture's settings: its own seed (the mixture's seed and its position; a mixture of one
        dataset uses the seed itself, so it gives that dataset's own order), its share
        (:func:`mixture_shares`) of the rank's pool (per worker), byte budget (GiB) and open-decoder
        cap. Errors name the dataset (``mixture["repo_ids"]``) and its share.

        Raises:
            ShardingError, ValueError: as :class:`Planner` for one dataset (its name and share added).
        """
        shares = mixture_shares(weights)
        n = len(anchor_lengths)
        pool = pool_size or max(1, constants.DEFAULT_EPISODE_POOL_SIZE_PER_RANK // max(1, int(num_workers)))
        names = list((mixture or {}).get("repo_ids", range(n)))
        planners = []
        for d, (lengths, share) in enumerate(zip(anchor_lengths, shares)):
            seed_d = int(seed) if n == 1 else int(_seeds.seed_words(seed, TAG_MIXTURE, d)[0] >> 2)
            dec = None if decoder_cache_size is None else max(1, int(decoder_cache_size * share))
            nbytes = None if episode_nbytes is None else episode_nbytes[d]
            with naming(f"dataset {d} ({names[d]}; its share {share:.1%} of the mixture's "
                        f"byte_budget_gb={byte_budget_gb:g} and pool)"):
                planners.append(Planner(
                    lengths, seed=seed_d, rank=rank, world_size=world_size, num_workers=int(num_workers),
                    pool_size=max(1, round(pool * share)), strategy=strategy,
                    byte_budget=max(1, int(byte_budget_gb * share * GIB)), episode_nbytes=nbytes or _no_nbytes,
                    decoder_cache_size=dec, repeat=repeat, batch_size=1, drop_last=drop_last))
        out = cls(planners, weights, offsets, seed=seed, repeat=repeat, batch_size=int(batch_size or 1),
                  drop_last=drop_last, mixture=mixture, byte_budget=max(1, int(byte_budget_gb * GIB)),
                  pool_size=pool_size)
        out.byte_budget_gb = float(byte_budget_gb)
        return out

    # --- sizes ------------------------------------------------------------------------------------
    def dataset_worker_frames(self, rank: int | None = None) -> np.ndarray:
        """Frames per (dataset, logical worker) of ``rank`` in one epoch, int64 (N, workers)."""
        rank = self.rank if rank is None else rank
        return np.array([p._worker_frames(rank) for p in self.planners], dtype=np.int64)

    def _worker_frames(self, rank: int) -> list[int]:
        return [int(x) for x in self.dataset_worker_frames(rank).sum(axis=0)]

    def _chain_frames(self, rank: int) -> np.ndarray | None:
        """An endless remainder mixture's plain-epoch frames per (dataset, worker) after the
        remainder, int64 (N, workers); None for any other mixture."""
        if not self.repeat or all(p._chain is None for p in self.planners):
            return None
        return np.array([p._chain._worker_frames(rank) for p in self.planners], dtype=np.int64)

    def _held(self, rank: int) -> np.ndarray:
        """Which (dataset, worker) of ``rank`` give samples: frames in this pass or, endless
        remainder, in the plain epochs after it. bool (N, workers)."""
        held = self.dataset_worker_frames(rank) > 0
        after = self._chain_frames(rank)
        return held if after is None else held | (after > 0)

    def _endless_limits(self, rank: int) -> list[int | None]:
        first = self.dataset_worker_frames(rank).sum(axis=0)
        after = self._chain_frames(rank)
        if after is None:
            return [None if f else 0 for f in first.tolist()]
        # a worker with no plain-epoch frames stops after its share of the remainder
        return [None if a else int(f) for f, a in zip(first.tolist(), after.sum(axis=0).tolist())]

    def samples_per_rank(self) -> np.ndarray:
        """Frames per rank in one epoch (every dataset), int64 (world_size,)."""
        p = self._pass()
        if p is not self:
            return p.samples_per_rank()
        return np.sum([p.samples_per_rank() for p in self.planners], axis=0).astype(np.int64)

    # batches_per_rank, worker_epoch_limits, epoch_samples, position: BatchTurns'

    def worker_weights(self, worker: int, rank: int | None = None) -> list[int]:
        """Integer mixing weights of logical ``worker`` of this rank (or ``rank``) in an endless stream.

        Every worker gives the rank the same number of samples (the DataLoader takes batches in
        turn), so the rank's share of dataset d is the mean of its workers' shares. When every
        worker holds episodes of every dataset, each worker simply uses the weights. When a
        dataset has fewer episodes in the rank than there are workers, the workers that hold it
        draw it more often: the shares are fitted (iterative proportional fitting over the workers
        that hold each dataset) so that the rank's shares still follow the weights. Where that is
        impossible (a dataset held by k of N workers with a weight share above k/N) the fit gives
        it all of those workers' samples, and a warning says so once.
        """
        fits = self._fitted_shares(self.rank if rank is None else int(rank))
        return integer_weights(fits[worker]) if fits[worker].sum() > 0 else [0] * len(self.weights)

    def _fitted_shares(self, rank: int) -> np.ndarray:
        if rank in self._fit:
            return self._fit[rank]
        held = self._held(rank).T.astype(np.float64)  # (workers, datasets)
        active = held.sum(axis=1) > 0
        target = np.asarray(self.weights, dtype=np.float64) / sum(self.weights)
        fit = held * target
        if held[active].all():
            self._fit[rank] = fit
            return fit
        n = int(active.sum())
        want = target * n
        for _ in range(2000):
            rows = fit.sum(axis=1, keepdims=True)
            fit = np.divide(fit, rows, out=np.zeros_like(fit), where=rows > 0)
            cols = fit.sum(axis=0)
            scale = np.divide(want, cols, out=np.ones_like(want), where=cols > 0)
            fit = fit * scale
        rows = fit.sum(axis=1, keepdims=True)
        fit = np.divide(fit, rows, out=np.zeros_like(fit), where=rows > 0)
        got = fit.sum(axis=0) / max(1, n)
        if np.abs(got - target).max() > 0.01 and rank == self.rank:  # other ranks: an elastic replay
            import logging

            logging.getLogger("lerobotstream.planner").warning(
                "rank %d: the mixture's shares cannot follow the weights %s with %d DataLoader workers "
                "(dataset(s) %s hold episodes in too few workers); the rank draws %s. Lower num_workers or "
                "select more episodes of those datasets", rank, np.round(target, 4).tolist(), n,
                [self.mixture.get("repo_ids", list(range(len(target))))[d] for d in np.flatnonzero(got < target - 0.01)],
                np.round(got, 4).tolist())
        self._fit[rank] = fit
        return fit

    def _worker_phases(self, rank: int, worker: int, epoch: int, offset: int) -> _Phases | None:
        """The mix sequence of logical ``worker`` of ``rank`` in ``epoch``, after ``offset`` samples
        of its stream (None: the worker gives nothing). Finite: the weights of the datasets it
        holds, each capped at its frames (phases). Endless: the fitted weights
        (:meth:`worker_weights`), no caps — but a dataset of an endless remainder that the worker
        holds only in the remainder leaves when its share is done."""
        frames = [int(x) for x in self.dataset_worker_frames(rank)[:, worker]]
        if self.repeat:
            if not self._held(rank)[:, worker].any():
                return None
            weights = self.worker_weights(worker, rank)
            after = self._chain_frames(rank)
            caps = [None if after is None or after[d, worker] else f for d, f in enumerate(frames)]
        else:
            weights = [wt if f else 0 for wt, f in zip(self.weights, frames)]
            caps = frames
        if not any(weights):
            return None
        return _Phases(weights, caps, [self.seed, epoch, rank, self.world_size, worker, self.num_shards], offset)

    # --- resume and the pipeline's interface (rules shared with one dataset: PlannerBase) --------
    def _owns(self) -> str:
        return "episodes of the mixture's datasets"

    def _stream_state(self, samples: int) -> StreamState:
        p0 = self.planners[0]
        digest = "|".join(p.episodes_digest for p in self.planners)
        extra = {} if self.byte_budget_gb is None else {"byte_budget_gb": self.byte_budget_gb}
        if len(self.planners) == 1:  # its dataset plays under the seed itself (for_datasets): an older
            extra[_SEED_RULE_KEY] = "dataset"  # mixture-of-one state (derived seed) is another order: refused
        return StreamState(self.seed, self.epoch, int(samples), self.batch_size, self.world_size, self.num_workers,
                           p0.strategy, self.pool_size, self.byte_budget,
                           self.repeat, self.drop_last, self.equalize, digest,
                           mixture={**self.mixture, "integer_weights": list(self.weights), **extra},
                           origin=self.origin if self._elastic_active() else None)

    def _identity_diffs(self, st: StreamState, mine: StreamState) -> list[str]:
        if st.mixture is None:
            raise ResumeStateError(
                "the resume state was written by a single-dataset stream but this is a mixture of "
                f"{len(self.planners)} datasets ({self.mixture.get('repo_ids')}); sample-exact resume "
                "needs the same mixture. Start a new run from the policy weights.")
        diffs = [f"mixture {key}: checkpoint {st.mixture.get(key)!r}, now {mine.mixture.get(key)!r}"
                 for key in sorted((set(st.mixture) | set(mine.mixture)) - {_BUDGET_KEY})
                 if st.mixture.get(key) != mine.mixture.get(key)]
        return diffs or episode_selection_diffs(st, mine)

    # --- elastic resume (planner/_mixelastic.py: the old run's remainder per dataset) ---------------
    def _like(self, st: StreamState, nbytes: Sequence[Callable[[int], int]] | None = None) -> MixturePlanner:
        """The mixture planner of rank 0 with ``st``'s settings and position (same datasets)."""
        gb = (st.mixture or {}).get(_BUDGET_KEY)
        if gb is None:  # states written before the option was recorded
            gb = self.byte_budget_gb if st.byte_budget == self.byte_budget else st.byte_budget / GIB
        nb = list(nbytes) if nbytes else [p.episode_nbytes for p in self.planners]
        out = MixturePlanner.for_datasets(
            [dict(zip(p.full_indices.tolist(), p.full_lengths.tolist())) for p in self.planners], self._float_weights,
            self.offsets, seed=st.seed, num_workers=st.num_workers, pool_size=st.pool_size, byte_budget_gb=gb,
            decoder_cache_size=None, strategy=st.strategy, repeat=st.repeat, batch_size=st.batch_size,
            drop_last=st.drop_last, episode_nbytes=nb, mixture=self.mixture, rank=0, world_size=st.world_size)
        out.epoch, out.samples_consumed = st.epoch, st.samples
        if st.origin is not None:
            out.origin, out.origin_epoch = st.origin, st.epoch
        out._replay_nbytes = nb
        return out

    def _remainder_planner(self) -> MixturePlanner:
        if self._rp is None:
            nb = self._replay_nbytes
            if nb is None and self.nbytes_provider is not None:
                nb = self.nbytes_provider()
            rems = plan_mixture_remainder(self, StreamState.from_dict(self.origin), nb,
                                          getattr(self, "shipped_remainders", None))
            seed = int(_seeds.seed_words(self.seed, TAG_MIXTURE, 0x454C5354, rems[0].epoch, rems[0].depth)[0] >> 2)
            rmp = MixturePlanner([p._planner_over(r) for p, r in zip(self.planners, rems)], self._float_weights,
                                 self.offsets, seed=seed, repeat=self.repeat, batch_size=self.batch_size,
                                 drop_last=self.drop_last, mixture=self.mixture, byte_budget=self.byte_budget,
                                 pool_size=self.pool_size)
            rmp.byte_budget_gb = self.byte_budget_gb
            rmp.epoch = rems[0].epoch
            rmp.remainders = rems
            self._rp = rmp
        return self._rp

    def rank_remainders(self) -> list[Any] | None:
        """As ``Planner.rank_remainders``, one per dataset."""
        if not self._elastic_active():
            return None
        rmp = self._remainder_planner()
        return [r.for_rank(self.rank, p.rank_episodes()) for r, p in zip(rmp.remainders, rmp.planners)]

    def remainder_info(self) -> dict[str, Any] | None:
        """As ``Planner.remainder_info``, summed over the datasets (None: a plain epoch)."""
        if not self._elastic_active():
            return None
        rmp = self._remainder_planner()
        rems = rmp.remainders
        return {"epoch": rems[0].epoch, "samples_left": sum(r.total for r in rems),
                "rank_samples": int(rmp.samples_per_rank()[self.rank]),
                "episodes_whole": sum(len(r.episode_indices) - r.episodes_started for r in rems),
                "episodes_started": sum(r.episodes_started for r in rems), "depth": rems[0].depth,
                "samples_left_per_dataset": [r.total for r in rems]}

    def worker_plans(self, start: WorkerStart) -> list[WorkerPlan]:
        """Each dataset's ``WorkerPlan`` of ``start.logical_worker`` (ByteBudgetError names the
        dataset and its share of the byte budget)."""
        p = self._pass()
        if p is not self:
            return p.worker_plans(start)
        plans = []
        for d, (p, share) in enumerate(zip(self.planners, self.shares)):
            budget = "" if self.byte_budget_gb is None else f"={self.byte_budget_gb:g}"
            where = f"dataset {d} ({self.names[d]}; its share {share:.1%} of the mixture's byte_budget_gb{budget})"
            with naming(where):
                plan = p.stream_plan(start.logical_worker)
            plan.where = where  # sizes on demand: a ByteBudgetError at admission names the dataset too
            plans.append(plan)
        return plans

    def worker_pools(self, start: WorkerStart, plans: Sequence[WorkerPlan]) -> Iterator[MixedPool]:
        """Mixed pools of logical worker ``start.logical_worker`` from ``start`` on: one per epoch
        (finite, only ``start.epoch``'s), or one endless pool (``repeat=True``).

        Args:
            plans: each dataset's ``WorkerPlan`` of that logical worker (built with the worker's
                ``episode_nbytes``).
        """
        p = self._pass()
        if p is not self:
            yield from p.worker_pools(start, plans)
            return
        phases = self._worker_phases(self.rank, start.logical_worker, start.epoch, start.offset)
        if phases is None:
            return
        counts = phases.consumed()
        streams = [_DatasetStream(plan, off, start.epoch, int(c), self.repeat)
                   for plan, off, c in zip(plans, self.offsets, counts)]
        yield MixedPool(streams, phases, start.offset)
