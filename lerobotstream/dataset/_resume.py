"""A stream's resume state in one rank: where the next iterator starts (its one
:class:`~lerobotstream.planner._state.Position`, handed whole to each planner the stream builds:
``Planner.place``) and what a loaded state left to replan — pure data, created with the stream
(``StreamCore.__init__``), pickled with it to DataLoader workers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lerobotstream.planner._state import Position

__all__ = ["ResumeState"]


@dataclass
class ResumeState:
    """Fields:
    at (Position): where the next iterator starts — the epoch, the samples of the rank consumed
        since it began (loaded or set), an elastic resume's origin and this rank's part of its
        remainder (computed where the state was loaded: DataLoader workers take it instead of
        computing it again). The one place the stream's position is kept.
    yielded (int): items this process yielded since then (the ``num_workers=0`` count).
    counted (bool): the training loop set the count (``samples_consumed = n`` or ``seek``) since
        the stream last moved: what ``state_dict()`` without a count may write when DataLoader
        workers, whose progress this process never sees, consume the stream.
    loaded (dict | None): the state dict as loaded (None: none loaded).
    batch_size (int | None): the loaded state's batch size (what a stream whose
        ``batch_size`` option is unset batches with; None: no state loaded).
    planned_for (tuple | None): ``(LoaderSettings, epoch, samples)``: the loader settings the
        loaded state was planned for and the position it gave (replanned when they change
        before iterating).
    changes (list[str]): the settings the loaded state changed (elastic resume).
    iter_pid (int | None), iter_starts (int): the DataLoader worker process counting its
        iterator starts, and how many (``persistent_workers``: the k-th is epoch + k).
    """

    at: Position = field(default_factory=Position)
    yielded: int = 0
    counted: bool = False
    loaded: dict[str, Any] | None = None
    batch_size: int | None = None
    planned_for: tuple[Any, int, int] | None = None
    changes: list[str] = field(default_factory=list)
    iter_pid: int | None = None
    iter_starts: int = 0

    def move(self, epoch: int, samples: int = 0, *, counted: bool = False) -> None:
        """Go to ``samples`` consumed samples of ``epoch`` (counting in this process restarts; an
        elastic origin is kept: it plays only while ``epoch`` is its epoch); ``counted``: the
        training loop's own count (set, not the start of an epoch or a loaded state's)."""
        self.at, self.yielded = self.at._replace(epoch=int(epoch), samples=int(samples)), 0
        self.counted = counted
