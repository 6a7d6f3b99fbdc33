"""``lerobot-train`` on lerobotstream: config flags, dataset factory, checkpoint stream state.

Console script ``lerobotstream-train`` (= ``python -m lerobotstream.integrations.lerobot``): every
``lerobot-train`` argument, plus the ``--dataset.streaming_*`` flags; ``--dataset.streaming=true``
trains on :class:`lerobotstream.StreamingLeRobotDataset`. Needs ``lerobot>=0.4.4`` (imported
lazily here: LeRobot is large and lives in its own venv, see ``make setup-lerobot``).
"""

import importlib
from typing import Any

__all__ = ["StreamingDatasetConfig", "StreamingTrainPipelineConfig", "make_streaming_dataset", "main"]

#: the module each exported name lives in, imported on first use
_HOME = dict(zip(__all__, ("config", "config", "factory", "cli")))


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
