"""Micro-benchmarks of one layer each, one command with a subcommand per layer (run from the
repository root; ``python -m tools.microbench SUBCOMMAND --help`` gives each one's options):

    python -m tools.microbench decode       # mini-MP4 decoders vs one whole-file decoder (frames/s, bytes/frame)
    python -m tools.microbench first-batch  # time to the first batch over a remote store, and its requests
    python -m tools.microbench index        # derived mmap index vs the sidecar NPZ: size, open time, per source
    python -m tools.microbench parse        # C sample-table parser vs the pure-Python reference (samples/s)
    python -m tools.microbench planner      # planner anchors/s by pool size
    python -m tools.microbench validate     # lerobotstream.validate: time and bytes read, local and over HTTP

Each subcommand's code is the module of its name here (``first-batch`` -> ``first_batch.py``), with a
``main(argv) -> int``. The peer benchmark against LeRobot is ``python -m tools.bench``.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable, Sequence

#: subcommand -> (module of this package, one-line summary)
SUBCOMMANDS = {
    "decode": ("decode", "mini-MP4 decoders vs one whole-file decoder"),
    "first-batch": ("first_batch", "time to the first batch over a remote store, and its requests"),
    "index": ("index", "derived mmap index vs the sidecar NPZ"),
    "parse": ("parse", "C sample-table parser vs the pure-Python reference"),
    "planner": ("planner", "planner anchors/s by pool size"),
    "validate": ("validate", "lerobotstream.validate's time and bytes read, local and over HTTP"),
}


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """The shortest wall time of ``repeat`` calls of ``fn``, seconds (``inf`` when ``repeat`` < 1)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    """``SUBCOMMAND [ARGS...]``: runs that subcommand's ``main(ARGS)`` and returns its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        lines = [f"  {name:<12} {summary}" for name, (_, summary) in SUBCOMMANDS.items()]
        text = "usage: python -m tools.microbench {" + ",".join(SUBCOMMANDS) + "} [ARGS...]\n\n" + "\n".join(lines)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"unknown subcommand {argv[0]!r}\n{text}", file=sys.stderr)
            return 2
        print(text)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    module = importlib.import_module(f"{__name__}.{SUBCOMMANDS[name][0]}")
    prog, sys.argv[0] = sys.argv[0], f"python -m tools.microbench {name}"  # argparse's usage line
    try:
        return int(module.main(rest) or 0)
    finally:
        sys.argv[0] = prog
