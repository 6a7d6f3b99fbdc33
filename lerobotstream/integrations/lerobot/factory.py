"""Dataset factory for ``lerobotstream-train``: config -> train (and eval) :class:`TrainingStream`.

``make_streaming_datasets(cfg)`` does what LeRobot 0.6.1's ``make_train_eval_datasets`` does
(delta timestamps, image transforms, ImageNet stats but for depth keys, the per-task
``eval_split``) with :class:`lerobotstream.StreamingLeRobotDataset` streams of the
``--dataset.streaming_*`` options, ``max_num_shards = max(1, num_workers)`` and the training seed:

* train: ``repeat=True``, ``drop_n_last_frames`` from the policy (LeRobot's ``EpisodeAwareSampler``
  rule), uint8 camera frames when LeRobot's loop converts them (0.6.x), float32 otherwise (0.4.4);
* eval (``eval_split > 0``): the held-out episodes, sequential, ``repeat=False`` (every frame once
  per pass), no image transforms, no per-sample tags.

``--dataset.repo_id='[a,b]'`` (``--dataset.root`` a matching list, ``--dataset.streaming_weights``
optional) builds :class:`lerobotstream.StreamingMultiLeRobotDataset` streams instead: delta
timestamps per dataset's fps, ``eval_split`` per dataset, ``dataset.meta`` the mixture's.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from lerobotstream import constants
from lerobotstream.dataset._dataset import StreamingLeRobotDataset
from lerobotstream.dataset._multi import StreamingMultiLeRobotDataset
from lerobotstream.dataset._wiring import ORIGIN_KEYS
from lerobotstream.errors import StreamingConfigError
from lerobotstream.integrations.lerobot.meta_view import LeRobotMetaView

__all__ = [
    "TrainingStream",
    "make_streaming_datasets",
    "make_streaming_dataset",
    "split_episodes_by_task",
    "parse_list",
    "streaming_seed",
    "TAG_KEYS",
]

log = logging.getLogger("lerobotstream.train")

# Per-sample bookkeeping added in the worker and removed in the training process before the batch
# reaches LeRobot (summary.BatchCounters): DataLoader worker id, process id (the source counters are
# per process, shared by its shards in threads mode), that process's cumulative payload bytes / requests,
# and its cumulative MP4 payload bytes by origin (``_wiring.ORIGIN_KEYS``, one int64 vector; -1: unknown).
TAG_WORKER, TAG_PROCESS, TAG_BYTES, TAG_REQUESTS = "_lrs_worker", "_lrs_process", "_lrs_bytes_read", "_lrs_requests"
TAG_ORIGIN = "_lrs_payload_origin"
TAG_KEYS = (TAG_WORKER, TAG_PROCESS, TAG_BYTES, TAG_REQUESTS, TAG_ORIGIN)

IMAGENET_STATS = {
    "mean": [[[0.485]], [[0.456]], [[0.406]]],  # (c,1,1)
    "std": [[[0.229]], [[0.224]], [[0.225]]],  # (c,1,1)
}


def parse_list(value: str | list | None) -> list[str] | None:
    """``'[a,b]'`` / ``'a,b'``-style flag text (or a list) as a list of strings; None stays None.
    A plain ``'a'`` is ``['a']``. Quotes and spaces around the items are dropped."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    text = str(value).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return [part.strip().strip("'\"").strip() for part in text.split(",") if part.strip()]


def streaming_seed(seed: int | None) -> int:
    """The stream's seed for a training ``--seed`` (None → 42)."""
    return constants.SEED_WHEN_NONE if seed is None else int(seed)


def trainable_config(cfg: Any) -> Any:
    """The config LeRobot reads delta indices, device and dtype from: ``cfg.trainable_config``
    (0.6.x: the policy or the reward model), else ``cfg.policy`` (0.4.4)."""
    return getattr(cfg, "trainable_config", None) or cfg.policy


class TrainingStream(torch.utils.data.IterableDataset):
    """What ``lerobot-train`` gets as its dataset: the stream plus LeRobot's metadata view.
    Picklable (``spawn`` workers). Other attributes are the stream's.

    Args:
        dataset: the stream.
        sidecar_status: how the process obtained the MP4 sidecar (default: the dataset's).
        tags: add the int64 tags :data:`TAG_KEYS` to every item (stripped before LeRobot sees the
            batch: they carry each worker's fetched bytes to the summary). Off for the eval stream.
        max_samples: items per pass at most, over all DataLoader workers of this rank (each worker
            stops after its ceil share); None: the whole stream.
    """

    def __init__(
        self,
        dataset: StreamingLeRobotDataset,
        sidecar_status: str | None = None,
        *,
        tags: bool = True,
        max_samples: int | None = None,
    ) -> None:
        super().__init__()
        self.dataset = dataset
        self.meta = LeRobotMetaView(dataset.meta, getattr(dataset, "root", None))  # a mixture has no root
        #: "built" / "published" / "cache": the first dataset constructed in the process decides
        self.sidecar_status = sidecar_status or dataset.sidecar_status
        self.tags = bool(tags)
        self.max_samples = max_samples

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        wid, nw = (-1, 0) if info is None else (int(info.id), int(info.num_workers))
        return self.wrap_items(iter(self.dataset), wid, nw, self.dataset.source_stats)

    def wrap_items(
        self, items: Iterator[dict[str, Any]], wid: int, nw: int, source_stats: Callable[[], dict[str, Any]]
    ) -> Iterator[dict[str, Any]]:
        """Items of worker ``wid`` of ``nw`` (-1, 0: in-process) with the pass limit and the tags
        (``source_stats``: that worker's payload counters, the stream's ``source_stats()`` keys).
        ``StreamLoader``'s hook too."""
        limit = None if self.max_samples is None else math.ceil(self.max_samples / max(1, nw))
        for n, item in enumerate(items):
            if limit is not None and n >= limit:
                return
            if self.tags:
                src = source_stats()
                tags = (wid, os.getpid(), int(src.get("bytes_read", 0)), int(src.get("requests", 0)))
                item.update({k: torch.tensor(v, dtype=torch.int64) for k, v in zip(TAG_KEYS[:4], tags)})
                item[TAG_ORIGIN] = torch.tensor([int(src.get(k, -1)) for k in ORIGIN_KEYS], dtype=torch.int64)
            yield item

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "meta"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


def split_episodes_by_task(episodes: list[Any], eval_split: float) -> tuple[list[int], list[int]]:
    """``(train_episode_indices, eval_episode_indices)`` of the ``episodes`` (``EpisodeInfo`` rows),
    each in task-then-episode order, by LeRobot 0.6.1's ``make_train_eval_datasets`` split: per task
    (an episode's first, "" when none), the last ``ceil(n * eval_split)`` episodes are held out.

    Raises:
        StreamingConfigError: the split leaves no training episode.
    """
    by_task: dict[str, list[int]] = {}
    for ep in episodes:
        by_task.setdefault(ep.tasks[0] if ep.tasks else "", []).append(int(ep.episode_index))
    train, held = [], []
    for eps in by_task.values():
        n_eval = math.ceil(len(eps) * eval_split)
        train.extend(eps[: len(eps) - n_eval])
        held.extend(eps[len(eps) - n_eval :])
    if not train:
        raise StreamingConfigError(
            f"--dataset.eval_split={eval_split} leaves 0 training episodes from {len(episodes)} total"
        )
    return train, held


def _loop_converts_uint8() -> bool:
    """True when LeRobot's training loop turns uint8 camera frames into float32 itself (0.6.x: in
    ``train``; main after 0.6.1: in ``_preprocess_dataset_batch``, shared with held-out evaluation)."""
    from lerobotstream.integrations.lerobot import patching

    lt = patching.check_lerobot()
    try:
        return any(
            "torch.uint8" in inspect.getsource(fn)
            for fn in (lt.train.__wrapped__, getattr(lt, "_preprocess_dataset_batch", None))
            if fn is not None
        )
    except (OSError, TypeError):  # no source shipped: 0.6 and later convert
        return patching.lerobot_version() >= (0, 6, 0)


def _delta_timestamps(cfg: Any, meta: Any) -> dict[str, list[float]] | None:
    """LeRobot's ``resolve_delta_timestamps`` for one dataset's metadata, with ``cfg.rename_map``
    where LeRobot takes it (main after 0.6.1, #4076: dataset keys renamed to the policy's before the
    image/state histories are chosen; 0.6.1 and 0.4.4 take no map)."""
    from lerobot.datasets.factory import resolve_delta_timestamps

    view = LeRobotMetaView(meta)
    rename_map = getattr(cfg, "rename_map", None)
    if rename_map and "rename_map" in inspect.signature(resolve_delta_timestamps).parameters:
        return resolve_delta_timestamps(trainable_config(cfg), view, rename_map)
    return resolve_delta_timestamps(trainable_config(cfg), view)


def _selected_episodes(d: Any, total: int) -> list[int] | None:
    """``--dataset.episodes`` less ``--dataset.exclude_episodes`` (LeRobot after 0.6.1); None: all.
    Excluded indices outside ``[0, total)`` are ignored with a warning, as LeRobot does."""
    excluded = list(getattr(d, "exclude_episodes", None) or [])
    if not excluded:
        return d.episodes
    outside = sorted(e for e in set(excluded) if not 0 <= int(e) < total)
    if outside:
        log.warning("lerobotstream: ignoring --dataset.exclude_episodes outside [0, %d): %s", total, outside)
    keep = [int(e) for e in (d.episodes if d.episodes is not None else range(total)) if int(e) not in set(excluded)]
    if not keep:
        raise StreamingConfigError(f"--dataset.exclude_episodes={excluded} leaves no episode of {d.repo_id}")
    return keep


def _image_transforms(cfg: Any) -> Any:
    try:
        from lerobot.transforms import ImageTransforms  # 0.6.x
    except ImportError:
        from lerobot.datasets.transforms import ImageTransforms  # 0.4.4
    return ImageTransforms(cfg.dataset.image_transforms) if cfg.dataset.image_transforms.enable else None


def _stream_kwargs(cfg: Any) -> dict[str, Any]:
    """Options both streams share: every ``--dataset.<flag>`` option (``options.train_flags``), the
    dataset, LeRobot's settings (tolerance, seed, batch size, workers, depth unit)."""
    from lerobotstream.options import train_flags

    d = cfg.dataset
    kw = {info.name: getattr(d, info.flag) for info in train_flags()}
    kw.update(
        repo_id=d.repo_id,
        root=d.root,
        revision=d.revision,
        max_num_shards=max(1, int(cfg.num_workers)),
        tolerance_s=cfg.tolerance_s,
        video_backend="torchcodec",
        seed=streaming_seed(cfg.seed),
        batch_size=int(cfg.batch_size),
        num_workers=int(cfg.num_workers),
        drop_last=False,
        depth_output_unit=getattr(d, "depth_output_unit", "mm"),
    )  # 0.4.4 has no depth flag
    return kw


def _streams(cfg: Any, make: Any, status: str, train_eps: Any, eval_eps: Any, train_kw: dict, eval_kw: dict) -> tuple:
    """The train stream and, when ``eval_eps`` holds out episodes, the eval stream, built by
    ``make(**options)`` (``train_kw`` / ``eval_kw``: options of one of them). With
    ``--dataset.use_imagenet_stats`` their ``meta`` get ImageNet stats for RGB (never depth) keys."""
    uint8 = _loop_converts_uint8()
    drop = int(getattr(trainable_config(cfg), "drop_n_last_frames", 0) or 0)
    max_eval = int(getattr(cfg, "max_eval_samples", 0) or 0) or None
    train = TrainingStream(
        make(
            episodes=train_eps,
            image_transforms=_image_transforms(cfg),
            return_uint8=uint8,
            repeat=True,
            drop_n_last_frames=drop,
            **train_kw,
        ),
        sidecar_status=status,
    )
    evaluation = None
    if eval_eps:
        eval_ds = make(
            episodes=eval_eps,
            image_transforms=None,
            return_uint8=uint8,
            repeat=False,
            sampling_strategy="sequential",
            **eval_kw,
        )
        evaluation = TrainingStream(eval_ds, sidecar_status=status, tags=False, max_samples=max_eval)
    for stream in (train, evaluation):
        if stream is not None and cfg.dataset.use_imagenet_stats:
            meta = stream.meta
            for key in (k for k in meta.camera_keys if k not in meta.depth_keys):
                for stats_type, stats in IMAGENET_STATS.items():
                    meta.stats.setdefault(key, {})[stats_type] = torch.tensor(stats, dtype=torch.float32)
    return train, evaluation


def _sidecar_status(datasets: list[Any]) -> str:
    """How this process obtained the MP4 sidecars: "built" or "published" if any probe did, else "cache"."""
    return next((h for h in ("built", "published") if h in [ds.sidecar_status for ds in datasets]), "cache")


def make_streaming_datasets(cfg: Any) -> tuple[TrainingStream, TrainingStream | None]:
    """The train stream and, with ``--dataset.eval_split > 0``, the eval stream.

    Raises:
        StreamingConfigError: several repo ids, a split that leaves no training episode, bad flags.
        lerobotstream errors from the dataset (metadata, sources, sharding).
    """
    d = cfg.dataset
    repo_ids = parse_list(d.repo_id) or [d.repo_id]
    if len(repo_ids) > 1:
        return _make_mixture_streams(cfg, repo_ids)
    common = _stream_kwargs(cfg)
    first = StreamingLeRobotDataset(**common, episodes=d.episodes)  # metadata: features + fps + tasks
    episodes = _selected_episodes(d, first.meta.total_episodes)
    probe = first if episodes == d.episodes else StreamingLeRobotDataset(**common, episodes=episodes)
    delta_timestamps = _delta_timestamps(cfg, probe.meta)
    train_eps, eval_eps = _eval_split(cfg, probe, episodes)

    def make(**kw: Any) -> StreamingLeRobotDataset:
        return StreamingLeRobotDataset(**(common | kw), delta_timestamps=delta_timestamps)

    # the eval stream is sequential and small: no canonical partitions (its order is the episodes')
    return _streams(cfg, make, _sidecar_status([first, probe]), train_eps, eval_eps, {}, {"partitions": None})


def _eval_split(
    cfg: Any, probe: StreamingLeRobotDataset, episodes: list[int] | None
) -> tuple[list[int] | None, list[int]]:
    """(train episodes, held-out episodes) of one dataset for ``--dataset.eval_split``."""
    eval_split = float(getattr(cfg.dataset, "eval_split", 0.0) or 0.0)
    if eval_split <= 0:
        return episodes, []
    train_eps, eval_eps = split_episodes_by_task(list(probe.meta.episodes), eval_split)
    log.info(
        "lerobotstream: train/eval split of %s: %d train, %d eval episodes (eval_split=%s)",
        probe.meta.repo_id,
        len(train_eps),
        len(eval_eps),
        eval_split,
    )
    return train_eps, eval_eps


def _make_mixture_streams(cfg: Any, repo_ids: list[str]) -> tuple[TrainingStream, TrainingStream | None]:
    """``make_streaming_datasets`` for ``--dataset.repo_id='[a,b,...]'``: weighted mixture streams."""
    d = cfg.dataset
    if getattr(d, "exclude_episodes", None):
        raise StreamingConfigError(
            "--dataset.exclude_episodes cannot select episodes of a mixture from the command "
            "line (it would be ambiguous); use StreamingMultiLeRobotDataset(episodes={repo_id: "
            "[...]})"
        )
    n = len(repo_ids)
    roots = parse_list(d.root) or [None] * n
    data_roots = parse_list(d.streaming_data_root) or [None] * n
    if len(roots) != n or len(data_roots) != n:
        raise StreamingConfigError(
            f"--dataset.root and --dataset.streaming_data_root must list one entry per "
            f"dataset of --dataset.repo_id ({n})"
        )
    common = _stream_kwargs(cfg)
    for key in ("repo_id", "root", "data_root"):
        common.pop(key)
    probes = [
        StreamingLeRobotDataset(**common, repo_id=r, root=root, data_root=dr)
        for r, root, dr in zip(repo_ids, roots, data_roots)
    ]
    delta = {r: _delta_timestamps(cfg, p.meta) for r, p in zip(repo_ids, probes)}
    splits = {r: _eval_split(cfg, p, None) for r, p in zip(repo_ids, probes)}
    held = {r: ev for r, (_, ev) in splits.items() if ev}
    if held and len(held) < n:
        raise StreamingConfigError(f"--dataset.eval_split holds out no episode of {sorted(set(repo_ids) - set(held))}")
    mix = dict(common, roots=roots, data_root=dict(zip(repo_ids, data_roots)), delta_timestamps=delta)
    weights = None if d.streaming_weights is None else [float(w) for w in d.streaming_weights]

    def make(**kw: Any) -> StreamingMultiLeRobotDataset:
        return StreamingMultiLeRobotDataset(repo_ids, **(mix | kw))

    train_eps = {r: tr for r, (tr, _) in splits.items()}
    train, evaluation = _streams(cfg, make, _sidecar_status(probes), train_eps, held, {"weights": weights}, {})
    ws = train.dataset.weights
    log.info("lerobotstream: mixture of %d datasets %s, weights %s", n, repo_ids, [round(w / sum(ws), 4) for w in ws])
    return train, evaluation


def make_streaming_dataset(cfg: Any) -> TrainingStream:
    """The train stream alone (LeRobot 0.4.4's ``make_dataset`` seam; ``eval_split`` is 0.6's)."""
    return make_streaming_datasets(cfg)[0]
