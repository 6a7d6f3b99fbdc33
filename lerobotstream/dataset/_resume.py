"""A stream's resume state in one rank: where the next iterator starts and what a loaded state
left to replan — pure data, created with the stream (``StreamCore.__init__``), pickled with it to
DataLoader workers; the planner turns it into a pass (``planner.Planner.seek``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ResumeState"]


@dataclass
class ResumeState:
    """Fields:
    epoch (int): the epoch the next iterator plays (>= 0).
    samples (int): samples of the rank consumed since ``epoch`` began (loaded or set).
    yielded (int): items this process yielded since then (the ``num_workers=0`` count).
    loaded (dict | None): the state dict as loaded (None: none loaded).
    batch_size (int | None): the loaded state's batch size (what a stream whose
        ``batch_size`` option is unset batches with; None: no state loaded).
    planned_for (tuple | None): ``(LoaderSettings, epoch, samples)``: the loader settings the
        loaded state was planned for and the position it gave (replanned when they change
        before iterating).
    origin (dict | None), origin_epoch (int | None): an elastic resume's origin (the state whose
        unconsumed samples epoch ``origin_epoch`` replays).
    remainders (list | None): this rank's part of that remainder, computed where the state was
        loaded (what DataLoader workers take instead of computing it again).
    changes (list[str]): the settings the loaded state changed (elastic resume).
    iter_pid (int | None), iter_starts (int): the DataLoader worker process counting its
        iterator starts, and how many (``persistent_workers``: the k-th is epoch + k).
    """

    epoch: int = 0
    samples: int = 0
    yielded: int = 0
    loaded: dict[str, Any] | None = None
    batch_size: int | None = None
    planned_for: tuple[Any, int, int] | None = None
    origin: dict[str, Any] | None = None
    origin_epoch: int | None = None
    remainders: list[Any] | None = None
    changes: list[str] = field(default_factory=list)
    iter_pid: int | None = None
    iter_starts: int = 0

    def move(self, epoch: int, samples: int = 0) -> None:
        """Go to ``samples`` consumed samples of ``epoch`` (counting in this process restarts)."""
        self.epoch, self.samples, self.yielded = int(epoch), int(samples), 0
