"""The README's shell commands, as the README tests read them (``tests/conventions/test_readme_commands.py``;
``tests_lerobot/test_readme_train.py`` loads this file by its path)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_blocks(text: str | None = None) -> dict[str, list[list[str]]]:
    """``{section heading: [command argv, ...]}`` of every ```bash block of the README (lines
    joined at a trailing backslash, comments dropped)."""
    text = README.read_text(encoding="utf-8") if text is None else text
    out: dict[str, list[list[str]]] = {}
    heading = ""
    for m in re.finditer(r"^(#+ [^\n]+)$|^```bash\n(.*?)^```", text, re.M | re.S):
        if m.group(1):
            heading = m.group(1).lstrip("#").strip()
            continue
        joined = re.sub(r"\\\n\s*", " ", m.group(2))
        cmds = [shlex.split(line, comments=True) for line in joined.splitlines()]
        out.setdefault(heading, []).extend(c for c in cmds if c)
    return out


def flag_values(argv: list[str]) -> dict[str, str]:
    """``{name: value}`` of a command's ``--name=value`` arguments."""
    return dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
