"""The contestants, as the orchestrator sees them: one long-lived process each, fed one trial at a
time over a pipe (:class:`Contestant`; the process runs ``tools/bench_trial.py --serve``).

``ours`` runs this checkout's ``lerobotstream`` in this interpreter's venv; ``ours@PATH`` another
checkout's package (PATH first on ``sys.path``); ``ours@lerobot-venv`` the package installed in
``.venv-lerobot``; ``ours+k=v+...`` dataset options, ``+env.NAME=value`` an environment variable of
the process, ``+sharing_strategy=...`` and ``+collate=default`` the DataLoader's; ``lerobot`` and
``lerobot-streaming``: LeRobot 0.6.1's loaders in ``.venv-lerobot`` (:func:`parse_contestant`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tools.bench_common import ROOT
from tools.bench_trial import RESULT_PREFIX

__all__ = ["Contestant", "TRIAL_SCRIPT", "contestant_env", "make_contestants", "parse_contestant", "warm_up"]

#: what a contestant process runs (as a script: ``--serve``)
TRIAL_SCRIPT = Path(__file__).resolve().with_name("bench_trial.py")


class Contestant:
    """A long-lived process that runs trials (``python tools/bench_trial.py --serve``)."""

    def __init__(
        self,
        label: str,
        kind: str,
        python: Path,
        env: dict,
        log: Path,
        *,
        path: str | None = None,
        options: dict | None = None,
        side: str = "ours",
    ) -> None:
        self.label, self.kind, self.options, self.side = label, kind, options or {}, side
        self.python, self.path, self.log_path = python, path, log
        self.proc: subprocess.Popen | None = None
        self.env = env
        self.error: str | None = None

    def start(self) -> None:
        env = dict(self.env)
        # plain ``ours`` (and the limit) run this checkout's package, not whichever one the venv
        # has installed (an editable install may point at another working tree)
        env["PYTHONPATH"] = self.path or (str(ROOT) if Path(self.python) == Path(sys.executable) else "")
        env.update({k[4:]: str(v) for k, v in self.options.items() if k.startswith("env.")})
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [str(self.python), str(TRIAL_SCRIPT), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            cwd=str(ROOT),
        )

    def send(self, spec: dict) -> str | None:
        """Start the trial ``spec`` (the process starts on first use); an error text if it is gone."""
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin
        try:
            self.proc.stdin.write(json.dumps(spec) + "\n")
            self.proc.stdin.flush()
        except OSError as exc:
            return f"{self.label} process is gone ({exc}); see {self.log_path}"
        return None

    def call(self, spec: dict, timeout_s: float) -> dict:
        err = self.send(spec)
        return {"error": err} if err else self.receive(timeout_s)

    def receive(self, timeout_s: float) -> dict:
        """The result of the trial sent last (the process is killed after ``timeout_s``)."""
        assert self.proc is not None and self.proc.stdout
        result: list[dict] = []

        def read() -> None:
            for line in self.proc.stdout:
                if line.startswith(RESULT_PREFIX):
                    result.append(json.loads(line[len(RESULT_PREFIX) :]))
                    return

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout_s)
        if not result:
            self.close(kill=True)
            return {
                "error": f"{self.label}: no result within {timeout_s:.0f} s or the process died; see {self.log_path}"
            }
        return result[0]

    def close(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        try:
            if kill:
                self.proc.kill()
            else:
                self.proc.stdin.close()
            self.proc.wait(20)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self.log.close()


def parse_contestant(text: str) -> tuple[str, str, str | None, dict]:
    """``ours[@PATH][+k=v...]`` / ``lerobot`` / ``lerobot-streaming`` → (label, kind, path, options)."""
    head, *opts = text.split("+")
    options: dict[str, Any] = {}
    for o in opts:
        k, v = o.split("=", 1)
        options[k] = (
            v if k.startswith("env.") else json.loads(v) if v[:1].isdigit() or v in ("true", "false", "null") else v
        )
    kind, _, path = head.partition("@")
    if kind not in ("ours", "lerobot", "lerobot-streaming"):
        raise SystemExit(f"unknown contestant {text!r} (ours[@PATH][+option=value...], lerobot, lerobot-streaming)")
    if path and kind != "ours":
        raise SystemExit(f"{text!r}: only ours takes @PATH")
    return text, kind, path or None, options


def contestant_env(cache: Path) -> dict:
    """The contestants' environment: offline, an isolated ``HF_LEROBOT_HOME`` under ``cache``, no
    sidecar/index directory of the caller's."""
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_LEROBOT_HOME=str(cache / "hf_lerobot"),
        TOKENIZERS_PARALLELISM="false",
    )
    env.pop("LEROBOTSTREAM_SIDECAR_DIR", None)
    env.pop("LEROBOTSTREAM_INDEX_DIR", None)
    return env


def make_contestants(texts: list[str], lerobot_py: Path, env: dict, logs: Path) -> tuple[list[Contestant], list[str]]:
    """A (not yet started) :class:`Contestant` per ``ours[@PATH][+k=v]`` / ``lerobot`` /
    ``lerobot-streaming`` text, and notes on those skipped (LeRobot's venv absent)."""
    contestants, notes = [], []
    for text in [c for c in texts if c]:
        label, kind, path, options = parse_contestant(text)
        if kind.startswith("lerobot") or path == "lerobot-venv":
            if not lerobot_py.exists():
                notes.append(f"{label}: skipped, {lerobot_py} not found (make setup-lerobot)")
                continue
            py, p = lerobot_py, None
        else:
            py, p = Path(sys.executable), (str(Path(path).resolve()) if path else None)
        contestants.append(
            Contestant(
                label,
                kind,
                py,
                env,
                logs / f"{label.replace('/', '_')}.log",
                path=p,
                options=options,
                side="lerobot" if kind.startswith("lerobot") else "ours",
            )
        )
    return contestants, notes


def warm_up(procs: list[Contestant], setup: dict, timeout_s: float) -> None:
    """Start every contestant and run its imports (side by side, outside any timing); one whose
    warm-up fails keeps the error (its trials are skipped)."""
    sent = {c.label: c.send({"kind": "warmup", "side": c.side}) for c in procs}
    for c in procs:
        r = {"error": sent[c.label]} if sent[c.label] else c.receive(timeout_s)
        setup[f"warmup {c.label}"] = r
        print(f"  {c.label}: {r}", file=sys.stderr, flush=True)
        if "error" in r:
            c.error = r["error"]
