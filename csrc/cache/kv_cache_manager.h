#pragma once
// Block tables per sequence on top of the BlockPool: prefix-cache hits, slot allocation for the
// tokens of a step (with copy-on-write of a shared partial block), caching of blocks once their
// K/V is computed, fork for n > 1, and free.
//
// Sequences are small dense ints chosen by the caller (the scheduler's sequence slots).
//
// Collisions: a hit is taken only when the cached block's own tokens, extra key and parent hash
// equal the request's, so a collision of the 64-bit hash alone never returns wrong K/V. What is not
// compared is the parent's *content* beyond its hash: a wrong hit would need two different prefixes
// whose chained 64-bit hashes are equal and whose next blocks are identical, i.e. a full 64-bit
// collision between prefixes (~2^-64 per pair for non-adversarial input).
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "cache/block_pool.h"

namespace ossa {

struct CacheStats {
  int32_t num_blocks = 0;
  int32_t num_free_blocks = 0;
  double usage_percent = 0;    // blocks held by sequences / all blocks
  int64_t prefix_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_hits = 0;     // of which found cached
};

class KVCacheManager {
 public:
  KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                 double watermark);

  int32_t block_size() const { return pool_.block_size; }
  int32_t num_blocks() const { return pool_.num_blocks; }
  int32_t watermark_blocks() const { return watermark_blocks_; }
  bool enable_prefix_caching() const { return enable_prefix_caching_; }

  // Longest cached prefix of `tokens`, in whole blocks and never all the tokens (at least one must
  // be computed to produce logits). Appends the hit blocks to `hits` (not yet held) and returns the
  // number of tokens they cover. Records the block hashes it computed for `seq`.
  int32_t get_computed_blocks(int32_t seq, std::span<const int32_t> tokens, uint64_t extra_key,
                              std::vector<int32_t>& hits);

  // Makes room for positions [num_computed, num_computed + num_new) of `seq`, after first taking
  // `hits` (from get_computed_blocks; then num_computed must equal the tokens they cover). A
  // partial block shared with another sequence that would be written is replaced by a private copy
  // and (src, dst) appended to `copies`. Returns false and changes nothing when the free blocks
  // (less the watermark, when apply_watermark) cannot cover the blocks this needs.
  bool allocate_slots(int32_t seq, int32_t num_computed, int32_t num_new,
                      std::span<const int32_t> hits, bool apply_watermark,
                      std::vector<std::pair<int32_t, int32_t>>& copies);

  // Caches the blocks of `seq` that are full within its first num_computed tokens (their K/V is
  // written), so later requests can hit them.
  void cache_full_blocks(int32_t seq, std::span<const int32_t> tokens, int32_t num_computed,
                         uint64_t extra_key);

  // Releases the blocks of `seq`, last block first so chain ends are evicted before their parents.
  void free(int32_t seq);

  // Releases the blocks of `seq` past its first num_tokens positions, last first (the slots of
  // rejected draft tokens); they hold no hash, being past every verified position.
  void trim(int32_t seq, int32_t num_tokens);

  // `child` shares all of `parent`'s blocks (and their hashes); `child` must hold none.
  void fork(int32_t parent, int32_t child);

  const std::vector<int32_t>& block_table(int32_t seq) const;
  CacheStats stats() const;
  const BlockPool& pool() const { return pool_; }
  void reset_stats() { prefix_queries_ = prefix_hits_ = 0; }

 private:
  struct SeqBlocks {
    std::vector<int32_t> table;
    std::vector<uint64_t> hashes;  // hashes of the first hashes.size() full blocks
    int32_t num_cached = 0;        // leading blocks already offered to the prefix cache
  };
  SeqBlocks& seq_blocks(int32_t seq);
  uint64_t block_hash(SeqBlocks& s, std::span<const int32_t> tokens, int32_t index,
                      uint64_t extra_key);

  BlockPool pool_;
  bool enable_prefix_caching_;
  int32_t watermark_blocks_;
  std::vector<SeqBlocks> seqs_;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
};

// The share of blocks the scheduler keeps free when admitting waiting sequences (vLLM's 1%), so
// that running sequences can grow without preempting at once. ossa.config reads it from here.
inline constexpr double k_default_watermark = 0.01;

// Watermark in blocks: floor(watermark * num_blocks), the same double arithmetic as the twin.
int32_t watermark_blocks_for(double watermark, int32_t num_blocks);

// Bytes of one block: K and V of block_size positions, n_head_kv heads of head_dim, every layer.
int64_t kv_block_bytes(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t block_size,
                       int32_t dtype_bytes);
// How many blocks a byte budget (vLLM's kv_cache_memory_bytes) holds; InputError on a bad shape.
int32_t num_blocks_for_memory(int64_t memory_bytes, int32_t n_layer, int32_t n_head_kv,
                              int32_t head_dim, int32_t block_size, int32_t dtype_bytes);

}  // namespace ossa
