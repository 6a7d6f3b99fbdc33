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
    """The error ``lerobotstream-train`` prints as one line: a flag's own error behind draccus's
    ParsingError, or any lerobotstream error (a DataLoader worker's as the worker raised it); None
    for others (LeRobot's and Python's own errors keep their traceback)."""
    from lerobotstream.errors import LeRobotStreamError

    cause = _flag_error(exc)
    if cause is not None:
        return cause
    if isinstance(exc, LeRobotStreamError):
        from lerobotstream.errors import worker_error  # torch's "Caught ... in DataLoader worker" copy

        return worker_error(exc) or exc
    return None


def _flag_error(exc: BaseException) -> BaseException | None:
    """The ValueError (e.g. StreamingConfigError) behind draccus's ParsingError, if any."""
    if type(exc).__name__ != "ParsingError":
        return None
    seen = exc.__cause__ or exc.__context__
    while seen is not None:
        if isinstance(seen, ValueError) and type(seen).__name__ != "ParsingError":
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _streaming_fields() -> list[Any]:
    """The dataclass fields :class:`StreamingDatasetConfig` defines or redefines (the streaming
    flags, ``repo_id``/``streaming`` with their streaming help), plus LeRobot's ``root``."""
    from lerobotstream.integrations.lerobot.config import StreamingDatasetConfig

    own = set(vars(StreamingDatasetConfig).get("__annotations__", {})) | {"root"}
    return [f for f in dataclasses.fields(StreamingDatasetConfig) if f.name in own]


def _field_help(name: str) -> str:
    """A flag's help: the one its field carries (the generated streaming flags: from
    ``StreamOptions``), else the comment above the field in its config class (LeRobot's)."""
    from lerobotstream.integrations.lerobot.config import StreamingDatasetConfig

    field = {f.name: f for f in dataclasses.fields(StreamingDatasetConfig)}.get(name)
    given = None if field is None else field.metadata.get("custom_args", {}).get("help")
    if given:
        return " ".join(str(given).split())
    try:
        from draccus.wrappers.docstring import get_attribute_docstring

        doc = get_attribute_docstring(StreamingDatasetConfig, name)
        text = doc.comment_above or doc.comment_inline or doc.docstring_below
    except Exception:  # help text only
        text = ""
    return " ".join(str(text or "").split())


def streaming_help() -> str:
    """The short section ``lerobotstream-train --help`` prints before LeRobot's whole list: every
    streaming flag (derived from :class:`StreamingDatasetConfig`'s fields) with its default and
    help text."""
    import textwrap

    lines = [
        "lerobotstream-train: lerobot-train plus streaming. The streaming flags (all of lerobot-train's flags follow):",
        "",
    ]
    for f in _streaming_fields():
        default = (
            "required"
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            else f"default: {f.default!r}"
            if f.default is not dataclasses.MISSING
            else "default: see below"
        )
        lines.append(f"  --dataset.{f.name} ({default})")
        help_text = _field_help(f.name)
        if help_text:
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
