"""One trial inside a contestant process: build a dataset and its loader, draw the samples, measure.

Each contestant of ``python -m tools.bench`` is a long-lived process running this file as a script
(``python tools/bench_trial.py --serve``: :func:`serve`), fed one JSON trial spec per line over a
pipe, so imports are paid once, outside any timing. It runs in this venv (``ours``, the decode
limit), with another checkout's package first on ``sys.path`` (``ours@PATH``) or in LeRobot's venv
(``lerobot``, ``lerobot-streaming``): the standard library only at module level, this folder's
other modules through :func:`_sibling` (this file's folder, never another checkout's ``tools``).

Trial kinds: ``ours`` / ``lerobot`` / ``lerobot-streaming`` (:func:`run_trial`: a fresh dataset
and ``DataLoader``, or ``StreamLoader`` with ``spec["loader"]``, drawn until ``spec["samples"]``;
steady samples/s, first batch, CPU per sample from ``/proc``, peak PSS, ours' counters through the
:class:`Snapshots` side channel, the GIL under py-spy with ``spec["gil"]``), ``limit``
(``bench_limit.decode_limit``), ``warmup`` (the imports), ``prepare`` (ours' sidecar, built before
the rounds), ``step_alone`` (a synthetic training step with no loader).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULT_PREFIX = "@@bench-result "
SNAPSHOT_KEY = "__bench_stats__"


def _sibling(name: str):
    """The module ``name`` of this folder: ``tools.<name>`` when this file was imported as part of
    the ``tools`` package, else (run as a script: this folder is ``sys.path[0]``) ``<name>``, so a
    contestant running another checkout's package (``ours@PATH``) still uses this checkout's tools."""
    return importlib.import_module(f"{__package__}.{name}" if __package__ else name)


_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK  # utime + stime
    except (OSError, IndexError, ValueError):
        return 0.0


def _tree_cpu_s() -> dict[int, float]:
    """CPU seconds of this process and of each live child (DataLoader workers), by pid."""
    me = os.getpid()
    return {p: cpu_s(p) for p in (me, *_children(me))}


def _cpu_delta_s(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two :func:`_tree_cpu_s` readings (a process gone by the second
    reading counts up to the first; one started after the first counts fully)."""
    return sum(after.get(p, c) - c for p, c in before.items()) + sum(c for p, c in after.items() if p not in before)


def _profile_memory():
    """The profiler's PSS sampler (``lerobotstream/profile/_memory.py`` of this checkout), loaded by
    its path: the module is standard library only, so it runs in LeRobot's venv too, where this
    checkout's package (built for another Python) may not import."""
    import importlib.util

    name = "_lrs_bench_profile_memory"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "lerobotstream" / "profile" / "_memory.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # before running it: its dataclasses look their module up
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _pss_sampler(interval_s: float = 0.5):
    """A started ``MemorySampler`` of this process and its children (DataLoader workers); its
    ``own_cpu_s`` is its timer thread's CPU, ``summary()["peak_pss_sum_bytes"]`` the peak PSS sum."""
    me = os.getpid()
    sampler = _profile_memory().MemorySampler(
        lambda: {me: "main", **{c: "child" for c in _children(me)}}, interval_s=interval_s
    )
    return sampler.__enter__()


try:  # a real IterableDataset subclass when torch is importable (both venvs have it)
    from torch.utils.data import IterableDataset as _IterableBase
except Exception:  # noqa: BLE001 - the orchestrator never builds one
    _IterableBase = object


class Snapshots(_IterableBase):
    """Iterate ``ds`` (ours) and put its ``stats()`` on an item every ``every_s`` (an empty string
    on the others): the counters of every worker reach the main process with the batches, at
    almost no cost per item (no per-item JSON, unlike the profiler's side channel)."""

    def __init__(self, ds: Any, every_s: float = 0.1) -> None:
        super().__init__()
        self.ds = ds
        self.every_s = every_s

    def __iter__(self):
        last = -1e9
        pid = os.getpid()
        for item in self.ds:
            now = time.monotonic()
            if now - last >= self.every_s:
                last = now
                snap = {"pid": pid, "stats": self.ds.stats()}
                acct = _sibling("bench_account").current()  # a forked worker inherits the trial's
                if acct is not None:
                    snap["account"] = acct.snapshot()
                item[SNAPSHOT_KEY] = json.dumps(snap, default=str)
            else:
                item[SNAPSHOT_KEY] = ""
            yield item


_STAGES = (
    "spans_s",
    "parquet_s",
    "fetch_s",
    "synthesize_s",
    "open_s",
    "decode_s",
    "decode_job_s",
    "assemble_s",
    "queue_wait_s",
    "admit_wait_s",
    "transforms_s",
)


def _sum_snapshots(snaps: dict[int, dict]) -> dict:
    """Sum the latest ``stats()`` of every process: counters, stage seconds and seconds per item."""
    out: dict[str, Any] = {}
    for k in (
        "items",
        "frames_decoded",
        "frames_returned",
        "decode_calls",
        "decoder_opens",
        "bytes_fetched",
        "bytes_needed",
        "requests",
        *_STAGES,
    ):
        out[k] = sum(float(s.get(k) or 0) for s in snaps.values())
    items = out["items"]
    out["stage_ms_per_item"] = {k[:-2]: 1e3 * out[k] / items for k in _STAGES} if items else {}
    out["frames_decoded_per_returned"] = (
        out["frames_decoded"] / out["frames_returned"] if out["frames_returned"] else None
    )
    out["processes"] = len(snaps)
    return out


def _download(url: str, files: list[str], dst: Path, threads: int = 8) -> int:
    """GET every file under ``url`` into ``dst`` with ``threads`` parallel requests (one listing
    request first, standing in for the Hub's file-list call); returns the bytes received."""
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    with urllib.request.urlopen(url, timeout=60) as r:
        r.read()

    def get(rel: str) -> int:
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url + rel, timeout=120) as r, open(out, "wb") as f:
            n = 0
            while True:
                chunk = r.read(1 << 20)
                if not chunk:
                    return n
                f.write(chunk)
                n += len(chunk)

    with ThreadPoolExecutor(threads) as ex:
        return sum(ex.map(get, files))


#: ``ours+NAME=VALUE`` options that set the DataLoader, not the dataset: ``sharing_strategy``
#: (torch.multiprocessing's), ``collate`` (``packed``: ``lerobotstream.packed_collate``, ours' default;
#: ``default``: torch's ``default_collate``)
_LOADER_OPTIONS = ("sharing_strategy", "collate")


def _make_dataset(spec: dict, root: str):
    kind, nw, uint8 = spec["kind"], int(spec["num_workers"]), bool(spec["uint8"])
    if kind == "ours":
        from lerobotstream import StreamingLeRobotDataset, StreamingMultiLeRobotDataset

        opts = {
            k: v
            for k, v in (spec.get("options") or {}).items()
            if not k.startswith("env.") and k not in _LOADER_OPTIONS
        }
        common = dict(
            return_uint8=uint8, max_num_shards=max(1, nw), batch_size=spec["batch_size"], seed=spec["seed"], **opts
        )
        if spec.get("delta_timestamps"):
            common["delta_timestamps"] = spec["delta_timestamps"]
        mix = spec.get("mixture")
        if mix:
            ds = StreamingMultiLeRobotDataset(
                [f"bench/part{i}" for i in range(mix["parts"])],
                roots=_part_roots(root, mix["parts"]),
                weights=mix["weights"],
                **common,
            )
        else:
            ds = StreamingLeRobotDataset(root=root, **common)
        return Snapshots(ds), ds
    if kind == "lerobot":
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        ds = LeRobotDataset(
            spec["repo_id"], root=root, return_uint8=uint8, delta_timestamps=spec.get("delta_timestamps")
        )
        return ds, ds
    if kind == "lerobot-streaming":
        from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset as LeRobotStreaming

        ds = LeRobotStreaming(
            spec["repo_id"],
            root=root,
            max_num_shards=max(1, nw),
            return_uint8=uint8,
            seed=spec["seed"],
            delta_timestamps=spec.get("delta_timestamps"),
        )
        return ds, ds
    raise ValueError(f"unknown contestant kind {kind!r}")


def _part_roots(root: str, n: int) -> list[str]:
    """The parts of a mixture folder (a local path or the store's URL)."""
    return [f"{str(root).rstrip('/')}/part{i}" + ("/" if "://" in str(root) else "") for i in range(n)]


def run_trial(spec: dict) -> dict:
    """One contestant run (inside its process): build, draw ``samples``, measure. See the module doc."""
    if spec["kind"] == "warmup":
        return _warmup(spec)
    if spec["kind"] == "limit":
        return _sibling("bench_limit").decode_limit(spec)
    if spec["kind"] == "prepare":
        return _prepare(spec)
    if spec["kind"] == "step_alone":
        return _step_alone(spec)
    # the CPU accounting's hooks (bench_account), for this trial only (the process runs others after it)
    acct = _sibling("bench_account").Accounting().install() if spec.get("account") else None
    try:
        return _loader_trial(spec, acct)
    finally:
        if acct is not None:
            acct.uninstall()


def _loader_trial(spec: dict, acct) -> dict:
    import torch
    from torch.utils.data import DataLoader

    if spec["kind"].startswith("lerobot"):
        from lerobot.datasets import video_utils

        video_utils._default_decoder_cache.clear()  # every trial opens its decoders afresh
    t0 = time.perf_counter()
    nw, bs = int(spec["num_workers"]), int(spec["batch_size"])
    root, download_s, downloaded, tmp = spec["root"], None, None, None
    if spec.get("download_url"):
        tmp = tempfile.mkdtemp(prefix="bench-download-")
        downloaded = _download(spec["download_url"], spec["files"], Path(tmp))
        download_s = time.perf_counter() - t0
        root = tmp
    try:
        loader_ds, ds = _make_dataset(spec, root)
        construct_s = time.perf_counter() - t0 - (download_s or 0.0)
        ctx = spec.get("mp_context") if nw else None
        kw: dict[str, Any] = dict(batch_size=bs, num_workers=nw, persistent_workers=False)
        if nw:
            kw.update(multiprocessing_context=ctx, prefetch_factor=int(spec.get("prefetch_factor", 4)))
        if spec["kind"] == "lerobot":
            kw.update(shuffle=True, generator=torch.Generator().manual_seed(int(spec["seed"])))
        collate = (spec.get("options") or {}).get("collate")
        if collate is None and spec["kind"] == "ours":  # ours as lerobotstream-train and the README run it
            try:
                from lerobotstream import packed_collate  # noqa: F401

                collate = "packed"
            except ImportError:  # ours@PATH of a checkout before it
                collate = "default"
        if collate == "packed":
            from lerobotstream import packed_collate

            kw["collate_fn"] = packed_collate
        elif collate not in (None, "default"):
            raise ValueError(f"collate must be packed or default, got {collate!r}")
        strategy = (spec.get("options") or {}).get("sharing_strategy")
        if strategy:  # torch.multiprocessing's, for this process and the workers it forks
            torch.multiprocessing.set_sharing_strategy(strategy)
        mode = spec.get("loader")  # ours: "threads" / "processes": lerobotstream.StreamLoader, else a DataLoader
        if mode in ("threads", "processes"):
            from lerobotstream import StreamLoader

            loader = StreamLoader(
                ds, bs, num_workers=nw, mode=mode, collate_fn=kw.get("collate_fn"), multiprocessing_context=ctx
            )
        else:
            loader = DataLoader(loader_ds, **kw)
        mem = _pss_sampler()
        try:
            # one in-process StreamLoader stream: its counters are this dataset's (shards have their own runs)
            own = ds.stats if mode in ("threads", "processes") and nw == 0 else None
            res = _drive(
                loader,
                spec,
                t0,
                mem,
                step=step_fn(spec.get("step") or "none"),
                stats=own,
                acct=acct,
                main_role="hand_offs" if nw and mode not in ("threads",) else "pipeline_python",
            )
        finally:
            mem.__exit__(None, None, None)
        summ = mem.summary()
        res.update(
            collate=collate or "default",
            construct_s=construct_s,
            download_s=download_s,
            downloaded_bytes=downloaded,
            peak_pss_mib=summ["peak_pss_sum_bytes"] / 2**20,
            peak_rss_mib=summ["peak_rss_sum_bytes"] / 2**20,
        )
        if mode in ("threads", "processes"):
            res["loader_mode"] = loader.mode
        if spec["kind"] == "ours":
            st = getattr(ds, "_setup", {})
            res["ours_setup_s"] = {k: v for k, v in st.items() if isinstance(v, float)}
        return res
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def gil_step(ms: float) -> None:
    """A training step whose Python holds the GIL: a pure-Python loop of ``ms`` ms (wall)."""
    end = time.perf_counter() + ms / 1000
    x = 0
    while time.perf_counter() < end:
        for i in range(200):
            x += i


def make_nogil_step(ms: float):
    """A step that releases the GIL: ``ms`` ms of 128x128 torch matmuls (each ~0.1-1 ms, the GIL
    released inside; the loop's Python between them holds it for microseconds), wall-time bounded
    like :func:`gil_step`, so no calibration (torch's OpenMP speed changes once a pipeline ran)."""
    import torch

    a = torch.randn(128, 128)

    def step() -> None:
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:
            a @ a

    return step


def step_fn(text: str):
    """``none`` (None), ``gil:MS`` or ``nogil:MS``: the synthetic training step run after each batch."""
    if text == "none":
        return None
    kind, _, ms = text.partition(":")
    if kind not in ("gil", "nogil") or not ms:
        raise ValueError(f"step must be none, gil:MS or nogil:MS, got {text!r}")
    return (lambda: gil_step(float(ms))) if kind == "gil" else make_nogil_step(float(ms))


def _step_alone(spec: dict) -> dict:
    """Seconds per call of each step in ``spec["steps"]`` with no loader running (20 calls after one)."""
    out = {}
    for text in spec["steps"]:
        fn = step_fn(text)
        if fn is None:
            continue
        fn()
        t = time.perf_counter()
        for _ in range(20):
            fn()
        out[text] = (time.perf_counter() - t) / 20
    return {"step_alone_s": out}


class GilProfile:
    """``py-spy record --gil --idle --nonblocking --format raw`` of this process for
    ``duration_s`` at ``rate`` Hz: the samples in which some thread of the process held the GIL,
    less those of the benchmark's own PSS sampler thread. ``held_s`` = those samples / rate
    (py-spy's "behind in sampling" warnings are kept: they mean the count is low);
    ``top_frames``: where the GIL was held (innermost frame, samples)."""

    def __init__(self, py_spy: str, rate: int, duration_s: float) -> None:
        self.rate, self.duration_s = int(rate), float(max(1, int(duration_s)))  # py-spy takes whole seconds
        fd, self.out = tempfile.mkstemp(prefix="bench-gil-", suffix=".txt")
        os.close(fd)
        self.started: float | None = None
        self.warnings: list[str] = []
        self.proc = subprocess.Popen(
            [
                py_spy,
                "record",
                "--pid",
                str(os.getpid()),
                "--gil",
                "--idle",
                "--nonblocking",
                "--format",
                "raw",
                "--rate",
                str(self.rate),
                "--duration",
                str(int(self.duration_s)),
                "--output",
                self.out,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if self.started is None and "Sampling process" in line:
                self.started = time.perf_counter()
            elif "behind" in line or "rror:" in line:
                self.warnings.append(line.strip())

    def running(self) -> bool:
        return self.proc.poll() is None

    def result(self) -> dict:
        self.proc.wait(60)
        self._reader.join(10)
        held = own = 0
        leaves: dict[str, int] = {}
        try:
            with open(self.out) as f:
                for line in f:
                    head, _, count = line.rstrip().rpartition(" ")
                    if head and count.isdigit():
                        held += int(count)
                        if "MemorySampler" in head:  # the benchmark's own PSS sampler thread
                            own += int(count)
                            continue
                        leaf = head.rsplit(";", 1)[-1]
                        leaves[leaf] = leaves.get(leaf, 0) + int(count)
            os.unlink(self.out)
        except OSError as exc:
            self.warnings.append(f"no py-spy output: {exc}")
        top = sorted(leaves.items(), key=lambda kv: -kv[1])[:10]
        return {
            "gil_samples": held - own,
            "sampler_gil_samples": own,
            "rate": self.rate,
            "duration_s": self.duration_s,
            "started": self.started,
            "held_s": (held - own) / self.rate,
            "warnings": self.warnings[:5],
            "exit_code": self.proc.returncode,
            "top_frames": top,
        }


def _drive(loader, spec: dict, t0: float, mem, step=None, stats=None, acct=None, main_role="pipeline_python") -> dict:
    """Draw ``spec["samples"]`` samples (and, with ``spec["gil"]``, until the GIL profile of the
    steady part ended; with ``acct``, for at least ``spec["account"]["seconds"]`` of it), calling
    ``step()`` after each batch; see the module doc for what it reports.
    ``stats``: this process's dataset counters (``ds.stats``) when the batches carry none (a
    StreamLoader), read after the warm-up and at the end. ``acct``: the trial's
    :class:`bench_account.Accounting` (its table in ``out["account"]``; ``main_role``: where this
    process's main thread's CPU outside the stages goes)."""
    import math

    nw, target = int(spec["num_workers"]), int(spec["samples"])
    warm_k = max(1, nw)  # every worker delivered its first batch
    snaps: dict[int, dict] = {}
    warm_snaps: dict[int, dict] = {}
    anchors: list[list[int]] = []
    n = k = 0
    first_s = t_w = n_w = cpu_w = own_w = None
    frames_per_sample = None
    waited = stepped = 0.0
    gil = None
    gil_window: list[tuple[float, int]] = []  # (time, samples) of each batch while the profile runs
    acc_s = float((spec.get("account") or {}).get("seconds", 0.0)) if acct is not None else 0.0
    # the accounting's window starts once the pipeline's decode lookahead is out of the way (the
    # frames it decodes ahead of the first batches would count against the window's samples)
    acc_warm = int((spec.get("account") or {}).get("warm_samples", 0))
    # and lasts long enough for the chunks decoded at its two edges to weigh little
    acc_min = int((spec.get("account") or {}).get("min_samples", 0))
    acc_first: dict[int, dict] = {}  # each worker's first accounting reading after the warm-up, and its last
    acc_last: dict[int, dict] = {}
    edge0 = perf = None
    n_acc = 0
    t_iter = time.perf_counter()
    it = iter(loader)
    while (
        n < target
        or (gil is not None and gil.running())
        or (acc_s and (edge0 is None or time.perf_counter() - edge0["t"] < acc_s or n - n_acc < acc_min))
    ):
        a = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        now = time.perf_counter()
        k += 1
        if t_w is not None:
            waited += now - a
        for s in batch.pop(SNAPSHOT_KEY, None) or []:
            if s:
                d = json.loads(s)
                pid = int(d["pid"])
                snaps[pid] = d["stats"]
                if t_w is not None:
                    warm_snaps.setdefault(pid, d["stats"])  # each process's first reading after the warm-up
                if d.get("account") is not None:
                    acc_last[pid] = d["account"]
                    if edge0 is not None:
                        acc_first.setdefault(pid, d["account"])
        b = int(batch["index"].shape[0])
        if frames_per_sample is None:
            frames_per_sample = sum(
                math.prod(v.shape[1:-3]) for v in batch.values() if hasattr(v, "shape") and v.ndim >= 4
            )
        if "dataset_index" in batch:  # a mixture: (dataset, episode, frame)
            anchors.extend(
                zip(batch["dataset_index"].tolist(), batch["episode_index"].tolist(), batch["frame_index"].tolist())
            )
        else:
            anchors.extend(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist()))
        n += b
        if gil is not None and gil.started is not None and gil.running():
            gil_window.append((now, b))
        if k == 1:
            first_s, first_iter_s = now - t0, now - t_iter
            mem.sample()
        if k == warm_k:
            t_w, n_w, cpu_w, own_w = now, n, _tree_cpu_s(), mem.own_cpu_s
            if stats is not None:
                warm_snaps[os.getpid()] = stats()
            if spec.get("gil"):
                g = spec["gil"]
                gil = GilProfile(g["py_spy"], g.get("rate", 250), g.get("duration_s", 2.0))
        if acct is not None and edge0 is None and k >= warm_k and n - b >= acc_warm:
            edge0 = _account_edge(acct)
            if (spec.get("account") or {}).get("perf", True):
                perf = _sibling("bench_account").PerfSampler(list(edge0["tree"]))
            n_acc = n
        del batch
        if step is not None:
            s0 = time.perf_counter()
            step()
            if t_w is not None and k > warm_k:
                stepped += time.perf_counter() - s0
    t_end = time.perf_counter()
    edge1 = (
        _account_edge(acct, exclude={perf.proc.pid} if perf is not None and perf.proc else ())
        if edge0 is not None
        else None
    )
    cpu_end, own_end = _tree_cpu_s(), mem.own_cpu_s
    mem.sample()  # the workers' last reading, before the iterator stops them
    if stats is not None:
        snaps[os.getpid()] = stats()
    del it
    steady = steady_cpu = None
    steps = k - warm_k if t_w is not None else 0
    if t_w is not None and n > n_w and t_end > t_w:
        steady = (n - n_w) / (t_end - t_w)
        steady_cpu = 1e3 * max(0.0, _cpu_delta_s(cpu_w, cpu_end) - (own_end - own_w)) / (n - n_w)
    out = {
        "samples": n,
        "batches": k,
        "wall_s": t_end - t0,
        "first_batch_s": first_s,
        "first_batch_from_iter_s": first_iter_s if k else None,
        "steady_samples_per_s": steady,
        "cpu_ms_per_sample": steady_cpu,
        "frames_per_sample": frames_per_sample,
        "anchors": anchors,
    }
    if t_w is not None and t_end > t_w:
        out.update(
            steps_per_s=steps / (t_end - t_w),
            wait_share=waited / (t_end - t_w),
            step_s=stepped / steps if step is not None and steps else None,
        )
    if gil is not None:
        g = gil.result()
        win = [m for t, m in gil_window if g["started"] is not None and t <= g["started"] + g["duration_s"]]
        g["window_samples"] = sum(win)
        g["gil_ms_per_sample"] = 1e3 * g["held_s"] / g["window_samples"] if g["window_samples"] else None
        out["gil"] = g
    if edge1 is not None:
        ba = _sibling("bench_account")
        perf_samples = perf.stop() if perf is not None else None
        pairs = {os.getpid(): (edge0["snap"], edge1["snap"])}
        pairs.update({pid: (acc_first[pid], acc_last[pid]) for pid in acc_first if pid in acc_last})
        out["account"] = ba.account(
            wall_s=edge1["t"] - edge0["t"],
            samples=n - n_acc,
            cpus=len(ba.MachineClock().cpus),
            machine=(edge0["machine"], edge1["machine"]),
            tree=(edge0["tree"], edge1["tree"]),
            snaps=pairs,
            main_pid=os.getpid(),
            main_role=main_role,
            perf_samples=perf_samples,
            perf_error=None if perf is None else perf.error,
        )
        out["account"].update(
            hooks_installed=len(acct.installed), hooks_missing=acct.missing, processes_accounted=len(pairs)
        )
    if snaps:
        out["ours_stats"] = _sum_snapshots(snaps)
        steady = {pid: _diff(snaps[pid], w) for pid, w in warm_snaps.items() if pid in snaps}
        if steady and all(x.get("items", 0) > 0 for x in steady.values()):
            out["ours_stats_steady"] = _sum_snapshots(steady)
    return out


def _account_edge(acct, exclude=()) -> dict:
    """The accounting's readings at an edge of the steady window: this process's snapshot, the
    process tree's CPU and faults (``/proc``; ``exclude``: the benchmark's own children, e.g.
    ``perf``), the machine's clock (``/proc/stat``)."""
    ba = _sibling("bench_account")
    me = os.getpid()
    return {
        "snap": acct.snapshot(),
        "tree": {p: ba.proc_stat(p) for p in (me, *_children(me)) if p not in exclude},
        "machine": ba.MachineClock().read(),
        "t": time.perf_counter(),
    }


def _diff(last: dict, first: dict) -> dict:
    """Counters of ``last`` minus those of ``first`` (the same process's stats, later and earlier)."""
    out = {}
    for k, v in last.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(first.get(k), (int, float)):
            out[k] = v - first[k]
    return out


def _warmup(spec: dict) -> dict:
    t = time.perf_counter()
    import torch  # noqa: F401
    import torchcodec.decoders  # noqa: F401

    mods = {
        "ours": ["lerobotstream"],
        "lerobot": ["lerobot.datasets.lerobot_dataset", "lerobot.datasets.streaming_dataset"],
    }[spec["side"]]
    for m in mods:
        importlib.import_module(m)
    ver = {}
    for m in ("torch", "torchcodec", "lerobot", "lerobotstream"):
        mod = sys.modules.get(m)
        if mod is not None:
            ver[m] = getattr(mod, "__version__", "?")
    return {
        "import_s": time.perf_counter() - t,
        "versions": ver,
        "python": sys.version.split()[0],
        "lerobotstream_file": getattr(sys.modules.get("lerobotstream"), "__file__", None),
    }


def _prepare(spec: dict) -> dict:
    """Ours' sidecar for this root, built (or found) before the rounds: trials start warm."""
    from lerobotstream import StreamingLeRobotDataset

    t = time.perf_counter()
    roots = _part_roots(spec["root"], spec["mixture"]["parts"]) if spec.get("mixture") else [spec["root"]]
    status = [StreamingLeRobotDataset(root=r).sidecar_status for r in roots]
    return {"sidecar": "+".join(status), "construct_s": time.perf_counter() - t}


def serve() -> int:
    """Contestant loop: one JSON trial spec per stdin line, one result line on the original stdout."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # libraries' prints go to stderr, never into the result channel
    parent = os.getppid()

    def orphaned() -> None:  # the orchestrator died (even kill -9): stop, also mid-trial
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=orphaned, daemon=True).start()
    for line in sys.stdin:
        if not line.strip():
            continue
        spec = json.loads(line)
        try:
            res = run_trial(spec)
        except BaseException as exc:  # noqa: BLE001 - reported to the orchestrator as the trial's error
            import traceback

            traceback.print_exc()
            lines = [x for x in str(exc).strip().splitlines() if x.strip()] or [""]
            where = " (in a DataLoader worker)" if len(lines) > 1 and "DataLoader worker" in lines[0] else ""
            res = {"error": f"{type(exc).__name__}: {lines[-1].strip()}{where}"[:1500]}  # a worker's: its last line
        out.write(RESULT_PREFIX + json.dumps(res) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--serve"]:
        raise SystemExit("usage: python tools/bench_trial.py --serve (started by python -m tools.bench)")
    raise SystemExit(serve())
