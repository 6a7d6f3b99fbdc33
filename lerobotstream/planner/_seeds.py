"""Seed derivation, and every domain tag of the planner (the one place they are written).

Every order comes from ``np.random.SeedSequence`` with a tuple entropy (:func:`seed_words`); a
seed derived for a sub-stream (a mixture's dataset, an elastic remainder) is :func:`derived_seed`.
Never global RNG: ``random``, ``numpy.random`` and ``torch`` global states are neither read nor
written. The four 64-bit words feed the private xoshiro256** generator of ``_poolcore``, the one
generator of every draw of the planner (pool draws, admission orders, LPT ties, mixture blocks):
numpy's generators are never used, so no order changes with the numpy version.
"""

from __future__ import annotations

import numpy as np

# Domain tags keep the streams of different uses apart (arbitrary fixed constants).
TAG_RANK_SHARDS = 0x52414E4B  # "RANK"
TAG_WORKER_SHARDS = 0x574B5253  # "WKRS"
TAG_ADMISSION = 0x41444D54  # "ADMT"
TAG_DRAWS = 0x44524157  # "DRAW"
TAG_PARTITIONS = 0x50415254  # "PART": canonical partitions (_partitions)
TAG_ELASTIC = 0x454C5354  # "ELST": an elastic remainder's seeds
TAG_MIXTURE = 0x4D495854  # "MIXT": a mixture's per-dataset seeds and its mix sequences


def seed_words(*entropy: int) -> np.ndarray:
    """Four uint64 words from ``SeedSequence(entropy)``; every entry must be a non-negative int.

    Returns:
        np.ndarray: uint64 (4,), C-contiguous.
    """
    ent = [int(x) for x in entropy]
    if any(x < 0 for x in ent):
        raise ValueError(f"seed entropy must be non-negative integers, got {ent}")
    words = np.random.SeedSequence(ent).generate_state(4, dtype=np.uint64)
    if not words.any():  # xoshiro's all-zero state is absorbing (probability 2**-256)
        words[0] = 1
    return np.ascontiguousarray(words)


def derived_seed(*entropy: int) -> int:
    """A seed (62-bit int) derived from ``entropy``: the first of :func:`seed_words`, shifted."""
    return int(seed_words(*entropy)[0] >> 2)
