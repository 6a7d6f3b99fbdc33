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

__all__ = ["epoch_overlap", "take_turns", "replay_turns", "rank_given"]

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


def _can_give(rem: int | None, batch_size: int, drop_last: bool) -> bool:
    return rem is None or rem >= batch_size or (rem > 0 and not drop_last)


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
    rem = list(limits)
    given = [0] * n
    s_left, b_left, taken = samples, batches, 0
    if (n == 1 if one_stream is None else one_stream) and n == 1 and samples is not None:
        cap = rem[0]
        if drop_last and samples % batch_size:
            raise ResumeStateError(
                f"resume offset of {samples} samples ends inside a batch (batch size {batch_size}, "
                "drop_last=True): sample-exact resume needs the offset to be the sum of the batches the "
                "training loop consumed, with the same batch size as the checkpointed run"
            )
        if cap is not None and samples > cap:
            raise ResumeStateError(f"resume offset {samples} exceeds the {cap} samples of the epoch")
        nxt = 0 if _can_give(None if cap is None else cap - samples, 1, False) else None
        return [samples], nxt, -(-samples // batch_size)
    while True:
        active = [w for w in range(n) if _can_give(rem[w], batch_size, drop_last)]
        if not active:
            if s_left:
                raise ResumeStateError(
                    f"resume offset of {samples} samples exceeds the {sum(given)} samples this rank's "
                    "workers give in the epoch"
                )
            return given, None, taken
        if all(rem[w] is None or rem[w] >= batch_size for w in active):  # whole rotations at once
            finite = [rem[w] // batch_size for w in active if rem[w] is not None]
            k = min(finite) if finite else None
            if s_left is not None:
                q = s_left // (batch_size * len(active))
                k = q if k is None else min(k, q)
            if b_left is not None:
                q = b_left // len(active)
                k = q if k is None else min(k, q)
            if k:
                for w in active:
                    given[w] += k * batch_size
                    if rem[w] is not None:
                        rem[w] -= k * batch_size
                taken += k * len(active)
                if s_left is not None:
                    s_left -= k * batch_size * len(active)
                if b_left is not None:
                    b_left -= k * len(active)
        for w in range(n):  # then one rotation, batch by batch
            if not _can_give(rem[w], batch_size, drop_last):
                continue
            if s_left == 0 or b_left == 0:
                return given, w, taken
            take = batch_size if rem[w] is None else min(batch_size, rem[w])
            if s_left is not None and s_left < take:
                raise ResumeStateError(
                    f"resume offset of {samples} samples ends inside a batch of worker {w} (batch size "
                    f"{batch_size}, {len(limits)} workers): sample-exact resume with several DataLoader "
                    "workers needs the offset to be the sum of the batches the training loop consumed, "
                    "with the same batch size and worker count as the checkpointed run"
                )
            given[w] += take
            if rem[w] is not None:
                rem[w] -= take
            taken += 1
            if s_left is not None:
                s_left -= take
            if b_left is not None:
                b_left -= 1


def rank_given(
    limits: Sequence[int | None],
    batch_size: int,
    samples: int,
    batches: int,
    rank0_done: bool,
    drop_last: bool,
    *,
    one_stream: bool | None = None,
) -> list[int]:
    """Samples per worker of another rank once rank 0 took ``batches`` batches (``samples``): as
    many batches (DDP lockstep), or one stream the same samples unless rank 0 ran out."""
    if (len(limits) == 1 if one_stream is None else one_stream) and len(limits) == 1 and not rank0_done:
        cap = limits[0]
        return [samples if cap is None else min(samples, cap)]
    return replay_turns(limits, batch_size, batches=batches, drop_last=drop_last, one_stream=one_stream)[0]


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
