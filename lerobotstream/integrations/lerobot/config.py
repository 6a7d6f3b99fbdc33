"""``--dataset.streaming_*`` flags: LeRobot's config classes extended through draccus dataclasses.

``StreamingDatasetConfig`` subclasses LeRobot's ``DatasetConfig`` (every LeRobot flag keeps its
meaning) and adds the streaming options of SPEC §5; ``StreamingTrainPipelineConfig`` is LeRobot's
``TrainPipelineConfig`` with that dataset config. Checkpoints written with these classes store the
extra fields in ``train_config.json``, so ``--resume=true`` reloads them.
"""

from __future__ import annotations

from dataclasses import dataclass

from lerobot.configs.default import DatasetConfig
from lerobot.configs.train import TrainPipelineConfig

from lerobotstream import constants
from lerobotstream.errors import StreamingConfigError

__all__ = ["StreamingDatasetConfig", "StreamingTrainPipelineConfig", "REPO_TYPES", "DECODE_DEVICES"]

REPO_TYPES = ("dataset", "bucket")
DECODE_DEVICES = ("cpu", "cuda")


@dataclass
class StreamingDatasetConfig(DatasetConfig):
    """LeRobot's dataset flags plus the streaming options (used only with ``streaming=true``).

    Fields (SPEC §5, C2; per rank unless said otherwise):
        repo_type: ``dataset`` (Hub dataset repo) or ``bucket`` (Hugging Face Storage Bucket;
            needs ``streaming=true``). ``root=hf://buckets/OWNER/BUCKET`` also selects a bucket.
        streaming_episode_pool_size: complete episodes mixed at once; None → 32 per rank, split
            over the DataLoader workers. > 0.
        streaming_prefetch_episodes: episodes fetched ahead of the active pool. >= 0.
        streaming_byte_budget_gb: synthesized (compressed) MP4 bytes held per rank, GiB. > 0.
        streaming_decode_threads: sample-assembly / decode threads per worker. > 0.
        streaming_decoded_queue_size: decoded samples buffered ahead. > 0.
        streaming_sampling_strategy: ``remaining`` (default) or ``round_robin``.
        streaming_sidecar_lock_timeout_s: wait for another process's sidecar build, s. > 0.
        streaming_data_root: optional payload root (local, ``hf://``, bucket or fsspec URL);
            unset → the dataset root / repo.
        streaming_decode_device: ``cpu`` or ``cuda`` (NVDEC with CPU fallback).
        video_decoder_cache_size: open-decoder LRU cap per rank; None → pool × cameras.
        streaming_max_open_decoders: older name of ``video_decoder_cache_size`` (either may be set).

    Raises:
        StreamingConfigError: an invalid value (the message names the flag).
    """

    repo_type: str = "dataset"
    streaming_episode_pool_size: int | None = None
    streaming_prefetch_episodes: int = constants.DEFAULT_PREFETCH_EPISODES
    streaming_byte_budget_gb: float = constants.DEFAULT_BYTE_BUDGET_GB
    streaming_decode_threads: int = constants.DEFAULT_DECODE_THREADS
    streaming_decoded_queue_size: int = constants.DEFAULT_DECODED_QUEUE_SIZE
    streaming_sampling_strategy: str = constants.DEFAULT_SAMPLING_STRATEGY
    streaming_sidecar_lock_timeout_s: float = constants.DEFAULT_SIDECAR_LOCK_TIMEOUT_S
    streaming_data_root: str | None = None
    streaming_decode_device: str = "cpu"
    video_decoder_cache_size: int | None = None
    streaming_max_open_decoders: int | None = None

    def __post_init__(self) -> None:
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
        if not self.streaming_sidecar_lock_timeout_s > 0:
            raise bad("streaming_sidecar_lock_timeout_s", "must be > 0 seconds")
        if self.streaming_decode_device not in DECODE_DEVICES:
            raise bad("streaming_decode_device", f"must be one of {DECODE_DEVICES}")
        for flag in ("video_decoder_cache_size", "streaming_max_open_decoders"):
            v = getattr(self, flag)
            if v is not None and v <= 0:
                raise bad(flag, "must be > 0 (or unset for pool x cameras)")
        if (self.video_decoder_cache_size is not None and self.streaming_max_open_decoders is not None
                and self.video_decoder_cache_size != self.streaming_max_open_decoders):
            raise bad("streaming_max_open_decoders",
                      f"is the older name of --dataset.video_decoder_cache_size={self.video_decoder_cache_size}; "
                      "set only one of them")

    @property
    def decoder_cache_size(self) -> int | None:
        """The open-decoder cap per rank from either flag name (None → pool × cameras)."""
        if self.video_decoder_cache_size is not None:
            return self.video_decoder_cache_size
        return self.streaming_max_open_decoders


@dataclass
class StreamingTrainPipelineConfig(TrainPipelineConfig):
    """LeRobot's ``TrainPipelineConfig`` whose ``dataset`` accepts the streaming flags."""

    dataset: StreamingDatasetConfig  # type: ignore[assignment]  # narrowed: same position, still required
