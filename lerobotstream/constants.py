"""Environment configuration and defaults, read once at import.

Every ``os.environ`` lookup of the library lives here.

| variable | default | meaning |
|---|---|---|
| ``HF_LEROBOT_HOME`` | ``$HF_HOME/lerobot`` (``~/.cache/huggingface/lerobot``) | local cache root (sidecars, indexes) |
| ``LEROBOTSTREAM_INDEX_DIR`` | ``$HF_LEROBOT_HOME/streaming-indexes`` | derived memory-mapped indexes |
| ``LEROBOTSTREAM_SIDECAR_DIR`` | ``$HF_LEROBOT_HOME/streaming-sidecars`` | revision-keyed sidecar cache |
| ``LEROBOTSTREAM_DEBUG`` | unset | CLIs print tracebacks instead of a one-line error |
"""

from __future__ import annotations

import os
from pathlib import Path


def _as_float(value: str | None, default: float) -> float:
    if value is None or value == "":
        return default
    return float(value)


HF_HOME = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")).expanduser()
HF_LEROBOT_HOME = Path(os.environ.get("HF_LEROBOT_HOME", HF_HOME / "lerobot")).expanduser()
INDEX_DIR = Path(os.environ.get("LEROBOTSTREAM_INDEX_DIR", HF_LEROBOT_HOME / "streaming-indexes")).expanduser()
SIDECAR_DIR = Path(os.environ.get("LEROBOTSTREAM_SIDECAR_DIR", HF_LEROBOT_HOME / "streaming-sidecars")).expanduser()


def debug_enabled() -> bool:
    """``LEROBOTSTREAM_DEBUG`` set to a true value: CLIs print full tracebacks instead of one line
    (read at call time)."""
    return os.environ.get("LEROBOTSTREAM_DEBUG", "").strip().lower() in {"1", "true", "yes", "on"}


# --- defaults of the streaming options (lerobotstream.options.StreamOptions) -------------------------
DEFAULT_SEED = 1000
SEED_WHEN_NONE = 42
DEFAULT_EPISODE_POOL_SIZE_PER_RANK = 32
#: episodes mixed at once in one canonical partition (``partitions``): 32 per rank over LeRobot's 4 workers
DEFAULT_PARTITION_POOL_SIZE = 8
DEFAULT_PREFETCH_EPISODES = 8
DEFAULT_BYTE_BUDGET_GB = 8.0
DEFAULT_DECODE_THREADS = 2
DEFAULT_DECODED_QUEUE_SIZE = 8
DEFAULT_SIDECAR_LOCK_TIMEOUT_S = 1800.0
DEFAULT_TOLERANCE_S = 1e-4
DEFAULT_SAMPLING_STRATEGY = "remaining"
DEFAULT_READ_TIMEOUT_S = 120.0  # one read from an HTTP(S)/Hub/bucket store, retries included
DEFAULT_DECODE_LOOKAHEAD = 64
DEFAULT_DECODED_CACHE_GB = 1.0
#: node-local payload disk cache bound (``cache_limit_gb``), GiB
DEFAULT_CACHE_LIMIT_GB = 50.0
DEFAULT_FFMPEG_THREADS = 1
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


#: seconds after which a start-up step still running (metadata listing, the wait for the first batch)
#: is logged, with how long it took once done
SLOW_START_S = _as_float(os.environ.get("LEROBOTSTREAM_SLOW_START_S"), 3.0)


def show_progress() -> bool:
    """``LEROBOTSTREAM_PROGRESS``: ``1`` shows progress bars (the sidecar build's), ``0`` hides
    them; unset: shown when stderr is a terminal (read at call time)."""
    value = os.environ.get("LEROBOTSTREAM_PROGRESS", "").strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    import sys

    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def train_trace_path() -> str | None:
    """``LEROBOTSTREAM_TRAIN_TRACE``: when set, ``lerobotstream-train`` appends one JSON line per
    batch (rank, step, episode and frame indices) to ``<value>.rank<R>`` (the resume e2e tests)."""
    return os.environ.get("LEROBOTSTREAM_TRAIN_TRACE") or None


def _strategy_table() -> dict:
    """``planner._poolcore.STRATEGIES`` (name -> ``StrategyInfo``), the one table of sampling
    strategies. ``options`` reads it at import and the planner package imports ``options``: when
    the package is not imported yet, the extension module is loaded alone (an extension module is
    initialised once per process, so the package's own import later gets the same module)."""
    import importlib
    import importlib.machinery
    import importlib.util
    import sys

    full = "lerobotstream.planner._poolcore"
    mod = sys.modules.get(full)
    if mod is None and "lerobotstream.planner" not in sys.modules:
        spec = importlib.machinery.PathFinder.find_spec(full, [str(Path(__file__).resolve().parent / "planner")])
        if spec is not None and spec.loader is not None:
            mod = importlib.util.module_from_spec(spec)
            sys.modules[full] = mod
            try:
                spec.loader.exec_module(mod)
            finally:  # the package's own import registers it (and sets the package's attribute)
                del sys.modules[full]
    if mod is None:
        mod = importlib.import_module(full)  # not built: ExtensionBuildError says what to do
    return mod.STRATEGIES


def __getattr__(name: str):
    """``SAMPLING_STRATEGIES`` (tuple of names) and ``SAMPLING_STRATEGY_HELP`` (``'name' (help)``
    for each, joined by commas and a last "or"), from the strategy table (:func:`_strategy_table`)."""
    if name == "SAMPLING_STRATEGIES":
        return tuple(_strategy_table())
    if name == "SAMPLING_STRATEGY_HELP":
        parts = [f"{s.name!r} ({s.help})" for s in _strategy_table().values()]
        return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} or {parts[-1]}"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
