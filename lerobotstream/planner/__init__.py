"""Episode planner: rank and worker shards, exact-coverage pools, seeds, sample-exact resume.

Pure planning (numpy + a Cython core; never imports torch, never touches global RNG). The package
exports nothing: each name is imported from its module — ``_planner`` (``Planner``,
``discover_world``, ``current_worker``), ``_streams`` (``Streams``, ``PlanSettings``), ``_sizes``
(``EpisodeSizes``), ``_state`` (the resume state), ``_turns`` (the DataLoader's batch-turn rule).

Quick use (what ``StreamingLeRobotDataset`` does)::

    settings = PlanSettings(seed=1000, num_workers=2, batch_size=8, repeat=True, byte_budget=8 << 30)
    planner = Planner(Streams.of_dataset({ep: length, ...}, EpisodeSizes(size_of)), settings)
    planner.load_state_dict(ckpt["stream"])        # optional: sample-exact resume
    start = planner.worker_start(p, num_workers)   # in DataLoader worker p: logical worker, epoch, offset, limit
    for pool in planner.worker_pools(start, planner.worker_plans(start)):
        pool.frontier(8)                  # next episodes to be admitted, in order: prefetch them
        ep, fr = pool.next_anchors(16)    # int64 arrays; shorter at the end of the epoch
        pool.drain_events()               # [PoolEvent(position, "admit"|"evict", episode_index), ...]

Guarantees (exact coverage, LPT shards, seeded pools under a byte budget, sample-exact and elastic
resume, canonical partitions): docs/ARCHITECTURE.md and ``_layout``'s module doc.
"""

#: the package exports nothing (see above); every name is imported from its own module
__all__: list[str] = []
