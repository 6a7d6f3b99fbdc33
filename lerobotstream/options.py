"""``StreamOptions``: every option of a stream, in one table: default, unit, rule, whether a
mixture may set it per dataset, and how ``lerobotstream-train`` sets it.

Everything that lists options reads this table: the dataset constructors and their signatures
(:func:`constructor_signature`), the checks (:meth:`StreamOptions.validate`, :func:`check_option`
wherever a value arrives), :func:`per_dataset_options`, the ``--dataset.streaming_*`` flags
(:func:`train_flags`) and ``docs/options.md`` (:func:`options_markdown`; a test fails when it is
stale). A stream keeps its options resolved and frozen as ``ds.options`` (:meth:`StreamOptions.resolved`).

Units are in the names: ``*_gb`` GiB (2**30 bytes), ``*_s`` seconds; "per rank" resources are split
evenly over the rank's DataLoader workers.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import math
import re
import typing
from collections import abc
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from lerobotstream import constants
from lerobotstream.errors import OptionArgumentError, StreamingConfigError

# --- the rules the declarations use -----------------------------------------------------------------
#: the largest byte budget the C planner can hold (int64 bytes), in GiB
MAX_BUDGET_GB = float(2**62) / 2**30
#: plausible maxima of the int options (a larger value is a typo or hostile, and would overflow a
#: C long later): episodes, anchors, batches, frames, partitions
MAX_COUNT = 2**20
#: threads of one kind per DataLoader worker (decode threads, FFmpeg threads per decoder)
MAX_THREADS = 256
MAX_SEED = 2**64 - 1
#: the longest timeout, seconds (a week; Python's thread waits refuse about 9.2e9 s)
MAX_SECONDS = 7 * 24 * 3600.0
DEVICE_RE = re.compile(r"cpu|cuda(:[0-9]+)?", re.ASCII)


def require(name: str, value: Any, ok: bool, want: str) -> None:
    """Raise :class:`StreamingConfigError` naming the option and its value unless ``ok``."""
    if not ok:
        raise StreamingConfigError(f"{name} must be {want}, got {value!r}", option=name, value=value)


def is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def check_epoch(epoch: Any) -> int:
    """The rule of an epoch number (``set_epoch``'s argument): an int >= 0; returns it as an int.

    Raises:
        StreamingConfigError: ``epoch must be an int >= 0, got -1`` (``option="epoch"``).
    """
    require("epoch", epoch, is_int(epoch) and epoch >= 0, "an int >= 0")
    return int(epoch)


def is_number(v: Any) -> bool:
    """A finite real number that fits a float64 (bools, strings, nan, inf and 10**400 are not)."""
    if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, (bool, np.bool_)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def is_bool(v: Any) -> bool:
    return isinstance(v, (bool, np.bool_))


def int_in(lo: int, hi: int, none_ok: bool = False) -> Callable[[Any], bool]:
    """The rule "an int in [lo, hi]" (and None when ``none_ok``)."""
    return lambda v: (none_ok and v is None) or (is_int(v) and lo <= v <= hi)


def is_sequence(v: Any) -> bool:
    """``v`` is a collection where a sequence is meant (list, tuple, range, array, set, iterator):
    never a ``str``, ``bytes``, ``bytearray``, ``memoryview`` (``b"1"`` would be episode 49) or a
    mapping (its keys)."""
    return isinstance(v, abc.Iterable) and not isinstance(v, (str, bytes, bytearray, memoryview, abc.Mapping))


def path_ok(v: Any) -> bool:
    """None, a ``str`` path or URL, or an ``os.PathLike`` whose path is a ``str`` (not ``bytes``)."""
    import os

    if v is None or isinstance(v, str):
        return True
    if not hasattr(v, "__fspath__"):
        return False
    try:
        return isinstance(os.fspath(v), str)
    except Exception:  # noqa: BLE001 - a PathLike whose __fspath__ fails is no path
        return False


def episodes_ok(v: Any) -> bool:
    if v is None:
        return True
    if not is_sequence(v):
        return False
    try:
        eps = list(v)
    except TypeError:  # a 0-d numpy array
        return False
    return len(eps) > 0 and all(is_int(e) and 0 <= e < 2**63 for e in eps)


def camera_keys_ok(v: Any) -> bool:
    return v is None or (is_sequence(v) and all(isinstance(k, str) for k in v))


def check_tolerance(tolerance_s: float, fps: float, where: str = "") -> None:
    """The rule of ``tolerance_s`` once the dataset's ``fps`` is known: below half a frame interval
    (``0.5 / fps`` seconds), else a frame could match two timestamps.

    Raises:
        StreamingConfigError: ``tolerance_s >= 0.5 / fps`` (names the option, the value, the fps
            and the bound; ``where`` first, e.g. the dataset).
    """
    if not fps > 0:  # the metadata's own rule refuses it
        return
    bound = 0.5 / float(fps)
    if not tolerance_s < bound:
        raise StreamingConfigError(
            f"{where + ': ' if where else ''}tolerance_s must be below half a frame interval "
            f"(0.5 / fps = {bound:g} s at {fps:g} fps), got {tolerance_s!r}",
            option="tolerance_s",
            value=tolerance_s,
        )


# --- the table ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OptionInfo:
    """What :class:`StreamOptions` knows of one option: ``want`` is the rule as the error words it,
    ``help`` the docs and ``--help`` text, ``group`` a key of :data:`_GROUPS`, ``per_dataset``: a
    mixture may give it per repo id; ``flag`` / ``flag_type``: the ``--dataset.<flag>`` field of
    ``lerobotstream-train`` (None where LeRobot's own configuration sets it), ``train``: how it sets it."""

    name: str
    default: Any
    want: str
    check: Callable[[Any], bool]
    help: str
    group: str
    per_dataset: bool
    flag: str | None
    flag_type: Any
    train: str


def _option(
    default: Any,
    want: str,
    check: Callable[[Any], bool],
    help: str,
    *,
    group: str,
    per_dataset: bool = False,
    flag: str | None = None,
    flag_type: Any = None,
    train: str = "",
) -> Any:
    meta = dict(locals())  # the OptionInfo fields but name and default
    return field(default=meta.pop("default"), metadata=meta)


@dataclass(frozen=True)
class StreamOptions:
    """Every option of a stream (one dataset or a mixture), with its default (frozen: change one
    with :meth:`replace`).

    ``StreamOptions(**kw)`` only records values; :meth:`validate` checks them and :meth:`resolved`
    gives the checked, resolved copy a stream keeps as ``ds.options``.
    ``StreamingLeRobotDataset(repo_id, root=..., options=StreamOptions(...), **kw)`` is the same as
    passing every option as a keyword (keywords beside ``options`` override it). See
    ``docs/options.md`` for the table.
    """

    # The declarations are a table, one entry per option, kept as written (not reformatted).
    # fmt: off
    # --- LeRobot 0.6.1's StreamingLeRobotDataset arguments, in its order (LEROBOT_POSITIONAL), then
    # video_backend (LeRobotDataset's) and repeat, keyword-only -----------------------------------------
    episodes: Optional[Sequence[int]] = _option(
        None, "None (all episodes) or a non-empty sequence of episode indices >= 0 (not a str, bytes or dict)",
        episodes_ok,
        "Episode indices to stream (None: every episode).", group="lerobot", per_dataset=True,
        train="--dataset.episodes (LeRobot's)")
    image_transforms: Optional[Callable] = _option(
        None, "None or a callable", lambda v: v is None or callable(v),
        "Applied to every camera frame (C,H,W) of an item; not to depth maps.", group="lerobot",
        train="--dataset.image_transforms.* (LeRobot's)")
    delta_timestamps: Optional[dict] = _option(
        None, "a dict {feature: [offset seconds, ...]}", lambda v: v is None or isinstance(v, dict),
        "Temporal windows per feature, seconds relative to the anchor frame; each window also gives "
        "a bool <key>_is_pad mask, as LeRobot's map-style dataset.", group="lerobot", per_dataset=True,
        train="from the policy's delta indices (LeRobot's resolve_delta_timestamps)")
    tolerance_s: float = _option(
        constants.DEFAULT_TOLERANCE_S, "a number > 0 (seconds)", lambda v: is_number(v) and v > 0,
        "How far a frame's presentation time may be from its timestamp, seconds (strictly less, as LeRobot); "
        "below half a frame interval (0.5 / fps, checked when the dataset is loaded).", group="lerobot",
        per_dataset=True, train="--tolerance_s (LeRobot's)")
    revision: Optional[str] = _option(
        None, "None or a revision string", lambda v: v is None or isinstance(v, str),
        "Hub revision (branch, tag or commit); payload reads are pinned to its commit.", group="lerobot",
        per_dataset=True, train="--dataset.revision (LeRobot's)")
    max_num_shards: int = _option(
        1, f"an int >= 1, at most {constants.MAX_NUM_WORKERS}", int_in(1, constants.MAX_NUM_WORKERS),
        "Worker shards per rank (LeRobot's streaming argument); sets num_workers when that is unset "
        "and this is > 1.", group="lerobot", train="max(1, --num_workers)")
    seed: Optional[int] = _option(
        constants.DEFAULT_SEED, "None or an int >= 0, at most 2**64 - 1", int_in(0, MAX_SEED, none_ok=True),
        f"Seed of every order (None: {constants.SEED_WHEN_NONE}).", group="lerobot",
        train=f"--seed (LeRobot's; --seed=null gives {constants.SEED_WHEN_NONE})")
    return_uint8: bool = _option(
        False, "True or False", is_bool,
        "Camera frames as uint8 (C,H,W) in [0, 255] instead of float32 in [0, 1].", group="lerobot",
        train="True with LeRobot 0.6 (its training loop converts), False with 0.4.4")
    depth_output_unit: str = _option(
        "mm", "'mm' or 'm' (the unit depth maps and depth stats are returned in)", lambda v: v in ("mm", "m"),
        "Unit of depth maps and depth stats (LeRobot 0.6.1's).", group="lerobot",
        train="--dataset.depth_output_unit (LeRobot 0.6's)")
    video_backend: Optional[str] = _option(
        "torchcodec", "'torchcodec' (or None)", lambda v: v in (None, "torchcodec"),
        "Video decoder library (torchcodec; None means torchcodec).", group="lerobot", train="torchcodec")
    repeat: bool = _option(
        False, "True or False", is_bool,
        "Chain exact-coverage epochs endlessly (False: one epoch per iterator; set_epoch for the next).",
        group="lerobot", train="True for the training stream, False for the eval stream")
    # --- where the bytes come from ----------------------------------------------------------------
    repo_type: str = _option(
        "dataset", "'dataset' or 'bucket'", lambda v: v in ("dataset", "bucket"),
        "Hub repository type: a dataset repo or a Storage Bucket.", group="source", per_dataset=True,
        flag="repo_type", flag_type=str)
    data_root: Optional[str] = _option(
        None, "None or a path or URL (a str or os.PathLike, not bytes)", path_ok,
        "Payload root (local folder, hf://, hf://buckets/ or any fsspec URL) when the Parquet and MP4 "
        "files are mirrored elsewhere; metadata still comes from root / repo_id.", group="source",
        per_dataset=True, flag="streaming_data_root", flag_type=Optional[str])
    read_timeout_s: float = _option(
        constants.DEFAULT_READ_TIMEOUT_S,
        f"a number > 0 (seconds one read may take, retries included), at most {MAX_SECONDS:g}",
        lambda v: v is None or (is_number(v) and 0 < v <= MAX_SECONDS),
        "Seconds one read from an HTTP(S), Hub or bucket store may take, retries and backoff included; "
        "then a SourceTimeoutError names the URL.", group="source", flag="streaming_read_timeout_s",
        flag_type=float)
    sidecar_lock_timeout_s: float = _option(
        constants.DEFAULT_SIDECAR_LOCK_TIMEOUT_S, f"a number > 0 (seconds), at most {MAX_SECONDS:g}",
        lambda v: is_number(v) and 0 < v <= MAX_SECONDS,
        "Seconds to wait for another process that is building the same MP4 sidecar.", group="source",
        flag="streaming_sidecar_lock_timeout_s", flag_type=float)
    # --- resources (per rank, split over the workers) ---------------------------------------------
    episode_pool_size: Optional[int] = _option(
        None, f"None or an int >= 1, at most {MAX_COUNT}", int_in(1, MAX_COUNT, none_ok=True),
        f"Complete episodes mixed at once by each DataLoader worker (None: "
        f"{constants.DEFAULT_EPISODE_POOL_SIZE_PER_RANK} per rank, split over the workers).", group="resources",
        flag="streaming_episode_pool_size", flag_type=Optional[int])
    prefetch_episodes: int = _option(
        8, f"an int >= 0, at most {MAX_COUNT}", int_in(0, MAX_COUNT),
        "Episodes fetched ahead of each worker's active pool.", group="resources",
        flag="streaming_prefetch_episodes", flag_type=int)
    byte_budget_gb: float = _option(
        8.0, f"a number > 0 (GiB per rank), at most {MAX_BUDGET_GB:.0f}",
        lambda v: is_number(v) and 0 < v <= MAX_BUDGET_GB,
        "Compressed (synthesized MP4) bytes held per rank, GiB; each worker gets 1/num_workers. Not an "
        "RSS limit.", group="resources", flag="streaming_byte_budget_gb", flag_type=float)
    video_decoder_cache_size: Optional[int] = _option(
        None, f"None or an int >= 1, at most {MAX_COUNT} (open decoders per rank)",
        int_in(1, MAX_COUNT, none_ok=True),
        "Open decoders per rank, split over the workers (None: per worker, its pool size x cameras "
        "+ prefetch_episodes x cameras); a decoder in use is never evicted, so when all are in use the cap "
        "is exceeded briefly instead of waited on.", group="resources", flag="video_decoder_cache_size",
        flag_type=Optional[int])
    decoded_cache_gb: float = _option(
        1.0, f"a number >= 0 (GiB per rank), at most {MAX_BUDGET_GB:.0f}",
        lambda v: is_number(v) and 0 <= v <= MAX_BUDGET_GB,
        "Decoded GOP frames kept so each GOP is decoded once per episode, GiB per rank split over the "
        "workers (0 disables).", group="resources", flag="streaming_decoded_cache_gb", flag_type=float)
    cache_dir: Optional[str] = _option(
        None, "None or a folder path (a str or os.PathLike, not bytes)", path_ok,
        "Node-local disk cache of the MP4 bytes read from a remote store (None: off), shared by every "
        "rank and worker of the node and kept across epochs and runs; entries are keyed by the pinned "
        "commit (or the file's fingerprint) and checked on every read.", group="resources",
        flag="streaming_cache_dir", flag_type=Optional[str])
    cache_limit_gb: float = _option(
        50.0, f"a number > 0 (GiB per node), at most {MAX_BUDGET_GB:.0f}",
        lambda v: is_number(v) and 0 < v <= MAX_BUDGET_GB,
        "Bound of the cache_dir disk cache, GiB for the node (least recently used entries are "
        "evicted to stay under it).", group="resources", flag="streaming_cache_limit_gb", flag_type=float)
    # --- order ------------------------------------------------------------------------------------
    sampling_strategy: str = _option(
        constants.DEFAULT_SAMPLING_STRATEGY, f"one of {constants.SAMPLING_STRATEGIES}",
        lambda v: v in constants.SAMPLING_STRATEGIES,
        f"{constants.SAMPLING_STRATEGY_HELP}. Each visits every frame exactly once per epoch.", group="order",
        flag="streaming_sampling_strategy", flag_type=str)
    equalize: str = _option(
        "none", "'none' or 'drop'", lambda v: v in ("none", "drop"),
        "Finite epochs under DDP: 'drop' stops every rank after the smallest rank's batch count; over 2 or "
        "more DataLoader workers it needs the DataLoader's batch_size (and drop_last when it drops), the worker "
        "count is the DataLoader's own; 'none' keeps every frame.", group="order",
        train="'none' (training streams repeat; there is no epoch end to equalize)")
    partitions: Optional[int] = _option(
        None, f"None or an int >= 1, at most {MAX_COUNT} (at least world size x max(1, num_workers))",
        int_in(1, MAX_COUNT, none_ok=True),
        "Canonical partitions (MosaicML's canonical nodes; None: off): the episodes are split into this many "
        "frame-balanced partitions, each with its own seeded pool, so each partition's samples and their order "
        "do not depend on the world size, DataLoader workers or batch size (resume on another topology continues "
        "each partition's order). episode_pool_size and byte_budget_gb then apply per partition, i.e. per "
        "DataLoader worker (one partition is resident at a time). A mixture's datasets each get their own; see "
        "docs/resume.md.",
        group="order", flag="streaming_partitions", flag_type=Optional[int])
    drop_n_last_frames: int = _option(
        0, f"an int >= 0, at most {MAX_COUNT}", int_in(0, MAX_COUNT),
        "The last n frames of every episode are never anchors (LeRobot's EpisodeAwareSampler); "
        "windows still read them.", group="order", per_dataset=True,
        train="the policy's drop_n_last_frames (LeRobot's rule)")
    camera_keys: Optional[Sequence[str]] = _option(
        None, "None or a list of camera keys (video or image features; not a str or dict)", camera_keys_ok,
        "Decode only these camera keys (None: all; a mixture's default: the cameras every dataset has); "
        "a camera left out is neither fetched nor decoded.",
        group="decode", per_dataset=True, flag="streaming_camera_keys", flag_type=Optional[list[str]])
    # --- decode -------------------------------------------------------------------------------------
    decode_threads: int = _option(
        2, f"an int >= 1, at most {MAX_THREADS}", int_in(1, MAX_THREADS),
        "Sample-assembly / decode threads per DataLoader worker.", group="decode",
        flag="streaming_decode_threads", flag_type=int)
    decoded_queue_size: int = _option(
        8, f"an int >= 1, at most {MAX_COUNT}", int_in(1, MAX_COUNT),
        "Decoded samples buffered ahead per worker.", group="decode", flag="streaming_decoded_queue_size",
        flag_type=int)
    device: str = _option(
        "cpu", "'cpu', 'cuda' or 'cuda:N' (or a torch.device)",
        lambda v: v is None or (isinstance(v, str) and bool(DEVICE_RE.fullmatch(v))),
        "Where frames are decoded: 'cpu', or 'cuda' (NVDEC, with a counted CPU fallback).", group="decode",
        flag="streaming_decode_device", flag_type=str)
    decode_lookahead: int = _option(
        64, f"an int >= 1, at most {MAX_COUNT} (anchors per decode chunk)",
        int_in(1, MAX_COUNT),
        "Anchors decoded together per chunk (each GOP once per chunk).", group="decode",
        flag="streaming_decode_lookahead", flag_type=int)
    first_lookahead: Optional[int] = _option(
        None, f"None or an int >= 1, at most {MAX_COUNT}", int_in(1, MAX_COUNT, none_ok=True),
        "Anchors of each iterator's first decode chunk (None: batch_size, else 8), so the first batch "
        "leaves before a whole chunk is decoded.", group="decode", flag="streaming_first_lookahead",
        flag_type=Optional[int])
    ffmpeg_threads: int = _option(
        1, f"an int >= 0, at most {MAX_THREADS} (0: FFmpeg chooses)",
        int_in(0, MAX_THREADS),
        "FFmpeg threads per decoder (0: FFmpeg decides); the decode threads already run decoders in "
        "parallel.", group="decode", flag="streaming_ffmpeg_threads", flag_type=int)
    # --- resume: the DataLoader's settings --------------------------------------------------------
    batch_size: Optional[int] = _option(
        None, f"None or an int >= 1, at most {MAX_COUNT} (the DataLoader's batch size)",
        int_in(1, MAX_COUNT, none_ok=True),
        "The DataLoader's batch size, for state_dict and equalize (None: a loaded state's, else 1).",
        group="resume", train="--batch_size (LeRobot's)")
    drop_last: bool = _option(
        False, "True or False", is_bool, "The DataLoader's drop_last.", group="resume",
        train="False (LeRobot's DataLoader)")
    num_workers: Optional[int] = _option(
        None, f"None or an int in [0, {constants.MAX_NUM_WORKERS}] (the DataLoader's num_workers, at most "
              f"{constants.MAX_NUM_WORKERS} DataLoader workers per rank)",
        lambda v: v is None or (is_int(v) and 0 <= v <= constants.MAX_NUM_WORKERS),
        "The DataLoader's num_workers, for state_dict in the training process (None: max_num_shards "
        "when > 1, else 0; 0 and 1 are the same stream).", group="resume", train="--num_workers (LeRobot's)")
    # --- StreamLoader ---------------------------------------------------------------------------------
    loader_timeout_s: float = _option(
        0.0, f"a number >= 0 (seconds; 0: no timeout), at most {MAX_SECONDS:g}",
        lambda v: is_number(v) and 0 <= v <= MAX_SECONDS,
        "Seconds a StreamLoader over this stream waits for one batch of a worker (processes mode) or "
        "shard (threads mode), torch DataLoader's timeout; past it a LoaderWorkerError names the worker, "
        "its PID and how long it stalled. 0: no timeout; a stall of a minute is then named in one warning.",
        group="loader", flag="streaming_loader_timeout_s", flag_type=float)

    # fmt: on

    # --- checks and views ---------------------------------------------------------------------------
    def validate(self) -> StreamOptions:
        """Check every option (in declaration order); returns ``self``.

        Raises:
            StreamingConfigError: the first option breaking its rule (names it, its value, the rule).
        """
        for info in option_info():
            value = getattr(self, info.name)
            require(info.name, value, info.check(value), info.want)
        for key, offs in (self.delta_timestamps or {}).items():
            require(
                f"delta_timestamps[{key!r}]",
                offs,
                isinstance(offs, (list, tuple, np.ndarray)) and len(offs) > 0 and all(is_number(d) for d in offs),
                "a non-empty list of numbers (offsets in seconds)",
            )
        return self

    def replace(self, **changes: Any) -> StreamOptions:
        """A copy with ``changes``.

        Raises:
            OptionArgumentError (a StreamingConfigError and a TypeError): a name that is no option.
        """
        refuse_unknown_keywords(changes, _NAMES, "StreamOptions.replace")
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """``{name: value}`` of every option (values as given, not copied)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def resolved(self) -> StreamOptions:
        """These options checked (:meth:`validate`) and resolved, as a stream keeps them
        (``ds.options``): numbers as their declared type, ``seed=None`` as
        ``constants.SEED_WHEN_NONE``, ``video_backend=None`` as ``"torchcodec"``,
        ``num_workers=None`` as ``max_num_shards`` when > 1 else 0, ``episodes`` / ``camera_keys``
        / ``delta_timestamps`` as new tuples (none of the caller's lists kept). Idempotent.

        Raises:
            StreamingConfigError: as :meth:`validate`.
        """
        self.validate()
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            kind = str(f.type).replace("Optional[", "").rstrip("]")
            if v is not None and kind in _CONVERT:
                v = _CONVERT[kind](v)
            out[f.name] = v
        out["seed"] = constants.SEED_WHEN_NONE if self.seed is None else int(self.seed)
        out["video_backend"] = self.video_backend or "torchcodec"
        if self.num_workers is None:  # LeRobot's max_num_shards sets the DataLoader's worker count
            out["num_workers"] = int(self.max_num_shards) if self.max_num_shards > 1 else 0
        if self.episodes is not None:
            out["episodes"] = tuple(int(e) for e in self.episodes)
        if self.camera_keys is not None:
            out["camera_keys"] = tuple(str(k) for k in self.camera_keys)
        if self.delta_timestamps is not None:
            out["delta_timestamps"] = {k: tuple(float(d) for d in v) for k, v in self.delta_timestamps.items()}
        return self.replace(**out)

    # --- the units converted once -----------------------------------------------------------------
    @property
    def byte_budget(self) -> int:
        """``byte_budget_gb`` in bytes (int, >= 1): the rank's budget the planner splits."""
        return max(1, int(self.byte_budget_gb * constants.GIB))

    @property
    def decoded_cache_bytes(self) -> int:
        """``decoded_cache_gb`` in bytes (int, >= 0): the rank's decoded-GOP cache."""
        return int(self.decoded_cache_gb * constants.GIB)

    @classmethod
    def from_arguments(
        cls, options: StreamOptions | None, positional: Sequence[Any], keywords: dict[str, Any], owner: str
    ) -> StreamOptions:
        """The options of a constructor call: ``options`` (or the defaults), LeRobot's positional
        arguments (:data:`LEROBOT_POSITIONAL`, LeRobot 0.6.1's ``StreamingLeRobotDataset`` order),
        then ``keywords``; iterators given as ``episodes`` / ``camera_keys`` are read once, here; a
        ``torch.device`` becomes its string. LeRobot's arguments that are no option here
        (:data:`LEROBOT_ONLY`: ``force_cache_sync``, ``streaming``, ``buffer_size``, ``rng``,
        ``shuffle``) are accepted, by position or keyword, at the values that ask for what the stream
        does (LeRobot's defaults) and refused at any other.

        Raises:
            OptionArgumentError: more positional arguments than LeRobot's, an argument given twice,
                an unknown keyword, or ``options`` of another type.
            StreamingConfigError: a LeRobot-only argument at a value the stream cannot honour (the
                message names the argument and the option to use instead).
        """
        if options is not None and not isinstance(options, StreamOptions):
            raise OptionArgumentError(
                f"{owner}: options must be a StreamOptions, got {type(options).__name__}", option="options"
            )
        if len(positional) > len(LEROBOT_POSITIONAL):
            raise OptionArgumentError(
                f"{owner}() takes at most {len(LEROBOT_POSITIONAL) + 2} positional arguments "
                f"({len(positional) + 2} given)"
            )
        given = dict(zip(LEROBOT_POSITIONAL, positional))
        twice = sorted(set(given) & set(keywords))
        if twice:
            raise OptionArgumentError(f"{owner}() got multiple values for argument {twice[0]!r}", option=twice[0])
        given.update(keywords)
        for name in LEROBOT_ONLY.keys() & given.keys():
            LEROBOT_ONLY[name].check(name, given.pop(name), owner)
        refuse_unknown_keywords(given, _NAMES, owner)
        for key in ("episodes", "camera_keys"):
            if isinstance(given.get(key), abc.Iterator):
                given[key] = list(given[key])
        if type(given.get("device")).__name__ == "device":  # a torch.device
            given["device"] = str(given["device"])
        return (options or cls()).replace(**given)


def refuse_unknown_keywords(
    given: Iterable[str], names: Iterable[str], owner: str, *, what: str = "not an option", see: str = "docs/options.md"
) -> None:
    """Raise :class:`~lerobotstream.errors.OptionArgumentError` (also a ``TypeError``, as Python's
    own) naming the first of ``given`` that is not one of ``names``, with the closest name
    (``difflib.get_close_matches``).

    The message: ``StreamOptions() got an unexpected keyword argument 'sampling_stratgy' (not an
    option; did you mean 'sampling_strategy'? see docs/options.md)``.
    """
    known = set(names)
    unknown = sorted(map(str, set(given) - known))
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        close = f"did you mean {close[0]!r}?" if close else ""
        hint = f"{what}; {close}" if close else what
        hint += (" see " if close else "; see ") + see if see else ""
        msg = f"{owner}() got an unexpected keyword argument {unknown[0]!r} ({hint})"
        raise OptionArgumentError(msg, option=unknown[0])


def checked_keywords(owner: str, *, what: str = "not an option", see: str = "docs/options.md") -> Callable:
    """Decorate a constructor so that an unknown keyword raises :func:`refuse_unknown_keywords`'s
    error instead of Python's plain ``TypeError`` (the signature is kept)."""

    def wrap(fn: Callable) -> Callable:
        params = inspect.signature(fn).parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return fn
        names = [
            p.name
            for p in params
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY) and p.name != "self"
        ]

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            if kwargs:
                refuse_unknown_keywords(kwargs, names, owner, what=what, see=see)
            return fn(*args, **kwargs)

        return checked

    return wrap


# StreamOptions(**kw): an unknown keyword is the typed error a stream's constructor raises
StreamOptions.__init__ = checked_keywords("StreamOptions")(StreamOptions.__init__)  # type: ignore[method-assign]


_NAMES = [f.name for f in dataclasses.fields(StreamOptions)]
_CONVERT: dict[str, Callable[[Any], Any]] = {"int": int, "float": float, "bool": bool}

#: LeRobot 0.6.1's ``StreamingLeRobotDataset`` positional arguments after repo_id, root, in its order:
#: the options among them and LeRobot's arguments that are no option here (:data:`LEROBOT_ONLY`)
LEROBOT_POSITIONAL = (
    "episodes",
    "image_transforms",
    "delta_timestamps",
    "tolerance_s",
    "revision",
    "force_cache_sync",
    "streaming",
    "buffer_size",
    "max_num_shards",
    "seed",
    "rng",
    "shuffle",
    "return_uint8",
    "depth_output_unit",
)


@dataclass(frozen=True)
class _LeRobotOnly:
    """A LeRobot ``StreamingLeRobotDataset`` argument that is no option here: ``default`` (LeRobot's,
    which asks for what the stream does) is accepted, as any value ``accepts``; other values raise,
    saying what to use ``instead``."""

    default: Any
    accepts: Callable[[Any], bool]
    instead: str

    def check(self, name: str, value: Any, owner: str) -> None:
        """Raise StreamingConfigError (naming ``name``, ``value`` and what to use instead) unless
        the stream can honour ``value``."""
        if not self.accepts(value):
            raise StreamingConfigError(
                f"{owner}(): {name}={value!r} (LeRobot's argument) cannot be honoured: {self.instead} "
                f"(only {name}={self.default!r} is accepted)",
                option=name,
                value=value,
            )


#: LeRobot's ``StreamingLeRobotDataset`` arguments that are no option here, by name
LEROBOT_ONLY: dict[str, _LeRobotOnly] = {
    "force_cache_sync": _LeRobotOnly(
        False,
        lambda v: v is False,
        "there is no local metadata cache to sync: the metadata is read from root (or the Hub) at every "
        "construction; to read the Hub rather than a local copy at $HF_LEROBOT_HOME/<repo_id>, pass "
        "root='hf://datasets/<repo_id>'",
    ),
    "streaming": _LeRobotOnly(
        True,
        lambda v: v is True,
        "StreamingLeRobotDataset always streams; for a map-style dataset use LeRobot's LeRobotDataset",
    ),
    "buffer_size": _LeRobotOnly(
        1000,
        lambda v: is_int(v) and v == 1000,
        "there is no shuffle buffer of frames: each DataLoader worker mixes whole episodes in an "
        "exact-coverage pool; size it with episode_pool_size (episodes per rank) and byte_budget_gb",
    ),
    "rng": _LeRobotOnly(
        None,
        lambda v: v is None,
        "every order is derived from seed=<int> (per epoch, rank and worker); pass the seed instead",
    ),
    "shuffle": _LeRobotOnly(
        True,
        lambda v: v is True,
        "for episodes and frames in order pass sampling_strategy='sequential'",
    ),
}


def option_info() -> Iterator[OptionInfo]:
    """Every option's :class:`OptionInfo`, in declaration order."""
    for f in dataclasses.fields(StreamOptions):
        m = dict(f.metadata)
        m["train"] = m["train"] or (f"--dataset.{m['flag']}" if m["flag"] else "")
        yield OptionInfo(f.name, f.default, **m)


_INFOS: dict[str, OptionInfo] = {}


def option_problem(name: str, value: Any, *, required: bool = False) -> str | None:
    """None when ``value`` keeps option ``name``'s rule, else the rule's ``want`` text; ``required``:
    None breaks it too (the rule without its "None or").

    Raises:
        KeyError: ``name`` is no option.
    """
    if not _INFOS:
        _INFOS.update((i.name, i) for i in option_info())
    info = _INFOS[name]
    if info.check(value) and not (required and value is None):
        return None
    return info.want.removeprefix("None or ") if required else info.want


def check_option(name: str, value: Any, *, where: str = "", label: str | None = None, required: bool = False) -> None:
    """Apply option ``name``'s rule to ``value`` wherever a value of it arrives; ``required``: None
    is refused too; ``label``: the argument's name when not the option's (``StreamLoader``'s ``timeout``).

    Raises:
        StreamingConfigError: ``value`` breaks the rule (names ``where``, the option, the value
            and the rule); KeyError: ``name`` is no option.
    """
    want = option_problem(name, value, required=required)
    if want is not None:
        raise StreamingConfigError(
            f"{where + ': ' if where else ''}{label or name} must be {want}, got {value!r}", option=name, value=value
        )


def per_dataset_options() -> tuple[str, ...]:
    """Options a mixture accepts per dataset (a dict keyed by repo id)."""
    return tuple(i.name for i in option_info() if i.per_dataset)


def train_flags() -> list[OptionInfo]:
    """The options ``lerobotstream-train`` declares a ``--dataset.<flag>`` field for."""
    return [i for i in option_info() if i.flag]


_GROUPS = {
    "lerobot": "LeRobot's dataset arguments",
    "source": "Where the bytes come from",
    "resources": "Resources (per rank, split over the DataLoader workers)",
    "order": "Order",
    "decode": "Decode",
    "resume": "Resume (the DataLoader's settings)",
    "loader": "StreamLoader",
}


def options_markdown() -> str:
    """``docs/options.md``: one table per group (option, default, rule, per dataset in a mixture,
    ``lerobotstream-train``, meaning). Regenerate with ``python -m lerobotstream.options > docs/options.md``."""
    lines = [
        "# Stream options",
        "",
        "<!-- generated by `python -m lerobotstream.options > docs/options.md`; "
        "tests/core/test_options.py fails when this page is stale -->",
        "",
        "Every option of `StreamingLeRobotDataset(repo_id, root, **options)` and "
        "`StreamingMultiLeRobotDataset(repo_ids, roots=..., weights=..., **options)`, also given as "
        "`options=lerobotstream.StreamOptions(...)`. One definition each, in `lerobotstream/options.py`: "
        "defaults, checks (a bad value raises `StreamingConfigError` naming the option), the mixture's "
        "per-dataset options and the `lerobotstream-train` flags are all read from it. `*_gb` are GiB "
        "(2**30 bytes), `*_s` seconds.",
        "",
        "Positional arguments after `repo_id, root` follow LeRobot 0.6.1's `StreamingLeRobotDataset`: "
        + ", ".join(f"`{n}`" for n in LEROBOT_POSITIONAL)
        + "; every other option is keyword-only, and a mixture takes only `repo_ids` by position. "
        + ", ".join(f"`{n}`" for n in LEROBOT_ONLY)
        + " are LeRobot's arguments but no options here: accepted, by position or keyword, at LeRobot's "
        "defaults (" + ", ".join(f"`{n}={a.default!r}`" for n, a in LEROBOT_ONLY.items()) + "), which ask for "
        "what the stream does; another value raises `StreamingConfigError` naming what to use instead "
        "(`shuffle=False`: `sampling_strategy='sequential'`; `rng`: `seed`; `buffer_size`: `episode_pool_size`).",
        "",
    ]
    infos = list(option_info())
    for group, title in _GROUPS.items():
        lines += [
            f"## {title}",
            "",
            "| option | default | accepts | per dataset | lerobotstream-train | meaning |",
            "|---|---|---|:-:|---|---|",
        ]
        for i in infos:
            if i.group == group:
                lines.append(
                    f"| `{i.name}` | `{i.default!r}` | {i.want} | {'yes' if i.per_dataset else ''} | "
                    f"{f'`--dataset.{i.flag}`' if i.flag else i.train} | {i.help} |"
                )
        lines.append("")
    return "\n".join(lines)


def constructor_signature(func: Callable, keep: Sequence[str]) -> Any:
    """``func``'s signature with its ``*args`` / ``**kwargs`` replaced by every option (LeRobot's
    positional arguments first, in their order, :data:`LEROBOT_ONLY` ones among them), for ``help()``,
    IDEs and ``inspect.signature``; ``keep``: the parameters of ``func`` kept as they are (``self``,
    ``repo_id``, ``root``, ``options``...)."""
    own = inspect.signature(func)
    params = [p for name, p in own.parameters.items() if name in keep and p.kind != p.KEYWORD_ONLY]
    defaults = {i.name: i.default for i in option_info()} | {k: a.default for k, a in LEROBOT_ONLY.items()}
    for name in LEROBOT_POSITIONAL:
        params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults[name]))
    params += [p for name, p in own.parameters.items() if name in keep and p.kind == p.KEYWORD_ONLY]
    params += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=d)
        for name, d in defaults.items()
        if name not in LEROBOT_POSITIONAL and name not in keep and name not in LEROBOT_ONLY
    ]
    return own.replace(parameters=params)


# --- command-line flags of options (the profiler's) -------------------------------------------------
def _none_or(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    def conv(text: str) -> Any:
        return None if text.strip().lower() in ("none", "null") else parse(text)

    conv.__name__ = name  # argparse names it in "invalid <name> value"
    return conv


def _index_list(text: str) -> list[int]:
    """``0-9,20`` → [0, 1, ..., 9, 20]."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part.strip()[1:]:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        elif part.strip():
            out.append(int(part))
    return out


def _cli_type(hint: Any) -> tuple[Callable[[str], Any] | None, str]:
    """(argparse ``type`` for an option's annotation — None: a ``--x/--no-x`` flag — and the
    metavar words for its help)."""
    import json

    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = typing.get_origin(hint) is typing.Union
    inner = args[0] if optional else hint
    origin = typing.get_origin(inner)
    if inner is bool:
        return None, ""
    if inner in (int, float, str):
        return (_none_or(inner, inner.__name__) if optional else inner), ""
    if inner is dict:
        return _none_or(json.loads, "JSON"), "JSON"
    if origin is abc.Sequence and typing.get_args(inner) == (int,):
        return _none_or(_index_list, "index list"), "indices and ranges, e.g. 0-9,20"
    if origin is abc.Sequence and typing.get_args(inner) == (str,):
        return _none_or(lambda t: [x for x in t.split(",") if x], "name list"), "comma-separated"
    raise TypeError(f"no command-line form for an option of type {hint!r}")


def add_cli_flags(
    parser: Any,
    names: Sequence[str],
    *,
    defaults: dict[str, Any] | None = None,
    helps: dict[str, str] | None = None,
    aliases: dict[str, Sequence[str]] | None = None,
) -> None:
    """Add one argparse flag per option of ``names`` to ``parser`` (a parser or an argument group):
    ``--episode-pool-size`` for ``episode_pool_size``, parsed by the option's type (an int, a
    number or a string — ``none`` where the option takes None —, ``--x/--no-x`` for a boolean, JSON
    for a dict, ``0-9,20`` for episode indices, comma-separated names for a list), with its default
    and help from :class:`StreamOptions` unless ``defaults`` / ``helps`` give others; ``aliases``:
    more flag names per option. The value lands in ``args.<name>``; the option's rule checks it
    when the stream is built (``StreamingConfigError``).

    Raises:
        KeyError: a name that is no option; TypeError: an option with no command-line form
        (``image_transforms``).
    """
    import argparse

    hints = typing.get_type_hints(StreamOptions)
    infos = {i.name: i for i in option_info()}
    for name in names:
        info = infos[name]
        conv, words = _cli_type(hints[name])
        default = (defaults or {}).get(name, info.default)
        text = (helps or {}).get(name, info.help)
        text = f"{text} ({words + '; ' if words else ''}default: {default!r})".replace("%", "%%")
        flags = [f"--{name.replace('_', '-')}", *(aliases or {}).get(name, ())]
        if conv is None:
            parser.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, default=default, help=text)
        else:
            parser.add_argument(*flags, dest=name, type=conv, default=default, help=text)


if __name__ == "__main__":  # pragma: no cover - docs generator
    print(options_markdown())
