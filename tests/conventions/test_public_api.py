"""The supported API: what each package ``__init__`` exports, and nothing more.

The top level (``lerobotstream``) and the supported modules — ``errors``, ``testing`` (fixtures),
``sidecar`` (build, publish, open), ``validate``, ``profile`` and ``integrations.lerobot`` — export
what users call (README.md, docs/, the console scripts). Every other package ``__init__`` exports
nothing, or only what users call; the library, its tests and tools import internals from the module
that defines them (``from lerobotstream.sources._http import RetryPolicy``). See the "Supported
API" section of docs/ARCHITECTURE.md.

``__all__`` is read with :mod:`ast` (no import: ``dataset`` would import torch). Adding or removing
an export fails here on purpose: change :data:`EXPORTS` in the same commit, and say why.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "lerobotstream"

#: the modules documented as supported API besides the top level (docs/ARCHITECTURE.md)
SUPPORTED = ("errors", "testing", "sidecar", "validate", "profile", "integrations.lerobot")

#: ``__all__`` of every package ``__init__``. No package exports internals any more: besides the
#: top level and the supported modules, each exports nothing or only what users call (planner, the
#: last to export the library's own names, exports nothing).
EXPORTS: dict[str, set[str]] = {
    "lerobotstream": {
        "EpisodeByteCache",
        "PackedCollate",
        "StreamLoader",
        "StreamOptions",
        "StreamingLeRobotDataset",
        "StreamingMultiLeRobotDataset",
        "__version__",
        "errors",
        "packed_collate",
    },
    "lerobotstream.dataset": {"lerobot_collate_fn"},
    "lerobotstream.decode": set(),
    "lerobotstream.integrations": set(),
    "lerobotstream.integrations.lerobot": {
        "StreamingDatasetConfig",
        "StreamingTrainPipelineConfig",
        "main",
        "make_streaming_dataset",
    },
    "lerobotstream.loader": {"StreamLoader"},
    "lerobotstream.mp4": set(),
    "lerobotstream.planner": set(),
    "lerobotstream.profile": {"build_report", "format_report", "needed_bytes", "plot_report", "profile_dataset"},
    "lerobotstream.sidecar": {"BuildReport", "build_sidecar", "ensure_sidecar", "open_sidecar", "push_sidecar"},
    "lerobotstream.sources": {"ByteSource", "open_source"},
    "lerobotstream.testing": {
        "CODECS",
        "DEPTH_QUANTIZER",
        "LoopbackServer",
        "RefError",
        "SAY_TOOL_SCHEMA",
        "convert_v21_to_v30",
        "depth_frame_mm",
        "expected_depth_codes",
        "expected_language",
        "identity_frame",
        "image_frame",
        "make_dataset",
        "parse_reference",
        "quantize_depth",
        "read_identity",
    },
    "lerobotstream.validate": {"Finding", "Report", "validate_dataset"},
}


def _module_name(init: Path) -> str:
    return ".".join(init.parent.relative_to(REPO).parts)


def declared_all(path: Path) -> list[str] | None:
    """The names of a module's ``__all__`` (``=``, ``: list[str] =`` and ``+=``); None without one."""
    names: list[str] | None = None
    for node in ast.parse(path.read_text("utf-8"), str(path)).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                names = [e.value for e in node.value.elts]
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == "__all__":
            names = (names or []) + [e.value for e in node.value.elts]
    return names


def package_exports() -> dict[str, list[str]]:
    return {_module_name(p): declared_all(p) or [] for p in sorted(PACKAGE.rglob("__init__.py"))}


def test_every_package_exports_exactly_its_listed_names():
    found = {name: set(names) for name, names in package_exports().items()}
    assert set(found) == set(EXPORTS), f"packages added or removed: {set(found) ^ set(EXPORTS)}"
    changed = {
        name: {"added": sorted(found[name] - EXPORTS[name]), "removed": sorted(EXPORTS[name] - found[name])}
        for name in EXPORTS
        if found[name] != EXPORTS[name]
    }
    assert changed == {}, f"package exports changed (update EXPORTS here and say why): {changed}"


def test_no_export_is_listed_twice():
    twice = {name: names for name, names in package_exports().items() if len(names) != len(set(names))}
    assert twice == {}


def test_every_import_from_a_package_names_an_export_or_a_submodule():
    """``from lerobotstream.P import N``: ``N`` is in ``P.__all__`` or a module of ``P``; an internal
    name is imported from the module that defines it."""
    exports = package_exports()
    bad = []
    for folder in ("lerobotstream", "tests", "tools", "tests_lerobot"):
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text("utf-8"), str(path))
            for node in ast.walk(tree):
                if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in exports):
                    continue
                if path.name == "__init__.py" and _module_name(path) == node.module:
                    continue
                pkg = REPO / node.module.replace(".", "/")
                for alias in node.names:
                    name = alias.name
                    if name in exports[node.module] or (pkg / f"{name}.py").exists() or (pkg / name).is_dir():
                        continue
                    if any(pkg.glob(f"{name}.*.so")) or (pkg / f"{name}.pyx").exists():
                        continue
                    bad.append(f"{path.relative_to(REPO).as_posix()}:{node.lineno}: {node.module}.{name}")
    assert bad == [], f"imports of names a package does not export (import them from their own module): {bad}"


def test_the_architecture_names_the_supported_modules():
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text("utf-8")
    assert "## Supported API" in text
    section = text.split("## Supported API", 1)[1].split("\n## ", 1)[0]
    missing = [m for m in SUPPORTED if f"lerobotstream.{m}" not in section]
    assert missing == []
