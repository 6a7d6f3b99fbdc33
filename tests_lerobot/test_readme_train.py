"""The README's ``lerobotstream-train`` examples parse with LeRobot's own parser as written, in
order (issue 37): every flag exists and takes its value, and the resume line loads the config the
example before it writes (``<output_dir>/checkpoints/last/pretrained_model/train_config.json``).
Training them takes minutes on a CPU; ``tests/conventions/test_readme_commands.py`` runs the
README's offline block and checks their paths."""

from __future__ import annotations

import importlib.util

from conftest import REPO


def _readme():
    spec = importlib.util.spec_from_file_location("_readme", REPO / "tests" / "_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_training_examples_parse_in_order(tmp_path, monkeypatch):
    import draccus
    import lerobot.policies  # noqa: F401  (registers --policy.type=act, as lerobot-train's parser does)

    from lerobotstream.integrations.lerobot.cli import unknown_dataset_flag
    from lerobotstream.integrations.lerobot.config import StreamingTrainPipelineConfig

    readme = _readme()
    cmds = [c[1:] for c in readme.readme_blocks()["Training with lerobot-train"] if c[0] == "lerobotstream-train"]
    monkeypatch.chdir(tmp_path)  # the examples' relative paths: the repository's data, a fresh outputs/
    (tmp_path / "data").symlink_to(REPO / "data")
    previous = None
    for argv in cmds:
        assert unknown_dataset_flag(argv) is None, argv
        flags = readme.flag_values(argv)
        if flags.get("resume") == "true":
            assert flags["config_path"].startswith(f"{previous.output_dir}/checkpoints/"), "resumes another run"
            path = tmp_path / flags["config_path"]
            path.parent.mkdir(parents=True)
            previous.save_pretrained(path.parent)  # what the run before it leaves in its last checkpoint
            rest = [a for a in argv if not a.startswith("--config_path=")]
            cfg = draccus.parse(config_class=StreamingTrainPipelineConfig, config_path=path, args=rest)
            assert cfg.resume and cfg.steps == int(flags["steps"]) > previous.steps
            assert cfg.output_dir == previous.output_dir and cfg.dataset.root == previous.dataset.root
        else:
            previous = draccus.parse(config_class=StreamingTrainPipelineConfig, args=argv)
            assert previous.dataset.streaming and str(previous.output_dir) == flags["output_dir"]
