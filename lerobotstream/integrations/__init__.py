"""Integrations of the streaming dataset with training frameworks.

``lerobotstream.integrations.lerobot`` — ``lerobotstream-train``, a drop-in ``lerobot-train`` that
trains on :class:`lerobotstream.StreamingLeRobotDataset` with ``--dataset.streaming=true``.
Importing a sub-package imports its framework (LeRobot is large; it lives in its own venv).
"""
