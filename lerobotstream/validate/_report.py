"""The report's per-camera side and its text.

Per camera, from the files' :class:`~lerobotstream.validate._videos.FileSummary`: codec,
resolution, pixel format, GOPs, B-frames, edit lists, bytes per frame, the largest timestamp error,
NVDEC support, and the one finding that is a property of a camera's writer rather than of one file
(``not_faststart``). The text: findings grouped by code (counts, first examples), then the cameras.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np

from lerobotstream.validate._findings import Finding, Report, finding

#: examples printed per code
EXAMPLES_PER_CODE = 3
#: episodes named per finding whose message does not name them (a damaged file's)
EPISODES_PER_FINDING = 12


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
            "codec": sorted({s.fmt.codec for s in items if s.fmt.codec}),
            "resolution": sorted({f"{s.width}x{s.height}" for s in items}),
            "pix_fmt": sorted({s.fmt.pix_fmt or "unknown" for s in items}),
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


def _episodes(f) -> str:
    """`` (episodes 0, 1, 2)`` for a finding whose message names no episode (a file's defect: every
    episode in the file), so the text report says what training would lose; "" otherwise."""
    eps = list(f.episodes or [])
    if not eps or "episode" in f.message:
        return ""
    shown = ", ".join(str(e) for e in eps[:EPISODES_PER_FINDING])
    more = f", ... {len(eps) - EPISODES_PER_FINDING} more" if len(eps) > EPISODES_PER_FINDING else ""
    return f" (episode{'s' if len(eps) > 1 else ''} {shown}{more})"


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def render(report: Report, *, examples: int = EXAMPLES_PER_CODE) -> str:
    """The report as text (one finding message per line; no line depends on the terminal)."""
    d = report.dataset
    lines = [
        f"dataset  {d.get('repo_id')}  root={d.get('root')}"
        + (f"  revision={d['revision']}" if d.get("revision") else ""),
        f"         fps={d.get('fps')}  episodes checked {d.get('episodes_checked')}/{d.get('total_episodes')}  "
        f"frames {d.get('frames_checked')}  tolerance_s={d.get('tolerance_s')}",
    ]
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for f in report.findings:
        groups[(f.severity, f.code)].append(f)
    lines.append("")
    if not report.findings:
        lines.append("no findings")
    for (severity, code), items in sorted(groups.items(), key=lambda kv: (kv[0][0] != "error", -len(kv[1]), kv[0][1])):
        lines.append(f"{severity.upper():7s} {code}  ({len(items)})")
        for f in items[:examples]:
            lines.append(f"  - {f.message}{_episodes(f)}")
        if len(items) > examples:
            lines.append(f"  ... and {len(items) - examples} more (--json lists all)")
    lines.append("")
    for cam, c in report.cameras.items():
        lines.append(f"camera {cam}{'  (depth map)' if c.get('depth_map') else ''}")
        g = c["gop_length"]
        gop = f"min {g['min']} / median {g['median']:g} / max {g['max']}" if g["min"] is not None else "n/a"
        bpf = c.get("bytes_per_frame")
        lines.append(
            f"  {c['files']} file(s), {c['frames']} frames; codec {', '.join(c['codec']) or '?'}; "
            f"{', '.join(c['resolution']) or '?'}; pix_fmt {', '.join(c['pix_fmt']) or '?'}"
        )
        lines.append(
            f"  GOP length {gop}; B-frames in {c['b_frames']} file(s); edit lists in {c['edit_lists']}; "
            f"faststart {c['faststart']}/{c['files']}; {_human_bytes(bpf) if bpf else '?'} per frame"
        )
        err = c.get("max_timestamp_error_s")
        if err is not None:
            lines.append(
                f"  largest timestamp error {err:.3g} s (margin {c['tolerance_margin_s']:.3g} s under tolerance_s)"
            )
        nv = c.get("nvdec") or {}
        if nv:
            lines.append(
                "  decode: with device=cuda, by GPU family (NVDEC: on the GPU; CPU: that GPU's decoder lacks this "
                "codec or profile, frames decode on the CPU): "
                + "; ".join(f"{g_} {'NVDEC' if v == 'nvdec' else 'CPU'}" for g_, v in nv.items())
            )
    s = report.scan
    lines.append("")
    lines.append(
        f"scanned {s.get('video_files')} MP4 and {s.get('data_files')} Parquet file(s): {s.get('requests')} "
        f"request(s), {_human_bytes(s.get('bytes_read') or 0)} read in {s.get('elapsed_s')} s"
        + (f", {s['decoded_frames']} frame(s) decoded" if s.get("decoded_frames") else "")
    )
    lines.append(f"{len(report.errors)} error(s), {len(report.warnings)} warning(s)")
    return "\n".join(lines)
