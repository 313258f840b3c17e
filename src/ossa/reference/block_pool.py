"""Python twin of ``csrc/cache/block_pool``: KV-cache blocks with ref counts, an LRU free queue and
the prefix-cache map from block hash to block.

A full block may carry a hash chaining its parent's hash, an extra key (cache salt) and its token
ids, so equal prefixes map to equal blocks. Freed blocks go to the back of the free queue and keep
their hash until reused (lazy eviction); allocation takes the front. Decisions (which block id,
which hit) are identical to the C++ pool.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Sequence

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1


def hash_block_tokens(parent: int, extra_key: int, tokens: Sequence[int]) -> int:
    """64-bit FNV-1a over the little-endian bytes of (parent u64, extra_key u64, tokens as i32)."""
    data = struct.pack(f"<QQ{len(tokens)}i", parent, extra_key, *tokens)
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK64
    return h


class BlockPool:
    """All blocks of the KV cache; a block is an id, the model runner owns the memory."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.ref_count = [0] * num_blocks
        # Insertion order is the queue order: front = next to evict. O(1) removal from the middle.
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        # Prefix-cache identity per block: (hash, parent hash, extra key, tokens) or None.
        self.identity: list[tuple[int, int, int, tuple[int, ...]] | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}
        self.num_evictions = 0

    @property
    def num_free(self) -> int:
        return len(self._free)

    def _evict_hash(self, block: int) -> None:
        ident = self.identity[block]
        if ident is None:
            return
        if self.cached.get(ident[0]) == block:
            del self.cached[ident[0]]
        self.identity[block] = None
        self.num_evictions += 1

    def allocate(self) -> int:
        """Takes the least recently freed block (evicting its hash); its ref count becomes 1."""
        if not self._free:
            raise ValueError("no free block")
        block, _ = self._free.popitem(last=False)
        self._evict_hash(block)
        self.ref_count[block] = 1
        return block

    def touch(self, block: int) -> None:
        """One more holder; a free block leaves the free queue."""
        if self.ref_count[block] == 0:
            del self._free[block]
        self.ref_count[block] += 1

    def release(self, block: int) -> None:
        """One holder fewer; at zero the block joins the back of the free queue, hash kept."""
        if self.ref_count[block] == 0:
            raise ValueError(f"block {block} is not held")
        self.ref_count[block] -= 1
        if self.ref_count[block] == 0:
            self._free[block] = None

    def lookup(self, h: int, parent: int, extra_key: int, tokens: Sequence[int]) -> int:
        """The cached block with exactly this content (hash, parent, extra key, tokens), or -1."""
        block = self.cached.get(h)
        if block is None:
            return -1
        ident = self.identity[block]
        assert ident is not None
        if ident[1] != parent or ident[2] != extra_key or ident[3] != tuple(tokens):
            return -1
        return block

    def cache(self, block: int, h: int, parent: int, extra_key: int, tokens: Sequence[int]) -> bool:
        """Records the block's content under ``h``; False when it has a hash or an equal block is cached."""
        if len(tokens) != self.block_size:
            raise ValueError(f"a block holds {self.block_size} tokens, got {len(tokens)}")
        if self.identity[block] is not None or h in self.cached:
            return False
        self.identity[block] = (h, parent, extra_key, tuple(tokens))
        self.cached[h] = block
        return True

    def free_queue(self) -> list[int]:
        """Free block ids, front (next evicted) to back."""
        return list(self._free)

    def ref_counts(self) -> list[int]:
        return list(self.ref_count)

    def cached_blocks(self) -> list[tuple[int, int]]:
        """(block, hash) of every block carrying a prefix-cache hash, by block id."""
        return [(b, ident[0]) for b, ident in enumerate(self.identity) if ident is not None]
