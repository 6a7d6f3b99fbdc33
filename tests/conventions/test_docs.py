"""The README is a short front door and the docs hang together: the README keeps its length limit
and the two set-up commands, every relative link of the README, ``docs/*.md`` and CHANGELOG.md
reaches a file (and, with ``#fragment``, a heading of it), these pages speak to users (no issue
numbers, commit hashes or goals "not met": the records are kept in git and the issue tracker), every repository path a doc or a docstring (or comment)
names exists, the reference pages have a table of contents, and ``docs/errors.md`` documents every
error class of ``lerobotstream/errors.py``."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"

#: the README's length limit (a front door; the reference lives in docs/)
MAX_README_LINES = 250

#: the two set-up commands of a fresh machine (Makefile targets; .ci/run calls `make test`)
SETUP_COMMANDS = ("make demo", "make test")

#: reference pages split out of the README: each opens with a table of contents
REFERENCE_PAGES = ("pytorch.md", "lerobot.md", "mixtures.md", "sources.md", "sidecars.md", "profiling.md", "errors.md")

#: link targets written on other branches at the same time as the pages that link them.
#: PENDING: the lead removes each entry once its page has been merged.
PENDING_PAGES = {}

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^()\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")


CHANGELOG = REPO / "CHANGELOG.md"


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _user_pages() -> list[Path]:
    """The pages a user reads: README, docs/*.md and CHANGELOG.md."""
    return [*_pages(), CHANGELOG]


#: what belongs in a lab notebook or the issue tracker, not in a page for users
_RECORDS = {
    "an issue reference": re.compile(r"\bissues?[ -]#?\d+|(?<![\w&/])#\d+\b", re.I),
    "a commit hash": re.compile(r"(?<![\w./-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w-])"),
    'a goal "not met"': re.compile(r"\bnot met\b", re.I),
}


def lab_records(text: str) -> list[str]:
    """``kind: excerpt`` of each issue reference, commit hash or goal "not met" in ``text``."""
    out = []
    for kind, pattern in _RECORDS.items():
        for m in pattern.finditer(text):
            out.append(f"{kind}: {text[max(0, m.start() - 30) : m.end() + 10]!r}")
    return out


def _prose(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path):
        m = re.match(r"#{1,6} (.+)", line)
        if not m:
            continue
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _relative_links(path: Path) -> list[str]:
    links = []
    for line in _prose(path):
        line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
        for target in _LINK.findall(line):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                links.append(target)
    return links


#: a repository path: a top-level folder of the repository and at least one name below it. ``data/``
#: alone is left out (``data/chunk-000/file-000.parquet`` is a LeRobot dataset's own layout); the
#: repository's own data folders are named.
_REPO_PATH = re.compile(
    r"(?<![\w./@:~$-])((?:lerobotstream|tests_lerobot|tests|tools|docs|csrc|\.ci|data/testmedia"
    r"|data/g1_v30)(?:/[\w.-]+)+)"
)
#: a path inside the package written from its sub-package (``planner/_layout.py``, ``dataset/_multi.py``)
_PACKAGE_PATH = re.compile(
    r"(?<![\w./@:~$-])((?:dataset|planner|loader|mp4|sidecar|sources|decode|validate|integrations"
    r"|testing|profile)(?:/[\w.-]+)*/[\w.-]+\.(?:py|pyx|pxd))\b"
)
#: a tool run as a module: ``python -m tools.bench`` (tools/bench.py), ``python -m tools.microbench`` (tools/microbench/)
_TOOL = re.compile(r"python -m (tools(?:\.\w+)+)")


def missing_paths(text: str) -> list[str]:
    """The repository paths ``text`` names that do not exist. A pattern (followed by ``*``, ``{`` or
    ``<``) or a placeholder segment in capitals (``tools/NAME.py``, ``tools.NAME``) names none."""
    out = []
    for pattern, base in ((_REPO_PATH, REPO), (_PACKAGE_PATH, REPO / "lerobotstream")):
        for m in pattern.finditer(text):
            path = m.group(1).rstrip(".")
            if text[m.end() : m.end() + 1] in ("*", "{", "<") or any(s.isupper() for s in re.split(r"[/.]", path)):
                continue
            if not (base / path).exists():
                out.append(path if base == REPO else f"{path} (lerobotstream/{path})")
    for m in _TOOL.finditer(text):
        parts = m.group(1).split(".")
        if any(s.isupper() for s in parts):
            continue
        if not (REPO.joinpath(*parts).with_suffix(".py").is_file() or REPO.joinpath(*parts).is_dir()):
            out.append(f"python -m {m.group(1)}")
    return out


def docstrings_and_comments(path: Path) -> str:
    """Every docstring (module, class, function) and comment of a Python file, one text."""
    src = path.read_text(encoding="utf-8")
    chunks = [
        ast.get_docstring(node, clean=False) or ""
        for node in ast.walk(ast.parse(src))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    chunks += [
        tok.string for tok in tokenize.generate_tokens(io.StringIO(src).readline) if tok.type == tokenize.COMMENT
    ]
    return "\n".join(chunks)


def _python_files() -> list[Path]:
    return [
        p for root in ("lerobotstream", "tools", "tests", "tests_lerobot") for p in sorted((REPO / root).rglob("*.py"))
    ]


def test_missing_paths_finds_a_moved_file():
    text = (
        "see tests/test_options.py, `tools/bench_planner.py`, planner/_gone.py and python -m tools.nothing; "
        "not data/chunk-000/file-000.parquet, tools/bench_*.py, tools/NAME.py or python -m tools.NAME"
    )
    assert missing_paths(text) == [
        "tests/test_options.py",
        "tools/bench_planner.py",
        "planner/_gone.py (lerobotstream/planner/_gone.py)",
        "python -m tools.nothing",
    ]
    assert missing_paths("tests/core/test_options.py, planner/_layout.py, python -m tools.microbench planner") == []


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_a_page_names_exists(page: Path):
    """README and docs/*.md, code blocks included. CHANGELOG.md is history: an entry names the files
    as they were when it was written, and a later move does not rewrite it."""
    gone = missing_paths(page.read_text(encoding="utf-8"))
    assert not gone, f"{page.relative_to(REPO)} names paths that do not exist: {gone}"


def test_every_path_a_docstring_names_exists():
    gone = [f"{p.relative_to(REPO)}: {x}" for p in _python_files() for x in missing_paths(docstrings_and_comments(p))]
    assert not gone, f"docstrings and comments name paths that do not exist: {gone}"


def test_readme_is_a_short_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_README_LINES}): move reference material to a docs/ page "
        "and link it from the README's Documentation section"
    )


def test_readme_keeps_the_two_setup_commands():
    text = README.read_text(encoding="utf-8")
    block = re.search(r"## Two commands\n\n```bash\n(.*?)```", text, re.S)
    assert block, "README.md lost its '## Two commands' section with a bash block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert tuple(c for c in commands if c) == SETUP_COMMANDS
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for command in SETUP_COMMANDS:
        target = command.split()[1]
        assert re.search(rf"^{target}:", makefile, re.M), f"the Makefile has no '{target}' target"


def test_lab_records_finds_issue_numbers_hashes_and_goals():
    text = "Issue 36's targets: not met; see issue #12 and #7, at e4d29bf (commit 4df1f7a0c)."
    kinds = [r.split(":")[0] for r in lab_records(text)]
    assert kinds.count("an issue reference") == 3
    assert kinds.count("a commit hash") == 2
    assert kinds.count('a goal "not met"') == 1
    clean = "decode 1,197 frames/s, a 64x48 camera, `0xff`, facade, cafe, sha256 in MANIFEST.md, [a](#contents)"
    assert lab_records(clean) == []


@pytest.mark.parametrize("page", _user_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_pages_for_users_keep_no_lab_records(page: Path):
    found = lab_records(page.read_text(encoding="utf-8"))
    assert not found, (
        f"{page.relative_to(REPO)} reads as a lab notebook ({found}): say what the library does for the user; "
        "issue numbers, commit hashes and goals stay in the issue tracker and git"
    )


@pytest.mark.parametrize("page", _user_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_reaches_a_file_and_heading(page: Path):
    broken = []
    for target in _relative_links(page):
        file_part, _, fragment = target.partition("#")
        dest = page if not file_part else (page.parent / file_part).resolve()
        rel = dest.relative_to(REPO).as_posix() if dest.is_relative_to(REPO) else str(dest)
        if not dest.exists():
            if rel not in PENDING_PAGES:
                broken.append(f"{target} (no file {rel})")
            continue
        if fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
            broken.append(f"{target} (no heading #{fragment} in {rel})")
    assert not broken, f"{page.relative_to(REPO)}: broken links: {broken}"


def test_pending_pages_are_still_pending():
    merged = sorted(p for p in PENDING_PAGES if (REPO / p).exists())
    assert not merged, f"{merged} exist now: remove them from PENDING_PAGES in tests/conventions/test_docs.py"


@pytest.mark.parametrize("name", REFERENCE_PAGES)
def test_reference_pages_have_a_table_of_contents(name: str):
    page = DOCS / name
    lines = _prose(page)
    assert "## Contents" in lines, f"docs/{name} has no '## Contents' section"
    start = lines.index("## Contents") + 1
    entries = []
    for line in lines[start:]:
        if line.startswith("#"):
            break
        m = re.match(r"- \[[^\]]+\]\(#([^)]+)\)", line)
        if m:
            entries.append(m.group(1))
    sections = [_slug(line[3:]) for line in lines if line.startswith("## ") and line != "## Contents"]
    assert entries == sections, f"docs/{name}: the table of contents does not list the ## sections in order"


def test_errors_page_documents_every_error_class():
    from lerobotstream import errors

    page = (DOCS / "errors.md").read_text(encoding="utf-8")
    missing = [name for name in errors.__all__ if name != "LeRobotStreamError" and f"### `{name}`" not in page]
    assert not missing, f"docs/errors.md has no section for {missing} (when it is raised, what it names, what to do)"


def test_readme_install_paragraph_names_every_console_script():
    """User trial: the install paragraph listed the console scripts but not
    ``lerobotstream-validate`` (installed, and used in "Try it offline")."""
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    text = README.read_text(encoding="utf-8")
    start = text.index("`pip install .` installs")
    paragraph = text[start : text.index("\n\n", start)]
    missing = [name for name in scripts if f"`{name}`" not in paragraph]
    assert not missing, f"README.md's install paragraph does not name the console scripts {missing}"


#: names of the planner before it was rebuilt as ``Planner(streams, settings)`` (and of classes gone
#: with it): a page naming one sends users to code that no longer exists
GONE_NAMES = (
    "PartitionPlanner",
    "MixturePlanner",
    "for_datasets",
    "dataset_planner",
    "for_streams",
    "PlannerCheckpoint",
    "EpisodeLayout",
    "PartitionLayout",
    "ChunkDecoder",
    "_CacheView",
)

#: ``lerobotstream.a.b`` in backticks; not a schema string (``lerobotstream.stream/1``)
_DOTTED = re.compile(r"`(lerobotstream(?:\.[A-Za-z_][A-Za-z0-9_]*)++)(?!/)")


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_pages_name_only_library_objects_that_exist(page: Path):
    """Every ``lerobotstream.a.b`` a page names imports (a module, then its attributes), and no page
    names a class or function of the old planner (:data:`GONE_NAMES`)."""
    import importlib

    text = page.read_text(encoding="utf-8")
    gone = [name for name in GONE_NAMES if re.search(rf"\b{re.escape(name)}\b", text)]
    assert not gone, f"{page.relative_to(REPO)} names {gone}, which no longer exist"
    missing = []
    for ref in sorted(set(_DOTTED.findall(text))):
        parts = ref.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for name in parts[i:]:
                obj = getattr(obj, name, None)
            if obj is None:
                missing.append(ref)
            break
    assert not missing, f"{page.relative_to(REPO)} names {missing}, which do not exist"
