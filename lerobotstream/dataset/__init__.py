"""The streaming dataset (one dataset, or a weighted mixture): wiring, windows, ``*_is_pad``, transforms; LeRobot 0.6.1's collate.

Users import the datasets from the top level (``lerobotstream.StreamingLeRobotDataset``,
``StreamingMultiLeRobotDataset``, ``PackedCollate``); this package exports only LeRobot's collate
(``lerobot_collate_fn``, for language columns). The library and its tests import the rest from the
module that defines it (``from lerobotstream.dataset._stream import StreamCore``)."""

from lerobotstream.dataset._collate import lerobot_collate_fn

__all__ = ["lerobot_collate_fn"]
