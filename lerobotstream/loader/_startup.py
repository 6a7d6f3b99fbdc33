"""Worker start-up: what a ``StreamLoader`` worker process imports, and how fast.

A worker imports torchcodec without ``torch._dynamo`` (:func:`import_decoder_lean`, in
``lerobotstream.decode._lean``: a worker never compiles; never in the training process).

``forkserver``: :func:`preload_forkserver` asks the forkserver to import torch, torchcodec (the
same lean way) and our dataset modules once; each worker then forks from it with them loaded.
"""

from __future__ import annotations

from lerobotstream.decode._lean import import_decoder_lean

__all__ = ["import_decoder_lean", "preload_forkserver", "PRELOAD"]

#: modules a forkserver imports before it forks workers
PRELOAD = ["lerobotstream.loader._startup_preload"]


def preload_forkserver(context) -> None:
    """Have ``context`` (a forkserver context) import :data:`PRELOAD` before forking workers
    (effective when its server has not started yet in this process)."""
    context.set_forkserver_preload(PRELOAD)
