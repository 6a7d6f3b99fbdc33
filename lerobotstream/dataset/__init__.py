"""The streaming dataset (one dataset, or a weighted mixture): wiring, windows, ``*_is_pad``, transforms; LeRobot 0.6.1's collate."""

from lerobotstream.dataset._collate import PackedCollate, is_lerobot_collate, lerobot_collate_fn, packed_collate
from lerobotstream.dataset._counters import PROCESS_KEYS, one_per_process
from lerobotstream.dataset._dataset import StreamingLeRobotDataset
from lerobotstream.dataset._images import declared_chw, decode_image, image_bytes
from lerobotstream.dataset._multi import StreamingMultiLeRobotDataset
from lerobotstream.dataset._stream import LoaderSettings, StreamCore, StreamPosition, StreamShard

__all__ = [
    "PROCESS_KEYS",
    "one_per_process",
    "LoaderSettings",
    "PackedCollate",
    "StreamCore",
    "StreamPosition",
    "StreamShard",
    "StreamingLeRobotDataset",
    "StreamingMultiLeRobotDataset",
    "is_lerobot_collate",
    "lerobot_collate_fn",
    "packed_collate",
    "declared_chw",
    "decode_image",
    "image_bytes",
]
