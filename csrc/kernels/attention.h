#pragma once
// Paged attention with grouped-query heads, over the K/V cache of each token's sequence.
//
// Every (token, head) pair is computed by one thread: scores against cache positions 0..position in
// order, softmax, then the weighted sum of V rows in position order. Because the token's own K/V is
// written to the cache before attention runs, the result is the same however the sequence was
// chunked into steps or batched with others.
#include <cstdint>

namespace ossa {

struct AttentionArgs {
  const float* q = nullptr;  // [n_tokens, n_head * head_dim], row stride ldq
  int64_t ldq = 0;
  const float* k_cache = nullptr;  // [n_slots, n_head_kv * head_dim] of this layer
  const float* v_cache = nullptr;
  int n_tokens = 0, n_head = 0, n_head_kv = 0, head_dim = 0, block_size = 0;
  const int32_t* positions = nullptr;          // [n_tokens]
  const int32_t* token_seq = nullptr;          // [n_tokens] sequence of each token
  const int32_t* block_tables = nullptr;       // concatenated block ids
  const int32_t* block_table_start = nullptr;  // [n_seqs + 1]
  float* scratch = nullptr;  // [n_threads, scratch_stride] floats, scratch_stride >= max context
  int64_t scratch_stride = 0;
  int max_threads = 1;  // threads to use (scratch holds this many rows)
  float* out = nullptr;  // [n_tokens, n_head * head_dim], row stride ldo
  int64_t ldo = 0;
};

void paged_attention(const AttentionArgs& a);

// The dot product the attention scores use (8 f32 lanes, fixed order); exposed for tests.
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace ossa
