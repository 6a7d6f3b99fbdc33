"""What every benchmark module of ``tools/bench*`` shares: the checkout's paths, medians and number
formats of the tables, the machine's load average, the git commit, atomic writes of the JSON and
markdown files.

Standard library only (``tools/bench_trial.py`` also runs in LeRobot's venv, where this checkout's
package may not import)."""

from __future__ import annotations

import os
import statistics
import subprocess
from pathlib import Path

__all__ = ["ROOT", "LEROBOT_PYTHON", "atomic_write", "fmt", "git_head", "load_average", "load_summary", "median"]

ROOT = Path(__file__).resolve().parents[1]
LEROBOT_PYTHON = ROOT / ".venv-lerobot" / "bin" / "python"


def median(xs):
    """The median of the values that are not None (None when none is)."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec=".0f") -> str:
    """``x`` formatted with ``spec`` for a table cell, ``–`` for None."""
    return "–" if x is None else format(x, spec)


def load_average() -> float:
    """The 1-minute load average (NaN where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def load_summary(trials: list[dict]) -> dict:
    """``{min, median, max}`` of the load averages recorded before and after each trial."""
    xs = [x for t in trials for x in (t.get("load_before"), t.get("load_after")) if isinstance(x, float)]
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)} if xs else {}


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace`` (never half-written)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def git_head() -> str | None:
    """The checkout's short commit hash, None outside git."""
    try:
        return (
            subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
