"""Planner: rank shards, worker shards, per-worker pools, finite/endless streams and resume."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from lerobotstream import constants
from lerobotstream.errors import ByteBudgetError, ShardingError
from lerobotstream.planner import _seeds
from lerobotstream.planner._pool import STRATEGY_IDS, EpisodePool
from lerobotstream.planner._poolcore import shuffled_order
from lerobotstream.planner._shards import lpt_shards
from lerobotstream.planner._base import PlannerBase, WorkerStart, read_pools
from lerobotstream.planner._state import StreamState, episode_selection_diffs, episodes_digest
from lerobotstream.planner._world import discover_world

TAG_ELASTIC = 0x454C5354  # "ELST": the remainder planner's seed

__all__ = ["BatchTurns", "Planner", "WorkerPlan", "WorkerStart"]

#: the shared rules' older name
BatchTurns = PlannerBase


def _share(total: int | None, n: int) -> int | None:
    return None if total is None else max(1, int(total) // n)


class WorkerPlan:
    """One worker shard of one rank: its episodes and its share of the rank's resources.

    Attributes:
        worker (int): logical worker id, ``0 <= worker < planner.num_shards``.
        episode_indices (np.ndarray): int64 dataset episode indices owned (sorted; empty = idle).
        lengths (np.ndarray): int64 frames per owned episode.
        nbytes (np.ndarray): int64 exact synthesized bytes per owned episode (zeros if no budget).
        num_frames (int): frames per epoch.
        pool_size (int): resident episodes at most.
        byte_budget (int | None): resident bytes at most (bytes).
        decoder_cache_size (int | None): the worker's share of the decoder LRU.
    """

    def __init__(self, planner: Planner, worker: int, positions: np.ndarray, rank: int | None = None):
        self._planner = planner
        self.worker = worker
        self.rank = planner.rank if rank is None else int(rank)
        self.episode_indices = planner.episode_indices[positions]
        self.lengths = planner.lengths[positions]
        self.num_frames = int(self.lengths.sum())
        maps = planner.frame_maps
        self.frame_maps = ({i: maps[e] for i, e in enumerate(self.episode_indices.tolist()) if e in maps}
                           if maps else {})
        n = planner._share_count(self.rank)
        self.pool_size = planner.pool_size if planner.pool_size is not None else max(
            1, constants.DEFAULT_EPISODE_POOL_SIZE_PER_RANK // n)
        self.byte_budget = _share(planner.byte_budget, n)
        self.decoder_cache_size = _share(planner.decoder_cache_size, n)
        self.nbytes = self._sizes(f"rank budget {planner.byte_budget} bytes split over {n} worker(s)",
                                  "or use fewer DataLoader workers")

    def _sizes(self, budget_is: str, advice: str) -> np.ndarray:
        """``episode_nbytes`` of this plan's episodes, int64 (zeros without a budget; -1 each with
        sizes on demand, ``EpisodeSizes``: filled in by :meth:`size_of` as admission reaches them).

        Raises:
            ByteBudgetError: a negative size, or an episode larger than the plan's whole budget
            (sizes given eagerly: every episode now).
        """
        planner = self._planner
        self._budget_is, self._advice = budget_is, advice
        #: what an error of this plan's sizes is prefixed with (a mixture names the dataset)
        self.where = getattr(self, "where", "")
        if planner.episode_nbytes is None or self.byte_budget is None:
            return np.zeros(len(self.episode_indices), dtype=np.int64)
        if getattr(planner.episode_nbytes, "on_demand", False):
            return np.full(len(self.episode_indices), -1, dtype=np.int64)
        nbytes = np.array([int(planner.episode_nbytes(int(e))) for e in self.episode_indices], dtype=np.int64)
        for local in np.flatnonzero((nbytes < 0) | (nbytes > self.byte_budget))[:1].tolist():
            self._check(local, int(nbytes[local]))
        return nbytes

    @property
    def sizes_on_demand(self) -> bool:
        """True when episode sizes are computed as admission reaches them (``EpisodeSizes``)."""
        return self.byte_budget is not None and getattr(self._planner.episode_nbytes, "on_demand", False)

    def size_of(self, local: int) -> int:
        """Bytes of this plan's local episode ``local`` (sizes on demand: the pools call it on
        admission); see :meth:`episode_size`."""
        return self.episode_size(int(self.episode_indices[local]))

    def episode_size(self, episode_index: int) -> int:
        """Bytes of episode ``episode_index`` of this plan, asked of the planner's sizes and
        checked against the plan's budget (what the byte cache reserves for it).

        Raises:
            ByteBudgetError: a negative size, or larger than the plan's whole byte budget.
        """
        e = int(episode_index)
        n = 0 if self.byte_budget is None or self._planner.episode_nbytes is None else int(
            self._planner.episode_nbytes(e))
        self._check_episode(e, n)
        return n

    def _check(self, local: int, n: int) -> None:
        self._check_episode(int(self.episode_indices[local]), n)

    def _check_episode(self, e: int, n: int) -> None:
        if n < 0:
            msg = f"episode {e} reports a negative byte size"
        elif n > self.byte_budget:
            msg = (f"episode {e} needs {n} bytes ({n / 2**30:.3f} GiB) of synthesized MP4 but worker "
                   f"{self.worker} of rank {self.rank} has a byte budget of {self.byte_budget} bytes "
                   f"({self.byte_budget / 2**30:.3f} GiB; {self._budget_is}); raise the byte "
                   f"budget (streaming_byte_budget_gb) {self._advice}")
        else:
            return
        if self.where:
            msg = f"{self.where}: {msg}"
        if n < 0:
            raise ByteBudgetError(msg, episode_index=e)
        raise ByteBudgetError(msg, episode_index=e, nbytes=n, byte_budget=self.byte_budget)

    def _words(self, epoch: int, tag: int) -> np.ndarray:
        p = self._planner
        return _seeds.seed_words(p.seed, epoch, self.rank, p.world_size, self.worker, p.num_shards,
                                 STRATEGY_IDS[p.strategy], self.pool_size,
                                 0 if self.byte_budget is None else self.byte_budget + 1, tag)

    def _order(self, epoch: int) -> np.ndarray:
        if self._planner.strategy == "sequential":  # ascending episode_index, every epoch alike
            return np.arange(len(self.lengths), dtype=np.int64)
        return shuffled_order(self._words(epoch, _seeds.TAG_ADMISSION), len(self.lengths))

    def admission_order(self, epoch: int) -> np.ndarray:
        """Dataset episode indices in this epoch's admission order (int64)."""
        return self.episode_indices[self._order(epoch)]

    def pool(self, epoch: int) -> EpisodePool:
        """A fresh exact-coverage pool for ``epoch`` (positioned at the epoch's first anchor)."""
        order = self._order(epoch)
        return EpisodePool(self.episode_indices, self.lengths, self.nbytes, order, self.pool_size,
                           self.byte_budget, self._planner.strategy, self._words(epoch, _seeds.TAG_DRAWS),
                           self.frame_maps, self.size_of if self.sizes_on_demand else None)

    def iter_pools(self, epoch: int = 0, start_offset: int = 0, *, repeat: bool = False) -> Iterator[EpisodePool]:
        """Pools positioned at the stream start: the first one already skipped ``offset`` anchors
        (its events drained), one per epoch; with ``repeat=False`` only ``epoch``'s.

        ``start_offset`` may exceed one epoch with ``repeat=True`` (it rolls into later epochs).
        The caller reads each pool to exhaustion, or to ``WorkerStart.limit`` anchors of the
        epoch (finite mode with ``equalize``/``drop_last``; ``pool.emitted`` counts from the epoch start).
        """
        if self.num_frames == 0:
            return
        if repeat:
            epoch, start_offset = epoch + start_offset // self.num_frames, start_offset % self.num_frames
        first = True
        while True:
            pool = self.pool(epoch)
            if first and start_offset:
                pool.skip(start_offset)
                pool.drain_events()
            first = False
            yield pool
            if not repeat:
                return
            epoch += 1

    def iter_anchors(self, epoch: int = 0, start_offset: int = 0, *, repeat: bool = False,
                     limit: int | None = None) -> Iterator[tuple[int, int]]:
        """Yields ``(episode_index, frame_index)`` from ``start_offset`` of ``epoch`` on.

        Finite (``repeat=False``): to the end of the epoch, or to ``limit`` anchors of the epoch.
        Endless (``repeat=True``): epoch after epoch (an idle worker yields nothing).
        """
        stop = self.num_frames if limit is None else min(limit, self.num_frames)
        yield from read_pools(self.iter_pools(epoch, start_offset, repeat=repeat), None if repeat else stop)


class Planner(PlannerBase):
    """Deterministic episode planner of one rank (pure: no I/O, no torch import).

    Args:
        episode_lengths: frames per selected episode: ``{episode_index: length}``, or a 1-D array
            (then ``episode_indices`` gives the indices, default ``0..E-1``). Episodes of length 0
            are dropped (never yielded).
        episode_indices: dataset episode indices matching an array ``episode_lengths``.
        seed: order seed (default ``constants.DEFAULT_SEED`` = 1000; None → 42).
        rank, world_size: default from torch.distributed, else RANK/WORLD_SIZE, else 0/1.
        num_workers: DataLoader workers per rank (0 = in the training process). ``max_num_shards``
            of the dataset maps here (lerobot-train passes max(1, num_workers); 0 and 1 give the
            same single shard).
        pool_size: per-worker pool size when given (each batch comes from one worker's pool);
            default: 32 per rank split over the workers used (``max(1, 32 // n)``).
        strategy: ``remaining`` (default), ``round_robin`` or ``sequential`` (ascending episodes,
            frames in order: evaluation streams).
        byte_budget: per-rank resident byte budget (bytes) or None; each worker gets 1/n.
        episode_nbytes: ``episode_nbytes(episode_index) -> int`` exact synthesized bytes of an
            episode (all cameras); needed with a byte budget.
        decoder_cache_size: per-rank decoder LRU size or None; each worker gets 1/n.
        repeat: endless stream (what lerobot-train uses).
        batch_size, drop_last: the DataLoader's, for resume and batch counts.
        equalize: finite epochs only: ``none`` (ranks may give different batch counts; see
            ``batches_per_rank()``) or ``drop`` (every rank stops after the smallest rank's batch
            count, so DDP collectives never hang; dropped anchors are skipped this epoch only).

    Raises:
        ShardingError: a rank would own no episode (lower the number of ranks), bad rank/world.
        ValueError: unknown strategy or equalize mode, bad sizes.
    """

    def __init__(self, episode_lengths: Mapping[int, int] | np.ndarray | list[int], *,
                 episode_indices: np.ndarray | list[int] | None = None, seed: int | None = constants.DEFAULT_SEED,
                 rank: int | None = None, world_size: int | None = None, num_workers: int = 0,
                 pool_size: int | None = None, strategy: str = constants.DEFAULT_SAMPLING_STRATEGY,
                 byte_budget: int | None = None, episode_nbytes: Callable[[int], int] | None = None,
                 decoder_cache_size: int | None = None, repeat: bool = False, batch_size: int = 1,
                 drop_last: bool = False, equalize: str = "none", _remainder_of: Planner | None = None,
                 _frame_maps: Mapping[int, np.ndarray] | None = None):
        if isinstance(episode_lengths, Mapping):
            idx = np.array(sorted(episode_lengths), dtype=np.int64)
            lens = np.array([int(episode_lengths[int(i)]) for i in idx], dtype=np.int64)
        else:
            lens = np.asarray(episode_lengths, dtype=np.int64).reshape(-1)
            idx = (np.arange(len(lens), dtype=np.int64) if episode_indices is None
                   else np.asarray(episode_indices, dtype=np.int64).reshape(-1))
            if len(idx) != len(lens):
                raise ValueError(f"{len(idx)} episode indices for {len(lens)} lengths")
            o = np.argsort(idx, kind="stable")
            idx, lens = idx[o], lens[o]
        if len(np.unique(idx)) != len(idx):
            raise ValueError("episode indices must be unique")
        if (lens < 0).any():
            raise ValueError(f"negative episode length for episode {int(idx[np.argmax(lens < 0)])}")
        keep = lens > 0
        self.episode_indices, self.lengths = idx[keep], lens[keep]
        if strategy not in STRATEGY_IDS:
            raise ValueError(f"unknown sampling strategy {strategy!r}; expected one of {sorted(STRATEGY_IDS)}")
        if equalize not in ("none", "drop"):
            raise ValueError(f"equalize must be 'none' or 'drop', got {equalize!r}")
        if num_workers < 0 or batch_size < 1 or (pool_size is not None and pool_size < 1):
            raise ValueError(f"need num_workers >= 0, batch_size >= 1, pool_size >= 1 "
                             f"(got {num_workers}, {batch_size}, {pool_size})")
        if byte_budget is not None and byte_budget < 1:
            raise ValueError(f"byte_budget must be >= 1 byte or None, got {byte_budget}")
        if byte_budget is not None and episode_nbytes is None:
            raise ValueError("a byte_budget needs episode_nbytes (each episode's exact synthesized size)")
        self.seed = constants.SEED_WHEN_NONE if seed is None else int(seed)
        self.rank, self.world_size = discover_world(rank, world_size)
        self.num_workers = int(num_workers)
        self.num_shards = max(1, self.num_workers)
        self.pool_size = pool_size
        self.strategy = strategy
        self.byte_budget = byte_budget
        self.episode_nbytes = episode_nbytes
        self.decoder_cache_size = decoder_cache_size
        self.repeat = bool(repeat)
        self.batch_size = int(batch_size)
        self.drop_last = bool(drop_last)
        self.equalize = equalize
        self.episodes_digest = episodes_digest(self.episode_indices, self.lengths)
        self.epoch = 0
        self.samples_consumed = 0
        # elastic resume (see _elastic): a remainder planner plays only the frames in frame_maps
        # (episodes absent from it whole) and takes its resource shares from the plain planner
        self.frame_maps: dict[int, np.ndarray] = dict(_frame_maps or {})
        self._remainder_of = _remainder_of
        self.full_indices, self.full_lengths = ((self.episode_indices, self.lengths) if _remainder_of is None
                                                else (_remainder_of.full_indices, _remainder_of.full_lengths))
        self._init_elastic()
        self._build_shards()

    def _build_shards(self) -> None:
        """Rank shards (LPT over the episodes; a subclass may own episodes otherwise)."""
        n_eps = len(self.lengths)
        if n_eps < self.world_size and self._remainder_of is None:
            raise ShardingError(
                f"{n_eps} non-empty selected episode(s) cannot be split over {self.world_size} ranks: "
                f"rank(s) {n_eps}..{self.world_size - 1} would own no episode. Lower the number of ranks "
                f"(world size) to at most {n_eps} or select more episodes.",
                world_size=self.world_size, num_episodes=n_eps)
        self._rank_pos = lpt_shards(self.lengths, self.world_size,
                                    (self.seed, _seeds.TAG_RANK_SHARDS, self.world_size))
        self._worker_pos_cache: dict[int, list[np.ndarray]] = {}
        self._plans: dict[int, WorkerPlan] = {}
        self.num_active_workers = self._active_count(self.rank)

    def _owns(self) -> str:
        return f"{len(self._rank_pos[self.rank])} episode(s)"

    def _active_count(self, rank: int) -> int:
        return sum(1 for p in self._worker_positions(rank) if len(p))

    def _share_count(self, rank: int) -> int:
        """Workers of ``rank`` the pool and budget shares are split over (a remainder planner uses
        the plain planner's, so a worker's shares stay the same when its stream moves on)."""
        src = self if self._remainder_of is None else self._remainder_of
        return max(1, src._active_count(rank))

    # --- shards ---------------------------------------------------------------------------------
    def _worker_positions(self, rank: int) -> list[np.ndarray]:
        if rank not in self._worker_pos_cache:
            rpos = self._rank_pos[rank]
            n = min(self.num_shards, len(rpos))
            parts = [] if n == 0 else lpt_shards(self.lengths[rpos], n, (self.seed, _seeds.TAG_WORKER_SHARDS, rank,
                                                       self.world_size, self.num_shards))
            parts = [rpos[p] for p in parts] + [np.empty(0, np.int64)] * (self.num_shards - n)
            self._worker_pos_cache[rank] = parts
        return self._worker_pos_cache[rank]

    def rank_episodes(self, rank: int | None = None) -> np.ndarray:
        """Dataset episode indices owned by ``rank`` (default: this rank), sorted, int64."""
        return self.episode_indices[self._rank_pos[self.rank if rank is None else rank]]

    def worker_episodes(self, worker: int, rank: int | None = None) -> np.ndarray:
        """Dataset episode indices owned by logical ``worker`` of ``rank`` (empty = idle)."""
        return self.episode_indices[self._worker_positions(self.rank if rank is None else rank)[worker]]

    def worker_plan(self, worker: int) -> WorkerPlan:
        """This rank's logical ``worker`` shard (cached). Raises ByteBudgetError for an episode
        larger than the worker's whole byte budget, before anything is fetched."""
        if not 0 <= worker < self.num_shards:
            raise ShardingError(f"worker {worker} outside 0..{self.num_shards - 1}")
        if worker not in self._plans:
            self._plans[worker] = self._make_plan(worker, self.rank)
        return self._plans[worker]

    def _make_plan(self, worker: int, rank: int) -> WorkerPlan:
        return WorkerPlan(self, worker, self._worker_positions(rank)[worker], rank=rank)

    def _plan_for(self, rank: int, worker: int) -> WorkerPlan:
        """Logical ``worker`` of any ``rank`` (elastic resume replays every old rank's pools)."""
        if rank == self.rank:
            return self.worker_plan(worker)
        if getattr(getattr(self, "remainder", None), "rank", None) is not None:
            raise AssertionError("a remainder shipped for one rank has no other rank's frames")
        return self._make_plan(worker, rank)

    # --- epoch sizes ----------------------------------------------------------------------------
    def samples_per_rank(self) -> np.ndarray:
        """Frames per rank in one epoch before equalization, int64 (world_size,)."""
        p = self._pass()
        if p is not self:
            return p.samples_per_rank()
        return np.array([int(self.lengths[p].sum()) for p in self._rank_pos], dtype=np.int64)

    def _worker_frames(self, rank: int) -> list[int]:
        return [int(self.lengths[p].sum()) for p in self._worker_positions(rank)]

    # --- resume and the pipeline's interface (rules shared with the mixture: PlannerBase) ----------
    def _stream_state(self, samples: int) -> StreamState:
        return StreamState(self.seed, self.epoch, int(samples), self.batch_size, self.world_size, self.num_workers,
                           self.strategy, self.pool_size, self.byte_budget, self.repeat, self.drop_last,
                           self.equalize, self.episodes_digest,
                           origin=self.origin if self._elastic_active() else None)

    def _identity_diffs(self, st: StreamState, mine: StreamState) -> list[str]:
        if st.mixture is not None:
            return [f"the checkpoint streams a mixture of {st.mixture.get('repo_ids')}, this is one dataset"]
        return episode_selection_diffs(st, mine)

    def _start_at(self, logical: int, given: int, epoch: int, limit: int | None) -> WorkerStart:
        if self.repeat and self._chain is not None:  # remainder, then the plain epochs: worker_pools splits
            return WorkerStart(logical, epoch, given, None)
        if self.repeat:  # an endless stream's count rolls into the worker's later epochs
            f = self._worker_frames(self.rank)[logical]
            return WorkerStart(logical, epoch + (given // f if f else 0), given % f if f else 0, None)
        return WorkerStart(logical, epoch, given, limit)

    def _endless_limits(self, rank: int) -> list[int | None]:
        fr = self._worker_frames(rank)
        if self._chain is None:
            return [None if f else 0 for f in fr]
        after = self._chain._worker_frames(rank)  # endless once the remainder is done, if any frames
        return [None if a else f for f, a in zip(fr, after)]

    def worker_plans(self, start: WorkerStart) -> list[WorkerPlan]:
        p = self._pass()
        if p is not self:
            return p.worker_plans(start)
        return [self.stream_plan(start.logical_worker)]

    def stream_plan(self, worker: int) -> WorkerPlan | _ChainPlan:
        """What logical ``worker`` of this rank streams: its ``WorkerPlan``, or (an endless
        remainder planner) its share of the remainder chained to its plain epochs."""
        plan = self.worker_plan(worker)
        if self.repeat and self._chain is not None:
            return _ChainPlan(plan, self._chain.worker_plan(worker), self.epoch, self._chain.epoch)
        return plan

    def worker_pools(self, start: WorkerStart, plans: Sequence[WorkerPlan]) -> Iterator[EpisodePool]:
        p = self._pass()
        if p is not self:
            return p.worker_pools(start, plans)
        return plans[0].iter_pools(start.epoch, start.offset, repeat=self.repeat)

    # --- elastic resume ------------------------------------------------------------------------
    def _like(self, st: StreamState, nbytes: Callable[[int], int] | None = None) -> Planner:
        """A planner of rank 0 over the same episodes with ``st``'s settings and position."""
        nb = nbytes or self.episode_nbytes or _no_nbytes
        out = type(self)(self.full_lengths, episode_indices=self.full_indices, seed=st.seed, rank=0,
                         world_size=st.world_size, num_workers=st.num_workers, pool_size=st.pool_size,
                         strategy=st.strategy, byte_budget=st.byte_budget,
                         episode_nbytes=nb if st.byte_budget is not None else None, repeat=st.repeat,
                         batch_size=st.batch_size, drop_last=st.drop_last, equalize=st.equalize,
                         **self._layout_kwargs(st))
        out.epoch, out.samples_consumed = st.epoch, st.samples
        if st.origin is not None:
            out.origin, out.origin_epoch = st.origin, st.epoch
        out._replay_nbytes = nb
        return out

    def _layout_kwargs(self, st: StreamState) -> dict[str, Any]:
        """Constructor arguments beyond the state's settings that ``_like`` passes (a subclass's)."""
        return {}

    def _remainder(self):
        from lerobotstream.planner._elastic import plan_remainder

        nb = self._replay_nbytes
        if nb is None and self.nbytes_provider is not None:
            nb = self.nbytes_provider()[0]
        shipped = getattr(self, "shipped_remainders", None)
        return plan_remainder(self, StreamState.from_dict(self.origin), nb, shipped[0] if shipped else None)

    def _remainder_planner(self) -> Planner:
        if self._rp is None:
            self._rp = self._planner_over(self._remainder())
        return self._rp

    def _planner_over(self, rem) -> Planner:
        """The planner of this topology that plays remainder ``rem`` (its own seed), then (endless)
        this planner's plain epochs."""
        seed = int(_seeds.seed_words(self.seed, TAG_ELASTIC, rem.epoch, rem.depth)[0] >> 2)
        plain = self._plain()
        rp = Planner(rem.lengths, episode_indices=rem.episode_indices, seed=seed, rank=self.rank,
                     world_size=self.world_size, num_workers=self.num_workers, pool_size=self.pool_size,
                     strategy=self.strategy, byte_budget=self.byte_budget, episode_nbytes=self.episode_nbytes,
                     decoder_cache_size=self.decoder_cache_size, repeat=self.repeat, batch_size=self.batch_size,
                     drop_last=self.drop_last, equalize=self.equalize, _remainder_of=plain,
                     _frame_maps=rem.frames)
        return self._attach(rp, rem, plain)

    def _attach(self, rp: Planner, rem: Any, plain: Planner) -> Planner:
        """``rp`` plays remainder ``rem`` as its epoch; endless: then ``plain``'s epochs from the next."""
        rp.epoch = rem.epoch
        if self.repeat:
            plain.epoch = rem.epoch + 1
            rp._chain = plain  # a worker with plain-epoch episodes yields even without remainder ones
            rp.num_active_workers = sum(1 for a, b in zip(rp._worker_frames(self.rank), plain._worker_frames(self.rank))
                                        if a or b)
        rp.remainder = rem
        return rp

    def rank_remainders(self) -> list[Any] | None:
        """The remainder this rank's DataLoader workers play (elastic resume; None: a plain
        epoch), its started episodes' frames kept for this rank's episodes only
        (``Remainder.for_rank``): the dataset computes it once where the state is loaded and
        ships it to its workers (their planner's ``shipped_remainders``)."""
        if not self._elastic_active():
            return None
        rp = self._remainder_planner()
        return [rp.remainder.for_rank(self.rank, rp.rank_episodes())]

    def remainder_info(self) -> dict[str, Any] | None:
        """What an elastic resume continues (None when this planner plays a plain epoch): the
        epoch, samples left over all ranks (``samples_left``) and on this rank (``rank_samples``),
        episodes left whole and partly consumed, samples the old run consumed in that epoch."""
        if not self._elastic_active():
            return None
        rp = self._remainder_planner()
        rem = rp.remainder
        return {"epoch": rem.epoch, "samples_left": rem.total, "rank_samples": int(rp.samples_per_rank()[self.rank]),
                "episodes_whole": int(len(rem.episode_indices) - rem.episodes_started),
                "episodes_started": rem.episodes_started, "depth": rem.depth, "consumed": rem.consumed}


def _no_nbytes(episode_index: int) -> int:
    raise AssertionError("this planner has no episode sizes (episode_nbytes) to replay a byte budget")


class _ChainPlan:
    """An endless elastic worker's plan: its share of the remainder (epoch ``epoch``), then its
    plain epochs from ``next_epoch`` on (the episodes and sizes of both, one set of resource shares)."""

    def __init__(self, first: WorkerPlan, then: WorkerPlan, epoch: int, next_epoch: int) -> None:
        self.first, self.then = first, then
        self.epoch, self.next_epoch = int(epoch), int(next_epoch)
        self.worker = first.worker
        self.episode_indices = np.concatenate([first.episode_indices, then.episode_indices])
        self.nbytes = np.concatenate([first.nbytes, then.nbytes])
        self.lengths = np.concatenate([first.lengths, then.lengths])
        self.num_frames = first.num_frames + then.num_frames
        # the remainder may keep the checkpoint's pool settings (partitions): room for the larger
        self.pool_size = max(first.pool_size, then.pool_size)
        self.byte_budget = (None if first.byte_budget is None or then.byte_budget is None
                            else max(first.byte_budget, then.byte_budget))
        self.decoder_cache_size = then.decoder_cache_size
        self.sizes_on_demand = first.sizes_on_demand or then.sizes_on_demand

    @property
    def where(self) -> str:
        return self.then.where

    @where.setter
    def where(self, value: str) -> None:
        self.first.where = self.then.where = value

    def episode_size(self, episode_index: int) -> int:
        """As ``WorkerPlan.episode_size``, checked against the larger budget of the two."""
        plan = self.first if self.first.byte_budget == self.byte_budget else self.then
        return plan.episode_size(episode_index)

    def iter_pools(self, epoch: int = 0, given: int = 0, *, repeat: bool = True) -> Iterator[EpisodePool]:
        """``given`` anchors of the chain already consumed: the remainder pool (its own epoch)
        while some of it is left, then the plain epochs from ``next_epoch`` on (``epoch`` and
        ``repeat``: ``WorkerPlan.iter_pools``' signature; the chain keeps its own)."""
        first = self.first.num_frames
        if given < first:
            pool = self.first.pool(self.epoch)
            if given:
                pool.skip(given)
                pool.drain_events()
            yield pool
            given = first
        yield from self.then.iter_pools(self.next_epoch, given - first, repeat=True)
