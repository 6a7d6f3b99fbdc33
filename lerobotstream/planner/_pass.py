"""One pass of a planner (pure): the streams' layouts on one topology, mixed per worker by the
seeded mix sequence (a plain epoch, or a checkpointed run's remainder replanned on this topology),
where a DataLoader worker starts in it, and what a checkpointed run left (:func:`old_run_remainders`:
DDP ranks step in lockstep, so every old (rank, worker)'s count follows from rank 0's through the
batch turns; each layout turns those counts into what is left).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._mixseq import MixSequence, integer_weights
from lerobotstream.planner._turns import replay_turns

__all__ = ["Pass", "WorkerStart", "old_run_remainders", "remainder_cache"]

logger = logging.getLogger("lerobotstream.planner")


#: Where a DataLoader worker's stream begins (``Planner.worker_start``): ``logical_worker`` (the
#: worker shard it plays), ``epoch`` (of its first anchor), ``offset`` (anchors of its stream already
#: consumed from ``epoch``'s start; endless: may span epochs), ``limit`` (anchors per epoch, finite
#: mode; None: all).
WorkerStart = namedtuple("WorkerStart", "logical_worker epoch offset limit")


class Pass:
    """What every rank and logical worker plays in one pass: one ``Layout`` per stream on ``topo``
    (a planner's resolved ``PlanSettings``), integer mixing ``weights`` and global episode
    ``offsets`` per stream, the workers' ``mix_seed``; ``remainders`` (per stream; None: a plain
    epoch), their ``stream_epochs``, ``epoch`` (the first stream's; None: a plain epoch) and ``depth``
    (elastic resumes gone through; 0: a plain epoch), ``chain`` (set on an endless remainder: the
    plain pass after it), ``names`` (messages)."""

    def __init__(
        self,
        layouts: Sequence[Any],
        weights: Sequence[int],
        offsets: Sequence[int],
        topo: Any,
        *,
        mix_seed: int,
        remainders: Sequence[Any] | None = None,
        names: Sequence[str] = (),
    ) -> None:
        self.layouts = list(layouts)
        self.weights = [int(w) for w in weights]
        self.offsets = [int(o) for o in offsets]
        self.topo, self.mix_seed = topo, int(mix_seed)
        self.remainders = None if remainders is None else list(remainders)
        self.chain: Pass | None = None
        self.names = list(names) or [str(d) for d in range(len(self.layouts))]
        self.stream_epochs = None if remainders is None else [int(r.epoch) for r in remainders]
        self.epoch = None if remainders is None else self.stream_epochs[0]
        self.depth = 0 if remainders is None else int(remainders[0].depth)
        self._fit: dict[int, np.ndarray] = {}
        self._bmin: int | None = None
        self._last: tuple[int, np.ndarray] | None = None

    # --- sizes --------------------------------------------------------------------------------------
    def dataset_worker_frames(self, rank: int | None = None) -> np.ndarray:
        """Anchors per (stream, logical worker) of ``rank`` in this pass, int64 (N, workers)."""
        rank = self.topo.rank if rank is None else rank
        if self._last is None or self._last[0] != rank:
            self._last = (rank, np.array([lay.worker_frames(rank) for lay in self.layouts], dtype=np.int64))
        return self._last[1].copy()

    def worker_frames(self, rank: int | None = None) -> list[int]:
        """Anchors per logical worker of ``rank`` in this pass (every stream)."""
        return [int(x) for x in self.dataset_worker_frames(rank).sum(axis=0)]

    def held(self, rank: int) -> np.ndarray:
        """Which (stream, worker) of ``rank`` give samples, here or in the epochs after (an endless
        remainder's chain, else this pass again), bool (N, workers)."""
        return (self.dataset_worker_frames(rank) > 0) | ((self.chain or self).dataset_worker_frames(rank) > 0)

    def samples_per_rank(self) -> np.ndarray:
        """Anchors per rank in this pass (every stream) before equalization, int64 (world_size,)."""
        return np.sum([lay.rank_frames() for lay in self.layouts], axis=0).astype(np.int64)

    def active_workers(self, rank: int) -> list[int]:
        """The logical workers of ``rank`` that hold anything, ascending."""
        return np.flatnonzero(self.held(rank).any(axis=0)).tolist()

    # --- the DataLoader's batch turns ----------------------------------------------------------------
    def batches_per_rank(self) -> np.ndarray:
        """DataLoader batches per rank in one finite pass before equalization, int64 (world_size,)."""
        topo, out = self.topo, []
        turns = {"drop_last": topo.drop_last, "one_stream": topo.num_shards == 1}
        for r in range(topo.world_size):
            fr = self.worker_frames(r)
            lim = [fr[w] for w in self.active_workers(r)]
            out.append(replay_turns(lim, topo.batch_size, batches=sum(lim) + 1, **turns)[2] if lim else 0)
        return np.array(out, dtype=np.int64)

    def turn_limits(self, rank: int | None = None) -> list[int | None]:
        """Anchors each logical worker of ``rank`` gives before it stops, as the batch turns see
        them: finite, in one pass after ``drop_last`` and ``equalize``; endless, None, or an endless
        remainder's share with no epoch after."""
        topo = self.topo
        rank = topo.rank if rank is None else rank
        if topo.repeat:
            first, after = self.dataset_worker_frames(rank).sum(axis=0), (self.chain or self).worker_frames(rank)
            return [None if a else int(f) for f, a in zip(first.tolist(), after)]
        fr = self.worker_frames(rank)
        if topo.drop_last:  # the DataLoader drops each worker's short last batch: never decode it
            fr = [f - f % topo.batch_size for f in fr]
        if topo.equalize == "none":
            return fr
        if self._bmin is None:  # every rank's limits need it: computed once
            self._bmin = int(self.batches_per_rank().min())
        return replay_turns(fr, topo.batch_size, batches=self._bmin, drop_last=topo.drop_last)[0]

    def epoch_samples(self) -> int:
        """Anchors this rank yields in one finite pass (after ``equalize``)."""
        return sum(self.turn_limits())

    def position(self, epoch: int, samples: int) -> tuple[int, int]:
        """``(epoch, samples)`` with whole finite passes rolled into the following epochs."""
        total = 0 if self.topo.repeat else self.epoch_samples()
        if total and samples >= total:
            return epoch + samples // total, samples % total
        return epoch, samples

    def worker_start(self, dl_worker_id: int | None, epoch: int, samples: int) -> WorkerStart:
        """Where DataLoader worker ``dl_worker_id`` (None in-process) starts after ``samples`` of the
        rank from ``epoch``'s start; it plays logical worker ``(p + next) mod N``.

        Raises:
            ResumeStateError: the count ends inside a batch (several workers) or exceeds the pass.
        """
        topo = self.topo
        limits = self.turn_limits(topo.rank)
        if topo.repeat and not any(x is None or x for x in limits):
            return WorkerStart(0, epoch, 0, None)
        epoch, samples = self.position(epoch, samples)
        given, nxt, _ = replay_turns(limits, topo.batch_size, samples=samples, drop_last=topo.drop_last)
        logical = ((0 if dl_worker_id is None else int(dl_worker_id)) + (nxt or 0)) % topo.num_shards
        return WorkerStart(logical, epoch, given[logical], None if topo.repeat else limits[logical])

    # --- the mix ------------------------------------------------------------------------------------
    def worker_weights(self, worker: int, rank: int | None = None) -> list[int]:
        """Integer mixing weights of logical ``worker`` of ``rank`` in an endless stream.

        The rank's share of stream d is the mean of its workers' shares (they give equal samples).
        Where a stream is held by fewer workers, the shares are fitted (iterative proportional
        fitting) so the rank's still follow the weights; where impossible (held by k of N workers
        with a share above k/N) those workers give it all their samples, and a warning says so.
        """
        rank = self.topo.rank if rank is None else int(rank)
        fit = self._fit.get(rank)
        if fit is None:
            held = self.held(rank).T.astype(np.float64)  # (workers, streams)
            active = held.sum(axis=1) > 0
            target = np.asarray(self.weights, dtype=np.float64) / sum(self.weights)
            fit = held * target
            if not held[active].all():
                n = int(active.sum())
                want = target * n
                for i in range(2001):  # rows to 1, then columns to the weights; rows last
                    rows = fit.sum(axis=1, keepdims=True)
                    fit = np.divide(fit, rows, out=np.zeros_like(fit), where=rows > 0)
                    if i < 2000:
                        cols = fit.sum(axis=0)
                        fit = fit * np.divide(want, cols, out=np.ones_like(want), where=cols > 0)
                got = fit.sum(axis=0) / max(1, n)
                if np.abs(got - target).max() > 0.01 and rank == self.topo.rank:  # other ranks: an elastic replay
                    logger.warning(
                        "rank %d: the mixture's shares cannot follow the weights %s with num_workers=%d "
                        "(dataset(s) %s hold episodes in too few workers); the rank draws %s. Lower num_workers "
                        "or select more episodes of those datasets",
                        rank,
                        np.round(target, 4).tolist(),
                        n,
                        [self.names[d] for d in np.flatnonzero(got < target - 0.01)],
                        np.round(got, 4).tolist(),
                    )
            self._fit[rank] = fit
        return integer_weights(fit[worker]) if fit[worker].sum() > 0 else [0] * len(self.weights)

    def phases(self, rank: int, worker: int, epoch: int, offset: int) -> MixSequence | None:
        """The mix sequence of logical ``worker`` of ``rank`` in ``epoch`` after ``offset`` samples
        (None: it gives nothing). Finite: the weights of the streams it holds, capped at their
        anchors. Endless: the fitted weights (:meth:`worker_weights`), capped only for a stream it
        holds in an endless remainder alone."""
        topo = self.topo
        frames = [int(x) for x in self.dataset_worker_frames(rank)[:, worker]]
        if topo.repeat:
            if not self.held(rank)[:, worker].any():
                return None
            weights = self.worker_weights(worker, rank)
            after = (self.chain or self).dataset_worker_frames(rank)
            caps = [None if after[d, worker] else f for d, f in enumerate(frames)]
        else:
            weights = [wt if f else 0 for wt, f in zip(self.weights, frames)]
            caps = frames
        if not any(weights):
            return None
        return MixSequence(
            weights, caps, [self.mix_seed, epoch, rank, topo.world_size, worker, topo.num_shards], offset
        )


# --- elastic resume: what a checkpointed run left ------------------------------------------------
def old_run_remainders(old: tuple[Pass, int, int], old_plain: Pass) -> list[Any]:
    """What the checkpointed run left of its pass in progress, one remainder per stream; ``old`` is
    its rank 0's ``(pass, epoch, samples)`` (``Planner.resolve``), ``old_plain`` its plain pass.
    Endless, each old worker's count runs through the old remainder's share (pass 0, if any), then
    the plain epochs after it (pass k >= 1): per stream the pass in progress is the earliest any old
    worker was still in.

    Raises:
        ResumeStateError: the count does not fit (ends inside a batch with several workers,
        exceeds the epoch), or an endless stream has no samples left (every worker idle).
    """
    current, epoch, samples = old
    topo, rp = current.topo, (current if current.remainders is not None else None)
    one = topo.num_shards == 1
    entries: list[list[tuple[int, int, int, int]]] = [[] for _ in current.layouts]  # (pass, rank, worker, given)
    for r in range(topo.world_size):  # rank 0 first: its count says how many batches every rank took
        ids = current.active_workers(r)
        if not ids and r:
            continue
        full = current.turn_limits(r)
        lim = [full[w] for w in ids]
        if r == 0:
            given, nxt, batches = replay_turns(
                lim, topo.batch_size, samples=samples, drop_last=topo.drop_last, one_stream=one
            )
            done = nxt is None
        elif len(lim) == 1 and one and not done:  # one stream: the same samples as rank 0 unless it ran out
            given = [samples if lim[0] is None else min(samples, lim[0])]
        else:  # DDP lockstep: as many batches as rank 0
            given = replay_turns(lim, topo.batch_size, batches=batches, drop_last=topo.drop_last, one_stream=one)[0]
        if topo.repeat:
            first, after = current.dataset_worker_frames(r), old_plain.dataset_worker_frames(r)
        for w, g in zip(ids, given):  # each stream's anchors among the worker's first g
            if len(current.layouts) == 1:
                counts = [g] if current.held(r)[0, w] else []
            else:
                phases = current.phases(r, w, epoch, g)
                counts = [] if phases is None else phases.consumed().tolist()
            for d, c in enumerate(counts):
                if not topo.repeat:
                    entries[d].append((0, r, w, c))
                    continue
                rf, f = (int(first[d, w]) if rp is not None else 0), int(after[d, w])
                if c < rf:  # pass 0: still in its share of the old remainder
                    entries[d].append((0, r, w, c))
                elif f:
                    entries[d].append((1 + (c - rf) // f, r, w, (c - rf) % f))
    out = []
    for d, es in enumerate(entries):
        if topo.repeat and not es:
            what = "the checkpointed stream" if len(entries) == 1 else f"dataset {d} of the checkpointed mixture"
            raise ResumeStateError(f"{what} has no samples left (every worker holding it is idle)")
        k = min((e[0] for e in es), default=0)
        if k == 0:
            lay, depth = current.layouts[d], 1 + current.depth
            label = current.stream_epochs[d] if topo.repeat else epoch
        else:
            lay, depth = old_plain.layouts[d], 1
            label = (rp.stream_epochs[d] if rp is not None else epoch - 1) + k
        counts = [(r, w, g if pas == k else None) for pas, r, w, g in es]
        out.append(lay.remainder(counts, label, depth))
    return out


_CACHE: OrderedDict[str, list[Any]] = OrderedDict()  # the last 4 keys' remainders


def remainder_cache(
    key_parts: Any, compute: Callable[[], list[Any]], shipped: Sequence[Any] | None, rank: int
) -> list[Any]:
    """``compute()`` once per key (JSON-able: the state and the streams) per process; ``shipped``
    (computed elsewhere) is taken instead when each one's key is this key and its rank ``rank`` or None."""
    key = json.dumps(key_parts, sort_keys=True, default=str)
    digest = hashlib.sha1(key.encode()).hexdigest()
    if shipped and all(r.key == digest and r.rank in (None, rank) for r in shipped):
        return list(shipped)
    if key not in _CACHE:
        _CACHE[key] = [replace(r, key=digest) for r in compute()]
        if len(_CACHE) > 4:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return _CACHE[key]
