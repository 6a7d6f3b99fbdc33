"""The shipped test media (data/testmedia): inside the repository, every file listed with its sha256.

Bug (issue 17.15): the real-file tests read ``../shared/testdata`` beside the checkout, so a clone
of the repository alone could not pass ``make test``. The media now ships in ``data/testmedia``.
"""

from __future__ import annotations

import hashlib
import re

from conftest import REPO, TESTDATA

DOCS = {"MANIFEST.md"}  # besides each folder's SOURCE.md and LICENSES/


def _manifest() -> dict[str, tuple[int, str]]:
    rows = re.findall(r"^\| `([^`]+)` \| (\d+) \| `([0-9a-f]{64})` \|", (TESTDATA / "MANIFEST.md").read_text(), re.M)
    return {rel: (int(size), sha) for rel, size, sha in rows}


def test_testdata_is_inside_the_repository():
    assert TESTDATA.resolve().is_relative_to(REPO.resolve())
    assert (TESTDATA / "MANIFEST.md").is_file()


def test_every_file_listed_with_its_sha256():
    listed = _manifest()
    assert len(listed) >= 80
    present = {
        str(p.relative_to(TESTDATA))
        for p in TESTDATA.rglob("*")
        if p.is_file() and p.name not in DOCS and p.name != "SOURCE.md" and p.parent.name != "LICENSES"
    }
    assert present == set(listed), (sorted(present - set(listed)), sorted(set(listed) - present))
    for rel, (size, sha) in sorted(listed.items()):
        data = (TESTDATA / rel).read_bytes()
        assert len(data) == size, rel
        assert hashlib.sha256(data).hexdigest() == sha, rel


def test_every_folder_has_its_source_notes_and_licence():
    text = (TESTDATA / "MANIFEST.md").read_text()
    licences = {p.stem for p in (TESTDATA / "LICENSES").glob("*.txt")}
    assert {"Apache-2.0", "MIT", "BSD-3-Clause", "MPL-2.0"} <= licences
    for folder in sorted(p for p in TESTDATA.iterdir() if p.is_dir() and p.name != "LICENSES"):
        assert (folder / "SOURCE.md").is_file(), folder.name
        assert f"| `{folder.name}/` | https://github.com/" in text, folder.name
