"""``StreamLoader``: batches of a lerobotstream stream without the DataLoader's process boundary —
every shard in the training process (threads mode) or worker processes over a recycled
shared-memory ring (processes mode). See ``docs/loader.md``."""

from lerobotstream.loader._loader import MODES, StreamLoader, choose_mode, sum_stats, usable_cpus

__all__ = ["MODES", "StreamLoader", "choose_mode", "sum_stats", "usable_cpus"]
