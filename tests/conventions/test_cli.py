"""What every command line of the package does the same way: ``--version``; errors as one
``error: ...`` line with exit status 2; a reader that closes stdout early (``| head``) ends the
command quietly; help text that reads as plain text and names the command as it was typed.
Also the messages a newcomer meets first (a root at ``meta/``, a v2.1 dataset)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lerobotstream._version import __version__
from lerobotstream.errors import EXIT_CLOSED_STDOUT
from lerobotstream.sidecar.__main__ import main as sidecar_main

REPO = Path(__file__).resolve().parents[2]
G1 = REPO / "data" / "g1_v30"
CLIS = ["lerobotstream.sidecar", "lerobotstream.profile", "lerobotstream.validate"]


def _run(*args: str, stdout=subprocess.PIPE, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LEROBOTSTREAM_DEBUG"}
    return subprocess.run(
        [sys.executable, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO, timeout=timeout
    )


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "g1.npz"
    assert sidecar_main(["build", "--root", str(G1), "--output", str(out), "--no-progress"]) == 0
    return out


# --- --version, no arguments (issue 17 item 5) --------------------------------------------------
@pytest.mark.parametrize("module", CLIS)
def test_version(module):
    p = _run("-m", module, "--version")
    assert p.returncode == 0 and p.stdout.strip() == f"lerobotstream {__version__}"


def test_version_through_the_console_script_form(capsys):
    with pytest.raises(SystemExit) as ei:
        sidecar_main(["--version"])  # not rewritten into `build --version`
    assert ei.value.code == 0 and capsys.readouterr().out.strip() == f"lerobotstream {__version__}"


@pytest.mark.parametrize(
    "module, line",
    [
        (
            "lerobotstream.sidecar",
            "error: give a command: build or inspect (build's options alone, e.g. --root DIR "
            "--output X.npz, mean build; see --help)",
        ),
        (
            "lerobotstream.profile",
            "error: StreamingConfigError: give --root (a dataset folder or URL) and/or "
            "--repo-id (a Hub dataset); see --help",
        ),
        (
            "lerobotstream.validate",
            "error: StreamingConfigError: give ROOT or --root (a dataset folder or URL) and/or "
            "--repo-id (a Hub dataset); see --help",
        ),
    ],
)
def test_no_arguments_is_an_error_line_and_status_2(module, line):
    p = _run("-m", module)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1] == line
    assert "Traceback" not in p.stderr and p.stdout == ""


# --- a closed stdout (issue 17 item 3) ----------------------------------------------------------
def _closed_pipe() -> int:
    """The write end of a pipe whose reader has already gone (``| head`` after it exited)."""
    r, w = os.pipe()
    os.close(r)
    return w


def test_inspect_into_a_closed_pipe_ends_quietly(sidecar):
    w = _closed_pipe()
    try:
        p = _run("-m", "lerobotstream.sidecar", "inspect", str(sidecar), stdout=w)
    finally:
        os.close(w)
    assert p.returncode == EXIT_CLOSED_STDOUT == 141
    assert p.stderr == ""  # no "error: BrokenPipeError", no "Exception ignored ... BrokenPipeError"


def test_inspect_into_head_prints_what_head_shows(sidecar):
    shell = f"{sys.executable} -m lerobotstream.sidecar inspect {sidecar} | head -2"
    p = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 0 and p.stderr == ""
    assert p.stdout.splitlines()[0].startswith("sidecar ") and len(p.stdout.splitlines()) == 2


def test_a_broken_pipe_elsewhere_is_still_an_error(capsys):
    from lerobotstream.errors import run_cli

    def body():
        raise BrokenPipeError("a socket's pipe, not stdout")

    assert run_cli(body) == 2  # stdout works: not hidden
    assert "error: BrokenPipeError: a socket's pipe, not stdout" in capsys.readouterr().err


# --- help text (issue 17 item 21) ---------------------------------------------------------------
@pytest.mark.parametrize("args", [["--help"], ["build", "--help"], ["inspect", "--help"]])
def test_sidecar_help_is_plain_text_with_every_option_explained(args, capsys):
    with pytest.raises(SystemExit):
        sidecar_main(args)
    text = capsys.readouterr().out
    assert "``" not in text
    if args[0] == "build":
        for flag, words in [
            ("--tolerance-s", "seconds (default: 0.0001"),
            ("--no-progress", "no progress bar"),
            ("--workers", "(default: 8)"),
            ("--repo-id", "default: OWNER/NAME of an hf:// root"),
        ]:
            assert flag in text and words in " ".join(text.split()), flag
        assert "[--repo-id REPO_ID]" in " ".join(text.split())  # optional now


def test_profile_help_is_plain_text():
    p = _run("-m", "lerobotstream.profile", "--help")
    assert p.returncode == 0 and "``" not in p.stdout and "--version" in p.stdout


def test_console_script_usage_names_the_console_script(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/lerobotstream-build-mp4-sidecar", "--help"])
    with pytest.raises(SystemExit):
        sidecar_main()
    text = capsys.readouterr().out
    assert text.startswith("usage: lerobotstream-build-mp4-sidecar ") and "python -m" not in text.split("\n")[0]
    monkeypatch.setattr(sys, "argv", [str(REPO / "lerobotstream" / "sidecar" / "__main__.py"), "--help"])
    with pytest.raises(SystemExit):
        sidecar_main()
    assert capsys.readouterr().out.startswith("usage: python -m lerobotstream.sidecar ")


def test_repo_id_is_derived_when_not_given(tmp_path):
    from lerobotstream.sidecar.__main__ import default_repo_id
    from lerobotstream.sidecar._archive import load_manifest

    out = tmp_path / "x.npz"
    assert sidecar_main(["--root", str(G1), "--output", str(out), "--no-progress"]) == 0  # console-script form
    assert load_manifest(out)["repo_id"] == "local/g1_v30"
    assert default_repo_id(str(G1) + "/", None) == "local/g1_v30"
    assert default_repo_id(None, "hf://datasets/lerobot/pusht@" + "a" * 40) == "lerobot/pusht"
    assert default_repo_id(None, "hf://buckets/me/bkt") == "me/bkt"
    assert default_repo_id(None, "s3://bucket/some/ds/") == "local/ds"


# --- first messages (issue 17 item 22) ----------------------------------------------------------
def test_root_at_the_meta_folder_suggests_the_parent():
    from lerobotstream.errors import MetadataError
    from lerobotstream.meta import DatasetMeta

    with pytest.raises(
        MetadataError,
        match=rf"meta/info.json is missing: {G1}/meta/meta/info.json; the root looks "
        rf"like the dataset's meta/ folder: give its parent folder as the root "
        rf"\({G1}\)",
    ):
        DatasetMeta.load(G1 / "meta")


def test_v21_message_names_lerobots_converter_command(tmp_path):
    from lerobotstream.errors import UnsupportedDatasetVersionError
    from lerobotstream.meta import DatasetMeta

    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v2.1", "fps": 30, "features": {}}))
    with pytest.raises(UnsupportedDatasetVersionError) as ei:
        DatasetMeta.load(tmp_path)
    msg = str(ei.value)
    assert "python -m lerobot.scripts.convert_dataset_v21_to_v30 --repo-id=<repo_id>" in msg
    assert "tools/" not in msg  # an installed user has no tools/ folder


# --- issue 29 (new user, items 3 and 4) ---------------------------------------------------------
def test_bare_console_script_and_its_help_agree():
    """The help said the console script runs build when no command is given, while bare it said
    "give a command". Both now say the same: build's options alone mean build."""
    p = _run("-m", "lerobotstream.sidecar", "--help")
    helptext = " ".join(p.stdout.split())
    assert "takes build's options without the word build" in helptext and "bare, it asks for them" in helptext
    bare = _run("-m", "lerobotstream.sidecar")
    assert bare.returncode == 2 and "build's options alone" in bare.stderr.strip().splitlines()[-1]


_INTERRUPT = """
import sys
import {module} as target
def interrupted(*args, **kwargs):
    raise KeyboardInterrupt
setattr(target, {name!r}, interrupted)
from lerobotstream.{cli}.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "cli, module, name, args",
    [
        (
            "sidecar",
            "lerobotstream.sidecar._build",
            "build_sidecar",
            ["build", "--root", str(G1), "--output", "{tmp}/x.npz"],
        ),
        ("profile", "lerobotstream.profile._run", "profile_dataset", ["--root", str(G1), "--num-workers", "0"]),
    ],
)
def test_ctrl_c_is_one_line_and_status_130(cli, module, name, args, tmp_path):
    """Ctrl-C printed a KeyboardInterrupt traceback; it prints ``interrupted`` and exits 130
    (--debug: the traceback). The interrupt is raised where the command does its work."""
    code = _INTERRUPT.format(module=module, name=name, cli=cli)
    argv = [a.format(tmp=tmp_path) for a in args]
    p = _run("-c", code, *argv)
    assert p.returncode == 130 and p.stderr.strip().splitlines()[-1] == "interrupted", p.stderr
    assert "Traceback" not in p.stderr
    p = _run("-c", code, *argv, "--debug")
    assert p.returncode != 130 and "KeyboardInterrupt" in p.stderr and "Traceback" in p.stderr
    assert not list(tmp_path.iterdir())  # nothing half-written beside --output


def test_an_interrupted_sidecar_build_leaves_no_lock(tmp_path, monkeypatch):
    """An interrupted build left an empty ``<entry>.npz.lock`` (and a finished one did too)."""
    from lerobotstream.sidecar import _build, ensure_sidecar
    from lerobotstream.sources._local import LocalSource

    cache = tmp_path / "sidecars"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(_build, "build_sidecar", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ensure_sidecar(LocalSource(G1), repo_id="local/g1_v30", cache_dir=cache)
    assert [p for p in cache.rglob("*") if p.is_file()] == []
    monkeypatch.undo()
    target, how = ensure_sidecar(LocalSource(G1), repo_id="local/g1_v30", cache_dir=cache)
    assert how == "built" and [p for p in cache.rglob("*") if p.is_file()] == [target]


def test_the_build_lock_stays_exclusive_when_its_file_is_removed(tmp_path):
    """The holder removes the lock file on exit; a process that locked the removed file locks the
    new one instead, so two holders never overlap."""
    import threading

    from lerobotstream.sidecar._lifecycle import _BuildLock

    target = tmp_path / "entry.npz"
    inside = threading.Event()
    order: list[str] = []
    with _BuildLock(target, 60, "first") as first:
        assert first._holds_the_path() is True

        def second() -> None:
            with _BuildLock(target, 60, "second") as lock:
                order.append("second in")
                assert lock._holds_the_path() is True
            inside.set()

        t = threading.Thread(target=second)
        t.start()
        order.append("first out")
    t.join(60)
    assert inside.is_set() and order == ["first out", "second in"]
    assert not list(tmp_path.iterdir())
