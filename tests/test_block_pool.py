"""BlockPool: the C++ pool against its Python twin and against the FNV-1a specification."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ossa.reference import block_pool as ref

core = pytest.importorskip("ossa._native").core

IMPLS = {"cpp": core, "twin": ref}


@pytest.fixture(params=sorted(IMPLS))
def mod(request: pytest.FixtureRequest) -> Any:
    return IMPLS[request.param]


def fnv1a_64(data: bytes) -> int:
    """FNV-1a 64 as specified (http://www.isthe.com/chongo/tech/comp/fnv/), written independently."""
    h = 14695981039346656037
    for byte in data:
        h ^= byte
        h = (h * 1099511628211) % 2**64
    return h


def test_fnv_oracle_matches_published_vectors() -> None:
    assert fnv1a_64(b"") == 0xCBF29CE484222325
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64(b"foobar") == 0x85944171F73967E8


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40),
)
def test_hash_is_fnv1a_of_little_endian_words(parent: int, extra: int, tokens: list[int]) -> None:
    expected = fnv1a_64(struct.pack(f"<QQ{len(tokens)}i", parent, extra, *tokens))
    assert core.hash_block_tokens(parent, extra, tokens) == expected
    assert ref.hash_block_tokens(parent, extra, tokens) == expected


def test_lru_order_and_lazy_eviction(mod: Any) -> None:
    pool = mod.BlockPool(4, 2)
    blocks = [pool.allocate() for _ in range(4)]
    assert blocks == [0, 1, 2, 3] and pool.num_free == 0
    assert pool.cache(2, 77, 0, 0, [5, 6])
    for b in (3, 2, 0):  # freed in this order: evicted in this order
        pool.release(b)
    assert pool.free_queue() == [3, 2, 0]
    assert pool.lookup(77, 0, 0, [5, 6]) == 2  # freed but still cached
    pool.touch(2)  # a hit takes it out of the middle of the queue
    assert pool.free_queue() == [3, 0] and pool.ref_counts() == [0, 1, 1, 0]
    pool.release(2)
    assert pool.free_queue() == [3, 0, 2]
    assert [pool.allocate() for _ in range(3)] == [3, 0, 2]
    assert pool.lookup(77, 0, 0, [5, 6]) == -1  # reused: hash evicted
    assert pool.cached_blocks() == [] and pool.num_evictions == 1


def test_lookup_guards_against_hash_collisions(mod: Any) -> None:
    pool = mod.BlockPool(2, 2)
    b = pool.allocate()
    assert pool.cache(b, 1234, 9, 3, [5, 6])
    assert pool.lookup(1234, 9, 3, [5, 6]) == b
    assert pool.lookup(1234, 9, 3, [5, 7]) == -1  # same hash, other tokens
    assert pool.lookup(1234, 8, 3, [5, 6]) == -1  # other parent
    assert pool.lookup(1234, 9, 4, [5, 6]) == -1  # other extra key
    other = pool.allocate()
    assert not pool.cache(other, 1234, 9, 3, [5, 6])  # an equal block is cached already
    assert not pool.cache(b, 99, 9, 3, [5, 6])  # b has a hash already


def test_errors(mod: Any) -> None:
    with pytest.raises(ValueError):
        mod.BlockPool(0, 16)
    pool = mod.BlockPool(1, 2)
    with pytest.raises(ValueError):
        pool.release(0)
    pool.allocate()
    with pytest.raises(ValueError):
        pool.allocate()
    with pytest.raises(ValueError):
        pool.cache(0, 1, 0, 0, [1, 2, 3])


# Hashes crafted to share slots in the C++ open-addressing map (same low and folded bits), so that
# backward-shift deletion is exercised, mixed with ordinary ones.
COLLIDING = [j << 50 for j in range(0, 64, 8)] + [(j << 50) + 1 for j in range(0, 64, 8)] + list(range(8))


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_random_operations_cpp_equals_twin(seed: int) -> None:
    rng = random.Random(seed)
    num_blocks, bs = rng.randint(1, 12), rng.choice([1, 2, 3])
    a, b = core.BlockPool(num_blocks, bs), ref.BlockPool(num_blocks, bs)
    contents = {h: [rng.randrange(4) for _ in range(bs)] for h in COLLIDING}
    for _ in range(200):
        op = rng.random()
        held = [x for x, r in enumerate(b.ref_counts()) if r > 0]
        if op < 0.3 and b.num_free:
            assert a.allocate() == b.allocate()
        elif op < 0.5 and held:
            x = rng.choice(held)
            a.release(x)
            b.release(x)
        elif op < 0.6:
            x = rng.randrange(num_blocks)
            a.touch(x)
            b.touch(x)
        elif op < 0.8 and held:
            x, h = rng.choice(held), rng.choice(COLLIDING)
            assert a.cache(x, h, 1, 0, contents[h]) == b.cache(x, h, 1, 0, contents[h])
        else:
            h = rng.choice(COLLIDING)
            toks = contents[h] if rng.random() < 0.8 else [9] * bs
            assert a.lookup(h, 1, 0, toks) == b.lookup(h, 1, 0, toks)
        assert a.ref_counts() == b.ref_counts()
        assert a.free_queue() == b.free_queue()
        assert a.cached_blocks() == b.cached_blocks()
        assert a.num_free == b.num_free == len(b.free_queue())
        for x, h in b.cached_blocks():  # every cached block is found under its hash
            assert a.lookup(h, 1, 0, contents[h]) == x
