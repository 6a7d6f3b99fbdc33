"""lerobotstream: stream LeRobotDataset v3 for training without downloading it first.

An MP4 index sidecar (box-parsed sample tables) says which bytes hold each episode's frames;
only GOP-aligned byte ranges are fetched, wrapped into a small synthesized MP4 and decoded with
torchcodec (FFmpeg on CPU, NVDEC on CUDA).
"""

from lerobotstream import _extensions, errors
from lerobotstream._version import __version__

_extensions.install()  # an extension not built for this Python: ExtensionBuildError, saying what to do

__all__ = [
    "__version__",
    "errors",
    "EpisodeByteCache",
    "PackedCollate",
    "StreamLoader",
    "StreamOptions",
    "StreamingLeRobotDataset",
    "StreamingMultiLeRobotDataset",
    "packed_collate",
]


def __getattr__(name: str):
    # lazy: ``import lerobotstream.sidecar`` (the CLI) must not import torch
    if name == "StreamingLeRobotDataset":
        from lerobotstream.dataset._dataset import StreamingLeRobotDataset

        return StreamingLeRobotDataset
    if name == "StreamingMultiLeRobotDataset":
        from lerobotstream.dataset._multi import StreamingMultiLeRobotDataset

        return StreamingMultiLeRobotDataset
    if name in ("PackedCollate", "packed_collate"):
        from lerobotstream.dataset import _collate

        return getattr(_collate, name)
    if name == "StreamLoader":
        from lerobotstream.loader import StreamLoader

        return StreamLoader
    if name == "StreamOptions":  # no torch import
        from lerobotstream.options import StreamOptions

        return StreamOptions
    if name == "EpisodeByteCache":
        from lerobotstream.payload_cache import EpisodeByteCache

        return EpisodeByteCache
    raise AttributeError(f"module 'lerobotstream' has no attribute {name!r}")
