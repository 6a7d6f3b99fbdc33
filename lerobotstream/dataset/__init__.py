"""The streaming dataset: wiring, windows, ``*_is_pad``, transforms."""

from lerobotstream.dataset._dataset import StreamingLeRobotDataset

__all__ = ["StreamingLeRobotDataset"]
