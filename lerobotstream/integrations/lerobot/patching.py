"""The ONLY place where lerobotstream patches LeRobot (kept small on purpose).

LeRobot's ``lerobot_train.train`` looks up three module-level names that have no public hook:
``make_dataset`` (the dataset factory), ``cycle`` (wraps the DataLoader into the endless batch
iterator) and ``save_checkpoint``. While ``lerobotstream-train --dataset.streaming=true`` runs,
:func:`installed` swaps them for ours and restores them afterwards:

* ``make_dataset``: builds :class:`lerobotstream.StreamingLeRobotDataset` (map-style path: the
  original factory, unchanged);
* ``cycle``: the same endless iteration, plus step-time / data-wait accounting and the optional
  batch trace (other DataLoaders: the original ``cycle``);
* ``save_checkpoint``: the original, then the stream state next to ``training_step.json``.

Everything else uses public seams: draccus config subclasses, ``parser.wrap`` and the
``accelerator=`` argument of ``train``. :func:`check_lerobot` refuses LeRobot versions that lack
these names with a message naming what is missing.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from lerobotstream.errors import LeRobotIntegrationError

__all__ = ["MIN_LEROBOT", "check_lerobot", "installed", "original", "train_function"]

MIN_LEROBOT = (0, 4, 4)
_PATCHED = ("make_dataset", "cycle", "save_checkpoint")
_originals: dict[str, Any] = {}


def _version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def check_lerobot() -> Any:
    """Import ``lerobot.scripts.lerobot_train`` and check the seams; return the module.

    Raises:
        LeRobotIntegrationError: LeRobot missing, older than 0.4.4, or missing a seam.
    """
    try:
        from importlib.metadata import version

        ver = version("lerobot")
    except Exception as e:  # PackageNotFoundError
        raise LeRobotIntegrationError(
            "lerobotstream-train needs LeRobot (pip install 'lerobot>=0.4.4'; `make setup-lerobot` "
            "creates .venv-lerobot with it)") from e
    if _version_tuple(ver) < MIN_LEROBOT:
        raise LeRobotIntegrationError(
            f"lerobotstream-train supports lerobot>={'.'.join(map(str, MIN_LEROBOT))}; found {ver}")
    try:
        from lerobot.scripts import lerobot_train as lt
    except Exception as e:
        raise LeRobotIntegrationError(f"cannot import lerobot.scripts.lerobot_train (lerobot {ver}): {e}") from e
    missing = [n for n in (*_PATCHED, "train") if not hasattr(lt, n)]
    fn = getattr(getattr(lt, "train", None), "__wrapped__", None)
    if fn is None:
        missing.append("train.__wrapped__ (parser.wrap)")
    elif "accelerator" not in inspect.signature(fn).parameters:
        missing.append("train(cfg, accelerator=...)")
    if missing:
        raise LeRobotIntegrationError(
            f"lerobot {ver} is not supported by lerobotstream-train: lerobot.scripts.lerobot_train lacks "
            f"{', '.join(missing)} (tested with lerobot 0.4.4)")
    return lt


def train_function() -> Callable[..., Any]:
    """LeRobot's ``train(cfg, accelerator=None)`` without its CLI-parsing decorator."""
    return check_lerobot().train.__wrapped__


def original(name: str) -> Any:
    """LeRobot's own object behind a patched name (valid inside and outside :func:`installed`)."""
    lt = check_lerobot()
    return _originals.get(name, getattr(lt, name))


@contextlib.contextmanager
def installed(**replacements: Callable[..., Any]) -> Iterator[None]:
    """Swap ``lerobot_train.<name>`` for the given callables (names: make_dataset, cycle,
    save_checkpoint) for the duration of the block; always restores LeRobot's originals."""
    lt = check_lerobot()
    unknown = set(replacements) - set(_PATCHED)
    if unknown:
        raise ValueError(f"not a patchable name: {sorted(unknown)}")
    if _originals:
        raise RuntimeError("lerobotstream patches are already installed")
    for name, fn in replacements.items():
        _originals[name] = getattr(lt, name)
        setattr(lt, name, fn)
    try:
        yield
    finally:
        for name, fn in _originals.items():
            setattr(lt, name, fn)
        _originals.clear()
