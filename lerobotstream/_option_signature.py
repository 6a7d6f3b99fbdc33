"""The constructors' ``inspect.signature`` written from :class:`~lerobotstream.options.StreamOptions`'s
table (:func:`constructor_signature`): every option as a parameter with its default, for ``help()``,
IDEs and ``inspect.signature``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lerobotstream.options import LEROBOT_POSITIONAL, option_info

__all__ = ["constructor_signature"]


def constructor_signature(func: Callable, keep: Sequence[str]) -> Any:
    """``func``'s signature with its ``*args`` / ``**kwargs`` replaced by every option (LeRobot's
    positional ones first, in their order), for ``help()``, IDEs and ``inspect.signature``; ``keep``:
    the parameters of ``func`` kept as they are (``self``, ``repo_id``, ``root``, ``options``...)."""
    import inspect

    own = inspect.signature(func)
    params = [p for name, p in own.parameters.items() if name in keep and p.kind != p.KEYWORD_ONLY]
    defaults = {i.name: i.default for i in option_info()}
    for name in LEROBOT_POSITIONAL:
        params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults[name]))
    params += [p for name, p in own.parameters.items() if name in keep and p.kind == p.KEYWORD_ONLY]
    params += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=d)
        for name, d in defaults.items()
        if name not in LEROBOT_POSITIONAL and name not in keep
    ]
    return own.replace(parameters=params)
