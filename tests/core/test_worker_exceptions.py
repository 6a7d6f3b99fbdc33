"""What a foreign exception (a user's collate function or image transform) becomes when it is
raised in a shard: the behaviour docs/errors.md ("Exceptions from your own code") states, pinned
for both StreamLoader modes and torch's DataLoader. A worker that dies is the only
``LoaderWorkerError``; an exception is never turned into one."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from lerobotstream.errors import LoaderWorkerError, worker_error


class CollateBoom(Exception):
    """A user's own error class (importable: it pickles)."""


class TwoArgs(Exception):
    """An error class that cannot be rebuilt from its message alone."""

    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")


def collate_boom(items):
    raise CollateBoom("collate says no")


def collate_two_args(items):
    raise TwoArgs("x", "y")


def transform_boom(frames):
    return 1 / 0


def _stream(root, **kw):
    from lerobotstream import StreamingLeRobotDataset

    return StreamingLeRobotDataset(root=root, episode_pool_size=2, **kw)


def _first_batch(loader):
    return next(iter(loader))


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_stream_loader_reraises_the_users_exception_as_itself(small_dataset, mode):
    from lerobotstream.loader import StreamLoader

    with pytest.raises(CollateBoom, match=r"^collate says no$"):
        _first_batch(StreamLoader(_stream(small_dataset), 4, num_workers=2, mode=mode, collate_fn=collate_boom))
    with pytest.raises(ZeroDivisionError, match=r"^division by zero$"):
        _first_batch(StreamLoader(_stream(small_dataset, image_transforms=transform_boom), 4, num_workers=2, mode=mode))


def test_stream_loader_exception_that_does_not_pickle(small_dataset):
    """Processes mode sends the exception object through a pipe: one that cannot be rebuilt
    from its pickle comes back as RuntimeError naming its type, message and the worker's
    traceback; threads mode hands over the object itself."""
    from lerobotstream.loader import StreamLoader

    with pytest.raises(RuntimeError, match=r"^TwoArgs: x/y\nTraceback") as info:
        _first_batch(
            StreamLoader(_stream(small_dataset), 4, num_workers=2, mode="processes", collate_fn=collate_two_args)
        )
    assert not isinstance(info.value, LoaderWorkerError)
    with pytest.raises(TwoArgs, match=r"^x/y$"):
        _first_batch(
            StreamLoader(_stream(small_dataset), 4, num_workers=2, mode="threads", collate_fn=collate_two_args)
        )


def test_dataloader_workers_follow_torchs_rule(small_dataset):
    """torch rebuilds a worker's exception as ``type(exc)(msg)`` with its "Caught ... in
    DataLoader worker process N" preamble (RuntimeError when the type cannot take one message);
    ``errors.worker_error`` gives the original message back."""
    with pytest.raises(CollateBoom) as info:
        _first_batch(DataLoader(_stream(small_dataset), batch_size=4, num_workers=1, collate_fn=collate_boom))
    assert str(info.value).startswith("Caught CollateBoom in DataLoader worker process 0.\nOriginal Traceback")
    original = worker_error(info.value)
    assert type(original) is CollateBoom and str(original) == "collate says no (in DataLoader worker process 0)"
    with pytest.raises(ZeroDivisionError, match=r"^Caught ZeroDivisionError in DataLoader worker process 0"):
        _first_batch(DataLoader(_stream(small_dataset, image_transforms=transform_boom), batch_size=4, num_workers=1))
    with pytest.raises(RuntimeError, match=r"^Caught TwoArgs in DataLoader worker process 0"):
        _first_batch(DataLoader(_stream(small_dataset), batch_size=4, num_workers=1, collate_fn=collate_two_args))
