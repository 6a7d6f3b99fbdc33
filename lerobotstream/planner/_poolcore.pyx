# cython: language_level=3
"""Cython core of the exact-coverage episode pool (one DataLoader worker's anchor stream).

Sampling strategies are one table, :data:`STRATEGY_TABLE`: a ``pick`` function (the resident slot
that gives the next anchor, run per frame without the GIL), flags and help text each. Per anchor:
O(log P) for ``remaining`` (Fenwick-tree draw over the residents' remaining frames), amortised O(1)
for ``round_robin`` and ``sequential``. Frames inside an episode come from a lazy Fisher-Yates
shuffle (one int32 buffer per resident episode): memory is the resident episodes' lengths.

Randomness: a private xoshiro256** generator seeded with four words from ``SeedSequence``
(``_layout.seed_words``); bounded draws by Lemire's multiply-shift with rejection (exactly uniform).
:class:`EpisodePool` works on local ids 0..E-1 inside and gives out dataset ``episode_index`` values.
"""

from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc

from collections import namedtuple

cimport numpy as cnp
import numpy as np

from lerobotstream.errors import over_budget

cnp.import_array()

cdef extern from *:
    """
    #include <stdint.h>
    static inline uint64_t lrs_rotl(const uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    static inline uint64_t lrs_xoshiro_next(uint64_t *s) {
        const uint64_t result = lrs_rotl(s[1] * 5, 7) * 9;
        const uint64_t t = s[1] << 17;
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
        s[2] ^= t; s[3] = lrs_rotl(s[3], 45);
        return result;
    }
    /* Uniform integer in [0, n), n >= 1 (Lemire 2019, exact). */
    static inline uint64_t lrs_randbelow(uint64_t *s, uint64_t n) {
        uint64_t x = lrs_xoshiro_next(s);
        unsigned __int128 m = (unsigned __int128)x * (unsigned __int128)n;
        uint64_t l = (uint64_t)m;
        if (l < n) {
            uint64_t t = (0 - n) % n;
            while (l < t) {
                x = lrs_xoshiro_next(s);
                m = (unsigned __int128)x * (unsigned __int128)n;
                l = (uint64_t)m;
            }
        }
        return (uint64_t)(m >> 64);
    }
    """
    uint64_t lrs_randbelow(uint64_t *s, uint64_t n) nogil

#: An admission or eviction: ``position`` (samples the pool had emitted: an eviction at p follows the
#: episode's last anchor, number p-1; an episode admitted at p is drawn from sample p on), ``kind``
#: (``"admit"``: bytes must be resident before its first anchor; ``"evict"``: release them once its
#: last anchor is decoded), ``episode_index`` (dataset episode index).
PoolEvent = namedtuple("PoolEvent", "position kind episode_index")


# --- sampling strategies ---------------------------------------------------------------------------
cdef class EpisodePool

ctypedef int64_t (*pick_fn)(EpisodePool pool) noexcept nogil

cdef struct Strategy:
    const char *name  # the ``sampling_strategy`` value
    pick_fn pick      # the resident slot that gives the next anchor (remaining > 0)
    bint weighted     # pick draws by remaining frames: the Fenwick tree is kept up to date per anchor
    bint in_order     # no draws: episodes admitted ascending (no seeded admission order), frames ascending
    const char *help  # what the option's help says of it


cdef int64_t pick_remaining(EpisodePool pool) noexcept nogil:
    """A resident frame uniformly at random: its slot, by the Fenwick tree of remaining frames."""
    return pool._fw_find(<int64_t>lrs_randbelow(pool.rng, <uint64_t>pool.remaining))


cdef int64_t pick_round_robin(EpisodePool pool) noexcept nogil:
    """Each round a seeded shuffle of the residents at its start (episodes admitted later join the
    next round), one slot after another."""
    cdef int64_t i, j, tmp
    if pool.round_pos >= pool.round_len:
        for i in range(pool.n_resident):
            pool.round_slots[i] = pool.res_list[i]
        pool.round_len = pool.n_resident
        pool.round_pos = 0
        for i in range(pool.round_len - 1, 0, -1):
            j = <int64_t>lrs_randbelow(pool.rng, <uint64_t>(i + 1))
            tmp = pool.round_slots[i]
            pool.round_slots[i] = pool.round_slots[j]
            pool.round_slots[j] = tmp
    i = pool.round_slots[pool.round_pos]
    pool.round_pos += 1
    return i


cdef int64_t pick_sequential(EpisodePool pool) noexcept nogil:
    """The earliest admitted resident: the smallest local id (local ids rise with admission when
    ``in_order``, so the one found stays the smallest until it leaves: one scan per episode)."""
    cdef int64_t i, j
    if pool.seq_ep >= 0 and pool.slot_ep[pool.seq_slot] == pool.seq_ep:
        return pool.seq_slot
    j = pool.res_list[0]
    for i in range(1, pool.n_resident):
        if pool.slot_ep[pool.res_list[i]] < pool.slot_ep[j]:
            j = pool.res_list[i]
    pool.seq_slot = j
    pool.seq_ep = pool.slot_ep[j]
    return j


#: THE table of sampling strategies. A strategy's id is its position and enters every seed: append
#: new ones, never reorder or remove (and raise the array's size: Cython needs it written).
cdef Strategy[3] STRATEGY_TABLE = [
    Strategy(name=b"remaining", pick=pick_remaining, weighted=True, in_order=False,
             help=b"frames drawn in proportion to what is left"),
    Strategy(name=b"round_robin", pick=pick_round_robin, weighted=False, in_order=False,
             help=b"one frame of each resident episode per round: the most even mix, favours short "
                  b"episodes early, more decoder churn"),
    Strategy(name=b"sequential", pick=pick_sequential, weighted=False, in_order=True,
             help=b"episodes and frames in order, as the eval stream"),
]

#: A strategy table entry: ``id`` (its position, part of the seeds), ``name``, ``in_order`` (no
#: draws: episodes admitted ascending, frames ascending) and ``help``.
StrategyInfo = namedtuple("StrategyInfo", "id name in_order help")

#: name -> :class:`StrategyInfo`, in table order (what ``constants.SAMPLING_STRATEGIES`` lists)
STRATEGIES = {
    STRATEGY_TABLE[i].name.decode(): StrategyInfo(
        i, STRATEGY_TABLE[i].name.decode(), bool(STRATEGY_TABLE[i].in_order), STRATEGY_TABLE[i].help.decode()
    )
    for i in range(sizeof(STRATEGY_TABLE) // sizeof(Strategy))
}


def strategy_info(name):
    """The table entry (:class:`StrategyInfo`) of sampling strategy ``name``.

    Raises:
        ValueError: ``name`` is not a strategy of the table.
    """
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown sampling strategy {name!r}: one of {tuple(STRATEGIES)}") from None


def shuffled_order(uint64_t[::1] state, int64_t n):
    """Seeded Fisher-Yates permutation of ``range(n)``, int64 (n,), from four uint64 seed words
    ``state`` (not modified) through the same xoshiro256** generator."""
    cdef uint64_t s[4]
    cdef int64_t i, j, tmp
    for i in range(4):
        s[i] = state[i]
    out = np.arange(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    for i in range(n - 1, 0, -1):
        j = <int64_t>lrs_randbelow(s, <uint64_t>(i + 1))
        tmp = o[i]
        o[i] = o[j]
        o[j] = tmp
    return out


cdef class EpisodePool:
    """Exact-coverage pool of one group for one epoch (``WorkerPlan.group_pool``): every frame once;
    at most ``pool_size`` episodes and ``byte_budget`` bytes resident; episodes admitted strictly in
    ``order`` (the next one waits until it fits), evicted right after their last frame.

    Args:
        episode_indices (np.ndarray): int64 (E,) dataset episode indices of the pool.
        lengths (np.ndarray): int64 (E,) frames per episode (>= 1).
        nbytes (np.ndarray): int64 (E,) resident bytes per episode (zeros when unbounded; -1 where
            not known yet: ``size_of`` is asked when admission reaches the episode, and the
            answer is written into this array, so pools over the same array share what is known).
        order (np.ndarray): int64 (E,) admission order, positions into the arrays above (a
            permutation of ``range(E)``).
        pool_size (int): maximum resident episodes (>= 1).
        byte_budget (int | None): maximum resident bytes, or None.
        strategy (str): a name of the strategy table (:data:`STRATEGIES`).
        draw_words (np.ndarray): uint64 (4,) seed words of the draws.
        frame_maps (dict[int, np.ndarray] | None): elastic remainders: for a local episode whose
            ``lengths`` entry counts only its remaining frames, the int64 ascending frame indices
            those are (pool-local frame k is frame ``frame_maps[i][k]`` of the episode).
        size_of (Callable[[int], int] | None): ``size_of(local episode) -> int`` bytes for an
            ``nbytes`` entry of -1 (``WorkerPlan.size_of``), called holding the GIL when admission
            under a budget reaches the episode; None: every size is given.

    Raises:
        ValueError: (construction) an unknown strategy name, ``pool_size`` < 1, arrays of
            different lengths, or an unknown size (-1) under a budget without ``size_of``.
        ByteBudgetError: when admission reaches an episode larger than the whole budget.
        the size provider's typed errors, unchanged, from the ``fill`` / ``next_anchors`` whose
            admission asked (the episode stays unsized and unadmitted).
    """

    cdef readonly int64_t emitted, resident_bytes  # anchors emitted this epoch; bytes resident now
    cdef readonly int64_t remaining  # frames of the epoch not emitted yet (0: exhausted)
    cdef int64_t n_eps, pool_size, byte_budget
    cdef const Strategy *strategy
    cdef int64_t next_admit, n_resident, log2p
    cdef int64_t[::1] lengths, nbytes, order
    cdef int64_t *tree          # Fenwick tree over slots, 1-based, size P+1 (one block with the next six)
    cdef int64_t *slot_ep       # local episode in slot, -1 when free
    cdef int64_t *slot_rem      # frames left in slot's episode
    cdef int64_t *free_slots
    cdef int64_t n_free
    cdef int64_t *res_list      # dense list of resident slots
    cdef int64_t *res_pos       # slot -> position in res_list
    cdef int64_t *round_slots   # round_robin's current round
    cdef int64_t round_len, round_pos
    cdef int64_t seq_slot, seq_ep   # sequential's current episode (seq_ep -1: none yet)
    cdef int32_t **slot_buf     # lazily shuffled frame indices
    cdef uint64_t rng[4]
    cdef list _events
    cdef object size_of
    cdef object episode_indices  # int64 (E,): local id -> dataset episode index
    cdef object _base, _flat  # frame maps, one flat table: frame = _flat[_base[local] + k] (_base -1: unmapped)

    def __init__(self, episode_indices, lengths, nbytes, order, int64_t pool_size, byte_budget, str strategy,
                 draw_words, frame_maps=None, size_of=None):
        cdef int64_t i, P
        cdef uint64_t[::1] state = np.ascontiguousarray(draw_words, dtype=np.uint64)
        info = strategy_info(strategy)
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        self.episode_indices = np.ascontiguousarray(episode_indices, dtype=np.int64)
        lengths, nbytes, order = (np.ascontiguousarray(a, dtype=np.int64) for a in (lengths, nbytes, order))
        if not len(lengths) == len(nbytes) == len(order) == len(self.episode_indices):
            raise ValueError("episode_indices, lengths, nbytes and order must have the same length")
        self.lengths, self.nbytes, self.order = lengths, nbytes, order
        self.n_eps = lengths.shape[0]
        self.pool_size = pool_size
        self.byte_budget = -1 if byte_budget is None else int(byte_budget)
        self.strategy = &STRATEGY_TABLE[<int64_t>info.id]
        if self.byte_budget >= 0 and size_of is None and len(lengths) and np.min(nbytes) < 0:
            raise ValueError("nbytes has unknown sizes (-1) under a byte budget and the pool has no size_of")
        self.size_of = size_of
        self.seq_ep = -1  # (C fields start zeroed)
        for i in range(4):
            self.rng[i] = state[i]
        P = pool_size
        self.log2p = 1 << (int(P).bit_length() - 1)  # the largest power of two <= P
        self.tree = <int64_t *>calloc(7 * P + 1, sizeof(int64_t))
        self.slot_buf = <int32_t **>calloc(P, sizeof(int32_t *))
        if self.tree == NULL or self.slot_buf == NULL:
            raise MemoryError("EpisodePool: out of memory")
        self.slot_ep = self.tree + P + 1
        self.slot_rem = self.slot_ep + P
        self.free_slots = self.slot_rem + P
        self.res_list = self.free_slots + P
        self.res_pos = self.res_list + P
        self.round_slots = self.res_pos + P
        for i in range(P):
            self.slot_ep[i] = -1
            self.free_slots[i] = P - 1 - i  # pop from the end: slot 0 first
        self.n_free = P
        self._events = []
        self._base = None
        if frame_maps:
            keys = sorted(frame_maps)
            parts = [np.asarray(frame_maps[local], dtype=np.int64) for local in keys]
            self._base = np.full(len(self.episode_indices), -1, dtype=np.int64)
            lens = np.array([len(f) for f in parts], dtype=np.int64)
            self._base[keys] = np.cumsum(lens) - lens
            self._flat = np.concatenate(parts)
        self._admit()

    def __dealloc__(self):
        cdef int64_t i
        if self.slot_buf != NULL:
            for i in range(self.pool_size):
                free(self.slot_buf[i])
        free(self.slot_buf)
        free(self.tree)

    # --- Fenwick tree --------------------------------------------------------------------------
    cdef inline void _fw_add(self, int64_t slot, int64_t delta) noexcept nogil:
        cdef int64_t i = slot + 1
        while i <= self.pool_size:
            self.tree[i] += delta
            i += i & (-i)

    cdef inline int64_t _fw_find(self, int64_t target) noexcept nogil:
        """Slot whose cumulative range holds ``target`` (0 <= target < total)."""
        cdef int64_t pos = 0, step = self.log2p, nxt
        while step > 0:
            nxt = pos + step
            if nxt <= self.pool_size and self.tree[nxt] <= target:
                pos = nxt
                target -= self.tree[nxt]
            step >>= 1
        return pos  # 0-based slot = (1-based index pos+1) - 1

    # --- admission / eviction ------------------------------------------------------------------
    cdef int _over_budget(self, int64_t ep, int64_t n) except -1:
        raise over_budget(ep, n, self.byte_budget, holder="the pool",
                          budget_is=f"episode {ep} is the pool's local index")

    cdef int _admit(self) except -1:
        cdef int64_t ep, slot, n, i
        cdef int32_t *buf
        while self.next_admit < self.n_eps and self.n_resident < self.pool_size:
            ep = self.order[self.next_admit]
            if self.byte_budget >= 0:
                if self.nbytes[ep] < 0:  # size on demand: the one call out of the pool (checked at construction)
                    n = int(self.size_of(ep))
                    if n < 0:
                        self._over_budget(ep, n)
                    self.nbytes[ep] = n
                if self.nbytes[ep] > self.byte_budget:
                    self._over_budget(ep, self.nbytes[ep])
                if self.resident_bytes + self.nbytes[ep] > self.byte_budget:
                    break  # strict admission order: wait for evictions to free bytes
            n = self.lengths[ep]
            buf = <int32_t *>malloc(n * sizeof(int32_t))
            if buf == NULL:
                raise MemoryError("EpisodePool: out of memory for an episode's frame order")
            for i in range(n):
                buf[i] = <int32_t>i
            self.n_free -= 1
            slot = self.free_slots[self.n_free]
            self.slot_ep[slot] = ep
            self.slot_rem[slot] = n
            self.slot_buf[slot] = buf
            self._fw_add(slot, n)
            self.res_pos[slot] = self.n_resident
            self.res_list[self.n_resident] = slot
            self.n_resident += 1
            self.resident_bytes += self.nbytes[ep]
            self.remaining += n
            self.next_admit += 1
            self._events.append(PoolEvent(self.emitted, "admit", int(self.episode_indices[ep])))
        return 0

    cdef int _evict(self, int64_t slot) except -1:
        cdef int64_t ep = self.slot_ep[slot], p, last
        free(self.slot_buf[slot])
        self.slot_buf[slot] = NULL
        self.slot_ep[slot] = -1
        p = self.res_pos[slot]
        last = self.res_list[self.n_resident - 1]
        self.res_list[p] = last
        self.res_pos[last] = p
        self.n_resident -= 1
        self.resident_bytes -= self.nbytes[ep]
        self.free_slots[self.n_free] = slot
        self.n_free += 1
        self._events.append(PoolEvent(self.emitted, "evict", int(self.episode_indices[ep])))
        return 0

    cdef int64_t _fill(self, int64_t[::1] out_ep, int64_t[::1] out_frame, int64_t n) except -1:
        """Emit up to ``n`` anchors into ``out_ep`` (local episode) / ``out_frame`` (pool-local
        frame); returns the count. Fewer than ``n`` means the epoch is exhausted."""
        cdef int64_t k = 0, slot, rem, j
        cdef int32_t *buf
        cdef int32_t f
        cdef pick_fn pick = self.strategy.pick
        cdef bint in_order = self.strategy.in_order, weighted = self.strategy.weighted
        while k < n and self.remaining > 0:
            slot = pick(self)
            rem = self.slot_rem[slot]
            buf = self.slot_buf[slot]
            if in_order:
                f = <int32_t>(self.lengths[self.slot_ep[slot]] - rem)
            else:
                j = <int64_t>lrs_randbelow(self.rng, <uint64_t>rem)
                f = buf[j]
                buf[j] = buf[rem - 1]
            rem -= 1
            self.slot_rem[slot] = rem
            if weighted:
                self._fw_add(slot, -1)
            self.remaining -= 1
            out_ep[k] = self.slot_ep[slot]
            out_frame[k] = f
            k += 1
            self.emitted += 1
            if rem == 0:
                self._evict(slot)
                self._admit()
        return k

    def _map(self, local, frames):
        """Pool-local frames of local episodes -> episode frames, in place (elastic remainders)."""
        if self._base is not None:
            sel = np.flatnonzero(self._base[local] >= 0)
            frames[sel] = self._flat[self._base[local[sel]] + frames[sel]]

    def fill(self, out_episode, out_frame):
        """Write up to ``len(out_episode)`` anchors (dataset episode index, frame index) into the
        caller's int64 arrays; returns the count (fewer: the epoch ended)."""
        cdef int64_t k = self._fill(out_episode, out_frame, min(len(out_episode), len(out_frame)))
        self._map(out_episode[:k], out_frame[:k])
        out_episode[:k] = self.episode_indices[out_episode[:k]]
        return k

    def next_anchors(self, int64_t n):
        """Up to ``n`` anchors: (episode_index int64 (k,), frame_index int64 (k,)), k < n at the end."""
        ep = np.empty(n, dtype=np.int64)
        fr = np.empty(n, dtype=np.int64)
        k = self.fill(ep, fr)
        return ep[:k], fr[:k]

    cpdef int64_t skip(self, int64_t n) except -1:
        """Draw and discard up to ``n`` anchors (resume fast-forward, no I/O); returns the count."""
        cdef int64_t chunk = 4096, done = 0, got
        ep = np.empty(chunk, dtype=np.int64)
        fr = np.empty(chunk, dtype=np.int64)
        while done < n:
            got = self._fill(ep, fr, min(chunk, n - done))
            done += got
            if got == 0:
                break
        return done

    def remaining_state(self):
        """``(untouched, started, frames)`` (elastic resume): episodes not yet admitted (int64,
        admission order), those resident (int64) and each one's frames not emitted yet (int64,
        ascending); every other episode has emitted all its frames."""
        cdef int64_t i, j, ep, rem
        frames = []
        for i in range(self.pool_size):
            ep, rem = self.slot_ep[i], self.slot_rem[i]
            if ep < 0:
                continue
            if self.strategy.in_order:
                fr = np.arange(self.lengths[ep] - rem, self.lengths[ep], dtype=np.int64)
            else:
                fr = np.array([self.slot_buf[i][j] for j in range(rem)], dtype=np.int64)
            self._map(np.full(len(fr), ep, dtype=np.int64), fr)
            frames.append(np.sort(fr))
        return self.frontier(self.n_eps), self.resident(), frames

    def drain_events(self):
        """Admissions and evictions since the last drain, in order (:data:`PoolEvent`)."""
        out, self._events = self._events, []
        return out

    def resident(self):
        """Dataset episode indices resident now, int64, in slot order."""
        slots = np.asarray(<int64_t[:self.pool_size]>self.slot_ep)
        return self.episode_indices[slots[slots >= 0]]

    def finished(self):
        """Dataset episode indices whose every frame this epoch has emitted (int64)."""
        admitted = np.asarray(self.order)[: self.next_admit]
        return self.episode_indices[np.setdiff1d(admitted, np.asarray(<int64_t[:self.pool_size]>self.slot_ep))]

    def frontier(self, int64_t k):
        """The next ``k`` episodes to be admitted, in admission order (int64): what to prefetch."""
        cdef int64_t stop = min(self.n_eps, self.next_admit + max(k, 0))
        return self.episode_indices[np.asarray(self.order[self.next_admit:stop])]
