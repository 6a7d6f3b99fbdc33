"""A checkout whose compiled extensions are not built for the running Python (run from its root in
another environment) fails with :class:`~lerobotstream.errors.ExtensionBuildError` (an
``ImportError``) that says so and what to do, not a bare ``ModuleNotFoundError``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lerobotstream._extensions import MissingExtensionFinder
from lerobotstream.errors import ExtensionBuildError

PACKAGE = Path(__file__).resolve().parents[2] / "lerobotstream"


def test_a_missing_extension_names_the_builds_found_and_what_to_do(tmp_path):
    (tmp_path / "mp4").mkdir()
    (tmp_path / "mp4" / "parse.pyx").write_text("")
    (tmp_path / "mp4" / "parse.cpython-399-x86_64-linux-gnu.so").write_text("")
    (tmp_path / "mp4" / "plain.py").write_text("")
    finder = MissingExtensionFinder(tmp_path)
    with pytest.raises(ExtensionBuildError) as ei:
        finder.find_spec("lerobotstream.mp4.parse")
    msg = str(ei.value)
    assert isinstance(ei.value, ImportError) and ei.value.name == "lerobotstream.mp4.parse"
    assert f"Python {sys.version_info.major}.{sys.version_info.minor}" in msg
    assert "parse.cpython-399-x86_64-linux-gnu.so" in msg
    assert "make build" in msg and "pip install ." in msg and "outside the checkout" in msg
    # not an extension, or not ours: Python's own error
    assert finder.find_spec("lerobotstream.mp4.plain") is None
    assert finder.find_spec("lerobotstream.mp4.nothing") is None
    assert finder.find_spec("other.mp4.parse") is None


def test_a_checkout_without_this_pythons_builds_says_so(tmp_path):
    """The checkout's package without its extension files, imported from its root."""
    shutil.copytree(PACKAGE, tmp_path / "lerobotstream", ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    proc = subprocess.run(
        [sys.executable, "-c", "import lerobotstream.mp4.parse"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("lerobotstream.errors.ExtensionBuildError: lerobotstream.mp4.") and "no build of it" in last
    assert "make build" in last, proc.stderr[-2000:]
