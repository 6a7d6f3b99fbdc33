"""What a LeRobot 0.6 feature means beyond its dtype: depth maps (and their quantiser), language
columns, tools, the shapes and columns of data rows; stats of several datasets combined. Names and
rules are LeRobot 0.6.1's (``lerobot.datasets.dataset_metadata``, ``language``,
``configs.video.DepthEncoderConfig``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobotstream.constants import INFO_PATH, STATS_PATH
from lerobotstream.errors import MetadataError, Problem

#: LeRobot 0.6.1's language columns (``lerobot.datasets.language.LANGUAGE_COLUMNS``)
LANGUAGE_COLUMNS = ("language_persistent", "language_events")
#: columns every ``data/`` file must have whatever ``info.json`` declares (item assembly reads them:
#: :func:`data_columns_problem`)
REQUIRED_DATA_COLUMNS = ("timestamp", "task_index")
#: depth video pixel formats decoded losslessly (the 12-bit codes, no RGB conversion)
DEPTH_PIX_FMTS = ("gray12le",)
#: LeRobot 0.6.1's fallback tool list (``lerobot.datasets.language.DEFAULT_TOOLS``: the ``say`` tool)
DEFAULT_TOOLS: tuple[dict, ...] = (
    {
        "type": "function",
        "function": {
            "name": "say",
            "description": "Speak a short utterance to the user via the TTS executor.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "The verbatim text to speak."}},
                "required": ["text"],
            },
        },
    },
)


@dataclass(frozen=True)
class DepthQuantizer:
    """LeRobot 0.6.1's depth quantiser parameters (``DepthEncoderConfig``): 12-bit codes
    ``0..4095`` map to ``[depth_min, depth_max]`` metres, in log space (``log(d + shift)``, metres)
    when ``use_log``, else linearly."""

    depth_min: float
    depth_max: float
    shift: float
    use_log: bool


#: the fields of a feature's ``info`` (and of the legacy ``video_info``) lerobotstream reads, with
#: the JSON type LeRobot 0.6.1 writes each as: ``(what it must be, check)``; null is the field absent
INFO_FIELDS: dict[str, tuple[str, Any]] = {
    "is_depth_map": ("true or false", lambda v: isinstance(v, bool)),
    "video.is_depth_map": ("true or false", lambda v: isinstance(v, bool)),
    "video.height": ("a whole number >= 0", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    "video.width": ("a whole number >= 0", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    "video.codec": ("a string", lambda v: isinstance(v, str)),
    "video.pix_fmt": ("a string", lambda v: isinstance(v, str)),
    "depth_unit": ('"mm" or "m"', lambda v: v in ("mm", "m")),
}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def feature_fields_problem(feat: Mapping[str, Any]) -> str | None:
    """Why a feature of ``meta/info.json`` declares a field lerobotstream reads with the wrong JSON
    type, or None: ``names`` null, a list or an object; ``info`` and ``video_info`` null or
    objects, their :data:`INFO_FIELDS` of their types (``"video.height": "abc"``, a string
    ``"video.is_depth_map": "false"``, which LeRobot would read as true). The other functions of
    this module read a feature only after it passed (``DatasetMeta.load`` checks every feature)."""
    names = feat.get("names")
    if names is not None and not isinstance(names, (list, dict)):
        return f"has names {_show(names)}; names must be a list (or an object, or null)"
    for part in ("info", "video_info"):
        fields = feat.get(part)
        if fields is None:
            continue
        if not isinstance(fields, dict):
            return f"has {part} {_show(fields)}; {part} must be an object (or null)"
        for name, (want, ok) in INFO_FIELDS.items():
            value = fields.get(name)
            if value is not None and not ok(value):
                return f"has {part}[{name!r}] = {_show(value)}; it must be {want} (or null)"
    return None


def _info(feat: Mapping[str, Any], part: str = "info") -> Mapping[str, Any]:
    """A feature's ``info`` (or ``video_info``) object; {} when absent (or not an object, which
    :func:`feature_fields_problem` refuses at load)."""
    fields = feat.get(part)
    return fields if isinstance(fields, dict) else {}


def is_depth_feature(feat: Mapping[str, Any]) -> bool:
    """LeRobot 0.6.1's rule: the feature's ``info`` has ``is_depth_map`` (or the legacy
    ``video.is_depth_map`` in ``info`` or ``video_info``) true."""
    info, video_info = _info(feat), _info(feat, "video_info")
    return (
        info.get("is_depth_map") is True
        or info.get("video.is_depth_map") is True
        or video_info.get("video.is_depth_map") is True
    )


def row_shape_matches(declared: Sequence[int], per_row: Sequence[int]) -> bool:
    """Whether rows of shape ``per_row`` fit the feature's ``declared`` shape: equal, no declared
    shape, or a declared ``[1]`` over a scalar column (LeRobot writes scalars either way)."""
    want, got = tuple(int(x) for x in declared or ()), tuple(int(x) for x in per_row)
    return not want or got == want or (want == (1,) and got == ())


def row_off_shape(column: Any, declared: Sequence[int]) -> tuple[int, int, int] | None:
    """In a numeric (nested) list ``column`` (pyarrow, no nulls) whose rows are not all of one
    shape, the first row off the ``declared`` shape, from the list lengths alone (vectorised, per
    nesting level); rows all of one shape are left to :func:`row_shape_matches`.

    Returns:
        ``(row, axis, length)``: the first row whose list along ``axis`` holds ``length`` values
        instead of ``declared[axis]``; None when the rows are all of one shape, or the column is
        not numeric or is nested less deep than ``declared``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    base = column.type
    while pa.types.is_list(base) or pa.types.is_large_list(base) or pa.types.is_fixed_size_list(base):
        base = base.value_type
    if not (pa.types.is_integer(base) or pa.types.is_floating(base) or pa.types.is_boolean(base)):
        return None  # not numeric (language rows, structs, strings): assembly keeps them as they are
    values, per_row = column, 1  # entries of the current level per row
    for axis, size in enumerate(int(x) for x in declared or ()):
        t = values.type
        if pa.types.is_fixed_size_list(t):
            got = int(t.list_size)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            lengths = pc.list_value_length(values)
            lo_hi = pc.min_max(lengths)
            lo, hi = lo_hi["min"].as_py(), lo_hi["max"].as_py()
            if lo != hi:
                lens = np.asarray(lengths.to_numpy(zero_copy_only=False))
                k = int(np.flatnonzero(lens != size)[0])
                return k // per_row, axis, int(lens[k])
            got = int(lo or 0)
        else:
            return None
        values, per_row = pc.list_flatten(values), per_row * got
    return None


def frame_hwc(feat: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(height, width, channels) of an image/video feature's ``shape``: ``[H, W, C]`` as LeRobot
    writes it, or channel-first ``[C, H, W]`` (names start with ``channels``, or only the first
    axis looks like channels); None when the shape is not 3-d."""
    shape = tuple(int(s) for s in (feat.get("shape") or ()))
    if len(shape) != 3:
        return None
    names = feat.get("names")
    names = list(names) if isinstance(names, (list, dict)) else []
    if names[:1] == ["channels"] or (shape[0] in (1, 3, 4) and shape[2] not in (1, 3, 4)):
        return shape[1], shape[2], shape[0]
    return shape


def is_image_column_type(arrow_type: Any) -> bool:
    """Whether a Parquet column of an ``image`` feature has the layout LeRobot writes (HF
    ``datasets.Image``): a struct with a ``bytes`` field (and ``path``)."""
    import pyarrow as pa

    return pa.types.is_struct(arrow_type) and arrow_type.get_field_index("bytes") >= 0


def data_columns_problem(
    names: Iterable[str],
    features: Mapping[str, Mapping[str, Any]] | None,
    *,
    image_keys: Sequence[str] | None = None,
    required: Sequence[str] = REQUIRED_DATA_COLUMNS,
) -> Problem | None:
    """``Problem("data_columns", "the data file lacks the column(s) ['action'] that meta/info.json
    features declare", column="action")`` when the file's column ``names`` lack one of
    ``required`` or of the non-video ``features`` (of the ``image`` ones, only ``image_keys`` when
    given: the cameras read); None otherwise."""
    have = set(names)
    declared = [
        k
        for k, f in (features or {}).items()
        if f.get("dtype") != "video" and (f.get("dtype") != "image" or image_keys is None or k in image_keys)
    ]
    missing = [c for c in dict.fromkeys([*required, *declared]) if c not in have]
    if not missing:
        return None
    whose = " that meta/info.json features declare" if any(c in declared for c in missing) else ""
    return Problem("data_columns", f"the data file lacks the column(s) {few(missing)}{whose}", column=missing[0])


def few(values: Sequence[Any], shown: int = 8) -> str:
    """``values`` as a list for a message: ``['a', 'b']``, or the first ``shown`` and how many more
    (``['a', 'b', ... 49992 more]``), so a message stays one short line whatever the metadata holds."""
    if len(values) <= shown:
        return str(list(values))
    return f"{str(list(values[:shown]))[:-1]}, ... {len(values) - shown} more]"


def scale_stat(value: Any, factor: float) -> Any:
    """A stat value (array, list or number) times ``factor``, keeping its kind (lists stay lists)."""
    if isinstance(value, np.ndarray):
        return value * factor
    if isinstance(value, (list, tuple)):
        return (np.asarray(value, dtype=np.float64) * factor).tolist()
    return float(value) * factor


def depth_quantizer_of(features: Mapping[str, Any], key: str, repo_id: str) -> DepthQuantizer:
    """See :meth:`lerobotstream.meta.DatasetMeta.depth_quantizer`."""
    depth_keys = [k for k, f in features.items() if is_depth_feature(f)]
    feat = features.get(key)
    if feat is None or feat.get("dtype") != "video" or key not in depth_keys:
        raise MetadataError(f"{key!r} is not a depth video feature of {repo_id} (depth keys: {depth_keys})", camera=key)
    info = _info(feat)
    where = f"{repo_id}: depth camera {key!r} (meta/info.json features[{key!r}].info)"
    pix_fmt = info.get("video.pix_fmt")
    if pix_fmt is not None and pix_fmt not in DEPTH_PIX_FMTS:
        raise MetadataError(
            f"{where}: video.pix_fmt={pix_fmt!r} is not supported for depth maps; lerobotstream decodes "
            f"depth video losslessly only as {', '.join(DEPTH_PIX_FMTS)} (LeRobot 0.6's default depth encoder)",
            camera=key,
            path=INFO_PATH,
        )
    params: dict[str, Any] = {}
    for name, default in (("depth_min", 0.01), ("depth_max", 10.0), ("shift", 3.5), ("use_log", True)):
        value = info.get(f"video.{name}")
        params[name] = default if value is None else value
    ok = all(
        isinstance(params[n], (int, float)) and not isinstance(params[n], bool) and np.isfinite(params[n])
        for n in ("depth_min", "depth_max", "shift")
    ) and isinstance(params["use_log"], bool)
    if not ok:
        raise MetadataError(
            f"{where}: quantiser parameters {params} are not numbers (use_log: a bool)", camera=key, path=INFO_PATH
        )
    q = DepthQuantizer(
        float(params["depth_min"]), float(params["depth_max"]), float(params["shift"]), bool(params["use_log"])
    )
    if q.depth_max <= q.depth_min or (q.use_log and q.depth_min + q.shift <= 0):
        raise MetadataError(
            f"{where}: invalid quantiser parameters {params} (need depth_max > depth_min and, "
            "with use_log, depth_min + shift > 0)",
            camera=key,
            path=INFO_PATH,
        )
    return q


def rescale_depth_stats(stats: dict[str, Any], features: Mapping[str, Any], output_unit: str, repo_id: str) -> None:
    """See :meth:`lerobotstream.meta.DatasetMeta.rescale_depth_stats` (``stats`` changed in place)."""
    depth_keys = [k for k, f in features.items() if is_depth_feature(f)]
    missing = [k for k in depth_keys if depth_unit(features, k) is None]
    if missing:
        warnings.warn(
            f"depth feature(s) {missing} of {repo_id} have no recorded 'depth_unit': their depth "
            f"maps and stats are returned as stored, without conversion to {output_unit!r}",
            stacklevel=3,
        )
    for key in depth_keys:
        stored = depth_unit(features, key)
        if stored is None or stored == output_unit or key not in stats:
            continue
        factor = 1000.0 if stored == "m" else 1.0 / 1000.0
        stats[key] = {
            stat: value if stat == "count" else scale_stat(value, factor) for stat, value in stats[key].items()
        }


def depth_unit(features: Mapping[str, Any], key: str) -> str | None:
    """The unit depth feature ``key`` was recorded in (``info["depth_unit"]``: ``"mm"`` / ``"m"``), or None."""
    return _info(features.get(key) or {}).get("depth_unit")


def _stat_array(value: Any, where: str) -> np.ndarray:
    """A ``meta/stats.json`` statistic as float64: a number or a (nested, rectangular) list of
    numbers; anything else (an object, a string, a ragged list, booleans) is a MetadataError
    naming ``where`` (``"meta/stats.json of dataset 1: 'observation.state'/mean"``)."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError, RecursionError) as e:  # ragged lists, huge ints
        raise MetadataError(f"{where} is not a numeric array: {_show(value)} ({e})", path=STATS_PATH) from None
    if arr.dtype.kind not in "iuf":
        raise MetadataError(f"{where} is not a numeric array: {_show(value)}", path=STATS_PATH)
    return arr.astype(np.float64)


def _same_shape(arr: np.ndarray, mean: np.ndarray, where: str) -> None:
    """A statistic combined with the mean (std, a quantile) has the mean's shape (LeRobot's)."""
    if arr.shape != mean.shape:
        raise MetadataError(f"{where} has shape {list(arr.shape)}, the mean {list(mean.shape)}", path=STATS_PATH)


def aggregate_stats(
    stats_list: Sequence[Mapping[str, Mapping[str, Any]]],
    keys: Iterable[str] | None = None,
    names: Sequence[str] | None = None,
) -> dict[str, dict[str, list]]:
    """Stats of several datasets (each a ``meta/stats.json`` dict) combined, as LeRobot's
    ``aggregate_stats``: per feature, ``min``/``max`` elementwise, ``mean`` weighted by ``count``,
    ``std`` by the parallel-variance rule, ``count`` summed, quantiles (``q01``...) count-weighted
    when every dataset has them. ``keys``: features to aggregate (default: the union; a feature is
    aggregated over the datasets that have it). ``names``: how errors name each dataset (default
    ``dataset 0``, ``dataset 1``... in list order).

    Returns:
        ``{feature: {stat: list}}`` (float64 values; ``count`` as int).

    Raises:
        MetadataError: a feature's stats are not an object, a statistic is not a number or a
            (rectangular) list of numbers, a ``count`` is not one number >= 0, the counts of a
            feature sum to 0 (LeRobot's mean would be NaN), a std or quantile is not of its mean's
            shape, or a statistic has different shapes in two datasets (names the dataset, the
            feature and the statistic).
    """
    names = [f"dataset {i}" for i in range(len(stats_list))] if names is None else list(names)
    wanted = sorted({k for s in stats_list for k in s}) if keys is None else list(keys)
    out: dict[str, dict[str, list]] = {}
    for key in wanted:
        parts: list[tuple[str, Mapping[str, Any]]] = []  # (where, the feature's stats) per dataset that has it
        for name, stats in zip(names, stats_list):
            st = stats.get(key)
            if st is not None and not isinstance(st, Mapping):
                raise MetadataError(
                    f"{STATS_PATH} of {name}: {key!r} is {_show(st)}, not an object of statistics", path=STATS_PATH
                )
            if st is not None and all(n in st for n in ("mean", "std", "count")):
                parts.append((f"{STATS_PATH} of {name}: {key!r}", st))
        if not parts:
            continue
        arrays: dict[str, list[np.ndarray]] = {"mean": [], "std": [], "min": [], "max": [], "count": []}
        for where, p in parts:
            for stat in arrays:
                arrays[stat].append(_stat_array(p.get(stat, p["mean"]), f"{where}/{stat}"))
            _same_shape(arrays["std"][-1], arrays["mean"][-1], f"{where}/std")
            count = arrays["count"][-1]
            if count.size != 1 or not np.isfinite(count).all() or float(count.reshape(-1)[0]) < 0:
                raise MetadataError(
                    f"{where}/count is {_show(p['count'])}; it must be one number >= 0 (the frames the stats cover)",
                    path=STATS_PATH,
                )
        stacked: dict[str, np.ndarray] = {}
        for stat in ("mean", "std", "min", "max"):
            shapes = [a.shape for a in arrays[stat]]
            if len(set(shapes)) > 1:
                shown = ", ".join(f"{list(sh)} in {where}" for (where, _), sh in zip(parts, shapes))
                raise MetadataError(
                    f"stats of {key!r} have different shapes in the mixed datasets: {stat} is {shown}", path=STATS_PATH
                )
            stacked[stat] = np.stack(arrays[stat])
        means, var, mins, maxs = stacked["mean"], stacked["std"] ** 2, stacked["min"], stacked["max"]
        counts = np.array([float(c.reshape(-1)[0]) for c in arrays["count"]])
        total = counts.sum()
        if not 0 < total < np.inf:
            raise MetadataError(
                f"stats of {key!r}: its counts sum to {total:g} ({', '.join(f'{w}/count' for w, _ in parts)}), so no mean "
                "or std can be combined (LeRobot's would be NaN); recompute meta/stats.json",
                path=STATS_PATH,
            )
        c = counts.reshape((-1,) + (1,) * (means.ndim - 1))
        mean = (means * c).sum(axis=0) / total
        variance = ((var + (means - mean) ** 2) * c).sum(axis=0) / total
        agg: dict[str, Any] = {
            "min": mins.min(axis=0).tolist(),
            "max": maxs.max(axis=0).tolist(),
            "mean": mean.tolist(),
            "std": np.sqrt(variance).tolist(),
            "count": [int(total)],
        }
        first = parts[0][1]
        for q in [k for k in first if isinstance(k, str) and k.startswith("q") and k[1:].isdigit()]:
            if all(q in p for _, p in parts):
                qs = [_stat_array(p[q], f"{where}/{q}") for where, p in parts]
                for (where, _), a, m in zip(parts, qs, arrays["mean"]):
                    _same_shape(a, m, f"{where}/{q}")
                agg[q] = ((np.stack(qs) * c).sum(axis=0) / total).tolist()
        out[key] = agg
    return out
