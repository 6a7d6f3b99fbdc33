"""accelerate's ``Accelerator`` as LeRobot builds it (mixed precision, CPU, DDP kwargs), except that
a stream's DataLoader is not re-sharded (each rank already streams its own episodes). Instead it is
collated with :class:`~lerobotstream.PackedCollate` over LeRobot's collate (the same batches, fewer
shared-memory files) and, unless ``--dataset.streaming_loader=dataloader``, replaced by a
:class:`~lerobotstream.StreamLoader` with its settings.
"""

from __future__ import annotations

import logging
from typing import Any

from lerobotstream.dataset._collate import PackedCollate
from lerobotstream.integrations.lerobot.factory import TrainingStream
from lerobotstream.integrations.lerobot.summary import gather_ranks

__all__ = ["stream_loader", "streaming_accelerator_class", "loader_name"]

log = logging.getLogger("lerobotstream.train")


def loader_name(loader: Any) -> str:
    """The loader as it runs: ``"StreamLoader threads, 2 shards"``, ``"StreamLoader processes, 2
    spawn workers"``, ``"DataLoader, 2 spawn workers"`` or ``"DataLoader, in the training process"``."""
    n = int(loader.num_workers)
    ctx = loader.multiprocessing_context
    if ctx is None:
        import torch.multiprocessing as mp

        start = mp.get_start_method()
    else:
        start = ctx if isinstance(ctx, str) else ctx.get_start_method()
    workers = f"{n} {start} worker{'s' if n != 1 else ''}"
    if getattr(loader, "mode", None) == "threads":
        return f"StreamLoader threads, {max(1, n)} shard{'s' if n > 1 else ''}"
    if getattr(loader, "mode", None) == "processes":
        return f"StreamLoader processes, {workers}"
    return f"DataLoader, {workers}" if n else "DataLoader, in the training process"


def stream_loader(run: Any, data_loader: Any) -> Any:
    """A ``StreamLoader`` with ``data_loader``'s settings (``--dataset.streaming_loader``; its
    ``timeout`` is the stream's ``--dataset.streaming_loader_timeout_s``), or None for
    ``dataloader`` (torch's DataLoader kept). The mode and its reason are logged and, for the train
    stream, recorded on ``run.loader`` for the summary."""
    from lerobotstream.loader import StreamLoader

    choice = getattr(run.cfg.dataset, "streaming_loader", "auto")
    loader = None
    if choice != "dataloader":
        loader = StreamLoader(
            data_loader.dataset,
            int(data_loader.batch_size),
            num_workers=int(data_loader.num_workers),
            mode=choice,
            pin_memory=bool(data_loader.pin_memory),
            drop_last=bool(data_loader.drop_last),
            prefetch_batches=data_loader.prefetch_factor if data_loader.num_workers else None,
            collate_fn=data_loader.collate_fn,
            multiprocessing_context=data_loader.multiprocessing_context,
        )
    name = loader_name(data_loader if loader is None else loader)
    if getattr(data_loader.dataset, "tags", False):
        run.loader = name
    why = "" if loader is None else f" ({loader.mode_reason})"
    log.info("lerobotstream: --dataset.streaming_loader=%s: %s%s", choice, name, why)
    return loader


def streaming_accelerator_class(run: Any) -> type:
    """accelerate's ``Accelerator`` as LeRobot builds it, except that the streams' DataLoaders are
    left as they are (one shard per rank already), and every rank's summary figures are gathered
    (:func:`~lerobotstream.integrations.lerobot.summary.gather_ranks`, onto ``run.ranks``) before
    ``end_training`` destroys the process group; the instance is recorded on ``run.accelerator``."""
    from accelerate import Accelerator

    class StreamingAccelerator(Accelerator):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            run.accelerator = self

        def prepare_data_loader(self, data_loader, device_placement=None, slice_fn_for_dispatch=None):
            if isinstance(getattr(data_loader, "dataset", None), TrainingStream):
                # the same batches as LeRobot's collate (default or lerobot_collate_fn), in fewer
                # shared-memory files from the workers (docs/performance.md)
                if not isinstance(data_loader.collate_fn, PackedCollate):
                    data_loader.collate_fn = PackedCollate(data_loader.collate_fn)
                loader = stream_loader(run, data_loader)  # (it calls PackedCollate's inner collate)
                return data_loader if loader is None else loader  # one shard per rank: not split again
            return super().prepare_data_loader(
                data_loader, device_placement=device_placement, slice_fn_for_dispatch=slice_fn_for_dispatch
            )

        def end_training(self, *args: Any, **kwargs: Any) -> Any:
            if run.stream is not None:  # a collective: every rank of a streaming run gets here
                run.ranks = gather_ranks(run.counters, hold=run.held)
            return super().end_training(*args, **kwargs)

    return StreamingAccelerator
