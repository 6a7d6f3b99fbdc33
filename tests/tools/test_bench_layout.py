"""The benchmark's modules (``tools/bench*.py``): one concept each, imports flowing one way (no
circle of any length, deferred imports inside functions included), and the modules a contestant
process runs (``bench_trial``, what it loads with ``_sibling``, ``bench_common``) import only the
standard library at module level: they also run in LeRobot's venv and beside another checkout's
package (``ours@PATH``)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"
#: run inside a contestant process: standard library only at module level
CONTESTANT_SIDE = ("bench_trial", "bench_limit", "bench_common", "bench_account")


def _modules() -> dict[str, Path]:
    return {p.stem: p for p in sorted(TOOLS.glob("bench*.py"))}


def _imports(path: Path, *, module_level_only: bool = False) -> list[str]:
    """Dotted names imported by ``path`` (``from tools.x import y`` → ``tools.x``)."""
    out: list[str] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if not module_level_only:
                    walk(child, True)
                continue
            if isinstance(child, ast.Import):
                out.extend(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                if child.module == "tools":
                    out.extend(f"tools.{a.name}" for a in child.names)
                else:
                    out.append(child.module)
            walk(child, in_function)

    walk(ast.parse(path.read_text()), False)
    return out


def test_bench_modules_form_no_import_circle():
    mods = _modules()
    assert {
        "bench",
        "bench_common",
        "bench_contestants",
        "bench_datasets",
        "bench_limit",
        "bench_report",
        "bench_trial",
        "bench_loader",
    } <= set(mods)
    edges = {
        name: {i.split(".")[1] for i in _imports(p) if i.startswith("tools.") and i.split(".")[1] in mods}
        for name, p in mods.items()
    }
    # depth-first search for a cycle
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(n) :] + [n]))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(mods):
        if m not in state:
            visit(m)


def test_contestant_side_modules_import_only_the_standard_library():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for name in CONTESTANT_SIDE:
        path = TOOLS / f"{name}.py"
        if not path.exists():
            continue
        bad = [i for i in _imports(path, module_level_only=True) if i.split(".")[0] not in stdlib]
        # a guarded optional import (torch's IterableDataset base class) is allowed in a try block
        bad = [i for i in bad if not (name == "bench_trial" and i == "torch.utils.data")]
        assert not bad, f"tools/{name}.py imports {bad} at module level (it runs inside contestant processes)"
