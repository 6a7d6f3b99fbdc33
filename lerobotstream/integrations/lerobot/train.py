"""``lerobotstream-train``: ``lerobot-train`` with ``--dataset.streaming=true`` on lerobotstream.

Accepts every ``lerobot-train`` argument plus the ``--dataset.streaming_*`` flags
(:class:`~lerobotstream.integrations.lerobot.config.StreamingDatasetConfig`). With
``--dataset.streaming=false`` it runs LeRobot's own ``train`` untouched (map-style dataset).
With ``--dataset.streaming=true`` it runs LeRobot's ``train`` with these in place of LeRobot's
names (``patching.py``, the one place that patches LeRobot):

* the dataset factory, ``cycle`` and ``save_checkpoint`` of one run (``hooks.py``: the train and
  eval streams, the summary's counters, the stream state in every checkpoint and sample-exact
  ``--resume=true`` through ``resume.py``),
* LeRobot's own ``Accelerator`` settings through a subclass that leaves the streams' DataLoaders
  unsharded and batches them with ``StreamLoader`` (``accelerator.py``),
* for a mixture, a model card that lists every dataset (``model_card.py``).

At the end (rank 0) it prints the streaming summary (``summary.py``: samples/s, share of step
time waiting for data, payload bytes fetched vs. dataset bytes, sidecar status) and writes it to
``<output_dir>/streaming_summary.json``. The command line around LeRobot's parser (``--help``,
``--version``, one-line errors) is ``cli.py``'s.
"""

# No ``from __future__ import annotations``: LeRobot's ``parser.wrap`` reads the config class
# from the real annotation of ``_train``.

from pathlib import Path
from typing import Any

from lerobotstream.integrations.lerobot import patching
from lerobotstream.integrations.lerobot.accelerator import streaming_accelerator_class
from lerobotstream.integrations.lerobot.config import StreamingTrainPipelineConfig
from lerobotstream.integrations.lerobot.hooks import Run
from lerobotstream.integrations.lerobot.model_card import mixture_model_card
from lerobotstream.integrations.lerobot.resume import write_json_atomic
from lerobotstream.integrations.lerobot.summary import format_summary

__all__ = ["run_training", "Run"]


def run_training(cfg: StreamingTrainPipelineConfig) -> dict[str, Any] | None:
    """Train with a parsed config; returns the streaming summary on rank 0 (None otherwise or
    for a map-style run)."""
    lt = patching.check_lerobot()
    train = patching.train_function()
    if not cfg.dataset.streaming:
        train(cfg)  # LeRobot's map-style path, unchanged
        return None
    run = Run(cfg)
    seam = patching.dataset_seam(lt)
    try:
        with patching.installed(
            **{seam: getattr(run, seam)},
            cycle=run.cycle,
            save_checkpoint=run.save_checkpoint,
            Accelerator=streaming_accelerator_class(run),
            generate_model_card=mixture_model_card(run),
        ):
            train(cfg)
    finally:
        run.close()
    if run.accelerator is not None and not run.accelerator.is_main_process:
        return None
    summary = run.summary()
    print(format_summary(summary), flush=True)
    if cfg.output_dir is not None:
        write_json_atomic(Path(cfg.output_dir) / "streaming_summary.json", summary)
    return summary


def _parse_and_train() -> Any:
    from lerobot.configs import parser

    @parser.wrap()
    def _train(cfg: StreamingTrainPipelineConfig):
        return run_training(cfg)

    return _train()
