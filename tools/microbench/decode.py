"""Decode benchmark on one generated dataset, in one run:

(a) ours: per-episode mini-MP4 (plan_span + synthesize + EpisodeVideo; only the span's bytes read),
(b) map-style: one torchcodec decoder per full source file (exact mode, whole file read at open),
    one ``get_frames_played_at`` per sample,
(c) decode limit: one sequential ``get_frames_in_range`` over the same frames of the source.

Random access is measured twice for ours: one request at a time (like map-style's ``__getitem__``),
and **planned** — the way the streaming dataset decodes, since its planner knows the anchor order
ahead: the same random requests in chunks of ``--lookahead``, each chunk's frames grouped per
episode and decoded once each, ascending, in one ``frames_at`` call (a GOP is decoded once per chunk
instead of once per requested frame), then handed out in request order. Ours closes an episode's
decoder after that episode's last request, as the dataset closes it when the planner evicts the
episode (``--keep-decoders`` keeps all open).

Reports frames/s (wall and per CPU second: the machine is shared, CPU time is steadier), bytes read
per frame and decoder-open time for sequential-within-episode and random access. The methods run
interleaved (the first one rotates) ``--repeats`` times; medians are printed. Every method returns
the same uint8 (T, C, H, W) frames (torchcodec's NCHW views); no item conversion is timed here (that
is ``python -m tools.bench``).

    python -m tools.microbench decode --codec av1 --size 640x480 --episodes 8 --length 90 --repeats 3
    python -m tools.microbench decode --mp4 data/g1_v30/videos/observation.images.cam_high/chunk-000/file-000.mp4 --episodes 8
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

from torchcodec.decoders import VideoDecoder

from lerobotstream.decode._decoder import EpisodeVideo
from lerobotstream.mp4.parse import parse_mp4_bytes
from lerobotstream.mp4.spans import plan_span
from lerobotstream.mp4.synth import synthesize
from lerobotstream.testing import make_dataset


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codec", default="av1")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--length", type=int, default=60)
    ap.add_argument("--size", default="256x192")
    ap.add_argument("--random", type=int, default=200, help="random samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gop", type=int, default=None, help="default: the generator's (AV1 g=2, H.264 30)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--piece", type=int, default=16, help="frames per request in the sequential pass")
    ap.add_argument("--lookahead", type=int, default=64, help="planned random access: requests per chunk")
    ap.add_argument(
        "--mp4",
        default=None,
        help="decode this MP4 instead of a generated one (real content, e.g. data/g1_v30's video), its "
        "frames split into --episodes equal episodes (--codec/--size/--length/--gop ignored)",
    )
    ap.add_argument("--keep-decoders", action="store_true", help="ours: keep every episode decoder open")
    args = ap.parse_args(argv)
    w, h = map(int, args.size.split("x"))
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        if args.mp4:
            path = Path(args.mp4)
        else:
            root = make_dataset(
                Path(tmp) / "d",
                episode_lengths=[args.length] * args.episodes,
                codec=args.codec,
                cameras=(("cam", w, h),),
                gop=args.gop,
                episodes_per_video_file=args.episodes,
            )
            path = next((root / "videos").rglob("*.mp4"))
        data = path.read_bytes()
        table = parse_mp4_bytes(data, path=str(path))
        po = np.asarray(table.presentation_order)
        pts_sorted = np.asarray(table.pts_s)[po]
        E = args.episodes
        if E < 1 or len(po) // E < 1:
            ap.error(f"--episodes {E}: the file has {len(po)} frames (need 1 <= episodes <= frames)")
        fps = int(round(1.0 / float(np.median(np.diff(pts_sorted)))))
        L = len(po) // E if args.mp4 else args.length
        eps = [(e * L, e * L + L) for e in range(E)]
        label = str(path) if args.mp4 else f"{args.codec} {w}x{h}"
        print(f"{label}, {E} episodes x {L} frames, file {len(data) / 1e6:.2f} MB")

        def ours(requests, chunks=None):
            """requests: list of (episode, [frame indices]) -> frames, bytes, open_s. ``chunks``: the
            requests pre-split into planned chunks (one frames_at per episode and chunk)."""
            nbytes = 0
            open_s = 0.0
            frames = 0
            videos = {}
            opened = 0
            last = {e: i for i, (e, _) in enumerate(requests)}  # the planner knows each episode's last use
            t0 = time.perf_counter()

            def video(e):
                nonlocal nbytes, open_s, opened
                v = videos.get(e)
                if v is None:
                    a, b = eps[e]
                    s = plan_span(table, a, b)
                    to = time.perf_counter()
                    payload = data[s.byte_start : s.byte_stop]
                    nbytes += len(payload)
                    mini = synthesize(table, s, payload)
                    v = videos[e] = EpisodeVideo(
                        table,
                        s,
                        mini,
                        episode_index=e,
                        camera="cam",
                        path=str(path),
                        from_timestamp=float(pts_sorted[a]),
                        fps=fps,
                    )
                    v.decoder()
                    open_s += time.perf_counter() - to
                    opened += 1
                return v

            def done(e, i):
                if i == last[e] and not args.keep_decoders:
                    videos.pop(e).close()

            if chunks is None:
                for i, (e, idx) in enumerate(requests):
                    frames += len(video(e).frames_at(idx))
                    done(e, i)
            else:
                pos = 0
                for chunk in chunks:
                    eps_c = np.array([e for e, _ in chunk])
                    frs_c = np.array([f[0] for _, f in chunk])
                    out = [None] * len(chunk)
                    for e in dict.fromkeys(eps_c.tolist()):
                        sel = np.flatnonzero(eps_c == e)
                        uniq, inv = np.unique(frs_c[sel], return_inverse=True)
                        got = video(e).frames_at(uniq)  # each distinct frame once, ascending
                        for j, k in zip(sel.tolist(), inv.tolist()):
                            out[j] = got[k]
                    frames += len(out)
                    for j, (e, _) in enumerate(chunk):
                        done(e, pos + j)
                    pos += len(chunk)
            return frames, time.perf_counter() - t0, nbytes, open_s / max(opened, 1)

        def mapstyle(requests):
            t0 = time.perf_counter()
            dec = VideoDecoder(data)  # exact mode: scans (reads) the whole file at open
            open_s = time.perf_counter() - t0
            frames = 0
            for e, idx in requests:
                for i in idx:
                    dec.get_frames_played_at([float(pts_sorted[eps[e][0] + i])])
                    frames += 1
            return frames, time.perf_counter() - t0, len(data), open_s

        def limit(requests):
            t0 = time.perf_counter()
            dec = VideoDecoder(data, seek_mode="approximate")
            open_s = time.perf_counter() - t0
            frames = 0
            for e, idx in requests:
                a = eps[e][0]
                frames += len(dec.get_frames_in_range(a + min(idx), a + max(idx) + 1))
            return frames, time.perf_counter() - t0, len(data), open_s

        # sequential: each episode in pieces of --piece frames for every method (one output tensor per
        # piece; a whole-episode batch is a fresh ~80 MB allocation at 640x480 whose page faults cost
        # more than the decode and would make the "limit" slower than per-frame map-style calls)
        seq = [(e, list(range(i, min(i + args.piece, L)))) for e in range(E) for i in range(0, L, args.piece)]
        rnd = [(int(e), [int(i)]) for e, i in zip(rng.integers(0, E, args.random), rng.integers(0, L, args.random))]
        rnd_chunks = [rnd[i : i + args.lookahead] for i in range(0, len(rnd), args.lookahead)]

        def ours_planned(requests):
            return ours(requests, rnd_chunks)

        planned = ("(a') ours, planned chunks", ours_planned)
        methods = (("(a) ours mini-MP4", ours), ("(b) map-style full file", mapstyle), ("(c) sequential limit", limit))
        res: dict[tuple[str, str], list] = {}
        for r in range(args.repeats):
            for name, req in (("sequential", seq), ("random", rnd)):
                order = [m for m in methods if not (name == "random" and m[1] is limit)]
                if name == "random":
                    order.append(planned)
                k = r % len(order)
                for label, fn in order[k:] + order[:k]:
                    c0 = time.process_time()
                    frames, dt, nbytes, open_s = fn(req)
                    cpu = time.process_time() - c0
                    res.setdefault((name, label), []).append((frames / dt, frames / cpu, nbytes / frames, open_s))
        print(
            f"{'access':<12}{'method':<28}{'frames/s':>10}{'frames/cpu-s':>14}{'bytes/frame':>14}{'open ms':>10}"
            f"   (medians of {args.repeats})"
        )
        med = {}
        for (name, label), v in res.items():
            m = med[(name, label)] = [statistics.median(x[i] for x in v) for i in range(4)]
            print(f"{name:<12}{label:<28}{m[0]:>10.0f}{m[1]:>14.0f}{m[2]:>14.0f}{m[3] * 1e3:>10.2f}")
        a, b, c = (med[("sequential", lb)] for lb, _ in methods)
        ra, rb = med[("random", methods[0][0])], med[("random", methods[1][0])]
        rp = med[("random", planned[0])]
        print(
            f"sequential (a)/(c): {a[0] / c[0]:.2f} wall, {a[1] / c[1]:.2f} cpu (goal >= 0.8); "
            f"random (a)/(b): {ra[0] / rb[0]:.2f} wall, {ra[1] / rb[1]:.2f} cpu; "
            f"random planned (a')/(b): {rp[0] / rb[0]:.2f} wall, {rp[1] / rb[1]:.2f} cpu"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
