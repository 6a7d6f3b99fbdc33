"""Scale model by simulation: what a DROID-sized dataset and a 1,000-GPU run cost.

Builds synthetic sample tables (no video payload) for datasets of increasing size, writes them
through the real sidecar writer (``SidecarWriter``), converts them with the real derived-index
converter (``Mp4Index.open``), and starts a rank with the dataset's own start-up code: its planner
(``planner._planner.Planner`` from ``dataset._stream.plan_settings``), its span planner and
episode sizes (``dataset._reader.EpisodeSpans``, asked on demand) and its wiring
(``dataset._wiring.shard_items``: worker start, plans, the byte cache, the pipeline; only fetch and
decode are stubs). Each size is built in its own subprocess and each simulated rank runs in a
fresh subprocess, so memory figures (``/proc/self/smaps_rollup``) are clean.

Synthetic dataset (LeRobot v3 layout, AV1 ``g=2`` at ``fps``):

* episode lengths: seeded log-normal, rescaled to the preset's total frame count;
* per camera, episodes are appended to the current MP4 until the next one would push it past
  ``file_mb`` (LeRobot's writer rule: a file holds whole episodes), 1,000 files per chunk;
* per sample: size log-normal around ``sample_kb`` (keyframes 1.6x, inter frames 0.4x),
  contiguous offsets after a 48-byte header, DTS ``i * 1024`` at timescale ``fps * 1024``, no
  composition offsets (AV1 has no reordering), a sync sample every 2 frames from each episode's
  first frame (each episode is encoded on its own, then concatenated).

Per size it reports: NPZ (int64) and derived-index bytes (total, per sample), writer / convert /
warm-open times, and per world size N a rank's (rank 0, one process, ``num_workers=0``) cost:
open time, planner set-up (rank + worker LPT shards), the time to the first item out of the
pipeline and the episodes it sized on the way (the first pool and the prefetch frontier), planner
anchors/s, balance (max/mean frames per rank), and memory after each step: RSS, PSS, anonymous
(private heap) and file-backed pages.

    .venv/bin/python -m tools.scale_sim                        # every size up to DROID (~3 min)
    .venv/bin/python -m tools.scale_sim --max-scale droid100tb # + the 100 TB variant
    .venv/bin/python -m tools.scale_sim --max-scale small --worlds 8,64 --json out.json
    .venv/bin/python -m tools.scale_sim validate --files 100000   # the validator's header checks

Sizes (``--max-scale`` runs every size up to and including the named one):

``tiny`` (smoke test), ``small`` (1k episodes), ``medium`` (10k), ``droid`` (92k episodes,
27.6 M frames, 3 cameras, 15 fps, ~6 KB/sample, 200 MB files), ``droid100tb`` (DROID's episodes
and frames at ~1.2 MB/sample = 100 TB: a 200 MB file then holds one episode, 276 k source MP4s).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Preset:
    """A synthetic dataset size.

    Fields: ``episodes``; ``frames`` (total, per camera); ``cameras``; ``fps``; ``sample_kb``
    (mean compressed sample, KB = 1000 B); ``file_mb`` (LeRobot's per-file limit, MB = 1e6 B).
    """

    name: str
    episodes: int
    frames: int
    cameras: int = 3
    fps: int = 15
    sample_kb: float = 6.0
    file_mb: float = 200.0

    @property
    def samples(self) -> int:
        return self.frames * self.cameras

    @property
    def video_bytes(self) -> float:
        return self.samples * self.sample_kb * 1e3


PRESETS = {
    p.name: p
    for p in (
        Preset("tiny", 40, 12_000, file_mb=2.0),
        Preset("small", 1_000, 300_000),
        Preset("medium", 10_000, 3_000_000),
        Preset("droid", 92_000, 27_600_000),
        # DROID's episodes and frames at a sample size that makes the dataset 100 TB:
        # 100e12 / 82.8e6 samples = 1.21 MB/sample (high-resolution cameras); a 200 MB file then
        # holds one episode (LeRobot never splits one), i.e. one source MP4 per (episode, camera).
        Preset("droid100tb", 92_000, 27_600_000, sample_kb=100e12 / 82.8e6 / 1e3),
    )
}
ORDER = ["tiny", "small", "medium", "droid", "droid100tb"]
TIMESCALE_PER_FPS = 1024  # PyAV/libsvtav1 time base 1/(fps*1024): sample duration 1024 ticks
#: sizes above this many samples are written at DEFLATE level 1 (the writer's default 6 is too slow)
DEFLATE6_MAX_SAMPLES = 1_000_000
HEADER_BYTES = 48  # ftyp + mdat header before the first sample (moov at the end)
#: the bundled G1 video's sample entry (av01, 640x480): what a verified sim source's moov holds
G1_VIDEO = "data/g1_v30/videos/observation.images.cam_high/chunk-000/file-000.mp4"
FTYP = b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00isomiso2av01mp41"
IDENTITY_MATRIX = (0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)  # tkhd/mvhd display matrix: no rotation


# --- memory ---------------------------------------------------------------------------------------
def smaps_rollup() -> dict[str, int]:
    """This process's ``/proc/self/smaps_rollup`` in bytes: Rss, Pss, Pss_Anon, Pss_File,
    Shared_*, Private_*, Anonymous (empty dict where the file does not exist)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[-1] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except OSError:
        pass
    return out


def _mem() -> dict[str, float]:
    s = smaps_rollup()
    mb = 1e6
    return {
        "rss_mb": s.get("Rss", 0) / mb,
        "pss_mb": s.get("Pss", 0) / mb,
        "anon_mb": s.get("Anonymous", 0) / mb,
        "private_mb": (s.get("Private_Clean", 0) + s.get("Private_Dirty", 0)) / mb,
        "file_mb": (s.get("Rss", 0) - s.get("Anonymous", 0)) / mb,
    }


# --- synthetic dataset -----------------------------------------------------------------------------
def episode_lengths(p: Preset, seed: int) -> np.ndarray:
    """int64 (episodes,) lengths >= 30 frames summing to ``p.frames`` (seeded log-normal)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    raw = rng.lognormal(np.log(p.frames / p.episodes), 0.45, p.episodes)
    lens = np.maximum(30, np.round(raw * p.frames / raw.sum())).astype(np.int64)
    lens[np.argmax(lens)] += p.frames - int(lens.sum())  # exact total
    return lens


def episode_bytes_per_camera(p: Preset, lens: np.ndarray, seed: int) -> np.ndarray:
    """float64 (episodes, cameras) expected compressed bytes per episode video (planning files)."""
    rng = np.random.Generator(np.random.PCG64([seed, 1]))
    scale = rng.lognormal(0.0, 0.25, (len(lens), p.cameras))
    return lens[:, None] * p.sample_kb * 1e3 * scale


def assign_files(p: Preset, ep_bytes: np.ndarray) -> tuple[np.ndarray, list[list[int]]]:
    """LeRobot's writer rule per camera: append episodes to the current file until the next one
    would push it past ``file_mb``. Returns (file id per (episode, camera) in source-id order,
    episode list per source id). Source ids follow the sorted path order (camera, chunk, file)."""
    limit = p.file_mb * 1e6
    src = np.empty(ep_bytes.shape, dtype=np.int64)
    sources: list[list[int]] = []
    for c in range(p.cameras):
        cur: list[int] = []
        size = 0.0
        for e in range(ep_bytes.shape[0]):
            b = float(ep_bytes[e, c])
            if cur and size + b > limit:
                sources.append(cur)
                cur, size = [], 0.0
            cur.append(e)
            size += b
            src[e, c] = len(sources)
        sources.append(cur)
    return src, sources


def source_path(cam: int, k: int) -> str:
    return f"videos/observation.images.cam{cam}/chunk-{k // 1000:03d}/file-{k % 1000:03d}.mp4"


@functools.lru_cache(maxsize=1)
def _sample_entry() -> tuple[bytes, int, int]:
    """(stsd payload, width, height) of the bundled G1 video: a sample entry the parser reads."""
    from lerobotstream.mp4.parse import parse_mp4_bytes

    t = parse_mp4_bytes((REPO / G1_VIDEO).read_bytes())
    return bytes(t.stsd), int(t.width), int(t.height)


class SimMp4Source:
    """The source MP4s a sim sidecar describes, as a ``ByteSource`` (``size``, ``read``,
    ``fingerprint``): ``ftyp``, an ``mdat`` of zeros, then a ``moov`` whose sample tables, timing,
    sample entry and matrices are the sidecar's (written by the mini-MP4 writer, its chunk offsets
    moved to the sidecar's). What the first-use verification reads and parses. :meth:`prepare`
    writes every moov to ``folder`` once (before anything is timed); reads then come from those
    files, like a local store's."""

    def __init__(self, index: Any, folder: Path) -> None:
        self.index = index
        self.folder = Path(folder)
        self._sizes: dict[str, tuple[int, int]] = {}  # path -> (moov offset, file size)

    def _moov_path(self, path: str) -> Path:
        return self.folder / f"{self.index.source_id(path)}.moov"

    def prepare(self) -> None:
        """Write the moov of every source (skipped when ``folder`` is complete)."""
        from lerobotstream.mp4.spans import plan_span
        from lerobotstream.mp4.synth import synthesize_header

        done = self.folder / "complete"
        if done.exists():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        for sid in range(self.index.num_sources):
            t = self.index.table(sid, cache=False)
            span = plan_span(t, 0, t.offset.shape[0])
            head = bytearray(synthesize_header(t, span))
            pos = int.from_bytes(head[0:4], "big")  # the mini-MP4's ftyp, then its moov
            moov = head[pos : pos + int.from_bytes(head[pos : pos + 4], "big")]
            shift = len(head) - span.byte_start  # mini-MP4 offsets minus the source's
            k = moov.find(b"stco")
            count = int.from_bytes(moov[k + 8 : k + 12], "big")
            entries = np.frombuffer(moov, dtype=">u4", count=count, offset=k + 12).astype(np.int64) - shift
            moov[k + 12 : k + 12 + 4 * count] = entries.astype(">u4").tobytes()
            (self.folder / f"{sid}.moov").write_bytes(bytes(moov))
        done.touch()

    def _file(self, path: str) -> tuple[int, int]:
        f = self._sizes.get(path)
        if f is None:
            t = self.index.table(self.index.source_id(path))
            end = int(t.offset[-1]) + int(t.size[-1])
            f = self._sizes[path] = (end, end + self._moov_path(path).stat().st_size)
        return f

    def size(self, path: str) -> int:
        return self._file(path)[1]

    def fingerprint(self, path: str) -> None:
        return None

    def read(self, path: str, offset: int, n: int) -> bytes:
        moov_at, size = self._file(path)
        out = bytearray(n)
        head = FTYP + (1).to_bytes(4, "big") + b"mdat" + (moov_at - len(FTYP)).to_bytes(8, "big")
        if offset < len(head):
            part = head[offset : offset + n]
            out[: len(part)] = part
        stop = min(offset + n, size)
        if stop > moov_at:
            a = max(offset, moov_at)
            with open(self._moov_path(path), "rb") as f:
                f.seek(a - moov_at)
                out[a - offset : stop - offset] = f.read(stop - a)
        return bytes(out)


def source_table(p: Preset, lens: np.ndarray, ep_scale: np.ndarray, rng: np.random.Generator) -> SimpleNamespace:
    """Sample table of one concatenated MP4 holding episodes with ``lens`` frames (decode order)."""
    n = int(lens.sum())
    starts = np.repeat(np.cumsum(lens) - lens, lens)
    local = np.arange(n, dtype=np.int64) - starts
    is_sync = (local % 2) == 0
    mean = p.sample_kb * 1e3 * np.repeat(ep_scale, lens)
    size = (mean * np.where(is_sync, 1.6, 0.4) * rng.lognormal(-0.045, 0.3, n)).astype(np.int64) + 1
    offset = np.empty(n, dtype=np.int64)
    offset[0] = HEADER_BYTES
    np.cumsum(size[:-1], out=offset[1:])
    offset[1:] += HEADER_BYTES
    dts = np.arange(n, dtype=np.int64) * TIMESCALE_PER_FPS
    stsd, width, height = _sample_entry()
    return SimpleNamespace(
        offset=offset,
        size=size,
        dts_ticks=dts,
        cts_ticks=np.zeros(n, dtype=np.int64),
        is_sync=is_sync,
        media_timescale=p.fps * TIMESCALE_PER_FPS,
        movie_timescale=p.fps * TIMESCALE_PER_FPS,  # as the mini-MP4 writer makes it (SimMp4Source)
        media_time=0,
        empty_edit_movie_ticks=0,
        edit_duration_movie_ticks=n * TIMESCALE_PER_FPS,
        codec="av01",
        stsd=stsd,
        ftyp=FTYP,
        width=width,
        height=height,
        track_id=1,
        ctts_version=None,
        media_duration=n * TIMESCALE_PER_FPS,
        has_edit=False,
        matrix=IDENTITY_MATRIX,
        movie_matrix=IDENTITY_MATRIX,
        video_track_ids=(1,),
        moov_offset=int(offset[-1] + size[-1]),
        moov_size=8 * n + 1000,
        mdat_offset=32,
        mdat_size=int(offset[-1] + size[-1]) - 32,
        faststart=False,
    )


def build(p: Preset, workdir: Path, seed: int) -> dict[str, Any]:
    """Write the sidecar NPZ, convert it to the derived index, save the episode metadata.
    Returns the build figures (times in seconds, bytes)."""
    from lerobotstream.mp4._index_file import Mp4Index
    from lerobotstream.sidecar._archive import SidecarWriter

    t0 = time.perf_counter()
    lens = episode_lengths(p, seed)
    ep_bytes = episode_bytes_per_camera(p, lens, seed)
    src_of, sources = assign_files(p, ep_bytes)
    from_ts = np.empty(src_of.shape, dtype=np.float64)
    first_frame = np.empty(src_of.shape, dtype=np.int64)
    for sid, eps in enumerate(sources):
        e = np.asarray(eps, dtype=np.int64)
        first = np.cumsum(lens[e]) - lens[e]
        c = int(np.flatnonzero(src_of[e[0]] == sid)[0])
        first_frame[e, c] = first
        from_ts[e, c] = first / p.fps
    np.savez(workdir / "episodes.npz", lengths=lens, source=src_of, from_timestamp=from_ts)
    t_plan = time.perf_counter() - t0

    npz = workdir / "sidecar.npz"
    rng = np.random.Generator(np.random.PCG64([seed, 2]))
    per_cam_count = [0] * p.cameras
    t0 = time.perf_counter()
    raw_int64 = 0
    level = 6 if p.samples <= DEFLATE6_MAX_SAMPLES else 1
    with SidecarWriter(
        npz,
        {
            "repo_id": f"sim/{p.name}",
            "repo_type": "dataset",
            "revision": None,
            "data_root": None,
            "subset": False,
            "episodes": None,
            "total_episodes": p.episodes,
            "fps": p.fps,
            "video_keys": [f"observation.images.cam{c}" for c in range(p.cameras)],
            "created_by": "tools/scale_sim.py",
        },
        compresslevel=level,
    ) as w:
        for sid, eps in enumerate(sources):
            e = np.asarray(eps, dtype=np.int64)
            c = int(np.flatnonzero(src_of[e[0]] == sid)[0])
            scale = ep_bytes[e, c] / (lens[e] * p.sample_kb * 1e3)
            t = source_table(p, lens[e], scale, rng)
            k = per_cam_count[c]
            per_cam_count[c] += 1
            w.add_source(sid, t, path=source_path(c, k), size=t.moov_offset + t.moov_size, fingerprint=None)
            raw_int64 += t.offset.shape[0] * (4 * 8 + 1)
        w.commit()
    t_write = time.perf_counter() - t0
    write_peak = _peak_rss_mb()

    index_dir = workdir / "indexes"
    t0 = time.perf_counter()
    idx = Mp4Index.open(npz, index_dir=index_dir)
    t_convert = time.perf_counter() - t0
    derived = idx.nbytes_stored()
    header = len(json.dumps(idx._header, separators=(",", ":")))  # noqa: SLF001 - measuring
    idx.close()
    samples = p.samples
    return {
        "preset": asdict(p),
        "episodes": p.episodes,
        "frames": p.frames,
        "samples": samples,
        "sources": len(sources),
        "episodes_per_file": p.episodes * p.cameras / len(sources),
        "video_tb": p.video_bytes / 1e12,
        "npz_bytes": npz.stat().st_size,
        "npz_int64_raw_bytes": raw_int64,
        "derived_bytes": derived,
        "derived_json_bytes": header,
        "derived_bytes_per_sample": derived / samples,
        "npz_bytes_per_sample": npz.stat().st_size / samples,
        "t_plan_files_s": t_plan,
        "t_write_s": t_write,
        "t_convert_s": t_convert,
        "deflate_level": level,
        "write_peak_rss_mb": write_peak,
        "build_peak_rss_mb": _peak_rss_mb(),
    }


def _peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return 0.0


# --- one rank -------------------------------------------------------------------------------------
class _SimMeta:
    """What the dataset's span planner reads of the metadata (``EpisodeSpans``: ``fps``,
    ``episode(ep).length`` and ``.videos[camera]`` with ``path`` and ``from_timestamp``), from the
    synthetic episode table (``episodes.npz``) and the index's paths."""

    def __init__(
        self, lengths: np.ndarray, src_of: np.ndarray, from_ts: np.ndarray, paths: Any, fps: int, cams: list[str]
    ) -> None:
        self.lengths, self.src_of, self.from_ts, self.paths = lengths, src_of, from_ts, paths
        self.fps, self.cams = fps, cams

    def episode(self, ep: int) -> SimpleNamespace:
        videos = {
            cam: SimpleNamespace(path=self.paths(int(self.src_of[ep, c])), from_timestamp=float(self.from_ts[ep, c]))
            for c, cam in enumerate(self.cams)
        }
        return SimpleNamespace(length=int(self.lengths[ep]), videos=videos)


def _sim_run(spans: Any, cams: list[str]):
    """The dataset's per-process ``Readers`` over the synthetic index: its sizes are the dataset's
    (``EpisodeSpans.episode_nbytes`` on demand); fetch plans the episode's spans and returns no
    payload (there is no video); an episode job's decode waits for the episode's fetch and, as the
    dataset's, has the sources that fetch did not verify verified (``EpisodeSpans.checked_span``);
    assembly returns the anchor."""
    from lerobotstream.dataset._decodejob import EpisodeJob
    from lerobotstream.dataset._wiring import Readers, StreamPart
    from lerobotstream.payload_cache import EpisodePayload

    fetched: dict[tuple[int, str], Any] = {}

    class SimReader:
        def episode_nbytes(self, ep: int) -> int:
            return spans.episode_nbytes(ep)

        def fetch(self, ep: int) -> Any:
            for cam in cams:  # as the dataset's fetch: the first-use verification, once items are served
                fetched[(ep, cam)] = spans.fetch_span(ep, cam)
            return EpisodePayload({}, None)

        def prepare(self, **k: Any) -> None:
            pass

        def release(self) -> None:
            pass

        def add(self, **k: Any) -> None:
            pass

        def count_finished(self, ep: int) -> None:
            pass

    class SimJob(EpisodeJob):
        def decode(self, frames: Any) -> None:
            self.cache.get(self.key)  # as the dataset's decode: waits for the episode's fetch
            for cam in cams:  # then the payload's source verified first (when its fetch did not)
                s = spans.checked_span(self.episode, cam, fetched[(self.episode, cam)])
                if s is not None:
                    fetched[(self.episode, cam)] = s  # the dataset fetches that camera again

        def assemble(self, frame: int, dec: Any, slot: Any = None) -> dict[str, int]:
            if spans.deferring:
                spans.serving()
            return {"episode_index": self.episode, "frame_index": frame}

        def admitted(self, reused: bool) -> None:
            pass

        def close(self) -> None:
            pass

    class SimReaders(Readers):
        job_class = SimJob

        def _readers(self) -> list[Any]:
            return [SimReader()]

    return SimReaders([StreamPart(SimpleNamespace(video_keys=cams))])


def simulate_rank(
    workdir: Path,
    world: int,
    rank: int,
    *,
    fps: int,
    num_workers: int,
    seed: int,
    max_anchors: int,
    max_span_episodes: int | None = None,
    tolerance_s: float = 1e-4,
    verify: bool = False,
) -> dict[str, Any]:
    """One rank (one process) of a ``world``-rank run, started by the dataset's own code: warm-open
    the index, build the rank's planner (``Planner`` from the dataset's ``plan_settings``:
    default options, ``repeat=True``, batch 8, the 8 GiB budget), then run the dataset's wiring
    (``dataset._wiring.shard_items``: worker start, plans, the byte cache, the pipeline) to its
    first item, with the dataset's episode sizes (``EpisodeSpans`` over the index, asked on demand by
    admission and prefetch) and a stub fetch and decode (no video). Then times the pool's draws.
    Times in seconds, memory in MB (1e6 B).

    ``max_span_episodes`` is accepted for the older command lines and ignored: nothing is
    extrapolated, every size the start-up asks for is computed.

    ``verify``: the spans take their tables through the dataset's first-use verification
    (``sidecar.VerifiedTables`` over :class:`SimMp4Source`: each touched MP4's moov is read, parsed
    and compared with the sidecar, and the agreement recorded beside the derived index, as a
    worker does). The sim files' moovs are written before the timing starts (once per build)."""
    import lerobotstream.mp4.index  # noqa: F401 - Cython accessors, as the dataset loads them
    from lerobotstream.dataset._reader import EpisodeSpans
    from lerobotstream.dataset._stream import LoaderSettings, plan_settings
    from lerobotstream.dataset._wiring import shard_items
    from lerobotstream.mp4._index_file import Mp4Index
    from lerobotstream.options import StreamOptions
    from lerobotstream.planner._planner import Planner
    from lerobotstream.planner._streams import Streams

    if verify:  # the sim MP4s' moovs, written once per build before anything is timed
        prep = Mp4Index.open(workdir / "sidecar.npz", index_dir=workdir / "indexes")
        SimMp4Source(prep, workdir / "sim-moov").prepare()
        prep.close()
        del prep
    mem = {"imports": _mem()}
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    idx = Mp4Index.open(workdir / "sidecar.npz", index_dir=workdir / "indexes")
    t_open = time.perf_counter() - t0
    mem["open"] = _mem()

    t0 = time.perf_counter()
    meta = np.load(workdir / "episodes.npz")
    lengths, src_of, from_ts = meta["lengths"], meta["source"], meta["from_timestamp"]
    cams = [f"observation.images.cam{c}" for c in range(src_of.shape[1])]
    tables = None
    if verify:
        from lerobotstream.sidecar._verify import VerifiedTables

        tables = VerifiedTables(idx, SimMp4Source(idx, workdir / "sim-moov"))
    spans = EpisodeSpans(tables or idx, _SimMeta(lengths, src_of, from_ts, idx.path, fps, cams), cams, tolerance_s)
    anchor_lengths = dict(enumerate(lengths.tolist()))  # the dataset's anchor_lengths() (no drop_n_last_frames)
    t_meta = time.perf_counter() - t0
    mem["meta"] = _mem()

    opts = StreamOptions(seed=seed, repeat=True, batch_size=8, byte_budget_gb=8.0, num_workers=num_workers).resolved()
    loader = LoaderSettings(opts.batch_size, opts.num_workers, opts.drop_last)
    settings = plan_settings(opts, loader, rank=rank, world_size=world)
    run = _sim_run(spans, cams)
    t0 = time.perf_counter()
    planner = Planner(Streams.of_dataset(anchor_lengths, run.sizes[0]), settings)
    t_shard = time.perf_counter() - t0
    per_rank = planner.plain.samples_per_rank()
    mem["shard"] = _mem()

    t0 = time.perf_counter()
    items = shard_items(planner, run, 0 if num_workers else None, 0, 0, opts, loader, in_process=num_workers == 0)
    first = next(items)
    t_first = time.perf_counter() - t0
    t_to_first = time.perf_counter() - t_all
    verified_first = tables.verified if tables is not None else 0
    mem["spans"] = _mem()  # what the rank holds when its first sample is out (the older name kept)
    sized = len(run.sizes[0].known)
    touched = len({int(s) for e in run.sizes[0].known for s in src_of[e]})
    items.close()

    plan = planner.plain.layouts[0].plan(0, planner.settings.rank)
    unbudgeted = Planner(Streams.of_dataset(anchor_lengths), dataclasses.replace(settings, byte_budget=None)).plain
    draw = unbudgeted.layouts[0].plan(0, unbudgeted.topo.rank)
    budget = min(max_anchors, plan.num_frames - 1)
    out_e = np.empty(65536, dtype=np.int64)
    out_f = np.empty(65536, dtype=np.int64)
    pool = draw.group_pool(0, 0)
    drawn = 0
    t0 = time.perf_counter()
    while drawn < budget:
        k = pool.fill(out_e[: min(65536, budget - drawn)], out_f[: min(65536, budget - drawn)])
        if k == 0:
            break
        drawn += k
    t_draw = time.perf_counter() - t0
    mem["end"] = _mem()
    wf = [int(x) for x in planner.plain.worker_frames(rank)]
    return {
        "world": world,
        "rank": rank,
        "num_workers": num_workers,
        "rank_episodes": len(planner.plain.layouts[0].rank_episodes(rank)),
        "rank_frames": int(per_rank[rank]),
        "sources_touched": touched,
        "sources_total": idx.num_sources,
        "t_open_s": t_open,
        "t_meta_s": t_meta,
        "t_shard_s": t_shard,
        "t_first_s": t_first,
        "t_to_first_sample_s": t_to_first,
        "verify": verify,
        "sources_verified": tables.verified if tables is not None else 0,
        "sources_verified_by_first_sample": verified_first,
        "sources_replaced": tables.replaced if tables is not None else 0,
        "episodes_sized": sized,
        "spans_planned": len(spans),
        "first_anchor": [int(first["episode_index"]), int(first["frame_index"])],
        "anchors_per_s": drawn / t_draw if t_draw > 0 else float("nan"),
        "anchors_drawn": drawn,
        "rank_balance_max_over_mean": float(per_rank.max() / per_rank.mean()),
        "worker_balance_max_over_mean": float(max(wf) / (sum(wf) / len(wf))) if sum(wf) else 1.0,
        "mem": mem,
        "private_mb_over_imports": mem["spans"]["private_mb"] - mem["imports"]["private_mb"],
        "anon_mb_over_imports": mem["spans"]["anon_mb"] - mem["imports"]["anon_mb"],
    }


# --- driver ---------------------------------------------------------------------------------------
# --- elastic resume ---------------------------------------------------------------------------------
def _elastic_setup(
    name: str,
    old: tuple[int, int, int],
    new: tuple[int, int, int],
    fraction: float,
    seed: int,
    budget: bool,
    partitions: int | None = None,
):
    """(episode lengths, the new run's rank-0 planner before loading, rank 0's state of the old
    run after ``fraction`` of its epoch, its batches per rank). ``partitions``: canonical
    partitions (``partitions=P``; the budget is then per partition)."""
    from lerobotstream.planner._planner import Planner
    from lerobotstream.planner._sizes import EpisodeSizes
    from lerobotstream.planner._streams import PlanSettings, Streams
    from lerobotstream.planner._turns import replay_turns

    def planner(world: int, workers: int, batch: int, **kw: Any) -> Planner:
        sized = EpisodeSizes(lambda e: int(sizes[e])) if budget else None  # each planner its own
        settings = PlanSettings(
            rank=0, world_size=world, num_workers=workers, batch_size=batch, partitions=partitions, **kw
        )
        return Planner(Streams.of_dataset(lens, sized), settings)

    p = PRESETS[name]
    lens = episode_lengths(p, seed)
    sizes = (lens * p.cameras * int(p.sample_kb * 1000)).astype(np.int64)
    # sizes on demand, as the dataset gives them (each new planner its own, as each process has)
    kw = dict(byte_budget=int(16 * sizes.max())) if budget else {}
    w0, k0, b0 = old
    oldp = planner(*old, **kw)
    batches = int(oldp.plain.batches_per_rank()[0] * fraction)
    given, _, _ = replay_turns(oldp.plain.turn_limits(), b0, batches=batches)
    state = oldp.state_dict(samples_consumed=sum(given))
    return lens, lambda: planner(*new, **kw), state, batches


def simulate_elastic(
    name: str,
    old: tuple[int, int, int],
    new: tuple[int, int, int],
    *,
    fraction: float = 0.5,
    seed: int = 0,
    budget: bool = True,
    ship: Path | None = None,
    partitions: int | None = None,
) -> dict[str, Any]:
    """Cost of an elastic resume on the preset's episode lengths (planner only, no payload):
    an old run of ``old = (ranks, workers, batch)`` consumed ``fraction`` of rank 0's epoch;
    rank 0 of a new run ``new`` loads rank 0's state and starts as one DataLoader worker that
    computes the remainder itself (the per-process fallback). Times: load_state_dict (counts
    only), the remainder (one C pool replay per old worker), the remainder's shards and the first
    anchor; memory (``_mem``) before the planners, before the remainder and after.
    ``budget``: a per-rank byte budget with exact episode sizes (admission then depends on bytes).
    ``ship``: also write what this process (the training process) hands its workers
    (``rank_remainders()``, pickled) there, for :func:`simulate_elastic_worker`.
    ``partitions``: canonical partitions: the remainder is each partition's offset, from counts
    (no replay, nothing shipped); also times the partition layout (LPT, once per process)."""
    from lerobotstream.planner import _layout

    mem0 = _mem()
    lens, make_new, state, batches = _elastic_setup(name, old, new, fraction, seed, budget, partitions)
    t_layout = None
    if partitions is not None:
        t0 = time.perf_counter()
        _layout.partition_groups(lens, f"scale-sim-{seed}", 1000, partitions)  # the LPT, timed alone
        t_layout = time.perf_counter() - t0
    t0 = time.perf_counter()
    newp = make_new()
    t_new = time.perf_counter() - t0
    t0 = time.perf_counter()
    newp.load_state_dict(state)
    t_load = time.perf_counter() - t0
    mem_pre = _mem()
    t0 = time.perf_counter()
    rem = newp.remainders()[0]
    t_rem = time.perf_counter() - t0
    mem_rem = _mem()
    t0 = time.perf_counter()
    rp = newp.current_pass()  # the remainder's pass: its layout on the new topology
    per_rank = rp.samples_per_rank()
    t_rp = time.perf_counter() - t0
    t0 = time.perf_counter()
    k1 = new[1]
    it = newp.iter_worker_anchors(0 if k1 else None, k1)
    next(it)
    t_first = time.perf_counter() - t0
    if partitions is not None:
        left, part_frames = rp.layouts[0].part_left, rp.layouts[0].part_frames
        return {
            "preset": name,
            "episodes": int(len(lens)),
            "frames": int(lens.sum()),
            "old": list(old),
            "new": list(new),
            "partitions": partitions,
            "byte_budget": bool(budget),
            "old_batches_per_rank": batches,
            "consumed_all_ranks": rem.consumed,
            "samples_left": int(left.sum()),
            "partitions_left": int((left > 0).sum()),
            "partitions_started": int(((left > 0) & (left < part_frames)).sum()),
            "t_partition_layout_s": t_layout,
            "t_new_planner_s": t_new,
            "t_load_state_s": t_load,
            "t_remainder_s": t_rem,
            "t_remainder_shards_s": t_rp,
            "t_first_anchor_s": t_first,
            "rank_balance_max_minus_min": int(per_rank.max() - per_rank.min()),
            "max_partition_left": int(left.max()),
            "mem_before": mem0,
            "mem_after_remainder": mem_rem,
            "mem_after": _mem(),
        }
    out = {
        "preset": name,
        "episodes": int(len(lens)),
        "frames": int(lens.sum()),
        "old": list(old),
        "new": list(new),
        "byte_budget": bool(budget),
        "old_batches_per_rank": batches,
        "consumed_all_ranks": rem.consumed,
        "samples_left": int(rem.lengths.sum()),
        "episodes_left": int(len(rem.episode_indices)),
        "episodes_started": len(rem.frames),
        "started_frames_stored": int(sum(len(f) for f in rem.frames.values())),
        "t_new_planner_s": t_new,
        "t_load_state_s": t_load,
        "t_remainder_s": t_rem,
        "t_remainder_shards_s": t_rp,
        "t_first_anchor_s": t_first,
        "t_worker_s": t_rem + t_rp + t_first,
        "replayed_anchors_per_s": rem.consumed / t_rem if t_rem else None,
        "rank_balance_max_minus_min": int(per_rank.max() - per_rank.min()),
        "max_episode_left": int(rem.lengths.max()) if len(rem.lengths) else 0,
        "mem_before": mem0,
        "mem_before_remainder": mem_pre,
        "mem_after_remainder": mem_rem,
        "mem_after": _mem(),
    }
    if ship is not None:
        import pickle

        t0 = time.perf_counter()
        shipped = newp.rank_remainders()
        blob = pickle.dumps(shipped, protocol=pickle.HIGHEST_PROTOCOL)
        out["t_ship_s"] = time.perf_counter() - t0
        out["ship_bytes"] = len(blob)
        out["ship_started_frames"] = int(sum(len(f) for r in shipped for f in r.frames.values()))
        Path(ship).write_bytes(blob)
    return out


def simulate_elastic_worker(
    name: str,
    old: tuple[int, int, int],
    new: tuple[int, int, int],
    ship: Path,
    *,
    fraction: float = 0.5,
    seed: int = 0,
    budget: bool = True,
) -> dict[str, Any]:
    """What one DataLoader worker of rank 0 pays when the training process computed the remainder
    and handed it over (``ship``, written by :func:`simulate_elastic`): unpickling it, the
    remainder's shards, the first anchor; memory before and after (a fresh process; the same
    planners as the fallback's)."""
    import pickle

    from lerobotstream.planner import _pass

    _, make_new, state, _ = _elastic_setup(name, old, new, fraction, seed, budget)
    newp = make_new()
    newp.load_state_dict(state)
    blob = Path(ship).read_bytes()
    mem_pre = _mem()
    t0 = time.perf_counter()
    newp.at = dataclasses.replace(newp.at, remainders=pickle.loads(blob))
    rp = newp.current_pass()
    rp.samples_per_rank()
    k1 = new[1]
    it = newp.iter_worker_anchors(0 if k1 else None, k1)
    next(it)
    t = time.perf_counter() - t0
    return {
        "t_worker_s": t,
        "computed_here": bool(_pass._CACHE),
        "ship_bytes": len(blob),
        "mem_before_remainder": mem_pre,
        "mem_after": _mem(),
    }


def _run_child(args: list[str], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "tools.scale_sim", *args]  # this checkout (cwd) first on the path
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(REPO))
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run(
    max_scale: str,
    worlds: list[int],
    *,
    only: bool = False,
    workdir: Path | None = None,
    seed: int = 0,
    max_anchors: int = 2_000_000,
    num_workers: int = 0,
    keep: bool = False,
    max_span_episodes: int = 1500,
    timeout: float = 1800.0,
    reuse: bool = False,
    verify: bool = False,
    log=print,
) -> list[dict[str, Any]]:
    """Build and simulate every size up to ``max_scale`` (only that one with ``only``); returns one
    record per size. ``reuse``: a size already built under ``workdir`` (``--keep``, same seed) is
    simulated again without rebuilding (its build record is the one kept). ``verify``: each world
    size is also run with the first-use verification, cold (no record: every touched MP4 is parsed)
    and then warm (the record of the cold run: nothing parsed)."""
    names = [max_scale] if only else ORDER[: ORDER.index(max_scale) + 1]
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="lrs-scale-"))
    results = []
    try:
        for name in names:
            wd = base / name
            kept = wd / "build.json"
            if reuse and kept.exists() and json.loads(kept.read_text()).get("seed") == seed:
                rec = json.loads(kept.read_text())
                log(f"[{name}] reusing the build in {wd}")
            else:
                if wd.exists():
                    shutil.rmtree(wd)
                wd.mkdir(parents=True)
                t0 = time.perf_counter()
                rec = _run_child(["_build", name, str(wd), "--seed", str(seed)], timeout)
                rec["seed"] = seed
                kept.write_text(json.dumps(rec))
                log(
                    f"[{name}] built {rec['sources']} sources, {rec['samples']:,} samples in "
                    f"{time.perf_counter() - t0:.1f}s (write {rec['t_write_s']:.1f}s, convert {rec['t_convert_s']:.1f}s)"
                )
            p = PRESETS[name]
            rec["ranks"] = []
            for n, mode in [(n, m) for n in worlds for m in ("off", *(("cold", "warm") if verify else ()))]:
                if n > p.episodes:
                    continue
                if mode == "cold":
                    for note in (wd / "indexes").glob("*.verified"):
                        note.unlink()
                r = _run_child(
                    [
                        "_rank",
                        *(["--verify"] if mode != "off" else []),
                        str(wd),
                        "--world",
                        str(n),
                        "--fps",
                        str(p.fps),
                        "--seed",
                        str(seed),
                        "--num-workers",
                        str(num_workers),
                        "--max-anchors",
                        str(max_anchors),
                        "--max-span-episodes",
                        str(max_span_episodes),
                    ],
                    timeout,
                )
                r["verify_mode"] = mode
                rec["ranks"].append(r)
                log(
                    f"[{name}] N={n} verify={mode}: first sample {r['t_to_first_sample_s']:.3f}s "
                    f"(verified {r['sources_verified']}, replaced {r['sources_replaced']}) ({r['episodes_sized']} episodes "
                    f"sized), private "
                    f"{r['mem']['spans']['private_mb']:.0f} MB (anon {r['mem']['spans']['anon_mb']:.0f} MB), "
                    f"sources touched {r['sources_touched']}/{r['sources_total']}"
                )
            results.append(rec)
            if not keep:
                shutil.rmtree(wd, ignore_errors=True)
    finally:
        if not keep and workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    return results


def markdown(results: list[dict[str, Any]]) -> str:
    """The figures as two Markdown tables (per size; per size and world size)."""
    lines = [
        "| size | episodes | samples | sources | ep/file | video TB | NPZ MB | NPZ B/sample (int64 raw) "
        "| derived MB | derived B/sample | JSON header MB | write s (zlib level) | convert s "
        "| peak RSS MB: write / + convert |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['preset']['name']} | {r['episodes']:,} | {r['samples']:,} | {r['sources']:,} | "
            f"{r['episodes_per_file']:.1f} | {r['video_tb']:.2f} | {r['npz_bytes'] / 1e6:.1f} | "
            f"{r['npz_bytes_per_sample']:.2f} ({r['npz_int64_raw_bytes'] / r['samples']:.0f}) | "
            f"{r['derived_bytes'] / 1e6:.1f} | {r['derived_bytes_per_sample']:.2f} | "
            f"{r['derived_json_bytes'] / 1e6:.2f} | {r['t_write_s']:.1f} ({r['deflate_level']}) | {r['t_convert_s']:.1f} "
            f"| {r.get('write_peak_rss_mb', 0):.0f} / {r.get('build_peak_rss_mb', 0):.0f} |"
        )
    lines += [
        "",
        "| size | N ranks | eps/rank | sources touched | open s | planner s | episodes sized | first sample s "
        "| anchors/s | rank max/mean | RSS MB | PSS MB | private MB | anon MB | anon over imports MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for k in r["ranks"]:
            m = k["mem"]["spans"]
            lines.append(
                f"| {r['preset']['name']} | {k['world']} | {k['rank_episodes']:,} | {k['sources_touched']:,}/"
                f"{k['sources_total']:,} | {k['t_open_s']:.3f} | {k['t_shard_s']:.3f} | {k['episodes_sized']:,} | "
                f"{k['t_to_first_sample_s']:.2f} | {k['anchors_per_s'] / 1e6:.1f} M | "
                f"{k['rank_balance_max_over_mean']:.4f} | {m['rss_mb']:.0f} | {m['pss_mb']:.0f} | "
                f"{m['private_mb']:.0f} | {m['anon_mb']:.0f} | {k['anon_mb_over_imports']:.0f} |"
            )
    return "\n".join(lines)


# --- the validator's per-file header checks at 100k files ----------------------------------------
class _MemorySource:
    """Every path is the same MP4 bytes (the bundled G1 video): what the validator's per-file
    checks read (``size``, ``read``), with counted requests and bytes."""

    def __init__(self, data: bytes) -> None:
        import threading

        self.data = data
        self.requests = self.bytes_read = 0
        self._lock = threading.Lock()

    def size(self, path: str) -> int:
        return len(self.data)

    def read(self, path: str, offset: int, n: int) -> bytes:
        with self._lock:
            self.requests += 1
            self.bytes_read += min(n, len(self.data) - offset)
        return self.data[offset : offset + n]


def simulate_validate(files: int, *, workers: int = 8, latency_s: float = 0.0) -> dict[str, Any]:
    """Run ``lerobotstream.validate``'s per-file checks (box walk, ``parse_mp4``, format against
    info.json, every episode window, summary) over ``files`` copies of the G1 MP4 (2 episodes each)
    on ``workers`` threads; returns the time, requests and bytes (what a store would serve; with
    ``latency_s`` the modelled wall time of a remote store is ``requests * latency_s / workers``).
    Metadata and Parquet footers are not included (they are a few requests in all, or one per data
    file)."""
    import concurrent.futures as cf

    from lerobotstream.meta import DatasetMeta
    from lerobotstream.sidecar._validate import EpisodeWindow
    from lerobotstream.validate._videos import check_video

    g1 = REPO / "data" / "g1_v30"
    meta = DatasetMeta.load(g1)
    cam = meta.video_keys[0]
    src = _MemorySource((g1 / meta.episodes[0].videos[cam].path).read_bytes())
    windows = [
        EpisodeWindow(ep.episode_index, cam, "", ep.videos[cam].from_timestamp, ep.length) for ep in meta.episodes
    ]  # every file holds G1's two episodes (indices as in G1)
    t0 = time.perf_counter()
    findings: dict[str, int] = {}
    with cf.ThreadPoolExecutor(max_workers=workers) as pool:
        futs = [
            pool.submit(
                check_video,
                src,
                f"videos/{cam}/chunk-{k // 1000:03d}/file-{k % 1000:03d}.mp4",
                cam,
                windows,
                meta,
                tolerance_s=1e-4,
                full_selection=True,
            )
            for k in range(files)
        ]
        for fut in cf.as_completed(futs):
            for f in fut.result()[0]:
                findings[f.code] = findings.get(f.code, 0) + 1
    elapsed = time.perf_counter() - t0
    return {
        "files": files,
        "workers": workers,
        "elapsed_s": elapsed,
        "per_file_ms": 1e3 * elapsed / files,
        "requests": src.requests,
        "bytes_read": src.bytes_read,
        "bytes_per_file": src.bytes_read / files,
        "file_bytes": len(src.data),
        "findings": findings,
        "modelled_remote_s": src.requests * latency_s / workers if latency_s else None,
        "peak_rss_mb": _peak_rss_mb(),
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "validate":
        ap = argparse.ArgumentParser(
            prog="scale_sim.py validate", description="the validator's per-file header checks over N files"
        )
        ap.add_argument("--files", type=int, default=100_000)
        ap.add_argument("--workers", type=int, default=8)
        ap.add_argument("--latency-ms", type=float, default=50.0, help="round trip modelled for a remote store")
        a = ap.parse_args(argv[1:])
        print(json.dumps(simulate_validate(a.files, workers=a.workers, latency_s=a.latency_ms / 1e3)))
        return 0
    if argv and argv[0] == "_build":
        ap = argparse.ArgumentParser()
        ap.add_argument("name")
        ap.add_argument("workdir", type=Path)
        ap.add_argument("--seed", type=int, default=0)
        a = ap.parse_args(argv[1:])
        print(json.dumps(build(PRESETS[a.name], a.workdir, a.seed)))
        return 0
    if argv and argv[0] == "_rank":
        ap = argparse.ArgumentParser()
        ap.add_argument("workdir", type=Path)
        ap.add_argument("--world", type=int, required=True)
        ap.add_argument("--rank", type=int, default=0)
        ap.add_argument("--fps", type=int, required=True)
        ap.add_argument("--seed", type=int, default=0)
        ap.add_argument("--num-workers", type=int, default=0)
        ap.add_argument("--max-anchors", type=int, default=2_000_000)
        ap.add_argument("--max-span-episodes", type=int, default=1500)
        ap.add_argument("--verify", action="store_true")
        a = ap.parse_args(argv[1:])
        print(
            json.dumps(
                simulate_rank(
                    a.workdir,
                    a.world,
                    a.rank,
                    fps=a.fps,
                    num_workers=a.num_workers,
                    seed=a.seed,
                    max_anchors=a.max_anchors,
                    max_span_episodes=a.max_span_episodes,
                    verify=a.verify,
                )
            )
        )
        return 0
    if argv and argv[0] in ("_elastic", "_elastic_worker"):
        ap = argparse.ArgumentParser()
        ap.add_argument("name")
        ap.add_argument("--old", required=True)
        ap.add_argument("--new", required=True)
        ap.add_argument("--fraction", type=float, default=0.5)
        ap.add_argument("--seed", type=int, default=0)
        ap.add_argument("--no-budget", action="store_true")
        ap.add_argument("--ship", type=Path, default=None)
        ap.add_argument("--partitions", type=int, default=None)
        a = ap.parse_args(argv[1:])
        topo = lambda t: tuple(int(x) for x in t.split("x"))  # noqa: E731
        kw = dict(fraction=a.fraction, seed=a.seed, budget=not a.no_budget)
        if argv[0] == "_elastic":
            print(
                json.dumps(
                    simulate_elastic(a.name, topo(a.old), topo(a.new), ship=a.ship, partitions=a.partitions, **kw)
                )
            )
        else:
            print(json.dumps(simulate_elastic_worker(a.name, topo(a.old), topo(a.new), a.ship, **kw)))
        return 0
    if argv and argv[0] == "--elastic":
        # elastic resume cost, each case in fresh processes: tools/scale_sim.py --elastic droid 1024x8x32 512x4x64 ...
        # (--partitions P first: canonical partitions, tools/scale_sim.py --elastic --partitions 8192 droid ...)
        part = []
        if argv[1] == "--partitions":
            part, argv = ["--partitions", argv[2]], argv[:1] + argv[3:]
        name, cases = argv[1], argv[2:] or ["1024x8x32", "512x4x64"]
        out = []
        with tempfile.TemporaryDirectory(prefix="lrs-elastic-") as tmp:
            for old, new in zip(cases[::2], cases[1::2]):
                for budget in ([], ["--no-budget"]):
                    if part:
                        r = _run_child(["_elastic", name, "--old", old, "--new", new, *budget, *part], 3600)
                        out.append(r)
                        print(
                            f"[{name}] partitions={r['partitions']} {old} -> {new} budget={r['byte_budget']}: "
                            f"layout {r['t_partition_layout_s']:.3f}s, new planner {r['t_new_planner_s']:.3f}s, "
                            f"load {r['t_load_state_s']:.3f}s, remainder (offsets from counts) "
                            f"{r['t_remainder_s']:.3f}s, tail shards {r['t_remainder_shards_s']:.3f}s, first anchor "
                            f"{r['t_first_anchor_s']:.3f}s; {r['consumed_all_ranks']:,} consumed, "
                            f"{r['samples_left']:,} left in {r['partitions_left']:,} partitions "
                            f"({r['partitions_started']:,} started); RSS {r['mem_before']['rss_mb']:.0f} -> "
                            f"{r['mem_after']['rss_mb']:.0f} MB; rank max-min {r['rank_balance_max_minus_min']} "
                            f"<= {r['max_partition_left']}",
                            flush=True,
                        )
                        continue
                    ship = str(Path(tmp) / "ship.pkl")
                    args = [name, "--old", old, "--new", new, "--ship", ship, *budget]
                    r = _run_child(["_elastic", *args], 3600)
                    r["shipped_worker"] = w = _run_child(["_elastic_worker", *args], 3600)
                    out.append(r)
                    mb = lambda m: m["rss_mb"]  # noqa: E731
                    print(
                        f"[{name}] {old} -> {new} budget={r['byte_budget']}: remainder {r['t_remainder_s']:.2f}s "
                        f"({r['consumed_all_ranks']:,} anchors replayed, {r['replayed_anchors_per_s'] / 1e6:.1f} M/s), "
                        f"load {r['t_load_state_s']:.2f}s, shards {r['t_remainder_shards_s']:.2f}s, first anchor "
                        f"{r['t_first_anchor_s']:.3f}s; {r['episodes_started']:,} started episodes "
                        f"({r['started_frames_stored']:,} frames stored); RSS {mb(r['mem_before']):.0f} -> "
                        f"{mb(r['mem_before_remainder']):.0f} -> {mb(r['mem_after']):.0f} MB; "
                        f"rank max-min {r['rank_balance_max_minus_min']} <= {r['max_episode_left']}",
                        flush=True,
                    )
                    print(
                        f"    per worker: computing it {r['t_worker_s']:.2f}s, "
                        f"+{mb(r['mem_after']) - mb(r['mem_before_remainder']):.0f} MB RSS; handed over "
                        f"({w['ship_bytes'] / 1e6:.2f} MB pickled, {r['ship_started_frames']:,} started frames, made "
                        f"in {r['t_ship_s']:.2f}s once per rank) {w['t_worker_s']:.2f}s, "
                        f"+{mb(w['mem_after']) - mb(w['mem_before_remainder']):.0f} MB RSS"
                        f"{' (computed again!)' if w['computed_here'] else ''}",
                        flush=True,
                    )
        print(json.dumps(out))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-scale", choices=ORDER, default="droid", help="largest size to run (default droid)")
    ap.add_argument("--only", action="store_true", help="run only the --max-scale size")
    ap.add_argument("--worlds", default="8,64,1024", help="world sizes to simulate (comma-separated)")
    ap.add_argument("--num-workers", type=int, default=0, help="DataLoader workers per rank (0: one process)")
    ap.add_argument("--max-anchors", type=int, default=2_000_000, help="anchors drawn to time the pool")
    ap.add_argument(
        "--max-span-episodes",
        type=int,
        default=1500,
        help="ignored (kept for older command lines): the rank sizes its episodes on demand, as the "
        "dataset does, and nothing is extrapolated",
    )
    ap.add_argument("--reuse", action="store_true", help="simulate a size kept under --workdir without rebuilding it")
    ap.add_argument(
        "--verify", action="store_true", help="also run each world with the first-use verification (cold, warm)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=None, help="keep builds here (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the built sidecars and indexes")
    ap.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    results = run(
        a.max_scale,
        [int(x) for x in a.worlds.split(",") if x],
        only=a.only,
        workdir=a.workdir,
        seed=a.seed,
        max_anchors=a.max_anchors,
        num_workers=a.num_workers,
        keep=a.keep,
        max_span_episodes=a.max_span_episodes,
        reuse=a.reuse,
        verify=a.verify,
        log=lambda s: print(s, file=sys.stderr, flush=True),
    )
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    print(markdown(results))
    print(f"\ntotal {time.perf_counter() - t0:.0f}s; command: python -m tools.scale_sim " + " ".join(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
