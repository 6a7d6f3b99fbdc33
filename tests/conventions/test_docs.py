"""The README is a short front door and the docs hang together: the README keeps its length limit
and the two set-up commands, every relative link of the README and of ``docs/*.md`` reaches a file
(and, with ``#fragment``, a heading of it), the reference pages have a table of contents, and
``docs/errors.md`` documents every error class of ``lerobotstream/errors.py``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"

#: the README's length limit (issue 25: a front door; the reference lives in docs/)
MAX_README_LINES = 250

#: the two set-up commands of a fresh machine (Makefile targets; .ci/run calls `make test`)
SETUP_COMMANDS = ("make demo", "make test")

#: reference pages split out of the README: each opens with a table of contents
REFERENCE_PAGES = ("pytorch.md", "lerobot.md", "mixtures.md", "sources.md", "sidecars.md", "profiling.md",
                   "errors.md")

#: link targets written on other branches at the same time as the README's links section (issue 25).
#: PENDING: the lead removes each entry once its page has been merged.
PENDING_PAGES = {
}

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^()\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


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


def test_readme_is_a_short_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_README_LINES}): move reference material to a docs/ page "
        "and link it from the README's Documentation section")


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


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
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
    assert not merged, f"{merged} exist now: remove them from PENDING_PAGES in tests/test_docs.py"


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
