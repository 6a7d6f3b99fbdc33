"""The ONLY place where lerobotstream patches LeRobot (kept small on purpose).

``lerobot_train.train`` looks up module-level names that have no public hook; while
``lerobotstream-train --dataset.streaming=true`` runs, :func:`installed` swaps them for ours and
restores them afterwards:

* the dataset factory: ``make_train_eval_datasets`` (LeRobot 0.6.x: ``(train, eval or None)``) or
  ``make_dataset`` (0.4.4);
* ``cycle``: the same endless iteration plus the summary's counters and the optional batch trace;
* ``save_checkpoint``: the original, then the stream state beside ``training_step.json``;
* ``Accelerator`` (``accelerate.Accelerator``, and ``lerobot_train.Accelerator`` where 0.4.4 imports
  it): a subclass that LeRobot builds with its own settings but that never re-shards a stream;
* ``generate_model_card`` (``PreTrainedPolicy.generate_model_card``; on LeRobot main the free
  function ``lerobot.common.train_utils.generate_model_card``): for a mixture, every dataset.

Everything else uses public seams (draccus config subclasses, ``parser.wrap``).
:func:`check_lerobot` refuses a LeRobot that lacks these names, naming what is missing.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from lerobotstream.errors import LeRobotIntegrationError

__all__ = [
    "MIN_LEROBOT",
    "TESTED_LEROBOT",
    "check_lerobot",
    "dataset_seam",
    "installed",
    "lerobot_version",
    "original",
    "train_function",
]

MIN_LEROBOT = (0, 4, 4)
TESTED_LEROBOT = ("0.6.1", "0.4.4")
#: dataset factories in the order they are looked for (0.6.x, then 0.4.4)
DATASET_SEAMS = ("make_train_eval_datasets", "make_dataset")
_PATCHED = (*DATASET_SEAMS, "cycle", "save_checkpoint", "Accelerator", "generate_model_card")
_originals: dict[str, Any] = {}


def lerobot_version() -> tuple[int, ...]:
    """The installed LeRobot version as a tuple (``(0, 6, 1)``). Raises LeRobotIntegrationError."""
    try:
        from importlib.metadata import version

        parts = ("".join(ch for ch in part if ch.isdigit()) for part in version("lerobot").split(".")[:3])
        return tuple(int(digits or 0) for digits in parts)
    except Exception as e:  # PackageNotFoundError
        raise LeRobotIntegrationError(
            "lerobotstream-train needs LeRobot (pip install 'lerobot[dataset]==0.6.1' accelerate; "
            "`make setup-lerobot` creates .venv-lerobot with it)"
        ) from e


def dataset_seam(lt: Any) -> str:
    """The dataset factory name ``lerobot_train.train`` calls in this LeRobot version."""
    for name in DATASET_SEAMS:
        if hasattr(lt, name):
            return name
    raise LeRobotIntegrationError(f"lerobot.scripts.lerobot_train has none of {DATASET_SEAMS}")


def check_lerobot() -> Any:
    """Import ``lerobot.scripts.lerobot_train`` and check the seams; return the module.

    Raises:
        LeRobotIntegrationError: LeRobot missing, older than 0.4.4, or missing a seam (named).
    """
    ver = lerobot_version()
    text = ".".join(map(str, ver))
    tested = " and ".join(TESTED_LEROBOT)
    if ver < MIN_LEROBOT:
        raise LeRobotIntegrationError(
            f"lerobotstream-train supports lerobot>={'.'.join(map(str, MIN_LEROBOT))} (tested: {tested}); found {text}"
        )
    try:
        from lerobot.scripts import lerobot_train as lt
    except Exception as e:
        raise LeRobotIntegrationError(f"cannot import lerobot.scripts.lerobot_train (lerobot {text}): {e}") from e
    missing = [n for n in ("cycle", "save_checkpoint", "train") if not hasattr(lt, n)]
    if not any(hasattr(lt, n) for n in DATASET_SEAMS):
        missing.append(" or ".join(DATASET_SEAMS))
    fn = getattr(getattr(lt, "train", None), "__wrapped__", None)
    if fn is None:
        missing.append("train.__wrapped__ (parser.wrap)")
    elif "accelerator" not in inspect.signature(fn).parameters and not _builds_accelerator():
        missing.append("train(cfg, accelerator=...) or lerobot.distributed.make_accelerator")
    try:
        import accelerate  # noqa: F401
    except ImportError:
        missing.append("the accelerate package (pip install accelerate)")
    if missing:
        raise LeRobotIntegrationError(
            f"lerobot {text} is not supported by lerobotstream-train: lerobot.scripts.lerobot_train lacks "
            f"{', '.join(missing)} (tested with lerobot {tested})"
        )
    return lt


def _builds_accelerator() -> bool:
    """LeRobot main after 0.6.1: ``train(cfg)`` builds its ``Accelerator`` through
    ``lerobot.distributed.make_accelerator`` (``cfg.accelerator.build``, which imports
    ``accelerate.Accelerator`` when called, so the patched class is the one built)."""
    try:
        from lerobot.distributed import make_accelerator  # noqa: F401
    except Exception:  # noqa: BLE001 - 0.6.1 and 0.4.4 have no such module
        return False
    return True


def train_function() -> Callable[..., Any]:
    """LeRobot's ``train(cfg, accelerator=None)`` without its CLI-parsing decorator."""
    return check_lerobot().train.__wrapped__


def original(name: str) -> Any:
    """LeRobot's own object behind a patched name (valid inside and outside :func:`installed`)."""
    if name in _originals:
        return _originals[name]
    if name == "Accelerator":
        import accelerate

        return accelerate.Accelerator
    if name == "generate_model_card":
        return model_card_target()[0].generate_model_card
    return getattr(check_lerobot(), name)


def model_card_target() -> tuple[Any, bool]:
    """Where LeRobot's ``generate_model_card`` lives: ``(PreTrainedPolicy, True)`` (0.6.1, 0.4.4: a
    method taking the dataset repo id) or ``(lerobot.common.train_utils, False)`` (main after 0.6.1:
    a free function of ``(model_cfg, cfg, dataset_meta)``)."""
    from lerobot.policies.pretrained import PreTrainedPolicy as policy

    if hasattr(policy, "generate_model_card"):
        return policy, True
    try:
        from lerobot.common import train_utils
    except ImportError as e:
        raise LeRobotIntegrationError(f"LeRobot has no generate_model_card (lerobot {lerobot_version()}): {e}") from e
    if not hasattr(train_utils, "generate_model_card"):
        raise LeRobotIntegrationError("lerobot.common.train_utils has no generate_model_card")
    return train_utils, False


@contextlib.contextmanager
def installed(**replacements: Any) -> Iterator[None]:
    """Swap ``lerobot_train.<name>`` for the given objects for the duration of the block (names:
    the version's dataset seam, ``cycle``, ``save_checkpoint``, ``Accelerator``; ``Accelerator``
    is also swapped in the ``accelerate`` module, where 0.6.x imports it inside ``train``;
    ``generate_model_card`` on LeRobot's ``PreTrainedPolicy``).
    Always restores LeRobot's originals."""
    import accelerate

    lt = check_lerobot()
    unknown = set(replacements) - set(_PATCHED)
    if unknown:
        raise ValueError(f"not a patchable name: {sorted(unknown)}")
    if _originals:
        raise RuntimeError("lerobotstream patches are already installed")
    targets: list[tuple[Any, str, Any]] = []
    for name, obj in replacements.items():
        if name == "Accelerator":
            targets.append((accelerate, name, obj))
            if hasattr(lt, name):
                targets.append((lt, name, obj))
        elif name == "generate_model_card":
            targets.append((model_card_target()[0], name, obj))
        else:
            if not hasattr(lt, name):
                raise LeRobotIntegrationError(f"lerobot.scripts.lerobot_train has no {name}")
            targets.append((lt, name, obj))
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in targets]
    for _mod, name, old in saved:
        _originals.setdefault(name, old)
    for mod, name, obj in targets:
        setattr(mod, name, obj)
    try:
        yield
    finally:
        for mod, name, old in saved:
            setattr(mod, name, old)
        _originals.clear()
