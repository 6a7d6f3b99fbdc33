"""``meta/info.json`` of a LeRobot v3 dataset, every value checked before anything uses it.

A dataset is untrusted input: each value the reader uses is checked for its type, its range and,
for what becomes a path, the path rule of :mod:`lerobotstream.sources._paths`, and every problem
is a :class:`~lerobotstream.errors.MetadataError` naming the file and the field (``field=``):

- ``fps``: a whole number of frames per second in ``(0, MAX_FPS]``;
- ``total_episodes`` / ``total_frames`` (optional): whole numbers in ``[0, MAX_TOTAL_*]``;
- ``features``: an object of objects, each with a string ``dtype``; a ``shape`` is a list of at
  most ``MAX_SHAPE_DIMS`` whole numbers ``>= 0`` holding at most ``MAX_FEATURE_ELEMENTS`` values;
  a video key is also a path (it is formatted into ``video_path``);
- ``data_path`` / ``video_path``: format templates using only the fields the reader fills
  (:data:`DATA_PATH_FIELDS`, :data:`VIDEO_PATH_FIELDS`), integer fields with at most a
  ``MAX_TEMPLATE_WIDTH``-digit width, and making paths that keep to the path rule;
- ``repo_id`` (optional): a path too (it names the dataset's sidecar cache folder);
- ``splits`` (optional): an object; ``tools`` (optional): a list of objects.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Sequence
from typing import Any

from lerobotstream._meta_files import _parse_json, _read_bytes, _where
from lerobotstream.constants import INFO_PATH
from lerobotstream.errors import MetadataError, UnsupportedDatasetVersionError
from lerobotstream.sources._paths import MAX_PATH_CHARS, path_problem
from lerobotstream.sources._prefetch import PrefetchedReads

#: highest ``fps`` accepted (high-speed cameras record at a few thousand)
MAX_FPS = 10_000
#: highest ``total_episodes`` accepted
MAX_TOTAL_EPISODES = 10**9
#: highest ``total_frames`` accepted
MAX_TOTAL_FRAMES = 10**12
#: most dimensions of a feature's ``shape``
MAX_SHAPE_DIMS = 8
#: most values in one frame of one feature (the product of its ``shape``)
MAX_FEATURE_ELEMENTS = 1 << 28
#: widest zero-padded integer field in a path template (``{chunk_index:03d}`` has width 3)
MAX_TEMPLATE_WIDTH = 20
#: the fields the reader fills in ``data_path``
DATA_PATH_FIELDS = ("chunk_index", "file_index")
#: the fields the reader fills in ``video_path``
VIDEO_PATH_FIELDS = ("video_key", "chunk_index", "file_index")

CONVERT_HINT = (
    "Convert it to v3.0 first with LeRobot's converter: "
    "`python -m lerobot.scripts.convert_dataset_v21_to_v30 --repo-id=<repo_id>` "
    "(add `--root=<dataset folder> --push-to-hub=false` for a local copy; "
    "LeRobot 0.4.x: `python -m lerobot.datasets.v30.convert_dataset_v21_to_v30`)"
)

_INT_SPEC = re.compile(r"0?([0-9]{0,3})d?")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def template_problem(template: object, fields: Sequence[str]) -> str | None:
    """Why ``template`` is not a path template the reader can fill, or None.

    A template is a string of at most ``MAX_PATH_CHARS`` characters whose replacement fields are
    among ``fields``, without conversion (``!r``); ``video_key`` takes no format spec, the integer
    fields at most a zero-padded width (``03d``) of ``MAX_TEMPLATE_WIDTH``; filled in, it makes a
    path that keeps to the path rule.
    """
    if not isinstance(template, str):
        return f"is a {type(template).__name__}, not a string"
    if len(template) > MAX_PATH_CHARS:
        return f"has {len(template)} characters (at most {MAX_PATH_CHARS})"
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        return f"is not a format template ({e})"
    for _literal, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in fields:
            return f"has the field {{{name}}}; it may use only {', '.join('{' + f + '}' for f in fields)}"
        if conversion:
            return f"converts the field {{{name}}} with !{conversion}"
        if name == "video_key":
            if spec:
                return f"formats {{video_key}} with {spec!r}"
            continue
        m = _INT_SPEC.fullmatch(spec or "")
        if m is None or int(m.group(1) or 0) > MAX_TEMPLATE_WIDTH:
            return (
                f"formats {{{name}}} with {spec!r}; an integer field takes at most a zero-padded width of "
                f"{MAX_TEMPLATE_WIDTH} (such as {{{name}:03d}})"
            )
    path = template.format(**{f: ("key" if f == "video_key" else 0) for f in fields})
    why = path_problem(path)
    return None if why is None else f"makes paths such as {_show(path)}, which {why}"


def _count_problem(value: Any, top: int) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be a whole number, got {_show(value)}"
    if not 0 <= value <= top:
        return f"must be in [0, {top}], got {value}"
    return None


def _feature_problem(key: str, feat: Any) -> str | None:
    if not isinstance(feat, dict) or "dtype" not in feat:
        return "has no dtype"
    if not isinstance(feat["dtype"], str):
        return f"has the dtype {_show(feat['dtype'])}, not a string"
    shape = feat.get("shape")
    if shape is None:
        return None
    if not isinstance(shape, (list, tuple)) or len(shape) > MAX_SHAPE_DIMS:
        return f"has the shape {_show(shape)}; a shape is a list of at most {MAX_SHAPE_DIMS} whole numbers"
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        return f"has the shape {_show(shape)}; its sizes must be whole numbers >= 0"
    if math.prod(shape) > MAX_FEATURE_ELEMENTS:
        return f"has the shape {_show(shape)}, more than {MAX_FEATURE_ELEMENTS} values per frame"
    if feat["dtype"] == "video":
        why = path_problem(key)
        if why is not None:
            return f"is a video key, which names its video folder, and it {why}"
    return None


def info_problem(info: dict[str, Any]) -> tuple[str, str] | None:
    """The first problem of a parsed ``info.json`` object as ``(field, why)``, or None.

    ``field`` names the key (``"fps"``, ``"features.observation.images.top"``, ``"data_path"``);
    ``why`` completes a sentence starting with it.
    """
    for key in ("fps", "features", "data_path"):
        if key not in info:
            return key, "is missing"
    fps = info["fps"]
    if (
        isinstance(fps, bool)
        or not isinstance(fps, (int, float))
        or not math.isfinite(fps)
        or fps != int(fps)
        or not 0 < fps <= MAX_FPS
    ):
        return "fps", f"must be a positive integer (frames per second, at most {MAX_FPS}), got {_show(fps)}"
    for key, top in (("total_episodes", MAX_TOTAL_EPISODES), ("total_frames", MAX_TOTAL_FRAMES)):
        if info.get(key) is not None:
            why = _count_problem(info[key], top)
            if why is not None:
                return key, why
    features = info["features"]
    if not isinstance(features, dict):
        return "features", "must be an object"
    for key, feat in features.items():
        why = _feature_problem(key, feat)
        if why is not None:
            return f"features.{key}", why
    why = template_problem(info["data_path"], DATA_PATH_FIELDS)
    if why is not None:
        return "data_path", why
    video_keys = [k for k, f in features.items() if f["dtype"] == "video"]
    video_tpl = info.get("video_path")
    if video_keys and not video_tpl:
        return "video_path", "is missing, but the dataset has video features"
    if video_tpl is not None:
        why = template_problem(video_tpl, VIDEO_PATH_FIELDS)
        if why is not None:
            return "video_path", why
        for key in video_keys:  # a key and the template's text around it make one path
            path = video_tpl.format(video_key=key, chunk_index=0, file_index=0)
            why = path_problem(path)
            if why is not None:
                return "video_path", f"makes the path {_show(path)} for the video key {_show(key)}, which {why}"
    repo_id = info.get("repo_id")
    if repo_id is not None:
        why = path_problem(repo_id)
        if why is not None:
            return "repo_id", f"names the dataset's cache folder, and it {why}"
    if info.get("splits") is not None and not isinstance(info["splits"], dict):
        return "splits", f"must be an object, got {_show(info['splits'])}"
    tools = info.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        return "tools", f"must be a list of objects, got {_show(tools)}"
    return None


def _load_info(src: PrefetchedReads) -> dict[str, Any]:
    """``meta/info.json``, parsed and checked (:func:`info_problem`); feature shapes become tuples.

    Raises:
        UnsupportedDatasetVersionError: ``codebase_version`` is not v3.x.
        MetadataError: the file is missing, not a JSON object, or a value is wrong (names the
            file and the field, ``field=``).
    """
    info = _parse_json(src, INFO_PATH, _read_bytes(src, INFO_PATH, what=INFO_PATH))
    if not isinstance(info, dict):
        raise MetadataError(f"{_where(src, INFO_PATH)} must hold a JSON object", path=INFO_PATH)
    version = info.get("codebase_version", "")
    version = version if isinstance(version, str) else _show(version)
    if not version.startswith("v3"):
        raise UnsupportedDatasetVersionError(
            f"{_where(src, INFO_PATH)}: codebase_version {version or '(missing)'!r} is not supported; "
            f"lerobotstream reads LeRobotDataset v3.x only. {CONVERT_HINT}",
            path=INFO_PATH,
            codebase_version=version,
        )
    problem = info_problem(info)
    if problem is not None:
        field, why = problem
        raise MetadataError(f"{_where(src, INFO_PATH)}: {field} {why}", path=INFO_PATH, field=field)
    for feat in info["features"].values():
        if isinstance(feat.get("shape"), list):
            feat["shape"] = tuple(feat["shape"])
    return info
