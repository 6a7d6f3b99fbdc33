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


#: where each lazy export lives: ``import lerobotstream.sidecar`` (the CLI) must not import torch
_LAZY = {
    "StreamingLeRobotDataset": "lerobotstream.dataset._dataset",
    "StreamingMultiLeRobotDataset": "lerobotstream.dataset._multi",
    "PackedCollate": "lerobotstream.dataset._collate",
    "packed_collate": "lerobotstream.dataset._collate",
    "StreamLoader": "lerobotstream.loader",
    "StreamOptions": "lerobotstream.options",
    "EpisodeByteCache": "lerobotstream.payload_cache",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lerobotstream' has no attribute {name!r}")
