"""The stream core: one ``IterableDataset`` over a list of parts (datasets), shared by
:class:`~lerobotstream.StreamingLeRobotDataset` (a list of one part) and
:class:`~lerobotstream.StreamingMultiLeRobotDataset` (one part per dataset of the mixture).

It owns what both streams do the same way (MosaicML Streaming's shape: one dataset is
``streams = [default]``, and everything after that handles a list):

* the resume state of one rank (epoch, consumed samples, the loaded state and the settings it was planned for) and
  ``samples_consumed`` / ``set_epoch`` / ``state_dict`` / ``load_state_dict`` / ``__getstate__``;
* one ``__iter__``: DataLoader worker id → where the iterator starts (``persistent_workers``) →
  the planner (``_planner``, a :class:`~lerobotstream.planner.PlannerBase`) → ``worker_start`` →
  each part's worker plan → per process one :class:`~lerobotstream.dataset._worker.Worker` per part
  bound to **one** byte cache, one decoded-GOP cache and one
  :class:`~lerobotstream.dataset._pipeline.Pipeline` over global episode ids
  (``part.offset + episode_index``) → items (a part's dropped keys removed, its ``dataset_index``
  added) with image transforms applied where they belong;
* per-process counters (``stats()``, ``source_stats()``): each part's own, and the pipeline's;
* the **shard interface** a loader uses (``StreamLoader``; ``__iter__`` is built on it):
  :attr:`StreamCore.position` / :meth:`StreamCore.seek`, :meth:`StreamCore.prepare` (the worker
  count fit) and :meth:`StreamCore.shard` → :class:`StreamShard` (``items``, ``source_stats()``,
  ``close()``).

A subclass provides :meth:`_parts` (one :class:`StreamPart` per dataset) and :meth:`_planner`
(the rank's planner for a DataLoader worker count), and the option attributes the core reads
(``num_workers``, ``repeat``, ``drop_last``, ``batch_size``, ``prefetch_episodes``,
``decode_threads``, ``decoded_queue_size``, ``decode_lookahead``, ``first_lookahead``,
``decoded_cache_gb``, ``image_transforms``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch

from lerobotstream.dataset._wiring import GIB, Run, StreamPart, WiringSettings, shard_items
from lerobotstream.options import StreamOptions, is_int, require

__all__ = ["StreamCore", "StreamPart", "StreamPosition", "StreamShard", "GIB"]

@dataclass(frozen=True)
class StreamPosition:
    """Where a stream of one rank is: ``epoch`` (int, >= 0) and ``samples`` (int, >= 0), the
    samples of the rank consumed since that epoch began (or since the loaded state's epoch did)."""

    epoch: int
    samples: int


class StreamShard:
    """One shard of a stream, iterated in the process that made it (:meth:`StreamCore.shard`).

    Attributes:
        items: iterator of the shard's items (dicts, as ``StreamCore.__iter__`` yields them), in
            planner order. Decoding, fetching and assembly run on the shard's pipeline threads
            from the first ``next()`` on.
        worker (int | None), num_workers (int): the shard (None, 0: the one stream).

    :meth:`close` ends it (joins its pipeline threads, closes its byte cache, releases its
    decoders); closing twice, or a shard never iterated, is fine.
    """

    def __init__(self, core: "StreamCore", worker: int | None, num_workers: int, run: "Run",
                 items: Iterator[dict[str, Any]]) -> None:
        self.worker, self.num_workers = worker, num_workers
        self._core, self._run_state = core, run
        self.items = items

    def source_stats(self) -> dict[str, Any]:
        """This shard's payload-source counters (the stream's ``source_stats()`` keys: ``requests``,
        ``bytes_read``, ...; bytes), cheap enough to read per item."""
        return self._core._combine_source_stats([w.source.stats.as_dict() for w in self._run_state.workers])

    def close(self) -> None:
        """Stop the shard: its pipeline threads joined, its caches closed (idempotent)."""
        self.items.close()


class StreamCore(torch.utils.data.IterableDataset):
    """Resume state, epochs and the one iterator of a stream of one rank (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self._epoch = 0
        self._samples = 0  # consumed samples of the rank since _epoch began (loaded or set)
        self._yielded = 0  # items yielded in this process since then (num_workers=0 counting)
        #: (DataLoader workers, batch_size, drop_last, epoch, samples) a loaded state was planned for
        #: and the position it gave (None: no state loaded); :meth:`_fit_worker_count` replans it
        self._state_topology: tuple[int, int | None, bool, int, int] | None = None
        self._loaded_state: dict[str, Any] | None = None
        self._iter_pid: int | None = None  # DataLoader worker process that counts iterator starts
        self._iter_starts = 0  # iterators started on this copy in that worker (persistent_workers)
        self._run: Run | None = None

    def _take_options(self, opts: StreamOptions, skip: Sequence[str] = ()) -> None:
        """Keep ``opts`` (``self.options``) and every option (but ``skip``) as a resolved attribute
        (``ds.byte_budget_gb``...; see :meth:`StreamOptions.resolved`)."""
        self.options = opts
        for name, value in opts.resolved().items():
            if name not in skip:
                setattr(self, name, value)

    # --- what a stream provides -----------------------------------------------------------------
    def _parts(self) -> list[StreamPart]:
        raise NotImplementedError

    def _planner(self, num_workers: int, episode_nbytes: Sequence[Callable[[int], int]] | None = None):
        """The rank's planner for ``num_workers`` DataLoader workers (``episode_nbytes``: each
        part's exact synthesized bytes per episode; None: a planner for resume states only)."""
        raise NotImplementedError

    # --- resume -----------------------------------------------------------------------------------
    @property
    def samples_consumed(self) -> int:
        """Samples of this rank consumed since the current epoch (or loaded state) began: the loaded
        count plus the items this process yielded (exact with ``num_workers=0``). Set it from the
        training loop with DataLoader workers (``ds.samples_consumed = step * batch_size``)."""
        return self._samples + self._yielded

    @samples_consumed.setter
    def samples_consumed(self, value: int) -> None:
        self._samples, self._yielded = int(value), 0

    @property
    def epoch(self) -> int:
        """The epoch the next iterator plays (an int >= 0): ``set_epoch``'s, or after
        ``load_state_dict`` the epoch the state resumes — the checkpoint's epoch, or the next one
        when its count covered the whole epoch. With :attr:`samples_consumed` it is where a
        resumed training loop goes on counting (docs/resume.md). Endless streams
        (``repeat=True``): the epoch their count runs from (each DataLoader worker rolls into
        later epochs on its own; ``resume_info()["epoch"]`` is the pass an elastic resume plays)."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first sample (its own seeded order)."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._epoch, self._samples, self._yielded = int(epoch), 0, 0

    @property
    def position(self) -> StreamPosition:
        """Where the next iterator starts (:class:`StreamPosition`: the epoch and
        :attr:`samples_consumed`)."""
        return StreamPosition(self._epoch, self.samples_consumed)

    def seek(self, epoch: int, samples: int = 0) -> None:
        """Move to ``samples`` consumed samples of ``epoch`` (ints >= 0): the next iterator (and
        :meth:`state_dict`) starts there. A loader that counts what it handed out
        (``StreamLoader``) keeps the stream's position with it.

        Raises:
            ValueError: ``epoch`` or ``samples`` is negative.
        """
        if epoch < 0 or samples < 0:
            raise ValueError(f"epoch and samples must be >= 0, got epoch={epoch}, samples={samples}")
        self._epoch, self._samples, self._yielded = int(epoch), int(samples), 0

    def prepare(self, num_workers: int) -> StreamPosition:
        """Get ready to iterate as ``num_workers`` shards (0: one stream), and say from where.

        A state loaded for another worker count, ``batch_size`` or ``drop_last`` than these is
        replanned here (0 and 1 workers are one shard either way; elastic when they differ from the
        checkpoint's): the stream adopts the remainder of the epoch planned for ``num_workers``
        shards, so the returned position is the remainder's.

        Returns:
            StreamPosition: where the shards start (pass it to :meth:`shard`): the epoch and the
            samples loaded or set (:meth:`seek`, :meth:`load_state_dict`, :meth:`set_epoch`;
            not what this process's own iterators yielded since).

        Raises:
            ResumeStateError: the loaded state cannot be resumed with ``num_workers`` shards.
        """
        self._fit_worker_count(int(num_workers))
        return StreamPosition(self._epoch, self._samples)

    def shard(self, worker: int | None, num_workers: int, *, epoch: int, samples: int, in_process: bool,
              slots: Callable[[int], Any] | None = None) -> StreamShard:
        """Shard ``worker`` of ``num_workers`` (None, 0: the one stream) from ``samples`` consumed
        samples of ``epoch`` (the rank's count: :meth:`prepare`'s position): the items a
        ``DataLoader`` worker ``worker`` of ``num_workers`` yields from there, with its
        per-process state made in this process (never a parent's).

        Args:
            in_process: the shard is iterated in the training process (image transforms then run
                on the iterating thread, in item order, instead of the decode threads). Several
                such shards (``num_workers`` > 0) each get per-process state of their own
                (``StreamLoader``'s threads mode runs them side by side); otherwise the shard uses
                this process's (a DataLoader or loader worker process runs one shard).
            slots: ``slots(n) -> slot`` for the shard's n-th item (0-based, planner order): where
                the item's frames may be written (``Pipeline``'s ``slots``; ``_assemble.SlotFn``).

        Returns:
            StreamShard: its ``items``, ``source_stats()`` and ``close()``. Nothing is fetched
            before the first ``next(shard.items)``.

        Raises (from the first ``next``):
            ByteBudgetError: an episode does not fit the byte budget. Fetch and decode errors as
            ``__iter__``'s.
        """
        nw = int(num_workers)
        run = self._fresh_run() if in_process and nw > 0 else self._process_run()
        items = self._iter_worker(worker, nw, int(epoch), int(samples), run, in_process=in_process, slots=slots)
        return StreamShard(self, worker, nw, run, items)

    def state_dict(self, samples_consumed: int | None = None, *, batches_consumed: int | None = None) -> dict[str, Any]:
        """Resume state of this rank (``planner.StreamState`` layout, schema-versioned).

        Args:
            samples_consumed: samples the training loop consumed from this rank since the epoch
                (or the loaded state's epoch) began — the sum of the consumed batches' sizes.
            batches_consumed: alternatively, batches consumed (converted by replaying the
                DataLoader's batch turns, exact with short last batches).
            Neither: :attr:`samples_consumed` (exact with ``num_workers=0``).
        """
        planner = self._planner(self.num_workers)
        planner.set_epoch(self._epoch)
        if batches_consumed is not None:
            from lerobotstream.planner import replay_turns

            require("batches_consumed", batches_consumed, is_int(batches_consumed) and batches_consumed >= 0,
                    "an int >= 0")
            given, _, _ = replay_turns(planner.turn_limits(), planner.batch_size, batches=int(batches_consumed),
                                       drop_last=self.drop_last)
            samples_consumed = sum(given)
        s = self.samples_consumed if samples_consumed is None else int(samples_consumed)
        require("samples_consumed", s, s >= 0, "an int >= 0 (samples consumed since the epoch began)")
        return planner.state_dict(samples_consumed=s)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (before iterating): of this topology (the same order
        continues), or of another world size, DataLoader worker count, batch size, pool size or
        byte budget (elastic resume: the epoch's unconsumed samples are replanned over this run's
        ranks and workers, then plain epochs follow; see docs/resume.md). ``resume_changes`` lists
        what changed.

        Raises:
            ResumeStateError: no schema marker, another stream (dataset, episodes, mixture) or seed.
        """
        from lerobotstream.planner import StreamState

        st = StreamState.from_dict(state)
        if self.batch_size is None:
            self.batch_size = st.batch_size
        self._load(state, self.num_workers)

    def _load(self, state: dict[str, Any], nw: int) -> None:
        """Adopt ``state`` for ``nw`` DataLoader workers and this stream's other settings now, and
        remember them (:meth:`_fit_worker_count` replans when they change before iterating)."""
        self._origin = self._remainders = None
        planner = self._planner(nw)
        fixed = dict(state)
        if {int(state["num_workers"]), nw} <= {0, 1}:
            fixed["num_workers"] = nw  # one shard either way: the same stream
        planner.load_state_dict(fixed)
        self._adopt(planner, fixed)
        self._loaded_state = dict(state)
        self._state_topology = (nw, self.batch_size, bool(self.drop_last), self._epoch, self._samples)

    def _adopt(self, planner, state: dict[str, Any]) -> None:
        """Take a planner's loaded position (epoch, samples, elastic origin) as this stream's.

        Elastic: the remainder is computed here, once (the training process, before DataLoader
        workers start; it opens the datasets' indexes when a byte budget needs episode sizes), and
        kept for this rank (``rank_remainders``: O(episodes)) so that the workers, which get it
        with the dataset (fork or pickle), do not compute it again."""
        self._origin = None if planner.origin is None else (planner.origin, planner.origin_epoch)
        self._epoch, self._samples, self._yielded = planner.epoch, planner.samples_consumed, 0
        if not planner.repeat:
            # a count of one or more whole finite epochs is the start of a later one (``position``),
            # so ``epoch`` / ``samples_consumed`` say where the next iterator really starts
            self._epoch, self._samples = planner.position()
        self.resume_changes = list(planner.resume_changes)
        self._remainders = planner.rank_remainders() if self._origin is not None else None

    def resume_info(self) -> dict[str, Any] | None:
        """What an elastic resume continues (None: a plain epoch): ``epoch``, ``samples_left`` (all
        ranks), ``rank_samples`` (this rank), ``episodes_whole``, ``episodes_started``, ``depth``
        (see ``Planner.remainder_info``; computes the remainder, opening the datasets' indexes for
        their episode sizes)."""
        planner = self._planner(self.num_workers)
        planner.set_epoch(self._epoch)
        planner.samples_consumed = self._samples
        info = getattr(planner, "remainder_info", None)
        return None if info is None else info()

    def _resumed(self, planner):
        """``planner`` with this stream's elastic origin (what the remainder epoch replays) and the
        episode sizes a replay under a byte budget needs (each part's, opened on first use)."""
        origin = self.__dict__.get("_origin")
        if origin is not None:
            planner.origin, planner.origin_epoch = origin
            planner.shipped_remainders = self.__dict__.get("_remainders")
        planner.nbytes_provider = lambda: self._process_run().sizes
        return planner

    def _iteration_start(self, nw: int) -> tuple[int, int]:
        """(epoch, consumed samples) an iterator starts from in this process, with ``nw``
        DataLoader workers (0: in-process).

        A DataLoader worker holds a copy of the dataset: with ``persistent_workers=True`` the same
        copy serves every epoch and never sees the training process's ``set_epoch()``; the k-th
        iterator started on it is epoch (copied epoch + k), from its first sample.

        A state loaded for another DataLoader worker count than ``nw`` is resumed elastically here.

        Raises:
            ResumeStateError: the loaded state cannot be resumed with ``nw`` workers.
        """
        start = self.prepare(nw)
        epoch, samples = start.epoch, start.samples
        if nw:
            pid = os.getpid()
            if self._iter_pid != pid:
                self._iter_pid, self._iter_starts = pid, 0
            if self._iter_starts:
                epoch, samples = self._epoch + self._iter_starts, 0
            self._iter_starts += 1
        return epoch, samples

    def _fit_worker_count(self, nw: int) -> None:
        """Replan a loaded state whose DataLoader worker count (0 and 1 are one shard either way),
        ``batch_size`` or ``drop_last`` differ from ``nw`` and this stream's settings now (a
        ``StreamLoader`` sets its own on a dataset that may have loaded a state already; a
        DataLoader may run another worker count than the dataset's ``num_workers``): the state is
        loaded again for them, as if they had been set before ``load_state_dict`` (the same order
        when they are the checkpoint's, else elastic). Nothing to do once the stream has moved
        from the loaded position (``set_epoch``, or items yielded in this process).

        Raises:
            ResumeStateError: the state cannot be resumed with ``nw`` workers.
        """
        t = self.__dict__.get("_state_topology")
        if t is None or (t[3], t[4]) != (self._epoch, self._samples) or self._yielded:
            return
        if (t[1], t[2]) != (self.batch_size, bool(self.drop_last)) or (t[0] != nw and not {t[0], nw} <= {0, 1}):
            if nw != (self.num_workers or 0) and not {nw, self.num_workers or 0} <= {0, 1}:
                import warnings

                warnings.warn(
                    f"the DataLoader runs {nw} worker(s) but the dataset was built with num_workers="
                    f"{self.num_workers}: the loaded state resumes elastically for {nw}, but state_dict() in the "
                    f"training process describes {self.num_workers} worker(s), so a state saved from this run "
                    f"would resume the wrong samples; pass num_workers={nw} (and max_num_shards) to the dataset",
                    RuntimeWarning, stacklevel=2)
            self._load(self._loaded_state, nw)

    def __getstate__(self) -> dict[str, Any]:
        st = dict(self.__dict__)
        st["_run"] = None  # never ship decoders, maps or threads to a worker
        return st

    # --- per process ------------------------------------------------------------------------------
    def _process_run(self) -> Run:
        if self._run is None or self._run.pid != os.getpid():
            self._run = self._fresh_run()  # never reuse a parent's decoders/connections
        return self._run

    def _fresh_run(self) -> Run:
        """New per-process state (a worker per part) that this stream does not keep (a shard of
        several in this process: :meth:`shard`)."""
        return Run(self._parts())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from lerobotstream.planner import current_worker

        wid, nw = current_worker()
        epoch, samples = self._iteration_start(nw)
        shard = self.shard(wid, nw, epoch=epoch, samples=samples, in_process=nw == 0)
        try:
            for item in shard.items:
                if nw == 0:  # in-process: samples_consumed counts what was yielded
                    self._yielded += 1
                yield item
        finally:
            shard.close()

    def _iter_worker(self, wid: int | None, nw: int, epoch: int, samples: int, run: Run, *, in_process: bool,
                     slots: Callable[[int], Any] | None = None) -> Iterator[dict[str, Any]]:
        """The items of logical worker ``wid`` of ``nw`` (None, 0: the one stream) from
        (``epoch``, ``samples`` consumed by the rank), produced with ``run``'s workers
        (:meth:`shard`'s generator; the wiring: :func:`~lerobotstream.dataset._wiring.shard_items`)."""
        return shard_items(self._planner(nw, run.sizes), run, wid, nw, epoch, samples, self._wiring_settings(),
                           in_process=in_process, slots=slots)

    def _wiring_settings(self) -> WiringSettings:
        return WiringSettings(prefetch_episodes=self.prefetch_episodes, decode_threads=self.decode_threads,
                              decoded_queue_size=self.decoded_queue_size, decode_lookahead=self.decode_lookahead,
                              first_lookahead=self.first_lookahead, decoded_cache_gb=self.decoded_cache_gb,
                              batch_size=self.batch_size, image_transforms=self.image_transforms)

    # --- counters -----------------------------------------------------------------------------------
    def _part_stats(self, d: int) -> dict[str, Any]:
        """Part ``d``'s own counters in this process (see ``StreamingLeRobotDataset.stats``)."""
        run = self._run
        w = run.workers[d]
        src = w.source.stats.as_dict()
        fb = w.fallback
        out: dict[str, Any] = {
            "source": src,
            "bytes_fetched": int(src.get("bytes_read", 0)),
            "requests": int(src.get("requests", 0)),
            "decoder_opens": w.decoders.opened,
            "decoder_evictions": w.decoders.evicted,
            "open_decoders": len(w.decoders),
            "decoder_capacity": w.decoders.capacity,
            "decoder_fallbacks": fb.fallback_count,
            "pyav_fallbacks": fb.pyav_fallbacks,
            "fallback_reasons": dict(fb.cpu_fallbacks),
            "index_open_s": w.index_open_s,
            "episodes_sized": len(run.sizes[d]),
        }
        with w.lock:
            out.update({k: (int(v) if k.startswith(("frames", "decode_calls", "bytes", "episodes", "items")) else v)
                        for k, v in w.c.items()})
        out["frames_decoded_per_returned"] = (out["frames_decoded"] / out["frames_returned"]
                                              if out["frames_returned"] else None)
        meta_source = w.cfg.meta.source
        if meta_source is not w.source:
            out["metadata_source"] = meta_source.stats.as_dict()
        return out

    def _pipeline_stats(self) -> dict[str, Any]:
        """The worker's shared counters: pipeline stage times, the byte cache, the decoded-GOP cache."""
        run = self._run
        t = run.times
        gops = run.workers[0].jobs.gops
        out: dict[str, Any] = {
            "assemble_s": t.assemble_s, "queue_wait_s": t.queue_wait_s, "admit_wait_s": t.admit_wait_s,
            "decode_job_s": t.decode_job_s, "chunks": t.chunks, "first_item_s": t.first_item_s,
            "gop_cache_bytes": gops.nbytes, "gop_cache_peak_bytes": gops.peak_nbytes,
            "gop_cache_capacity_bytes": gops.capacity_bytes, "gop_cache_evictions": gops.evictions,
        }
        c = run.cache
        if c is not None:
            out.update(reserved_bytes=c.reserved_bytes, resident_bytes=c.resident_bytes, byte_budget=c.byte_budget,
                       cache=c.stats.as_dict())
        else:
            out.update(reserved_bytes=0, resident_bytes=0, byte_budget=0, cache={})
        return out

    def source_stats(self) -> dict[str, Any]:
        """This process's payload-source counters (``ByteSource.stats``: ``requests``,
        ``bytes_read``, ``bytes_requested``, ``retries``, ...; bytes; a mixture's summed over its
        datasets), cheap enough to read per item (a fraction of a microsecond; ``stats()`` builds
        every counter). Empty before iterating."""
        run = self._run
        return {} if run is None else self._combine_source_stats([w.source.stats.as_dict() for w in run.workers])

    def _combine_source_stats(self, parts: list[dict[str, Any]]) -> dict[str, Any]:
        """One dict of the parts' source counters (the subclass's rule; a single part's as is)."""
        return parts[0] if parts else {}
