"""Run by tests/dataset/test_torchrun_two_ranks.py under ``torchrun --nproc_per_node=2`` (gloo, CPU): each rank
iterates one finite epoch through a DataLoader and writes its (episode, frame) anchors."""

import json
import sys

import torch
import torch.distributed as dist

from lerobotstream.dataset._dataset import StreamingLeRobotDataset

root, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
ds = StreamingLeRobotDataset(
    root=root, episode_pool_size=2, prefetch_episodes=1, max_num_shards=2, num_workers=2, batch_size=2
)
seen = []
for batch in torch.utils.data.DataLoader(ds, batch_size=2, num_workers=2):
    seen += list(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist()))
with open(f"{out}.rank{rank}", "w") as f:
    json.dump(seen, f)
dist.barrier()
dist.destroy_process_group()
