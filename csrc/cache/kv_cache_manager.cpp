#include "cache/kv_cache_manager.h"

#include <cstdint>
#include <string>

#include "util/error.h"

namespace ossa {

int32_t watermark_blocks_for(double watermark, int32_t num_blocks) {
  return static_cast<int32_t>(watermark * static_cast<double>(num_blocks));
}

int64_t kv_block_bytes(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t block_size,
                       int32_t dtype_bytes) {
  if (n_layer < 1 || n_head_kv < 1 || head_dim < 1 || block_size < 1 || dtype_bytes < 1)
    throw InputError(
        "the KV-cache shape must be positive (n_layer, n_head_kv, head_dim, block_size, "
        "dtype_bytes)");
  return 2LL * n_layer * n_head_kv * head_dim * block_size * dtype_bytes;
}

int32_t num_blocks_for_memory(int64_t memory_bytes, int32_t n_layer, int32_t n_head_kv,
                              int32_t head_dim, int32_t block_size, int32_t dtype_bytes) {
  if (memory_bytes < 0)
    throw InputError("kv_cache_memory_bytes must be >= 0, got " + std::to_string(memory_bytes));
  const int64_t n =
      memory_bytes / kv_block_bytes(n_layer, n_head_kv, head_dim, block_size, dtype_bytes);
  return n > INT32_MAX ? INT32_MAX : static_cast<int32_t>(n);
}

KVCacheManager::KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                               double watermark)
    : pool_(num_blocks, block_size), enable_prefix_caching_(enable_prefix_caching) {
  if (!(watermark >= 0.0 && watermark < 1.0))
    throw InputError("watermark must be in [0, 1), got " + std::to_string(watermark));
  watermark_blocks_ = watermark_blocks_for(watermark, num_blocks);
}

KVCacheManager::SeqBlocks& KVCacheManager::seq_blocks(int32_t seq) {
  OSSA_ASSERT(seq >= 0);
  if (static_cast<size_t>(seq) >= seqs_.size()) seqs_.resize(seq + 1);
  return seqs_[seq];
}

const std::vector<int32_t>& KVCacheManager::block_table(int32_t seq) const {
  static const std::vector<int32_t> empty;
  if (seq < 0 || static_cast<size_t>(seq) >= seqs_.size()) return empty;
  return seqs_[seq].table;
}

uint64_t KVCacheManager::block_hash(SeqBlocks& s, std::span<const int32_t> tokens, int32_t index,
                                    uint64_t extra_key) {
  if (static_cast<size_t>(index) < s.hashes.size()) return s.hashes[index];
  OSSA_ASSERT(static_cast<size_t>(index) == s.hashes.size());
  const int32_t bs = pool_.block_size;
  uint64_t parent = index == 0 ? 0 : s.hashes[index - 1];
  uint64_t h =
      hash_block_tokens(parent, extra_key, tokens.subspan(static_cast<size_t>(index) * bs, bs));
  s.hashes.push_back(h);
  return h;
}

int32_t KVCacheManager::get_computed_blocks(int32_t seq, std::span<const int32_t> tokens,
                                            uint64_t extra_key, std::vector<int32_t>& hits) {
  if (!enable_prefix_caching_ || tokens.empty()) return 0;
  SeqBlocks& s = seq_blocks(seq);
  OSSA_ASSERT(s.table.empty());
  const int32_t bs = pool_.block_size;
  const int32_t max_blocks = (static_cast<int32_t>(tokens.size()) - 1) / bs;
  int32_t n_hit = 0;
  for (int32_t i = 0; i < max_blocks; ++i) {
    uint64_t h = block_hash(s, tokens, i, extra_key);
    uint64_t parent = i == 0 ? 0 : s.hashes[i - 1];
    int32_t b = pool_.lookup(h, parent, extra_key, tokens.subspan(static_cast<size_t>(i) * bs, bs));
    if (b < 0) break;
    hits.push_back(b);
    ++n_hit;
  }
  prefix_queries_ += static_cast<int64_t>(tokens.size());
  prefix_hits_ += static_cast<int64_t>(n_hit) * bs;
  return n_hit * bs;
}

bool KVCacheManager::allocate_slots(int32_t seq, int32_t num_computed, int32_t num_new,
                                    std::span<const int32_t> hits, bool apply_watermark,
                                    std::vector<std::pair<int32_t, int32_t>>& copies) {
  SeqBlocks& s = seq_blocks(seq);
  const int32_t bs = pool_.block_size;
  OSSA_ASSERT(num_computed >= 0 && num_new >= 0);
  OSSA_ASSERT(hits.empty() ||
              (s.table.empty() && num_computed == static_cast<int32_t>(hits.size()) * bs));
  const int32_t have = static_cast<int32_t>(s.table.size() + hits.size());
  const int32_t need = (num_computed + num_new + bs - 1) / bs;
  const int32_t num_new_blocks = need > have ? need - have : 0;
  // The first written position lands in an existing partial block still shared after a fork.
  const int32_t cow_index = num_computed / bs;
  const bool cow = num_new > 0 && num_computed % bs != 0 &&
                   cow_index < static_cast<int32_t>(s.table.size()) &&
                   pool_.ref_count[s.table[cow_index]] > 1;
  int32_t num_evictable_hits = 0;
  for (int32_t b : hits) num_evictable_hits += pool_.ref_count[b] == 0;
  const int32_t available = pool_.num_free - (apply_watermark ? watermark_blocks_ : 0);
  if (num_new_blocks + (cow ? 1 : 0) + num_evictable_hits > available) return false;

  for (int32_t b : hits) {
    pool_.touch(b);
    s.table.push_back(b);
  }
  if (!hits.empty()) s.num_cached = static_cast<int32_t>(hits.size());
  if (cow) {
    int32_t src = s.table[cow_index];
    int32_t dst = pool_.allocate();
    copies.emplace_back(src, dst);
    pool_.release(src);
    s.table[cow_index] = dst;
  }
  for (int32_t i = 0; i < num_new_blocks; ++i) s.table.push_back(pool_.allocate());
  return true;
}

void KVCacheManager::cache_full_blocks(int32_t seq, std::span<const int32_t> tokens,
                                       int32_t num_computed, uint64_t extra_key) {
  if (!enable_prefix_caching_) return;
  SeqBlocks& s = seq_blocks(seq);
  const int32_t bs = pool_.block_size;
  const int32_t num_full = num_computed / bs;
  OSSA_ASSERT(num_full <= static_cast<int32_t>(s.table.size()));
  OSSA_ASSERT(static_cast<size_t>(num_computed) <= tokens.size());
  for (int32_t i = s.num_cached; i < num_full; ++i) {
    uint64_t h = block_hash(s, tokens, i, extra_key);
    uint64_t parent = i == 0 ? 0 : s.hashes[i - 1];
    pool_.cache(s.table[i], h, parent, extra_key, tokens.subspan(static_cast<size_t>(i) * bs, bs));
  }
  if (num_full > s.num_cached) s.num_cached = num_full;
}

void KVCacheManager::free(int32_t seq) {
  SeqBlocks& s = seq_blocks(seq);
  for (auto it = s.table.rbegin(); it != s.table.rend(); ++it) pool_.release(*it);
  s.table.clear();
  s.hashes.clear();
  s.num_cached = 0;
}

void KVCacheManager::trim(int32_t seq, int32_t num_tokens) {
  SeqBlocks& s = seq_blocks(seq);
  const size_t keep = static_cast<size_t>((num_tokens + pool_.block_size - 1) / pool_.block_size);
  OSSA_ASSERT(keep >= static_cast<size_t>(s.num_cached));
  while (s.table.size() > keep) {
    pool_.release(s.table.back());
    s.table.pop_back();
  }
}

void KVCacheManager::fork(int32_t parent, int32_t child) {
  seq_blocks(child);  // may grow seqs_; take references only afterwards
  seq_blocks(parent);
  SeqBlocks& p = seqs_[parent];
  SeqBlocks& c = seqs_[child];
  OSSA_ASSERT(c.table.empty());
  c.table.assign(p.table.begin(), p.table.end());
  for (int32_t b : c.table) pool_.touch(b);
  c.hashes.assign(p.hashes.begin(), p.hashes.end());
  c.num_cached = p.num_cached;
}

CacheStats KVCacheManager::stats() const {
  CacheStats st;
  st.num_blocks = pool_.num_blocks;
  st.num_free_blocks = pool_.num_free;
  st.usage_percent = 100.0 * (pool_.num_blocks - pool_.num_free) / pool_.num_blocks;
  st.prefix_queries = prefix_queries_;
  st.prefix_hits = prefix_hits_;
  return st;
}

}  // namespace ossa
