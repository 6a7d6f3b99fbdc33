"""Stream state in LeRobot checkpoints, and the sample-exact resume check.

Next to LeRobot's ``training_state/training_step.json`` every checkpoint of a streaming run gets
``training_state/lerobotstream_stream.json``: the settings the sample order depends on (seed,
world size, batch size, DataLoader workers, strategy, pool and budget, episode selection) and the
dataset's stream state for the checkpoint's step. On ``--resume=true`` with the same settings the
rank's consumed sample count is ``step × batch_size``; the stream skips exactly that many samples
(each DataLoader worker its own share), so training continues with the very next sample the
interrupted run would have used. With another number of processes, ``--batch_size``,
``--num_workers``, pool size, byte budget or sampling strategy (:data:`ELASTIC_KEYS`) the
checkpoint's stream state is resumed elastically: the samples of the epoch in progress that the
interrupted run had not consumed are replanned over the new ranks and workers (each once), then
plain epochs follow (docs/resume.md). Settings that change which samples the epoch has or their
order (dataset, episodes, seed, weights, ``drop_n_last_frames``, ``eval_split``) are refused with
the reason. Mixtures resume elastically the same way (each dataset's remainder, mixed at the weights).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lerobotstream.errors import ResumeStateError

__all__ = [
    "STATE_FILE",
    "FORMAT",
    "ELASTIC_KEYS",
    "order_settings",
    "stream_state_for",
    "write_checkpoint_state",
    "read_checkpoint_state",
    "check_resume",
    "describe_resume",
]

STATE_FILE = "lerobotstream_stream.json"
FORMAT = "lerobotstream-train-stream/1"

_WHY = {
    "world_size": "each rank owns a shard of episodes computed from the world size, so another "
    "world size gives every rank other episodes",
    "batch_size": "the resume offset is step x batch size and, with several DataLoader workers, "
    "batches are taken from the workers in turn, so another batch size moves every "
    "batch boundary",
    "num_workers": "each DataLoader worker owns its own part of the rank's episodes with its own pool, "
    "so another worker count changes ownership and the order",
    "seed": "the episode and frame order is drawn from the seed (a run started before the seed "
    "reached the stream used 42: pass --seed=42)",
    "sampling_strategy": "the strategy decides which resident episode gives the next frame",
    "episode_pool_size": "the pool size decides how many episodes are mixed at once",
    "byte_budget_gb": "the byte budget decides when the next episode may be admitted",
    "episodes": "the episode selection is what the order is drawn over",
    "repo_id": "it is another dataset (or another mixture of datasets)",
    "streaming_weights": "the weights set each dataset's share of the samples and the mix order",
    "drop_n_last_frames": "the policy's drop_n_last_frames decides which frames are anchors",
    "eval_split": "the held-out episodes are not streamed for training, so another split trains on other episodes",
    "partitions": "the canonical partitions (--dataset.streaming_partitions) fix which episodes are mixed "
    "together and each partition's order",
}

#: settings an elastic resume may change: the epoch's remainder is replanned over them
ELASTIC_KEYS = ("world_size", "batch_size", "num_workers", "sampling_strategy", "episode_pool_size", "byte_budget_gb")

#: settings that older stream states do not record, with the value those runs had
_ADDED_LATER = {"drop_n_last_frames": 0, "eval_split": 0.0, "streaming_weights": None, "partitions": None}

RESUME_RULES = (
    "Sample-exact streaming resume needs the same world size, batch size and --num_workers as the "
    "checkpointed run, and the same seed, sampling strategy, pool size and byte budget. "
    "Resume with the checkpoint's settings, or start a new run from the checkpoint's policy weights "
    "(--policy.path=<checkpoint>/pretrained_model) if you need different ones."
)
ELASTIC_RULES = (
    "Streaming resume may change the number of processes, --batch_size, --num_workers, the sampling "
    "strategy, pool size and byte budget (the rest of the epoch is replanned over them), but needs the "
    "same dataset, episodes, seed, weights, partitions, drop_n_last_frames and eval_split as the checkpointed run. "
    "Resume with those settings, or start a new run from the checkpoint's policy weights "
    "(--policy.path=<checkpoint>/pretrained_model) if you need different ones."
)


def order_settings(cfg: Any, world_size: int) -> dict[str, Any]:
    """The settings the stream's sample order depends on, JSON-ready."""
    from lerobotstream.integrations.lerobot.factory import streaming_seed, trainable_config

    d = cfg.dataset
    return {
        "repo_id": d.repo_id,
        "episodes": None if d.episodes is None else sorted(int(e) for e in d.episodes),
        "world_size": int(world_size),
        "batch_size": int(cfg.batch_size),
        "num_workers": int(cfg.num_workers),
        "seed": streaming_seed(cfg.seed),
        "sampling_strategy": d.streaming_sampling_strategy,
        "episode_pool_size": d.streaming_episode_pool_size,
        "byte_budget_gb": float(d.streaming_byte_budget_gb),
        "drop_n_last_frames": int(getattr(trainable_config(cfg), "drop_n_last_frames", 0) or 0),
        "eval_split": float(getattr(d, "eval_split", 0.0) or 0.0),
        "streaming_weights": None
        if getattr(d, "streaming_weights", None) is None
        else [float(w) for w in d.streaming_weights],
        "partitions": getattr(d, "streaming_partitions", None),
    }


def stream_state_for(dataset: Any, samples: int, settings: dict[str, Any]) -> dict[str, Any]:
    """The dataset's ``state_dict()`` layout, positioned after ``samples`` consumed samples of
    this rank from the start of the run (epoch 0). Works with the offset layout
    (``epoch/offset``) and the planner layout (``samples/batch_size/num_workers/...``)."""
    import inspect

    if "samples_consumed" in inspect.signature(dataset.state_dict).parameters:
        return dict(dataset.state_dict(samples_consumed=int(samples)))  # planner layout, schema-versioned
    state = dict(dataset.state_dict())
    state["epoch"] = 0
    if "samples" in state:
        state["samples"] = int(samples)
        for key in ("batch_size", "world_size", "num_workers"):
            if key in state:
                state[key] = settings[key]
    else:
        state["offset"] = int(samples)
    for key in ("batch_size", "num_workers", "world_size"):
        state.setdefault(key, settings[key])
    return state


def write_json_atomic(path: Path, doc: Any) -> Path:
    """Write ``doc`` as JSON to ``path`` through a temporary file in the same folder, fsync and
    ``os.replace`` (``lerobotstream._atomic``): readers see the old file or the whole new one, never a part."""
    from lerobotstream._atomic import write_text_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(path, json.dumps(doc, indent=2, sort_keys=True, default=str))


def write_checkpoint_state(
    checkpoint_dir: Path, step: int, settings: dict[str, Any], stream_state: dict[str, Any]
) -> Path:
    """Write ``training_state/lerobotstream_stream.json`` atomically, with a ``digest`` over the
    record as written (``planner.canonical_digest``; :func:`read_checkpoint_state` refuses an
    edited record); returns its path."""
    from lerobotstream.planner import DIGEST_KEY, canonical_digest

    doc = {"format": FORMAT, "step": int(step), "settings": settings, "stream_state": stream_state}
    doc = json.loads(json.dumps(doc, sort_keys=True, default=str))  # what the file holds
    doc[DIGEST_KEY] = canonical_digest(doc)
    return write_json_atomic(Path(checkpoint_dir) / "training_state" / STATE_FILE, doc)


def read_checkpoint_state(checkpoint_dir: Path) -> dict[str, Any]:
    """Read the stream state of a checkpoint.

    Raises:
        ResumeStateError: no stream state (checkpoint of a map-style run or of an older streaming
            reader), an unknown format, or a record edited after it was written (its ``digest``
            does not match: edited settings would skip the elastic replan and replay another order).
    """
    from lerobotstream.planner import DIGEST_KEY, canonical_digest

    path = Path(checkpoint_dir) / "training_state" / STATE_FILE
    if not path.is_file():
        raise ResumeStateError(
            f"checkpoint {checkpoint_dir} has no {STATE_FILE}: it was not written by a "
            "lerobotstream streaming run (map-style, or an older streaming reader with a row shuffle "
            "buffer or the earlier multi-worker sampler, whose order cannot be reproduced). "
            "Sample-exact streaming resume is refused; start a new run from its policy weights "
            f"(--policy.path={Path(checkpoint_dir) / 'pretrained_model'})."
        )
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as e:  # JSONDecodeError, bad UTF-8; nesting past the limit
        raise ResumeStateError(f"cannot read {path}: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise ResumeStateError(f"{path}: stream state format {found!r} is not {FORMAT!r}")
    try:
        same = doc.get(DIGEST_KEY) == canonical_digest(doc)
    except (TypeError, ValueError, RecursionError):
        same = False
    if not same:
        raise ResumeStateError(
            f"{path} was edited after the run wrote it (its {DIGEST_KEY!r} does not match its contents), or "
            "written by an older lerobotstream: its settings and stream state cannot be trusted. Restore the "
            "file as written, or start a new run from the policy weights "
            f"(--policy.path={Path(checkpoint_dir) / 'pretrained_model'})."
        )
    return doc


def check_resume(
    doc: dict[str, Any], current: dict[str, Any], step: int, where: Path, *, elastic: bool = True
) -> list[str]:
    """Refuse a resume whose settings would change the sample order (``elastic``: only those
    outside :data:`ELASTIC_KEYS`; False: any, the sample-exact rule); returns the elastic changes,
    ``"key: checkpoint X, now Y"``.

    Raises:
        ResumeStateError: listing every refused setting, why it matters, and what to do.
    """
    saved = {**_ADDED_LATER, **doc.get("settings", {})}
    differ = [k for k in current if saved.get(k) != current.get(k)]
    allowed = [k for k in differ if elastic and k in ELASTIC_KEYS]
    diffs = [
        f"  - {k}: checkpoint {saved.get(k)!r}, now {current.get(k)!r} — {_WHY.get(k, 'it changes the order')}"
        for k in differ
        if k not in allowed
    ]
    if int(doc.get("step", step)) != int(step):
        diffs.append(f"  - step: stream state written at step {doc.get('step')}, training_step.json says {step}")
    if diffs:
        raise ResumeStateError(
            f"cannot resume the stream of {where} sample-exactly:\n"
            + "\n".join(diffs)
            + "\n"
            + (ELASTIC_RULES if elastic else RESUME_RULES)
        )
    return [f"{k}: checkpoint {saved.get(k)!r}, now {current.get(k)!r}" for k in allowed]


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
