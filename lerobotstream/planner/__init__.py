"""Episode planner: rank and worker shards, exact-coverage pools, seeds, sample-exact resume.

Pure planning (numpy + a Cython core; never imports torch, never touches global RNG).

The package exports nothing: it is the library's, not the users' (they call it through the
datasets and loaders). Each name is imported from the module that defines it — ``_planner.Planner``,
``_settings.PlanSettings``, ``_streams.Streams``, ``_sizes.EpisodeSizes``, ``_state`` (the resume
state: ``StreamState``, ``Position``, ``SCHEMA_KEY``, ``DIGEST_KEY``, ``canonical_digest``,
``ELASTIC_SETTINGS``, ``REFUSED_SETTINGS``, ``MAX_NUM_WORKERS``), ``_turns`` (the batch-turn rule:
``take_turns``, ``replay_turns``), ``_world`` (``discover_world``, ``current_worker``).

Quick use (what ``StreamingLeRobotDataset`` does)::

    settings = PlanSettings(seed=1000, num_workers=2, batch_size=8, repeat=True, byte_budget=8 << 30)
    planner = Planner(Streams.of_dataset({ep: length, ...}, EpisodeSizes(size_of)), settings)
    planner.load_state_dict(ckpt["stream"])        # optional: sample-exact resume
    # inside DataLoader worker p (torch.utils.data.get_worker_info()):
    start = planner.worker_start(p, num_workers)   # logical worker, epoch, offset, limit
    plans = planner.worker_plans(start)            # one per stream: episodes, pool size, budget
    for pool in planner.worker_pools(start, plans):
        pool.frontier(8)          # next episodes to be admitted, in order: prefetch them
        pool.resident()           # episodes whose bytes must be resident now
        ep, fr = pool.next_anchors(16)   # int64 arrays; shorter at the end of the epoch
        pool.drain_events()       # [PoolEvent(position, "admit"|"evict", episode_index), ...]
    # or simply: for ep, fr in planner.iter_worker_anchors(p, num_workers): ...

Guarantees:

* **Rank shards**: whole episodes, greedy LPT on frame counts with
  seeded tie-breaks; ``max - min <= max episode length`` frames. Deterministic from (seed,
  selected episodes, lengths, world size). Fewer non-empty episodes than ranks → ShardingError.
  Rank/world size: explicit, else ``torch.distributed`` if initialised, else RANK/WORLD_SIZE, else 0/1.
* **Worker shards**: the same LPT inside the rank over
  ``max(1, num_workers)`` shards, capped at the rank's episode count; extra workers are idle (yield
  nothing; logged once, by DataLoader worker 0 when its stream starts in ``worker_start``). Each
  used worker gets 1/n of ``byte_budget`` and ``video_decoder_cache_size``;
  the pool is ``episode_pool_size`` per worker when given, else ``max(1, 32 // n)``.
* **Pools** (``EpisodePool``): at most ``pool_size`` resident episodes and ``byte_budget`` resident
  bytes (``episode_nbytes(ep)`` exact sizes); admission strictly in a seeded order (the head waits
  until it fits, so ``frontier(k)`` is exact); an episode leaves right after its last frame; every
  frame of the worker's episodes exactly once per epoch. ``remaining``: uniform draw over the
  resident episodes' remaining frames (Fenwick tree, O(log P)); ``round_robin``: each round
  shuffles the residents and takes one random remaining frame of each; episodes admitted during a
  round join the next; ``sequential``: no draws, episodes and frames in ascending order. The
  strategies are one table (``_poolcore.STRATEGY_TABLE``: a pick function and its flags each). An episode larger than the worker's whole budget → ByteBudgetError when the
  worker plan is built (before anything is fetched).
* **Seeds**: every order is a function of (seed, epoch, rank, world size, worker, number of
  workers, strategy, pool settings, episode sizes) through ``SeedSequence`` tuple entropy and a
  private xoshiro256** generator. Default seed 1000; ``seed=None`` → 42.
* **Finite / endless**: ``repeat=False`` yields one epoch per iteration (``set_epoch``);
  the pass's ``samples_per_rank()`` / ``batches_per_rank()`` report per-rank sizes and ``equalize="drop"``
  stops every rank after the smallest rank's batch count (DDP never hangs). ``repeat=True`` chains
  epochs per worker forever.
* **Resume**: ``state_dict()`` / ``load_state_dict()`` (schema-versioned); the rank's consumed sample
  count is replayed through the DataLoader's batch turns (``replay_turns``) to give each worker its
  offset; DataLoader worker p plays logical worker (p + next) mod N. A state of another
  topology (world size, workers, batch size, strategy, pool, budget) resumes *elastically*:
  every old rank's and worker's consumed anchors follow from rank 0's count and a
  C replay of its pool; the epoch's unconsumed frames (untouched episodes whole, started ones their
  frames left) are sharded frame-balanced over the new ranks and workers and played once, then
  plain epochs follow (docs/resume.md; finite mixtures too). Another seed, episode selection or
  mixture, or a state without the schema marker → ResumeStateError.
* **Canonical partitions** (``PlanSettings(partitions=P)``, ``_layout``): ``P``
  frame-balanced partitions from (seed, P), each its own seeded pool (pool size and budget per
  partition), so each partition's order is the same on any topology; stream ``w * W + r`` plays
  ``p mod (W * K) == w * W + r``; resume continues each partition at its offset (from counts).
"""

#: the package exports nothing (see above); every name is imported from its own module
__all__: list[str] = []
