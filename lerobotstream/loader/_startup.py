"""Worker start-up: what a ``StreamLoader`` worker process imports, and how fast.

Measured (tools/bench.py ``startup`` rows; a fresh interpreter per row): ``import torch`` is most of
a spawn worker's start, and ``torchcodec`` adds about as much again, almost all of it
``torch._dynamo``: torchcodec's ``_core/ops.py`` wraps its ops in ``torch._dynamo.disallow_in_graph``
at import, which imports the whole compiler stack (``convert_frame``, ``symbolic_convert``,
``trace_rules``...). A worker never compiles, so :func:`import_decoder_lean` imports torchcodec with
a stand-in ``torch._dynamo`` whose ``disallow_in_graph`` returns the op unchanged, and removes the
stand-in right after (a later ``import torch._dynamo``, or ``torch._dynamo`` through torch's lazy
attribute, gets the real one). Only ever called in our worker processes, never in the training
process (where ``torch.compile`` needs the ops marked).

``forkserver``: :func:`preload_forkserver` asks the forkserver to import torch, torchcodec (the
same lean way) and our dataset modules once; each worker then forks from it with them loaded.
"""

from __future__ import annotations

import sys
import types

__all__ = ["import_decoder_lean", "preload_forkserver", "PRELOAD"]

#: modules a forkserver imports before it forks workers
PRELOAD = ["lerobotstream.loader._startup_preload"]


def import_decoder_lean() -> bool:
    """Import ``torchcodec.decoders`` without importing ``torch._dynamo`` (see the module doc).
    Returns True when the stand-in was used, False when torchcodec or the real ``torch._dynamo``
    was already imported (nothing to save)."""
    if "torchcodec.decoders" in sys.modules or "torch._dynamo" in sys.modules:
        return False
    import torch

    shim = types.ModuleType("torch._dynamo")
    shim.disallow_in_graph = lambda fn: fn  # what torchcodec's import calls; nothing else is
    sys.modules["torch._dynamo"] = shim
    try:
        import torchcodec.decoders  # noqa: F401
    finally:
        if sys.modules.get("torch._dynamo") is shim:
            del sys.modules["torch._dynamo"]
        if torch.__dict__.get("_dynamo") is shim:
            del torch._dynamo
    return True


def preload_forkserver(context) -> None:
    """Have ``context`` (a forkserver context) import :data:`PRELOAD` before forking workers
    (effective when its server has not started yet in this process)."""
    context.set_forkserver_preload(PRELOAD)
