#pragma once
// The pool of KV-cache blocks: reference counts, an LRU free queue and the prefix-cache map.
//
// A block holds K and V of `block_size` consecutive positions for every layer (the model runner
// owns the memory; here a block is just an id). A full block may carry a hash that chains its
// parent's hash, an extra key (cache salt) and its token ids, so equal prefixes map to equal
// blocks:
//
//   hash(b0) = H(0,        salt, tokens[0..bs))
//   hash(b1) = H(hash(b0), salt, tokens[bs..2bs))  ...
//
// Free blocks sit in a doubly linked queue (prev/next arrays, sentinel = num_blocks) so a prefix
// hit can pull a block out of the middle in O(1). Allocation takes from the front; freed blocks go
// to the back and keep their hash until reused (lazy eviction), so a block freed long ago is
// evicted first and a recently freed prefix can still be hit.
#include <cstdint>
#include <span>
#include <vector>

namespace ossa {

// 64-bit FNV-1a over the little-endian bytes of (parent, extra_key, tokens...). The Python twin
// (ossa.reference.block_pool.hash_block_tokens) computes the same value.
uint64_t hash_block_tokens(uint64_t parent, uint64_t extra_key, std::span<const int32_t> tokens);

// Open-addressing map hash -> block id (linear probing, backward-shift deletion). At most one
// entry per block, so a table of twice the pool never fills and never allocates after construction.
struct BlockHashMap {
  std::vector<uint64_t> keys;
  std::vector<int32_t> values;  // -1 = empty slot
  uint64_t mask = 0;

  void init(int32_t num_blocks);
  int32_t find(uint64_t key) const;
  void insert(uint64_t key, int32_t block);  // key must be absent
  void erase(uint64_t key);                  // no-op when absent
  void clear();
};

struct BlockPool {
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  int32_t num_free = 0;
  std::vector<int32_t> ref_count;
  std::vector<int32_t> prev, next;  // free queue links; index num_blocks is the sentinel
  std::vector<uint8_t> in_free_queue;
  // Prefix-cache identity of a full block; valid while has_hash[b].
  std::vector<uint8_t> has_hash;
  std::vector<uint64_t> hash, parent_hash, extra_key;
  std::vector<int32_t> tokens;  // [num_blocks * block_size], copied when a block is hashed
  BlockHashMap cached;
  int64_t num_evictions = 0;

  BlockPool() = default;
  BlockPool(int32_t num_blocks, int32_t block_size);

  // Takes the least recently freed block (evicting its hash); its ref count becomes 1.
  // Precondition: num_free > 0.
  int32_t allocate();
  // One more holder of `block`; a free block leaves the free queue.
  void touch(int32_t block);
  // One holder fewer; at zero the block joins the back of the free queue, hash kept.
  void release(int32_t block);
  // The cached block holding exactly this content, or -1. Besides the hash, the tokens, the parent
  // hash and the extra key are compared, so a 64-bit collision between different block contents
  // can never return wrong K/V (see kv_cache_manager.h for the argument about parents).
  int32_t lookup(uint64_t h, uint64_t parent, uint64_t extra,
                 std::span<const int32_t> block_tokens) const;
  // Records `block`'s content as cached under `h`; returns false (block stays anonymous) when an
  // equal block is already cached or the block already has a hash.
  bool cache(int32_t block, uint64_t h, uint64_t parent, uint64_t extra,
             std::span<const int32_t> block_tokens);
  // Free block ids from front (next evicted) to back.
  std::vector<int32_t> free_queue() const;
  int32_t num_cached() const;

 private:
  void queue_remove(int32_t block);
  void queue_push_back(int32_t block);
  void evict_hash(int32_t block);
};

}  // namespace ossa
