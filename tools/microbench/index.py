"""Derived memory-mapped index vs the sidecar NPZ (schema 5): size on disk and open time.

Builds a sidecar holding ``--copies`` copies of one MP4's sample table (default: the
21,766-sample AV1 file of the shipped test media), then reports:

- NPZ size vs derived index size (bytes, and bytes per sample);
- loading every array of the NPZ (``np.load`` + decompress, what a reader without the derived
  index does in every process);
- first open (conversion into the derived file, under the lock);
- warm open (map the existing file) and warm open + one source's table + a lookup.

Outputs are verified first: every array of the index equals the NPZ's.

    python -m tools.microbench index [--mp4 PATH] [--copies 100] [--repeat 5]

``--per-source F1,F2`` measures instead what each *source* costs (the 100 TB case: many small
MP4s): it writes sidecars of F1 and F2 sources of ~300 synthetic samples each (``scale_sim``'s
tables, zlib level 1) and runs each step in a fresh process: write, first open (conversion),
warm open (+ 10 tables), ``load_manifest``, reading the ZIP central directory. The slope between
F1 and F2 is the per-source cost (µs and bytes: archive, derived file, peak RSS, anon heap);
then ``open_sidecar`` with a one-episode-per-file selection, twice (a fresh process each): the
validation the dataset runs in every rank, and the same call once the node has validated it.
``--trees A,B`` runs the same steps against other checkouts side by side, e.g. the code before a
change (``git archive <commit> lerobotstream | tar -x -C /tmp/old`` plus the built ``.so`` files)::

    python -m tools.microbench index --per-source 10000,30000 --trees /tmp/old,.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]

from lerobotstream.mp4._index_file import Mp4Index
from lerobotstream.mp4.parse import parse_mp4_bytes
from lerobotstream.sidecar._archive import SidecarWriter, load_tables
from tools.microbench import best_of

DEFAULT_MP4 = REPO / "data/testmedia/mp4-androidx-media"


def _find_default() -> Path:
    hits = sorted(DEFAULT_MP4.rglob("long_180p_av1.mp4"))
    if not hits:
        raise SystemExit(f"long_180p_av1.mp4 not found under {DEFAULT_MP4}; pass --mp4")
    return hits[0]


# --- per-source cost ------------------------------------------------------------------------------
_STEPS = ("write", "convert", "open", "manifest", "zip_directory", "validate", "validate_again")


def _fake_selection(num_sources: int):
    """(meta, source) look-alikes of the ``write`` step's sidecar: one episode per file, every
    frame of it, at 15 fps; sizes as written, no fingerprints."""
    from types import SimpleNamespace

    from tools import scale_sim as ss

    paths = [ss.source_path(sid % 3, sid) for sid in range(num_sources)]
    frames = [300 + sid % 7 for sid in range(num_sources)]
    eps = [
        SimpleNamespace(
            episode_index=e, length=frames[e], videos={"cam": SimpleNamespace(path=paths[e], from_timestamp=0.0)}
        )
        for e in range(num_sources)
    ]
    meta = SimpleNamespace(
        fps=15, episodes=eps, total_episodes=num_sources, video_keys=["cam"], video_paths=lambda: list(paths)
    )
    sizes = {}
    p = ss.PRESETS["droid100tb"]
    rng = np.random.Generator(np.random.PCG64(0))
    tables = [ss.source_table(p, np.array([300 + k]), np.ones(1), rng) for k in range(7)]
    for sid, path in enumerate(paths):
        t = tables[sid % 7]
        sizes[path] = int(t.moov_offset + t.moov_size)
    source = SimpleNamespace(size=sizes.__getitem__, fingerprint=lambda path: None)
    return meta, source


def _proc() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM", "VmRSS")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Anonymous"):
                out["anon"] = int(line.split()[1]) * 1024
    return out


def _step(step: str, workdir: Path, num_sources: int) -> dict[str, float]:
    """One step in this (fresh) process; returns seconds, bytes and memory over the imports."""
    import inspect

    from lerobotstream.mp4._index_file import Mp4Index as Index
    from lerobotstream.sidecar._archive import SidecarWriter as Writer
    from lerobotstream.sidecar._archive import load_manifest
    from tools import scale_sim as ss

    m0 = _proc()
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    if step == "write":
        p = ss.PRESETS["droid100tb"]
        rng = np.random.Generator(np.random.PCG64(0))
        tables = [ss.source_table(p, np.array([300 + k]), np.ones(1), rng) for k in range(7)]
        kw = {"compresslevel": 1} if "compresslevel" in inspect.signature(Writer).parameters else {}
        t0 = time.perf_counter()
        with Writer(workdir / "s.npz", {"repo_id": "bench/per-source"}, **kw) as w:
            if not kw:
                w._zf.compresslevel = 1  # noqa: SLF001 - a writer without the option (older trees)
            for sid in range(num_sources):
                t = tables[sid % 7]
                w.add_source(
                    sid, t, path=ss.source_path(sid % 3, sid), size=t.moov_offset + t.moov_size, fingerprint=None
                )
            w.commit()
        out["archive_bytes"] = (workdir / "s.npz").stat().st_size
    elif step == "convert":
        out["derived_bytes"] = Index.open(workdir / "s.npz", index_dir=workdir / "idx").nbytes_stored()
    elif step == "open":
        idx = Index.open(workdir / "s.npz", index_dir=workdir / "idx")
        for sid in range(0, num_sources, max(1, num_sources // 10)):
            idx.table(sid)
    elif step == "manifest":
        load_manifest(workdir / "s.npz")
    elif step == "zip_directory":
        with zipfile.ZipFile(workdir / "s.npz") as zf:
            out["members"] = len(zf.infolist())
    elif step in ("validate", "validate_again"):  # open_sidecar as the dataset calls it, twice
        from lerobotstream.sidecar import open_sidecar

        meta, source = _fake_selection(num_sources)
        m0, t0 = _proc(), time.perf_counter()
        open_sidecar(workdir / "s.npz", meta, source=source, index_dir=workdir / "idx")
    out["s"] = time.perf_counter() - t0
    m1 = _proc()
    out["peak_rss_bytes"] = m1["VmHWM"] - m0["VmRSS"]
    out["anon_bytes"] = m1["anon"] - m0["anon"]
    return out


def per_source(sizes: list[int], trees: list[Path]) -> dict[str, dict[int, dict[str, dict[str, float]]]]:
    """``{tree: {F: {step: figures}}}``, every step in a fresh process with ``tree`` first on the path."""
    import json
    import shutil
    import subprocess

    res: dict[str, dict[int, dict[str, dict[str, float]]]] = {}
    for tree in trees:
        res[str(tree)] = {}
        for f in sizes:
            wd = Path(tempfile.mkdtemp(prefix="lrs-per-source-"))
            try:
                res[str(tree)][f] = {}
                for step in _STEPS:
                    # --trees: this step measures that checkout's lerobotstream (first on the path)
                    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(tree.resolve()), str(REPO))))
                    r = subprocess.run(
                        [sys.executable, "-m", "tools.microbench", "index", "_step", step, str(wd), str(f)],
                        capture_output=True,
                        text=True,
                        env=env,
                        cwd=str(wd),
                    )
                    if r.returncode != 0:
                        raise SystemExit(f"{tree} {step} F={f} failed:\n{r.stderr[-3000:]}")
                    res[str(tree)][f][step] = json.loads(r.stdout.strip().splitlines()[-1])
            finally:
                shutil.rmtree(wd, ignore_errors=True)
    return res


def per_source_table(res: dict[str, dict[int, dict[str, dict[str, float]]]], sizes: list[int]) -> str:
    a, b = sizes[0], sizes[-1]
    trees = list(res)
    lines = [
        f"| step | per source (slope F = {a:,} -> {b:,}) | " + " | ".join(trees) + " |",
        "|---|---|" + "---:|" * len(trees),
    ]
    for step in _STEPS:
        keys = [k for k in res[trees[0]][a][step] if k != "members"]
        for k in keys:
            cells = []
            for t in trees:
                d = (res[t][b][step][k] - res[t][a][step][k]) / (b - a)
                cells.append(f"{d * 1e6:,.1f} us" if k == "s" else f"{d:,.0f} B")
            lines.append(f"| {step} | {k} | " + " | ".join(cells) + " |")
        if "members" in res[trees[0]][b][step]:
            lines.append(
                f"| {step} | ZIP members at F = {b:,} | "
                + " | ".join(f"{int(res[t][b][step]['members']):,}" for t in trees)
                + " |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_step":
        import json

        print(json.dumps(_step(argv[1], Path(argv[2]), int(argv[3]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mp4", type=Path, default=None)
    ap.add_argument("--copies", type=int, default=100, help="sources in the sidecar (copies of the table)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--per-source",
        default=None,
        metavar="F1,F2",
        help="measure the per-source cost between F1 and F2 sources of ~300 samples instead",
    )
    ap.add_argument(
        "--trees", default=".", help="checkouts to measure side by side with --per-source (comma-separated)"
    )
    args = ap.parse_args(argv)
    if args.per_source:
        sizes = [int(x) for x in args.per_source.split(",")]
        trees = [Path(t) for t in args.trees.split(",")]
        print(per_source_table(per_source(sizes, trees), sizes))
        return 0
    mp4 = args.mp4 or _find_default()
    table = parse_mp4_bytes(mp4.read_bytes())
    n = table.num_samples
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        npz = d / "sidecar.npz"
        w = SidecarWriter(npz, {"repo_id": "bench/bench", "revision": None, "data_root": None, "subset": False})
        for i in range(args.copies):
            w.add_source(
                i, table, path=f"videos/cam/chunk-000/file-{i:03d}.mp4", size=mp4.stat().st_size, fingerprint=None
            )
        w.commit()
        total = n * args.copies

        def load_npz():
            with np.load(npz) as z:
                for k in z.files:
                    z[k]

        t_npz = best_of(load_npz, args.repeat)
        t0 = time.perf_counter()
        idx = Mp4Index.open(npz, index_dir=d / "idx")
        t_convert = time.perf_counter() - t0
        # verify before timing anything else
        for sid, (_src, arrays) in enumerate(load_tables(npz)):
            if sid % max(1, args.copies // 5):
                continue
            m = idx.table(sid)
            for f in (
                "offset",
                "size",
                "dts_ticks",
                "cts_ticks",
                "pts_ticks",
                "pts_s",
                "presentation_order",
                "is_sync",
            ):
                if not np.array_equal(np.asarray(getattr(m, f)), arrays[f]):
                    raise SystemExit(f"MISMATCH in source {sid} field {f}")
        specs = idx._record(0)["arrays"]
        dtypes = {f: f"{specs[f]['enc']}:{np.dtype(specs[f]['dtype']).name}" for f in sorted(specs)}
        del idx
        t_warm = best_of(lambda: Mp4Index.open(npz, index_dir=d / "idx"), args.repeat)

        def warm_lookup():
            ix = Mp4Index.open(npz, index_dir=d / "idx")
            ix.frames_played_at(args.copies // 2, [1.0, 100.0])

        t_lookup = best_of(warm_lookup, args.repeat)
        idx_size = (next((d / "idx").glob("*.idx"))).stat().st_size
        npz_size = npz.stat().st_size
        with zipfile.ZipFile(npz) as zf:
            raw = sum(i.file_size for i in zf.infolist())
    print(f"source          {mp4.name}: {n} samples x {args.copies} copies = {total:,} samples")
    print(f"npz             {npz_size:,} B compressed ({npz_size / total:.2f} B/sample), {raw:,} B uncompressed")
    print(f"derived index   {idx_size:,} B ({idx_size / total:.2f} B/sample) = {idx_size / npz_size:.2f}x the npz")
    print(f"encodings       {dtypes}")
    print(f"load npz (all arrays, decompress)  {t_npz * 1e3:9.2f} ms")
    print(f"first open (convert, lock, fsync)  {t_convert * 1e3:9.2f} ms")
    print(
        f"warm open (mmap + header)          {t_warm * 1e3:9.2f} ms   ({t_npz / t_warm:.0f}x faster than loading the npz)"
    )
    print(f"warm open + one table + 2 lookups  {t_lookup * 1e3:9.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
