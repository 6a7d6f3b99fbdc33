"""Environment configuration and defaults, read once at import.

Every ``os.environ`` lookup of the library lives here.

| variable | default | meaning |
|---|---|---|
| ``HF_LEROBOT_HOME`` | ``$HF_HOME/lerobot`` (``~/.cache/huggingface/lerobot``) | local cache root (sidecars, indexes) |
| ``LEROBOTSTREAM_INDEX_DIR`` | ``$HF_LEROBOT_HOME/streaming-indexes`` | derived memory-mapped indexes |
| ``LEROBOTSTREAM_SIDECAR_DIR`` | ``$HF_LEROBOT_HOME/streaming-sidecars`` | revision-keyed sidecar cache |
| ``LEROBOTSTREAM_DEBUG`` | unset | CLIs print tracebacks instead of a one-line error |
| ``LEROBOTSTREAM_PROGRESS`` | unset: when stderr is a terminal | ``1``/``0``: show/hide progress bars |
| ``LEROBOTSTREAM_SLOW_START_S`` | ``3`` | seconds after which a start-up step still running is logged |
| ``LEROBOTSTREAM_MALLOC_TRIM`` | on | ``0``: never return freed heap to the OS (``_heap.trim``) |
| ``LEROBOTSTREAM_MALLOC_TRIM_MIB`` | ``256`` | free heap kept resident before a trim, MiB |
| ``LEROBOTSTREAM_TRAIN_TRACE`` | unset | ``lerobotstream-train`` appends one JSON line per batch to ``<value>.rank<R>`` |
| ``RANK``, ``WORLD_SIZE`` | unset | the launcher's rank and world size when no process group is up |
"""

from __future__ import annotations

import os
from pathlib import Path

HF_HOME = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")).expanduser()
HF_LEROBOT_HOME = Path(os.environ.get("HF_LEROBOT_HOME", HF_HOME / "lerobot")).expanduser()
INDEX_DIR = Path(os.environ.get("LEROBOTSTREAM_INDEX_DIR", HF_LEROBOT_HOME / "streaming-indexes")).expanduser()
SIDECAR_DIR = Path(os.environ.get("LEROBOTSTREAM_SIDECAR_DIR", HF_LEROBOT_HOME / "streaming-sidecars")).expanduser()


def env_flag(name: str) -> bool | None:
    """Environment variable ``name`` as a switch: True (``1``/``true``/``yes``/``on``), False
    (``0``/``false``/``no``/``off``), else None (unset or another value); read at call time."""
    value = os.environ.get(name, "").strip().lower()
    return True if value in {"1", "true", "yes", "on"} else False if value in {"0", "false", "no", "off"} else None


def debug_enabled() -> bool:
    """``LEROBOTSTREAM_DEBUG`` set to a true value: CLIs print full tracebacks instead of one line
    (read at call time)."""
    return env_flag("LEROBOTSTREAM_DEBUG") is True


# --- defaults shared by the streaming options (lerobotstream.options.StreamOptions) and their users ----
DEFAULT_SEED = 1000
SEED_WHEN_NONE = 42
DEFAULT_EPISODE_POOL_SIZE_PER_RANK = 32
#: episodes mixed at once in one canonical partition (``partitions``): 32 per rank over LeRobot's 4 workers
DEFAULT_PARTITION_POOL_SIZE = 8
DEFAULT_SIDECAR_LOCK_TIMEOUT_S = 1800.0
DEFAULT_TOLERANCE_S = 1e-4
DEFAULT_SAMPLING_STRATEGY = "remaining"
DEFAULT_READ_TIMEOUT_S = 120.0  # one read from an HTTP(S)/Hub/bucket store, retries included
# SAMPLING_STRATEGIES and SAMPLING_STRATEGY_HELP come from the strategy table: see __getattr__.
#: DataLoader workers per rank at most (the ``num_workers`` option's bound; bounds loading a state)
MAX_NUM_WORKERS = 1024
GIB = 1 << 30

# LeRobot v3 layout (LeRobotDataset v3.0 on-disk format): every path of it is defined here, once
INFO_PATH = "meta/info.json"
TASKS_PATH = "meta/tasks.parquet"
STATS_PATH = "meta/stats.json"
#: the folder of the episode shards (one row per episode; every shard is read)
EPISODES_DIR = "meta/episodes"
DEFAULT_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
DEFAULT_EPISODES_PATH = EPISODES_DIR + "/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
#: the shard every non-empty v3 dataset has (read together with the listing that finds the others)
FIRST_SHARD_PATH = DEFAULT_EPISODES_PATH.format(chunk_index=0, file_index=0)
SIDECAR_BRANCH = "lerobot-sidecars"
BUCKET_SIDECAR_DIR = "meta/mp4-sidecars"


def distributed_env() -> tuple[str | None, str | None]:
    """(``RANK``, ``WORLD_SIZE``) environment values, or None when unset (read at call time)."""
    return os.environ.get("RANK"), os.environ.get("WORLD_SIZE")


def malloc_trim_slack_bytes(default_mib: float = 256) -> int:
    """Free heap memory kept resident that makes ``_heap.trim`` trim, bytes:
    ``LEROBOTSTREAM_MALLOC_TRIM_MIB`` MiB (``default_mib`` when unset or not a number); 0 (never
    trim) when ``LEROBOTSTREAM_MALLOC_TRIM`` is off. Read at call time."""
    if env_flag("LEROBOTSTREAM_MALLOC_TRIM") is False:
        return 0
    return max(1, int(env_number("LEROBOTSTREAM_MALLOC_TRIM_MIB", default_mib) * (1 << 20)))


def env_number(name: str, default: float) -> float:
    """Environment variable ``name`` as a finite number >= 0; ``default`` when unset or anything else."""
    try:
        value = float(os.environ.get(name) or default)
    except ValueError:
        return default
    return value if 0 <= value < float("inf") else default


#: seconds after which a start-up step still running (metadata listing, the wait for the first batch)
#: is logged, with how long it took once done
SLOW_START_S = env_number("LEROBOTSTREAM_SLOW_START_S", 3.0)


def show_progress() -> bool:
    """``LEROBOTSTREAM_PROGRESS``: ``1`` shows progress bars (the sidecar build's), ``0`` hides
    them; unset: shown when stderr is a terminal (read at call time)."""
    flag = env_flag("LEROBOTSTREAM_PROGRESS")
    if flag is not None:
        return flag
    import sys

    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def train_trace_path() -> str | None:
    """``LEROBOTSTREAM_TRAIN_TRACE``: when set, ``lerobotstream-train`` appends one JSON line per
    batch (rank, step, episode and frame indices) to ``<value>.rank<R>`` (the resume e2e tests)."""
    return os.environ.get("LEROBOTSTREAM_TRAIN_TRACE") or None


def __getattr__(name: str):
    """``SAMPLING_STRATEGIES`` (tuple of names) and ``SAMPLING_STRATEGY_HELP`` (``'name' (help)``
    for each, joined by commas and a last "or"), from the one table of sampling strategies,
    ``planner._poolcore.STRATEGIES`` (``planner/__init__`` imports nothing: ``options`` reads it at import)."""
    if name not in ("SAMPLING_STRATEGIES", "SAMPLING_STRATEGY_HELP"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from lerobotstream.planner._poolcore import STRATEGIES

    if name == "SAMPLING_STRATEGIES":
        return tuple(STRATEGIES)
    parts = [f"{s.name!r} ({s.help})" for s in STRATEGIES.values()]
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} or {parts[-1]}"
