"""Bloom filter kernels: cache-line-blocked add/query over uint64 keys, plus fill counts.

The filter is a uint64 array of ``8 * n_blocks`` words; each key touches one
64-byte block (8 words, 512 bits) and sets/tests ``k`` bits inside it. Bit
positions come from ``locate`` (scheme 1, docs/bloom.md). Batch kernels locate a
group of keys and prefetch their blocks before touching them, so cache misses
overlap. A classic (unblocked) variant is kept for the benchmark that justifies
the blocked design. Twins: kernels/twins/bloom.py and the pure-Python ones of
tests/unit/kernels/test_bloom_kernels.py.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic


def _prefetch_intrinsic(rw):
    """An intrinsic ``f(arr, i)`` hinting the CPU to fetch ``arr[i]``'s cache line.

    ``rw`` is 0 for a read, 1 for a write. A hint only: it never faults and has
    no effect on results, so the twins ignore it.
    """

    @intrinsic
    def prefetch(typingctx, arr, idx):
        def codegen(context, builder, signature, args):
            ary = context.make_array(signature.args[0])(context, builder, args[0])
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = builder.module.declare_intrinsic("llvm.prefetch", fnty=fnty)
            ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
            # (address, rw, locality 3 = keep in all cache levels, 1 = data cache)
            builder.call(fn, [ptr, ir.Constant(i32, rw), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.void(arr, idx), codegen

    return prefetch


prefetch_read = _prefetch_intrinsic(0)
prefetch_write = _prefetch_intrinsic(1)


@njit(cache=True, nogil=True)
def fmix64(x):
    """MurmurHash3's 64-bit finaliser: a bijection on uint64 that spreads every bit."""
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


@njit(cache=True, nogil=True)
def stream_word(seed, j):
    """Word ``j`` (j >= 1) of the splitmix64 stream started at ``seed`` (uint64)."""
    z = seed + np.uint64(j) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def locate(key, n_blocks, pos, row):
    """Fill ``pos[row]`` (uint64[:, k]) with the key's k bit numbers (0..511); return its
    first word (8 * block). Rows, not row views: a view costs a reference count.

    Scheme 1: seed = fmix64(key); w1 = stream_word(seed, 1); block =
    ((w1 >> 32) * n_blocks) >> 32 (Requires: n_blocks < 2**32); then 9-bit fields
    are taken low bits first from the low 32 bits of w1 (3 fields), then 7 fields
    from each of stream_word(seed, 2), (seed, 3) ... Returns 8 * block (uint64).
    """
    return locate_seed(fmix64(key), n_blocks, pos, row)


@njit(cache=True, nogil=True)
def locate_seed(seed, n_blocks, pos, row):
    """``locate`` from the key's seed ``fmix64(key)`` (the region kernel keeps seeds)."""
    w = stream_word(seed, 1)
    block = ((w >> np.uint64(32)) * n_blocks) >> np.uint64(32)
    pool = w & np.uint64(0xFFFFFFFF)
    avail = 32
    j = 1
    for p in range(pos.shape[1]):
        if avail < 9:
            j += 1
            pool = stream_word(seed, j)
            avail = 64
        pos[row, p] = pool & np.uint64(511)
        pool >>= np.uint64(9)
        avail -= 9
    return block << np.uint64(3)


@njit(cache=True, nogil=True)
def set_bit(words, base, b):
    """Set bit number ``b`` counted from word ``base``; return it (as a mask) if it was
    clear, else 0."""
    w = base + (b >> np.uint64(6))
    bit = np.uint64(1) << (b & np.uint64(63))
    old = words[w]
    words[w] = old | bit
    return bit & ~old


@njit(cache=True, nogil=True)
def set_bits(words, base, pos, row):
    """Set bit ``pos[row, p]`` counted from word ``base``, each p; True if any was clear."""
    clear = np.uint64(0)
    for p in range(pos.shape[1]):
        clear |= set_bit(words, base, pos[row, p])
    return clear != np.uint64(0)


@njit(cache=True, nogil=True)
def all_bits_set(words, base, pos, row):
    """True when bit ``pos[row, p]`` counted from word ``base`` is set for every p."""
    for p in range(pos.shape[1]):
        w = base + (pos[row, p] >> np.uint64(6))
        if (words[w] >> (pos[row, p] & np.uint64(63))) & np.uint64(1) == np.uint64(0):
            return False
    return True


@njit(cache=True, nogil=True)
def block_word(seed, n_blocks):
    """First word (8 * block) of the block of the key whose seed is ``seed`` (scheme 1)."""
    w = stream_word(seed, 1)
    return (((w >> np.uint64(32)) * n_blocks) >> np.uint64(32)) << np.uint64(3)


@njit(cache=True, nogil=True)
def seed_group(words, keys, start, seeds, bases, write, seeded):
    """Seeds and first words of keys[start : start + len(bases)]; prefetch their blocks.

    Fetching a group's blocks before touching any of them lets the CPU overlap
    the cache misses (the filter is far larger than the caches). ``seeded``: the
    array holds seeds ``fmix64(key)`` (``bucket_seeds``), not keys. Returns the
    number located (fewer than len(bases) at the end of ``keys``).
    """
    n_blocks = np.uint64(words.shape[0] >> 3)
    count = min(bases.shape[0], keys.shape[0] - start)
    for g in range(count):
        seed = keys[start + g] if seeded else fmix64(keys[start + g])
        base = block_word(seed, n_blocks)
        seeds[g] = seed
        bases[g] = base
        if write:
            prefetch_write(words, base)
        else:
            prefetch_read(words, base)
    return count


@njit(cache=True, nogil=True)
def next_bit(seed, pool, avail, j):
    """One step of scheme 1's bit numbers for the key whose seed is ``seed``: from
    ``pool`` holding ``avail`` unused bits of stream word ``j`` (start: the low 32 bits
    of word 1, 32, 1), return (bit number 0..511, pool, avail, j) for the next step."""
    if avail < 9:
        j += 1
        pool = stream_word(seed, j)
        avail = 64
    return pool & np.uint64(511), pool >> np.uint64(9), avail - 9, j


@njit(cache=True, nogil=True)
def set_key_bits(words, base, seed, k):
    """Set the key's k bits (scheme 1, from its ``seed``) in the block at word ``base``;
    True if any was clear. The positions are made on the fly, in registers: no
    position array between locating and setting (2x fewer ns/key than through one)."""
    pool, avail, j = stream_word(seed, 1) & np.uint64(0xFFFFFFFF), 32, 1
    clear = np.uint64(0)
    for _ in range(k):
        b, pool, avail, j = next_bit(seed, pool, avail, j)
        clear |= set_bit(words, base, b)
    return clear != np.uint64(0)


@njit(cache=True, nogil=True)
def key_bits_set(words, base, seed, k):
    """True when all k bits of the key (scheme 1, from its ``seed``) are set in the
    block at word ``base``."""
    pool, avail, j = stream_word(seed, 1) & np.uint64(0xFFFFFFFF), 32, 1
    for _ in range(k):
        b, pool, avail, j = next_bit(seed, pool, avail, j)
        if (words[base + (b >> np.uint64(6))] >> (b & np.uint64(63))) & np.uint64(1) == 0:
            return False
    return True


# -- the insert and query kernels --------------------------------------------
# Per key: the seed and stream word 1 (block and first 3 fields) are made for a group
# of keys whose blocks are prefetched (for a region insert the next group before this
# one is worked on, so a block is asked for a group's work ahead); each key's fields
# come from its stream words (3 of word 1, then 7 of each further word). An insert first tests
# every bit (loads only), then sets them all if one was clear (``set_key``); a query
# branches once per stream word (``key_present``). For k in SPECIAL_K (8: the first
# layer of a filter at the store's default 0.1% target; 9, 10: the layers it grows,
# at 1/2, 1/4 ... of that rate) the kernels are compiled with k a constant: the field
# loops unroll, with no per-field "next word?" branch or loop counter. Each constant k
# adds ~4-5 s of CPU to a cold compile, so only these. Any other k runs the general
# field loop (set_key_bits, key_bits_set).
SPECIAL_K = (8, 9, 10)


@njit(inline="always")
def fields_clear(words, base, pool, nf, miss):
    """``miss`` OR the bits of ``nf`` 9-bit fields of ``pool`` (low bits first) that are
    clear in the block counted from word ``base``. Loads only."""
    for _ in range(nf):
        b = pool & np.uint64(511)
        pool >>= np.uint64(9)
        miss |= (np.uint64(1) << (b & np.uint64(63))) & ~words[base + (b >> np.uint64(6))]
    return miss


@njit(inline="always")
def fields_or(words, base, pool, nf):
    """Set the block bits of ``nf`` 9-bit fields of ``pool`` (low bits first)."""
    for _ in range(nf):
        b = pool & np.uint64(511)
        pool >>= np.uint64(9)
        words[base + (b >> np.uint64(6))] |= np.uint64(1) << (b & np.uint64(63))


@njit(inline="always")
def key_clear(words, base, seed, w1, k):
    """The key's k bits (scheme 1) that are clear in the block at word ``base``, OR-ed
    (as bit masks of their words): 0 when all are set. Loads only."""
    miss = fields_clear(words, base, w1 & np.uint64(0xFFFFFFFF), min(k, 3), np.uint64(0))
    left = k - 3
    j = 2
    while left > 0:
        nf = min(left, 7)
        miss = fields_clear(words, base, stream_word(seed, j), nf, miss)
        left -= nf
        j += 1
    return miss


@njit(inline="always")
def set_key(words, base, seed, w1, k):
    """Set the key's k bits (scheme 1) in the block at word ``base`` from its seed and
    stream word ``w1``; return the bits that were clear (0: the key was maybe present).

    Two passes: first every bit is tested (loads only), then, if one was clear, every
    bit is OR-ed in. A single read-modify-write pass loads a word right after storing
    to it whenever two of the key's fields share a word (most keys: k fields in 8
    words), and the CPU, which runs loads ahead of stores whose address it has not
    checked, then often redoes work: the two passes cost ~25% fewer ns/key in cache."""
    miss = key_clear(words, base, seed, w1, k)
    if miss != np.uint64(0):
        fields_or(words, base, w1 & np.uint64(0xFFFFFFFF), min(k, 3))
        left = k - 3
        j = 2
        while left > 0:
            nf = min(left, 7)
            fields_or(words, base, stream_word(seed, j), nf)
            left -= nf
            j += 1
    return miss


@njit(inline="always")
def key_present(words, base, seed, w1, k):
    """True when all k bits of the key (scheme 1) are set in the block at word ``base``.
    One branch per stream word, not per bit: a key never added mostly stops after its
    first word's 3 bits, and the bits of one word are tested without a branch each
    (an early exit per bit is a branch the CPU mispredicts about once per absent key)."""
    if fields_clear(words, base, w1 & np.uint64(0xFFFFFFFF), min(k, 3), np.uint64(0)):
        return False
    left = k - 3
    j = 2
    while left > 0:
        nf = min(left, 7)
        if fields_clear(words, base, stream_word(seed, j), nf, np.uint64(0)):
            return False
        left -= nf
        j += 1
    return True


@njit(inline="always")
def locate_group(words, keys, start, seeds, w1s, bases, write, seeded):
    """Seeds, stream words 1 and first words of keys[start : start + len(bases)];
    prefetch their blocks (``write``: for writing). Fetching a group's blocks before
    touching any lets the cache misses overlap. ``seeded``: ``keys`` holds seeds
    ``fmix64(key)`` (``bucket_seeds``). Returns the number located."""
    n_blocks = np.uint64(words.shape[0] >> 3)
    count = min(bases.shape[0], keys.shape[0] - start)
    for g in range(count):
        seed = keys[start + g] if seeded else fmix64(keys[start + g])
        w1 = stream_word(seed, 1)
        base = (((w1 >> np.uint64(32)) * n_blocks) >> np.uint64(32)) << np.uint64(3)
        seeds[g] = seed
        w1s[g] = w1
        bases[g] = base
        if write:
            prefetch_write(words, base)
        else:
            prefetch_read(words, base)
    return count


@njit(inline="always")
def run_keys(words, keys, k, group, seeded, out, want_out, write, unrolled):
    """Insert (``write``) or query every key of ``keys`` (seeds if ``seeded``) in order,
    ``group`` located ahead. Insert: ``out[i]`` = maybe present before (when
    ``want_out``); returns how many set a clear bit. Query: ``out[i]`` = maybe present.

    A group of keys is located (blocks prefetched), then set or tested. For seeds (the
    region insert) the next group is located before this one is worked on, so each
    block is asked for a group's work ahead and a group's first keys do not wait for
    their own misses. Keys in key order locate the next group after this one: their
    misses are mostly TLB misses, page walks that more prefetches in flight only
    queue, so locating ahead does not pay there."""
    seeds = np.empty(group, np.uint64)
    w1s = np.empty(group, np.uint64)
    bases = np.empty(group, np.uint64)
    seeds2 = np.empty(group, np.uint64)
    w1s2 = np.empty(group, np.uint64)
    bases2 = np.empty(group, np.uint64)
    fresh = 0
    n = keys.shape[0]
    count = locate_group(words, keys, 0, seeds, w1s, bases, write, seeded) if n else 0
    for start in range(0, n, group):
        nxt = 0
        if seeded and start + group < n:
            nxt = locate_group(words, keys, start + group, seeds2, w1s2, bases2, write, seeded)
        for g in range(count):
            if write and unrolled:
                present = set_key(words, bases[g], seeds[g], w1s[g], k) == np.uint64(0)
            elif write:
                present = not set_key_bits(words, bases[g], seeds[g], k)
            elif unrolled:
                present = key_present(words, bases[g], seeds[g], w1s[g], k)
            else:
                present = key_bits_set(words, bases[g], seeds[g], k)
            if write:
                fresh += not present
            if want_out:
                out[start + g] = present
        if not seeded and start + group < n:
            nxt = locate_group(words, keys, start + group, seeds2, w1s2, bases2, write, seeded)
        seeds, seeds2 = seeds2, seeds
        w1s, w1s2 = w1s2, w1s
        bases, bases2 = bases2, bases
        count = nxt
    return fresh


@njit(inline="always")
def run_keys_k(words, keys, k, group, seeded, out, want_out, write):
    """``run_keys`` compiled with k a constant for each of SPECIAL_K, else k a variable."""
    if k == 8:
        return run_keys(words, keys, 8, group, seeded, out, want_out, write, True)
    if k == 9:
        return run_keys(words, keys, 9, group, seeded, out, want_out, write, True)
    if k == 10:
        return run_keys(words, keys, 10, group, seeded, out, want_out, write, True)
    return run_keys(words, keys, k, group, seeded, out, want_out, write, False)


@njit(cache=True, nogil=True)
def insert_group(words, keys, k, group, seeded, out, want_out):
    """Insert every key of ``keys`` (seeds if ``seeded``) in order, ``group`` ahead;
    ``out[i]`` = maybe present before (when ``want_out``). Returns how many set a
    clear bit."""
    return run_keys_k(words, keys, k, group, seeded, out, want_out, True)


@njit(cache=True, nogil=True)
def bloom_add_query(words, keys, k, group, out, want_out):
    """For each key in order: ``out[i]`` = maybe present before it, then insert it.

    Requires: words uint64 of length 8 * n_blocks, n_blocks < 2**32; keys uint64;
    k >= 1; group >= 1 (keys located ahead; 32 measured best); ``out`` bool as
    long as ``keys`` when ``want_out``, else any bool array (left untouched).
    An earlier occurrence in the same call counts as present. Returns the number
    of keys that set at least one clear bit (those with ``out[i]`` False).
    """
    return insert_group(words, keys, k, group, False, out, want_out)


@njit(cache=True, nogil=True)
def region_of(seed, shift):
    """Region of a key's block: the top bits of the 32-bit block choice (see ``locate``).

    ``block = (hi32 * n_blocks) >> 32`` is monotone in hi32, so the keys of region
    r = hi32 >> shift touch only one contiguous 1/2**(32 - shift) of the blocks."""
    return (stream_word(seed, 1) >> np.uint64(32)) >> shift


@njit(cache=True, nogil=True)
def bucket_seeds(keys, region_bits, tmp, starts):
    """Write the seeds ``fmix64(key)`` of ``keys`` into ``tmp[:len(keys)]`` grouped by
    ``region_of``, regions ascending (a counting pass, then a scatter pass).

    Requires: len(tmp) >= len(keys); starts int64 of length 2**region_bits + 1,
    0 <= region_bits <= 16. Leaves ``starts[r]`` = index in ``tmp`` of region r's
    first seed, ``starts[-1]`` = len(keys)."""
    n_regions = 1 << region_bits
    shift = np.uint64(32 - region_bits)
    fill = np.zeros(n_regions + 1, np.int64)
    for i in range(keys.shape[0]):
        fill[region_of(fmix64(keys[i]), shift) + 1] += 1
    for r in range(n_regions):
        fill[r + 1] += fill[r]
    starts[:] = fill
    for i in range(keys.shape[0]):  # fill[r] ends as the end of region r
        seed = fmix64(keys[i])
        r = region_of(seed, shift)
        tmp[fill[r]] = seed
        fill[r] += 1


@njit(cache=True, nogil=True)
def insert_seeds(words, seeds, k, group):
    """Insert the keys whose seeds are ``seeds`` (from ``bucket_seeds``), in order.

    Seeds of one region touch one contiguous slice of the filter that stays in cache.
    Returns the number that set at least one clear bit."""
    return insert_group(words, seeds, k, group, True, np.empty(0, np.bool_), False)


@njit(cache=True, nogil=True)
def bloom_add_regions(words, keys, k, group, region_bits, tmp):
    """Insert every key (same bits as ``bloom_add_query``), one filter region at a time.

    Keys are taken in chunks of ``len(tmp)``; each chunk's seeds are bucketed by
    ``region_of`` (``bucket_seeds``) and inserted region by region (``insert_seeds``),
    so the blocks being written sit in one contiguous slice of the filter that stays
    in cache, instead of one cache miss per key.
    Requires: as ``bloom_add_query``; 0 <= region_bits <= 16; tmp uint64, len >= 1.
    Returns the number of keys that set at least one clear bit (with repeats or
    colliding keys in one call, which of them counts may differ from key order).
    """
    starts = np.empty((1 << region_bits) + 1, np.int64)
    fresh = 0
    n = keys.shape[0]
    for c0 in range(0, n, tmp.shape[0]):
        c1 = min(n, c0 + tmp.shape[0])
        bucket_seeds(keys[c0:c1], region_bits, tmp, starts)
        fresh += insert_seeds(words, tmp[: c1 - c0], k, group)
    return fresh


@njit(cache=True, nogil=True)
def bloom_query(words, keys, k, group, out):
    """Set ``out[i]`` (bool) True when all k bits of ``keys[i]`` are set (maybe present).

    Requires: as ``bloom_add_query``; ``out`` as long as ``keys``. Never writes ``words``.
    """
    run_keys_k(words, keys, k, group, False, out, True, False)


@njit(cache=True, nogil=True)
def popcount64(x):
    """Number of set bits of a uint64 (SWAR)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@njit(cache=True, nogil=True)
def block_fill_histogram(words, words_per_block, hist):
    """Add to ``hist[c]`` the number of blocks with exactly c bits set.

    Requires: len(words) a multiple of words_per_block; hist int64 of length
    64 * words_per_block + 1.
    """
    for b in range(words.shape[0] // words_per_block):
        c = 0
        for w in range(b * words_per_block, (b + 1) * words_per_block):
            c += popcount64(words[w])
        hist[c] += 1


@njit(cache=True, nogil=True)
def classic_locate(key, m, pos, row):
    """Fill ``pos[row]`` with the key's k bit numbers in a classic filter of m bits (m < 2**32).

    Position p is ((h >> 32) * m) >> 32 for p even and ((h & 0xFFFFFFFF) * m) >> 32
    for p odd, where h = stream_word(fmix64(key), p // 2 + 1).
    """
    seed = fmix64(key)
    h = np.uint64(0)
    for p in range(pos.shape[1]):
        if p % 2 == 0:
            h = stream_word(seed, p // 2 + 1)
            pos[row, p] = ((h >> np.uint64(32)) * m) >> np.uint64(32)
        else:
            pos[row, p] = ((h & np.uint64(0xFFFFFFFF)) * m) >> np.uint64(32)


@njit(cache=True, nogil=True)
def classic_locate_group(words, keys, start, pos, write):
    """As ``locate_group`` for the classic filter: fill ``pos`` rows, prefetch all k lines."""
    m = np.uint64(words.shape[0]) << np.uint64(6)
    count = min(pos.shape[0], keys.shape[0] - start)
    for g in range(count):
        classic_locate(keys[start + g], m, pos, g)
        for p in range(pos.shape[1]):
            if write:
                prefetch_write(words, pos[g, p] >> np.uint64(6))
            else:
                prefetch_read(words, pos[g, p] >> np.uint64(6))
    return count


@njit(cache=True, nogil=True)
def classic_add(words, keys, k, group):
    """Classic (unblocked) insert over m = 64 * len(words) bits: the benchmark baseline."""
    pos = np.empty((group, k), np.uint64)
    for start in range(0, keys.shape[0], group):
        for g in range(classic_locate_group(words, keys, start, pos, True)):
            set_bits(words, np.uint64(0), pos, g)


@njit(cache=True, nogil=True)
def classic_query(words, keys, k, group, out):
    """Classic query, positions as ``classic_locate``; ``out[i]`` True = maybe present."""
    pos = np.empty((group, k), np.uint64)
    for start in range(0, keys.shape[0], group):
        for g in range(classic_locate_group(words, keys, start, pos, False)):
            out[start + g] = all_bits_set(words, np.uint64(0), pos, g)
