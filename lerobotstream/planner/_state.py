"""The resume state: :class:`StreamState`, what one rank's ``state_dict()`` holds — the one resume
state of lerobotstream (the dataset, ``StreamLoader`` and ``lerobotstream-train`` write and read it)
— its parsing and checks, which fields an elastic resume may change (:data:`ELASTIC_SETTINGS`), the
digests that identify a stream, and a stream's position (:data:`Position`). Fields are named as the
options and checked by the options' own rules (``options.option_problem``).
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass
from typing import Any

from lerobotstream.errors import ResumeStateError, StreamingConfigError
from lerobotstream.options import option_problem

#: the schema marker ``state[SCHEMA_KEY] == SCHEMA``; a state of any other schema is refused, never converted
SCHEMA_KEY = "schema"
SCHEMA = "lerobotstream.stream/1"
#: the marker earlier builds wrote (schemas 1 to 3 of an unreleased format): named when refused
_EARLIER_KEY = "lerobotstream_planner_schema"
#: the state's digest (:func:`canonical_digest` of every other entry): an edited state is refused
DIGEST_KEY = "digest"
#: elastic origins nested at most this deep (one level per elastic resume inside an epoch)
MAX_ORIGIN_DEPTH = 64

#: a state's consumed count at most (past it the replay would overflow a C long)
MAX_SAMPLES = 2**48

#: settings that fix ownership, order and batch boundaries: a state that matches them continues the
#: very same order; one that does not is resumed elastically
RESUME_SETTINGS = (
    "seed",
    "batch_size",
    "world_size",
    "num_workers",
    "sampling_strategy",
    "episode_pool_size",
    "byte_budget",
    "repeat",
    "drop_last",
    "equalize",
    "partitions",
)
#: what an elastic resume cannot change (with the stream's identity: ``episodes_digest``, ``mixture``)
REFUSED_SETTINGS = ("seed", "partitions")
#: what it can (the epoch's remainder is replanned over the new values; ``lerobotstream-train`` uses it too)
ELASTIC_SETTINGS = tuple(s for s in RESUME_SETTINGS if s not in REFUSED_SETTINGS)

_START_OVER = (
    "Start a new run from the saved weights (with lerobotstream-train: --policy.path=<checkpoint>/pretrained_model)."
)
_EDITED = "Pass the dict that state_dict() returned, unchanged, or start a new run from the saved weights."
_MALFORMED = "malformed stream state (tampered, or not written by state_dict()): "


def _int_in(low: int, high: int):
    def rule(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            return f"{type(v).__name__}; an int is needed"
        if int(v) < low:
            return f"must be >= {low}"
        if int(v) > high:
            return f"must be at most {high}"
        return None

    return rule


def _option(name: str):
    def rule(v: Any) -> str | None:
        want = option_problem(name, v, required=True)
        return None if want is None else f"{want} is needed"

    return rule


def _episodes(v: Any) -> str | None:
    if isinstance(v, str) and all(p.count(":") == 2 and p.split(":")[0].isdigit() for p in v.split("|")):
        return None
    return "an episodes digest '<count>:sha256:<hex>' is needed"


def _dict(v: Any) -> str | None:
    return None if isinstance(v, dict) else f"{type(v).__name__}; a dict is needed"


#: one rule per field (``rule(value) -> None`` or what is needed): the options' own, or plausible bounds
_RULES = {
    "seed": _option("seed"),
    "epoch": _int_in(0, 2**32),
    "samples": _int_in(0, MAX_SAMPLES),
    "batch_size": _option("batch_size"),
    "world_size": _int_in(1, 2**20),
    "num_workers": _option("num_workers"),
    "sampling_strategy": _option("sampling_strategy"),
    "episode_pool_size": _option("episode_pool_size"),
    "byte_budget": _int_in(1, 2**62),
    "repeat": _option("repeat"),
    "drop_last": _option("drop_last"),
    "equalize": _option("equalize"),
    "partitions": _option("partitions"),
    "episodes_digest": _episodes,
    "mixture": _dict,
    "origin": _dict,
}
#: fields that may be None
_NULLABLE = frozenset({"episode_pool_size", "byte_budget", "partitions", "mixture", "origin"})
#: fields read back as Python ints / bools (a numpy value passes the rules: it is converted)
_INTS = frozenset(
    "seed epoch samples batch_size world_size num_workers episode_pool_size byte_budget partitions".split()
)
_BOOLS = frozenset({"repeat", "drop_last"})


@dataclass(frozen=True)
class Position:
    """Where one rank's stream is, the one object that holds it (a planner's ``Planner.at``, the
    dataset's resume state's, handed whole with ``Planner.place``; frozen, so a move is a new one):
    ``epoch`` (>= 0), ``samples`` (consumed since ``epoch`` began), ``origin`` (an elastic resume's
    origin :class:`StreamState` dict whose unconsumed samples epoch ``origin_epoch`` replays; None:
    plain epochs), ``remainders`` (this rank's part of that remainder, ``Planner.rank_remainders``,
    shipped to the DataLoader workers)."""

    epoch: int = 0
    samples: int = 0
    origin: dict[str, Any] | None = None
    origin_epoch: int | None = None
    remainders: list[Any] | None = None


@dataclass(frozen=True)
class StreamState:
    """Everything sample-exact resume depends on (one rank's view).

    Fields (named as the options, each checked by its rule in :data:`_RULES`): ``seed`` (None already
    mapped to 42); ``epoch`` (>= 0); ``samples`` (consumed from this rank since ``epoch`` began; endless:
    may exceed one epoch); ``batch_size``, ``world_size``, ``num_workers`` (0: one stream),
    ``sampling_strategy``, ``episode_pool_size``, ``byte_budget`` (per rank, bytes, or None),
    ``repeat``, ``drop_last``, ``equalize``, ``partitions``; ``episodes_digest``
    (:func:`episodes_digest`; a mixture's joined with ``|``); ``mixture`` (repo ids, weights, integer
    weights; None: one dataset); ``origin`` (elastic: the state whose unconsumed samples epoch
    ``epoch`` replays, ``samples`` counted from there; else None).
    """

    seed: int
    epoch: int
    samples: int
    batch_size: int
    world_size: int
    num_workers: int
    sampling_strategy: str
    episode_pool_size: int | None
    byte_budget: int | None
    repeat: bool
    drop_last: bool
    equalize: str
    partitions: int | None
    episodes_digest: str
    mixture: dict[str, Any] | None = None
    origin: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``state_dict()`` layout: :data:`SCHEMA_KEY`, every field (None included) and the
        :data:`DIGEST_KEY` over them (plain JSON values)."""
        out = {SCHEMA_KEY: SCHEMA, **asdict(self)}
        out[DIGEST_KEY] = canonical_digest(out)
        return out

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> StreamState:
        """Parse a ``state_dict()``: every field by its rule (ints never bools or floats), origins
        at most :data:`MAX_ORIGIN_DEPTH` deep, and the :data:`DIGEST_KEY` the digest of the rest.

        Raises:
            ResumeStateError: not a stream state, another schema (named, with the advice to start
                a new run from the saved weights), a missing, unknown or wrong-typed field (each
                named with its value), origins nested too deep, a missing or wrong digest (edited).
        """
        _check_schema(state)
        _check_depth(state)
        given = {k: v for k, v in state.items() if k not in (SCHEMA_KEY, DIGEST_KEY)}
        unknown = sorted(map(str, set(given) - set(_RULES)))
        missing = [n for n in _RULES if n not in given]
        problems = [
            f"{n}={given[n]!r} ({why})"
            for n in _RULES
            if n in given and not (given[n] is None and n in _NULLABLE)
            for why in [_RULES[n](given[n]) if given[n] is not None else "None; required"]
            if why is not None
        ]
        if unknown or missing or problems:
            parts = (
                ([f"unknown fields {unknown}"] if unknown else [])
                + ([f"missing fields {missing}"] if missing else [])
                + problems
            )
            raise ResumeStateError(_MALFORMED + "; ".join(parts) + ". " + _EDITED)
        _check_digest(state)
        if given["origin"] is not None:
            _check_origin(cls.from_dict(given["origin"]), given)
        plain = {  # numpy ints and bools as Python's (the options' rules accept both)
            n: (int(v) if n in _INTS else bool(v)) for n, v in given.items() if v is not None and n in _INTS | _BOOLS
        }
        return cls(**{**given, **plain})


def check_count(name: str, value: Any) -> int:
    """A consumed count given to ``state_dict()``, checked by the ``samples`` field's rule when the
    state is written (not when a later load would call it tampered); returns it as an int.

    Raises:
        StreamingConfigError: ``name`` breaks the rule (a ValueError naming it and its value).
    """
    why = _RULES["samples"](value)
    if why is not None:
        raise StreamingConfigError(
            f"{name} must be an int >= 0 and at most {MAX_SAMPLES} (a resume state's count), got {value!r} ({why})",
            option=name,
            value=value,
        )
    return int(value)


def _check_schema(state: Any) -> None:
    """Raise ResumeStateError unless ``state`` is a dict marked with this build's :data:`SCHEMA`."""
    if not isinstance(state, dict):
        what = f"a {type(state).__name__}"
    elif state.get(SCHEMA_KEY) == SCHEMA:
        return
    elif (_EARLIER_KEY in state or SCHEMA_KEY in state) and not isinstance(state.get("stream"), dict):
        found = state[_EARLIER_KEY] if _EARLIER_KEY in state else state[SCHEMA_KEY]
        marker = f" (under {_EARLIER_KEY!r}, the marker of an earlier build)" if _EARLIER_KEY in state else ""
        raise ResumeStateError(
            f"this resume state has schema {found!r}{marker}; this build reads {SCHEMA!r} and converts no other "
            f"(the order it describes may not be the order this build plays). {_START_OVER}"
        )
    else:
        what = f"a dict with the keys {sorted(map(str, state))[:8]}"
    hint = (
        "; this is a StreamLoader state: pass it to StreamLoader.load_state_dict, or its 'stream' entry to "
        "the dataset's"
        if isinstance(state, dict) and isinstance(state.get("stream"), dict)
        else ""
    )
    raise ResumeStateError(
        f"{what} is not a lerobotstream stream state: pass the dict that the dataset's (or planner's) "
        f"state_dict() returned, unchanged (it carries {SCHEMA_KEY}={SCHEMA!r} and the fields {list(_RULES)}){hint}. "
        + _START_OVER
    )


def _check_depth(state: dict[str, Any]) -> None:
    """Raise ResumeStateError when origins nest deeper than :data:`MAX_ORIGIN_DEPTH` (walked
    iteratively, before anything recurses)."""
    depth, node = 0, state
    while isinstance(node, dict) and isinstance(node.get("origin"), dict):
        node, depth = node["origin"], depth + 1
        if depth > MAX_ORIGIN_DEPTH:
            raise ResumeStateError(
                f"{_MALFORMED}its elastic origins nest more than {MAX_ORIGIN_DEPTH} deep (one level per "
                f"elastic resume inside one epoch). {_EDITED}"
            )


def canonical_digest(obj: dict[str, Any]) -> str:
    """``"sha256:<hex>"`` of ``obj`` without its :data:`DIGEST_KEY` as canonical JSON (sorted keys,
    no spaces, numpy scalars as numbers): detects edits and corruption (not a signature).

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
            f"stream state has no {DIGEST_KEY!r} (edited): what it would replay cannot be trusted. {_EDITED}"
        )
    try:
        want = canonical_digest(state)
    except (TypeError, ValueError, RecursionError) as e:
        raise ResumeStateError(f"malformed stream state (not plain JSON values: {e}). {_EDITED}") from None
    if given != want:
        raise ResumeStateError(
            f"stream state was edited after state_dict() wrote it: its {DIGEST_KEY!r} does not match its fields "
            "(an edited count, sampling_strategy or episode_pool_size would replay duplicates and skip samples). "
            + _EDITED
        )


#: what an elastic state and its ``origin`` always share: the refused settings and the identity fields
_ORIGIN_SHARED = (*REFUSED_SETTINGS, "episodes_digest", "mixture")


def _check_origin(origin: StreamState, fields: dict[str, Any]) -> None:
    """Raise ResumeStateError when ``origin`` cannot be the origin of a state with ``fields``
    (another seed, episode selection, mixture or partitions, or a later epoch)."""
    bad = [
        f"origin {n}={getattr(origin, n)!r} but the state's {n}={fields.get(n)!r}"
        for n in _ORIGIN_SHARED
        if getattr(origin, n) != fields.get(n)
    ]
    if origin.epoch > int(fields["epoch"]):
        bad.append(f"origin epoch={origin.epoch} is after the state's epoch={fields['epoch']}")
    if bad:
        raise ResumeStateError(
            _MALFORMED + "its elastic origin does not belong to it: " + "; ".join(bad) + ". " + _EDITED
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
    """What differs between the checkpoint's episode selection and this stream's (empty: none)."""
    if checkpoint.episodes_digest == current.episodes_digest:
        return []
    if checkpoint.mixture is not None or current.mixture is not None:
        return ["episode selection of the datasets differs"]
    n_old, n_new = checkpoint.episodes_digest.split(":")[0], current.episodes_digest.split(":")[0]
    why = (
        " — as many episodes with other indices or anchor counts: another episode list, another "
        "drop_n_last_frames, or another version of the dataset"
        if n_old == n_new
        else ""
    )
    return [
        f"episode selection: checkpoint {n_old} episodes (digest {checkpoint.episodes_digest}), now {n_new} "
        f"episodes (digest {current.episodes_digest}){why}"
    ]
