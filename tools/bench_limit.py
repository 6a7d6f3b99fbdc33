"""The raw sequential decode limit: every video file of a dataset decoded front to back with
torchcodec in 16-frame calls, nothing else, measured in each round on each dataset.

Three variants (:data:`LIMITS`): FFmpeg's own threads (``num_ffmpeg_threads=0``), one
single-threaded decoder per usable CPU, each on its share of every file (the limit is the faster
of the two in each round: the whole machine either way; FFmpeg's AV1 decoder barely threads on
640x480), and one thread (whose CPU time per frame prices the decode share of every contestant's
CPU). :func:`decode_limit` runs inside a contestant process (``tools/bench_trial.py``; standard
library at module level), :func:`run_limits` in the orchestrator.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

__all__ = ["LIMITS", "best_limit", "decode_limit", "run_limits", "usable_cpus"]


def decode_limit(spec: dict) -> dict:
    """Sequential decode of the video files (16-frame calls, up to ``max_frames``), by
    ``decoders`` decoders at once (threads: torchcodec's decode releases the GIL), each on
    ``ffmpeg_threads`` FFmpeg threads (0 = FFmpeg's choice): ``decoders=1, ffmpeg_threads=0`` is
    FFmpeg's own threading, ``decoders=<CPUs>, ffmpeg_threads=1`` one decoder per core (each
    decodes a contiguous share of every file, from a seek)."""
    from torchcodec.decoders import VideoDecoder

    cap, parts, thr = (
        int(spec.get("max_frames") or 0),
        max(1, int(spec.get("decoders") or 1)),
        int(spec["ffmpeg_threads"]),
    )
    lengths, left = [], cap or None
    for p in spec["files"]:  # how many frames of each file the cap takes, front to back
        n = len(VideoDecoder(p, seek_mode="approximate"))
        n = n if left is None else min(n, left)
        if n <= 0:
            break
        lengths.append((p, n))
        if left is not None:
            left -= n
    work = [[(p, n * i // parts, n * (i + 1) // parts) for p, n in lengths] for i in range(parts)]
    counts = [0] * parts

    def run(i: int) -> None:
        for p, a, b in work[i]:
            if a >= b:
                continue
            d = VideoDecoder(p, seek_mode="approximate", num_ffmpeg_threads=thr)
            for j in range(a, b, 16):
                counts[i] += int(d.get_frames_in_range(j, min(j + 16, b)).data.shape[0])
            del d

    c0, t0 = os.times(), time.perf_counter()
    if parts == 1:
        run(0)
    else:
        ts = [threading.Thread(target=run, args=(i,)) for i in range(parts)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    wall = time.perf_counter() - t0
    c1 = os.times()
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    frames = sum(counts)
    return {
        "frames": frames,
        "wall_s": wall,
        "frames_per_s": frames / wall if wall > 0 else None,
        "cpu_ms_per_frame": 1e3 * cpu / frames if frames else None,
        "decoders": parts,
        "ffmpeg_threads": thr,
        "cpu_per_wall": cpu / wall if wall > 0 else None,
    }


#: the decode limit's variants: label -> (decoders, FFmpeg threads per decoder); ``None``
#: decoders = the usable CPUs. The limit is the faster of ``limit-ffmpeg`` and ``limit-cores``
#: per round (the whole machine either way); ``limit-1thread``'s CPU per frame prices decode.
LIMITS = {"limit-ffmpeg": (1, 0), "limit-cores": (None, 1), "limit-1thread": (1, 1)}


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def run_limits(side, root: Path, facts, dataset: str, rnd: int, samples: int, timeout_s: float) -> list[dict]:
    """One round of every :data:`LIMITS` variant on ``dataset`` (files under ``root``), as trial rows."""
    from tools.bench_common import fmt, load_average

    out = []
    for label, (decoders, thr) in LIMITS.items():
        spec = {
            "kind": "limit",
            "files": [str(root / p) for p in facts.video_files],
            "ffmpeg_threads": thr,
            "decoders": decoders or usable_cpus(),
            "max_frames": 2 * samples * len(facts.video_keys),
        }
        la = load_average()
        r = side.call(spec, timeout_s)
        r.update(round=rnd, dataset=dataset, contestant=label, load_before=la, load_after=load_average())
        out.append(r)
        print(
            f"round {rnd} {dataset:<9} {label} ({r.get('decoders')} decoder(s) x {thr or 'FFmpeg'} thread(s)): "
            f"{fmt(r.get('frames_per_s'))} frames/s, {fmt(r.get('cpu_ms_per_frame'), '.2f')} CPU ms/frame",
            file=sys.stderr,
            flush=True,
        )
    return out


def best_limit(by_label: dict[str, dict | None]) -> float | None:
    """frames/s of the faster whole-machine limit (``limit-ffmpeg`` or ``limit-cores``) of one round."""
    xs = [(by_label.get(k) or {}).get("frames_per_s") for k in ("limit-ffmpeg", "limit-cores")]
    xs = [x for x in xs if x]
    return max(xs) if xs else None
