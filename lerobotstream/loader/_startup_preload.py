"""Imported by a ``StreamLoader`` forkserver before it forks workers (``_procs.PRELOAD``): torch,
torchcodec without ``torch._dynamo``, and the stream's modules."""

from lerobotstream.decode import import_decoder_lean

import_decoder_lean()

import lerobotstream.dataset  # noqa: E402,F401
import lerobotstream.loader._procs  # noqa: E402,F401
