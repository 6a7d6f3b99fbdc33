"""Command-line flags of stream options (the profiler's, ``python -m lerobotstream.profile``): one
argparse flag per option, its type, default and help read from :class:`~lerobotstream.options.StreamOptions`."""

from __future__ import annotations

from collections import abc
from collections.abc import Callable, Sequence
from typing import Any

from lerobotstream.options import StreamOptions, option_info


def _none_or(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    def conv(text: str) -> Any:
        return None if text.strip().lower() in ("none", "null") else parse(text)

    conv.__name__ = name  # argparse names it in "invalid <name> value"
    return conv


def _index_list(text: str) -> list[int]:
    """``0-9,20`` → [0, 1, ..., 9, 20]."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part.strip()[1:]:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        elif part.strip():
            out.append(int(part))
    return out


def _cli_type(hint: Any) -> tuple[Callable[[str], Any] | None, str]:
    """(argparse ``type`` for an option's annotation — None: a ``--x/--no-x`` flag — and the
    metavar words for its help)."""
    import json
    import typing

    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = typing.get_origin(hint) is typing.Union
    inner = args[0] if optional else hint
    origin = typing.get_origin(inner)
    if inner is bool:
        return None, ""
    if inner in (int, float, str):
        return (_none_or(inner, inner.__name__) if optional else inner), ""
    if inner is dict:
        return _none_or(json.loads, "JSON"), "JSON"
    if origin is abc.Sequence and typing.get_args(inner) == (int,):
        return _none_or(_index_list, "index list"), "indices and ranges, e.g. 0-9,20"
    if origin is abc.Sequence and typing.get_args(inner) == (str,):
        return _none_or(lambda t: [x for x in t.split(",") if x], "name list"), "comma-separated"
    raise TypeError(f"no command-line form for an option of type {hint!r}")


def add_cli_flags(
    parser: Any,
    names: Sequence[str],
    *,
    defaults: dict[str, Any] | None = None,
    helps: dict[str, str] | None = None,
    aliases: dict[str, Sequence[str]] | None = None,
) -> None:
    """Add one argparse flag per option of ``names`` to ``parser`` (a parser or an argument group):
    ``--episode-pool-size`` for ``episode_pool_size``, parsed by the option's type (an int, a
    number or a string — ``none`` where the option takes None —, ``--x/--no-x`` for a boolean, JSON
    for a dict, ``0-9,20`` for episode indices, comma-separated names for a list), with its default
    and help from :class:`StreamOptions` unless ``defaults`` / ``helps`` give others; ``aliases``:
    more flag names per option. The value lands in ``args.<name>``; the option's rule checks it
    when the stream is built (``StreamingConfigError``).

    Raises:
        KeyError: a name that is no option; TypeError: an option with no command-line form
        (``image_transforms``).
    """
    import argparse
    import typing

    hints = typing.get_type_hints(StreamOptions)
    infos = {i.name: i for i in option_info()}
    for name in names:
        info = infos[name]
        conv, words = _cli_type(hints[name])
        default = (defaults or {}).get(name, info.default)
        text = (helps or {}).get(name, info.help)
        text = f"{text} ({words + '; ' if words else ''}default: {default!r})".replace("%", "%%")
        flags = [f"--{name.replace('_', '-')}", *(aliases or {}).get(name, ())]
        if conv is None:
            parser.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, default=default, help=text)
        else:
            parser.add_argument(*flags, dest=name, type=conv, default=default, help=text)
