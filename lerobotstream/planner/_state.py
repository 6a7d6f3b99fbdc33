"""The resume state: :class:`StreamState`, what one rank's ``state_dict()`` holds (pure data,
schema-versioned), its parsing and checks, and the digests that identify a stream.

The rank's consumed sample count alone, replayed through the DataLoader's batch turns
(:mod:`._turns`), says how many samples each worker has given and which worker gives the next
batch. On resume, DataLoader worker ``p`` plays logical worker ``(p + next) mod N``, so the
resumed DataLoader (which always starts with its worker 0) continues the rotation exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from lerobotstream import constants
from lerobotstream.errors import ResumeStateError
from lerobotstream.options import option_problem

__all__ = [
    "ELASTIC_SCHEMA_VERSION",
    "MAX_NUM_WORKERS",
    "PARTITION_SCHEMA_VERSION",
    "READABLE_SCHEMA_VERSIONS",
    "SCHEMA_KEY",
    "SCHEMA_VERSION",
    "DIGEST_KEY",
    "MAX_ORIGIN_DEPTH",
    "StreamState",
    "canonical_digest",
    "episodes_digest",
    "episode_selection_diffs",
]

SCHEMA_KEY = "lerobotstream_planner_schema"
SCHEMA_VERSION = 1
#: states that carry an elastic ``origin`` are written as schema 2 (older readers refuse them by
#: version); states without one keep schema 1's layout
ELASTIC_SCHEMA_VERSION = 2
#: states of a partitioned stream (a ``partitions`` field) are schema 3: an older reader refuses
#: them by version instead of resuming them without their partitions
PARTITION_SCHEMA_VERSION = 3
READABLE_SCHEMA_VERSIONS = (SCHEMA_VERSION, ELASTIC_SCHEMA_VERSION, PARTITION_SCHEMA_VERSION)
#: DataLoader workers per rank at most (the ``num_workers`` option's bound: a state claiming more was
#: edited): it bounds the work of loading a state before anything of it is replayed
MAX_NUM_WORKERS = constants.MAX_NUM_WORKERS
#: the state's digest (:func:`canonical_digest` of every other entry, origin included): a state edited
#: after ``state_dict()`` wrote it is refused instead of replayed
DIGEST_KEY = "digest"
#: elastic origins nested at most this deep (each elastic resume inside an epoch's remainder adds one
#: level; a deeper state was built by hand)
MAX_ORIGIN_DEPTH = 64

_OLD_CHECKPOINT_MSG = (
    "this checkpoint's stream state has no {key!r} marker: it was written by an older sampler "
    "(a row shuffle buffer or the earlier multi-worker episode sampler), whose order cannot be "
    "reproduced or told apart by world-size and batch-size checks. Sample-exact streaming resume "
    "is refused; start a new run from the checkpoint's policy weights instead."
)
_NOT_A_STATE_MSG = (
    "{what} is not a lerobotstream stream state: pass the dict that the dataset's (or planner's) "
    "state_dict() returned, unchanged (it carries {key!r} (one of {version}) and the fields {fields}){hint}"
)

_NULLABLE = frozenset({"pool_size", "byte_budget", "episodes", "mixture", "origin", "partitions"})  # may be None
_OPTIONAL = frozenset({"episodes", "mixture", "origin", "partitions"})  # may be absent (older states)
#: field -> (kind, lower bound for ints); kinds: int (a Python/numpy integer, never a bool or a
#: float, even 3.0), bool, str, dict. The ints that hold no option have plausible maxima in
#: :data:`_FIELD_MAX` (past them a count would overflow a C long in the replay)
_FIELD_RULES: dict[str, tuple[str, int | None]] = {
    "seed": ("int", None),
    "epoch": ("int", 0),
    "samples": ("int", 0),
    "batch_size": ("int", 1),
    "world_size": ("int", 1),
    "num_workers": ("int", 0),
    "strategy": ("str", None),
    "pool_size": ("int", 1),
    "byte_budget": ("int", 1),
    "repeat": ("bool", None),
    "drop_last": ("bool", None),
    "equalize": ("str", None),
    "episodes": ("str", None),
    "mixture": ("dict", None),
    "origin": ("dict", None),
    "partitions": ("int", 1),
}
_FIELD_MAX = {"epoch": 2**32, "samples": 2**48, "world_size": 2**20, "byte_budget": 2**62}
#: fields that hold an option's value (field -> option): checked by that option's own rule
#: (``options.check_option``); the state's names are its format's (``strategy`` is the
#: ``sampling_strategy`` option, ``pool_size`` the ``episode_pool_size`` option)
_OPTION_OF = {
    "seed": "seed",
    "batch_size": "batch_size",
    "num_workers": "num_workers",
    "strategy": "sampling_strategy",
    "pool_size": "episode_pool_size",
    "repeat": "repeat",
    "drop_last": "drop_last",
    "equalize": "equalize",
    "partitions": "partitions",
}


def _field_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is not a valid ``name`` field (None when it is)."""
    import numbers

    kind, low = _FIELD_RULES[name]
    if value is None:
        return None if name in _NULLABLE else "None (required)"
    if name in _OPTION_OF:
        want = option_problem(_OPTION_OF[name], value, required=True)
        return None if want is None else f"{value!r} ({want} is needed)"
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            return f"{value!r} ({type(value).__name__}; an int is needed)"
        if low is not None and int(value) < low:
            return f"{value!r} (must be >= {low})"
        if name in _FIELD_MAX and int(value) > _FIELD_MAX[name]:
            return f"{value!r} (must be at most {_FIELD_MAX[name]})"
        return None
    want = {"bool": bool, "str": str, "dict": dict}[kind]
    if not isinstance(value, want):
        return f"{value!r} ({type(value).__name__}; a {kind} is needed)"
    if name == "episodes" and not all(
        part.count(":") == 2 and part.split(":")[0].isdigit() for part in value.split("|")
    ):
        return f"{value!r} (not an episodes digest '<count>:sha256:<hex>')"
    return None


@dataclass(frozen=True)
class StreamState:
    """Everything sample-exact resume depends on (one rank's view).

    Fields:
        seed (int): planner seed (``seed=None`` was already mapped to 42).
        epoch (int): epoch the stream (re)started at, >= 0.
        samples (int): samples the training loop consumed from this rank since ``epoch`` began
            (with ``repeat=True`` it may exceed one epoch), >= 0.
        batch_size (int): DataLoader batch size, >= 1.
        world_size (int): number of ranks.
        num_workers (int): DataLoader workers per rank (0 = in the training process).
        strategy (str): ``remaining`` or ``round_robin``.
        pool_size (int | None): explicit per-worker pool size, or None for the default.
        byte_budget (int | None): per-rank byte budget, bytes, or None (unbounded).
        repeat (bool): endless stream.
        drop_last (bool): DataLoader drops each worker's short last batch.
        equalize (str): ``none`` or ``drop``.
        episodes (str | None): digest of the selected episodes (sha256 of their indices and
            lengths, :func:`episodes_digest`); None in states written before it was stored
            (not checked then).
        mixture (dict | None): a weighted mixture's description (repo ids, weights, integer
            weights); None for a single dataset (and in states written before mixtures existed).
        origin (dict | None): elastic resume (schema 2): the ``state_dict()`` of the run whose
            unconsumed samples this epoch (``epoch``) replays on this state's topology; ``samples``
            then counts from the start of that remainder. None otherwise (schema 1 layout).
        partitions (int | None): canonical partitions of the stream (schema 3,
            ``PartitionPlanner``); None (absent): the stream is not partitioned.
    """

    seed: int
    epoch: int
    samples: int
    batch_size: int
    world_size: int
    num_workers: int
    strategy: str
    pool_size: int | None
    byte_budget: int | None
    repeat: bool
    drop_last: bool
    equalize: str
    episodes: str | None = None
    mixture: dict[str, Any] | None = None
    origin: dict[str, Any] | None = None
    partitions: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``state_dict()`` layout: the fields, the schema marker and the :data:`DIGEST_KEY`
        over them (plain JSON values)."""
        out = {SCHEMA_KEY: SCHEMA_VERSION, **asdict(self)}
        if out["mixture"] is None:  # single-dataset states keep their layout
            del out["mixture"]
        if out["origin"] is None:
            del out["origin"]
        else:
            out[SCHEMA_KEY] = ELASTIC_SCHEMA_VERSION
        if out["partitions"] is None:
            del out["partitions"]
        else:
            out[SCHEMA_KEY] = PARTITION_SCHEMA_VERSION
        out[DIGEST_KEY] = canonical_digest(out)
        return out

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> StreamState:
        """Parse a ``state_dict()``.

        Every field is type-checked: ints are ints (never bools, floats such as ``3.7`` or ``3.0``,
        strings, lists, None or nan), with ``epoch``, ``samples``, ``num_workers`` >= 0 and
        ``batch_size``, ``world_size`` >= 1; ``repeat``/``drop_last`` bools; ``strategy``/
        ``equalize`` strings; ``episodes`` an :func:`episodes_digest` string (or None in old
        states; the planners refuse those, :func:`episode_selection_diffs`); ``mixture`` a dict or None.
        Elastic ``origin`` states nest at most :data:`MAX_ORIGIN_DEPTH` deep (checked before
        anything recurses), and the state's :data:`DIGEST_KEY` must be the digest of the rest
        (:func:`canonical_digest`): a well-typed edit of any field (``samples``, ``strategy``,
        ``pool_size``...) is refused rather than silently replayed.

        Raises:
            ResumeStateError: not a dict, not a stream state, an old or foreign layout, a missing,
                unknown or wrong-typed field (the message names each field and its value), origins
                nested too deep, a missing or wrong digest (edited).
        """
        if not isinstance(state, dict):
            raise ResumeStateError(
                _NOT_A_STATE_MSG.format(
                    what=f"a {type(state).__name__}",
                    key=SCHEMA_KEY,
                    version=READABLE_SCHEMA_VERSIONS,
                    fields=list(_FIELD_RULES),
                    hint="",
                )
            )
        if SCHEMA_KEY not in state:
            if not set(state) & (set(_FIELD_RULES) | {"offset", "shuffle_buffer", "sampler", "rows"}):
                raise ResumeStateError(
                    _NOT_A_STATE_MSG.format(
                        what=f"a dict with the keys {sorted(map(str, state))[:8]}",
                        key=SCHEMA_KEY,
                        version=READABLE_SCHEMA_VERSIONS,
                        fields=list(_FIELD_RULES),
                        hint=(
                            "; this is a StreamLoader state: pass it to StreamLoader.load_state_dict, or its "
                            "'dataset' entry to the dataset's"
                            if isinstance(state.get("dataset"), dict)
                            else ""
                        ),
                    )
                )
            raise ResumeStateError(_OLD_CHECKPOINT_MSG.format(key=SCHEMA_KEY))
        if type(state[SCHEMA_KEY]) is not int or state[SCHEMA_KEY] not in READABLE_SCHEMA_VERSIONS:
            raise ResumeStateError(
                f"stream state schema {state[SCHEMA_KEY]!r} is not one of the supported {READABLE_SCHEMA_VERSIONS}; "
                "sample-exact resume needs the same lerobotstream planner version. Start a new run "
                "from the checkpoint's policy weights."
            )
        _check_depth(state)
        fields = {k: v for k, v in state.items() if k not in (SCHEMA_KEY, DIGEST_KEY)}
        unknown = sorted(map(str, set(fields) - set(_FIELD_RULES)))
        missing = sorted(set(_FIELD_RULES) - _OPTIONAL - set(fields))
        problems = [
            f"{n}={p}" for n in _FIELD_RULES if n in fields for p in [_field_problem(n, fields[n])] if p is not None
        ]
        if unknown or missing or problems:
            parts = (
                ([f"unknown fields {unknown}"] if unknown else [])
                + ([f"missing fields {missing}"] if missing else [])
                + problems
            )
            raise ResumeStateError(
                "malformed stream state (tampered, or not written by state_dict()): "
                + "; ".join(parts)
                + ". Pass the dict that state_dict() returned, or start a new run from the policy weights."
            )
        _check_digest(state)
        if fields.get("origin") is not None:
            _check_origin(cls.from_dict(fields["origin"]), fields)
        cast = {"int": int, "bool": bool}  # numpy ints and bools as Python's (the options' rules accept both)
        plain = {
            n: cast[_FIELD_RULES[n][0]](v) for n, v in fields.items() if _FIELD_RULES[n][0] in cast and v is not None
        }
        return cls(**{**fields, **plain})


_EDITED = "Pass the dict that state_dict() returned, unchanged, or start a new run from the policy weights."


def _check_depth(state: dict[str, Any]) -> None:
    """Raise ResumeStateError when ``state``'s elastic origins nest deeper than
    :data:`MAX_ORIGIN_DEPTH` (walked iteratively: a state nested thousands deep must not reach
    Python's recursion limit)."""
    depth, node = 0, state
    while isinstance(node, dict) and isinstance(node.get("origin"), dict):
        node, depth = node["origin"], depth + 1
        if depth > MAX_ORIGIN_DEPTH:
            raise ResumeStateError(
                f"malformed stream state (tampered, or not written by state_dict()): its elastic origins nest "
                f"more than {MAX_ORIGIN_DEPTH} deep (one level per elastic resume inside one epoch). {_EDITED}"
            )


def canonical_digest(obj: dict[str, Any]) -> str:
    """``"sha256:<hex>"`` of ``obj`` as canonical JSON (sorted keys, no spaces, numpy scalars as
    Python numbers, tuples as lists), without its :data:`DIGEST_KEY`: what a resume state (and
    ``lerobotstream-train``'s checkpoint record) carries so that an edit is refused. It detects
    edits and corruption; it is not a signature (it has no secret: whoever can edit a state can
    recompute it).

    Raises:
        TypeError, ValueError: ``obj`` holds a value JSON cannot hold (nan, an object, a non-str key);
        RecursionError: it nests deeper than Python's recursion limit.
    """
    import hashlib
    import json

    def plain(v: Any) -> Any:
        import numpy as np

        if isinstance(v, (np.integer, np.floating, np.bool_)):
            return v.item()
        raise TypeError(f"{type(v).__name__} is not a JSON value")

    body = {k: v for k, v in obj.items() if k != DIGEST_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False, default=plain)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _check_digest(state: dict[str, Any]) -> None:
    """Raise ResumeStateError unless ``state`` carries the :func:`canonical_digest` of its entries."""
    given = state.get(DIGEST_KEY)
    if not isinstance(given, str):
        raise ResumeStateError(
            f"stream state has no {DIGEST_KEY!r} (written by an older lerobotstream, or edited): what it would "
            f"replay cannot be trusted. {_EDITED}"
        )
    try:
        want = canonical_digest(state)
    except (TypeError, ValueError, RecursionError) as e:
        raise ResumeStateError(f"malformed stream state (not plain JSON values: {e}). {_EDITED}") from None
    if given != want:
        raise ResumeStateError(
            f"stream state was edited after state_dict() wrote it: its {DIGEST_KEY!r} does not match its fields "
            "(an edited count, strategy or pool size would replay duplicates and skip samples). " + _EDITED
        )


#: what an elastic state and its ``origin`` always share: the refused settings (``planner._planner.REFUSED_SETTINGS``)
#: and the identity fields (a resume that changes any is refused)
_ORIGIN_SHARED = ("seed", "episodes", "mixture", "partitions")


def _check_origin(origin: StreamState, fields: dict[str, Any]) -> None:
    """Raise ResumeStateError when ``origin`` (valid by itself) cannot be the origin of a state with
    ``fields``: another seed, episode selection, mixture or partitions (tampered, or two states
    spliced together), or a later epoch than the state's."""
    bad = [
        f"origin {n}={getattr(origin, n)!r} but the state's {n}={fields.get(n)!r}"
        for n in _ORIGIN_SHARED
        if getattr(origin, n) != fields.get(n)
    ]
    if origin.epoch > int(fields["epoch"]):
        bad.append(f"origin epoch={origin.epoch} is after the state's epoch={fields['epoch']}")
    if bad:
        raise ResumeStateError(
            "malformed stream state (tampered, or not written by state_dict()): its elastic origin does not "
            "belong to it: " + "; ".join(bad) + ". Pass the dict that state_dict() returned, or start a new run "
            "from the policy weights."
        )


def episodes_digest(episode_indices, lengths) -> str:
    """``"sha256:<hex>"`` of the selected episode indices and their lengths (both as int64, in
    episode order; ``"<count>:"`` prefixed so a reader can say how many episodes differ)."""
    import hashlib

    import numpy as np

    idx = np.ascontiguousarray(np.asarray(episode_indices, dtype=np.int64).reshape(-1))
    lens = np.ascontiguousarray(np.asarray(lengths, dtype=np.int64).reshape(-1))
    h = hashlib.sha256(idx.astype("<i8").tobytes() + b"|" + lens.astype("<i8").tobytes()).hexdigest()
    return f"{idx.size}:sha256:{h[:32]}"


def episode_selection_diffs(checkpoint: StreamState, current: StreamState) -> list[str]:
    """The identity rule of resume: what differs between the checkpoint's episode selection and
    this stream's (an empty list when they are the same).

    Raises:
        ResumeStateError: the checkpoint carries no episodes digest (written before it was stored,
            or removed): its dataset and episode selection cannot be checked, and a state loaded
            into another dataset would silently skip or repeat samples, so it is refused.
    """
    if checkpoint.episodes is None:
        raise ResumeStateError(
            "this resume state has no 'episodes' digest (written by an older lerobotstream, or edited), so "
            "the dataset and episode selection it was written for cannot be checked; loaded into another "
            "dataset it would silently skip or repeat samples. Start a new run from the policy weights; or, "
            "if you are sure it comes from this same dataset and selection, copy the 'episodes' value of "
            f"this stream's state_dict() into it ({current.episodes!r})."
        )
    if checkpoint.episodes == current.episodes:
        return []
    if checkpoint.mixture is not None or current.mixture is not None:
        return ["episode selection of the datasets differs"]
    n_old, n_new = checkpoint.episodes.split(":")[0], current.episodes.split(":")[0]
    why = (
        " — as many episodes with other indices or anchor counts: another episode list, another "
        "drop_n_last_frames, or another version of the dataset"
        if n_old == n_new
        else ""
    )
    return [
        f"episode selection: checkpoint {n_old} episodes (digest {checkpoint.episodes}), now {n_new} "
        f"episodes (digest {current.episodes}){why}"
    ]
