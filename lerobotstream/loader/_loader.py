"""``StreamLoader``: the ``DataLoader`` of our streams, without the DataLoader's process boundary."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from lerobotstream.dataset._wiring import PROCESS_KEYS, one_per_process
from lerobotstream.errors import ResumeStateError, StreamingConfigError
from lerobotstream.loader._batch import known_collate
from lerobotstream.loader._threads import STALL_WARNING_S, StallWatch, thread_batches
from lerobotstream.options import check_option, checked_keywords, is_int

__all__ = ["StreamLoader", "check_context", "choose_mode", "sum_stats", "usable_cpus", "MODES"]

log = logging.getLogger("lerobotstream.loader")

MODES = ("auto", "threads", "processes")
#: usable CPUs from which ``auto`` picks processes mode (tools/bench.py's StreamLoader rows)
PROCESSES_MIN_CPUS = 8
#: the loader state's schema: ``{"schema", "stream": <the stream's state>, "batches", "mode"}``
_STATE_SCHEMA = "lerobotstream.loader/2"


def usable_cpus() -> int:
    """CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where absent)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def sum_stats(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Counters of several shards as one: numbers and dicts of numbers summed (``first_item_s``:
    the earliest; ``frames_decoded_per_returned`` recomputed; the counters a process's shards
    share, ``PROCESS_KEYS`` (source counters, set-up seconds), once per process), anything else
    the first part's."""
    out: dict[str, Any] = {}
    per_process = one_per_process(parts)
    for k, v in parts[0].items():
        if k == "pid":
            continue
        vals = [p.get(k) for p in (per_process if k in PROCESS_KEYS else parts)]
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
            out[k] = min(vals) if k == "first_item_s" else sum(vals)
        elif all(isinstance(x, dict) for x in vals) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v.values()
        ):
            out[k] = {sk: sum(x.get(sk, 0) for x in vals) for sk in v}
        else:
            out[k] = v
    fr = out.get("frames_returned")
    if "frames_decoded_per_returned" in out:
        out["frames_decoded_per_returned"] = out["frames_decoded"] / fr if fr else None
    return out


def check_context(context: Any) -> Any:
    """``context`` if the DataLoader's ``multiprocessing_context`` rule accepts it: None, a start
    method this platform has (``multiprocessing.get_all_start_methods()``) or a multiprocessing
    context object.

    Raises:
        StreamingConfigError: anything else (naming ``multiprocessing_context``, the value and the
            allowed ones).
    """
    import multiprocessing
    from multiprocessing.context import BaseContext

    if context is None or isinstance(context, BaseContext):
        return context
    methods = multiprocessing.get_all_start_methods()
    if isinstance(context, str) and context in methods:
        return context
    raise StreamingConfigError(
        f"StreamLoader: multiprocessing_context must be None, one of this platform's start methods "
        f"({', '.join(map(repr, methods))}) or a multiprocessing context (multiprocessing.get_context(...)), "
        f"got {context!r}",
        option="multiprocessing_context",
        value=context,
    )


def choose_mode(num_workers: int, cpus: int | None = None) -> tuple[str, str]:
    """``(mode, reason)`` ``auto`` picks for ``num_workers`` shards on ``cpus`` usable CPUs: threads
    with 0 workers or below :data:`PROCESSES_MIN_CPUS` CPUs, else processes."""
    cpus = usable_cpus() if cpus is None else int(cpus)
    if num_workers == 0:
        return "threads", "num_workers=0: one stream in the training process"
    if cpus < PROCESSES_MIN_CPUS:
        return "threads", (
            f"{cpus} usable CPU(s) < {PROCESSES_MIN_CPUS}: decode threads release the GIL, "
            "worker processes would only add the process boundary"
        )
    return "processes", (
        f"{cpus} usable CPUs >= {PROCESSES_MIN_CPUS} and num_workers={num_workers}: "
        "the shards' Python runs beside the training step's"
    )


class StreamLoader:
    """A ``torch.utils.data.DataLoader`` for :class:`~lerobotstream.StreamingLeRobotDataset` and
    :class:`~lerobotstream.StreamingMultiLeRobotDataset`: the same batches, made without a fresh
    shared-memory file per batch, and resumable by itself.

    Batches: the keys, key order, values, dtypes and shapes of ``DataLoader(dataset, batch_size,
    num_workers=num_workers, drop_last=drop_last, collate_fn=collate_fn)``, in its order (batch j
    is worker ``j mod N``'s, skipping workers that ended). With ``image_transforms`` in threads mode
    the random draws are not the DataLoader's (values differ, keys and shapes do not). A batch you
    keep is never overwritten.

    Args:
        dataset: a lerobotstream stream (handed ``batch_size``, ``num_workers`` and ``drop_last`` as
            a :class:`~lerobotstream.dataset._stream.LoaderSettings`, ``loader.settings``), or a
            wrapper whose ``dataset`` is a stream and whose ``wrap_items(items, worker,
            num_workers, source_stats)`` maps each shard's items where the shard runs
            (``lerobotstream-train``'s ``TrainingStream``; with the known collates its small keys
            are ``IN_BATCH`` markers).
        batch_size (int): samples per batch, >= 1.
        num_workers (int): shards, as a DataLoader's workers (0: one stream), 0 to 1024.
        mode: ``"threads"`` (every shard in the training process), ``"processes"`` (one worker
            process per shard, batches through a ring of shared-memory slots) or ``"auto"``
            (:func:`choose_mode`, logged with its reason). With 0 workers always threads.
        pin_memory (bool): batches' tensors in pinned memory (with CUDA; ignored without).
        drop_last (bool): each shard's short last batch is dropped (the DataLoader's rule).
        prefetch_batches (int | None): processes: ring slots per worker, default 2 (the
            DataLoader's ``prefetch_factor``); unused by threads.
        collate_fn: None (``default_collate``), ``lerobot_collate_fn`` (ours or LeRobot's),
            ``packed_collate`` (its inner function: nothing is packed), or any function of a list
            of items.
        multiprocessing_context: processes: None (multiprocessing's default), a start method this
            platform has (``"spawn"``, ``"fork"``, ``"forkserver"``: ``multiprocessing.get_all_start_methods()``)
            or a multiprocessing context object; checked in either mode, unused by threads.
        timeout (float | None): seconds to wait for one batch of a worker or shard (the
            DataLoader's ``timeout``); past it the iterator raises
            :class:`~lerobotstream.errors.LoaderWorkerError` naming it, its PID and how long it
            stalled. 0: no timeout, a wait of :attr:`stall_warning_s` is named in one warning.
            None: the stream's ``loader_timeout_s`` option (default 0).

    Resume: :meth:`state_dict` / :meth:`load_state_dict` (torchdata's ``StatefulDataLoader``
    convention): a loader restored from a state continues with the next batch exactly.

    Raises:
        StreamingConfigError: an option's value is invalid, or ``dataset`` is not a lerobotstream stream.
        LoaderWorkerError: (iterating) a worker died or failed, or a worker or shard stalled past
            ``timeout``.
    """

    #: seconds without a batch after which a worker or shard is named in a warning (once per
    #: iterator; settable per loader)
    stall_warning_s: float = STALL_WARNING_S

    @checked_keywords("StreamLoader", what="not an argument of StreamLoader", see="docs/loader.md")
    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        *,
        num_workers: int = 0,
        mode: str = "auto",
        pin_memory: bool = False,
        drop_last: bool = False,
        prefetch_batches: int | None = None,
        collate_fn: Callable | None = None,
        multiprocessing_context: Any = None,
        timeout: float | None = None,
    ) -> None:
        from lerobotstream.dataset._stream import LoaderSettings, StreamCore

        stream, wrapper = dataset, None
        if (
            not isinstance(dataset, StreamCore)
            and isinstance(getattr(dataset, "dataset", None), StreamCore)
            and callable(getattr(dataset, "wrap_items", None))
        ):
            stream, wrapper = dataset.dataset, dataset  # e.g. lerobotstream-train's TrainingStream
        if not isinstance(stream, StreamCore):
            raise StreamingConfigError(
                f"StreamLoader: dataset must be a StreamingLeRobotDataset or "
                f"StreamingMultiLeRobotDataset, got {type(dataset).__name__}"
            )
        # the options' own rules (batch_size required here: a loader always batches)
        check_option("batch_size", batch_size, where="StreamLoader", required=True)
        check_option("num_workers", num_workers, where="StreamLoader", required=True)
        check_option("drop_last", drop_last, where="StreamLoader")
        if mode not in MODES:
            raise StreamingConfigError(f"StreamLoader: mode must be one of {', '.join(MODES)}, got {mode!r}")
        if prefetch_batches is not None and not (is_int(prefetch_batches) and prefetch_batches >= 1):
            raise StreamingConfigError(
                f"StreamLoader: prefetch_batches must be an int >= 1 or None, got {prefetch_batches!r}"
            )
        check_context(multiprocessing_context)
        if timeout is None:
            timeout = stream.options.loader_timeout_s
        check_option("loader_timeout_s", timeout, where="StreamLoader", label="timeout")
        self.dataset = dataset
        #: the stream core (``dataset``, or the stream a wrapper with ``wrap_items`` holds)
        self.stream = stream
        self._wrapper = wrapper
        #: what this loader hands the stream (its batches' settings, as data)
        self.settings = LoaderSettings(batch_size, num_workers, drop_last)
        self.collate_fn = collate_fn
        self.prefetch_batches = None if prefetch_batches is None else int(prefetch_batches)
        self.multiprocessing_context = multiprocessing_context
        self.timeout = float(timeout)
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        if mode == "auto" or num_workers == 0:
            picked, reason = choose_mode(num_workers)
            if mode == "processes":
                reason = "num_workers=0: no worker process to run (" + reason + ")"
        else:
            picked, reason = mode, f"mode={mode!r} asked"
        self.mode, self.mode_reason = picked, reason
        shards = max(1, num_workers)
        where = "in this process" if picked == "threads" else "in worker processes"
        log.info("StreamLoader %s: %d shard(s) %s (%s)", picked, shards, where, reason)
        # a loaded state of other settings is replanned now (elastic): state_dict() is right at once
        stream.prepare(self.settings)
        self._given = 0  # samples handed out by the current (or last) iterator
        self._batches = 0
        pos = stream.position
        self._start = (pos.epoch, pos.samples)
        self._iterating = False
        #: the PIDs of the current (or last) iterator's worker processes (processes mode)
        self.worker_pids: list[int] = []
        self._shards: list[Any] = []  # the current (or last) iterator's shards (threads mode)

    batch_size = property(lambda self: self.settings.batch_size)
    num_workers = property(lambda self: self.settings.num_workers)
    drop_last = property(lambda self: self.settings.drop_last)

    def __iter__(self) -> Iterator[Any]:
        ds = self.stream
        start = ds.prepare(self.settings)  # a state of other settings: its elastic remainder
        epoch, samples = start.epoch, start.samples
        self._start, self._given, self._batches = (epoch, samples), 0, 0
        # a base seed from the global RNG at each iterator, as the DataLoader draws one
        base_seed = int(torch.empty((), dtype=torch.int64).random_().item())
        collate = known_collate(self.collate_fn)
        watch = StallWatch(self.timeout, self.stall_warning_s)
        if self.mode == "threads":
            self._shards = []
            batches = thread_batches(
                ds,
                self.settings,
                epoch,
                samples,
                collate_fn=collate,
                pin=self.pin_memory,
                wrapper=self._wrapper,
                watch=watch,
                opened=self._shards,
            )
        else:
            from lerobotstream.loader._procs import ProcessBatches

            pool = ProcessBatches(
                self._wrapper or ds,
                self.settings,
                epoch,
                samples,
                collate_fn=collate,
                pin=self.pin_memory,
                ring_size=self.prefetch_batches or 2,
                context=self.multiprocessing_context,
                base_seed=base_seed,
                watch=watch,
            )
            self.worker_pids = [p.pid for p in pool.procs]
            batches = iter(pool)
        return self._counted(batches, epoch)

    def _counted(self, batches: Iterator[tuple[Any, int]], epoch: int) -> Iterator[Any]:
        self._iterating = True
        finished = False
        try:
            for batch, n in batches:
                self._given += n
                self._batches += 1
                yield batch
            finished = True
        finally:
            self._iterating = False
            batches.close()
            if finished:  # the epoch ended: a new iterator (or a restored state) starts it again
                self.stream.seek(epoch, 0)
                self._start, self._given, self._batches = (epoch, 0), 0, 0

    def stats(self) -> dict[str, Any]:
        """The current (or last) iterator's counters in threads mode: the shards' ``stats()`` as one
        (:func:`sum_stats`: the shards' work summed; the source counters and the set-up seconds
        ``metadata_s``, ``sidecar_s``, ``torchcodec_import_s``, which the shards of the training
        process share, once), each shard's own under ``shards``; empty before the first iterator
        and in processes mode."""
        parts = [s.stats() for s in self._shards]
        parts = [p for p in parts if p]
        if not parts:
            return {}
        out = sum_stats(parts)
        out["shards"] = parts
        return out

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` (its own seeded order) from its first sample at the next iterator."""
        self.stream.set_epoch(epoch)
        self._start, self._given, self._batches = (int(epoch), 0), 0, 0

    @property
    def samples_consumed(self) -> int:
        """Samples of the epoch consumed: the start position plus what this loader handed out."""
        return self._start[1] + self._given

    def state_dict(self) -> dict[str, Any]:
        """Where the stream is (the epoch, the samples of the batches the caller took), as plain
        values: the dataset's ``state_dict()`` under ``stream``, with this loader's counters."""
        ds = self.stream
        saved = ds.position
        try:
            ds.seek(self._start[0], self.samples_consumed)
            state = ds.state_dict(loader=self.settings)
        finally:
            ds.seek(saved.epoch, saved.samples)
        return {"schema": _STATE_SCHEMA, "stream": state, "batches": self._batches, "mode": self.mode}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (before iterating).

        Raises:
            ResumeStateError: not a StreamLoader state (a dataset's state, or one of another
                schema: named), or the dataset refuses it (another stream, or a setting
                that fixes the order or the batch turns differs).
        """
        if self._iterating:
            raise ResumeStateError("StreamLoader.load_state_dict: an iterator of this loader is running")
        if not isinstance(state, dict) or state.get("schema") != _STATE_SCHEMA:
            from lerobotstream.planner._state import SCHEMA

            found = state.get("schema") if isinstance(state, dict) else None
            start_over = "Start a new run from the saved weights."
            if isinstance(state, dict) and "schema" in state and found != SCHEMA:
                raise ResumeStateError(
                    f"this state has schema {found!r}; this build's StreamLoader reads {_STATE_SCHEMA!r} and "
                    f"converts no other. {start_over}"
                )
            hint = (
                "; this is a dataset's state (ds.state_dict()): load it with the dataset's load_state_dict "
                "before building the loader, or save loader.state_dict() instead"
                if found == SCHEMA
                else ""
            )
            raise ResumeStateError(
                f"not a StreamLoader state (schema {_STATE_SCHEMA!r} expected): "
                f"{sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__}"
                + (f"{hint}." if hint else f". {start_over}")
            )
        self.stream.load_state_dict(state.get("stream"), loader=self.settings)  # None: "not a stream state"
        pos = self.stream.position
        self._start, self._given, self._batches = (pos.epoch, pos.samples), 0, 0

    def __repr__(self) -> str:
        return (
            f"StreamLoader(batch_size={self.batch_size}, num_workers={self.num_workers}, mode={self.mode!r}, "
            f"pin_memory={self.pin_memory}, drop_last={self.drop_last}, timeout={self.timeout:g})"
        )
