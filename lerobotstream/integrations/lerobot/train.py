"""``lerobotstream-train``: ``lerobot-train`` with ``--dataset.streaming=true`` on lerobotstream.

Accepts every ``lerobot-train`` argument plus the ``--dataset.streaming_*`` flags (``config.py``).
With ``--dataset.streaming=false`` it runs LeRobot's own ``train`` untouched; with ``true`` it runs
it with LeRobot's names swapped (``patching.py``) for the run's dataset factory, ``cycle`` and
``save_checkpoint`` (``hooks.py``, resume through ``resume.py``), an ``Accelerator`` that leaves the
streams unsharded and batches them with ``StreamLoader`` (``accelerator.py``) and, for a mixture,
a model card listing every dataset (``model_card.py``). At the end rank 0 prints the streaming
summary (``summary.py``) and writes it to ``<output_dir>/streaming_summary.json``.
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
