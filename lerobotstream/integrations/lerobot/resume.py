"""Stream state in LeRobot checkpoints, and the resume check.

Beside LeRobot's ``training_state/training_step.json`` every checkpoint of a streaming run gets
``training_state/lerobotstream_stream.json``: the dataset's ``state_dict()`` at the checkpoint's
step (``stream``, unchanged) wrapped with the run's settings the stream state does not hold
(``run``: repo id, episode list, weights, ``drop_n_last_frames``, ``eval_split``). On
``--resume=true`` with the same settings each rank skips ``step x batch_size`` samples, so
training continues with the very sample the interrupted run would have used next. A change of a
setting in ``planner._state.ELASTIC_SETTINGS`` (number of processes, ``--batch_size``,
``--num_workers``, pool size, byte budget, sampling strategy...) resumes elastically: the epoch's
unconsumed samples are replanned over the new ranks and workers, then plain epochs follow
(docs/resume.md). A change of what the epoch holds or its order (dataset, episodes, seed, weights,
partitions, ``drop_n_last_frames``, ``eval_split``) is refused with the reason, as is a record of
another format or one that cannot be read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lerobotstream.errors import ResumeStateError

__all__ = [
    "STATE_FILE",
    "FORMAT",
    "run_settings",
    "write_checkpoint_state",
    "read_checkpoint_state",
    "check_resume",
    "describe_resume",
]

STATE_FILE = "lerobotstream_stream.json"
#: ``{"format", "step", "run": run_settings(), "stream": <the stream's state>, "digest"}``
FORMAT = "lerobotstream-train-stream/2"

#: why a setting an elastic resume cannot change fixes the order: the stream state's fields (named
#: as the options) and the run's own settings (:func:`run_settings`)
_WHY = {
    "seed": "the episode and frame order is drawn from the seed (a run started before the seed "
    "reached the stream used 42: pass --seed=42)",
    "episodes": "the episode selection is what the order is drawn over",
    "episodes_digest": "the selected episodes and their anchor counts are what the order is drawn over",
    "mixture": "the mixture (datasets, weights) sets each dataset's share of the samples and the mix order",
    "repo_id": "it is another dataset (or another mixture of datasets)",
    "streaming_weights": "the weights set each dataset's share of the samples and the mix order",
    "drop_n_last_frames": "the policy's drop_n_last_frames decides which frames are anchors",
    "eval_split": "the held-out episodes are not streamed for training, so another split trains on other episodes",
    "partitions": "the canonical partitions (--dataset.streaming_partitions) fix which episodes are mixed "
    "together and each partition's order",
}

ELASTIC_RULES = (
    "Streaming resume may change the number of processes, --batch_size, --num_workers, the sampling "
    "strategy, pool size and byte budget (the rest of the epoch is replanned over them), but needs the "
    "same dataset, episodes, seed, weights, partitions, drop_n_last_frames and eval_split as the checkpointed run. "
    "Resume with those settings, or start a new run from the checkpoint's policy weights "
    "(--policy.path=<checkpoint>/pretrained_model) if you need different ones."
)


def run_settings(cfg: Any) -> dict[str, Any]:
    """The run's settings the sample order depends on that the stream's state does not hold
    (JSON-ready; LeRobot's names): the dataset, its episode list and weights, the policy's
    ``drop_n_last_frames`` and the eval split. Every other setting is a field of the stream state."""
    from lerobotstream.integrations.lerobot.factory import trainable_config

    d = cfg.dataset
    return {
        "repo_id": d.repo_id,
        "episodes": None if d.episodes is None else sorted(int(e) for e in d.episodes),
        "drop_n_last_frames": int(getattr(trainable_config(cfg), "drop_n_last_frames", 0) or 0),
        "eval_split": float(getattr(d, "eval_split", 0.0) or 0.0),
        "streaming_weights": None
        if getattr(d, "streaming_weights", None) is None
        else [float(w) for w in d.streaming_weights],
    }


def write_json_atomic(path: Path, doc: Any) -> Path:
    """Write ``doc`` as JSON to ``path`` atomically (``lerobotstream._atomic``), its folder created."""
    from lerobotstream._atomic import write_text_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(path, json.dumps(doc, indent=2, sort_keys=True, default=str))


def write_checkpoint_state(checkpoint_dir: Path, step: int, run: dict[str, Any], stream: dict[str, Any]) -> Path:
    """Write ``training_state/lerobotstream_stream.json`` atomically: the stream's state at ``step``
    (the dataset's ``state_dict()``), the ``run``'s settings (:func:`run_settings`) and a ``digest``
    over the record as written (``planner._state.canonical_digest``); returns its path."""
    from lerobotstream.planner._state import DIGEST_KEY, canonical_digest

    doc = {"format": FORMAT, "step": int(step), "run": run, "stream": stream}
    doc = json.loads(json.dumps(doc, sort_keys=True, default=str))  # what the file holds
    doc[DIGEST_KEY] = canonical_digest(doc)
    return write_json_atomic(Path(checkpoint_dir) / "training_state" / STATE_FILE, doc)


def read_checkpoint_state(checkpoint_dir: Path) -> dict[str, Any]:
    """Read the stream state of a checkpoint.

    Raises:
        ResumeStateError: no stream state (a map-style run's or an older streaming reader's
            checkpoint), a file that cannot be read, another format (named), or a record edited
            after it was written (its ``digest`` does not match).
    """
    from lerobotstream.planner._state import DIGEST_KEY, canonical_digest

    path = Path(checkpoint_dir) / "training_state" / STATE_FILE
    weights = f"(--policy.path={Path(checkpoint_dir) / 'pretrained_model'})"
    if not path.is_file():
        raise ResumeStateError(
            f"checkpoint {checkpoint_dir} has no {STATE_FILE}: it was not written by a "
            "lerobotstream streaming run (map-style, or an older streaming reader with a row shuffle "
            "buffer or the earlier multi-worker sampler, whose order cannot be reproduced). "
            f"Sample-exact streaming resume is refused; start a new run from its policy weights {weights}."
        )
    start_over = f"Start a new run from the saved weights {weights}."
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as e:  # JSONDecodeError, bad UTF-8; nesting past the limit
        raise ResumeStateError(
            f"cannot read {path} (truncated or damaged: {e}): the stream's position is lost. {start_over}"
        ) from None
    if not isinstance(doc, dict):
        raise ResumeStateError(f"{path} holds a JSON {type(doc).__name__}, not a training record. {start_over}")
    if doc.get("format") != FORMAT:
        raise ResumeStateError(
            f"{path}: training record of format {doc.get('format')!r}; this build reads {FORMAT!r} and converts "
            f"no other. {start_over}"
        )
    try:
        same = doc.get(DIGEST_KEY) == canonical_digest(doc)
    except (TypeError, ValueError, RecursionError):
        same = False
    if not same:
        raise ResumeStateError(
            f"{path} was edited after the run wrote it (its {DIGEST_KEY!r} does not match its contents), or "
            "damaged: its settings and stream state cannot be trusted. Restore the "
            f"file as written, or start a new run from the policy weights {weights}."
        )
    return doc


def check_resume(
    doc: dict[str, Any],
    run: dict[str, Any],
    stream: dict[str, Any],
    step: int,
    where: Path,
) -> list[str]:
    """Refuse a resume whose settings would change the sample order: the checkpoint record ``doc``
    against this run's settings (``run``: :func:`run_settings`) and stream state (``stream``: the
    dataset's ``state_dict()``); the settings in ``planner._state.ELASTIC_SETTINGS`` may change.
    Returns those changes, ``"name: checkpoint X, now Y"``.

    Raises:
        ResumeStateError: the checkpoint's stream state is not this build's (or was edited), or
            listing every refused setting, why it matters, and what to do.
    """
    from lerobotstream.planner._state import ELASTIC_SETTINGS, RESUME_SETTINGS, StreamState

    then, now = StreamState.from_dict(doc.get("stream")), StreamState.from_dict(stream)
    saved = doc.get("run", {})
    differ = [(k, saved.get(k), run.get(k)) for k in run if saved.get(k) != run.get(k)]
    differ += [
        (k, getattr(then, k), getattr(now, k))
        for k in (*RESUME_SETTINGS, "episodes_digest", "mixture")
        if getattr(then, k) != getattr(now, k)
    ]
    allowed = [d for d in differ if d[0] in ELASTIC_SETTINGS]
    diffs = [
        f"  - {k}: checkpoint {a!r}, now {b!r} — {_WHY.get(k, 'it changes the order')}"
        for k, a, b in differ
        if (k, a, b) not in allowed
    ]
    if int(doc.get("step", step)) != int(step):
        diffs.append(f"  - step: stream state written at step {doc.get('step')}, training_step.json says {step}")
    if diffs:
        raise ResumeStateError(
            f"cannot resume the stream of {where} sample-exactly:\n" + "\n".join(diffs) + "\n" + ELASTIC_RULES
        )
    return [f"{k}: checkpoint {a!r}, now {b!r}" for k, a, b in allowed]


def describe_resume(step: int, changes: list[str], info: dict[str, Any] | None, samples: int) -> str:
    """The log line of a resume: at ``step``, the settings that changed (``changes``, elastic) and
    what the resumed stream continues (``info``: the dataset's ``resume_info()``; None: a plain
    epoch), or the ``samples`` per rank it skipped (the same topology)."""
    if not changes:
        if info:  # the same topology inside an elastic remainder: that remainder continues
            return (
                f"lerobotstream: resuming the stream at step {step} inside an elastic remainder "
                f"(epoch {info.get('epoch')}, {info.get('samples_left')} samples left over all ranks when it began)"
            )
        return f"lerobotstream: resuming the stream at step {step} ({samples} samples per rank consumed)"
    info = info or {}
    per = info.get("samples_left_per_dataset") or []
    left = f"{info.get('samples_left')}" + (f" ({', '.join(map(str, per))} per dataset)" if len(per) > 1 else "")
    unit = info.get("unit", "episodes")  # "partitions" with --dataset.streaming_partitions
    return (
        f"lerobotstream: elastic resume at step {step} ({'; '.join(changes)}): the epoch in progress "
        f"({info.get('epoch')}) has {left} samples left over all ranks ({info.get('rank_samples')} on this "
        f"rank; {info.get('whole')} {unit} whole, {info.get('started')} started), then "
        "plain epochs of the new topology"
    )
