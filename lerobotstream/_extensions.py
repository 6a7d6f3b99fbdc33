"""A clear error when a compiled extension is not built for the running Python.

Run from a source checkout's root with a Python it was not built for, Python imports the checkout
and fails with a bare ``ModuleNotFoundError``. :class:`MissingExtensionFinder`, last on
``sys.meta_path``, is asked only when no other finder found a module: for a module of this package
with a ``.pyx`` beside it, it raises :class:`~lerobotstream.errors.ExtensionBuildError` saying what
happened and what to do.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lerobotstream.errors import ExtensionBuildError

PACKAGE_DIR = Path(__file__).resolve().parent


def _python() -> str:
    return f"Python {sys.version_info.major}.{sys.version_info.minor} ({sys.executable})"


class MissingExtensionFinder:
    """A meta path finder that finds nothing: it turns a missing extension module of this package
    into :class:`~lerobotstream.errors.ExtensionBuildError` (see the module doc)."""

    def __init__(self, package_dir: Path = PACKAGE_DIR) -> None:
        self.package_dir = Path(package_dir)

    def find_spec(self, fullname: str, path=None, target=None):
        head, _, rest = fullname.partition(".")
        if head != "lerobotstream" or not rest:
            return None
        stem = self.package_dir.joinpath(*rest.split("."))
        if not stem.with_suffix(".pyx").is_file():
            return None  # not an extension: Python's own ModuleNotFoundError says it
        built = sorted(p.name for p in stem.parent.glob(f"{stem.name}.*") if p.suffix in (".so", ".pyd"))
        found = f"built here: {', '.join(built)}" if built else "no build of it here"
        raise ExtensionBuildError(
            f"{fullname} is not built for {_python()}: {found}. {self.package_dir} is a source checkout "
            f"without extensions for this Python (the current folder shadows an installed copy when Python "
            f"runs from the checkout's root). Build them for this Python (`python setup.py build_ext --inplace`; "
            f"`make build` does it for .venv), or install the package (`pip install .`), or run from "
            f"outside the checkout.",
            name=fullname,
        )


def install() -> None:
    """Put one :class:`MissingExtensionFinder` last on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(f, MissingExtensionFinder) for f in sys.meta_path):
        sys.meta_path.append(MissingExtensionFinder())
