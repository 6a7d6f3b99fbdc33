"""torchcodec without ``torch._dynamo``, for worker processes (which never compile).

``import torchcodec.decoders`` costs about as much as ``import torch``, almost all of it
``torch._dynamo`` (torchcodec calls ``torch._dynamo.disallow_in_graph`` at import):
:func:`import_decoder_lean` imports it with a stand-in ``torch._dynamo``, removed right after.
Never called in the training process, where ``torch.compile`` needs the ops marked.
"""

from __future__ import annotations

import sys
import types

__all__ = ["import_decoder_lean", "import_in_worker"]


def import_decoder_lean() -> bool:
    """Import ``torchcodec.decoders`` without ``torch._dynamo``; False when torchcodec or the
    real ``torch._dynamo`` was already imported (nothing done)."""
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


def import_in_worker() -> bool:
    """:func:`import_decoder_lean` in a ``DataLoader`` worker (``get_worker_info()`` set) that has
    not imported torchcodec yet; else False."""
    if "torchcodec.decoders" in sys.modules:
        return False
    from torch.utils.data import get_worker_info

    return get_worker_info() is not None and import_decoder_lean()
