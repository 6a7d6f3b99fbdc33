"""The readable report: findings grouped by code (counts, first examples), then the per-camera summary."""

from __future__ import annotations

from collections import defaultdict

from lerobotstream.validate._findings import Report

#: examples printed per code
EXAMPLES_PER_CODE = 3
#: episodes named per finding whose message does not name them (a damaged file's)
EPISODES_PER_FINDING = 12


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


__all__ = ["render", "EXAMPLES_PER_CODE"]
