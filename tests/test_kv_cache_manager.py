"""KVCacheManager: prefix hits, watermark, copy-on-write, free order, stats; C++ and twin agree."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ossa.reference import kv_cache_manager as ref

core = pytest.importorskip("ossa._native").core

IMPLS = {"cpp": core.KVCacheManager, "twin": ref.KVCacheManager}


@pytest.fixture(params=sorted(IMPLS))
def make(request: pytest.FixtureRequest) -> Any:
    return IMPLS[request.param]


def prefill(kv: Any, seq: int, tokens: list[int], extra: int = 0) -> tuple[list[int], int]:
    """Admits a sequence like the scheduler does and marks all its tokens computed."""
    hits, n_hit = kv.get_computed_blocks(seq, tokens, extra)
    ok, copies = kv.allocate_slots(seq, n_hit, len(tokens) - n_hit, hits, True)
    assert ok and not copies
    kv.cache_full_blocks(seq, tokens, len(tokens), extra)
    return list(hits), n_hit


def test_prefix_hits_whole_blocks_never_the_whole_prompt(make: Any) -> None:
    kv = make(16, 4, True, 0.0)
    a = list(range(10, 20))
    assert prefill(kv, 0, a) == ([], 0)
    table = kv.block_table(0)
    assert prefill(kv, 1, a[:9] + [99]) == (table[:2], 8)
    assert prefill(kv, 2, a[:8]) == (table[:1], 4)  # 8 cached tokens, but one must be computed
    assert prefill(kv, 3, a, extra=7) == ([], 0)  # another cache salt
    assert prefill(kv, 4, [11] + a[1:]) == ([], 0)  # first block differs: no chain
    assert kv.pool.ref_counts()[table[0]] == 3
    s = kv.stats()
    assert (s.prefix_queries, s.prefix_hits) == (10 + 10 + 8 + 10 + 10, 8 + 4)


def test_disabled_prefix_caching_never_hits(make: Any) -> None:
    kv = make(16, 4, False, 0.0)
    prefill(kv, 0, list(range(12)))
    assert prefill(kv, 1, list(range(12))) == ([], 0)
    assert kv.pool.cached_blocks() == []


def test_freed_blocks_stay_cached_until_reused(make: Any) -> None:
    kv = make(4, 2, True, 0.0)
    tokens = [5, 6, 7, 8, 9]
    prefill(kv, 0, tokens)
    table = kv.block_table(0)
    kv.free(0)
    assert kv.pool.free_queue() == [3] + table[::-1]  # tail first: chain ends evicted first
    assert prefill(kv, 1, tokens) == (table[:2], 4)
    kv.free(1)
    ok, _ = kv.allocate_slots(2, 0, 8, [], False)  # takes every block: evicts all hashes
    assert ok
    kv.free(2)
    assert prefill(kv, 3, tokens) == ([], 0)


def test_watermark_applies_to_admissions_only(make: Any) -> None:
    kv = make(10, 4, True, 0.2)
    assert kv.watermark_blocks == 2
    assert kv.allocate_slots(0, 0, 33, [], True) == (False, [])  # 9 blocks > 10 - 2
    assert kv.block_table(0) == [] and kv.pool.num_free == 10  # refused: nothing changed
    assert kv.allocate_slots(0, 0, 32, [], True) == (True, [])
    assert kv.allocate_slots(0, 32, 8, [], False) == (True, [])  # a running sequence may use them
    assert kv.allocate_slots(0, 40, 1, [], False) == (False, [])
    assert kv.stats().usage_percent == 100.0


def test_fork_copies_the_shared_partial_block_on_write(make: Any) -> None:
    kv = make(8, 4, True, 0.0)
    prefill(kv, 0, [3] * 6)
    kv.fork(0, 1)
    assert kv.block_table(1) == kv.block_table(0) == [0, 1]
    assert kv.allocate_slots(1, 6, 1, [], False) == (True, [(1, 2)])
    assert kv.block_table(1) == [0, 2]
    assert kv.allocate_slots(0, 6, 1, [], False) == (True, [])  # now alone on block 1
    assert kv.pool.ref_counts()[:3] == [2, 1, 1]
    kv.free(0)
    kv.free(1)
    assert sorted(kv.pool.free_queue()) == list(range(8))


def test_copy_on_write_counts_against_free_blocks(make: Any) -> None:
    kv = make(2, 4, False, 0.0)
    kv.allocate_slots(0, 0, 6, [], False)
    kv.fork(0, 1)
    assert kv.allocate_slots(1, 6, 1, [], False) == (False, [])  # no block left for the copy
    assert kv.block_table(1) == [0, 1]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_random_operations_cpp_equals_twin(seed: int) -> None:
    rng = random.Random(seed)
    num_blocks, bs = rng.randint(2, 24), rng.choice([1, 2, 4])
    args = (num_blocks, bs, rng.random() < 0.8, rng.choice([0.0, 0.1]))
    a, b = core.KVCacheManager(*args), ref.KVCacheManager(*args)
    base = [rng.randrange(3) for _ in range(40)]
    seqs: dict[int, list[int]] = {}  # seq -> tokens, for sequences holding blocks
    computed: dict[int, int] = {}
    for _ in range(120):
        op = rng.random()
        free_ids = [s for s in range(6) if s not in seqs]
        if op < 0.35 and free_ids:
            seq = rng.choice(free_ids)
            tokens = base[: rng.randint(1, 30)] + [rng.randrange(3) for _ in range(rng.randint(0, 6))]
            hits_a, n_a = a.get_computed_blocks(seq, tokens, 0)
            hits_b, n_b = b.get_computed_blocks(seq, tokens, 0)
            assert (list(hits_a), n_a) == (hits_b, n_b)
            num_new = rng.randint(1, len(tokens) - n_b)
            res = a.allocate_slots(seq, n_b, num_new, hits_b, True)
            assert (res[0], list(res[1])) == b.allocate_slots(seq, n_b, num_new, hits_b, True)
            if res[0]:
                seqs[seq], computed[seq] = tokens, n_b + num_new
                a.cache_full_blocks(seq, tokens, computed[seq], 0)
                b.cache_full_blocks(seq, tokens, computed[seq], 0)
            else:
                a.free(seq)
                b.free(seq)
        elif op < 0.6 and seqs:
            seq = rng.choice(sorted(seqs))
            seqs[seq].append(rng.randrange(3))
            if computed[seq] < len(seqs[seq]):
                res = a.allocate_slots(seq, computed[seq], 1, [], False)
                assert (res[0], list(res[1])) == b.allocate_slots(seq, computed[seq], 1, [], False)
                if res[0]:
                    computed[seq] += 1
                    a.cache_full_blocks(seq, seqs[seq], computed[seq], 0)
                    b.cache_full_blocks(seq, seqs[seq], computed[seq], 0)
        elif op < 0.75 and seqs and free_ids:
            parent, child = rng.choice(sorted(seqs)), rng.choice(free_ids)
            a.fork(parent, child)
            b.fork(parent, child)
            seqs[child], computed[child] = list(seqs[parent][: computed[parent]]), computed[parent]
        elif seqs:
            seq = rng.choice(sorted(seqs))
            a.free(seq)
            b.free(seq)
            del seqs[seq], computed[seq]
        for s in range(6):
            assert a.block_table(s) == b.block_table(s)
        assert a.pool.ref_counts() == b.pool.ref_counts()
        assert a.pool.free_queue() == b.pool.free_queue()
        assert a.pool.cached_blocks() == b.pool.cached_blocks()
        counts = [0] * num_blocks
        for s in range(6):
            for blk in b.block_table(s):
                counts[blk] += 1
        assert b.pool.ref_counts() == counts
        sa, sb = a.stats(), b.stats()
        assert (sa.prefix_queries, sa.prefix_hits, sa.num_free_blocks) == (
            sb.prefix_queries,
            sb.prefix_hits,
            sb.num_free_blocks,
        )


@pytest.mark.parametrize("impl", [core, ref], ids=["cpp", "twin"])
def test_pool_sizing_from_a_byte_budget(impl: Any) -> None:
    torch = pytest.importorskip("torch")
    # SmolLM2-135M: 30 layers, 3 KV heads of 64; the oracle is the size of a real K/V block tensor.
    block = torch.empty(2, 30, 16, 3, 64, dtype=torch.float16)
    per_block = block.numel() * block.element_size()
    assert impl.kv_block_bytes(30, 3, 64, 16, 2) == per_block
    assert impl.num_blocks_for_memory(10 * per_block + per_block - 1, 30, 3, 64, 16, 2) == 10
    assert impl.num_blocks_for_memory(2**62, 1, 1, 1, 1, 1) == 2**31 - 1
    with pytest.raises(ValueError):
        impl.num_blocks_for_memory(1 << 30, 30, 0, 64, 16, 2)
    with pytest.raises(ValueError):
        impl.num_blocks_for_memory(-1, 30, 3, 64, 16, 2)
