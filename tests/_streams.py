"""The small generated dataset several suites stream, and a stream over it with small pools
(``tests/conftest.py``'s ``small_dataset`` fixture builds the dataset once per session)."""

from __future__ import annotations

from typing import Any

CAMERA = "observation.images.front"
#: five short AV1 episodes, one 32x24 camera, two episodes per video file (``make_dataset`` kwargs)
SMALL_DATASET = dict(
    episode_lengths=(7, 5, 9, 4, 6), codec="av1", cameras=((CAMERA, 32, 24),), episodes_per_video_file=2
)
BATCH = 4


def small_stream(root: Any, num_workers: int, **options: Any):
    """A ``StreamingLeRobotDataset`` over ``root`` for ``num_workers`` DataLoader workers with small
    pools (2 episodes), batch size :data:`BATCH` and 5 anchors per decode chunk; ``options`` override."""
    from lerobotstream.dataset._dataset import StreamingLeRobotDataset

    opts = {
        "episode_pool_size": 2,
        "max_num_shards": max(1, num_workers),
        "batch_size": BATCH,
        "num_workers": num_workers,
        "decode_lookahead": 5,
        **options,
    }
    return StreamingLeRobotDataset(root=root, **opts)


def checked_anchors(batch: Any, camera: str = CAMERA) -> list[tuple[int, int]]:
    """(episode_index, frame_index) of each item of a collated ``batch``, each item's ``camera``
    pixels checked against that identity (the generator burns it into every frame)."""
    from lerobotstream.testing import read_identity

    out = []
    for i, (e, f) in enumerate(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())):
        assert read_identity(batch[camera][i])[:2] == (e, f), f"pixels of another frame for ({e}, {f})"
        out.append((e, f))
    return out


def run_ranks(
    make: Any, topo: tuple[int, int, int], collect: Any, n: int | None = None, state: dict | None = None
) -> tuple[list, dict | None]:
    """Every rank ``r`` of ``topo = (world_size, num_workers, batch_size)`` iterates
    ``make(r)`` through a ``DataLoader`` (``n`` batches, or to the end), a loaded ``state`` first;
    returns (``collect(batch)`` of every batch concatenated, rank 0's state after its ``n`` batches
    or None when ``n`` is None)."""
    from torch.utils.data import DataLoader

    got, state0 = [], None
    for r in range(topo[0]):
        ds = make(r)
        if state is not None:
            ds.load_state_dict(state)
        k = 0
        for batch in DataLoader(ds, batch_size=topo[2], num_workers=topo[1]):
            got += collect(batch)
            k += 1
            if k == n:
                break
        if r == 0 and n is not None:
            state0 = ds.state_dict(batches_consumed=k)
    return got, state0


def resigned(state: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``state`` (a ``state_dict()``) with ``changes`` and its digest recomputed: a state another run
    could have written (another seed, count or mixture), for tests of what the planner checks
    beyond the digest; an origin in ``changes`` must be such a state itself."""
    from lerobotstream.planner._state import DIGEST_KEY, canonical_digest

    out = {**state, **changes}
    out[DIGEST_KEY] = canonical_digest(out)
    return out
