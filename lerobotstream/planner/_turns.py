"""The DataLoader's batch turns: the one rule for which worker gives the next batch.

A ``torch.utils.data.DataLoader`` over an ``IterableDataset`` with N workers: each worker cuts its
items into batches of ``batch_size`` (its last one short, or dropped with ``drop_last``); batches
are taken from the workers in turn, in worker-id order; an exhausted worker leaves the rotation and
the others continue in the same cyclic order. :func:`take_turns` runs the rotation (``StreamLoader``),
:func:`replay_turns` counts it without running it (resume offsets, epoch sizes, ``equalize``, the
elastic remainder's counts), :func:`epoch_overlap` places an endless epoch boundary in the batches.
``tests/planner/test_turns.py`` checks them against a real DataLoader.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

from lerobotstream.errors import ResumeStateError

__all__ = ["epoch_overlap", "take_turns", "replay_turns"]

T = TypeVar("T")


def take_turns(sources: Sequence[Iterator[T]]) -> Iterator[T]:
    """The batches of ``sources`` (one iterator per worker) in the DataLoader's order; an iterator
    is asked for its next batch only when its turn comes."""
    active = list(range(len(sources)))
    pos = 0  # the active worker whose turn it is
    while active:
        try:
            x = next(sources[active[pos]])
        except StopIteration:
            active.pop(pos)
            if pos >= len(active):
                pos = 0
            continue
        yield x
        pos = (pos + 1) % len(active)


def _can_give(rem: int, batch_size: int, drop_last: bool) -> bool:
    return rem >= batch_size or (rem > 0 and not drop_last)


#: no limit (an endless worker, no ``samples`` or ``batches`` bound): more than any count
_NO_LIMIT = 1 << 62


def replay_turns(
    limits: Sequence[int | None],
    batch_size: int,
    *,
    samples: int | None = None,
    batches: int | None = None,
    drop_last: bool = False,
    one_stream: bool | None = None,
) -> tuple[list[int], int | None, int]:
    """Replay the DataLoader's batch turns until ``samples`` samples or ``batches`` batches are taken.

    Args:
        limits: samples each logical worker can give (None: endless).
        batch_size: DataLoader batch size (>= 1).
        samples: stop after this many samples (must end on a batch boundary with several workers).
        batches: stop after this many batches.
        drop_last: a worker's short last batch is dropped (the worker leaves the rotation).
        one_stream: the rank runs one stream (``num_workers <= 1``), so ``samples`` may end inside
            a batch. Default: one limit.

    Returns:
        (samples given per worker, worker that gives the next batch or None when all are
        exhausted, batches taken). Cost: O(phases x workers), whole rotations at once.

    Raises:
        ResumeStateError: ``samples`` ends inside a batch (with several workers), or exceeds what
        the workers can give.
    """
    if samples is None and batches is None:
        raise ValueError("replay_turns needs samples or batches")
    n = len(limits)
    rem = [_NO_LIMIT if x is None else x for x in limits]
    s_left = _NO_LIMIT if samples is None else samples
    b_left = _NO_LIMIT if batches is None else batches
    given, taken = [0] * n, 0
    if n == 1 and one_stream is not False and samples is not None:
        if drop_last and samples % batch_size:
            raise ResumeStateError(
                f"resume offset of {samples} samples ends inside a batch (batch size {batch_size}, "
                "drop_last=True): sample-exact resume needs the offset to be the sum of the batches the "
                "training loop consumed, with the same batch size as the checkpointed run"
            )
        if samples > rem[0]:
            raise ResumeStateError(f"resume offset {samples} exceeds the {limits[0]} samples of the epoch")
        return [samples], 0 if rem[0] > samples else None, -(-samples // batch_size)
    while True:
        active = [w for w in range(n) if _can_give(rem[w], batch_size, drop_last)]
        if not active:
            if samples is not None and s_left:
                raise ResumeStateError(
                    f"resume offset of {samples} samples exceeds the {sum(given)} samples this rank's "
                    "workers give in the epoch"
                )
            return given, None, taken
        if all(rem[w] >= batch_size for w in active):  # whole rotations at once
            a = len(active)
            k = min(min(rem[w] for w in active) // batch_size, s_left // (batch_size * a), b_left // a)
            for w in active:
                given[w] += k * batch_size
                rem[w] -= k * batch_size
            taken, s_left, b_left = taken + k * a, s_left - k * batch_size * a, b_left - k * a
        for w in range(n):  # then one rotation, batch by batch
            if not _can_give(rem[w], batch_size, drop_last):
                continue
            if s_left == 0 or b_left == 0:
                return given, w, taken
            take = min(batch_size, rem[w])
            if s_left < take:
                raise ResumeStateError(
                    f"resume offset of {samples} samples ends inside a batch of worker {w} (batch size "
                    f"{batch_size}, {len(limits)} workers): sample-exact resume with several DataLoader "
                    "workers needs the offset to be the sum of the batches the training loop consumed, "
                    "with the same batch size and worker count as the checkpointed run"
                )
            given[w] += take
            rem[w] -= take
            taken, s_left, b_left = taken + 1, s_left - take, b_left - 1


def epoch_overlap(frames: Sequence[int], batch_size: int) -> int:
    """Endless streams: samples of the next epoch yielded before the last one of this epoch, when
    worker w gives ``frames[w]`` samples of it and goes on with its next epoch in the rotation.

    With ``B = batch_size`` and J the last batch index holding this epoch's sample of the last such
    worker W, it is ``sum over w != W of max(0, n_w * B - frames[w])`` (``n_w = J + 1`` for ``w < W``,
    else ``J``), at most ``(K - 1) * (max(frames) - min(frames) + B - 1)`` for K workers; one worker: 0.
    """
    f = [int(x) for x in frames]
    if len(f) <= 1 or not any(f):
        return 0
    last = max((-(-x // batch_size) - 1, w) for w, x in enumerate(f) if x)
    J, W = last
    return sum(max(0, (J + 1 if w < W else J) * batch_size - x) for w, x in enumerate(f) if w != W)
