"""Benchmark byte sources on loopback HTTP: requests per episode, over-fetch, range throughput.

Serves a synthetic dataset (``--files`` files of ``--file-mb`` MB; each episode is a run of
contiguous GOP-sized ranges, as the cache asks for them) from the test loopback server (a fake Hub
plus a second "CDN" host) and reads every episode through:

- ``native``: :class:`HubSource` (HEAD /resolve once per file, ranged GETs to the CDN, coalesced);
- ``hffs-cat``: huggingface_hub's ``HfFileSystem.cat_file`` per GOP range;
- ``hffs-open``: ``HfFileSystem.open`` (default read-ahead cache) reading each episode's bytes.

Then reads 1 MiB ranges with 1, 4 and 16 threads (``max_connections`` = threads) through the native
source. Run: ``.venv/bin/python -m tools.bench_sources`` (about a minute).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from pathlib import Path

from lerobotstream.sources import open_source
from lerobotstream.sources._http_transport import RetryPolicy
from lerobotstream.testing import LoopbackServer

SHA = "a" * 40
REPO = "bench/ds"


def _episodes(file_size: int, rng: random.Random, gop_kb: int, episode_gops: int):
    """Episodes as lists of contiguous (offset, length) GOP ranges tiling the file."""
    eps, off = [], 0
    while off < file_size:
        ranges = []
        for _ in range(episode_gops):
            n = min(int(gop_kb * 1024 * rng.uniform(0.5, 1.5)), file_size - off)
            if n <= 0:
                break
            ranges.append((off, n))
            off += n
        eps.append(ranges)
    return eps


def _served_bytes(log, sizes):
    total = 0
    for e in log:
        if e["method"] != "GET" or e["host"] != "cdn":  # payload bytes come from the storage host
            continue
        if e["range"]:
            a, b = e["range"].split("=")[1].split("-")
            total += int(b) - int(a) + 1
        else:
            total += sizes.get(e["path"].rsplit("/", 1)[-1], 0)
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--file-mb", type=int, default=24)
    ap.add_argument("--gop-kb", type=int, default=96)
    ap.add_argument("--episode-gops", type=int, default=20)
    args = ap.parse_args(argv)
    rng = random.Random(0)
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = False
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths, sizes = [], {}
        for i in range(args.files):
            p = root / "videos" / "cam" / f"file-{i:03d}.mp4"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(rng.randbytes(args.file_mb * 1024 * 1024))
            paths.append(f"videos/cam/{p.name}")
            sizes[p.name] = p.stat().st_size
        server = LoopbackServer.start({"datasets": {REPO: {"refs": {"main": SHA}, "commits": {SHA: str(root)}}}})
        try:
            work = [
                (path, ep)
                for path in paths
                for ep in _episodes(sizes[path.rsplit("/", 1)[1]], rng, args.gop_kb, args.episode_gops)
            ]
            needed = sum(n for _, ep in work for _, n in ep)
            print(
                f"{len(work)} episodes, {len(paths)} files, {needed / 2**20:.1f} MiB needed, "
                f"~{args.episode_gops} GOPs of ~{args.gop_kb} KiB per episode"
            )
            print(f"{'reader':<10} {'req/episode':>12} {'hub req/ep':>11} {'read/needed':>12} {'ms/episode':>11}")

            def report(name, fn):
                server.clear_log()
                t0 = time.perf_counter()
                fn()
                dt = time.perf_counter() - t0
                log = server.log()
                hub = [e for e in log if e["host"] == "hub"]
                print(
                    f"{name:<10} {len(log) / len(work):>12.2f} {len(hub) / len(work):>11.2f} "
                    f"{_served_bytes(log, sizes) / needed:>12.3f} {1000 * dt / len(work):>11.1f}"
                )

            def native():
                src = open_source(f"hf://datasets/{REPO}", endpoint=server.url, token=False, retry=RetryPolicy())
                for path, ep in work:
                    src.read_ranges(path, ep)

            report("native", native)
            try:
                from huggingface_hub import HfFileSystem

                def hffs_cat():
                    fs = HfFileSystem(endpoint=server.url, token=False, skip_instance_cache=True)
                    for path, ep in work:
                        for off, n in ep:
                            fs.cat_file(f"datasets/{REPO}@{SHA}/{path}", start=off, end=off + n)

                def hffs_open():
                    fs = HfFileSystem(endpoint=server.url, token=False, skip_instance_cache=True)
                    for path, ep in work:
                        with fs.open(f"datasets/{REPO}@{SHA}/{path}", "rb") as f:
                            f.seek(ep[0][0])
                            f.read(sum(n for _, n in ep))

                report("hffs-cat", hffs_cat)
                report("hffs-open", hffs_open)
            except Exception as e:  # report, don't hide: the comparison needs both
                print(f"HfFileSystem failed against the loopback Hub: {type(e).__name__}: {str(e)[:200]}")

            print(f"\n{'threads':>8} {'MiB/s':>8}   (1 MiB ranges, native, max_connections = threads)")
            for threads in (1, 4, 16):
                src = open_source(f"hf://datasets/{REPO}", endpoint=server.url, token=False, max_connections=threads)
                jobs = [(paths[i % len(paths)], rng.randrange(0, args.file_mb - 1) * 2**20) for i in range(96)]
                it = iter(jobs)
                lock = threading.Lock()

                def run(lock=lock, it=it, src=src):
                    while True:
                        with lock:
                            job = next(it, None)
                        if job is None:
                            return
                        src.read(job[0], job[1], 2**20)

                for p in paths:
                    src.read(p, 0, 1)  # resolve outside the timing
                t0 = time.perf_counter()
                ts = [threading.Thread(target=run) for _ in range(threads)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                print(f"{threads:>8} {len(jobs) / (time.perf_counter() - t0):>8.1f}")
        finally:
            server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
