"""The small generated dataset several suites stream, and a stream over it with small pools
(``tests/conftest.py``'s ``small_dataset`` fixture builds the dataset once per session)."""

from __future__ import annotations

from typing import Any

CAMERA = "observation.images.front"
#: five short AV1 episodes, one 32x24 camera, two episodes per video file (``make_dataset`` kwargs)
SMALL_DATASET = dict(episode_lengths=(7, 5, 9, 4, 6), codec="av1", cameras=((CAMERA, 32, 24),),
                     episodes_per_video_file=2)
BATCH = 4


def small_stream(root: Any, num_workers: int, **options: Any):
    """A ``StreamingLeRobotDataset`` over ``root`` for ``num_workers`` DataLoader workers with small
    pools (2 episodes), batch size :data:`BATCH` and 5 anchors per decode chunk; ``options`` override."""
    from lerobotstream.dataset import StreamingLeRobotDataset

    opts = {"episode_pool_size": 2, "max_num_shards": max(1, num_workers), "batch_size": BATCH,
            "num_workers": num_workers, "decode_lookahead": 5, **options}
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
