"""``--decode-sample N``: decode N frames per MP4, and N images per data file of a dataset with
``image`` features, at random, the training way, and check they are what the metadata promises.

A video frame goes the training path: ``plan_span`` → the span's bytes → ``check_sample_framing``
→ ``synthesize`` → ``EpisodeVideo.frames_at`` (the episode's frame ``i`` at ``from_timestamp +
i / fps``; torchcodec, or PyAV's 12-bit decoder for a depth camera; every returned PTS checked
against the sample table). An image cell goes ``image_bytes`` → ``decode_image`` (Pillow, the
declared shape checked), as item assembly does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lerobotstream.validate._findings import Finding, finding


def decode_sample(
    source: Any,
    path: str,
    camera: str,
    table: Any,
    windows: Sequence[Any],
    meta: Any,
    n: int,
    seed: int | Sequence[int],
) -> tuple[list[Finding], int]:
    """Findings of ``n`` sampled frames of one file, and how many frames were decoded.

    Frames are drawn (seeded by ``seed``) from the windows' episodes, uniformly over frames.
    """
    from lerobotstream.decode._decoder import EpisodeVideo
    from lerobotstream.features import frame_hwc, is_depth_feature
    from lerobotstream.mp4.framing import check_sample_framing
    from lerobotstream.mp4.spans import plan_span
    from lerobotstream.mp4.synth import synthesize
    from lerobotstream.sidecar._validate import check_window_detail

    picks: list[tuple[int, int, float, int]] = []  # (episode, source frame, from_timestamp, episode frame)
    for w in windows:
        res = check_window_detail(table, w.from_timestamp, w.length, float(meta.fps), 1e9)
        if res.first_frame is not None:
            picks.extend((w.episode_index, res.first_frame + i, float(w.from_timestamp), i) for i in range(w.length))
    num = int(np.asarray(table.presentation_order).shape[0])
    if not picks:
        pts = np.asarray(table.pts_s, dtype=np.float64)[np.asarray(table.presentation_order, dtype=np.int64)]
        picks = [(-1, k, float(pts[k]), 0) for k in range(num)]
    picks = [p for p in picks if 0 <= p[1] < num]
    if not picks:
        return [], 0
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(len(picks), size=min(n, len(picks)), replace=False).tolist())
    feat = meta.features.get(camera) or {}
    hwc, depth = frame_hwc(feat), is_depth_feature(feat)
    done = 0
    for j in chosen:
        ep, k, from_ts, i = picks[j]
        epi = None if ep < 0 else ep
        where = dict(episode_index=epi, camera=camera, file=path)
        try:
            span = plan_span(table, k, k + 1, path=path)
            payload = source.read(path, span.byte_start, span.byte_stop - span.byte_start)
            check_sample_framing(table, span, payload, path=path)
            mini = synthesize(table, span, payload)
            kw = dict(episode_index=ep, camera=camera, path=path, from_timestamp=from_ts, fps=meta.fps, depth=depth)
            video = EpisodeVideo(table, span, mini, device="cpu", **kw)
            try:
                frame = video.frames_at([i])
            finally:
                video.close()
            done += 1
        except Exception as e:  # noqa: BLE001 - every failure is this file's finding; the next frames would fail alike
            text = f"{path}: frame {k} (episode {epi}): {type(e).__name__}: {' '.join(str(e).split())[:300]}"
            return [finding("decode_failed", text, **where)], done
        if hwc is not None:
            _, c, h, w = (int(x) for x in frame.shape)
            if (h, w) != hwc[:2]:
                text = f"{path}: frame {k} decodes to {c}x{h}x{w} (CxHxW), info.json's shape for {camera} is {list(feat['shape'])}"
                return [finding("decode_shape", text, **where)], done
    return [], done


def image_sample(
    reader: Any, path: str, episodes: Sequence[Any], meta: Any, n: int, seed: int | Sequence[int]
) -> tuple[list[Finding], int]:
    """Findings of ``n`` sampled cells of each ``image`` feature of one data file (one finding per
    feature at most), and how many images were decoded.

    Cells are drawn (seeded) uniformly over the frames of ``episodes``; the sampled episodes' row
    groups are read with that feature's column (images are embedded: this reads their bytes).
    """
    from lerobotstream.dataset._images import declared_chw, decode_image, image_bytes

    keys = [k for k, f in meta.features.items() if f.get("dtype") == "image"]
    frames = [(int(e.episode_index), i) for e in episodes for i in range(int(e.length))]
    if not keys or not frames or n <= 0:
        return [], 0
    rng = np.random.default_rng(seed)
    chosen = [frames[j] for j in sorted(rng.choice(len(frames), size=min(n, len(frames)), replace=False).tolist())]
    eps = sorted({ep for ep, _ in chosen})
    out: list[Finding] = []
    done = 0
    for key in keys:
        shape = declared_chw(meta.features[key])
        try:
            table = reader.read_columns(path, (key, "episode_index", "frame_index"), episodes=eps)
            if key not in table.column_names:
                continue  # the footer check names the missing column
            cells = image_bytes(table.column(key), key=key, episode_index=eps[0], path=path)
            ep_col = table.column("episode_index").to_numpy()
            fi_col = (
                table.column("frame_index").to_numpy()
                if "frame_index" in table.column_names
                else np.zeros(ep_col.shape, np.int64)
            )
            for ep, i in sorted(chosen):
                rows = np.flatnonzero((ep_col == ep) & (fi_col == i))
                if rows.shape[0] == 0:
                    continue  # the per-row checks name the episode's rows
                decode_image(cells[int(rows[0])], key=key, episode_index=ep, frame_index=i, path=path, shape=shape)
                done += 1
        except Exception as e:  # noqa: BLE001 - every failure is this feature's finding
            ep = getattr(e, "episode_index", None)
            ep = ep if ep is not None and ep >= 0 else None
            text = f"{path}: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
            out.append(finding("data_image", text, episode_index=ep, camera=key, file=path))
    return out, done
