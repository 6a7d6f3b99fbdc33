"""Fixtures for tests of code that reads LeRobot datasets: small generated datasets, a loopback Hub.

Public (``pip install lerobotstream`` ships it) but never imported by the library; heavy or optional
libraries (PyAV, Pillow, the ffmpeg CLI) load only in the functions that use them.

- :func:`make_dataset` writes a LeRobotDataset v3.0 whose frames and rows carry their identity
  ``(episode_index, frame_index, camera_index)``; :func:`read_identity` reads a decoded frame's
  identity back; :func:`identity_frame`, :func:`depth_frame_mm`, :func:`expected_depth_codes`,
  :func:`image_frame` and :func:`expected_language` give every generated value exactly. Needs the
  ``ffmpeg`` CLI (libsvtav1/libaom-av1, libx264, libx265) and PyAV::

      from lerobotstream.testing import make_dataset, read_identity
      root = make_dataset(tmp_path / "ds", episode_lengths=(30, 45, 20), codec="h264")

- :class:`LoopbackServer`: a real HTTP server on 127.0.0.1 in its own process (static files with
  Range, a fake Hugging Face Hub redirecting to a signed-URL CDN, faults, latency, bandwidth).
- :func:`parse_reference`: a slow, independent pure-Python ISO BMFF sample-table reader (the
  C parser's oracle); :class:`RefError` where it refuses a file.
- :func:`convert_v21_to_v30`: a v3.0 dataset from a local LeRobotDataset v2.1 folder (stream copy).
  It stays here, beside :func:`make_dataset`, because both write v3.0 with this package's private
  writer (``_media``), and ``make demo`` rebuilds ``data/g1_v30`` with it from the installed package.

Only fixtures live here. The CUDA parity check is a tool (``python -m tools.gpu_check``); CLIs of a
checkout: ``python -m tools.make_dataset``, ``python -m tools.convert_v21_to_v30``.
"""

from lerobotstream.testing._convert_v21 import convert as convert_v21_to_v30
from lerobotstream.testing._dataset import make_dataset
from lerobotstream.testing._identity import (
    DEPTH_QUANTIZER,
    SAY_TOOL_SCHEMA,
    depth_frame_mm,
    expected_depth_codes,
    expected_language,
    identity_frame,
    image_frame,
    quantize_depth,
    read_identity,
)
from lerobotstream.testing._loopback import LoopbackServer
from lerobotstream.testing._media import CODECS
from lerobotstream.testing._reference_bmff import RefError, parse_reference

__all__ = [
    "CODECS",
    "DEPTH_QUANTIZER",
    "SAY_TOOL_SCHEMA",
    "LoopbackServer",
    "RefError",
    "convert_v21_to_v30",
    "depth_frame_mm",
    "expected_depth_codes",
    "expected_language",
    "identity_frame",
    "image_frame",
    "make_dataset",
    "parse_reference",
    "quantize_depth",
    "read_identity",
]
