"""The command line of ``lerobotstream-train`` around LeRobot's parser: ``--version``, the
streaming section of ``--help``, a mistyped ``--dataset.*`` flag named with the closest one,
``--debug``, and every error as one line with its exit status (:func:`run_command`). LeRobot is
not imported at module level (``--version`` answers before it loads).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from lerobotstream import __version__, constants
from lerobotstream.integrations.lerobot import patching

__all__ = ["main", "run_command", "streaming_help", "unknown_dataset_flag", "one_line_error"]


def run_command(argv: list[str], parse_and_train: Callable[[], Any]) -> None:
    """Run ``lerobotstream-train`` with the arguments ``argv`` (``sys.argv[1:]``): ``--version``:
    ours and LeRobot's, before any parsing. ``--help``: a short streaming section first
    (:func:`streaming_help`), then LeRobot's whole list. A mistyped ``--dataset.*`` flag: one line
    naming the closest flag (:func:`unknown_dataset_flag`), exit 2. Every lerobotstream error (and
    a flag's own error): one line ``error: <Type>: <message>``, exit 2; Ctrl-C: ``interrupted``,
    exit 130. ``--debug`` (removed from ``sys.argv`` before ``parse_and_train`` runs LeRobot's
    parser) or ``LEROBOTSTREAM_DEBUG=1``: the traceback instead.

    Raises:
        SystemExit: 2 on an error it prints, 130 on Ctrl-C.
    """
    import sys

    from lerobotstream.errors import EXIT_INTERRUPTED, error_line

    if "--version" in argv:
        from importlib.metadata import PackageNotFoundError, version

        try:
            lerobot = version("lerobot")
        except PackageNotFoundError:
            lerobot = "not installed"
        print(f"lerobotstream {__version__} (lerobot {lerobot})")
        return
    debug = "--debug" in argv or constants.debug_enabled()
    argv = [a for a in argv if a != "--debug"]
    sys.argv[1:] = argv  # removed before LeRobot parses the flags
    try:
        patching.check_lerobot()
        if "-h" in argv or "--help" in argv:
            print(streaming_help(), flush=True)
        else:
            bad = unknown_dataset_flag(argv)
            if bad is not None:
                raise bad
        from lerobot.utils.import_utils import register_third_party_plugins

        register_third_party_plugins()
        parse_and_train()
    except KeyboardInterrupt:
        if debug:
            raise
        print("interrupted", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except Exception as exc:
        cause = one_line_error(exc)
        if cause is None or debug:
            raise
        print(error_line(cause), file=sys.stderr)
        raise SystemExit(2) from None


def one_line_error(exc: BaseException) -> BaseException | None:
    """The error ``lerobotstream-train`` prints as one line: a flag's own error (the ValueError
    behind draccus's ParsingError), or any lerobotstream error (a DataLoader worker's as the worker
    raised it); None for others (LeRobot's and Python's own errors keep their traceback)."""
    from lerobotstream.errors import LeRobotStreamError, worker_error

    if type(exc).__name__ == "ParsingError":
        seen = exc.__cause__ or exc.__context__
        while seen is not None:
            if isinstance(seen, ValueError) and type(seen).__name__ != "ParsingError":
                return seen
            seen = seen.__cause__ or seen.__context__
        return None
    if isinstance(exc, LeRobotStreamError):  # torch's "Caught ... in DataLoader worker" copy: the worker's
        return worker_error(exc) or exc
    return None


def streaming_help() -> str:
    """The short section ``lerobotstream-train --help`` prints before LeRobot's whole list: every
    field :class:`StreamingDatasetConfig` defines or redefines (the streaming flags, ``repo_id``,
    ``root``, ``streaming``) with its default and help text."""
    import textwrap

    from lerobotstream.integrations.lerobot.config import StreamingDatasetConfig

    own = set(vars(StreamingDatasetConfig).get("__annotations__", {})) | {"root"}
    lines = [
        "lerobotstream-train: lerobot-train plus streaming. The streaming flags (all of lerobot-train's flags follow):",
        "",
    ]
    for f in dataclasses.fields(StreamingDatasetConfig):
        if f.name not in own:
            continue
        default = (
            "required"
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            else f"default: {f.default!r}"
            if f.default is not dataclasses.MISSING
            else "default: see below"
        )
        lines.append(f"  --dataset.{f.name} ({default})")
        help_text = " ".join(str(f.metadata.get("custom_args", {}).get("help") or "").split())
        lines.extend(textwrap.wrap(help_text, width=100, initial_indent="      ", subsequent_indent="      "))
    lines += [
        "",
        "  --debug: print the full traceback on errors (also LEROBOTSTREAM_DEBUG=1)",
        "",
        "lerobot-train's flags:",
    ]
    return "\n".join(lines)


def unknown_dataset_flag(argv: list[str]) -> Exception | None:
    """A :class:`~lerobotstream.errors.StreamingConfigError` for the first ``--dataset.NAME`` of
    ``argv`` that is no field of :class:`StreamingDatasetConfig`, naming the closest one
    (``difflib``); None when every ``--dataset.*`` flag exists. Nested flags
    (``--dataset.image_transforms.enable``) are checked on their first part only."""
    import difflib

    from lerobotstream.errors import StreamingConfigError
    from lerobotstream.integrations.lerobot.config import StreamingDatasetConfig

    names = [f.name for f in dataclasses.fields(StreamingDatasetConfig)]
    for arg in argv:
        if not arg.startswith("--dataset."):
            continue
        key = arg[len("--dataset.") :].split("=", 1)[0].split(".", 1)[0]
        if key in names:
            continue
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        hint = f"did you mean --dataset.{close[0]}?" if close else "see the streaming flags at the top of --help"
        return StreamingConfigError(f"unknown flag --dataset.{key}: {hint}")
    return None


def main() -> None:
    """Console entry ``lerobotstream-train``: :func:`run_command` around LeRobot's parser and
    ``train.run_training``. LeRobot is imported only inside ``run_command``'s checks, so a
    missing or too old LeRobot is one line (``LeRobotIntegrationError``), not a traceback."""
    import sys

    def parse_and_train() -> Any:
        from lerobotstream.integrations.lerobot.train import _parse_and_train

        return _parse_and_train()

    run_command(sys.argv[1:], parse_and_train)
