"""``lerobot-train`` on lerobotstream: config flags, dataset factory, checkpoint stream state.

Console script ``lerobotstream-train`` (= ``python -m lerobotstream.integrations.lerobot``): every
``lerobot-train`` argument, plus the ``--dataset.streaming_*`` flags; ``--dataset.streaming=true``
trains on :class:`lerobotstream.StreamingLeRobotDataset`. Needs ``lerobot>=0.4.4`` (imported
lazily here: LeRobot is large and lives in its own venv, see ``make setup-lerobot``).
"""

from typing import Any

__all__ = ["StreamingDatasetConfig", "StreamingTrainPipelineConfig", "make_streaming_dataset", "main"]


def __getattr__(name: str) -> Any:
    if name in ("StreamingDatasetConfig", "StreamingTrainPipelineConfig"):
        from lerobotstream.integrations.lerobot import config

        return getattr(config, name)
    if name == "make_streaming_dataset":
        from lerobotstream.integrations.lerobot.factory import make_streaming_dataset

        return make_streaming_dataset
    if name == "main":
        from lerobotstream.integrations.lerobot.cli import main

        return main
    raise AttributeError(name)
