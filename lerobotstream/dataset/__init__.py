"""The streaming dataset (one dataset, or a weighted mixture): wiring, windows, ``*_is_pad``, transforms; LeRobot 0.6.1's collate."""

from lerobotstream.dataset._collate import PackedCollate, lerobot_collate_fn, packed_collate
from lerobotstream.dataset._dataset import StreamingLeRobotDataset
from lerobotstream.dataset._multi import StreamingMultiLeRobotDataset

__all__ = ["PackedCollate", "StreamingLeRobotDataset", "StreamingMultiLeRobotDataset", "lerobot_collate_fn", "packed_collate"]
