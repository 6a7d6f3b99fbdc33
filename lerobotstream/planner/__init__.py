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

Guarantees:

* **Shards**: whole episodes, greedy LPT on frame counts with seeded ties, over the ranks (fewer
  non-empty episodes than ranks: ShardingError), then over ``max(1, num_workers)`` workers
  (``max - min <= max episode length``); extra workers are idle (logged once). Each used worker gets
  1/n of ``byte_budget`` and ``video_decoder_cache_size``; its pool is ``episode_pool_size`` or
  ``max(1, 32 // n)``.
* **Pools**: at most ``pool_size`` episodes and ``byte_budget`` bytes resident; admission strictly in
  a seeded order (so ``frontier(k)`` is exact); every frame of the worker's episodes once per epoch;
  strategies ``remaining``, ``round_robin``, ``sequential`` (``_poolcore.STRATEGY_TABLE``). An
  episode larger than the worker's whole budget: ByteBudgetError before anything is fetched.
* **Seeds**: every order is a function of (seed, epoch, rank, world size, worker, workers, strategy,
  pool settings, episode sizes); default seed 1000, ``seed=None`` → 42.
* **Finite / endless**: ``repeat=False`` plays one epoch per iteration; ``equalize="drop"`` stops
  every rank after the smallest rank's batch count. ``repeat=True`` chains epochs per worker.
* **Resume**: ``state_dict()`` / ``load_state_dict()``; the rank's consumed count replayed through
  the batch turns gives each worker its offset. Another topology resumes *elastically* (the epoch's
  unconsumed frames replanned over the new ranks and workers, docs/resume.md); another seed,
  episode selection or mixture → ResumeStateError.
* **Canonical partitions** (``partitions=P``): ``P`` frame-balanced partitions from (seed, P), each
  its own seeded pool, so each partition's order is the same on any topology.
"""

#: the package exports nothing (see above); every name is imported from its own module
__all__: list[str] = []
