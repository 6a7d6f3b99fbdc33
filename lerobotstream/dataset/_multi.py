"""``StreamingMultiLeRobotDataset``: one torch ``IterableDataset`` over a weighted mixture of
LeRobotDataset v3 datasets, each streamed as :class:`StreamingLeRobotDataset` streams it.

Wiring: one :class:`StreamingLeRobotDataset` per dataset (its own sources, metadata, MP4
sidecar, fps, windows and decoders) → per process one :class:`Worker` per dataset → a
:class:`~lerobotstream.planner.MixturePlanner` (each dataset's rank/worker shards and pools, a
seeded mix sequence) → **one** pipeline per worker: one byte cache, one set of decode and
assembly threads and one prefetch frontier over global episode ids
(``offset[d] + episode_index``).

Budget: the rank's ``byte_budget_gb``, ``episode_pool_size`` and ``video_decoder_cache_size`` are
split over the datasets (``planner.mixture_shares``: half evenly, half by weight); the shares sum
to the rank's budget, so the whole mixture stays within it. ``decoded_cache_gb`` is one decoded-GOP
cache per worker for every dataset (keys namespaced by dataset): a dataset's need for decoded GOPs
follows its GOP length and episode lengths, not its weight.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import abc
from typing import Any, Callable, Iterator, Sequence

import torch

from lerobotstream import constants
from lerobotstream.dataset._dataset import GIB, ResumableStream, StreamingLeRobotDataset, iteration_start, yield_items
from lerobotstream.dataset._options import require
from lerobotstream.dataset._pipeline import Pipeline
from lerobotstream.errors import LeRobotStreamError, MixtureFeatureError, StreamingConfigError
from lerobotstream.features import aggregate_stats
from lerobotstream.payload_cache import EpisodeByteCache
from lerobotstream.planner import mixture_shares

__all__ = ["StreamingMultiLeRobotDataset", "PER_DATASET_OPTIONS"]

log = logging.getLogger("lerobotstream.dataset")

#: options that may be given per dataset, as a dict keyed by repo id
PER_DATASET_OPTIONS = ("episodes", "delta_timestamps", "revision", "repo_type", "data_root", "tolerance_s",
                       "camera_keys", "drop_n_last_frames")


class _CacheView:
    """One dataset's view of the mixture's byte cache (its episode ``e`` is ``offset + e`` there)."""

    def __init__(self, cache: EpisodeByteCache, offset: int) -> None:
        self.cache, self.offset = cache, offset

    def get(self, episode_index: int, **kw: Any):
        return self.cache.get(self.offset + int(episode_index), **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cache, name)


class _MixtureWorker:
    """Per-process state of a mixture: each dataset's :class:`Worker`, dispatch by global id."""

    def __init__(self, ds: StreamingMultiLeRobotDataset) -> None:
        self.pid = os.getpid()
        self.ds = ds
        self.workers = [child._state() for child in ds.datasets]
        self.cache: EpisodeByteCache | None = None

    def split(self, gid: int) -> tuple[int, int]:
        offsets = self.ds._offsets
        d = len(offsets) - 1
        while offsets[d] > gid:
            d -= 1
        return d, int(gid) - offsets[d]

    def fetch(self, gid: int):
        d, ep = self.split(gid)
        return self.workers[d].fetch(ep)

    def decode_group(self, gid: int, frames):
        d, ep = self.split(gid)
        return self.workers[d].jobs.decode_group(ep, frames)

    def assemble(self, gid: int, frame: int, dec) -> dict[str, Any]:
        d, ep = self.split(gid)
        item = self.workers[d].assemble(ep, frame, dec)
        for key in self.ds._dropped[d]:
            item.pop(key, None)
        item["dataset_index"] = torch.tensor(d, dtype=torch.int64)
        return item

    def on_free(self, gid: int) -> None:
        d, ep = self.split(gid)
        self.workers[d].on_free(ep)

    def add(self, **kw: float) -> None:
        self.workers[0].add(**kw)


def _per_dataset(name: str, value: Any, repo_ids: Sequence[str]) -> list[Any]:
    """``value`` for each dataset: a dict keyed by repo ids is per dataset (a repo id left out
    takes the default, None), anything else is shared. ``delta_timestamps`` is per dataset when
    its values are dicts (else it is one ``{feature: offsets}`` for every dataset).

    Raises:
        StreamingConfigError: a per-dataset dict with a key that is not one of the repo ids.
    """
    per = isinstance(value, abc.Mapping) and (
        name != "delta_timestamps" or (value and all(isinstance(v, (abc.Mapping, type(None))) for v in value.values())))
    if not per:
        return [value] * len(repo_ids)
    unknown = [k for k in value if k not in repo_ids]
    if unknown:
        raise StreamingConfigError(f"{name} given per dataset has key(s) {unknown} that are not repo ids of the "
                                   f"mixture {list(repo_ids)}", option=name, value=value)
    return [value.get(r) for r in repo_ids]


def _weights(weights: Any, repo_ids: Sequence[str]) -> list[float] | None:
    """Weights as floats, one per dataset (a sequence, or a dict by repo id); None stays None.

    Raises:
        StreamingConfigError: another length, a key that is not a repo id, a value that is not a
        finite number > 0.
    """
    import math
    import numbers

    if weights is None:
        return None
    n = len(repo_ids)
    if isinstance(weights, abc.Mapping):
        require("weights", weights, set(weights) == set(repo_ids), f"one weight per repo id {list(repo_ids)}")
        weights = [weights[r] for r in repo_ids]
    try:
        values = [float(w) if isinstance(w, numbers.Real) or hasattr(w, "__float__") else None for w in list(weights)]
    except (TypeError, ValueError):
        values = [None]
    require("weights", weights, len(values) == n and all(
        v is not None and not isinstance(w, bool) and math.isfinite(v) and v > 0 for v, w in zip(values, weights)),
            f"None or {n} finite numbers > 0 (one per repo id, or a dict by repo id)")
    return values


class StreamingMultiLeRobotDataset(ResumableStream, torch.utils.data.IterableDataset):
    """Stream a weighted mixture of LeRobotDataset v3 datasets (local, Hub, bucket, fsspec, mixed).

    Args:
        repo_ids: the datasets (unique); ``dataset_index`` of an item is its position here.
        roots: one root per dataset (path or URL; None entries: $HF_LEROBOT_HOME/<repo_id>, else the Hub), or None.
        weights: sampling weight per dataset (numbers > 0); None: in proportion to the selected
            frames (anchors) of each dataset.
        **options: :class:`StreamingLeRobotDataset`'s. These may be given per dataset as a dict
            keyed by repo id: ``episodes``, ``delta_timestamps`` (seconds; each dataset's own fps),
            ``revision``, ``repo_type``, ``data_root``, ``tolerance_s``, ``camera_keys``,
            ``drop_n_last_frames``. The rank's resources (``byte_budget_gb``, ``episode_pool_size``,
            ``decoded_cache_gb``, ``video_decoder_cache_size``) are one budget for the whole mixture,
            split over the datasets (half evenly, half by weight); ``decoded_cache_gb`` is one cache
            shared by the datasets. ``camera_keys`` defaults to the
            cameras common to every dataset (the others are never fetched).

    Items: what each dataset's :class:`StreamingLeRobotDataset` gives, restricted to the features
    common to every dataset (LeRobot's ``MultiLeRobotDataset`` rule; the dropped keys are logged
    as a warning), plus ``dataset_index`` (int64 scalar tensor). ``task_index`` stays each dataset's
    own. ``meta`` describes the mixture: the common ``features``, ``stats`` aggregated over every
    dataset (LeRobot's ``aggregate_stats``), every task; ``datasets[d]`` is each dataset's own
    :class:`StreamingLeRobotDataset`. ``stats()`` gives the per-process counters, as for one dataset.

    Mixing: with ``repeat=False`` one iterator visits every selected frame of every dataset
    exactly once (the weights shape the order: a dataset leaves the mix when it is exhausted); with
    ``repeat=True`` each dataset is its own endless chain of exact-coverage epochs and the weights
    set the rates. In every rank and worker the share of each dataset follows the weights to within
    one sample per block of 64 samples (``planner.MixSequence``). Rank and worker shards, seeds,
    ``set_epoch``, ``persistent_workers`` and sample-exact resume behave as for one dataset; the
    resume state records the mixture and refuses another one. ``fps`` is the first dataset's (30 for a
    30 and a 10 fps dataset); each streams at its own fps (``ds.datasets[i].fps``).

    Raises:
        StreamingConfigError: bad mixture options (duplicate or empty repo ids, roots or weights of
            another length, a weight <= 0, ``equalize="drop"``); MixtureFeatureError: a common
            feature's shape or dtype differs between two datasets (names both); and whatever
            :class:`StreamingLeRobotDataset` raises for one dataset (its message names it).
    """

    def __init__(self, repo_ids: Sequence[str], *, roots: Sequence[Any] | None = None,
                 weights: Sequence[float] | None = None, **options: Any) -> None:
        super().__init__()
        repo_ids = list(repo_ids) if not isinstance(repo_ids, str) else [repo_ids]
        require("repo_ids", repo_ids, len(repo_ids) >= 1 and all(isinstance(r, str) and r for r in repo_ids)
                and len(set(repo_ids)) == len(repo_ids), "a non-empty list of distinct repo ids")
        n = len(repo_ids)
        roots = [None] * n if roots is None else list(roots)
        require("roots", roots, len(roots) == n, f"None or one root per repo id ({n})")
        weights = _weights(weights, repo_ids)
        unknown = set(options) - set(_known_options())
        if unknown:
            raise StreamingConfigError(f"unknown option(s) {sorted(unknown)} for StreamingMultiLeRobotDataset",
                                       option=sorted(unknown)[0])
        if options.get("equalize", "none") != "none":
            raise StreamingConfigError("equalize='drop' is not supported for mixtures (use repeat=True, as "
                                       "lerobot-train does)", option="equalize", value=options["equalize"])
        t0 = time.perf_counter()
        self.repo_ids = repo_ids
        self.roots = roots
        per = {k: _per_dataset(k, options[k], repo_ids) for k in PER_DATASET_OPTIONS if k in options}
        shared = {k: v for k, v in options.items() if k not in per}
        self.datasets: list[StreamingLeRobotDataset] = []
        for d, (rid, root) in enumerate(zip(repo_ids, roots)):
            kw = dict(shared)
            kw.update({k: v[d] for k, v in per.items() if v[d] is not None})
            kw["repo_id"], kw["root"] = rid, root
            with _naming(d, rid):  # every option is checked here, by the dataset's own constructor
                self.datasets.append(StreamingLeRobotDataset(**kw))
        # the mixture's settings: the shared options as the first dataset resolved them (defaults included)
        first = self.datasets[0]
        self.seed, self.repeat, self.image_transforms = first.seed, first.repeat, first.image_transforms
        self.num_workers, self.batch_size, self.drop_last = first.num_workers, first.batch_size, first.drop_last
        self.return_uint8, self.episode_pool_size = first.return_uint8, first.episode_pool_size
        self.byte_budget_gb, self.decoded_cache_gb = first.byte_budget_gb, first.decoded_cache_gb
        self.video_decoder_cache_size, self.prefetch_episodes = first.video_decoder_cache_size, first.prefetch_episodes
        self.decode_threads, self.decoded_queue_size = first.decode_threads, first.decoded_queue_size
        self.decode_lookahead, self.first_lookahead = first.decode_lookahead, first.first_lookahead
        if "camera_keys" not in per:  # decode only the cameras every dataset has (the others are dropped)
            cams = [set(c.meta.camera_keys) for c in self.datasets]
            common = [k for k in self.datasets[0].meta.camera_keys if all(k in c for c in cams)]
            for d, child in enumerate(self.datasets):
                with _naming(d, repo_ids[d]):
                    child.select_cameras(common)
        self._check_features()
        frames = [sum(c.anchor_lengths().values()) for c in self.datasets]
        if any(f == 0 for f in frames):
            raise StreamingConfigError(f"dataset(s) {[r for r, f in zip(repo_ids, frames) if not f]} give no anchor")
        self.weights = [float(w) for w in (weights if weights is not None else frames)]
        self.weights_given = weights is not None
        self._offsets, off = [], 0
        for c in self.datasets:
            self._offsets.append(off)
            off += int(max(c.meta.episode_indices)) + 1
        self.meta = self._mixture_meta(aggregate_stats([c.meta.stats for c in self.datasets], keys=self.features))
        self._epoch, self._samples, self._yielded = 0, 0, 0
        self._state_num_workers: int | None = None
        self._iter_pid: int | None = None
        self._iter_starts = 0
        self._worker: _MixtureWorker | None = None
        self._transforms_in_threads = True
        self._setup_s = time.perf_counter() - t0

    # --- features -------------------------------------------------------------------------------
    def _check_features(self) -> None:
        feats = [c.meta.features for c in self.datasets]
        common = [k for k in feats[0] if all(k in f for f in feats)]
        if not common:
            raise MixtureFeatureError(f"the datasets {self.repo_ids} have no feature in common")
        for key in common:
            for attr in ("dtype", "shape"):
                ref = _norm(feats[0][key].get(attr))
                for d in range(1, len(feats)):
                    got = _norm(feats[d][key].get(attr))
                    if got != ref:
                        raise MixtureFeatureError(
                            f"feature {key!r} has {attr} {ref} in dataset 0 ({self.repo_ids[0]}) but {got} in "
                            f"dataset {d} ({self.repo_ids[d]}): a mixture needs one {attr} per common feature "
                            f"(select other cameras with camera_keys, or re-encode one dataset)", option=key)
        self.features = {k: feats[0][k] for k in common}
        decoded = [set(c.video_keys) | set(c.image_keys) for c in self.datasets]
        for d in range(1, len(decoded)):
            a, b = sorted(decoded[0] & set(common)), sorted(decoded[d] & set(common))
            if a != b:
                raise MixtureFeatureError(
                    f"the datasets decode different cameras: {a} in dataset 0 ({self.repo_ids[0]}) but {b} in dataset "
                    f"{d} ({self.repo_ids[d]}); items of a mixture have one key set: give every dataset the same "
                    "camera_keys", option="camera_keys")
        lengths = [{k: len(v) for k, v in (c.delta_timestamps or {}).items()} for c in self.datasets]
        for key in sorted({k for w in lengths for k in w} & set(common)):
            ref = lengths[0].get(key)
            for d in range(1, len(lengths)):
                if lengths[d].get(key) != ref:
                    what = lambda n: "no window" if n is None else f"a window of {n} offsets"  # noqa: E731
                    raise MixtureFeatureError(
                        f"delta_timestamps[{key!r}] is {what(ref)} in dataset 0 ({self.repo_ids[0]}) but "
                        f"{what(lengths[d].get(key))} in dataset {d} ({self.repo_ids[d]}): the items of a mixture "
                        "are stacked into batches, so every dataset needs the same number of offsets per key "
                        "(the offsets themselves may differ, e.g. the same horizon at another fps)",
                        option="delta_timestamps")
        self._dropped = []
        for d, f in enumerate(feats):
            extra = [k for k in f if k not in self.features]
            drop = extra + [f"{k}_is_pad" for k in extra]
            self._dropped.append(tuple(drop))
            if extra:
                log.warning("lerobotstream: keys %s of %s are dropped: not in every dataset of the mixture",
                            extra, self.repo_ids[d])

    def _mixture_meta(self, stats: dict[str, Any]):
        """A :class:`~lerobotstream.meta.DatasetMeta` of the mixture as a whole: the common features,
        the aggregated stats, every dataset's tasks (first appearance order; an item's
        ``task_index`` stays its own dataset's), summed totals, the first dataset's fps and info
        fields, no episode rows (each dataset's are in ``datasets[d].meta``)."""
        from lerobotstream.meta import DatasetMeta

        first = self.datasets[0].meta
        info = {**first.info, "features": dict(self.features),
                "total_episodes": sum(int(c.meta.total_episodes) for c in self.datasets),
                "total_frames": sum(int(c.meta.total_frames) for c in self.datasets)}
        tasks = list(dict.fromkeys(t for c in self.datasets for t in c.meta.tasks))
        return DatasetMeta(source=first.source, info=info, tasks=tasks, stats=stats, episodes=[],
                           total_episodes=info["total_episodes"], total_frames=info["total_frames"],
                           repo_id="[" + ",".join(self.repo_ids) + "]", warnings_=[])

    # --- LeRobot-like surface ---------------------------------------------------------------------
    @property
    def episodes(self) -> dict[str, list[int] | None]:
        """Each dataset's episode selection by repo id (None: every episode)."""
        return {r: c.episodes for r, c in zip(self.repo_ids, self.datasets)}

    @property
    def sidecar_status(self) -> str:
        """``"built"`` if any dataset's sidecar was built, else ``"published"`` if any was
        downloaded, else ``"cache"``."""
        how = [c.sidecar_status for c in self.datasets]
        return next((h for h in ("built", "published") if h in how), "cache")

    @property
    def fps(self) -> int:
        """Frames per second of the first dataset (each dataset streams at its own fps)."""
        return self.datasets[0].fps

    @property
    def num_frames(self) -> int:
        return sum(c.num_frames for c in self.datasets)

    @property
    def num_episodes(self) -> int:
        return sum(c.num_episodes for c in self.datasets)

    @property
    def camera_keys(self) -> list[str]:
        return [k for k in self.features if self.features[k].get("dtype") in ("video", "image")]

    @property
    def video_keys(self) -> list[str]:
        """Decoded video keys common to every dataset."""
        return [k for k in self.datasets[0].video_keys if k in self.features]

    @property
    def repo_id_to_index(self) -> dict[str, int]:
        return {r: i for i, r in enumerate(self.repo_ids)}

    @property
    def mixture(self) -> dict[str, Any]:
        """The mixture as recorded in resume states and checkpoints (JSON-able)."""
        return {"repo_ids": list(self.repo_ids), "weights": [float(w) for w in self.weights],
                "weights_given": self.weights_given}

    def __getstate__(self) -> dict[str, Any]:
        st = dict(self.__dict__)
        st["_worker"] = None
        return st

    # --- planner and resume -------------------------------------------------------------------------
    def _planner(self, num_workers: int, nbytes: Sequence[Callable[[int], int]] | None = None):
        from lerobotstream.planner import MixturePlanner
        from lerobotstream.planner._seeds import seed_words

        shares = mixture_shares(self.weights)
        nw = max(1, int(num_workers))
        pool = self.episode_pool_size or max(1, constants.DEFAULT_EPISODE_POOL_SIZE_PER_RANK // nw)
        planners = []
        for d, (child, share) in enumerate(zip(self.datasets, shares)):
            seed_d = int(seed_words(self.seed, 0x4D495854, d)[0] >> 2)
            dec = None if self.video_decoder_cache_size is None else max(1, int(self.video_decoder_cache_size * share))
            with _naming(d, self.repo_ids[d], f"its share {share:.1%} of the mixture's byte_budget_gb="
                                              f"{self.byte_budget_gb:g} and pool"):
                planners.append(child._planner(int(num_workers), None if nbytes is None else nbytes[d], seed=seed_d,
                                               pool_size=max(1, round(pool * share)),
                                               byte_budget_gb=self.byte_budget_gb * share, decoder_cache_size=dec,
                                               batch_size=1))
        return MixturePlanner(planners, self.weights, self._offsets, seed=self.seed, repeat=self.repeat,
                              batch_size=int(self.batch_size or 1), drop_last=self.drop_last, mixture=self.mixture,
                              byte_budget=max(1, int(self.byte_budget_gb * GIB)), pool_size=self.episode_pool_size)

    # samples_consumed, set_epoch, state_dict, load_state_dict: ResumableStream's (the state records
    # the mixture: repo ids and weights; another mixture or a single-dataset state is refused)

    # --- per process ----------------------------------------------------------------------------
    def _state(self) -> _MixtureWorker:
        if self._worker is None or self._worker.pid != os.getpid():
            self._worker = _MixtureWorker(self)
        return self._worker

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from lerobotstream.planner import current_worker

        wid, nw = current_worker()
        in_process = nw == 0
        self._transforms_in_threads = not in_process
        for child in self.datasets:
            child._transforms_in_threads = not in_process
        epoch, samples = iteration_start(self, nw)
        mw = self._state()
        planner = self._planner(nw, [w.episode_nbytes for w in mw.workers])
        planner.set_epoch(epoch)
        planner.samples_consumed = samples
        start = planner.worker_start(wid, nw)
        plans = []
        shares = mixture_shares(self.weights)
        for d, p in enumerate(planner.planners):  # ByteBudgetError here, before any fetch
            with _naming(d, self.repo_ids[d], f"its share {shares[d]:.1%} of the mixture's "
                                              f"byte_budget_gb={self.byte_budget_gb:g}"):
                plans.append(p.worker_plan(start.logical_worker))
        if not any(len(p.episode_indices) for p in plans):
            return
        nbytes: dict[int, int] = {}
        budget = 0
        gops = mw.workers[0].jobs.gops  # one decoded-GOP cache for the mixture: each dataset's keys namespaced
        for d, (child, w, plan) in enumerate(zip(self.datasets, mw.workers, plans)):
            n_cams = max(1, len(child.video_keys))
            cap = plan.decoder_cache_size or plan.pool_size * n_cams + self.prefetch_episodes * n_cams
            w.decoders.clear()
            w.decoders.capacity = max(1, int(cap))
            w.jobs.gops, w.jobs.namespace = gops, (d,)
            w.reset_gops(int(self.decoded_cache_gb * GIB) // max(1, nw))
            nbytes.update({self._offsets[d] + int(e): int(b) for e, b in zip(plan.episode_indices, plan.nbytes)})
            budget += int(plan.byte_budget or 0) if len(plan.episode_indices) else 0
        cache = EpisodeByteCache(max(1, budget), nbytes, mw.fetch, max_workers=max(1, min(8, self.prefetch_episodes + 1)))
        mw.cache = cache
        for d, w in enumerate(mw.workers):
            w.cache = _CacheView(cache, self._offsets[d])
        times = mw.workers[0].times
        pipe = Pipeline(planner.worker_pools(start, plans), start.limit, cache, mw.decode_group, mw.assemble,
                        decode_threads=self.decode_threads, decoded_queue_size=self.decoded_queue_size,
                        prefetch_episodes=self.prefetch_episodes, lookahead=self.decode_lookahead,
                        on_free=mw.on_free, times=times,
                        first_lookahead=self.first_lookahead or self.batch_size or 8)
        keys = [k for k in dict.fromkeys(k for c in self.datasets for k in c._cameras.transform_keys)
                if k in self.features]
        try:
            yield from yield_items(self, pipe, mw.add, keys, in_process)
        finally:
            for w in mw.workers:
                w.decoders.clear()
                w.reset_gops()

    def source_stats(self) -> dict[str, Any]:
        """Every dataset's payload-source counters summed (see
        :meth:`StreamingLeRobotDataset.source_stats`). Empty before iterating."""
        parts = [c.source_stats() for c in self.datasets]
        if not any(parts):
            return {}
        keys = dict.fromkeys(k for p in parts for k in p)
        return {k: sum(p.get(k, 0) for p in parts) for k in keys if all(isinstance(p.get(k, 0), (int, float)) for p in parts)}

    def stats(self) -> dict[str, Any]:
        """Per-process counters of the mixture: each dataset's :meth:`StreamingLeRobotDataset.stats`
        under ``datasets`` (its ``cache`` and budget fields are the mixture's shared cache), and
        the sums of the numeric counters (``source`` request and byte counts, frames, stage
        seconds) at the top level. Empty before iterating."""
        if self._worker is None:
            return {}
        per = [c.stats() for c in self.datasets]
        out: dict[str, Any] = {"datasets": per, "mixture": self.mixture}
        for k in per[0]:
            vals = [p.get(k) for p in per]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
                shared = k in ("reserved_bytes", "resident_bytes", "byte_budget") or k.startswith("gop_cache")
                out[k] = vals[0] if shared else sum(vals)  # one byte cache and one GOP cache for the mixture
            elif k == "source":
                out[k] = {sk: sum(p["source"].get(sk, 0) for p in per) for sk in per[0]["source"]
                          if isinstance(per[0]["source"][sk], (int, float))}
        fd, fr = out.get("frames_decoded", 0), out.get("frames_returned", 0)
        out["frames_decoded_per_returned"] = fd / fr if fr else None
        for k in ("sidecar", "cache"):
            out[k] = per[0].get(k)
        return out

    def __repr__(self) -> str:
        total = sum(self.weights)
        return (f"StreamingMultiLeRobotDataset({self.repo_ids}, shares={[float(f'{w / total:.3g}') for w in self.weights]}, "
                f"frames={self.num_frames}, episodes={self.num_episodes})")


@contextlib.contextmanager
def _naming(d: int, repo_id: str, share: str | None = None) -> Iterator[None]:
    """Re-raise a dataset's typed error with the dataset of the mixture (and its share) named."""
    try:
        yield
    except LeRobotStreamError as exc:
        where = f"dataset {d} ({repo_id}{'; ' + share if share else ''})"
        if exc.message.startswith(f"dataset {d} ("):
            raise
        raise type(exc)(f"{where}: {exc.message}", **getattr(exc, "_fields", {})) from exc


def _get(per: dict[str, list], key: str, d: int) -> Any:
    return per[key][d] if key in per else None


def _norm(v: Any) -> Any:
    return tuple(v) if isinstance(v, (list, tuple)) else v


def _known_options() -> list[str]:
    import inspect

    return [p for p in inspect.signature(StreamingLeRobotDataset.__init__).parameters if p not in ("self", "repo_id", "root")]
