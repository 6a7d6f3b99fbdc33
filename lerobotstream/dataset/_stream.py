"""The stream core: one ``IterableDataset`` over a list of parts (datasets), shared by
:class:`~lerobotstream.StreamingLeRobotDataset` (one part) and
:class:`~lerobotstream.StreamingMultiLeRobotDataset` (one per dataset), MosaicML Streaming's shape.

It owns the rank's resume state, epochs, the per-process counters and one ``__iter__`` (worker id
→ start position → the rank's planner → :func:`~lerobotstream.dataset._wiring.shard_items`), built
on the shard interface a ``StreamLoader`` uses: :attr:`StreamCore.position`, :meth:`StreamCore.seek`,
:meth:`StreamCore.prepare`, :meth:`StreamCore.shard`. A subclass provides :meth:`_parts`,
:meth:`_planner` and ``options`` (resolved, frozen; each option also a read-only attribute:
:func:`add_option_views`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from lerobotstream.dataset._wiring import PayloadOrigin, Readers, StreamPart, shard_items
from lerobotstream.errors import StreamingConfigError
from lerobotstream.options import StreamOptions, check_epoch, check_option, option_info
from lerobotstream.planner._sizes import EpisodeSizes
from lerobotstream.planner._state import Position, StreamState, check_count
from lerobotstream.planner._streams import PlanSettings

__all__ = [
    "LoaderSettings",
    "ResumeState",
    "StreamCore",
    "StreamPart",
    "StreamPosition",
    "StreamShard",
    "add_option_views",
    "plan_settings",
]


@dataclass(frozen=True)
class LoaderSettings:
    """What batches a stream (a ``DataLoader`` or a ``StreamLoader``): the settings that fix its
    shards and batch turns, and so its resume state. ``batch_size`` (None: a loaded state's, else
    1), ``num_workers`` (0: one stream in the training process), ``drop_last``: each checked by its
    option's rule (StreamingConfigError naming it, its value and the rule); numpy ints become ints.
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
    """The planner's ``PlanSettings``: the fields named as options take ``options``' values,
    ``num_workers``, ``batch_size`` (1 when unset) and ``drop_last`` are ``loader``'s."""
    own = {f.name: getattr(options, f.name) for f in dataclasses.fields(PlanSettings) if hasattr(options, f.name)}
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
    """Where a stream of one rank is: ``epoch`` and ``samples`` of the rank consumed since it began."""

    epoch: int
    samples: int


@dataclass
class ResumeState:
    """A stream's resume state in one rank: pure data, pickled with the stream to DataLoader workers."""

    #: where the next iterator starts (epoch, samples, an elastic origin and this rank's part of its
    #: remainder, computed where the state was loaded), handed whole to each planner (``Planner.place``)
    at: Position = field(default_factory=Position)
    yielded: int = 0  # items this process yielded since then (the ``num_workers=0`` count)
    #: the training loop set the count (``samples_consumed = n``, ``seek``) since the stream last moved
    counted: bool = False
    loaded: dict[str, Any] | None = None  # the state dict as loaded
    batch_size: int | None = None  # the loaded state's (what an unset ``batch_size`` option batches with)
    #: ``(LoaderSettings, epoch, samples)`` the loaded state was planned for, and the position it gave
    planned_for: tuple[Any, int, int] | None = None
    changes: list[str] = field(default_factory=list)  # the settings the loaded state changed (elastic)
    #: the DataLoader worker process counting its iterator starts, and how many (``persistent_workers``)
    iter_pid: int | None = None
    iter_starts: int = 0

    def move(self, epoch: int, samples: int = 0, *, counted: bool = False) -> None:
        """Go to ``samples`` consumed samples of ``epoch`` (counting in this process restarts; an
        elastic origin is kept: it plays only while ``epoch`` is its epoch); ``counted``: the
        training loop's own count."""
        self.at, self.yielded = replace(self.at, epoch=int(epoch), samples=int(samples)), 0
        self.counted = counted


class StreamShard:
    """One shard of a stream, iterated in the process that made it (:meth:`StreamCore.shard`):
    ``items`` (in planner order; its pipeline threads start at the first ``next()``), ``worker``
    and ``num_workers`` (None, 0: the one stream)."""

    def __init__(
        self, core: StreamCore, worker: int | None, num_workers: int, readers: Readers, items: Iterator[dict[str, Any]]
    ) -> None:
        self.worker, self.num_workers, self.items = worker, num_workers, items
        self._core, self._readers = core, readers

    def source_stats(self) -> dict[str, Any]:
        """This shard's payload-source counters (the stream's ``source_stats()`` keys)."""
        return self._core._source_counters(self._readers)

    def stats(self) -> dict[str, Any]:
        """This shard's counters: the keys of its stream's ``stats()``, for this shard's readers."""
        return self._core._stats_of(self._readers)

    def close(self) -> None:
        """Stop the shard: threads joined, caches closed, decoders released (idempotent)."""
        self.items.close()

    def abort(self) -> None:
        """Wake the shard's waits from another thread (a loader's stall watch): its byte cache
        closes, so the thread iterating ``items`` leaves with its error."""
        cache = self._readers.cache
        if cache is not None:
            cache.close()


class StreamCore(torch.utils.data.IterableDataset):
    """Resume state, epochs and the one iterator of a stream of one rank (see the module doc)."""

    #: the stream's options, resolved and frozen (:meth:`StreamOptions.resolved`; set by the subclass)
    options: StreamOptions

    def __init__(self) -> None:
        super().__init__()
        self._resume = ResumeState()
        self._readers: Readers | None = None  # this process's readers
        self._origin: tuple[int, PayloadOrigin] | None = None  # (pid, what every reader of this process counts into)
        self._sizes: tuple[int, list[EpisodeSizes]] | None = None  # (pid, each part's sizes)

    def loader_settings(self, loader: LoaderSettings | int | None = None) -> LoaderSettings:
        """``loader`` when a :class:`LoaderSettings`, else the options' with ``loader`` workers when
        an int (a ``DataLoader``'s); a batch size left unset is the loaded state's."""
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
        raise NotImplementedError

    def _planner(self, loader: LoaderSettings | int, episode_nbytes: Sequence[Callable[[int], int]] | None = None):
        raise NotImplementedError

    def _stats_of(self, readers: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _combine_source_stats(self, parts: list[dict[str, Any]]) -> dict[str, Any]:
        return parts[0] if parts else {}

    def _source_counters(self, readers: Readers | None) -> dict[str, Any]:
        """``source_stats()`` of ``readers`` (None: none yet): the payload-source counters (a mixture's
        summed) and the process's MP4 payload bytes by origin (``_wiring.ORIGIN_KEYS``, every epoch summed)."""
        mine = self._origin is not None and self._origin[0] == os.getpid()
        origin = self._origin[1].as_dict() if mine else {}  # first: its store bytes are already in ``bytes_read``
        return {**(self._combine_source_stats(readers.source_stats()) if readers is not None else {}), **origin}

    def episode_sizes(self) -> list[EpisodeSizes]:
        """Each part's ``EpisodeSizes`` in this process (computed when first asked, then kept):
        what planners built outside an iterator replay a byte budget with."""
        if self._sizes is None or self._sizes[0] != os.getpid():
            sizes = [
                EpisodeSizes(lambda ep, d=d: self._process_readers().sizes[d](ep)) for d in range(self._part_count())
            ]
            self._sizes = (os.getpid(), sizes)
        return self._sizes[1]

    def _rank_planner(self, loader: LoaderSettings | int, sizes: Sequence[EpisodeSizes] | None = None):
        """The rank's planner for ``loader`` at this stream's resume position."""
        planner = self._planner(loader, sizes)
        planner.place(self._resume.at)
        return planner

    # --- resume -----------------------------------------------------------------------------------
    @property
    def samples_consumed(self) -> int:
        """Samples of this rank consumed since the epoch (or loaded state) began: the loaded count
        plus the items this process yielded (exact with ``num_workers=0``); with DataLoader
        workers, set it from the training loop (``ds.samples_consumed = step * batch_size``)."""
        return self._resume.at.samples + self._resume.yielded

    @samples_consumed.setter
    def samples_consumed(self, value: int) -> None:
        self._resume.move(self._resume.at.epoch, check_count("samples_consumed", value), counted=True)

    @property
    def epoch(self) -> int:
        """The epoch the next iterator plays: ``set_epoch``'s, or the one a loaded state resumes
        (the next when its count covered the whole epoch; docs/resume.md)."""
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
        """Where the next iterator starts (the epoch, :attr:`samples_consumed`)."""
        return StreamPosition(self._resume.at.epoch, self.samples_consumed)

    def seek(self, epoch: int, samples: int = 0) -> None:
        """Move to ``samples`` consumed samples of ``epoch``: the next iterator (and
        :meth:`state_dict`) starts there. StreamingConfigError: either is not an int >= 0 (named;
        ``set_epoch``'s and ``state_dict``'s rules)."""
        self._resume.move(check_epoch(epoch), check_count("samples", samples), counted=True)

    def prepare(self, loader: LoaderSettings | int | None = None) -> StreamPosition:
        """Get ready to iterate with ``loader``'s settings (see :meth:`loader_settings`) and return
        where the shards start (the samples loaded or set, not what this process yielded since).

        A loaded state whose settings differ from these (worker count, ``batch_size``,
        ``drop_last``; 0 and 1 workers are one shard) is loaded again for them, elastic unless
        they are the checkpoint's, until the stream moves from the loaded position. A DataLoader
        worker count other than the options' warns (``state_dict()`` describes the options').
        ResumeStateError: the state cannot be resumed with these settings. StreamingConfigError:
        ``equalize="drop"`` over 2 or more workers with no batch size (the option's, a loaded
        state's or a ``StreamLoader``'s): the ranks' batch counts cannot be equalized without it.
        """
        ls, r = self.loader_settings(loader), self._resume
        o = self.options
        if o.equalize == "drop" and not o.repeat and ls.batch_size is None and ls.num_workers > 1:
            raise StreamingConfigError(
                f"equalize='drop' over {ls.num_workers} DataLoader workers needs the DataLoader's batch size, "
                "which the dataset cannot see: pass batch_size=<the DataLoader's batch_size> to the dataset "
                "(and drop_last=True when the DataLoader drops its last batches); the worker count is the "
                "DataLoader's own",
                option="batch_size",
                value=None,
            )
        t = r.planned_for
        if t is not None and (t[1], t[2]) == (r.at.epoch, r.at.samples) and not r.yielded and not ls.plays_as(t[0]):
            own = self.options.num_workers
            if not isinstance(loader, LoaderSettings) and not ls.plays_as(self.loader_settings()):
                import warnings

                nw = ls.num_workers
                warnings.warn(
                    f"the DataLoader runs {nw} worker(s) but the dataset was built with num_workers="
                    f"{own}: the loaded state resumes elastically for {nw}, but state_dict() in the "
                    f"training process describes {own} worker(s), so a state saved from this run "
                    f"would resume the wrong samples; pass num_workers={nw} (and max_num_shards) to the dataset",
                    RuntimeWarning,
                    stacklevel=2,
                )
            self._load(r.loaded, ls)
        return StreamPosition(r.at.epoch, r.at.samples)

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
        """Shard ``worker`` of ``loader``'s ``num_workers`` (None, 0: the one stream) from ``samples``
        consumed samples of ``epoch`` (:meth:`prepare`'s position): what that DataLoader worker
        yields, with per-process state made in this process. ``in_process``: iterated in the
        training process (transforms on the iterating thread; with ``num_workers`` > 0 each
        shard gets state of its own: threads mode). ``slots(n)``: where the n-th item's frames may
        be written (``_assemble.SlotFn``). Nothing is fetched before the first ``next``, which
        raises ByteBudgetError, fetch and decode errors.
        """
        ls = self.loader_settings(loader)
        if in_process and ls.num_workers > 0:
            readers = Readers(self._parts(), self._process_origin())
        else:
            readers = self._process_readers()
        planner = self._rank_planner(ls, readers.sizes)
        items = shard_items(
            planner, readers, worker, int(epoch), int(samples), self.options, ls, in_process=in_process, slots=slots
        )
        return StreamShard(self, worker, ls.num_workers, readers, items)

    def state_dict(
        self,
        samples_consumed: int | None = None,
        *,
        batches_consumed: int | None = None,
        loader: LoaderSettings | None = None,
    ) -> dict[str, Any]:
        """Resume state of this rank (``planner._state.StreamState``, docs/resume.md).

        Args:
            samples_consumed: samples consumed from this rank since the epoch (or the loaded
                state's) began; or ``batches_consumed`` (converted by replaying the batch turns);
                neither: :attr:`samples_consumed`.
            loader: the settings the batches were made with (None: the options').

        Raises:
            StreamingConfigError: a count that breaks its rule, or no count while DataLoader
                workers consume the stream and the training loop has not set one.
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
        planner.at = replace(planner.at, samples=0)
        if samples_consumed is not None:
            samples_consumed = check_count("samples_consumed", samples_consumed)
        if batches_consumed is not None:
            given, _, _ = replay_turns(
                planner.current_pass().turn_limits(),
                planner.settings.batch_size,
                batches=check_count("batches_consumed", batches_consumed),
                drop_last=ls.drop_last,
            )
            samples_consumed = sum(given)
        return planner.state_dict(
            samples_consumed=self.samples_consumed if samples_consumed is None else samples_consumed
        )

    def load_state_dict(self, state: dict[str, Any], *, loader: LoaderSettings | None = None) -> None:
        """Restore a :meth:`state_dict` before iterating: of this topology (the same order
        continues), or of another world size, worker count, batch size, pool size or byte budget
        (elastic: the epoch's unconsumed samples replanned over this run, docs/resume.md;
        ``resume_changes`` lists what changed). ``loader``: as :meth:`state_dict`'s.

        Raises:
            ResumeStateError: another schema (named), an edited or malformed state, another stream
                (dataset, episodes, mixture), seed or partitions.
        """
        self._resume.batch_size = StreamState.from_dict(state).batch_size
        self._load(state, self.loader_settings(loader))

    def _load(self, state: dict[str, Any], loader: LoaderSettings) -> None:
        """Adopt ``state`` for ``loader``'s settings; an elastic remainder is computed here, once,
        and kept for this rank (DataLoader workers get it with the dataset)."""
        planner = self._planner(loader)
        fixed = state
        if {int(state["num_workers"]), loader.num_workers} <= {0, 1}:  # one shard either way: the same stream
            st = StreamState.from_dict(state)  # checked as written (digest), then restated for this loader
            fixed = dataclasses.replace(st, num_workers=loader.num_workers).to_dict()
        planner.load_state_dict(fixed)
        r = self._resume
        # a count of one or more whole finite epochs is the start of a later one (``position``)
        epoch, samples = (planner.at.epoch, planner.at.samples) if planner.settings.repeat else planner.position()
        epoch, samples = int(epoch), int(samples)
        rems = planner.rank_remainders()
        r.at, r.yielded, r.counted = (
            replace(planner.at, epoch=epoch, samples=samples, remainders=rems),
            0,
            False,
        )
        r.changes = list(planner.resume_changes)
        r.loaded = dict(state)
        r.planned_for = (loader, epoch, samples)

    def resume_info(self) -> dict[str, Any] | None:
        """What an elastic resume continues (``Planner.remainder_info``, docs/resume.md; None: a
        plain epoch), for the settings the loaded state was fitted to: a ``StreamLoader``'s (or
        any :meth:`prepare`'s) once it replanned the state for them, else the options' (the
        settings :attr:`resume_changes` compares with the checkpoint's)."""
        planned = self._resume.planned_for
        return self._rank_planner(planned[0] if planned is not None else self.loader_settings()).remainder_info()

    def __getstate__(self) -> dict[str, Any]:
        st = dict(self.__dict__)
        st["_readers"] = None  # never ship decoders, maps or threads to a worker
        st["_sizes"] = None  # per process
        st["_origin"] = None  # per process
        return st

    # --- per process ------------------------------------------------------------------------------
    def _process_readers(self) -> Readers:
        if self._readers is None or self._readers.pid != os.getpid():
            self._readers = Readers(self._parts(), self._process_origin())  # never reuse a parent's decoders
        return self._readers

    def _process_origin(self) -> PayloadOrigin:
        """What every reader of this stream in this process counts its payload by origin into."""
        if self._origin is None or self._origin[0] != os.getpid():
            self._origin = (os.getpid(), PayloadOrigin())
        return self._origin[1]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from lerobotstream.planner._planner import current_worker

        wid, nw = current_worker()
        start = self.prepare(nw)
        epoch, samples = start.epoch, start.samples
        r = self._resume
        if nw:  # persistent_workers: this worker's copy never sees set_epoch; its k-th iterator plays epoch + k
            if r.iter_pid != os.getpid():
                r.iter_pid, r.iter_starts = os.getpid(), 0
            if r.iter_starts:
                epoch, samples = r.at.epoch + r.iter_starts, 0
            r.iter_starts += 1
        shard = self.shard(wid, nw, epoch=epoch, samples=samples, in_process=nw == 0)
        try:
            for item in shard.items:
                if nw == 0:  # in-process: samples_consumed counts what was yielded
                    self._resume.yielded += 1
                yield item
        finally:
            shard.close()

    def source_stats(self) -> dict[str, Any]:
        """This process's payload counters, cheap enough to read per item (empty before iterating):
        the payload source's (``ByteSource.stats``, bytes; a mixture's summed) and its MP4 payload
        bytes by origin, every epoch and dataset summed: ``store_bytes`` (read from the store),
        ``disk_cache_bytes`` (from the node's disk cache), ``reused_bytes`` (admitted again, payload
        still in memory), ``needed_bytes`` (the admitted episodes' spans): ``stats()["bytes_by_epoch"]``
        summed."""
        return self._source_counters(self._readers)


def add_option_views(cls: type, skip: Sequence[str] = ()) -> type:
    """Give ``cls`` one read-only attribute per option (but ``skip`` and the names it defines):
    a view of ``self.options`` (setting one raises AttributeError)."""
    for info in option_info():
        if info.name in skip or any(info.name in vars(k) for k in cls.__mro__):
            continue
        view = property(
            lambda self, name=info.name: getattr(self.options, name),
            doc=f"``options.{info.name}`` (read-only): {info.help}",
        )
        setattr(cls, info.name, view)
    return cls
