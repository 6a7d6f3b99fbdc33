"""The streaming dataset (one dataset, or a weighted mixture). Users import the datasets from the
top level (``lerobotstream.StreamingLeRobotDataset``, ...); this package exports only LeRobot's
collate (``lerobot_collate_fn``). The rest is imported from the module that defines it."""

from lerobotstream.dataset._collate import lerobot_collate_fn

__all__ = ["lerobot_collate_fn"]
