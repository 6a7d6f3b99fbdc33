"""Elastic resume: which samples of the epoch in progress a checkpointed run had not consumed.

A state written by rank 0 alone (:class:`~lerobotstream.planner.StreamState`) fixes the old run's
whole plan: its rank and worker shards, every worker's seeded pool, and — because DDP ranks step in
lockstep — every rank's batch count (rank 0's). So for every old (rank, logical worker) the number
of anchors it gave follows from counts (:func:`~lerobotstream.planner.replay_turns` over that
rank's worker limits), and replaying that worker's pool to that count in the C core
(``EpisodePool.skip``, no I/O, no decoding) says exactly which (episode, frame) anchors were
consumed: episodes it finished, episodes it never admitted (untouched, whole) and, for the episodes
resident at that point, the frames not yet drawn (with ``remaining``/``round_robin`` draws a seeded
subset, not a prefix). :func:`plan_remainder` collects that over every old rank and worker into a
:class:`Remainder`; the new run's planner then plans the remainder on its own topology
(``Planner._remainder_planner``).

Cost (``tools/scale_sim.py --elastic``): one pool replay per old worker, O(samples consumed) draws
in C in total, memory O(episodes) plus the resident episodes' remaining frames. It is computed
once where the state is loaded (the training process): :meth:`Remainder.for_rank` keeps the
frames of started episodes only for the loading rank's episodes, and the dataset ships that to its
DataLoader workers (pickled with it, O(episodes)); a worker's planner takes it when its ``key``
matches (``shipped``), and computes the remainder itself (cached per process) otherwise.

``repeat=True``: every old worker rolls into its next epoch on its own, so the epoch in progress is
the earliest epoch (or remainder pass) any old worker was still in; workers already past it
contribute nothing (their samples of the next epoch are drawn again there).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass, field, replace
import numpy as np

from lerobotstream.errors import ResumeStateError
from lerobotstream.planner._state import StreamState, replay_turns

__all__ = ["Remainder", "plan_remainder", "pass_counts", "cached", "TAG_ELASTIC"]

TAG_ELASTIC = 0x454C5354  # "ELST"
_CACHE: OrderedDict[str, Remainder] = OrderedDict()
_CACHE_SIZE = 4


@dataclass
class Remainder:
    """The unconsumed samples of one epoch (or remainder pass) of a checkpointed run.

    Fields:
        epoch (int): the epoch they belong to (its label; the new run continues with ``epoch + 1``).
        episode_indices (np.ndarray): int64 (E,) episodes with frames left, ascending.
        lengths (np.ndarray): int64 (E,) frames left per episode (>= 1).
        frames (dict[int, np.ndarray]): episodes partly consumed → their frames left (int64,
            ascending, ``len == lengths``); an episode not in it is left whole (frames ``0..n-1``).
        consumed (int): samples of the pass the old run consumed, all ranks together.
        depth (int): elastic resumes this remainder went through (1: from a plain epoch).
        key (str): what it is the remainder of (a digest of the old state and the episodes).
        rank (int | None): ``frames`` holds only the started episodes new rank ``rank`` plays
            (:meth:`for_rank`); None: every started episode.
        started (int): episodes partly consumed, all ranks (-1: ``len(frames)``).
    """

    epoch: int
    episode_indices: np.ndarray
    lengths: np.ndarray
    frames: dict[int, np.ndarray] = field(default_factory=dict)
    consumed: int = 0
    depth: int = 1
    key: str = ""
    rank: int | None = None
    started: int = -1

    @property
    def total(self) -> int:
        """Frames left (samples the remainder pass gives over all new ranks)."""
        return int(self.lengths.sum())

    @property
    def episodes_started(self) -> int:
        """Episodes partly consumed by the old run, all ranks."""
        return len(self.frames) if self.started < 0 else self.started

    def for_rank(self, rank: int, episodes: np.ndarray) -> Remainder:
        """This remainder with the frames of started episodes kept only for ``episodes`` (those
        new rank ``rank`` plays): what that rank's DataLoader workers need, O(episodes) in memory."""
        keep = set(np.asarray(episodes).tolist())
        return replace(self, frames={e: f for e, f in self.frames.items() if e in keep}, rank=int(rank),
                       started=self.episodes_started)


def rank_batches(limits: list, batch_size: int, samples: int, drop_last: bool) -> tuple[list[int], int, bool]:
    """(samples per worker, batches, rank exhausted) of rank 0 after ``samples`` samples."""
    given, nxt, taken = replay_turns(limits, batch_size, samples=samples, drop_last=drop_last)
    if taken < 0:  # one worker: replay_turns does not count batches
        taken = -(-samples // batch_size)
    return given, taken, nxt is None


def rank_given(limits: list, batch_size: int, samples: int, batches: int, rank0_done: bool, drop_last: bool) -> list[int]:
    """Samples per worker of another rank after rank 0's ``batches`` (lockstep DDP steps)."""
    if len(limits) == 1 and not rank0_done:  # one stream: ranks consumed the same samples (maybe mid-batch)
        cap = limits[0]
        return [samples if cap is None else min(samples, cap)]
    return replay_turns(limits, batch_size, batches=batches, drop_last=drop_last)[0]


def plan_remainder(planner, state: StreamState, nbytes=None, shipped: Remainder | None = None) -> Remainder:
    """The samples of ``state``'s epoch in progress its run had not consumed, over all of its
    ranks and workers (see the module doc).

    Args:
        planner: a planner over the same episodes (lengths) as the state's run.
        state: the old run's rank-0 state (its ``origin`` replayed first when it was itself
            playing a remainder).
        nbytes: ``episode_nbytes`` for the replay (default: the planner's).
        shipped: a remainder computed elsewhere (the training process), taken when its key is
            this state's and its frames are for ``planner.rank`` (or every rank).

    Raises:
        ResumeStateError: the state's consumed count does not fit its epoch (ends inside a batch
        with several workers, or exceeds it).
    """
    return cached([state.to_dict(), planner.episodes_digest], lambda: _compute(planner, state, nbytes),
                  None if shipped is None else [shipped], planner.rank)[0]


def cached(key_parts, compute, shipped=None, rank: int | None = None):
    """``compute()`` (a list of :class:`Remainder`, or one) once per key (a JSON-able description
    of the state and the episodes) per process: every planner a DataLoader worker builds for one
    stream shares its remainder. ``shipped`` (a list of remainders computed elsewhere) is taken
    instead when every one's key is this key and its frames are for ``rank`` or every rank; a
    list comes back."""
    key = json.dumps(key_parts, sort_keys=True, default=str)
    digest = hashlib.sha1(key.encode()).hexdigest()
    if shipped and all(r.key == digest and r.rank in (None, rank) for r in shipped):
        return list(shipped)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    out = compute()
    out = [out] if isinstance(out, Remainder) else list(out)
    for r in out:
        r.key = digest
    _CACHE[key] = out
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return out


class Collect:
    """Frames left per episode, gathered worker by worker."""

    def __init__(self) -> None:
        self.whole: list[np.ndarray] = []  # episode ids left whole (their pass frames)
        self.part: dict[int, np.ndarray] = {}

    def add_pool(self, pool) -> None:
        untouched, started, frames = pool.remaining_state()
        self.whole.append(untouched)
        for e, fr in zip(started.tolist(), frames):
            if len(fr):
                self.part[int(e)] = fr

    def add_all(self, plan) -> None:
        self.whole.append(plan.episode_indices)

    def build(self, epoch: int, src, depth: int) -> Remainder:
        """``src``: the planner of the pass (its own frame maps say what "whole" means)."""
        whole = np.concatenate(self.whole) if self.whole else np.empty(0, np.int64)
        lengths = dict(zip(src.episode_indices.tolist(), src.lengths.tolist()))
        frames: dict[int, np.ndarray] = {}
        for e in whole.tolist():
            m = src.frame_maps.get(e)
            if m is not None:
                frames[e] = m
        frames.update(self.part)
        lens = {e: lengths[e] for e in whole.tolist()}
        lens.update({e: len(fr) for e, fr in self.part.items()})
        idx = np.array(sorted(lens), dtype=np.int64)
        ln = np.array([lens[e] for e in idx.tolist()], dtype=np.int64)
        # episodes whose frames left are all of the episode's need no map
        full = dict(zip(src.full_indices.tolist(), src.full_lengths.tolist()))
        frames = {e: fr for e, fr in frames.items() if len(fr) != full[e]}
        return Remainder(int(epoch), idx, ln, frames, int(src.lengths.sum() - ln.sum()), depth)


def replay(col: Collect, plan, epoch: int, given: int) -> None:
    """Add what logical worker ``plan`` had left of ``epoch`` after ``given`` anchors."""
    if plan.num_frames == 0:
        return
    if given == 0:
        col.add_all(plan)
        return
    pool = plan.pool(epoch)
    pool.skip(given)
    col.add_pool(pool)


def pass_counts(old, rp) -> tuple[object, int, list[tuple[int, int, int | None]]]:
    """How far every stream of the checkpointed run got in the pass in progress, from counts.

    Args:
        old: the planner of rank 0 with the state's settings and position (``_like``).
        rp: its remainder planner when the state was inside a remainder, else None.

    Returns:
        (the planner of the pass in progress, its epoch, ``[(rank, logical worker, anchors of the
        pass it gave)]``); with ``repeat=True`` the pass is the earliest any stream was still in,
        and a stream already past it gives None (its share of the pass is consumed).

    Raises:
        ResumeStateError: the count does not fit (ends inside a batch, exceeds the epoch), or
        every old worker is idle.
    """
    B, dl = old.batch_size, old.drop_last
    if not old.repeat:
        p = old._pass()  # the plain epoch, the old remainder, or the plain epochs after it
        epoch, s = p.position()
        given0, b, done = rank_batches(p.worker_epoch_limits(0), B, s, dl)
        out = []
        for r in range(p.world_size):
            given = given0 if r == 0 else rank_given(p.worker_epoch_limits(r), B, s, b, done, dl)
            out += [(r, w, g) for w, g in enumerate(given)]
        return p, epoch, out
    # endless: per worker its share of the old remainder (when the old run played one), then its epochs
    s = old.samples_consumed
    chains = []
    for r in range(old.world_size):
        f = old._worker_frames(r)
        rf = rp._worker_frames(r) if rp is not None else [0] * len(f)
        chains.append(([None if fw else rw for fw, rw in zip(f, rf)], f, rf))
    passes = []  # (pass, rank, worker, anchors of that pass given): pass 0 = the old remainder
    given0, b, done = rank_batches(chains[0][0], B, s, dl)
    for r, (limits, f, rf) in enumerate(chains):
        given = given0 if r == 0 else rank_given(limits, B, s, b, done, dl)
        for w, g in enumerate(given):
            if rp is not None and g < rf[w]:
                passes.append((0, r, w, g))
                continue
            g -= rf[w]
            if f[w]:
                passes.append((1 + g // f[w], r, w, g % f[w]))
    if not passes:
        raise ResumeStateError("the checkpointed stream has no samples left (every worker is idle)")
    pmin = min(x[0] for x in passes)
    if rp is not None and pmin == 0:
        src, epoch = rp, rp.epoch
    else:
        src = old._plain()
        epoch = (rp.epoch if rp is not None else old.epoch - 1) + pmin
    return src, epoch, [(r, w, g if k == pmin else None) for k, r, w, g in passes]


def _compute(planner, st: StreamState, nbytes) -> Remainder:
    old = planner._like(st, nbytes)
    rp = old._remainder_planner() if old._elastic_active() else None
    src, epoch, counts = pass_counts(old, rp)
    col = Collect()
    for r, w, g in counts:
        if g is not None:
            replay(col, src._plan_for(r, w), epoch, g)
    return col.build(epoch, src, 1 + rp.remainder.depth if src is rp else 1)
