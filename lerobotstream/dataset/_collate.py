"""Collate functions: LeRobot 0.6.1's language-aware ``lerobot_collate_fn`` (for loops without
LeRobot) and :class:`PackedCollate`, the same batches in fewer shared-memory files.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils.collate import default_collate

from lerobotstream.meta import LANGUAGE_COLUMNS

__all__ = ["PackedCollate", "lerobot_collate_fn", "packed_collate"]

_PYTHON_LIST_KEYS = ("messages", "message_streams", "target_message_indices")


def lerobot_collate_fn(batch: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Collate items like LeRobot 0.6.1's ``lerobot_collate_fn`` (``lerobot-train`` uses it for
    language columns, which ``default_collate`` cannot batch): ``None`` samples and language
    columns dropped, ``messages`` / ``message_streams`` / ``target_message_indices`` kept as lists.

    Returns:
        dict | None: ``default_collate`` of the samples without language columns and list keys,
        plus the list keys as lists; None when every sample is None.

    Raises:
        ValueError: some samples carry a list key and others do not.
    """
    batch = [sample for sample in batch if sample is not None]
    if not batch:
        return None
    preserved: dict[str, list[Any]] = {}
    for key in _PYTHON_LIST_KEYS:
        presence = [key in sample for sample in batch]
        if not any(presence):
            continue
        if not all(presence):
            raise ValueError(
                f"Inconsistent batch: {sum(presence)}/{len(batch)} samples carry {key!r}; "
                "every sample in a batch must agree."
            )
        preserved[key] = [sample[key] for sample in batch]
    tensorizable = [
        {k: v for k, v in sample.items() if k not in _PYTHON_LIST_KEYS and k not in LANGUAGE_COLUMNS}
        for sample in batch
    ]
    collated = default_collate(tensorizable)
    collated.update(preserved)
    return collated


#: a key whose stacked batch reaches this many bytes keeps a storage of its own (as does any
#: image-like key, 3 or more dims per item); smaller keys share one storage per dtype and batch
OWN_STORAGE_BYTES = 64 << 10
_ALIGN = 64


def is_lerobot_collate(fn: Any) -> bool:
    """``fn`` is this module's or LeRobot's ``lerobot_collate_fn`` (LeRobot's, matched by name so
    LeRobot need not be installed)."""
    return fn is lerobot_collate_fn or (
        getattr(fn, "__name__", None) == "lerobot_collate_fn"
        and getattr(fn, "__module__", None) == "lerobot.utils.collate"
    )


def _stackable(values: list[Any]) -> bool:
    """Plain dense CPU ``torch.Tensor`` values of one shape and dtype, none requiring grad: what
    ``torch.stack(..., out=view)`` takes (anything else is left to the inner collate)."""
    first = values[0]
    shape, dtype = first.shape, first.dtype
    return all(
        type(v) is torch.Tensor
        and v.shape == shape
        and v.dtype == dtype
        and v.device.type == "cpu"
        and v.layout == torch.strided
        and not v.requires_grad
        and not v.is_quantized
        for v in values
    )


def _stack_into(values: list[torch.Tensor], storage: torch.UntypedStorage, byte_offset: int) -> torch.Tensor:
    first = values[0]
    out = torch.empty(0, dtype=first.dtype).set_(
        storage, byte_offset // first.element_size(), (len(values), *first.shape)
    )
    return torch.stack(values, out=out)


class PackedCollate:
    """``default_collate`` (or LeRobot's ``lerobot_collate_fn``) with fewer shared-memory files.

    In a DataLoader worker every tensor of a batch is its own shared-memory file, which costs most
    of a small key's hand-off. **In a worker**, the small keys (under ``OWN_STORAGE_BYTES`` per batch
    and under 3 dims per item) are stacked into **one shared storage per dtype** (64-byte aligned
    views); other keys keep a storage each; outside workers it is ``inner`` itself (about 1 CPU ms
    per sample less, ``docs/performance.md``). The batch equals ``inner``'s (keys, order, values,
    shapes, dtypes, strides); a small key's tensor is a view of its dtype's storage (keeping it
    keeps that storage alive, pickling it writes all of it, a growing ``resize_`` writes into the
    next key). Values that are not CPU tensors of one shape and dtype go through ``inner``.

    Args:
        inner: ``None`` / ``default_collate``, or ``lerobot_collate_fn`` (this package's or
            LeRobot's). Any other function is called as is, without packing.

    Use: ``DataLoader(ds, batch_size=B, num_workers=N, collate_fn=lerobotstream.packed_collate)``
    (``lerobotstream-train`` sets it). Picklable (spawn workers).
    """

    def __init__(self, inner: Callable[[list[Any]], Any] | None = None) -> None:
        self.inner = default_collate if inner is None else inner
        self._packs = self.inner is default_collate or is_lerobot_collate(self.inner)

    def __repr__(self) -> str:
        return f"PackedCollate({getattr(self.inner, '__qualname__', self.inner)!r})"

    def __call__(self, batch: list[Any]) -> Any:
        if not self._packs or not batch or get_worker_info() is None:
            return self.inner(batch)
        lerobot = is_lerobot_collate(self.inner)
        if lerobot:
            batch = [sample for sample in batch if sample is not None]
            if not batch:
                return None
        if not all(type(sample) is dict for sample in batch):
            return self.inner(batch)
        first = batch[0]
        keys = list(first)
        if any(list(sample) != keys for sample in batch[1:]):
            return self.inner(batch)
        skip = set(LANGUAGE_COLUMNS) | (set(_PYTHON_LIST_KEYS) if lerobot else set())
        values = {
            k: [sample[k] for sample in batch] for k in keys if k not in skip and isinstance(first[k], torch.Tensor)
        }
        values = {k: v for k, v in values.items() if _stackable(v)}
        if not values:
            return self.inner(batch)
        out: dict[str, torch.Tensor] = {}
        packs: dict[torch.dtype, list[tuple[str, int]]] = {}
        ends: dict[torch.dtype, int] = {}
        for k, vs in values.items():
            nbytes = len(vs) * math.prod(vs[0].shape) * vs[0].element_size()
            if nbytes >= OWN_STORAGE_BYTES or vs[0].dim() >= 3:
                out[k] = _stack_into(vs, torch.UntypedStorage._new_shared(max(nbytes, 1)), 0)
            else:
                dtype = vs[0].dtype
                packs.setdefault(dtype, []).append((k, ends.get(dtype, 0)))
                ends[dtype] = ends.get(dtype, 0) + -(-nbytes // _ALIGN) * _ALIGN
        for dtype, members in packs.items():
            # shared memory from the start (what default_collate does for its stack), so the
            # worker-to-trainer queue does not copy the batch into shared memory again
            storage = torch.UntypedStorage._new_shared(max(ends[dtype], 1))
            for k, offset in members:
                out[k] = _stack_into(values[k], storage, offset)
        # the inner collate makes the other keys and the key order (packed keys stand in as "")
        stand_in = dict.fromkeys(out, "")
        collated = self.inner([{**sample, **stand_in} for sample in batch])
        for k, v in out.items():
            collated[k] = v
        return collated


#: ``PackedCollate()`` over ``default_collate``
packed_collate = PackedCollate()
