"""The resume state: :class:`StreamState`, what one rank's ``state_dict()`` holds (the dataset,
``StreamLoader`` and ``lerobotstream-train`` write and read it), its checks, which fields an elastic
resume may change (:data:`ELASTIC_SETTINGS`), the digests that identify a stream, and :class:`Position`.
"""

from __future__ import annotations

import hashlib
import json
import numbers
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

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

_START_OVER = (
    "Start a new run from the saved weights (with lerobotstream-train: --policy.path=<checkpoint>/pretrained_model)."
)
_EDITED = "Pass the dict that state_dict() returned, unchanged, or start a new run from the saved weights."
_MALFORMED = "malformed stream state (tampered, or not written by state_dict()): "


#: the fields that are no option, checked as ints within plausible bounds (inclusive)
_BOUNDS = {"epoch": (0, 2**32), "samples": (0, MAX_SAMPLES), "world_size": (1, 2**20), "byte_budget": (1, 2**62)}


def _problem(name: str, v: Any) -> str | None:
    """What field ``name`` needs that ``v`` (not None) lacks, or None: :data:`_BOUNDS`, an episodes
    digest, a dict, or the option's own rule (``options.option_problem``)."""
    if name in _BOUNDS:
        low, high = _BOUNDS[name]
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            return f"{type(v).__name__}; an int is needed"
        return f"must be >= {low}" if int(v) < low else f"must be at most {high}" if int(v) > high else None
    if name == "episodes_digest":
        ok = isinstance(v, str) and all(p.count(":") == 2 and p.split(":")[0].isdigit() for p in v.split("|"))
        return None if ok else "an episodes digest '<count>:sha256:<hex>' is needed"
    if name in ("mixture", "origin"):
        return None if isinstance(v, dict) else f"{type(v).__name__}; a dict is needed"
    want = option_problem(name, v, required=True)
    return None if want is None else f"{want} is needed"


@dataclass(frozen=True)
class Position:
    """Where one rank's stream is (``Planner.at``, set whole by ``Planner.place``): ``epoch`` (>= 0),
    ``samples`` (consumed since ``epoch`` began), ``origin`` (an elastic resume's origin
    :class:`StreamState` dict whose unconsumed samples epoch ``origin_epoch`` replays; None: plain
    epochs), ``remainders`` (this rank's part of that remainder, ``Planner.rank_remainders``, shipped
    to the DataLoader workers)."""

    epoch: int = 0
    samples: int = 0
    origin: dict[str, Any] | None = None
    origin_epoch: int | None = None
    remainders: list[Any] | None = None


@dataclass(frozen=True)
class StreamState:
    """Everything sample-exact resume depends on (one rank's view).

    Fields (named as the options, each checked by :func:`_problem`): ``seed`` (None already
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
        node = state  # the origins' depth, walked before anything recurses
        for _ in range(MAX_ORIGIN_DEPTH + 1):
            node = node.get("origin") if isinstance(node, dict) else None
        if isinstance(node, dict):
            raise ResumeStateError(
                f"{_MALFORMED}its elastic origins nest more than {MAX_ORIGIN_DEPTH} deep (one level per "
                f"elastic resume inside one epoch). {_EDITED}"
            )
        given = {k: v for k, v in state.items() if k not in (SCHEMA_KEY, DIGEST_KEY)}
        unknown = sorted(map(str, set(given) - set(_TYPES)))
        missing = [n for n in _TYPES if n not in given]
        parts = [f"{what} fields {names}" for what, names in (("unknown", unknown), ("missing", missing)) if names]
        parts += [
            f"{n}={given[n]!r} ({why})"
            for n, t in _TYPES.items()
            if n in given and not (given[n] is None and t.endswith("| None"))
            for why in [_problem(n, given[n]) if given[n] is not None else "None; required"]
            if why is not None
        ]
        if parts:
            raise ResumeStateError(_MALFORMED + "; ".join(parts) + ". " + _EDITED)
        if not isinstance(state.get(DIGEST_KEY), str):
            raise ResumeStateError(
                f"stream state has no {DIGEST_KEY!r} (edited): what it would replay cannot be trusted. {_EDITED}"
            )
        try:
            want = canonical_digest(state)
        except (TypeError, ValueError, RecursionError) as e:
            raise ResumeStateError(f"malformed stream state (not plain JSON values: {e}). {_EDITED}") from None
        if state[DIGEST_KEY] != want:
            raise ResumeStateError(
                f"stream state was edited after state_dict() wrote it: its {DIGEST_KEY!r} does not match its fields "
                "(an edited count, sampling_strategy or episode_pool_size would replay duplicates and skip samples). "
                + _EDITED
            )
        if given["origin"] is not None:  # it shares the refused settings and the identity, at no later epoch
            origin = cls.from_dict(given["origin"])
            bad = [
                f"origin {n}={getattr(origin, n)!r} but the state's {n}={given[n]!r}"
                for n in (*REFUSED_SETTINGS, "episodes_digest", "mixture")
                if getattr(origin, n) != given[n]
            ]
            if origin.epoch > int(given["epoch"]):
                bad.append(f"origin epoch={origin.epoch} is after the state's epoch={given['epoch']}")
            if bad:
                raise ResumeStateError(
                    _MALFORMED + "its elastic origin does not belong to it: " + "; ".join(bad) + ". " + _EDITED
                )
        plain = {  # numpy ints and bools as Python's (the options' rules accept both)
            n: _CAST[_TYPES[n]](v) for n, v in given.items() if v is not None and _TYPES[n] in _CAST
        }
        return cls(**{**given, **plain})


#: each field's annotation (``"... | None"``: it may be None); int and bool fields are read back as Python's
_TYPES = {f.name: f.type for f in fields(StreamState)}
_CAST = {"int": int, "int | None": int, "bool": bool}

#: the settings (every field but the position and the stream's identity): a state that matches them
#: continues the very same order, one that does not is resumed elastically
RESUME_SETTINGS = tuple(n for n in _TYPES if n not in ("epoch", "samples", "episodes_digest", "mixture", "origin"))
#: what an elastic resume cannot change (with the stream's identity: ``episodes_digest``, ``mixture``)
REFUSED_SETTINGS = ("seed", "partitions")
#: what it can (the epoch's remainder is replanned over the new values; ``lerobotstream-train`` uses it too)
ELASTIC_SETTINGS = tuple(s for s in RESUME_SETTINGS if s not in REFUSED_SETTINGS)


def check_count(name: str, value: Any) -> int:
    """A consumed count given to ``state_dict()``, checked by the ``samples`` field's rule when the
    state is written (not when a later load would call it tampered); returns it as an int.

    Raises:
        StreamingConfigError: ``name`` breaks the rule (a ValueError naming it and its value).
    """
    why = _problem("samples", value)
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
        state, what = {}, f"a {type(state).__name__}"
    elif state.get(SCHEMA_KEY) == SCHEMA:
        return
    else:
        what = f"a dict with the keys {sorted(map(str, state))[:8]}"
    loader = isinstance(state.get("stream"), dict)  # a StreamLoader's state
    if not loader and (key := next((k for k in (_EARLIER_KEY, SCHEMA_KEY) if k in state), None)):
        marker = f" (under {_EARLIER_KEY!r}, the marker of an earlier build)" if key == _EARLIER_KEY else ""
        raise ResumeStateError(
            f"this resume state has schema {state[key]!r}{marker}; this build reads {SCHEMA!r} and converts no "
            f"other (the order it describes may not be the order this build plays). {_START_OVER}"
        )
    hint = (
        "; this is a StreamLoader state: pass it to StreamLoader.load_state_dict, or its 'stream' entry to the "
        "dataset's"
    )
    raise ResumeStateError(
        f"{what} is not a lerobotstream stream state: pass the dict that the dataset's (or planner's) "
        f"state_dict() returned, unchanged (it carries {SCHEMA_KEY}={SCHEMA!r} and the fields {list(_TYPES)})"
        + (f"{hint}." if loader else f". {_START_OVER}")
    )


def canonical_digest(obj: dict[str, Any]) -> str:
    """``"sha256:<hex>"`` of ``obj`` without its :data:`DIGEST_KEY` as canonical JSON (sorted keys,
    no spaces, numpy scalars as numbers): detects edits and corruption (not a signature).

    Raises:
        TypeError, ValueError: ``obj`` holds a value JSON cannot hold (nan, an object, a non-str key);
        RecursionError: it nests deeper than Python's recursion limit.
    """

    def plain(v: Any) -> Any:
        if isinstance(v, (np.integer, np.floating, np.bool_)):
            return v.item()
        raise TypeError(f"{type(v).__name__} is not a JSON value")

    body = {k: v for k, v in obj.items() if k != DIGEST_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False, default=plain)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def episodes_digest(episode_indices, lengths) -> str:
    """``"<count>:sha256:<32 hex>"`` of the selected episode indices and their lengths (both as
    little-endian int64, in episode order; the count says how many episodes differ)."""
    idx = np.asarray(episode_indices, dtype=np.int64).reshape(-1)
    lens = np.asarray(lengths, dtype=np.int64).reshape(-1)
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
