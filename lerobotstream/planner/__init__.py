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

Guarantees (details: docs/ARCHITECTURE.md, ``_layout``'s module doc):

* **Shards**: whole episodes, greedy LPT on frame counts with seeded ties over the ranks (fewer
  non-empty episodes than ranks: ShardingError), then over ``max(1, num_workers)`` workers
  (``max - min <= max episode length``); idle workers are logged once.
* **Pools**: at most ``pool_size`` episodes and ``byte_budget`` bytes resident, admitted strictly in
  a seeded order (``frontier(k)`` is exact); every frame of a worker's episodes once per epoch. An
  episode larger than the worker's whole budget: ByteBudgetError before anything is fetched.
* **Seeds**: every order is a function of (seed, epoch, rank, world size, worker, workers, strategy,
  pool settings, episode sizes); default seed 1000, ``seed=None`` → 42.
* **Finite / endless**: ``repeat=False`` plays one epoch per iteration (``equalize="drop"``: every
  rank stops after the smallest rank's batch count); ``repeat=True`` chains epochs per worker.
* **Resume**: ``state_dict()`` / ``load_state_dict()`` sample-exact on the same topology, elastic on
  another (docs/resume.md); another seed, episode selection or mixture → ResumeStateError.
* **Canonical partitions** (``partitions=P``): each partition's order is the same on any topology.
"""

#: the package exports nothing (see above); every name is imported from its own module
__all__: list[str] = []
