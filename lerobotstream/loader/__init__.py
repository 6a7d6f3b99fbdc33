"""``StreamLoader``: batches of a lerobotstream stream without the DataLoader's process boundary —
every shard in the training process (threads mode) or worker processes over a recycled
shared-memory ring (processes mode). See ``docs/loader.md``."""

from lerobotstream.loader._loader import StreamLoader

__all__ = ["StreamLoader"]
