"""The stream core: one ``IterableDataset`` over a list of parts (datasets), shared by
:class:`~lerobotstream.StreamingLeRobotDataset` (a list of one part) and
:class:`~lerobotstream.StreamingMultiLeRobotDataset` (one part per dataset of the mixture).

It owns what both streams do the same way (MosaicML Streaming's shape: one dataset is
``streams = [default]``, and everything after that handles a list):

* the resume state of one rank (:class:`~lerobotstream.dataset._resume.ResumeState`: pure data,
  created here) and ``samples_consumed`` / ``set_epoch`` / ``state_dict`` / ``load_state_dict``;
  the planner gets its position, one object, whole (``Planner.place``) with each part's episode sizes
  (``planner._sizes.EpisodeSizes`` over this process's spans, on demand);
* one ``__iter__``: DataLoader worker id → where the iterator starts (``persistent_workers``) →
  the planner (``_planner``, a :class:`~lerobotstream.planner._planner.Planner`) → the wiring
  (:func:`~lerobotstream.dataset._wiring.shard_items`: the byte cache, the readers, the pipeline);
* per-process counters (``stats()``, ``source_stats()``: :mod:`~lerobotstream.dataset._counters`);
* the **shard interface** a loader uses (``StreamLoader``; ``__iter__`` is built on it):
  :attr:`StreamCore.position` / :meth:`StreamCore.seek`, :meth:`StreamCore.prepare` (the worker
  count fit) and :meth:`StreamCore.shard` → :class:`StreamShard` (``items``, ``source_stats()``,
  ``close()``).

A subclass provides :meth:`_parts` (one :class:`StreamPart` per dataset), :meth:`_planner`
(the rank's planner for a loader's settings) and ``options``: its resolved, frozen
:class:`~lerobotstream.options.StreamOptions`, the one place every layer reads its options from
(the wiring takes the object whole; the planner its :func:`plan_settings`). Each option is also a
read-only attribute, a view of ``options`` (``ds.byte_budget_gb``).

What batches the stream (a ``DataLoader`` or a ``StreamLoader``) fixes its shards and batch turns:
:class:`LoaderSettings` (``batch_size``, ``num_workers``, ``drop_last``), handed to the core as
data. Unless a loader hands its own, they are the options' (``batch_size=None``: a loaded
state's, else 1); a ``DataLoader`` gives only its worker count (``prepare(n)``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from lerobotstream._option_rules import check_epoch
from lerobotstream.dataset import _counters
from lerobotstream.dataset._resume import ResumeState
from lerobotstream.dataset._wiring import Readers, StreamPart, shard_items
from lerobotstream.errors import StreamingConfigError
from lerobotstream.options import StreamOptions, check_option, option_info
from lerobotstream.planner._sizes import EpisodeSizes
from lerobotstream.planner._state import check_count
from lerobotstream.planner._streams import PlanSettings

__all__ = [
    "LoaderSettings",
    "StreamCore",
    "StreamPart",
    "StreamPosition",
    "StreamShard",
    "add_option_views",
    "plan_settings",
]


@dataclass(frozen=True)
class LoaderSettings:
    """The settings of what batches a stream — a ``DataLoader`` or a ``StreamLoader`` — that fix
    its shards and batch turns (and so its resume state), handed to the stream as data.

    Fields (each checked by its option's rule, ``options.check_option``; numpy ints become ints):
        batch_size (int | None): samples per batch, >= 1 (None: a loaded state's, else 1).
        num_workers (int): DataLoader workers (shards), 0 to ``constants.MAX_NUM_WORKERS`` (0: one
            stream in the training process).
        drop_last (bool): each shard's short last batch is dropped.

    Raises:
        StreamingConfigError: a field breaks its option's rule (names it, its value and the rule).
    """

    batch_size: int | None = None
    num_workers: int = 0
    drop_last: bool = False

    def __post_init__(self) -> None:
        check_option("batch_size", self.batch_size)
        check_option("num_workers", self.num_workers, required=True)
        check_option("drop_last", self.drop_last)
        object.__setattr__(self, "batch_size", None if self.batch_size is None else int(self.batch_size))
        object.__setattr__(self, "num_workers", int(self.num_workers))
        object.__setattr__(self, "drop_last", bool(self.drop_last))

    def plays_as(self, other: LoaderSettings) -> bool:
        """The same shards and batch turns as ``other`` (0 and 1 workers are one stream either way)."""
        same_workers = self.num_workers == other.num_workers or {self.num_workers, other.num_workers} <= {0, 1}
        return same_workers and (self.batch_size, self.drop_last) == (other.batch_size, other.drop_last)


def plan_settings(
    options: StreamOptions, loader: LoaderSettings, *, rank: int | None = None, world_size: int | None = None
) -> PlanSettings:
    """The :class:`~lerobotstream.planner._streams.PlanSettings` of a stream's resolved ``options`` batched
    with ``loader``'s settings: every field named as an option takes that option's value (the
    byte budget in bytes: ``options.byte_budget``), ``num_workers`` / ``batch_size`` (1 when
    unset) / ``drop_last`` are the loader's."""
    from dataclasses import fields

    own = {f.name: getattr(options, f.name) for f in fields(PlanSettings) if hasattr(options, f.name)}
    return PlanSettings(
        **{
            **own,
            "num_workers": loader.num_workers,
            "batch_size": loader.batch_size or 1,
            "drop_last": loader.drop_last,
            "rank": rank,
            "world_size": world_size,
        }
    )


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
    decoders); closing twice, or a shard never iterated, is fine. :meth:`abort` wakes its waits
    from another thread.
    """

    def __init__(
        self,
        core: StreamCore,
        worker: int | None,
        num_workers: int,
        readers: Readers,
        items: Iterator[dict[str, Any]],
        stats: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.worker, self.num_workers = worker, num_workers
        self._core, self._readers = core, readers
        self._stats = stats or dict
        self.items = items

    def source_stats(self) -> dict[str, Any]:
        """This shard's payload-source counters (the stream's ``source_stats()`` keys: ``requests``,
        ``bytes_read``, ...; bytes), cheap enough to read per item."""
        return self._core._combine_source_stats(_counters.source_stats(self._readers))

    def stats(self) -> dict[str, Any]:
        """This shard's counters: the keys of its stream's ``stats()``, for this shard's readers."""
        return self._stats()

    def close(self) -> None:
        """Stop the shard: its pipeline threads joined, its caches closed (idempotent)."""
        self.items.close()

    def abort(self) -> None:
        """Wake the shard's waits from another thread (a loader's stall watch): its byte cache
        closes, so the admissions and payload waits of its pipeline raise and the thread iterating
        :attr:`items` leaves with that error. A wait outside the cache (a decode in progress) ends
        on its own first. :meth:`close` still ends the shard."""
        cache = self._readers.cache
        if cache is not None:
            cache.close()


class StreamCore(torch.utils.data.IterableDataset):
    """Resume state, epochs and the one iterator of a stream of one rank (see the module doc)."""

    #: the stream's options, resolved and frozen (:meth:`StreamOptions.resolved`; set by the subclass)
    options: StreamOptions

    def __init__(self) -> None:
        super().__init__()
        #: where the next iterator starts and what a loaded state left to replan (pure data)
        self._resume = ResumeState()
        self._readers: Readers | None = None  # this process's readers
        self._sizes: tuple[int, list[EpisodeSizes]] | None = None  # (pid, each part's sizes)

    def loader_settings(self, loader: LoaderSettings | int | None = None) -> LoaderSettings:
        """The settings the stream's batches are made with: ``loader`` itself when a
        :class:`LoaderSettings` (a loader's own), else the options' (``batch_size``, ``num_workers``,
        ``drop_last``) with ``loader`` workers when an int (a ``DataLoader``'s count); a batch size
        left unset is the loaded state's (:meth:`load_state_dict`), else None (1 in the planner)."""
        if isinstance(loader, LoaderSettings):
            return loader if loader.batch_size is not None else replace(loader, batch_size=self._resume.batch_size)
        o = self.options
        return LoaderSettings(
            o.batch_size if o.batch_size is not None else self._resume.batch_size,
            o.num_workers if loader is None else loader,
            o.drop_last,
        )

    # --- what a stream provides -----------------------------------------------------------------
    def _parts(self) -> list[StreamPart]:
        raise NotImplementedError

    def _part_count(self) -> int:
        """How many parts (datasets) :meth:`_parts` gives."""
        raise NotImplementedError

    def _planner(self, loader: LoaderSettings | int, episode_nbytes: Sequence[Callable[[int], int]] | None = None):
        """The rank's planner for batches made with ``loader``'s settings (:meth:`loader_settings`;
        ``episode_nbytes``: each part's sizes; None: this process's, :meth:`episode_sizes`)."""
        raise NotImplementedError

    def episode_sizes(self) -> list[EpisodeSizes]:
        """Each part's episode sizes in this process (:class:`~lerobotstream.planner._sizes.EpisodeSizes`:
        an episode's exact synthesized bytes, computed when first asked — the part's index is
        opened then — and kept): what planners built outside an iterator (``state_dict``,
        ``load_state_dict``, ``resume_info``) replay a byte budget with."""
        if self._sizes is None or self._sizes[0] != os.getpid():
            self._sizes = (os.getpid(), [EpisodeSizes(self._part_size(d)) for d in range(self._part_count())])
        return self._sizes[1]

    def _part_size(self, d: int) -> Callable[[int], int]:
        return lambda ep: self._process_readers().sizes[d](ep)

    def _positioned(self, planner):
        """``planner`` at this stream's resume position (its one ``Position``, handed whole: epoch,
        samples, elastic origin, shipped remainders)."""
        planner.place(self._resume.at)
        return planner

    def _rank_planner(self, loader: LoaderSettings | int, sizes: Sequence[EpisodeSizes] | None = None):
        """The one place the core gets a planner: the rank's for ``loader``'s settings, at this
        stream's resume position (``sizes``: an iterator's, else this process's)."""
        return self._positioned(self._planner(loader, sizes))

    # --- resume -----------------------------------------------------------------------------------
    @property
    def samples_consumed(self) -> int:
        """Samples of this rank consumed since the current epoch (or loaded state) began: the loaded
        count plus the items this process yielded (exact with ``num_workers=0``). Set it from the
        training loop with DataLoader workers (``ds.samples_consumed = step * batch_size``)."""
        return self._resume.at.samples + self._resume.yielded

    @samples_consumed.setter
    def samples_consumed(self, value: int) -> None:
        self._resume.move(self._resume.at.epoch, check_count("samples_consumed", value), counted=True)

    @property
    def epoch(self) -> int:
        """The epoch the next iterator plays (an int >= 0): ``set_epoch``'s, or after
        ``load_state_dict`` the epoch the state resumes — the checkpoint's epoch, or the next one
        when its count covered the whole epoch. With :attr:`samples_consumed` it is where a
        resumed training loop goes on counting (docs/resume.md). Endless streams
        (``repeat=True``): the epoch their count runs from (each DataLoader worker rolls into
        later epochs on its own; ``resume_info()["epoch"]`` is the pass an elastic resume plays)."""
        return self._resume.at.epoch

    @property
    def resume_changes(self) -> list[str]:
        """The settings the loaded state changed (an elastic resume; ``[]``: none, or no state)."""
        return list(self._resume.changes)

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first sample (its own seeded order).

        Raises:
            StreamingConfigError: ``epoch`` is not an int >= 0 (a ValueError naming ``epoch``).
        """
        self._resume.move(check_epoch(epoch))

    @property
    def position(self) -> StreamPosition:
        """Where the next iterator starts (:class:`StreamPosition`: the epoch and
        :attr:`samples_consumed`)."""
        return StreamPosition(self._resume.at.epoch, self.samples_consumed)

    def seek(self, epoch: int, samples: int = 0) -> None:
        """Move to ``samples`` consumed samples of ``epoch`` (ints >= 0): the next iterator (and
        :meth:`state_dict`) starts there. A loader that counts what it handed out
        (``StreamLoader``) keeps the stream's position with it.

        Raises:
            StreamingConfigError: ``epoch`` or ``samples`` is negative (a ValueError naming it).
        """
        for name, v in (("epoch", epoch), ("samples", samples)):
            if v < 0:
                raise StreamingConfigError(
                    f"{name} must be >= 0, got {v} (epoch={epoch}, samples={samples})", option=name, value=v
                )
        self._resume.move(epoch, samples, counted=True)

    def prepare(self, loader: LoaderSettings | int | None = None) -> StreamPosition:
        """Get ready to iterate with ``loader``'s settings — a loader's :class:`LoaderSettings`, or
        a ``DataLoader``'s worker count with the options' batch settings (None: the options') —
        and say from where.

        A state loaded for another worker count, ``batch_size`` or ``drop_last`` than these is
        replanned here (0 and 1 workers are one shard either way; elastic when they differ from the
        checkpoint's): the stream adopts the remainder of the epoch planned for these settings, so
        the returned position is the remainder's. A ``DataLoader`` worker count other than the
        options' ``num_workers`` then warns (``state_dict()`` describes the options' count).

        Returns:
            StreamPosition: where the shards start (pass it to :meth:`shard`): the epoch and the
            samples loaded or set (:meth:`seek`, :meth:`load_state_dict`, :meth:`set_epoch`;
            not what this process's own iterators yielded since).

        Raises:
            ResumeStateError: the loaded state cannot be resumed with these settings.
        """
        self._fit_loader(self.loader_settings(loader), warn=not isinstance(loader, LoaderSettings))
        return StreamPosition(self._resume.at.epoch, self._resume.at.samples)

    def shard(
        self,
        worker: int | None,
        loader: LoaderSettings | int,
        *,
        epoch: int,
        samples: int,
        in_process: bool,
        slots: Callable[[int], Any] | None = None,
    ) -> StreamShard:
        """Shard ``worker`` of ``loader``'s ``num_workers`` (a :class:`LoaderSettings`, or a
        ``DataLoader``'s worker count with the options' batch settings; None, 0: the one stream)
        from ``samples`` consumed samples of ``epoch`` (the rank's count: :meth:`prepare`'s
        position): the items a ``DataLoader`` worker ``worker`` of that many yields from there,
        with its per-process state made in this process (never a parent's).

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
        ls = self.loader_settings(loader)
        readers = self._fresh_readers() if in_process and ls.num_workers > 0 else self._process_readers()
        items = self._iter_worker(worker, ls, int(epoch), int(samples), readers, in_process=in_process, slots=slots)
        return StreamShard(self, worker, ls.num_workers, readers, items, stats=lambda: self._stats_of(readers))

    def state_dict(
        self,
        samples_consumed: int | None = None,
        *,
        batches_consumed: int | None = None,
        loader: LoaderSettings | None = None,
    ) -> dict[str, Any]:
        """Resume state of this rank: the one resume state (``planner._state.StreamState``, docs/resume.md).

        Args:
            samples_consumed: samples the training loop consumed from this rank since the epoch
                (or the loaded state's epoch) began — the sum of the consumed batches' sizes.
            batches_consumed: alternatively, batches consumed (converted by replaying the
                DataLoader's batch turns, exact with short last batches).
            Neither: :attr:`samples_consumed` — exact with ``num_workers=0``; with DataLoader
                workers only once the training loop set it (``ds.samples_consumed = n``).
            loader: the settings the batches were made with (a ``StreamLoader``'s); None: the
                options' (:meth:`loader_settings`).

        Raises:
            StreamingConfigError: a count that breaks the resume state's rule (an int >= 0 within
                its bound; no bool, float or string), or no count while DataLoader workers consume
                the stream (``num_workers > 0``) and the training loop has not set one: this
                process never sees the workers' progress, so its own count would replay consumed
                samples on resume.
        """
        from lerobotstream.planner._turns import replay_turns

        ls = self.loader_settings(loader)
        r = self._resume
        if (
            samples_consumed is None
            and batches_consumed is None
            and ls.num_workers > 0
            and not (r.counted or r.yielded)
        ):
            raise StreamingConfigError(
                f"state_dict() needs the training loop's count with DataLoader workers (num_workers={ls.num_workers}): "
                "this process never sees what the workers handed out, so its own count "
                f"({self.samples_consumed} since epoch {self.epoch} began) would replay consumed samples on resume. "
                "Pass samples_consumed= (the sum of the consumed batches' sizes since the epoch began) or "
                "batches_consumed=, or set ds.samples_consumed first",
                option="samples_consumed",
                value=None,
            )
        planner = self._rank_planner(ls)
        planner.samples_consumed = 0
        if samples_consumed is not None:
            samples_consumed = check_count("samples_consumed", samples_consumed)
        if batches_consumed is not None:
            given, _, _ = replay_turns(
                planner.turn_limits(),
                planner.settings.batch_size,
                batches=check_count("batches_consumed", batches_consumed),
                drop_last=ls.drop_last,
            )
            samples_consumed = sum(given)
        return planner.state_dict(
            samples_consumed=self.samples_consumed if samples_consumed is None else samples_consumed
        )

    def load_state_dict(self, state: dict[str, Any], *, loader: LoaderSettings | None = None) -> None:
        """Restore a :meth:`state_dict` (before iterating): of this topology (the same order
        continues), or of another world size, DataLoader worker count, batch size, pool size or
        byte budget (elastic resume: the epoch's unconsumed samples are replanned over this run's
        ranks and workers, then plain epochs follow; see docs/resume.md). ``resume_changes`` lists
        what changed. ``loader``: the settings the batches will be made with (a ``StreamLoader``'s;
        None: the options', the batch size the state's when the options leave it unset).

        Raises:
            ResumeStateError: another schema (an earlier or later build's state: named), an edited or
                malformed state, another stream (dataset, episodes, mixture), seed or partitions.
        """
        from lerobotstream.planner._state import StreamState

        st = StreamState.from_dict(state)
        self._resume.batch_size = st.batch_size  # what an unset batch_size option stands for now
        self._load(state, self.loader_settings(loader))

    def _load(self, state: dict[str, Any], loader: LoaderSettings) -> None:
        """Adopt ``state`` for batches made with ``loader``'s settings and this stream's options,
        and remember them (:meth:`_fit_loader` replans when they change before iterating).

        Elastic: the remainder is computed here, once (the training process, before DataLoader
        workers start; under a byte budget it sizes the episodes its replay admits, opening the
        datasets' indexes), and kept for this rank (``rank_remainders``: O(episodes)) so that the
        workers, which get it with the dataset (fork or pickle), do not compute it again."""
        import dataclasses

        from lerobotstream.planner._state import StreamState

        planner = self._planner(loader)
        fixed = state
        if {int(state["num_workers"]), loader.num_workers} <= {0, 1}:  # one shard either way: the same stream
            st = StreamState.from_dict(state)  # checked as written (digest), then restated for this loader
            fixed = dataclasses.replace(st, num_workers=loader.num_workers).to_dict()
        planner.load_state_dict(fixed)
        r = self._resume
        # a count of one or more whole finite epochs is the start of a later one (``position``), so
        # ``epoch`` / ``samples_consumed`` say where the next iterator starts
        epoch, samples = (planner.epoch, planner.samples_consumed) if planner.settings.repeat else planner.position()
        epoch, samples = int(epoch), int(samples)
        rems = planner.rank_remainders() if planner.origin is not None else None
        r.at, r.yielded, r.counted = (
            planner.at._replace(epoch=epoch, samples=samples, remainders=rems),
            0,
            False,
        )
        r.changes = list(planner.resume_changes)
        r.loaded = dict(state)
        r.planned_for = (loader, epoch, samples)

    def resume_info(self, *, loader: LoaderSettings | None = None) -> dict[str, Any] | None:
        """What an elastic resume continues (None: a plain epoch): ``epoch``, ``samples_left`` (all
        ranks) and ``samples_left_per_dataset``, ``rank_samples`` (this rank), ``unit``
        (``episodes`` or ``partitions``), ``whole``, ``started``, ``depth``, ``consumed`` (see
        ``Planner.remainder_info``); ``loader``: as :meth:`state_dict`'s."""
        return self._rank_planner(self.loader_settings(loader)).remainder_info()

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
        r = self._resume
        if nw:
            pid = os.getpid()
            if r.iter_pid != pid:
                r.iter_pid, r.iter_starts = pid, 0
            if r.iter_starts:
                epoch, samples = r.at.epoch + r.iter_starts, 0
            r.iter_starts += 1
        return epoch, samples

    def _fit_loader(self, loader: LoaderSettings, *, warn: bool) -> None:
        """Replan a loaded state whose loader settings (DataLoader worker count — 0 and 1 are one
        shard either way —, ``batch_size``, ``drop_last``) differ from ``loader``'s: the state is
        loaded again for them, as if they had been given to ``load_state_dict`` (the same order
        when they are the checkpoint's, else elastic). A ``StreamLoader`` hands its own settings to
        a dataset that may have loaded a state already; a DataLoader may run another worker count
        than the options' ``num_workers`` (``warn``: say so, ``state_dict()`` describes theirs).
        Nothing to do once the stream has moved from the loaded position (``set_epoch``, or items
        yielded in this process).

        Raises:
            ResumeStateError: the state cannot be resumed with ``loader``'s settings.
        """
        r = self._resume
        t = r.planned_for
        if t is None or (t[1], t[2]) != (r.at.epoch, r.at.samples) or r.yielded:
            return
        if not loader.plays_as(t[0]):
            own = self.options.num_workers
            if warn and not loader.plays_as(self.loader_settings()):
                import warnings

                nw = loader.num_workers
                warnings.warn(
                    f"the DataLoader runs {nw} worker(s) but the dataset was built with num_workers="
                    f"{own}: the loaded state resumes elastically for {nw}, but state_dict() in the "
                    f"training process describes {own} worker(s), so a state saved from this run "
                    f"would resume the wrong samples; pass num_workers={nw} (and max_num_shards) to the dataset",
                    RuntimeWarning,
                    stacklevel=3,
                )
            self._load(r.loaded, loader)

    def __getstate__(self) -> dict[str, Any]:
        st = dict(self.__dict__)
        st["_readers"] = None  # never ship decoders, maps or threads to a worker
        st["_sizes"] = None  # per process
        return st

    # --- per process ------------------------------------------------------------------------------
    def _process_readers(self) -> Readers:
        if self._readers is None or self._readers.pid != os.getpid():
            self._readers = self._fresh_readers()  # never reuse a parent's decoders/connections
        return self._readers

    def _fresh_readers(self) -> Readers:
        """New per-process state (a reader per part) that this stream does not keep (a shard of
        several in this process: :meth:`shard`)."""
        return Readers(self._parts())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from lerobotstream.planner._planner import current_worker

        wid, nw = current_worker()
        epoch, samples = self._iteration_start(nw)
        shard = self.shard(wid, nw, epoch=epoch, samples=samples, in_process=nw == 0)
        try:
            for item in shard.items:
                if nw == 0:  # in-process: samples_consumed counts what was yielded
                    self._resume.yielded += 1
                yield item
        finally:
            shard.close()

    def _iter_worker(
        self,
        wid: int | None,
        loader: LoaderSettings,
        epoch: int,
        samples: int,
        readers: Readers,
        *,
        in_process: bool,
        slots: Callable[[int], Any] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The items of worker ``wid`` of ``loader.num_workers`` (None, 0: the one stream)
        from (``epoch``, ``samples`` consumed by the rank), produced with ``readers``
        (:meth:`shard`'s generator; the wiring: :func:`~lerobotstream.dataset._wiring.shard_items`,
        which reads the options it needs from the stream's ``options``)."""
        planner = self._rank_planner(loader, readers.sizes)
        return shard_items(
            planner, readers, wid, epoch, samples, self.options, loader, in_process=in_process, slots=slots
        )

    # --- counters (dataset/_counters.py) --------------------------------------------------------------
    def _stats_of(self, readers: Any) -> dict[str, Any]:
        """``stats()`` of ``readers`` (this process's, or a threads-mode shard's): each stream type's own."""
        raise NotImplementedError

    def _part_stats(self, d: int, readers: Any = None) -> dict[str, Any]:
        """Part ``d``'s own counters in ``readers`` (default: this process's; see ``StreamingLeRobotDataset.stats``)."""
        return _counters.part_stats(self._readers if readers is None else readers, d)

    def _pipeline_stats(self, readers: Any = None) -> dict[str, Any]:
        """The worker's shared counters in ``readers`` (default: this process's): pipeline stage times,
        the byte cache, the decoded-GOP cache."""
        return _counters.pipeline_stats(self._readers if readers is None else readers)

    def source_stats(self) -> dict[str, Any]:
        """This process's payload-source counters (``ByteSource.stats``: ``requests``,
        ``bytes_read``, ``bytes_requested``, ``retries``, ...; bytes; a mixture's summed over its
        datasets), cheap enough to read per item (a fraction of a microsecond; ``stats()`` builds
        every counter). Empty before iterating."""
        return {} if self._readers is None else self._combine_source_stats(_counters.source_stats(self._readers))

    def _combine_source_stats(self, parts: list[dict[str, Any]]) -> dict[str, Any]:
        """One dict of the parts' source counters (the subclass's rule; a single part's as is)."""
        return parts[0] if parts else {}


def add_option_views(cls: type, skip: Sequence[str] = ()) -> type:
    """Give ``cls`` one read-only attribute per option (but ``skip`` and the names it defines
    itself): a view of ``self.options``, never a copy (``ds.byte_budget_gb`` is
    ``ds.options.byte_budget_gb``; setting one raises AttributeError: the options are frozen)."""
    for info in option_info():
        if info.name in skip or any(info.name in vars(k) for k in cls.__mro__):
            continue
        view = property(
            lambda self, name=info.name: getattr(self.options, name),
            doc=f"``options.{info.name}`` (read-only): {info.help}",
        )
        setattr(cls, info.name, view)
    return cls
