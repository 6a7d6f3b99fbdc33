"""The CPU accounting of one bench row: wall time × usable CPUs = CPU per stage + other processes +
idle cores, each measured, with the sum checked against the whole.

Inside the contestant process (and the DataLoader workers it forks, which inherit the hooks),
:class:`Accounting` wraps the functions that mark a stage and keeps, per thread, the CPU time
(``getrusage(RUSAGE_THREAD)``: user + system, microseconds) and minor page faults spent inside
them, exclusive of the stages nested inside (a fetch's synthesis counts as span/synth, not fetch):

- **fetch**: ``DatasetReader.fetch`` (the byte range, the episode's Parquet rows) and the fetch threads'
  CPU outside it;
- **span/synth**: ``EpisodeSpans.span`` (``plan_span``), ``check_sample_framing``, ``synthesize``;
- **FFmpeg decode** and **colour conversion**: torchcodec's ``get_frames_in_range`` /
  ``get_frames_at`` (one call decodes and converts YUV → RGB with swscale); split by ``perf``
  samples of the decode threads (leaf library: ``libswscale``/``libavfilter`` → colour conversion;
  ``libdav1d``, ``libavcodec``, ``libavutil``, ``libavformat``, torchcodec's → FFmpeg decode) when
  ``perf`` can record this process, else left as one row (colour conversion "not split");
- **frame copy**: the C de-interleave into the item's or batch's tensor (``frames_to_u8_chw`` /
  ``frames_to_float_chw`` as ``dataset._assemble`` calls them);
- **batch assembly**: ``EpisodeJob.assemble`` (an item: its keys, windows, pads, small keys' rows),
  ``collate_items`` (a StreamLoader batch), ``PackedCollate.__call__`` / ``default_collate`` (a
  DataLoader worker's batch);
- **hand-offs**: ``Future.set_result``/``set_exception``/``result``, ``ThreadPoolExecutor.submit``,
  ``queue.Queue.put``/``get``, ``multiprocessing``'s ``Queue.put`` (a worker's batch into the
  DataLoader's queue), and every thread whose job is a hand-off (the queue's feeder thread that
  pickles a batch into shared memory, StreamLoader's copy-out and ring-return threads, and the
  DataLoader's iterating thread in the training process, which unpickles and maps each batch);
- **Python in the pipeline**: the rest of the pipeline threads' CPU (the iterating thread's
  ``Pipeline`` loop, planner and cache calls; the decode jobs' bookkeeping; the assembly
  threads' loop);
- **page faults**: every minor fault of the process tree × the CPU one fault costs, measured in
  the same process before the trial (fresh anonymous pages touched once each); each stage above is
  given net of its own faults;
- **unattributed**: the process tree's CPU (``/proc``, the exact window) minus all the above
  (threads that ended inside the window, the window edges of the workers' readings; a StreamLoader
  processes-mode worker's whole CPU, whose readings have no way to the training process);
- **the benchmark's own** (its PSS sampler thread), **other processes** and **idle cores**: from
  ``/proc/stat`` over the CPUs this process may use.

Standard library only at module level (it runs inside contestant processes, ``tools/bench_trial.py``).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "Accounting",
    "STAGES",
    "MachineClock",
    "PerfSampler",
    "account",
    "current",
    "fault_cost_s",
    "format_account",
    "median_accounts",
    "proc_stat",
]

#: the stages, in table order (row label, JSON key)
STAGES = (
    ("fetch", "fetch"),
    ("span/synth", "span_synth"),
    ("FFmpeg decode", "ffmpeg_decode"),
    ("colour conversion", "colour_conversion"),
    ("frame copy", "frame_copy"),
    ("batch assembly", "batch_assembly"),
    ("Python in the pipeline", "pipeline_python"),
    ("hand-offs", "hand_offs"),
    ("page faults", "page_faults"),
    ("unattributed", "unattributed"),
)
_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_current: Accounting | None = None

#: hooked functions: (module, attribute path, region label)
TARGETS = (
    ("lerobotstream.dataset._reader", "DatasetReader.fetch", "fetch"),
    ("lerobotstream.dataset._reader", "EpisodeSpans.span", "span_synth"),
    ("lerobotstream.mp4", "check_sample_framing", "span_synth"),
    ("lerobotstream.mp4", "synthesize", "span_synth"),
    ("torchcodec.decoders", "VideoDecoder.get_frames_in_range", "decode_call"),
    ("torchcodec.decoders", "VideoDecoder.get_frames_at", "decode_call"),
    ("lerobotstream.dataset._assemble", "frames_to_u8_chw", "frame_copy"),
    ("lerobotstream.dataset._assemble", "frames_to_float_chw", "frame_copy"),
    ("lerobotstream.dataset._decodejob", "EpisodeJob.assemble", "batch_assembly"),
    ("lerobotstream.loader._batch", "collate_items", "batch_assembly"),
    ("lerobotstream.loader._threads", "collate_items", "batch_assembly"),
    ("lerobotstream.loader._procs", "collate_items", "batch_assembly"),
    ("lerobotstream.dataset._collate", "PackedCollate.__call__", "batch_assembly"),
    ("concurrent.futures._base", "Future.set_result", "hand_offs"),
    ("concurrent.futures._base", "Future.set_exception", "hand_offs"),
    ("concurrent.futures._base", "Future.result", "hand_offs"),
    ("concurrent.futures.thread", "ThreadPoolExecutor.submit", "hand_offs"),
    ("queue", "Queue.put", "hand_offs"),
    ("queue", "Queue.get", "hand_offs"),
    ("multiprocessing.queues", "Queue.put", "hand_offs"),
)


def _role(name: str) -> str:
    """A thread's job from its name: where its CPU outside the hooked stages goes."""
    if name.startswith("lrs-decode") or name.startswith("lrs-assemble"):
        return "pipeline_python"
    if name.startswith("lrs-fetch"):
        return "fetch"
    if name.startswith(("QueueFeederThread", "lrs-loader-copy", "lrs-ring-returns")) or "pin_memory" in name:
        return "hand_offs"
    if name.startswith("lrs-profile-memory"):
        return "bench"
    if name == "MainThread":
        return "main"
    return "unattributed"


def current() -> Accounting | None:
    """The :class:`Accounting` installed in this process (a forked DataLoader worker inherits it)."""
    return _current


def _task_stat(tid: int) -> tuple[float, int] | None:
    """(CPU seconds, minor faults) of thread ``tid`` of this process (``/proc``), None if gone."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            x = f.read().rsplit(")", 1)[1].split()
        return (int(x[11]) + int(x[12])) / _CLK, int(x[7])
    except (OSError, IndexError, ValueError):
        return None


def proc_stat(pid: int) -> tuple[float, int]:
    """(CPU seconds, minor faults) of process ``pid`` and its ended threads (``/proc``; 0 if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            x = f.read().rsplit(")", 1)[1].split()
        return (int(x[11]) + int(x[12])) / _CLK, int(x[7])
    except (OSError, IndexError, ValueError):
        return 0.0, 0


class Accounting:
    """Per-thread CPU and minor faults inside the hooked stages of this process (module doc).

    :meth:`install` wraps :data:`TARGETS` (those missing in this checkout are skipped and listed in
    ``missing``); :meth:`snapshot` reads every counter and every live thread's CPU and faults.
    """

    def __init__(self) -> None:
        self._tls = threading.local()
        #: native thread id -> label -> [CPU s, faults, calls] (each thread writes only its own)
        self.regions: dict[int, dict[str, list]] = {}
        self.installed: list[str] = []
        self.missing: list[str] = []
        self.fault_cost_s: float | None = None
        self._undo: list[tuple[Any, str, Any]] = []

    # --- hooks ----------------------------------------------------------------------------------
    def _wrap(self, fn: Callable, label: str) -> Callable:
        # the thread's CPU clock (precise: getrusage's times lag by up to a scheduler tick) and its
        # minor faults (getrusage's count is exact)
        tls, regions = self._tls, self.regions
        thread_time, getrusage, RUSAGE_THREAD = time.thread_time, resource.getrusage, resource.RUSAGE_THREAD

        frames_of = _frames_of if label == "decode_call" else None

        def hooked(*a, **k):
            stack = getattr(tls, "stack", None)
            if stack is None:
                stack = tls.stack = []
            frame = [thread_time(), getrusage(RUSAGE_THREAD).ru_minflt, 0.0, 0]
            stack.append(frame)
            out = None
            try:
                out = fn(*a, **k)
                return out
            finally:
                flt = getrusage(RUSAGE_THREAD).ru_minflt - frame[1]
                cpu = thread_time() - frame[0]
                stack.pop()
                if stack:  # the enclosing stage counts only what is not nested
                    stack[-1][2] += cpu
                    stack[-1][3] += flt
                tid = threading.get_native_id()
                mine = regions.get(tid)
                if mine is None:
                    mine = regions[tid] = {}
                acc = mine.get(label)
                if acc is None:
                    acc = mine[label] = [0.0, 0, 0, 0]
                acc[0] += cpu - frame[2]
                acc[1] += flt - frame[3]
                acc[2] += 1
                if frames_of is not None:
                    acc[3] += frames_of(out)

        hooked.__wrapped__ = fn
        return hooked

    def install(self, targets=TARGETS) -> Accounting:
        """Wrap the stage functions (``(module, attribute path, label)``; idempotent per process);
        measure the fault cost; make this the process's :func:`current` accounting."""
        global _current
        import importlib

        for mod_name, path, label in targets:
            try:
                obj = importlib.import_module(mod_name)
                *owners, attr = path.split(".")
                for o in owners:
                    obj = getattr(obj, o)
                fn = obj.__dict__[attr] if isinstance(obj, type) else getattr(obj, attr)
            except (ImportError, AttributeError, KeyError):
                self.missing.append(f"{mod_name}.{path}")
                continue
            if getattr(fn, "__wrapped__", None) is not None and getattr(fn, "_lrs_account", False):
                continue
            hooked = self._wrap(fn, label)
            hooked._lrs_account = True
            self._undo.append((obj, attr, fn))
            setattr(obj, attr, hooked)
            self.installed.append(f"{mod_name}.{path}")
        self.fault_cost_s = fault_cost_s()
        _current = self
        return self

    def uninstall(self) -> None:
        global _current
        for obj, attr, fn in reversed(self._undo):
            setattr(obj, attr, fn)
        self._undo.clear()
        if _current is self:
            _current = None

    # --- readings -------------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """Every counter now: ``{pid, t, cpu_s, faults, threads: {tid: [name, CPU s, faults]},
        regions: {tid: {label: [CPU s, faults, calls]}}}`` (plain values: JSON)."""
        pid = os.getpid()
        threads = {}
        for t in threading.enumerate():
            tid = t.native_id
            st = _task_stat(tid) if tid is not None else None
            if st is None:
                continue
            try:  # the thread's precise clock where Python has its handle
                cpu = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            except (OSError, AttributeError, ProcessLookupError):
                cpu = st[0]
            threads[str(tid)] = [t.name, cpu, st[1]]
        cpu, faults = proc_stat(pid)
        return {
            "pid": pid,
            "t": time.monotonic(),
            "cpu_s": time.process_time(),
            "proc_cpu_s": cpu,
            "faults": faults,
            "fault_cost_s": self.fault_cost_s,
            "threads": threads,
            "regions": {str(tid): {k: list(v) for k, v in r.items()} for tid, r in list(self.regions.items())},
        }


def _frames_of(batch) -> int:
    """Frames a torchcodec decode call returned (its ``FrameBatch``'s first dimension; 0 if none)."""
    data = getattr(batch, "data", None)
    return int(data.shape[0]) if data is not None and getattr(data, "ndim", 0) >= 1 else 0


def fault_cost_s(pages: int = 8192) -> float:
    """CPU seconds one minor fault of a fresh anonymous page costs here: ``pages`` pages mapped
    and written once each (one byte per page) on this thread, best of three."""
    import mmap

    best = None
    step = mmap.PAGESIZE
    for _ in range(3):
        m = mmap.mmap(-1, pages * step)
        try:
            f0, c0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt, time.thread_time()
            for off in range(0, pages * step, step):
                m[off] = 1
            c1, f1 = time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        finally:
            m.close()
        flt = f1 - f0
        cpu = c1 - c0
        if flt > pages // 2:
            # the Python loop's own cost per page (the same loop over pages already mapped)
            m = mmap.mmap(-1, pages * step)
            try:
                for off in range(0, pages * step, step):
                    m[off] = 1
                c2 = time.thread_time()
                for off in range(0, pages * step, step):
                    m[off] = 2
                loop = time.thread_time() - c2
            finally:
                m.close()
            c = max(0.0, cpu - loop) / flt
            best = c if best is None else min(best, c)
    return best or 0.0


class MachineClock:
    """CPU time of the machine's CPUs this process may use, from ``/proc/stat``: busy and idle
    (idle + iowait) seconds since boot, read by :meth:`read`."""

    def __init__(self) -> None:
        try:
            self.cpus = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self.cpus = list(range(os.cpu_count() or 1))

    def read(self) -> tuple[float, float] | None:
        """(busy s, idle s) summed over the usable CPUs, None without ``/proc/stat``."""
        want = {f"cpu{i}" for i in self.cpus}
        busy = idle = 0.0
        try:
            with open("/proc/stat") as f:
                for line in f:
                    name, *vals = line.split()
                    if name in want:
                        v = [int(x) for x in vals[:8]]
                        idle += (v[3] + v[4]) / _CLK
                        busy += (sum(v) - v[3] - v[4]) / _CLK
        except OSError:
            return None
        return busy, idle


class PerfSampler:
    """``perf record`` of some processes for a window (leaf samples only, ``-F`` Hz), then the
    samples per thread and leaf library (``perf script -F tid,ip,dso``). ``error`` says why no
    samples came (no ``perf``, not permitted)."""

    def __init__(self, pids: list[int], freq: int = 499, perf: str | None = None) -> None:
        self.error: str | None = None
        self.proc = None
        self.perf = perf or shutil.which("perf")
        fd, self.out = tempfile.mkstemp(prefix="bench-perf-", suffix=".data")
        os.close(fd)
        if not self.perf:
            self.error = "perf not found"
            return
        try:
            self.proc = subprocess.Popen(
                [self.perf, "record", "-q", "-F", str(int(freq)), "-p", ",".join(str(p) for p in pids), "-o", self.out],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as exc:
            self.error = f"perf record: {exc}"

    def stop(self) -> dict[int, dict[str, int]]:
        """Stop recording; ``{tid: {leaf library: samples}}`` (empty, with ``error`` set, on failure)."""
        out: dict[int, dict[str, int]] = {}
        try:
            if self.proc is None:
                return out
            self.proc.send_signal(signal.SIGINT)
            try:
                _, err = self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                _, err = self.proc.communicate()
            if self.proc.returncode not in (0, -signal.SIGINT, 130) or not os.path.getsize(self.out):
                self.error = f"perf record failed ({self.proc.returncode}): {(err or '').strip()[-300:]}"
                return out
            res = subprocess.run(
                [self.perf, "script", "-i", self.out, "-F", "tid,ip,dso"], capture_output=True, text=True, timeout=120
            )
            for line in res.stdout.splitlines():
                parts = line.split()
                if len(parts) < 3 or not parts[0].isdigit():
                    continue
                dso = parts[-1].strip("()").rsplit("/", 1)[-1]
                d = out.setdefault(int(parts[0]), {})
                d[dso] = d.get(dso, 0) + 1
            if not out:
                self.error = f"perf script gave no samples: {res.stderr.strip()[-300:]}"
        except (OSError, subprocess.SubprocessError) as exc:
            self.error = f"perf: {exc}"
        finally:
            try:
                os.unlink(self.out)
            except OSError:
                pass
        return out


_COLOUR = ("libswscale", "libavfilter")
_DECODE = (
    "libdav1d",
    "libavcodec",
    "libavutil",
    "libavformat",
    "libaom",
    "libx264",
    "libx265",
    "libde265",
    "libvpx",
    "libtorchcodec",
)


def colour_share(samples: dict[int, dict[str, int]], decode_tids: set[int]) -> tuple[float | None, dict]:
    """The share of colour conversion in the decode threads' FFmpeg samples (module doc), and the
    leaf libraries' samples of those threads (for the JSON)."""
    libs: dict[str, int] = {}
    for tid, d in samples.items():
        if tid in decode_tids:
            for k, v in d.items():
                libs[k] = libs.get(k, 0) + v
    col = sum(v for k, v in libs.items() if k.startswith(_COLOUR))
    dec = sum(v for k, v in libs.items() if k.startswith(_DECODE))
    return (col / (col + dec) if col + dec else None), libs


def _delta(b: list | None, a: list | None, i: int) -> float:
    return (b[i] if b else 0) - (a[i] if a else 0)


def account(
    *,
    wall_s: float,
    samples: int,
    cpus: int,
    machine: tuple,
    tree: tuple,
    snaps: dict,
    main_pid: int,
    main_role: str,
    perf_samples: dict | None = None,
    perf_error: str | None = None,
) -> dict:
    """The accounting of one window (module doc).

    Args:
        wall_s: the window's wall time (s); samples: samples delivered in it; cpus: usable CPUs.
        machine: ``(start, end)`` :meth:`MachineClock.read` readings.
        tree: ``(start, end)`` ``{pid: (CPU s, minor faults)}`` of the process tree (:func:`proc_stat`).
        snaps: ``{pid: (first, last)}`` :meth:`Accounting.snapshot` pairs of each process.
        main_pid: the training process; main_role: where its main thread's CPU outside the stages
            goes (``pipeline_python`` when it runs a pipeline, ``hand_offs`` for a DataLoader with workers).
        perf_samples: :meth:`PerfSampler.stop` (None: not recorded); perf_error: why not.

    Returns:
        dict: ``rows`` (stage key → ``cpu_s``, ``ms_per_sample``, ``share`` of wall × CPUs),
        ``whole_cpu_s``, ``sum_share`` (every measured part ÷ the whole; unattributed left out),
        ``machine_share`` (``/proc/stat``'s time ÷ the whole), faults and their cost, how the
        colour conversion was split.
    """
    keys = [k for _, k in STAGES]
    cpu = dict.fromkeys(keys + ["bench"], 0.0)
    flt = dict.fromkeys(keys + ["bench"], 0.0)  # the minor faults each stage took (their CPU is in page faults)
    counted_faults = 0
    decode_own = 0.0
    decode_tids: set[int] = set()
    costs = [s[1].get("fault_cost_s") for s in snaps.values() if s[1].get("fault_cost_s")]
    c = min(costs) if costs else 0.0
    calls: dict[str, int] = {}
    decoded = 0.0
    t0, t1 = tree
    for pid, (a, b) in snaps.items():
        role_main = main_role if int(pid) == int(main_pid) else "pipeline_python"
        # a worker's readings ride on its items: scale its split to its CPU over the exact window
        snap_cpu = b["cpu_s"] - a["cpu_s"]
        exact = t1.get(int(pid), (0.0, 0))[0] - t0.get(int(pid), (0.0, 0))[0]
        k = exact / snap_cpu if int(pid) != int(main_pid) and snap_cpu > 0 and exact > 0 else 1.0
        in_regions: dict[str, list] = {}
        for tid, regs in b["regions"].items():
            before = a["regions"].get(tid, {})
            for label, now in regs.items():
                d_cpu, d_flt = k * _delta(now, before.get(label), 0), k * _delta(now, before.get(label), 1)
                calls[label] = calls.get(label, 0) + int(_delta(now, before.get(label), 2))
                if label == "decode_call" and len(now) > 3:
                    prev = before.get(label) or []
                    decoded += k * (now[3] - (prev[3] if len(prev) > 3 else 0))
                acc = in_regions.setdefault(tid, [0.0, 0])
                acc[0] += d_cpu
                acc[1] += d_flt
                own = d_cpu - d_flt * c
                counted_faults += d_flt
                if label == "decode_call":
                    decode_own += own
                    decode_tids.add(int(tid))
                    cpu["ffmpeg_decode"] += own
                    flt["ffmpeg_decode"] += d_flt
                else:
                    cpu[label] += own
                    flt[label] += d_flt
        for tid, (name, t_cpu, t_flt) in b["threads"].items():
            prev = a["threads"].get(tid)
            if prev is not None and prev[0] != name:
                prev = None  # a thread id reused by a new thread
            r = in_regions.get(tid, [0.0, 0])
            rest_cpu = k * (t_cpu - (prev[1] if prev else 0.0)) - r[0]
            rest_flt = k * (t_flt - (prev[2] if prev else 0)) - r[1]
            role = _role(name)
            if role == "main":
                role = role_main
            counted_faults += rest_flt
            cpu[role] += rest_cpu - rest_flt * c
            flt[role] += rest_flt
    ours = sum(t1[p][0] - t0.get(p, (0.0, 0))[0] for p in t1)
    faults = sum(t1[p][1] - t0.get(p, (0.0, 0))[1] for p in t1)
    cpu["page_faults"] = faults * c
    split = "not split: " + (perf_error or "perf not asked for")
    share_colour, libs = (None, {})
    if perf_samples:
        share_colour, libs = colour_share(perf_samples, decode_tids)
        if share_colour is not None:
            cpu["colour_conversion"] = decode_own * share_colour
            cpu["ffmpeg_decode"] -= cpu["colour_conversion"]
            split = f"perf: {100 * share_colour:.1f} % of the decode threads' FFmpeg samples in libswscale/libavfilter"
        else:
            split = "not split: perf recorded no FFmpeg samples on the decode threads"
    measured = sum(v for k, v in cpu.items() if k != "unattributed")
    cpu["unattributed"] = ours - measured
    m0, m1 = machine
    busy = idle = None
    if m0 and m1:
        busy, idle = m1[0] - m0[0], m1[1] - m0[1]
    whole = wall_s * cpus
    others = max(0.0, busy - ours) if busy is not None else None
    parts = measured + (others or 0.0) + (idle or 0.0)

    def row(x, k=None):
        if x is None:
            return None
        r = {"cpu_s": x, "ms_per_sample": 1e3 * x / samples if samples else None, "share": x / whole if whole else None}
        if k is not None and samples:
            r["faults_per_sample"] = flt[k] / samples
        return r

    rows = {k: row(cpu[k], k) for k in keys}
    rows["bench"] = row(cpu["bench"], "bench")
    rows["others"] = row(others)
    rows["idle"] = row(idle)
    return {
        "rows": rows,
        "whole_cpu_s": whole,
        "wall_s": wall_s,
        "cpus": cpus,
        "samples": samples,
        "ours_cpu_s": ours,
        "ms_per_sample_whole": 1e3 * whole / samples if samples else None,
        "sum_share": parts / whole if whole else None,
        "machine_share": (busy + idle) / whole if whole and busy is not None else None,
        "faults_per_sample": faults / samples if samples else None,
        "fault_cost_us": 1e6 * c,
        "faults_counted_share": counted_faults / faults if faults else None,
        "colour_split": split,
        "frames_decoded_per_sample": decoded / samples if samples else None,
        "perf_decode_libs": libs,
        "calls_per_sample": {k: v / samples for k, v in calls.items()} if samples else {},
    }


def _cell(r: dict | None) -> str:
    if not r or r.get("ms_per_sample") is None:
        return "–"
    return f"{r['ms_per_sample']:.2f} ({100 * r['share']:.0f} %)"


def format_account(columns: list[tuple[str, dict]]) -> str:
    """One markdown table: a row per stage, a column per ``(label, account())`` (core-ms per sample
    and share of wall × CPUs)."""
    if not columns:
        return ""
    lines = [
        "| stage (core-ms per sample, share of wall × CPUs) | " + " | ".join(c for c, _ in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for label, key in STAGES:
        cells = []
        for _, acc in columns:
            r = acc["rows"].get(key)
            cell = _cell(r)
            if key == "colour_conversion" and not str(acc.get("colour_split", "")).startswith("perf"):
                cell = "not split (in FFmpeg decode)"
            cells.append(cell)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for label, key in (
        ("the benchmark's own (PSS sampler)", "bench"),
        ("other processes", "others"),
        ("idle cores", "idle"),
    ):
        lines.append(f"| {label} | " + " | ".join(_cell(a["rows"].get(key)) for _, a in columns) + " |")
    lines.append(
        "| **whole: wall × CPUs** | "
        + " | ".join(
            f"**{a['ms_per_sample_whole']:.2f}** ({a['cpus']} CPUs)" if a.get("ms_per_sample_whole") else "–"
            for _, a in columns
        )
        + " |"
    )
    lines.append(
        "| measured parts ÷ whole (unattributed left out) | "
        + " | ".join(f"{100 * a['sum_share']:.1f} %" if a.get("sum_share") is not None else "–" for _, a in columns)
        + " |"
    )
    lines.append(
        "| where the faults were taken (per sample) | "
        + " | ".join(
            ", ".join(
                f"{lab} {a['rows'][k]['faults_per_sample']:.0f}"
                for lab, k in STAGES + (("own", "bench"),)
                if (a["rows"].get(k) or {}).get("faults_per_sample") and a["rows"][k]["faults_per_sample"] >= 1
            )
            or "–"
            for _, a in columns
        )
        + " |"
    )
    lines.append(
        "| frames decoded per sample | "
        + " | ".join(
            f"{a['frames_decoded_per_sample']:.2f}" if a.get("frames_decoded_per_sample") is not None else "–"
            for _, a in columns
        )
        + " |"
    )
    lines.append(
        "| minor faults per sample × µs each | "
        + " | ".join(
            f"{a['faults_per_sample']:.0f} × {a['fault_cost_us']:.2f}"
            if a.get("faults_per_sample") is not None
            else "–"
            for _, a in columns
        )
        + " |"
    )
    return "\n".join(lines)


def median_accounts(accounts: list[dict]) -> dict | None:
    """One account of several rounds' (:func:`account`): the median of each figure, per row."""
    import statistics

    accounts = [a for a in accounts if a]
    if not accounts:
        return None

    def med(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    rows = {}
    for key in accounts[0]["rows"]:
        rs = [a["rows"].get(key) for a in accounts]
        rows[key] = (
            None
            if all(r is None for r in rs)
            else {f: med([r.get(f) for r in rs if r]) for f in ("cpu_s", "ms_per_sample", "share", "faults_per_sample")}
        )
    out = {
        k: med([a.get(k) for a in accounts])
        for k in (
            "whole_cpu_s",
            "wall_s",
            "samples",
            "ours_cpu_s",
            "ms_per_sample_whole",
            "sum_share",
            "machine_share",
            "faults_per_sample",
            "fault_cost_us",
            "faults_counted_share",
            "frames_decoded_per_sample",
        )
    }
    out.update(
        rows=rows,
        cpus=accounts[0]["cpus"],
        runs=len(accounts),
        colour_split=accounts[0]["colour_split"],
        sum_shares=[a.get("sum_share") for a in accounts],
    )
    return out
