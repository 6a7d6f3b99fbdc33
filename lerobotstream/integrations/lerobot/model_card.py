"""LeRobot's ``generate_model_card`` for a mixture (used when a policy is pushed to the Hub): the
card's ``datasets`` lists every dataset of the mixture, and its text adds the weights; a single
dataset's card is LeRobot's own.

0.6.1 has the method ``PreTrainedPolicy.generate_model_card(dataset_repo_id, ...)``, LeRobot main
the free function ``generate_model_card(model_cfg, cfg, dataset_meta)``
(:func:`patching.model_card_target` says which is patched).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lerobotstream.integrations.lerobot import patching

__all__ = ["mixture_model_card"]


def mixture_model_card(run: Any) -> Callable[..., Any]:
    """The ``generate_model_card`` to install for ``run`` (its ``stream.dataset.mixture``, read
    when a card is made): LeRobot's original for a single dataset, the mixture's card otherwise."""
    original = patching.original("generate_model_card")
    _, is_method = patching.model_card_target()

    def mixture() -> dict | None:
        return getattr(getattr(run.stream, "dataset", None), "mixture", None)

    def extend(card: Any, mix: dict) -> Any:
        total = sum(mix["weights"])
        rows = "\n".join(f"| {r} | {w / total:.4f} |" for r, w in zip(mix["repo_ids"], mix["weights"]))
        card.text = (
            card.text + "\n\n## Training data: a streamed mixture\n\nTrained with lerobotstream on a "
            "weighted mixture of datasets (share of the samples drawn from each"
            f"{'' if mix.get('weights_given') else ', in proportion to its frames'}):\n\n"
            "| dataset | weight |\n|---|---:|\n" + rows + "\n"
        )
        return card

    if is_method:

        def generate_model_card(self: Any, dataset_repo_id: Any, *args: Any, **kwargs: Any) -> Any:
            mix = mixture()
            if not mix:
                return original(self, dataset_repo_id, *args, **kwargs)
            return extend(original(self, list(mix["repo_ids"]), *args, **kwargs), mix)
    else:

        def generate_model_card(
            model_cfg: Any, cfg: Any = None, dataset_meta: Any = None, *args: Any, **kwargs: Any
        ) -> Any:
            mix = mixture()
            card = original(model_cfg, cfg, dataset_meta, *args, **kwargs)
            if not mix:
                return card
            card.data.datasets = list(mix["repo_ids"])
            return extend(card, mix)

    return generate_model_card
