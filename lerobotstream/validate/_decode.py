"""``--decode-sample N``: decode N frames per MP4 at random and check they are what the
timestamps promise (the frame at the table's presentation time, of info.json's shape).

Each frame goes the training path: ``plan_span`` → the span's bytes → ``check_sample_framing`` →
``synthesize`` → ``EpisodeDecoder`` (which checks every returned PTS against the sample table)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from lerobotstream.validate._findings import Finding, finding
from lerobotstream.validate._tables import frame_hwc


def decode_sample(source: Any, path: str, camera: str, table: Any, windows: Sequence[Any], meta: Any,
                  n: int, seed: int | Sequence[int]) -> tuple[list[Finding], int]:
    """Findings of ``n`` sampled frames of one file, and how many frames were decoded.

    Frames are drawn (seeded by ``seed``) from the windows' episodes, uniformly over frames.
    """
    from lerobotstream.decode import EpisodeDecoder
    from lerobotstream.mp4 import check_sample_framing, plan_span, synthesize
    from lerobotstream.sidecar import check_window_detail

    picks: list[tuple[int, int]] = []  # (episode, source frame)
    for w in windows:
        res = check_window_detail(table, w.from_timestamp, w.length, float(meta.fps), 1e9)
        if res.first_frame is not None:
            picks.extend((w.episode_index, res.first_frame + i) for i in range(w.length))
    num = int(np.asarray(table.presentation_order).shape[0])
    if not picks:
        picks = [(-1, k) for k in range(num)]
    picks = [p for p in picks if 0 <= p[1] < num]
    if not picks:
        return [], 0
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(len(picks), size=min(n, len(picks)), replace=False).tolist())
    hwc = frame_hwc(meta.features.get(camera) or {})
    out: list[Finding] = []
    done = 0
    for j in chosen:
        ep, k = picks[j]
        epi = None if ep < 0 else ep
        try:
            span = plan_span(table, k, k + 1)
            payload = source.read(path, span.byte_start, span.byte_stop - span.byte_start)
            check_sample_framing(table, span, payload, path=path)
            mini = synthesize(table, span, payload)
            dec = EpisodeDecoder(mini, span, codec=str(table.codec), device="cpu",
                                 label=f"episode {epi}, camera {camera}, file {path}")
            try:
                frame = dec.decode([int(span.first_local_frame)])
            finally:
                dec.close()
            done += 1
        except Exception as e:  # noqa: BLE001 - every failure is this file's finding
            out.append(finding("decode_failed", f"{path}: frame {k} (episode {epi}): {type(e).__name__}: "
                               f"{' '.join(str(e).split())[:300]}", episode_index=epi, camera=camera, file=path))
            break  # one finding per file: the next frames would fail the same way
        if hwc is not None:
            _, c, h, w = (int(x) for x in frame.shape)
            if (h, w) != hwc[:2]:
                out.append(finding("decode_shape", f"{path}: frame {k} decodes to {c}x{h}x{w} (CxHxW), info.json's "
                                   f"shape for {camera} is {list(meta.features[camera]['shape'])}", episode_index=epi,
                                   camera=camera, file=path))
                break
    return out, done
