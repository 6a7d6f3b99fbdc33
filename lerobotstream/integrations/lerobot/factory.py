"""Dataset factory for ``lerobotstream-train``: config → :class:`TrainingStream`.

``make_streaming_dataset(cfg)`` does what LeRobot's ``make_dataset`` does for a map-style
dataset (delta timestamps from the policy, image transforms, ImageNet stats) but builds a
:class:`lerobotstream.StreamingLeRobotDataset` with the ``--dataset.streaming_*`` options,
``max_num_shards = max(1, num_workers)``, ``repeat=True`` and the training seed
(``--seed=null`` → 42).
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import torch

from lerobotstream import constants
from lerobotstream.dataset import StreamingLeRobotDataset
from lerobotstream.errors import StreamingConfigError

__all__ = ["PolicyMeta", "TrainingStream", "make_streaming_dataset", "streaming_seed", "TAG_KEYS"]

# Per-sample bookkeeping added in the worker and removed in the training process before the
# batch reaches LeRobot (see train.py): DataLoader worker id, cumulative payload bytes / requests
# of that worker process.
TAG_WORKER, TAG_BYTES, TAG_REQUESTS = "_lrs_worker", "_lrs_bytes_read", "_lrs_requests"
TAG_KEYS = (TAG_WORKER, TAG_BYTES, TAG_REQUESTS)

IMAGENET_STATS = {
    "mean": [[[0.485]], [[0.456]], [[0.406]]],  # (c,1,1)
    "std": [[[0.229]], [[0.224]], [[0.225]]],  # (c,1,1)
}


def streaming_seed(seed: int | None) -> int:
    """The stream's seed for a training ``--seed`` (None → 42, SPEC C4)."""
    return constants.SEED_WHEN_NONE if seed is None else int(seed)


class PolicyMeta:
    """The metadata view LeRobot's policy factory and processors read (``features``, ``stats``,
    ``fps``, ``camera_keys``...), over :class:`lerobotstream.meta.DatasetMeta`.

    ``stats`` holds numpy arrays like LeRobot's ``LeRobotDatasetMetadata.stats`` (a private,
    mutable copy: LeRobot writes ImageNet stats into it). Other attributes come from the
    underlying metadata.
    """

    def __init__(self, meta: Any) -> None:
        self._meta = meta
        self.features = meta.features
        self.stats = {k: {s: np.asarray(v) for s, v in d.items()} for k, d in (meta.stats or {}).items()
                      if isinstance(d, dict)}

    @property
    def total_episodes(self) -> int:
        return int(self._meta.total_episodes)

    @property
    def total_frames(self) -> int:
        return int(self._meta.total_frames)

    @property
    def robot_type(self) -> str | None:
        return self._meta.info.get("robot_type")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_meta":
            raise AttributeError(name)
        return getattr(self._meta, name)


class TrainingStream(torch.utils.data.IterableDataset):
    """What ``lerobot-train`` gets as its dataset: the stream plus LeRobot's metadata view.

    Iterating yields the stream's items with three small int64 tags (:data:`TAG_KEYS`) that the
    training process strips before LeRobot sees the batch; they carry each worker's fetched
    bytes back for the streaming summary. Other attributes are the stream's.
    """

    def __init__(self, dataset: StreamingLeRobotDataset, sidecar_status: str | None = None) -> None:
        super().__init__()
        self.dataset = dataset
        self.meta = PolicyMeta(dataset.meta)
        #: how this process obtained the MP4 sidecar ("built" / "published" / "cache"): the first
        #: dataset constructed in the process decides (a later one always finds the cache).
        self.sidecar_status = sidecar_status or dataset.sidecar_status

    @property
    def num_frames(self) -> int:
        return int(self.dataset.num_frames)

    @property
    def num_episodes(self) -> int:
        return int(self.dataset.num_episodes)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        wid = -1 if info is None else int(info.id)
        for item in self.dataset:
            src = (self.dataset.stats() or {}).get("source", {})
            item[TAG_WORKER] = torch.tensor(wid, dtype=torch.int64)
            item[TAG_BYTES] = torch.tensor(int(src.get("bytes_read", 0)), dtype=torch.int64)
            item[TAG_REQUESTS] = torch.tensor(int(src.get("requests", 0)), dtype=torch.int64)
            yield item

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "meta"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


def _dataset_kwargs(cfg: Any) -> dict[str, Any]:
    d = cfg.dataset
    return dict(repo_id=d.repo_id, root=d.root, episodes=d.episodes, revision=d.revision,
                repo_type=d.repo_type, data_root=d.streaming_data_root)


def make_streaming_dataset(cfg: Any) -> TrainingStream:
    """Build the training stream for a ``StreamingTrainPipelineConfig`` with ``streaming=true``.

    Raises:
        StreamingConfigError: a policy that needs LeRobot's map-style episode sampler.
        lerobotstream errors from the dataset (metadata, sources, sharding).
    """
    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.datasets.transforms import ImageTransforms

    d = cfg.dataset
    if isinstance(d.repo_id, list):
        raise StreamingConfigError("--dataset.repo_id: several datasets are not supported with streaming")
    if hasattr(cfg.policy, "drop_n_last_frames"):
        raise StreamingConfigError(
            f"--policy.type={cfg.policy.type}: this policy trains with LeRobot's EpisodeAwareSampler "
            "(drop_n_last_frames), which LeRobot builds only for map-style datasets; use "
            "--dataset.streaming=false for it")
    common = _dataset_kwargs(cfg)
    probe = StreamingLeRobotDataset(**common)  # metadata only: features + fps for the policy's deltas
    delta_timestamps = resolve_delta_timestamps(cfg.policy, PolicyMeta(probe.meta))
    image_transforms = ImageTransforms(d.image_transforms) if d.image_transforms.enable else None
    import inspect

    accepted = inspect.signature(StreamingLeRobotDataset.__init__).parameters
    resume_kw = {k: v for k, v in (("batch_size", int(cfg.batch_size)), ("num_workers", int(cfg.num_workers)),
                                   ("drop_last", False)) if k in accepted}  # LeRobot's DataLoader settings
    ds = StreamingLeRobotDataset(
        **common,
        **resume_kw,
        delta_timestamps=delta_timestamps,
        image_transforms=image_transforms,
        max_num_shards=max(1, int(cfg.num_workers)),
        tolerance_s=cfg.tolerance_s,
        return_uint8=False,
        video_backend="torchcodec",
        seed=streaming_seed(cfg.seed),
        repeat=True,
        episode_pool_size=d.streaming_episode_pool_size,
        prefetch_episodes=d.streaming_prefetch_episodes,
        byte_budget_gb=d.streaming_byte_budget_gb,
        decode_threads=d.streaming_decode_threads,
        decoded_queue_size=d.streaming_decoded_queue_size,
        video_decoder_cache_size=d.decoder_cache_size,
        sampling_strategy=d.streaming_sampling_strategy,
        sidecar_lock_timeout_s=d.streaming_sidecar_lock_timeout_s,
        device=d.streaming_decode_device,
    )
    stream = TrainingStream(ds, sidecar_status=probe.sidecar_status)
    if d.use_imagenet_stats:
        for key in stream.meta.camera_keys:
            stream.meta.stats.setdefault(key, {})
            for stats_type, stats in IMAGENET_STATS.items():
                stream.meta.stats[key][stats_type] = torch.tensor(stats, dtype=torch.float32)
    return stream
