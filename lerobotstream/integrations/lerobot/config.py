"""``--dataset.streaming_*`` flags: LeRobot's config classes extended through draccus dataclasses.

``StreamingDatasetConfig`` subclasses LeRobot's ``DatasetConfig`` (LeRobot's flags and checks
first) and adds one field per :class:`lerobotstream.options.StreamOptions` option with a flag
(``train_flags()``: name, type, default, ``--help`` text, rule), plus ``streaming_loader`` and the
mixture's ``streaming_weights``. ``StreamingTrainPipelineConfig`` is LeRobot's
``TrainPipelineConfig`` with that dataset config; checkpoints store the extra fields in
``train_config.json``, so ``--resume=true`` reloads them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from lerobot.configs.default import DatasetConfig
from lerobot.configs.train import TrainPipelineConfig

from lerobotstream.errors import StreamingConfigError
from lerobotstream.integrations.lerobot.factory import parse_list
from lerobotstream.options import train_flags

__all__ = ["StreamingDatasetConfig", "StreamingTrainPipelineConfig", "STREAMING_LOADERS"]

#: --dataset.streaming_loader values
STREAMING_LOADERS = ("auto", "threads", "processes", "dataloader")

#: LeRobot's own flags whose --help text says what they mean when streaming: (name, type, default, help)
_LEROBOT_OVERRIDES = (
    (
        "repo_id",
        str,
        dataclasses.MISSING,
        "The dataset: OWNER/NAME on the Hub; with --dataset.root unset, a local copy at "
        "$HF_LEROBOT_HOME/OWNER/NAME is used first (as LeRobot). With --dataset.streaming=true, '[a,b]' lists "
        "several datasets: a weighted mixture (--dataset.streaming_weights), not a concatenation.",
    ),
    (
        "root",
        Optional[str],
        None,
        "Where the dataset is read: a local folder, hf://datasets/OWNER/NAME, hf://buckets/OWNER/BUCKET[/path] "
        "or an fsspec URL (s3://, gs://, http(s)://; docs/sources.md). Unset: the Hub's --dataset.repo_id (or "
        "its local copy). With several datasets, a matching list '[/data/a,/data/b]'.",
    ),
    (
        "streaming",
        bool,
        False,
        "true: stream the dataset with lerobotstream (nothing downloaded; the --dataset.streaming_* flags "
        "apply); false (default): LeRobot's own map-style dataset, downloaded first.",
    ),
)
#: flags of this config that are not StreamOptions fields: (name, type, default, help)
_EXTRA_FLAGS = (
    (
        "streaming_loader",
        str,
        "auto",
        "What batches the stream: 'auto' (StreamLoader, its mode picked from the usable CPUs and "
        "--num_workers, logged with the reason), 'threads' (StreamLoader, every shard in the training process), "
        "'processes' (StreamLoader, --num_workers processes over a shared-memory ring) or 'dataloader' "
        "(torch's DataLoader, as LeRobot builds it). The same batches in every case.",
    ),
    (
        "streaming_weights",
        Optional[list[float]],
        None,
        "Sampling weight per dataset when --dataset.repo_id lists several ('[a,b]', with --dataset.root a "
        "matching list): e.g. '[0.7,0.3]'. Unset: in proportion to each dataset's frames.",
    ),
)


def _help(text: str) -> dict:
    return {"custom_args": {"help": text}}


def _flag_fields() -> list[tuple]:
    out = [
        (name, typ, dataclasses.field(default=default, metadata=_help(text)))
        for name, typ, default, text in _LEROBOT_OVERRIDES
    ]
    for info in train_flags():
        out.append((info.flag, info.flag_type, dataclasses.field(default=info.default, metadata=_help(info.help))))
    for name, typ, default, text in _EXTRA_FLAGS:
        out.append((name, typ, dataclasses.field(default=default, metadata=_help(text))))
    return out


class _StreamingChecks:
    """The checks and views of :data:`StreamingDatasetConfig` (its fields are generated)."""

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:  # LeRobot 0.6.x validates its own fields first
            parent()

        def bad(flag: str, rule: str) -> StreamingConfigError:
            value = getattr(self, flag)
            return StreamingConfigError(f"--dataset.{flag}={value!r}: {rule}")

        if self.repo_type == "bucket" and not self.streaming:
            raise bad("repo_type", "a bucket can only be read with --dataset.streaming=true")
        if str(self.root or "").startswith("hf://buckets/") and not self.streaming:
            raise bad("root", "an hf://buckets/ root can only be read with --dataset.streaming=true")
        for info in train_flags():  # the options' own rules (StreamOptions), named by their flag
            value = getattr(self, info.flag)
            if not info.check(value):
                raise bad(info.flag, f"must be {info.want}")
        if self.streaming_loader not in STREAMING_LOADERS:
            raise bad("streaming_loader", f"must be one of {', '.join(STREAMING_LOADERS)}")

        repo_ids = parse_list(self.repo_id) or []
        if len(repo_ids) > 1:
            if not self.streaming:
                raise bad(
                    "repo_id",
                    "several datasets are trained on together only with --dataset.streaming=true "
                    "(LeRobot's map-style loader has no mixture)",
                )
            if len(set(repo_ids)) != len(repo_ids):
                raise bad("repo_id", "lists a dataset twice")
            roots = parse_list(self.root)
            if roots is not None and len(roots) != len(repo_ids):
                raise bad("root", f"must list one root per dataset of --dataset.repo_id ({len(repo_ids)})")
            if self.episodes is not None:
                raise bad(
                    "episodes",
                    "cannot select episodes of a mixture from the command line (it would be "
                    "ambiguous); use StreamingMultiLeRobotDataset(episodes={repo_id: [...]})",
                )
        if self.streaming_weights is not None:
            w = list(self.streaming_weights)
            if len(repo_ids) < 2:
                raise bad("streaming_weights", "needs several datasets in --dataset.repo_id ('[a,b]')")
            if len(w) != len(repo_ids) or not all(float(x) > 0 and float(x) < float("inf") for x in w):
                raise bad("streaming_weights", f"must be {len(repo_ids)} numbers > 0, one per dataset")

    @property
    def repo_ids(self) -> list[str]:
        """The datasets of ``--dataset.repo_id`` (one, or a ``'[a,b]'`` mixture)."""
        return parse_list(self.repo_id) or []


StreamingDatasetConfig = dataclasses.make_dataclass(
    "StreamingDatasetConfig",
    _flag_fields(),
    bases=(_StreamingChecks, DatasetConfig),
    namespace={
        "__module__": __name__,
        "__doc__": """LeRobot's dataset flags plus the streaming options (used only
    with ``streaming=true``): one ``--dataset.<flag>`` per :func:`lerobotstream.options.train_flags` option,
    ``streaming_loader`` and ``streaming_weights``.

    Raises:
        ValueError: LeRobot's own checks (``DatasetConfig.__post_init__``: ``depth_output_unit``,
            ``eval_split``, duplicated or negative ``episodes``, bucket rules), run first.
        StreamingConfigError: an invalid streaming value (the message names the flag and the rule).
    """,
    },
)


@dataclass
class StreamingTrainPipelineConfig(TrainPipelineConfig):
    """LeRobot's ``TrainPipelineConfig`` whose ``dataset`` accepts the streaming flags."""

    # The dataset to train on (LeRobot's flags) and, with --dataset.streaming=true, how to stream it.
    dataset: StreamingDatasetConfig
