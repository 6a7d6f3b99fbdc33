"""The report's per-camera side: one summary per camera (codec, resolution, pixel format, GOPs,
B-frames, edit lists, bytes per frame, the largest timestamp error, NVDEC support) from the
files' :class:`~lerobotstream.validate._videos.FileSummary`, and the one finding that is a
property of a camera's writer rather than of one file (``not_faststart``)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np

from lerobotstream.validate._findings import Finding, finding


def _by_camera(summaries: list) -> dict[str, list]:
    by_cam: dict[str, list] = defaultdict(list)
    for s in summaries:
        by_cam[s.camera].append(s)
    return by_cam


def faststart_findings(summaries: list) -> list[Finding]:
    """One warning per camera whose files put ``moov`` after ``mdat`` (a property of the writer,
    not of one file: reported once, with the count)."""
    out = []
    for cam, items in sorted(_by_camera(summaries).items()):
        late = [s.path for s in items if s.faststart is False]
        if late:
            out.append(
                finding(
                    "not_faststart",
                    f"camera {cam}: {len(late)} of {len(items)} MP4 file(s) have the moov "
                    f"box after mdat (first: {late[0]})",
                    camera=cam,
                )
            )
    return out


def distribution(counts: Counter) -> dict[str, Any]:
    """min / median / max and the five most common values of a histogram ``{value: count}``."""
    if not counts:
        return {"min": None, "median": None, "max": None, "most_common": []}
    keys = np.asarray(sorted(counts), dtype=np.int64)
    cum = np.cumsum([counts[int(k)] for k in keys])
    total = int(cum[-1])
    lo, hi = keys[np.searchsorted(cum, (total - 1) // 2 + 1)], keys[np.searchsorted(cum, total // 2 + 1)]
    return {
        "min": int(keys[0]),
        "median": (float(lo) + float(hi)) / 2,
        "max": int(keys[-1]),
        "most_common": [[int(k), int(c)] for k, c in counts.most_common(5)],
    }


def camera_summaries(meta: Any, summaries: list, tolerance_s: float) -> dict[str, dict[str, Any]]:
    """Per video key of ``meta``: the summary docs/validate.md describes (``files``, ``codec``,
    ``resolution``, ``pix_fmt``, ``depth_map``, ``frames``, ``bytes_per_frame``, ``gop_length``,
    ``b_frames``, ``edit_lists``, ``faststart``, ``max_timestamp_error_s`` and
    ``tolerance_margin_s`` in seconds, ``nvdec``: GPU family → ``"nvdec"`` or ``"cpu"``)."""
    from lerobotstream.features import is_depth_feature
    from lerobotstream.validate._codec import nvdec_support

    by_cam = _by_camera(summaries)
    out: dict[str, dict[str, Any]] = {}
    for cam in meta.video_keys:
        items = by_cam.get(cam, [])
        frames = sum(s.frames for s in items)
        nbytes = sum(s.sample_bytes for s in items)
        depth = is_depth_feature(meta.features.get(cam) or {})
        gops: Counter = Counter()
        for s in items:
            gops.update(s.gop_lengths)
        errs = [s.max_error_s for s in items if s.max_error_s is not None]
        nv: dict[str, str] = {}
        for s in items:
            for g, v in nvdec_support(s.fmt, depth_map=depth).items():
                nv[g] = "cpu" if "cpu" in (nv.get(g), v) else v
        out[cam] = {
            "files": len(items),
            "codec": sorted({s.codec for s in items if s.codec}),
            "resolution": sorted({f"{s.width}x{s.height}" for s in items}),
            "pix_fmt": sorted({s.pix_fmt or "unknown" for s in items}),
            "depth_map": depth,
            "frames": frames,
            "bytes_per_frame": round(nbytes / frames, 1) if frames else None,
            "gop_length": distribution(gops),
            "b_frames": sum(1 for s in items if s.reordered),
            "edit_lists": sum(1 for s in items if s.edit_list),
            "faststart": sum(1 for s in items if s.faststart),
            "max_timestamp_error_s": max(errs) if errs else None,
            "tolerance_margin_s": (tolerance_s - max(errs)) if errs else None,
            "nvdec": nv,
        }
    return out
