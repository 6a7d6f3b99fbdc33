"""``--dataset.streaming_*`` flags: LeRobot's config classes extended through draccus dataclasses.

``StreamingDatasetConfig`` subclasses LeRobot's ``DatasetConfig`` (every LeRobot flag keeps its
meaning and LeRobot's own checks run first) and adds the streaming options;
``StreamingTrainPipelineConfig`` is LeRobot's ``TrainPipelineConfig`` with that dataset config.
Checkpoints written with these classes store the extra fields in ``train_config.json``, so
``--resume=true`` reloads them. The comment above each field is its ``--help`` text.
"""

from __future__ import annotations

from dataclasses import dataclass

from lerobot.configs.default import DatasetConfig
from lerobot.configs.train import TrainPipelineConfig

from lerobotstream import constants
from lerobotstream.errors import StreamingConfigError
from lerobotstream.integrations.lerobot.factory import parse_list
from lerobotstream.sources._http import DEFAULT_READ_TIMEOUT_S

__all__ = ["StreamingDatasetConfig", "StreamingTrainPipelineConfig", "REPO_TYPES", "DECODE_DEVICES"]

REPO_TYPES = ("dataset", "bucket")
DECODE_DEVICES = ("cpu", "cuda")


@dataclass
class StreamingDatasetConfig(DatasetConfig):
    """LeRobot's dataset flags plus the streaming options (used only with ``streaming=true``).

    Fields (per rank unless said otherwise): see each field's comment (the ``--help`` text).

    Raises:
        ValueError: LeRobot's own checks (``DatasetConfig.__post_init__``: ``depth_output_unit``,
            ``eval_split``, duplicated or negative ``episodes``, bucket rules), run first.
        StreamingConfigError: an invalid streaming value (the message names the flag).
    """

    # The dataset: OWNER/NAME on the Hub; with --dataset.root unset, a local copy at
    # $HF_LEROBOT_HOME/OWNER/NAME is used first (as LeRobot). With --dataset.streaming=true, '[a,b]' lists
    # several datasets: a weighted mixture (--dataset.streaming_weights), not a concatenation.
    repo_id: str
    # true: stream the dataset with lerobotstream (nothing downloaded; the --dataset.streaming_* flags
    # apply); false (default): LeRobot's own map-style dataset, downloaded first.
    streaming: bool = False
    # Hub repository type: "dataset" (a Hub dataset repo) or "bucket" (a Hugging Face Storage
    # Bucket; needs streaming=true). root=hf://buckets/OWNER/BUCKET also selects a bucket.
    repo_type: str = "dataset"
    # Complete episodes mixed at once by each DataLoader worker (unset: 32 per rank, split over the workers).
    streaming_episode_pool_size: int | None = None
    # Episodes fetched ahead of each worker's active pool.
    streaming_prefetch_episodes: int = constants.DEFAULT_PREFETCH_EPISODES
    # Compressed (synthesized MP4) bytes held per rank, GiB; each worker gets 1/num_workers. Not an RSS limit.
    streaming_byte_budget_gb: float = constants.DEFAULT_BYTE_BUDGET_GB
    # Sample-assembly / decode threads per DataLoader worker.
    streaming_decode_threads: int = constants.DEFAULT_DECODE_THREADS
    # Decoded samples buffered ahead per worker.
    streaming_decoded_queue_size: int = constants.DEFAULT_DECODED_QUEUE_SIZE
    # Episode mixing: "remaining" (default: frames drawn in proportion to what is left), "round_robin"
    # (one frame of each resident episode per round) or "sequential" (episodes and frames in order).
    streaming_sampling_strategy: str = constants.DEFAULT_SAMPLING_STRATEGY
    # Seconds to wait for another process that is building the same MP4 sidecar.
    streaming_sidecar_lock_timeout_s: float = constants.DEFAULT_SIDECAR_LOCK_TIMEOUT_S
    # Seconds one read from an HTTP(S), Hub or bucket store may take, retries and backoff included;
    # then a SourceTimeoutError names the URL (a stalled server no longer blocks for minutes).
    streaming_read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    # Optional payload root (local folder, hf://, hf://buckets/ or any fsspec URL) when the Parquet
    # and MP4 files are mirrored elsewhere; metadata still comes from root / repo_id.
    streaming_data_root: str | None = None
    # Where frames are decoded: "cpu" or "cuda" (NVDEC, with a counted CPU fallback).
    streaming_decode_device: str = "cpu"
    # Open-decoder LRU cap per rank, split over the workers (unset: (episode pool + prefetch_episodes) x
    # cameras, per worker).
    video_decoder_cache_size: int | None = None
    # Older name of video_decoder_cache_size (set only one of them).
    streaming_max_open_decoders: int | None = None
    # Sampling weight per dataset when --dataset.repo_id lists several ('[a,b]', with --dataset.root
    # a matching list): e.g. '[0.7,0.3]'. Unset: in proportion to each dataset's frames.
    streaming_weights: list[float] | None = None

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:  # LeRobot 0.6.x validates its own fields first
            parent()

        def bad(flag: str, rule: str) -> StreamingConfigError:
            value = getattr(self, flag)
            return StreamingConfigError(f"--dataset.{flag}={value!r}: {rule}")

        if self.repo_type not in REPO_TYPES:
            raise bad("repo_type", f"must be one of {REPO_TYPES}")
        if self.repo_type == "bucket" and not self.streaming:
            raise bad("repo_type", "a bucket can only be read with --dataset.streaming=true")
        if str(self.root or "").startswith("hf://buckets/") and not self.streaming:
            raise bad("root", "an hf://buckets/ root can only be read with --dataset.streaming=true")
        if self.streaming_episode_pool_size is not None and self.streaming_episode_pool_size <= 0:
            raise bad("streaming_episode_pool_size", "must be > 0 (or unset for 32 per rank)")
        if self.streaming_prefetch_episodes < 0:
            raise bad("streaming_prefetch_episodes", "must be >= 0")
        if not self.streaming_byte_budget_gb > 0:
            raise bad("streaming_byte_budget_gb", "must be > 0 (GiB of compressed payload per rank)")
        if self.streaming_decode_threads <= 0:
            raise bad("streaming_decode_threads", "must be > 0")
        if self.streaming_decoded_queue_size <= 0:
            raise bad("streaming_decoded_queue_size", "must be > 0")
        if self.streaming_sampling_strategy not in constants.SAMPLING_STRATEGIES:
            raise bad("streaming_sampling_strategy", f"must be one of {constants.SAMPLING_STRATEGIES}")
        if not self.streaming_read_timeout_s > 0:
            raise bad("streaming_read_timeout_s", "must be > 0 seconds")
        if not self.streaming_sidecar_lock_timeout_s > 0:
            raise bad("streaming_sidecar_lock_timeout_s", "must be > 0 seconds")
        if self.streaming_decode_device not in DECODE_DEVICES:
            raise bad("streaming_decode_device", f"must be one of {DECODE_DEVICES}")
        for flag in ("video_decoder_cache_size", "streaming_max_open_decoders"):
            v = getattr(self, flag)
            if v is not None and v <= 0:
                raise bad(flag, "must be > 0 (or unset for (episode pool + prefetch_episodes) x cameras per worker)")
        if (self.video_decoder_cache_size is not None and self.streaming_max_open_decoders is not None
                and self.video_decoder_cache_size != self.streaming_max_open_decoders):
            raise bad("streaming_max_open_decoders",
                      f"is the older name of --dataset.video_decoder_cache_size={self.video_decoder_cache_size}; "
                      "set only one of them")

        repo_ids = parse_list(self.repo_id) or []
        if len(repo_ids) > 1:
            if not self.streaming:
                raise bad("repo_id", "several datasets are trained on together only with --dataset.streaming=true "
                                     "(LeRobot's map-style loader has no mixture)")
            if len(set(repo_ids)) != len(repo_ids):
                raise bad("repo_id", "lists a dataset twice")
            roots = parse_list(self.root)
            if roots is not None and len(roots) != len(repo_ids):
                raise bad("root", f"must list one root per dataset of --dataset.repo_id ({len(repo_ids)})")
            if self.episodes is not None:
                raise bad("episodes", "cannot select episodes of a mixture from the command line (it would be "
                                      "ambiguous); use StreamingMultiLeRobotDataset(episodes={repo_id: [...]})")
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

    @property
    def decoder_cache_size(self) -> int | None:
        """The open-decoder cap per rank from either flag name (None → (episode pool +
        prefetch_episodes) × cameras, per worker)."""
        if self.video_decoder_cache_size is not None:
            return self.video_decoder_cache_size
        return self.streaming_max_open_decoders


@dataclass
class StreamingTrainPipelineConfig(TrainPipelineConfig):
    """LeRobot's ``TrainPipelineConfig`` whose ``dataset`` accepts the streaming flags."""

    # The dataset to train on (LeRobot's flags) and, with --dataset.streaming=true, how to stream it.
    dataset: StreamingDatasetConfig
