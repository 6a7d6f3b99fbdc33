"""Imported by a ``StreamLoader`` forkserver before it forks workers (``_procs.PRELOAD``): torch,
torchcodec without ``torch._dynamo``, and the stream's modules."""

from lerobotstream.decode._lean import import_decoder_lean

import_decoder_lean()

import lerobotstream.dataset._dataset  # noqa: E402,F401
import lerobotstream.dataset._multi  # noqa: E402,F401
import lerobotstream.decode._decoder  # noqa: E402,F401
import lerobotstream.decode._open_decoders  # noqa: E402,F401
import lerobotstream.loader._procs  # noqa: E402,F401
