"""lerobotstream: stream LeRobotDataset v3 for training without downloading it first.

An MP4 index sidecar (box-parsed sample tables) says which bytes hold each episode's frames;
only GOP-aligned byte ranges are fetched, wrapped into a small synthesized MP4 and decoded with
torchcodec (FFmpeg on CPU, NVDEC on CUDA).
"""

from lerobotstream._version import __version__
from lerobotstream import errors
from lerobotstream.cache import EpisodeByteCache
from lerobotstream.dataset import StreamingLeRobotDataset

__all__ = ["__version__", "errors", "EpisodeByteCache", "StreamingLeRobotDataset"]
