"""The streaming dataset: wiring, windows, ``*_is_pad``, transforms; LeRobot 0.6.1's collate."""

from lerobotstream.dataset._collate import lerobot_collate_fn
from lerobotstream.dataset._dataset import StreamingLeRobotDataset

__all__ = ["StreamingLeRobotDataset", "lerobot_collate_fn"]
