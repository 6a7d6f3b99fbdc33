"""Construction-time checks of ``StreamingLeRobotDataset`` options: each bad value raises
:class:`~lerobotstream.errors.StreamingConfigError` naming the option, the value and what is
expected, before any file is opened."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from lerobotstream import constants
from lerobotstream.errors import StreamingConfigError

__all__ = ["validate_options", "require", "is_int"]


def require(name: str, value: Any, ok: bool, want: str) -> None:
    """Raise :class:`StreamingConfigError` naming the option and its value unless ``ok``."""
    if not ok:
        raise StreamingConfigError(f"{name} must be {want}, got {value!r}", option=name, value=value)


def is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    """A finite real number that fits a float64 (bools, strings, nan, inf and 10**400 are not)."""
    if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, (bool, np.bool_)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


#: the largest byte budget the C planner can hold (int64 bytes), in GiB
_MAX_BUDGET_GB = float(2**62) / 2**30
_DEVICE_RE = re.compile(r"cpu|cuda(:[0-9]+)?", re.ASCII)


def validate_options(*, byte_budget_gb, episode_pool_size, episodes, delta_timestamps, prefetch_episodes,
                      decode_threads, decoded_queue_size, video_decoder_cache_size, equalize, tolerance_s,
                      sampling_strategy, video_backend, max_num_shards, sidecar_lock_timeout_s, device, flags, seed,
                      batch_size, first_lookahead, num_workers, camera_keys, decode_lookahead, decoded_cache_gb,
                      ffmpeg_threads, read_timeout_s=None, depth_output_unit="mm") -> None:
    """Configuration errors at construction (StreamingConfigError naming the option and value)."""
    require("byte_budget_gb", byte_budget_gb,
             _is_number(byte_budget_gb) and 0 < byte_budget_gb <= _MAX_BUDGET_GB, "a number > 0 (GiB per rank)")
    require("episode_pool_size", episode_pool_size,
             episode_pool_size is None or (is_int(episode_pool_size) and episode_pool_size >= 1), "None or an int >= 1")
    require("prefetch_episodes", prefetch_episodes, is_int(prefetch_episodes) and prefetch_episodes >= 0, "an int >= 0")
    require("decode_threads", decode_threads, is_int(decode_threads) and decode_threads >= 1, "an int >= 1")
    require("decoded_queue_size", decoded_queue_size, is_int(decoded_queue_size) and decoded_queue_size >= 1,
             "an int >= 1")
    require("video_decoder_cache_size", video_decoder_cache_size,
             video_decoder_cache_size is None or (is_int(video_decoder_cache_size) and video_decoder_cache_size >= 1),
             "None or an int >= 1 (open decoders per rank)")
    require("equalize", equalize, equalize in ("none", "drop"), "'none' or 'drop'")
    require("tolerance_s", tolerance_s, _is_number(tolerance_s) and tolerance_s > 0, "a number > 0 (seconds)")
    require("sampling_strategy", sampling_strategy, sampling_strategy in constants.SAMPLING_STRATEGIES,
             f"one of {constants.SAMPLING_STRATEGIES}")
    require("video_backend", video_backend, video_backend in (None, "torchcodec"), "'torchcodec' (or None)")
    require("max_num_shards", max_num_shards, is_int(max_num_shards) and max_num_shards >= 1, "an int >= 1")
    require("sidecar_lock_timeout_s", sidecar_lock_timeout_s,
             _is_number(sidecar_lock_timeout_s) and sidecar_lock_timeout_s > 0, "a number > 0 (seconds)")
    require("read_timeout_s", read_timeout_s, read_timeout_s is None or (_is_number(read_timeout_s) and read_timeout_s > 0),
             "a number > 0 (seconds one read may take, retries included)")
    require("device", device, device is None or (isinstance(device, str) and bool(_DEVICE_RE.fullmatch(device))),
             "'cpu', 'cuda' or 'cuda:N' (or a torch.device)")
    for flag, value in flags.items():
        require(flag, value, isinstance(value, (bool, np.bool_)), "True or False")
    require("seed", seed, seed is None or is_int(seed), "None or an int")
    require("batch_size", batch_size, batch_size is None or (is_int(batch_size) and batch_size >= 1),
             "None or an int >= 1 (the DataLoader's batch size)")
    require("first_lookahead", first_lookahead,
             first_lookahead is None or (is_int(first_lookahead) and first_lookahead >= 1), "None or an int >= 1")
    require("num_workers", num_workers, num_workers is None or (is_int(num_workers) and num_workers >= 0),
             "None or an int >= 0 (the DataLoader's num_workers)")
    require("camera_keys", camera_keys, camera_keys is None or (
        not isinstance(camera_keys, (str, bytes)) and all(isinstance(k, str) for k in camera_keys)),
             "None or a list of camera keys (video or image features)")
    require("depth_output_unit", depth_output_unit, depth_output_unit in ("mm", "m"),
             "'mm' or 'm' (the unit depth maps and depth stats are returned in)")
    require("decode_lookahead", decode_lookahead, is_int(decode_lookahead) and decode_lookahead >= 1,
             "an int >= 1 (anchors per decode chunk)")
    require("decoded_cache_gb", decoded_cache_gb, _is_number(decoded_cache_gb) and decoded_cache_gb >= 0,
             "a number >= 0 (GiB per rank)")
    require("ffmpeg_threads", ffmpeg_threads, is_int(ffmpeg_threads) and ffmpeg_threads >= 0,
             "an int >= 0 (0: FFmpeg chooses)")
    if episodes is not None:
        try:
            eps = list(episodes)
        except TypeError:
            eps = None
        require("episodes", episodes, eps is not None and len(eps) > 0 and all(is_int(e) and e >= 0 for e in eps),
                 "None (all episodes) or a non-empty sequence of episode indices >= 0")
    if delta_timestamps is not None:
        require("delta_timestamps", delta_timestamps, isinstance(delta_timestamps, dict),
                 "a dict {feature: [offset seconds, ...]}")
        for key, offs in delta_timestamps.items():
            require(f"delta_timestamps[{key!r}]", offs,
                     isinstance(offs, (list, tuple, np.ndarray)) and len(offs) > 0 and all(_is_number(d) for d in offs),
                     "a non-empty list of numbers (offsets in seconds)")
