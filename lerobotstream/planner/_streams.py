"""What a planner plays and with which settings: :class:`Streams` (N >= 1 streams; one dataset is a
mixture of one) and :class:`PlanSettings`, and the one rule giving each stream its settings
(:meth:`Streams.specs`), recorded in the state so a resume rebuilds the very same streams:

* ``"dataset"``: the stream gets the settings as they are (pool size None: 32 per rank over the
  workers used, decided by the layout).
* ``"mixture"``: dataset d gets its own seed (derived from the seed and d; a mixture of one uses the
  seed itself) and its share (:func:`~lerobotstream.planner._mixseq.mixture_shares`) of the pool (per
  worker; per partition with partitions), the byte budget (``max(1, int(byte_budget x share))``
  bytes) and the open-decoder cap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from lerobotstream import constants
from lerobotstream.options import StreamOptions, check_option
from lerobotstream.planner._layout import TAG_MIXTURE, StreamSpec, derived_seed
from lerobotstream.planner._mixseq import integer_weights, mixture_shares
from lerobotstream.planner._state import episodes_digest

__all__ = ["PlanSettings", "Streams", "no_sizes"]


@dataclass(frozen=True)
class PlanSettings:
    """What a rank's planner needs of the stream's options, named as the options (``num_workers``,
    ``batch_size``, ``drop_last``: the DataLoader's that batches the stream).

    Fields:
        seed (int | None): order seed (None: ``constants.SEED_WHEN_NONE``).
        num_workers (int): DataLoader workers per rank (0: in the training process).
        episode_pool_size (int | None): per-worker pool size (None: 32 per rank split over the
            workers used; with ``partitions``: per partition, ``DEFAULT_PARTITION_POOL_SIZE``).
        sampling_strategy (str): ``remaining``, ``round_robin`` or ``sequential``.
        byte_budget (int | None): per-rank budget of synthesized bytes (None: unbounded).
        video_decoder_cache_size (int | None): per-rank open-decoder cap.
        repeat (bool), batch_size (int), drop_last (bool), equalize (str: ``none`` or ``drop``),
            partitions (int | None: canonical partitions): those options.
        rank, world_size (int | None): None: discovered (``discover_world``); a planner's
            settings have them resolved (with the rest, its topology).

    Raises:
        StreamingConfigError (a ValueError): a field breaks its option's rule (named, with the
            value and the rule); ValueError: ``byte_budget`` < 1 byte.
    """

    seed: int | None = constants.DEFAULT_SEED
    num_workers: int = 0
    episode_pool_size: int | None = None
    sampling_strategy: str = constants.DEFAULT_SAMPLING_STRATEGY
    byte_budget: int | None = None
    video_decoder_cache_size: int | None = None
    repeat: bool = False
    batch_size: int = 1
    drop_last: bool = False
    equalize: str = "none"
    partitions: int | None = None
    rank: int | None = None
    world_size: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):  # the options' fields, by their rules (the planner needs these two set)
            if f.name in StreamOptions.__dataclass_fields__:
                check_option(f.name, getattr(self, f.name), required=f.name in ("num_workers", "batch_size"))
        if self.byte_budget is not None and not self.byte_budget >= 1:
            raise ValueError(f"byte_budget must be >= 1 byte or None, got {self.byte_budget}")

    @property
    def num_shards(self) -> int:
        """Logical workers per rank: ``max(1, num_workers)`` (0 and 1 are one stream)."""
        return max(1, int(self.num_workers))


def no_sizes(episode_index: int) -> int:
    """The sizes of a stream that has none (a planner that only computes states): asking fails."""
    raise AssertionError("this planner has no episode sizes (episode_nbytes) to replay a byte budget with")


@dataclass(frozen=True, eq=False)
class Streams:
    """The streams of a planner (see the module doc).

    Fields:
        episodes: one selection per stream (:meth:`of_dataset`'s).
        weights: the mixing weights as given (floats, > 0 in sum); the shares follow them.
        offsets: global episode id offset per stream (``offsets[d] + episode_index``).
        names: each stream's name (messages: a repo id).
        rule: ``"dataset"`` (one dataset) or ``"mixture"``.
        mixture: the mixture's JSON-able description recorded in states (None: one dataset).
    """

    episodes: tuple[StreamSpec, ...]
    weights: tuple[float, ...] = (1.0,)
    offsets: tuple[int, ...] = (0,)
    names: tuple[str, ...] = ("0",)
    rule: str = "dataset"
    mixture: dict[str, Any] | None = None

    @classmethod
    def of_dataset(
        cls,
        episode_lengths: Mapping[int, int] | np.ndarray | Sequence[int],
        sizes: Callable[[int], int] | None = None,
        *,
        episode_indices: Any = None,
    ) -> Streams:
        """One dataset (the ``"dataset"`` rule): its selection (a ``StreamSpec``; :meth:`specs` fills
        in its settings) from ``{episode_index: length}`` or 1-D lengths (then ``episode_indices``,
        default ``0..E-1``), and its ``sizes`` (``sizes(episode_index) -> bytes``; None: no budget
        possible). Length 0: dropped.

        Raises:
            ValueError: indices not unique, of another length than the lengths, negative lengths.
        """
        if isinstance(episode_lengths, Mapping):
            episode_indices, episode_lengths = list(episode_lengths), [int(n) for n in episode_lengths.values()]
        lens = np.asarray(episode_lengths, dtype=np.int64).reshape(-1)
        if episode_indices is None:
            episode_indices = np.arange(len(lens))
        idx = np.asarray(episode_indices, dtype=np.int64).reshape(-1)
        if len(idx) != len(lens):
            raise ValueError(f"{len(idx)} episode indices for {len(lens)} lengths")
        o = np.argsort(idx, kind="stable")
        idx, lens = idx[o], lens[o]
        if len(np.unique(idx)) != len(idx):
            raise ValueError("episode indices must be unique")
        if (lens < 0).any():
            raise ValueError(f"negative episode length for episode {int(idx[np.argmax(lens < 0)])}")
        keep = lens > 0
        idx, lens = idx[keep], lens[keep]
        return cls((StreamSpec(idx, lens, episodes_digest(idx, lens), 0, sizes=sizes),))

    @classmethod
    def of_mixture(
        cls,
        episode_lengths: Sequence[Mapping[int, int] | StreamSpec],
        weights: Sequence[float],
        offsets: Sequence[int],
        sizes: Sequence[Callable[[int], int] | None] | None = None,
        mixture: dict[str, Any] | None = None,
    ) -> Streams:
        """A weighted mixture (the ``"mixture"`` rule): one dataset per entry of ``episode_lengths``
        (``{episode_index: length}``, or a ready :class:`StreamSpec`) with its ``weights`` entry,
        global episode id offset and sizes (None: :func:`no_sizes`); ``mixture``: the JSON-able
        description recorded in states (repo ids, weights; its ``repo_ids`` name the datasets in messages).

        Raises:
            ValueError: bad weights, or not one weight and one offset per dataset.
        """
        sizes = list(sizes) if sizes else [None] * len(episode_lengths)
        episodes = [
            n if isinstance(n, StreamSpec) else cls.of_dataset(n, nb or no_sizes).episodes[0]
            for n, nb in zip(episode_lengths, sizes)
        ]
        if not episodes or len(weights) != len(episodes) or len(offsets) != len(episodes):
            raise ValueError("a mixture needs one weight and one offset per dataset")
        names = tuple(str(n) for n in (mixture or {}).get("repo_ids", range(len(episodes))))
        integer_weights(weights)  # ValueError for bad weights, here
        weights, offsets = tuple(float(w) for w in weights), tuple(int(o) for o in offsets)
        return cls(tuple(episodes), weights, offsets, names, "mixture", dict(mixture or {}))

    def specs(self, s: PlanSettings, seed: int) -> list[StreamSpec]:
        """Each stream's :class:`StreamSpec` under settings ``s`` (``seed``: ``s.seed`` mapped) by
        the streams' rule (see the module doc)."""
        mix = self.rule == "mixture"
        pool = s.episode_pool_size
        if mix and not pool:
            per_rank = constants.DEFAULT_EPISODE_POOL_SIZE_PER_RANK // s.num_shards
            pool = constants.DEFAULT_PARTITION_POOL_SIZE if s.partitions is not None else max(1, per_rank)

        def part(total: int | None, share: float, rounding: Callable[[float], int] = int) -> int | None:
            return total if total is None or not mix else max(1, rounding(total * share))

        return [
            replace(
                e,
                seed=int(seed) if len(self.episodes) == 1 else derived_seed(seed, TAG_MIXTURE, d),
                strategy=s.sampling_strategy,
                partitions=s.partitions,
                pool_size=part(pool, share, round),
                byte_budget=part(s.byte_budget, share),
                video_decoder_cache_size=part(s.video_decoder_cache_size, share),
            )
            for d, (e, share) in enumerate(zip(self.episodes, mixture_shares(self.weights)))
        ]
