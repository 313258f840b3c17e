"""Python twin of ``csrc/cache/kv_cache_manager``: block tables per sequence on top of the
:class:`BlockPool`, prefix-cache hits, slot allocation with copy-on-write of a shared partial block,
caching of computed blocks, fork for n > 1 and free. Same decisions as the C++ manager.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .block_pool import BlockPool, hash_block_tokens


def watermark_blocks_for(watermark: float, num_blocks: int) -> int:
    """floor(watermark * num_blocks), the same double arithmetic as C++."""
    return int(watermark * float(num_blocks))


def kv_block_bytes(
    n_layer: int, n_head_kv: int, head_dim: int, block_size: int = 16, dtype_bytes: int = 2
) -> int:
    """Bytes of one block: K and V of ``block_size`` positions, every layer."""
    if min(n_layer, n_head_kv, head_dim, block_size, dtype_bytes) < 1:
        raise ValueError(
            "the KV-cache shape must be positive (n_layer, n_head_kv, head_dim, block_size, dtype_bytes)"
        )
    return 2 * n_layer * n_head_kv * head_dim * block_size * dtype_bytes


def num_blocks_for_memory(
    memory_bytes: int, n_layer: int, n_head_kv: int, head_dim: int, block_size: int = 16, dtype_bytes: int = 2
) -> int:
    """How many blocks a byte budget (vLLM's ``kv_cache_memory_bytes``) holds."""
    if memory_bytes < 0:
        raise ValueError(f"kv_cache_memory_bytes must be >= 0, got {memory_bytes}")
    n = memory_bytes // kv_block_bytes(n_layer, n_head_kv, head_dim, block_size, dtype_bytes)
    return min(n, 2**31 - 1)


@dataclass
class CacheStats:
    num_blocks: int
    num_free_blocks: int
    usage_percent: float
    prefix_queries: int
    prefix_hits: int


@dataclass
class _SeqBlocks:
    table: list[int] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)  # hashes of the first len(hashes) full blocks
    num_cached: int = 0  # leading blocks already offered to the prefix cache


class KVCacheManager:
    """Block tables of sequences (small dense ints chosen by the caller)."""

    def __init__(
        self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True, watermark: float = 0.01
    ) -> None:
        self._pool = BlockPool(num_blocks, block_size)
        if not 0.0 <= watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {watermark}")
        self.enable_prefix_caching = enable_prefix_caching
        self.watermark_blocks = watermark_blocks_for(watermark, num_blocks)
        self._seqs: dict[int, _SeqBlocks] = {}
        self._prefix_queries = 0
        self._prefix_hits = 0

    @property
    def pool(self) -> BlockPool:
        return self._pool

    @property
    def block_size(self) -> int:
        return self._pool.block_size

    def _seq(self, seq: int) -> _SeqBlocks:
        s = self._seqs.get(seq)
        if s is None:
            s = self._seqs[seq] = _SeqBlocks()
        return s

    def _block_hash(self, s: _SeqBlocks, tokens: Sequence[int], index: int, extra_key: int) -> int:
        if index < len(s.hashes):
            return s.hashes[index]
        assert index == len(s.hashes)
        bs = self.block_size
        parent = s.hashes[index - 1] if index else 0
        h = hash_block_tokens(parent, extra_key, tokens[index * bs : (index + 1) * bs])
        s.hashes.append(h)
        return h

    def get_computed_blocks(
        self, seq: int, tokens: Sequence[int], extra_key: int = 0
    ) -> tuple[list[int], int]:
        """(hit blocks, tokens they cover): the longest cached prefix in whole blocks, never all tokens."""
        if not self.enable_prefix_caching or not tokens:
            return [], 0
        s = self._seq(seq)
        if s.table:
            raise ValueError("the sequence already holds blocks")
        bs = self.block_size
        hits: list[int] = []
        for i in range((len(tokens) - 1) // bs):
            h = self._block_hash(s, tokens, i, extra_key)
            parent = s.hashes[i - 1] if i else 0
            block = self._pool.lookup(h, parent, extra_key, tokens[i * bs : (i + 1) * bs])
            if block < 0:
                break
            hits.append(block)
        self._prefix_queries += len(tokens)
        self._prefix_hits += len(hits) * bs
        return hits, len(hits) * bs

    def allocate_slots(
        self,
        seq: int,
        num_computed: int,
        num_new: int,
        hits: Sequence[int] = (),
        apply_watermark: bool = False,
    ) -> tuple[bool, list[tuple[int, int]]]:
        """Room for positions [num_computed, num_computed + num_new), after taking ``hits``.

        Returns (ok, copy-on-write copies (src, dst)); on False nothing changed.
        """
        s = self._seq(seq)
        bs = self.block_size
        pool = self._pool
        if hits and (s.table or num_computed != len(hits) * bs):
            raise ValueError("hits are only taken by an empty sequence, with num_computed = their tokens")
        have = len(s.table) + len(hits)
        need = (num_computed + num_new + bs - 1) // bs
        num_new_blocks = max(need - have, 0)
        cow_index = num_computed // bs
        cow = (
            num_new > 0
            and num_computed % bs != 0
            and cow_index < len(s.table)
            and pool.ref_count[s.table[cow_index]] > 1
        )
        num_evictable_hits = sum(1 for b in hits if pool.ref_count[b] == 0)
        available = pool.num_free - (self.watermark_blocks if apply_watermark else 0)
        if num_new_blocks + int(cow) + num_evictable_hits > available:
            return False, []
        for b in hits:
            pool.touch(b)
            s.table.append(b)
        if hits:
            s.num_cached = len(hits)
        copies: list[tuple[int, int]] = []
        if cow:
            src = s.table[cow_index]
            dst = pool.allocate()
            copies.append((src, dst))
            pool.release(src)
            s.table[cow_index] = dst
        for _ in range(num_new_blocks):
            s.table.append(pool.allocate())
        return True, copies

    def cache_full_blocks(
        self, seq: int, tokens: Sequence[int], num_computed: int, extra_key: int = 0
    ) -> None:
        """Offers the blocks full within the first ``num_computed`` tokens to the prefix cache."""
        if not self.enable_prefix_caching:
            return
        s = self._seq(seq)
        bs = self.block_size
        num_full = num_computed // bs
        for i in range(s.num_cached, num_full):
            h = self._block_hash(s, tokens, i, extra_key)
            parent = s.hashes[i - 1] if i else 0
            self._pool.cache(s.table[i], h, parent, extra_key, tokens[i * bs : (i + 1) * bs])
        s.num_cached = max(s.num_cached, num_full)

    def free(self, seq: int) -> None:
        """Releases the sequence's blocks, last first, so chain ends are evicted before their parents."""
        s = self._seq(seq)
        for b in reversed(s.table):
            self._pool.release(b)
        s.table.clear()
        s.hashes.clear()
        s.num_cached = 0

    def trim(self, seq: int, num_tokens: int) -> None:
        """Releases the blocks past the first ``num_tokens`` positions, last first (the slots of
        rejected draft tokens)."""
        s = self._seq(seq)
        keep = -(-num_tokens // self._pool.block_size)
        while len(s.table) > keep:
            self._pool.release(s.table.pop())

    def fork(self, parent: int, child: int) -> None:
        """``child`` shares all of ``parent``'s blocks and hashes."""
        p = self._seq(parent)
        c = self._seq(child)
        if c.table:
            raise ValueError("the child already holds blocks")
        c.table = list(p.table)
        for b in c.table:
            self._pool.touch(b)
        c.hashes = list(p.hashes)
        c.num_cached = p.num_cached

    def block_table(self, seq: int) -> list[int]:
        """A copy of the sequence's block table."""
        return list(self.table_view(seq))

    def table_view(self, seq: int) -> list[int]:
        """The sequence's live block table (do not modify)."""
        s = self._seqs.get(seq)
        return s.table if s is not None else []

    def stats(self) -> CacheStats:
        pool = self._pool
        return CacheStats(
            num_blocks=pool.num_blocks,
            num_free_blocks=pool.num_free,
            usage_percent=100.0 * (pool.num_blocks - pool.num_free) / pool.num_blocks,
            prefix_queries=self._prefix_queries,
            prefix_hits=self._prefix_hits,
        )
