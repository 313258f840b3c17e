#pragma once
// Paged attention with grouped-query heads, over the K/V cache of each token's sequence.
//
// Every (token, head) pair is computed by one thread: scores against cache positions 0..position in
// order (position - window + 1..position for a sliding-window layer), softmax, then the weighted
// sum of V rows in position order. Because the token's own K/V is written to the cache before
// attention runs, the result is the same however the sequence was chunked into steps or batched
// with others.
#include <cstddef>
#include <cstdint>
#include <string>

namespace ossa {

constexpr int k_heads_per_item = 4;

// Element type of the K/V cache: f32 (exact) or f16 (half the bytes that decode attention streams,
// as llama.cpp keeps by default; 11 significant bits, magnitudes beyond 65504 become infinite).
enum class KvType : uint8_t { F32, F16 };
inline size_t kv_type_bytes(KvType t) { return t == KvType::F16 ? 2 : 4; }
inline const char* kv_type_name(KvType t) { return t == KvType::F16 ? "float16" : "float32"; }
// "float32" / "float16" (also "fp16", "half"); throws InputError otherwise.
KvType parse_kv_type(const std::string& name);

struct AttentionArgs {
  const float* q = nullptr;  // [n_tokens, n_head * head_dim], row stride ldq
  int64_t ldq = 0;
  // This layer's cache. K is transposed within each block so that scores vectorise over positions:
  // k_cache[((block * n_head_kv + kv_head) * head_dim + d) * block_size + i] for slot block *
  // block_size + i; V is [n_slots, n_head_kv * head_dim]. Both hold block_size * n_head_kv *
  // head_dim elements of kv_type per block.
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  KvType kv_type = KvType::F32;
  int n_tokens = 0, n_head = 0, n_head_kv = 0, head_dim = 0, block_size = 0;
  const int32_t* positions = nullptr;          // [n_tokens]
  const int32_t* token_seq = nullptr;          // [n_tokens] sequence of each token
  const int32_t* block_tables = nullptr;       // concatenated block ids
  const int32_t* block_table_start = nullptr;  // [n_seqs + 1]
  // [n_threads, scratch_stride] floats, scratch_stride >= k_heads_per_item * max context (a thread
  // scores up to k_heads_per_item heads of one KV group at once).
  float* scratch = nullptr;
  int64_t scratch_stride = 0;
  int max_threads = 1;   // threads to use (scratch holds this many rows)
  float* out = nullptr;  // [n_tokens, n_head * head_dim], row stride ldo
  int64_t ldo = 0;
  float scale = 0.0f;  // scores = q.k * scale; 0 = 1/sqrt(head_dim)
  // > 0: scores -> softcap * tanh(scores / softcap) before the softmax (Gemma 2's attention
  // soft-capping): softcap16 in the AVX-512 kernels (single tokens and prefill runs alike), else
  // std::tanh in the generic path, so a token's result stays the same however it is batched.
  float softcap = 0.0f;
  int window = 0;  // > 0: a token attends to the last `window` positions only, itself included
  // > 0: a token attends to the positions of its own chunk of `chunk` only, from position / chunk *
  // chunk to itself (Llama 4's chunked attention; window unused)
  int chunk = 0;
  // [n_head] or nullptr: gpt-oss's attention sinks, one learned logit per head that joins the
  // softmax's denominator (max over scores and sink; sum plus exp(sink - max)) but has no V row.
  // Every kernel adds it the same way, after its sum over the positions (sink_term).
  const float* sinks = nullptr;
  // K read from V's rows (k_cache unused): a cache whose K and V rows are one and the same
  // (ModelConfig::kv_shared: DeepSeek's latent attention), held once, in V's layout. Its tokens
  // run one at a time through attend_wide (AVX-512) or attend_generic, whatever the head size.
  bool k_rows = false;
  // [n_head] or nullptr: ALiBi (BLOOM, MPT), one slope per head; the score of cache position j for
  // a token at position p gains slope * (j - p) after the scale (alibi_bias: every kernel adds the
  // same product, so the same bits).
  const float* alibi = nullptr;
};

void paged_attention(const AttentionArgs& a);

// Stores one token's K row (kv_dim = n_head_kv * head_dim floats) at `slot` of a layer's K cache,
// in the transposed block layout above, and its V row; f16 caches round to nearest (ties to even).
void store_k(void* k_cache, KvType t, int64_t slot, int block_size, int64_t kv_dim, const float* k);
void store_v(void* v_cache, KvType t, int64_t slot, int64_t kv_dim, const float* v);

}  // namespace ossa
