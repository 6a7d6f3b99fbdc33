"""``StreamingMultiLeRobotDataset``: one torch ``IterableDataset`` over a weighted mixture of
LeRobotDataset v3 datasets, each streamed as :class:`StreamingLeRobotDataset` streams it.

Here: the per-dataset options, the common features and metadata, the weights, one stream part per
dataset (global episode offset, dropped keys, ``dataset_index``) and the mixture's planner; the
rest is the stream core's (:mod:`lerobotstream.dataset._stream`). The rank's ``byte_budget_gb``,
``episode_pool_size`` and ``video_decoder_cache_size`` are split over the datasets
(``planner.mixture_shares``: half evenly, half by weight); ``decoded_cache_gb`` is shared.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections import abc
from collections.abc import Callable, Sequence
from typing import Any

from lerobotstream.dataset._dataset import StreamingLeRobotDataset
from lerobotstream.dataset._stream import LoaderSettings, StreamCore, StreamPart, add_option_views, plan_settings
from lerobotstream.errors import MixtureFeatureError, StreamingConfigError, naming
from lerobotstream.features import aggregate_stats
from lerobotstream.options import StreamOptions, is_sequence, per_dataset_options, require

__all__ = ["StreamingMultiLeRobotDataset", "PER_DATASET_OPTIONS"]

log = logging.getLogger("lerobotstream.dataset")

#: options that may be given per dataset, as a dict keyed by repo id (``StreamOptions``' per-dataset ones)
PER_DATASET_OPTIONS = per_dataset_options()
_OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(StreamOptions))

#: the notes already logged in this process (a run may build the same mixture several times)
_NOTED: set[str] = set()


def _per_dataset(kwargs: dict[str, Any], repo_ids: Sequence[str]) -> dict[str, list[Any]]:
    """The options given per dataset (a dict keyed by repo ids; ``delta_timestamps`` when its
    values are dicts) as ``{name: [value of each dataset]}``, None for a repo id left out.

    Raises:
        StreamingConfigError: an option that is not per-dataset given as a dict keyed by repo ids,
            or a per-dataset dict with a key that is not a repo id.
    """
    for name, value in kwargs.items():
        if name in PER_DATASET_OPTIONS or name not in _OPTION_NAMES or not isinstance(value, abc.Mapping) or not value:
            continue
        if any(isinstance(k, str) and k in repo_ids for k in value):
            raise StreamingConfigError(
                f"{name} is not a per-dataset option: a mixture takes one {name} for all its datasets, "
                f"got a dict keyed by repo id {value!r} (options given per dataset: {', '.join(PER_DATASET_OPTIONS)})",
                option=name,
                value=value,
            )
    per = {}
    for name in PER_DATASET_OPTIONS:
        value = kwargs.get(name)
        if not isinstance(value, abc.Mapping) or (
            name == "delta_timestamps"
            and not (value and all(isinstance(v, (abc.Mapping, type(None))) for v in value.values()))
        ):
            continue
        unknown = [k for k in value if k not in repo_ids]
        if unknown:
            raise StreamingConfigError(
                f"{name} given per dataset has key(s) {unknown} that are not repo ids of the mixture {list(repo_ids)}",
                option=name,
                value=value,
            )
        per[name] = [value.get(r) for r in repo_ids]
    return per


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
    require("weights", weights, is_sequence(weights), f"None or {n} finite numbers > 0 (one per repo id)")
    try:
        values = [float(w) if isinstance(w, numbers.Real) or hasattr(w, "__float__") else None for w in list(weights)]
    except (TypeError, ValueError):
        values = [None]
    require(
        "weights",
        weights,
        len(values) == n
        and all(
            v is not None and not isinstance(w, bool) and math.isfinite(v) and v > 0 for v, w in zip(values, weights)
        ),
        f"None or {n} finite numbers > 0 (one per repo id, or a dict by repo id)",
    )
    return values


class StreamingMultiLeRobotDataset(StreamCore):
    """Stream a weighted mixture of LeRobotDataset v3 datasets (local, Hub, bucket, fsspec, mixed).

    Args:
        repo_ids: the datasets (unique); ``dataset_index`` of an item is its position here.
        roots: one root per dataset (path or URL; None entries: $HF_LEROBOT_HOME/<repo_id>, else the Hub), or None.
        weights: sampling weight per dataset (numbers > 0); None: in proportion to the selected
            frames (anchors) of each dataset.
        options, **kwargs: :class:`StreamingLeRobotDataset`'s; the per-dataset ones
            (:data:`PER_DATASET_OPTIONS`) may be given as a dict keyed by repo id (each dataset's
            resolved options: ``ds.datasets[d].options``). The resources are one budget for the
            whole mixture (see the module doc). ``camera_keys`` defaults to the cameras every
            dataset has.

    Items: each dataset's, restricted to the features common to every dataset (LeRobot's
    ``MultiLeRobotDataset`` rule; the dropped keys are logged), plus ``dataset_index`` (int64 scalar
    tensor). ``meta``: the common ``features``, ``stats`` aggregated (LeRobot's ``aggregate_stats``),
    every task; ``datasets[d]``: each dataset's own :class:`StreamingLeRobotDataset`.

    Mixing: ``repeat=False`` visits every selected frame of every dataset once per epoch;
    ``repeat=True`` chains each dataset's epochs at rates set by the weights (in every rank and
    worker to within one sample per 64). The rest behaves as for one dataset.

    Raises:
        StreamingConfigError: bad mixture options (duplicate or empty repo ids, roots or weights of
            another length, a weight <= 0); MixtureFeatureError: a common feature's shape or dtype
            differs between two datasets (names both); and whatever :class:`StreamingLeRobotDataset`
            raises for one dataset (its message names it).
    """

    def __init__(
        self,
        repo_ids: Sequence[str],
        *,
        roots: Sequence[Any] | None = None,
        weights: Sequence[float] | None = None,
        options: StreamOptions | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        repo_ids = list(repo_ids) if not isinstance(repo_ids, str) else [repo_ids]
        require(
            "repo_ids",
            repo_ids,
            len(repo_ids) >= 1
            and all(isinstance(r, str) and r for r in repo_ids)
            and len(set(repo_ids)) == len(repo_ids),
            "a non-empty list of distinct repo ids",
        )
        n = len(repo_ids)
        require("roots", roots, roots is None or is_sequence(roots), f"None or one root per repo id ({n})")
        roots = [None] * n if roots is None else list(roots)
        require("roots", roots, len(roots) == n, f"None or one root per repo id ({n})")
        weights = _weights(weights, repo_ids)
        t0 = time.perf_counter()
        self.repo_ids = repo_ids
        self.roots = roots
        # the mixture's own options are every dataset's defaults (MosaicML's ``stream.apply_default``);
        # a per-dataset option given as a dict keyed by repo id sets it for each dataset instead
        per = _per_dataset(kwargs, repo_ids)
        self.options = StreamOptions.from_arguments(
            options, (), {k: v for k, v in kwargs.items() if k not in per}, "StreamingMultiLeRobotDataset"
        ).resolved()
        self.datasets: list[StreamingLeRobotDataset] = []
        for d, (rid, root) in enumerate(zip(repo_ids, roots)):
            own = {k: v[d] for k, v in per.items() if v[d] is not None}
            with naming(f"dataset {d} ({rid})"):  # checks the per-dataset options, naming the dataset
                self.datasets.append(StreamingLeRobotDataset(rid, root, options=self.options, **own))
        # decode only the cameras every dataset has (the others are dropped)
        if self.options.camera_keys is None and "camera_keys" not in per:
            cams = [set(c.meta.camera_keys) for c in self.datasets]
            common = [k for k in self.datasets[0].meta.camera_keys if all(k in c for c in cams)]
            for d, child in enumerate(self.datasets):
                with naming(f"dataset {d} ({repo_ids[d]})"):
                    child.select_cameras(common)
            left_out: list[set[str]] = [set() for _ in self.datasets]
        else:  # the cameras the user's camera_keys left out: not "dropped" by the mixture
            left_out = [set(c.meta.camera_keys) - set(c.video_keys) - set(c.image_keys) for c in self.datasets]
        self._check_features(left_out)
        frames = [sum(c.anchor_lengths().values()) for c in self.datasets]
        if any(f == 0 for f in frames):
            raise StreamingConfigError(f"dataset(s) {[r for r, f in zip(repo_ids, frames) if not f]} give no anchor")
        self.weights = [float(w) for w in (weights if weights is not None else frames)]
        self.weights_given = weights is not None
        self._offsets = [0, *itertools.accumulate(int(max(c.meta.episode_indices)) + 1 for c in self.datasets[:-1])]
        self.meta = self._mixture_meta(
            aggregate_stats(
                [c.meta.stats for c in self.datasets],
                keys=self.features,
                names=[f"dataset {d} ({r})" for d, r in enumerate(self.repo_ids)],
            )
        )
        if self.options.partitions is not None:  # its rules (>= ranks x workers, <= each dataset's episodes) first
            self._planner(self.loader_settings())
        self._setup_s = time.perf_counter() - t0

    # --- features -------------------------------------------------------------------------------
    def _check_features(self, left_out: Sequence[set[str]]) -> None:
        """The common features (``self.features``) and each dataset's dropped keys (MixtureFeatureError
        for a mismatch); the dropped keys not ``left_out`` by ``camera_keys`` are logged once per process."""
        feats = [c.meta.features for c in self.datasets]
        common = [k for k in feats[0] if all(k in f for f in feats)]
        if not common:
            raise MixtureFeatureError(f"the datasets {self.repo_ids} have no feature in common")
        for key in common:
            for attr in ("dtype", "shape"):
                self._refuse_differing(
                    [_norm(f[key].get(attr)) for f in feats],
                    f"feature {key!r} has {attr} ",
                    f": a mixture needs one {attr} per common feature "
                    "(select other cameras with camera_keys, or re-encode one dataset)",
                    key,
                )
        self.features = {k: feats[0][k] for k in common}
        decoded = [sorted(set(c.video_keys) | set(c.image_keys)) for c in self.datasets]
        uncommon = sorted({k for cams in decoded for k in cams} - set(common))
        self._refuse_differing(
            [[k for k in cams if k in common] for cams in decoded],  # the cameras items would have
            "the datasets decode different cameras: ",
            (f"; no item has {uncommon} (not a camera of every dataset)" if uncommon else "")
            + "; items of a mixture have one key set: give every dataset the same camera_keys",
            "camera_keys",
            shown=decoded,
        )
        lengths = [{k: len(v) for k, v in (c.options.delta_timestamps or {}).items()} for c in self.datasets]
        for key in sorted({k for w in lengths for k in w} & set(common)):
            self._refuse_differing(
                [w.get(key) for w in lengths],
                f"delta_timestamps[{key!r}] is ",
                ": the items of a mixture are stacked into batches, so every dataset needs the same number of "
                "offsets per key (the offsets themselves may differ, e.g. the same horizon at another fps)",
                "delta_timestamps",
                lambda n: "no window" if n is None else f"a window of {n} offsets",
            )
        self._dropped = []
        notes = []
        for d, f in enumerate(feats):
            extra = [k for k in f if k not in self.features]
            drop = extra + [f"{k}_is_pad" for k in extra]
            self._dropped.append(tuple(drop))
            asked = [k for k in extra if k not in left_out[d]]
            if asked:
                notes.append(f"{asked} of {self.repo_ids[d]}")
        note = f"lerobotstream: mixture {list(self.repo_ids)}: keys not in every dataset are dropped: " + "; ".join(
            notes
        )
        if notes and note not in _NOTED:
            _NOTED.add(note)
            log.warning(note)

    def _refuse_differing(
        self, values: list, head: str, tail: str, option: str, show: Callable = str, shown: list | None = None
    ) -> None:
        """Raise MixtureFeatureError naming dataset 0 and the first dataset whose value differs
        (``shown``: what the message names for each dataset, when not ``values``)."""
        shown = values if shown is None else shown
        for d in range(1, len(values)):
            if values[d] != values[0]:
                raise MixtureFeatureError(
                    f"{head}{show(shown[0])} in dataset 0 ({self.repo_ids[0]}) but {show(shown[d])} in dataset {d} "
                    f"({self.repo_ids[d]}){tail}",
                    option=option,
                )

    def _mixture_meta(self, stats: dict[str, Any]):
        """The mixture's :class:`~lerobotstream.meta.DatasetMeta`: the common features, ``stats``, every
        dataset's tasks (first appearance order; ``task_index`` stays each dataset's), summed totals,
        the first dataset's fps and info fields, no episode rows."""
        from lerobotstream.meta import DatasetMeta

        first = self.datasets[0].meta
        info = {
            **first.info,
            "features": dict(self.features),
            "total_episodes": sum(int(c.meta.total_episodes) for c in self.datasets),
            "total_frames": sum(int(c.meta.total_frames) for c in self.datasets),
        }
        tasks = list(dict.fromkeys(t for c in self.datasets for t in c.meta.tasks))
        return DatasetMeta(
            source=first.source,
            info=info,
            tasks=tasks,
            stats=stats,
            episodes=first.episodes.take([]),
            total_episodes=info["total_episodes"],
            total_frames=info["total_frames"],
            repo_id="[" + ",".join(self.repo_ids) + "]",
            warnings=[],
        )

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
        return {
            "repo_ids": list(self.repo_ids),
            "weights": [float(w) for w in self.weights],
            "weights_given": self.weights_given,
        }

    # --- the stream core's parts and planner -----------------------------------------------------
    def _parts(self) -> list[StreamPart]:
        keys = [k for c in self.datasets for k in c.transform_keys]
        transform_keys = tuple(k for k in dict.fromkeys(keys) if k in self.features)
        return [
            StreamPart(child.reader_config(), offset=off, dataset_index=d, dropped=drop, transform_keys=transform_keys)
            for d, (child, off, drop) in enumerate(zip(self.datasets, self._offsets, self._dropped))
        ]

    def _planner(self, loader: LoaderSettings | int, episode_nbytes: Sequence[Callable[[int], int]] | None = None):
        """The mixture's planner for ``loader`` (``episode_nbytes``: each dataset's sizes; None: this process's)."""
        from lerobotstream.planner._planner import Planner
        from lerobotstream.planner._streams import Streams

        streams = Streams.of_mixture(
            [c.anchor_lengths() for c in self.datasets],
            self.weights,
            self._offsets,
            episode_nbytes or self.episode_sizes(),
            self.mixture,
        )
        return Planner(streams, plan_settings(self.options, self.loader_settings(loader)))

    def _part_count(self) -> int:
        return len(self.datasets)

    def _combine_source_stats(self, parts: list[dict[str, Any]]) -> dict[str, Any]:
        """``source_stats()``: every dataset's payload-source counters summed (numeric ones)."""
        if not any(parts):
            return {}
        keys = dict.fromkeys(k for p in parts for k in p)
        return {
            k: sum(p.get(k, 0) for p in parts)
            for k in keys
            if all(isinstance(p.get(k, 0), (int, float)) for p in parts)
        }

    def stats(self) -> dict[str, Any]:
        """Per-process counters: each dataset's own under ``datasets`` (:meth:`StreamingLeRobotDataset.stats`
        less the worker's shared ones), the worker's shared ones (pipeline, byte and decoded-GOP caches)
        and each dataset's numeric counters summed at the top level. Empty before iterating."""
        return self._stats_of(self._readers)

    def _stats_of(self, readers: Any) -> dict[str, Any]:
        if readers is None:
            return {}
        per = [{"sidecar": c.sidecar_status, **readers.part_stats(d)} for d, c in enumerate(self.datasets)]
        out: dict[str, Any] = {"datasets": per, "mixture": self.mixture}
        for k in per[0]:
            vals = [p.get(k) for p in per]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
                out[k] = sum(vals)
            elif k == "bytes_by_epoch":  # each dataset's epoch e, summed
                out[k] = {}
                for p in per:
                    for e, row in p[k].items():
                        acc = out[k].setdefault(e, dict.fromkeys(row, 0))
                        for rk, rv in row.items():
                            acc[rk] += rv
                out[k] = dict(sorted(out[k].items()))
            elif k == "source":  # the same numeric keys in every dataset (``SourceStats``)
                out[k] = self._combine_source_stats([p["source"] for p in per])
        out.update(readers.pipeline_stats())
        out["items"] = readers.times.items
        fd, fr = out.get("frames_decoded", 0), out.get("frames_returned", 0)
        out["frames_decoded_per_returned"] = fd / fr if fr else None
        out["sidecar"] = self.sidecar_status
        return out

    def __repr__(self) -> str:
        total = sum(self.weights)
        return (
            f"StreamingMultiLeRobotDataset({self.repo_ids}, shares={[float(f'{w / total:.3g}') for w in self.weights]}, "
            f"frames={self.num_frames}, episodes={self.num_episodes})"
        )


add_option_views(StreamingMultiLeRobotDataset, skip=PER_DATASET_OPTIONS)


def _norm(v: Any) -> Any:
    return tuple(v) if isinstance(v, (list, tuple)) else v
