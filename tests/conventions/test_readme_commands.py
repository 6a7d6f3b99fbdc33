"""The README's commands run as written, in order (issue 37): the offline block ("Try it
offline") runs here from a scratch folder that sees the checkout as the repository root; the
``lerobotstream-train`` examples (minutes of training: ``tests_lerobot/test_readme_train.py``
parses their flags with LeRobot's parser) are checked for what can go stale without LeRobot: a
resume line resumes the run the example before it wrote, the paths they name exist, their
streaming flags are declared. The README and docs/testing.md state no test count or suite time
(figures that go stale)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from tests._readme import README, flag_values, readme_blocks

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_the_offline_block_runs_as_written(tmp_path):
    cmds = readme_blocks()["Try it offline"]
    assert [c[:3] for c in cmds] == [
        ["python", "-m", "tools.make_dataset"],
        ["lerobotstream-validate", "--root", "outputs/try"],
        ["python", "-m", "lerobotstream.profile"],
    ]
    (tmp_path / "tools").symlink_to(REPO / "tools")  # the repository root as the commands see it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEROBOTSTREAM_", "HF_"))}
    env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", HF_LEROBOT_HOME=str(tmp_path / "hf"))
    outputs = []
    for argv in cmds:
        exe = sys.executable if argv[0] == "python" else str(BIN / argv[0])
        proc = subprocess.run([exe, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-2000:])
        outputs.append(proc.stdout + proc.stderr)
    assert (tmp_path / "outputs" / "try" / "meta" / "info.json").is_file()
    # a dataset as LeRobot writes it: the validator finds nothing to warn about (faststart MP4s)
    assert "not_faststart" not in outputs[1] and "0 error(s), 0 warning(s)" in outputs[1], outputs[1]
    # the profiler's run is long enough to judge
    assert "verdict: " in outputs[2] and "too short to judge" not in outputs[2], outputs[2][-3000:]


def _extra_flags() -> set[str]:
    """The flags ``integrations/lerobot/config.py`` declares beside the options' (``_EXTRA_FLAGS``,
    ``_LEROBOT_OVERRIDES``), read without importing LeRobot."""
    tree = ast.parse((REPO / "lerobotstream" / "integrations" / "lerobot" / "config.py").read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id in ("_EXTRA_FLAGS", "_LEROBOT_OVERRIDES"):
            names |= {elt.elts[0].value for elt in node.value.elts}
    return names


def test_the_training_examples_follow_each_other():
    from lerobotstream.options import train_flags

    cmds = [c for c in readme_blocks()["Training with lerobot-train"] if c[0] == "lerobotstream-train"]
    assert len(cmds) >= 3
    declared = {i.flag for i in train_flags()} | _extra_flags()
    previous = None
    for argv in cmds:
        flags = flag_values(argv)
        streaming = {k[len("dataset.") :] for k in flags if k.startswith("dataset.streaming")}
        assert streaming <= declared, f"undeclared flags {sorted(streaming - declared)} in {argv}"
        for key in ("dataset.root",):
            if key in flags:
                assert (REPO / flags[key]).exists(), f"--{key}={flags[key]} does not exist"
        if flags.get("resume") == "true":
            assert previous is not None, "a resume line needs the run before it"
            run = previous["output_dir"]
            assert flags["config_path"] == f"{run}/checkpoints/last/pretrained_model/train_config.json", (
                f"the resume line resumes {flags['config_path']}, not the run the example before it made ({run})"
            )
            assert int(flags.get("steps", 0)) > int(previous.get("steps", 0)), "resume trains further"
        else:
            previous = flags


def test_readme_blocks_joins_continuations_and_drops_comments():
    text = "## A\n\n```bash\nx --a=1 \\\n  --b=2   # c\n# only a comment\ny\n```\n"
    assert readme_blocks(text) == {"A": [["x", "--a=1", "--b=2"], ["y"]]}


def test_no_suite_figures_that_go_stale():
    for page in (README, REPO / "docs" / "testing.md"):
        text = page.read_text(encoding="utf-8")
        found = re.findall(r"~?\d[\d,]* tests\b|tests?[^.\n]{0,20}\d+(?:\.\d+)? minutes", text)
        assert not found, f"{page.relative_to(REPO)} gives the suite's size or time ({found}): leave it out"
