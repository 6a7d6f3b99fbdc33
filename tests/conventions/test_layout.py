"""Package layout (issues 20, 25): no two modules of ``lerobotstream/`` import each other, no
function of the package runs past :data:`MAX_FUNCTION_LINES` (a long function is split by what it
does; a module is one concept, however long), no module reads another
object's private attribute (beyond the listed ones), the library never imports its test fixtures (``lerobotstream.testing``), and nothing in
``tools/`` edits ``sys.path``.

Imports are read from the source with :mod:`ast` (``.py``) or from the import statements of a
Cython ``.pyx`` (``cimport`` excluded: it is a compile-time declaration, not a run-time import).
Every form counts: ``import a.b``, ``from a.b import c``, ``from . import x``, ``from .x import y``.
``from pkg import name`` is an edge to the submodule ``pkg.name`` when that module exists, else to
``pkg`` itself (its ``__init__``). A module's own parent packages are not edges: importing a
submodule always imports its parents first, by Python's design.

A module is *private* when a component of its dotted name starts with ``_`` (``sources._http``);
it belongs to the package above that component (``lerobotstream.sources``), whose own modules
(and subpackages) may import it; everyone else imports the names that package's ``__init__``
re-exports.

Two kinds of edge:

- **module level**: runs when the module is imported (also inside ``if``/``try``/``with`` and class
  bodies). Two modules importing each other at module level is always a failure.
- **deferred**: inside a function body (``def``). It runs only when the function is called, after
  both modules have finished importing, so it cannot fail the way a module-level cycle does. It
  still ties two modules into one unit of change, so a deferred edge that closes a two-module cycle
  fails too, unless the pair is listed in ``DEFERRED_CYCLES_ALLOWED`` with the reason it stays.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "lerobotstream"
TOOLS = REPO / "tools"

#: the longest function the package may hold (docstring included)
MAX_FUNCTION_LINES = 160

#: two-module cycles closed by a deferred (function-level) import that stay for now, with why.
#: Keys are sorted pairs of dotted module names. Empty: every cycle found so far was broken.
DEFERRED_CYCLES_ALLOWED: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    """Dotted name -> file of every ``.py``/``.pyx`` module under ``lerobotstream/``."""
    mods = {}
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix in (".py", ".pyx") and "__pycache__" not in path.parts:
            mods[_module_name(path)] = path
    return mods


def _py_imports(tree: ast.Module) -> list[tuple[ast.stmt, bool]]:
    """``(import statement, deferred)`` of a parsed module; deferred = inside a function body."""
    found: list[tuple[ast.stmt, bool]] = []

    def walk(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, deferred))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                walk(child, True)
            else:
                walk(child, deferred)

    walk(tree, False)
    return found


_PYX_IMPORT = re.compile(r"^(\s*)(from\s+\S+\s+import\b|import\s)")
_PYX_BLOCK = re.compile(r"^(\s*)(?:async\s+)?(c?p?def|class|cdef\s+class)\b")


def _pyx_imports(text: str) -> list[tuple[ast.stmt, bool]]:
    """The import statements of a Cython module (each statement parsed alone with ast).

    Deferred = indented under a ``def``/``cdef``/``cpdef`` (found from the nearest less-indented
    block opener above it)."""
    lines = text.splitlines()
    found: list[tuple[ast.stmt, bool]] = []
    i = 0
    while i < len(lines):
        m = _PYX_IMPORT.match(lines[i])
        if not m or " cimport " in lines[i] or lines[i].lstrip().startswith("cimport "):
            i += 1
            continue
        indent = len(m.group(1))
        stmt = [lines[i]]
        code = [line.split("#")[0] for line in stmt]
        while "".join(code).count("(") > "".join(code).count(")") or code[-1].rstrip().endswith("\\"):
            i += 1
            stmt.append(lines[i])
            code.append(lines[i].split("#")[0])
        deferred = False
        if indent:
            for j in range(i - len(stmt), -1, -1):
                b = _PYX_BLOCK.match(lines[j])
                if b and len(b.group(1)) < indent:
                    deferred = b.group(2) != "class" and not b.group(2).startswith("cdef class")
                    break
        node = ast.parse(textwrap.dedent("\n".join(stmt))).body[0]
        found.append((node, deferred))
        i += 1
    return found


def _resolve(module: str, is_package: bool, node: ast.stmt, mods: dict[str, Path]) -> set[str]:
    """In-package modules an import statement of ``module`` binds or runs."""
    targets: set[str] = set()

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    if isinstance(node, ast.Import):
        for alias in node.names:
            t = known(alias.name)
            if t:
                targets.add(t)
        return targets
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        pkg = ".".join(base + ([node.module] if node.module else []))
    else:
        pkg = node.module or ""
    for alias in node.names:
        sub = f"{pkg}.{alias.name}"
        t = sub if sub in mods else known(pkg)
        if t:
            targets.add(t)
    return targets


def import_graph() -> dict[str, dict[str, bool]]:
    """``{module: {imported module: deferred}}`` over the package (module level wins over deferred)."""
    mods = package_modules()
    graph: dict[str, dict[str, bool]] = {}
    for name, path in mods.items():
        text = path.read_text("utf-8")
        stmts = _pyx_imports(text) if path.suffix == ".pyx" else _py_imports(ast.parse(text, str(path)))
        edges: dict[str, bool] = {}
        ancestors = {".".join(name.split(".")[:k]) for k in range(1, name.count(".") + 1)}
        for node, deferred in stmts:
            for target in _resolve(name, path.name == "__init__.py", node, mods):
                if target == name or target in ancestors:
                    continue
                edges[target] = edges.get(target, True) and deferred
        graph[name] = edges
    return graph


def two_module_cycles() -> dict[tuple[str, str], tuple[bool, bool]]:
    """Sorted pair ``(a, b)`` -> ``(a->b deferred, b->a deferred)`` for every pair importing each other."""
    graph = import_graph()
    cycles = {}
    for a, edges in graph.items():
        for b, deferred in edges.items():
            if a < b and a in graph.get(b, {}):
                cycles[(a, b)] = (deferred, graph[b][a])
    return cycles


#: ``(module, attribute)`` reads of another object's private attribute that stay for now, with why.
#: A whole module is listed as ``(module, "*")``.
PRIVATE_READS_ALLOWED: dict[tuple[str, str], str] = {
    ("lerobotstream.mp4._index_write", "_columns"): "SourceTable's column store (mp4/_npz_schema.py), one room",
    ("lerobotstream.mp4._index_write", "_sorted_paths"): "SourceTable's column store (mp4/_npz_schema.py), one room",
    (
        "lerobotstream.integrations.lerobot.factory",
        "_preprocess_dataset_batch",
    ): "LeRobot's own function, looked up to see whether its training loop converts uint8 frames",
    (
        "lerobotstream.loader._batch",
        "_cdata",
    ): "torch's storage handle for torch._C._storage_Use_Count (no public use count: is a batch still held?)",
    ("lerobotstream.profile._run", "_workers"): "torch's DataLoader iterator's worker processes (their PIDs)",
    ("lerobotstream.sidecar._lifecycle", "_context"): "filelock's lock file descriptor (is the lock still ours?)",
}


def _root_name(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def private_reads(path: Path) -> list[tuple[str, int]]:
    """``(attribute, line)`` of every read of another object's private attribute in a module:
    ``obj._name`` or ``getattr(obj, "_name", ...)`` (one leading underscore), where ``obj`` is not
    ``self``/``cls``, not rooted in an imported name (a module's private API is the import rule's),
    and no ``_name`` is defined, assigned or set in the module itself (its own class's)."""
    tree = ast.parse(path.read_text("utf-8"), str(path))
    own, imported = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, (ast.Store, ast.Del)):
            own.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            own.add(n.id)
        elif isinstance(n, ast.Import):
            imported |= {a.asname or a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            imported |= {a.asname or a.name for a in n.names}
    found = []
    for n in ast.walk(tree):
        name = obj = None
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load):
            name, obj = n.attr, n.value
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in ("getattr", "hasattr")
            and len(n.args) >= 2
            and isinstance(n.args[1], ast.Constant)
            and isinstance(n.args[1].value, str)
        ):
            name, obj = n.args[1].value, n.args[0]
        if not name or not name.startswith("_") or name.startswith("__") or name in own:
            continue
        if isinstance(obj, ast.Name) and obj.id in ("self", "cls"):
            continue
        root = _root_name(obj)
        if isinstance(root, ast.Name) and root.id in imported:
            continue
        found.append((name, n.lineno))
    return sorted(found, key=lambda x: x[1])


def sys_path_edits(paths) -> list[str]:
    """``file:line`` of every edit of ``sys.path`` in ``paths`` (``.py`` files): a call of a mutating
    method on ``sys.path``, an assignment to it or to an item or slice of it, ``from sys import
    path``, ``site.addsitedir``."""
    mutating = {"insert", "append", "extend", "remove", "pop", "clear", "__setitem__", "__delitem__"}

    def is_sys_path(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        )

    found = []
    for path in sorted(paths):
        tree = ast.parse(path.read_text("utf-8"), str(path))
        for node in ast.walk(tree):
            hit = False
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                hit = (node.func.attr in mutating and is_sys_path(node.func.value)) or (
                    node.func.attr == "addsitedir"
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "site"
                )
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                hit = any(is_sys_path(t) or (isinstance(t, ast.Subscript) and is_sys_path(t.value)) for t in targets)
            elif isinstance(node, ast.ImportFrom) and node.module == "sys":
                hit = any(a.name == "path" for a in node.names)
            if hit:
                found.append((path.relative_to(REPO).as_posix(), node.lineno))
    return [f"{p}:{n}" for p, n in sorted(found)]


def long_functions(limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``path:function`` -> line count of every function of the package over ``limit`` lines."""
    out = {}
    for path in package_modules().values():
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out[f"{path.relative_to(REPO).as_posix()}:{node.name}"] = n
    return out


# --- the scanner reads what it claims to read ---------------------------------------------------
def test_scanner_sees_every_import_form():
    mods = {
        m: Path()
        for m in (
            "lerobotstream",
            "lerobotstream.sidecar",
            "lerobotstream.sidecar._a",
            "lerobotstream.sidecar._b",
            "lerobotstream.mp4",
            "lerobotstream.mp4.index",
            "lerobotstream.errors",
        )
    }
    src = textwrap.dedent("""
        import lerobotstream.mp4.index
        from lerobotstream import errors
        from . import _b
        from ._b import thing
        from .. import mp4
        from ..mp4 import Mp4Index
        try:
            import numpy
        except ImportError:
            pass
        def f():
            from lerobotstream.sidecar._b import other
        class C:
            from lerobotstream.mp4 import index as ix
    """)
    stmts = _py_imports(ast.parse(src))
    got = [(sorted(_resolve("lerobotstream.sidecar._a", False, n, mods)), d) for n, d in stmts]
    assert got == [
        (["lerobotstream.mp4.index"], False),
        (["lerobotstream.errors"], False),
        (["lerobotstream.sidecar._b"], False),
        (["lerobotstream.sidecar._b"], False),
        (["lerobotstream.mp4"], False),
        (["lerobotstream.mp4"], False),
        ([], False),  # numpy: not in the package
        (["lerobotstream.sidecar._b"], True),
        (["lerobotstream.mp4.index"], False),  # a class body runs at import
    ]
    # relative imports from a package's __init__ start at the package itself
    init = ast.parse("from . import _a\nfrom ._b import x\n")
    assert [_resolve("lerobotstream.sidecar", True, n, mods) for n, _ in _py_imports(init)] == [
        {"lerobotstream.sidecar._a"},
        {"lerobotstream.sidecar._b"},
    ]


def test_scanner_reads_cython_imports():
    pyx = textwrap.dedent("""
        from libc.stdint cimport int64_t
        cimport numpy as cnp
        import numpy as np
        from lerobotstream.errors import (
            Mp4Error,
            Mp4InconsistentTablesError,
        )
        cdef int f(int x):
            return x
        def g():
            from lerobotstream.mp4.synth import header_nbytes
            return header_nbytes
        cdef class K:
            pass
    """)
    got = [(ast.unparse(n), d) for n, d in _pyx_imports(pyx)]
    assert got == [
        ("import numpy as np", False),
        ("from lerobotstream.errors import Mp4Error, Mp4InconsistentTablesError", False),
        ("from lerobotstream.mp4.synth import header_nbytes", True),
    ]


def test_scanner_finds_a_planted_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "lerobotstream"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "_a.py").write_text("from lerobotstream.sub._b import x\n")
    (pkg / "sub" / "_b.py").write_text("def f():\n    from . import _a\n")
    (pkg / "sub" / "_c.py").write_text("from lerobotstream.sub import _a\n")
    monkeypatch.setitem(globals(), "REPO", tmp_path)
    monkeypatch.setitem(globals(), "PACKAGE", pkg)
    assert two_module_cycles() == {("lerobotstream.sub._a", "lerobotstream.sub._b"): (False, True)}


def test_scanner_finds_planted_sys_path_edits(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "REPO", tmp_path)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "ok.py").write_text("import sys\nprint(sys.path[0])\nenv = dict(PYTHONPATH='x')\n")
    (tools / "bad.py").write_text(
        textwrap.dedent("""
        import site
        import sys
        from sys import path
        sys.path.insert(0, "x")
        sys.path.append("x")
        sys.path[:0] = ["x"]
        sys.path = ["x"]
        sys.path += ["x"]
        site.addsitedir("x")
    """)
    )
    assert sys_path_edits(tools.glob("*.py")) == [f"tools/bad.py:{n}" for n in (4, 5, 6, 7, 8, 9, 10)]


# --- the package ---------------------------------------------------------------------------------
def test_no_two_modules_import_each_other_at_module_level():
    both = {pair: kinds for pair, kinds in two_module_cycles().items() if not any(kinds)}
    assert both == {}, f"modules importing each other at module level: {sorted(both)}"


def test_no_two_modules_import_each_other_even_deferred():
    cycles = two_module_cycles()
    unexplained = sorted(pair for pair in cycles if pair not in DEFERRED_CYCLES_ALLOWED)
    assert unexplained == [], (
        "modules importing each other (one side inside a function); move the shared code to a module "
        f"both import, or list the pair in DEFERRED_CYCLES_ALLOWED with the reason: {unexplained}"
    )
    stale = sorted(pair for pair in DEFERRED_CYCLES_ALLOWED if pair not in cycles)
    assert stale == [], f"DEFERRED_CYCLES_ALLOWED lists pairs that no longer import each other: {stale}"


def test_no_function_runs_past_the_limit():
    over = long_functions()
    assert over == {}, f"functions over {MAX_FUNCTION_LINES} lines (split them by what they do): {over}"


def test_the_cycles_broken_in_issue_20_stay_broken():
    graph = import_graph()
    # sidecar: identity and validation moved out of _lifecycle, which _publish no longer imports
    lifecycle, publish = "lerobotstream.sidecar._lifecycle", "lerobotstream.sidecar._publish"
    assert lifecycle not in graph[publish]
    for shared in ("lerobotstream.sidecar._identity", "lerobotstream.sidecar._validate"):
        assert shared in graph[lifecycle] and shared in graph[publish]
    # mp4: index.pyx no longer re-exports Mp4Index (Mp4Index calls index's accessors)
    assert "lerobotstream.mp4._index_file" not in graph["lerobotstream.mp4.index"]
    # mp4: synth takes sample_durations from _table, not from spans (spans calls synth's header_nbytes)
    assert "lerobotstream.mp4.spans" not in graph["lerobotstream.mp4.synth"]
    assert "lerobotstream.mp4._table" in graph["lerobotstream.mp4.synth"]


def test_scanner_finds_planted_private_reads(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text(
        textwrap.dedent("""\
        import os
        class A:
            def __init__(self, src):
                self._mine = 1
                self.token = src._token
                self.cams = getattr(src, "_cameras", None)
            def f(self, other):
                return self._mine + other._mine, os._exit, super()._x
        """)
    )
    assert private_reads(mod) == [("_token", 5), ("_cameras", 6), ("_x", 8)]


def test_no_module_reads_another_objects_private_attribute():
    """Never reach into another class's privates: ask its owner for a public name (``HubSource.api``,
    ``HubSource.at_revision``, ``StreamingLeRobotDataset.transform_keys``...)."""
    found, used = [], set()
    for name, path in package_modules().items():
        if path.suffix != ".py":
            continue
        for attr, line in private_reads(path):
            key = next((k for k in ((name, attr), (name, "*")) if k in PRIVATE_READS_ALLOWED), None)
            if key is None:
                found.append(f"{path.relative_to(REPO).as_posix()}:{line}: .{attr}")
            else:
                used.add(key)
    assert found == [], f"reads of another object's private attribute (add a public name to its class): {found}"
    stale = sorted(set(PRIVATE_READS_ALLOWED) - used)
    assert stale == [], f"PRIVATE_READS_ALLOWED lists reads that are gone (remove them): {stale}"


def test_the_library_never_imports_its_test_fixtures():
    graph = import_graph()
    fixtures = "lerobotstream.testing"
    found = sorted(
        (a, b)
        for a, edges in graph.items()
        if not (a == fixtures or a.startswith(fixtures + "."))
        for b in edges
        if b == fixtures or b.startswith(fixtures + ".")
    )
    assert found == [], f"library modules importing lerobotstream.testing: {found}"


def test_importing_the_package_loads_neither_fixtures_nor_heavy_libraries():
    import subprocess
    import sys

    code = (
        "import sys, lerobotstream; a = sorted(m for m in sys.modules if m.startswith('lerobotstream.testing')); "
        "import lerobotstream.testing; print(a, sorted(m for m in ('av', 'PIL', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.split() == ["[]", "[]"], out


def test_tools_never_edit_sys_path():
    found = sys_path_edits(TOOLS.rglob("*.py"))
    assert found == [], (
        "tools/ edits sys.path (run tools as `python -m tools.NAME` from the repository root, or rely on the "
        f"installed package; a child process gets its path from PYTHONPATH): {found}"
    )
