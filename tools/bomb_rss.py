"""Peak RSS of real-size allocation bombs: each hostile input is built on disk (sparse files where
they are large), then read by the library in its own subprocess; the child's peak RSS (its ``VmHWM``:
``ru_maxrss`` would include the parent's, which Linux carries over ``exec``), its wall time and
what it raised are reported.

    .venv/bin/python -m tools.bomb_rss                 # every case
    .venv/bin/python -m tools.bomb_rss mp4_20m_samples episodes_1m

Cases:

* ``mp4_at_cap``: the most an accepted header costs: a sparse MP4 declaring the per-track cap
  of 1-byte samples (parsed).
* ``mp4_20m_samples``: a 20 MB sparse MP4 declaring one 1-byte sample per byte (20M samples).
* ``mp4_2e9_samples``: a 2 GB sparse MP4 declaring 2·10⁹ samples.
* ``moov_900mib``: a sparse MP4 whose moov box is 900 MiB.
* ``moov_at_cap``: the largest moov accepted (a sparse MP4 whose moov is just under the cap; parsed).
* ``tiny_boxes``: 160 KB of 8-byte top-level boxes (reads counted).
* ``dataset_control``: one epoch of the small image dataset the dataset cases start from (the
  baseline of a training process: imports, threads).
* ``data_20m_rows``: a dataset whose data file (0.7 MB) holds one 20M-row group; one epoch.
* ``episodes_1m``: a dataset whose ``meta/episodes`` table holds 1M rows (``info.json`` says so too).
* ``png_cell``: an image cell whose PNG header declares 10000x8000 pixels.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = (
    "mp4_at_cap",
    "mp4_20m_samples",
    "mp4_2e9_samples",
    "moov_900mib",
    "moov_at_cap",
    "tiny_boxes",
    "dataset_control",
    "data_20m_rows",
    "episodes_1m",
    "png_cell",
)
LIMIT_GIB = 1.2


def _sparse(path: Path, head: bytes, size: int) -> None:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)


def _parse_file(path: Path) -> dict:
    from lerobotstream.mp4.parse import parse_mp4
    from lerobotstream.sources import open_source

    src = open_source(str(path.parent))
    calls = []

    def read(off, n):
        calls.append(n)
        return src.read(path.name, off, n)

    t = parse_mp4(read, src.size(path.name), path=path.name)
    return {"num_samples": t.num_samples, "reads": len(calls)}


def build(case: str, tmp: Path) -> Path:
    """The hostile input of ``case`` under ``tmp``."""
    from lerobotstream.mp4.parse import MAX_SAMPLES_PER_TRACK, MOOV_MAX_BYTES
    from tools.bombs import mp4_header, tiny_boxes_file

    if case == "mp4_at_cap":
        n = MAX_SAMPLES_PER_TRACK
        out, size = tmp / "cap.mp4", n + 4096
        _sparse(out, mp4_header(n, file_size=size), size)
    elif case == "mp4_20m_samples":
        out, size = tmp / "a.mp4", 20_000_000 + 4096
        _sparse(out, mp4_header(20_000_000, file_size=size), size)
    elif case == "mp4_2e9_samples":
        out, size = tmp / "b.mp4", 2_000_000_000 + 4096
        _sparse(out, mp4_header(2_000_000_000, file_size=size), size)
    elif case == "moov_900mib":
        out, size = tmp / "c.mp4", (900 << 20) + (1 << 20)
        head = mp4_header(10, file_size=size)
        at = head.index(b"moov") - 4
        _sparse(out, head[:at] + (900 << 20).to_bytes(4, "big") + b"moov", size)
    elif case == "moov_at_cap":
        out, size = tmp / "e.mp4", MOOV_MAX_BYTES + (1 << 20)
        _sparse(out, mp4_header(10, file_size=size, moov_pad=MOOV_MAX_BYTES - 4096), size)
    elif case == "tiny_boxes":
        out = tmp / "d.mp4"
        out.write_bytes(tiny_boxes_file(20_000))
    elif case in ("dataset_control", "data_20m_rows", "episodes_1m", "png_cell"):
        out = tmp / "ds"
        _dataset(case, out)
    else:
        raise SystemExit(f"unknown case {case!r}; known: {', '.join(CASES)}")
    return out


def _dataset(case: str, root: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lerobotstream.testing import make_dataset

    cams = () if case != "episodes_1m" else (("observation.images.front", 32, 24),)
    images = (("observation.images.top", 32, 24),) if case != "episodes_1m" else ()
    make_dataset(root, episode_lengths=(3, 4), cameras=cams, image_cameras=images, codec="h264")
    if case == "data_20m_rows":
        zeros = pa.array(np.zeros(20_000_000, np.int64))
        pq.write_table(
            pa.table({"episode_index": zeros, "frame_index": zeros, "index": zeros}),
            root / "data/chunk-000/file-000.parquet",
            row_group_size=20_000_000,
        )
    elif case == "episodes_1m":
        shard = root / "meta/episodes/chunk-000/file-000.parquet"
        one = pq.read_table(shard).slice(0, 1)
        n = 1_000_000
        cols = {}
        for name in one.column_names:
            if name.startswith("stats/"):
                continue
            col = one.column(name)
            cols[name] = (
                pa.repeat(col[0], n) if not pa.types.is_list(col.type) else pa.array([col[0].as_py()] * n, col.type)
            )
        idx = np.arange(n, dtype=np.int64)
        cols["episode_index"] = pa.array(idx)
        cols["length"] = pa.array(np.ones(n, np.int64))
        cols["dataset_from_index"] = pa.array(idx)
        cols["dataset_to_index"] = pa.array(idx + 1)
        pq.write_table(pa.table(cols), shard)
        info_path = root / "meta/info.json"
        info = json.loads(info_path.read_text())
        info["total_episodes"], info["total_frames"] = n, n
        info_path.write_text(json.dumps(info))
    elif case == "png_cell":
        import struct
        import zlib

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        ihdr = struct.pack(">IIBBBBB", 10_000, 8_000, 8, 2, 0, 0, 0)
        idat = zlib.compress(bytes(10_000 * 3 + 1) * 8_000, 9)  # a real 240 MB image, ~230 KB
        png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
        path = root / "data/chunk-000/file-000.parquet"
        t = pq.read_table(path)
        col = t.column("observation.images.top").combine_chunks()
        cells = [{"bytes": png, "path": None}] * len(t)
        t = t.set_column(
            t.column_names.index("observation.images.top"), "observation.images.top", pa.array(cells, col.type)
        )
        pq.write_table(t, path)


def run_child(case: str, target: str) -> None:
    """What the library does with the input (in the child): print one JSON line."""
    path = Path(target)
    t0 = time.perf_counter()
    try:
        if case.startswith(("mp4_", "moov_", "tiny_")):
            result = _parse_file(path)
        elif case == "episodes_1m":
            from lerobotstream.meta import DatasetMeta

            meta = DatasetMeta.load(path, check_files=False)
            result = {"episodes": meta.num_episodes}
        else:
            from lerobotstream import StreamingLeRobotDataset

            ds = StreamingLeRobotDataset(root=path, sampling_strategy="sequential")
            result = {"items": sum(1 for _ in ds)}
        out = {"outcome": "ok", **result}
    except BaseException as e:  # noqa: BLE001 - reported, the point of the tool
        out = {"outcome": type(e).__name__, "message": str(e)[:300]}
    out["wall_s"] = round(time.perf_counter() - t0, 2)
    out["vm_hwm_kib"] = _vm_hwm_kib()
    print(json.dumps(out), flush=True)


def _vm_hwm_kib() -> int:
    """This process's peak RSS (``VmHWM``, KiB): its own address space only, unlike ``ru_maxrss``,
    which Linux carries over ``exec`` from the parent that forked it."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def measure(case: str) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f"bomb-{case}-"))
    try:
        target = build(case, tmp)
        env = dict(
            os.environ, LEROBOTSTREAM_SIDECAR_DIR=str(tmp / "sidecars"), LEROBOTSTREAM_INDEX_DIR=str(tmp / "idx")
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "tools.bomb_rss", "--child", case, str(target)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=Path(__file__).resolve().parents[1],
        )
        out = proc.stdout.read().decode()
        _, status, usage = os.wait4(proc.pid, 0)
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        res = json.loads(lines[-1]) if lines else {"outcome": f"no result (status {status})"}
        hwm = res.pop("vm_hwm_kib", -1)
        res["peak_rss_mib"] = round((hwm if hwm > 0 else usage.ru_maxrss) / 1024, 1)
        res["case"] = case
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("cases", nargs="*", help=f"cases to run (default all): {', '.join(CASES)}")
    p.add_argument("--child", nargs=2, metavar=("CASE", "PATH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        run_child(*args.child)
        return 0
    worst = 0.0
    for case in args.cases or CASES:
        r = measure(case)
        worst = max(worst, r["peak_rss_mib"])
        msg = r.get("message", "")
        extra = {k: v for k, v in r.items() if k not in ("case", "outcome", "message", "peak_rss_mib", "wall_s")}
        print(
            f"{case:18s} peak RSS {r['peak_rss_mib']:8.1f} MiB  {r['wall_s']:6.2f} s  {r['outcome']} {extra or ''} {msg[:160]}"
        )
    print(f"worst peak RSS {worst:.1f} MiB (limit {LIMIT_GIB} GiB = {LIMIT_GIB * 1024:.0f} MiB)")
    return 0 if worst <= LIMIT_GIB * 1024 else 1


if __name__ == "__main__":
    sys.exit(main())
