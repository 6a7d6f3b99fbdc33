"""What ``lerobotstream-train`` puts in place of LeRobot's names during a streaming run
(:func:`patching.installed`): :class:`Run` holds the run's state; its methods are the dataset
factory (0.6.x ``make_train_eval_datasets``, 0.4.4 ``make_dataset``), ``cycle`` (plus the summary's
counters and the optional batch trace) and ``save_checkpoint`` (plus the stream state). A
map-style run, or another DataLoader, goes to LeRobot's originals unchanged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lerobotstream import __version__, constants
from lerobotstream._slow import announce_if_slow
from lerobotstream.integrations.lerobot import patching
from lerobotstream.integrations.lerobot import resume as _resume
from lerobotstream.integrations.lerobot.accelerator import loader_name
from lerobotstream.integrations.lerobot.factory import TrainingStream, make_streaming_datasets, streaming_seed
from lerobotstream.integrations.lerobot.summary import BatchCounters, summarize

# (rank, world_size) by the rule the stream's sharding follows (also after the group is destroyed)
from lerobotstream.planner._planner import discover_world as world

__all__ = ["Run", "world"]

log = logging.getLogger("lerobotstream.train")


def first_batch_wait(loader: Any) -> str:
    """What the wait for ``loader``'s first batch is, as the log says it when it is slow: the loader
    as it runs (``accelerator.loader_name``) and what the wait includes, e.g. ``"waiting for the
    first batch (DataLoader, 2 spawn workers: worker process start-up, first fetches and decodes)"``;
    worker processes (a DataLoader's, or ``StreamLoader`` processes mode) start within it, threads
    and the training process do not."""
    try:
        name = loader_name(loader)
        mode = getattr(loader, "mode", None)
        processes = mode == "processes" or (mode is None and int(loader.num_workers) > 0)
    except (AttributeError, TypeError, ValueError):  # a loader without torch's settings: say the common part
        return "waiting for the first batch (first fetches and decodes)"
    what = "worker process start-up, first fetches and decodes" if processes else "first fetches and decodes"
    return f"waiting for the first batch ({name}: {what})"


class Run:
    """State of one streaming training run (the patched names call into it)."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.stream: TrainingStream | None = None
        self.run_settings: dict[str, Any] = {}  # the run settings its checkpoints record (resume.run_settings)
        self.seed: int | None = None
        self.start_step = 0
        self.stream_base = (0, 0)  # (step, samples of the stream) where this run picked it up
        self.counters = BatchCounters()
        self.trace_file = None
        self.sidecar_status: Any = None
        self.accelerator: Any = None  # the Accelerator LeRobot built (StreamingAccelerator)
        self.collate: str | None = None  # the train stream DataLoader's collate_fn (repr)
        self.loader: str = "DataLoader"  # what batches the train stream, as it runs (accelerator.loader_name)
        self.topology = (0, 1)  # (rank, world_size) of the launch, saved while the process group is up
        self.ranks: list[dict[str, Any]] | None = None  # every rank's figures, gathered at the end of training
        self.held: list[Any] = []  # the summary gather's work, kept past the process group (summary.gather_ranks)

    # --- patched: make_train_eval_datasets (0.6.x) / make_dataset (0.4.4) -----------------------
    def make_train_eval_datasets(self, cfg: Any) -> tuple[Any, Any]:
        if not cfg.dataset.streaming:
            return patching.original("make_train_eval_datasets")(cfg)
        return self._make_streams(cfg)

    def make_dataset(self, cfg: Any) -> Any:
        if not cfg.dataset.streaming:
            return patching.original("make_dataset")(cfg)
        return self._make_streams(cfg)[0]

    def _make_streams(self, cfg: Any) -> tuple[TrainingStream, TrainingStream | None]:
        t0 = time.perf_counter()
        stream, evaluation = make_streaming_datasets(cfg)
        rank, world_size = self.topology = world()
        self.run_settings, self.seed = _resume.run_settings(cfg), streaming_seed(cfg.seed)
        if cfg.resume:
            self._resume(cfg, stream)
        self.stream = stream
        ds = stream.dataset
        self.sidecar_status = stream.sidecar_status  # how this process obtained the MP4 sidecar
        if rank == 0:
            from importlib.metadata import version

            log.info(
                f"lerobotstream: {__version__} on lerobot {version('lerobot')}: {ds!r}, {stream.num_frames} frames in "
                f"{stream.num_episodes} episodes, seed {self.seed}, num_workers {cfg.num_workers}, "
                f"{'uint8' if ds.return_uint8 else 'float32'} frames, setup {time.perf_counter() - t0:.2f} s, "
                f"sidecar: {self.sidecar_status}"
            )
            if evaluation is not None:
                most = f", at most {evaluation.max_samples} samples" if evaluation.max_samples else ""
                log.info(
                    f"lerobotstream: eval stream {evaluation.dataset!r}, {evaluation.num_frames} frames in "
                    f"{evaluation.num_episodes} episodes (sequential, every frame once per pass{most})"
                )
        return stream, evaluation

    def _resume(self, cfg: Any, stream: TrainingStream) -> None:
        ckpt = Path(cfg.checkpoint_path)
        step_file = ckpt / "training_state" / "training_step.json"
        try:
            step = int(json.loads(step_file.read_text())["step"])
        except (OSError, ValueError, KeyError) as e:
            from lerobotstream.errors import ResumeStateError

            raise ResumeStateError(f"cannot read the checkpoint step from {step_file}: {e}") from e
        doc = _resume.read_checkpoint_state(ckpt)
        ds = stream.dataset
        changes = _resume.check_resume(doc, self.run_settings, ds.state_dict(samples_consumed=0), step, ckpt)
        if changes or doc["stream"]["origin"] is not None:
            # another topology, or inside an elastic remainder: the checkpoint's own (rank 0) state
            ds.load_state_dict(doc["stream"])
        else:  # the same topology: this rank's own state at step x batch size
            ds.load_state_dict(ds.state_dict(samples_consumed=step * int(cfg.batch_size)))
        self.start_step = step
        self.stream_base = (step, int(ds.samples_consumed))
        log.info(_resume.describe_resume(step, changes, ds.resume_info(), step * int(cfg.batch_size)))

    # --- patched: cycle -------------------------------------------------------------------------
    def cycle(self, dataloader: Any) -> Iterator[Any]:
        if not isinstance(getattr(dataloader, "dataset", None), TrainingStream):
            yield from patching.original("cycle")(dataloader)
            return
        path = constants.train_trace_path()
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.trace_file = open(f"{path}.rank{world()[0]}", "a", buffering=1)
        self.collate = repr(getattr(dataloader, "collate_fn", None))
        self.counters.start(time.perf_counter())  # includes starting the DataLoader workers
        it = iter(dataloader)
        while True:
            t0 = time.perf_counter()
            try:
                if self.counters.batches:
                    batch = next(it)
                else:  # over a slow store: say what the wait is
                    with announce_if_slow(log, f"lerobotstream: {first_batch_wait(dataloader)}"):
                        batch = next(it)
            except StopIteration:  # the stream repeats; a finite one restarts like LeRobot's cycle
                it = iter(dataloader)
                continue
            step = self.start_step + self.counters.batches
            wids = self.counters.account(batch, t0, time.perf_counter())
            if self.trace_file is not None:
                self._trace(batch, step, wids)
            yield batch

    def _trace(self, batch: dict[str, Any], step: int, wids: list[int]) -> None:
        """One JSON line per batch (``LEROBOTSTREAM_TRAIN_TRACE``): step, anchors, worker ids."""
        row = {
            "rank": world()[0],
            "step": step,
            "episode_index": batch["episode_index"].tolist(),
            "frame_index": batch["frame_index"].tolist(),
            "worker": wids,
            **({"dataset_index": batch["dataset_index"].tolist()} if "dataset_index" in batch else {}),
        }
        self.trace_file.write(json.dumps(row) + "\n")

    # --- patched: save_checkpoint ---------------------------------------------------------------
    def save_checkpoint(self, checkpoint_dir: Path, step: int, cfg: Any, *args: Any, **kwargs: Any) -> None:
        patching.original("save_checkpoint")(checkpoint_dir, step, cfg, *args, **kwargs)
        if self.stream is None:
            return
        base_step, base_samples = self.stream_base
        samples = base_samples + (int(step) - base_step) * int(cfg.batch_size)
        state = self.stream.dataset.state_dict(samples_consumed=samples)
        _resume.write_checkpoint_state(Path(checkpoint_dir), int(step), self.run_settings, state)

    # --- the end ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the batch trace (if any)."""
        if self.trace_file is not None:
            self.trace_file.close()
            self.trace_file = None

    def summary(self) -> dict[str, Any]:
        """This rank's streaming summary (``summary.summarize``), with every rank's figures when gathered."""
        rank, world_size = self.topology
        return summarize(
            self.counters,
            self.stream.dataset if self.stream is not None else None,
            rank=rank,
            world_size=world_size,
            num_workers=self.cfg.num_workers,
            batch_size=self.cfg.batch_size,
            seed=self.seed,
            start_step=self.start_step,
            sidecar=self.sidecar_status,
            collate=self.collate,
            loader=self.loader,
            ranks=self.ranks,
        )
