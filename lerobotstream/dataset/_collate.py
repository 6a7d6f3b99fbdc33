"""``lerobot_collate_fn``: LeRobot 0.6.1's language-aware collate, for loops without LeRobot.

Items of a dataset with language columns carry ``language_persistent`` / ``language_events`` as
per-frame lists of row dicts, which ``torch``'s ``default_collate`` cannot batch (ragged). LeRobot
0.6.1's ``lerobot-train`` switches to ``lerobot.utils.collate.lerobot_collate_fn`` when
``dataset.meta.has_language_columns``; this is the same function: ``None`` samples are dropped,
``messages`` / ``message_streams`` / ``target_message_indices`` are kept as Python lists (every
sample must carry them or none), language columns are dropped from the batch, every other key goes
through ``default_collate``.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data._utils.collate import default_collate

from lerobotstream.meta import LANGUAGE_COLUMNS

__all__ = ["lerobot_collate_fn"]

_PYTHON_LIST_KEYS = ("messages", "message_streams", "target_message_indices")


def lerobot_collate_fn(batch: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Collate items like LeRobot 0.6.1's ``lerobot_collate_fn``.

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
            raise ValueError(f"Inconsistent batch: {sum(presence)}/{len(batch)} samples carry {key!r}; "
                             "every sample in a batch must agree.")
        preserved[key] = [sample[key] for sample in batch]
    tensorizable = [{k: v for k, v in sample.items() if k not in _PYTHON_LIST_KEYS and k not in LANGUAGE_COLUMNS}
                    for sample in batch]
    collated = default_collate(tensorizable)
    collated.update(preserved)
    return collated
