#include "kernels/attention.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/parallel.h"
#include "kernels/vec_math.h"
#include "util/aligned.h"
#include "util/error.h"
#include "util/half.h"

#if defined(__AVX2__)
// GCC 12 flags the _mm512_undefined_* inside the intrinsic headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

namespace ossa {

namespace {
// f32 -> f16, round to nearest (ties to even), as _mm512_cvtps_ph does.
inline uint16_t f16_round(float v) {
#if defined(__F16C__)
  return static_cast<uint16_t>(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
  return f32_to_f16(v);
#endif
}
}  // namespace

KvType parse_kv_type(const std::string& name) {
  if (name == "float32" || name == "fp32") return KvType::F32;
  if (name == "float16" || name == "fp16" || name == "half") return KvType::F16;
  throw InputError("kv_cache_dtype must be 'float32' or 'float16', got '" + name + "'");
}

void store_k(void* k_cache, KvType t, int64_t slot, int block_size, int64_t kv_dim,
             const float* k) {
  const int64_t at = (slot - slot % block_size) * kv_dim + slot % block_size;
  if (t == KvType::F16) {
    uint16_t* dst = static_cast<uint16_t*>(k_cache) + at;
    int64_t e = 0;
#if defined(__AVX512F__)
    // 16 conversions at once (the same rounding), then the strided stores.
    alignas(32) uint16_t h[16];
    for (; e + 16 <= kv_dim; e += 16) {
      _mm256_store_si256(
          reinterpret_cast<__m256i*>(h),
          _mm512_cvtps_ph(_mm512_loadu_ps(k + e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      for (int j = 0; j < 16; ++j) dst[(e + j) * block_size] = h[j];
    }
#endif
    for (; e < kv_dim; ++e) dst[e * block_size] = f16_round(k[e]);
  } else {
    float* dst = static_cast<float*>(k_cache) + at;
    for (int64_t e = 0; e < kv_dim; ++e) dst[e * block_size] = k[e];
  }
}

void store_v(void* v_cache, KvType t, int64_t slot, int64_t kv_dim, const float* v) {
  if (t == KvType::F32) {
    std::memcpy(static_cast<float*>(v_cache) + slot * kv_dim, v,
                static_cast<size_t>(kv_dim) * sizeof(float));
    return;
  }
  uint16_t* dst = static_cast<uint16_t*>(v_cache) + slot * kv_dim;
  int64_t e = 0;
#if defined(__AVX512F__)
  for (; e + 16 <= kv_dim; e += 16)
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(dst + e),
        _mm512_cvtps_ph(_mm512_loadu_ps(v + e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; e < kv_dim; ++e) dst[e] = f16_round(v[e]);
}

namespace {

// The first cache position a token at context length ctx attends to (its layer's window or chunk).
inline int first_position(const AttentionArgs& a, int ctx) {
  if (a.chunk > 0) return (ctx - 1) / a.chunk * a.chunk;
  return a.window > 0 ? std::max(0, ctx - a.window) : 0;
}

// Where KV head kvh's V row of context position j starts (in elements; table: the sequence's
// blocks). With k_rows it is the position's K too.
inline int64_t v_row(const AttentionArgs& a, const int32_t* table, int j, int64_t kv_dim, int kvh) {
  const int64_t slot =
      static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
  return slot * kv_dim + static_cast<int64_t>(kvh) * a.head_dim;
}

// Element i of a K/V row of type KV, as f32.
template <KvType KV>
inline float kv_at(const void* p, int64_t i) {
  if constexpr (KV == KvType::F16)
    return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
  else
    return static_cast<const float*>(p)[i];
}

#if defined(__AVX2__) && defined(__F16C__)
#define OSSA_ATTN_AVX2 1
// Elements i .. i + 7 of a K/V row of type KV, as f32 (exact, as kv_at).
template <KvType KV>
inline __m256 kv8(const void* p, int64_t i) {
  if constexpr (KV == KvType::F16)
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
  else
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
}
#endif

// The sink's share of head h's softmax denominator, exp(sink - max), with max already including the
// sink (0 without sinks); one scalar function for every kernel, so the kernels agree bitwise.
inline float sink_term(const AttentionArgs& a, int h, float max) {
  return a.sinks != nullptr ? std::exp(a.sinks[h] - max) : 0.0f;
}
inline float sink_max(const AttentionArgs& a, int h, float max) {
  return a.sinks != nullptr ? std::fmax(max, a.sinks[h]) : max;
}
// ALiBi's bias of cache position j for a token at position p (head slope): slope * (j - p), the
// distance exact in float (|j - p| < 2^24); the vector kernels take the same product and sum.
inline float alibi_bias(float slope, int j, int p) { return slope * static_cast<float>(j - p); }
// Scores j0..ctx-1 (a token at ctx - 1) plus head h's ALiBi bias, where the layer has one.
inline void add_alibi(const AttentionArgs& a, int h, float* scores, int j0, int ctx) {
  if (a.alibi == nullptr) return;
  for (int j = j0; j < ctx; ++j) scores[j] = scores[j] + alibi_bias(a.alibi[h], j, ctx - 1);
}

// One (token, head) pair: scores, softmax, weighted sum of V, all in position order.
template <KvType KV>
void attend_generic(const AttentionArgs& a, int64_t item, int thread, int group, int64_t kv_dim,
                    float scale) {
  const int t = static_cast<int>(item / a.n_head), h = static_cast<int>(item % a.n_head);
  const int kvh = h / group;
  float* scores = a.scratch + a.scratch_stride * thread;
  const float* q = a.q + t * a.ldq + static_cast<int64_t>(h) * a.head_dim;
  const int32_t* table = a.block_tables + a.block_table_start[a.token_seq[t]];
  const int ctx = a.positions[t] + 1, j0 = first_position(a, ctx);
  // K is stored transposed within each block ([dim][position]); scores go a block at a time, each
  // position's dot product in dimension order. (k_rows: from V's rows, likewise in dimension
  // order.)
  const int bs = a.block_size, hd = a.head_dim;
  for (int j = a.k_rows ? j0 : ctx; j < ctx; ++j) {
    const int64_t row = v_row(a, table, j, kv_dim, kvh);
    float dot = 0.0f;
    for (int d = 0; d < hd; ++d) dot = std::fma(q[d], kv_at<KV>(a.v_cache, row + d), dot);
    scores[j] = dot * scale;
  }
  for (int blk = j0 / bs; !a.k_rows && blk * bs < ctx; ++blk) {
    const int64_t kb =
        static_cast<int64_t>(table[blk]) * bs * kv_dim + static_cast<int64_t>(kvh) * hd * bs;
    const int n_in = std::min(bs, ctx - blk * bs);
    float* sc = scores + blk * bs;
    int i0 = std::max(0, j0 - blk * bs);
#if defined(OSSA_ATTN_AVX2)
    // 8 positions per vector, two vectors at a time (independent chains); the same per-position
    // order as the scalar loop below, so the same bits.
    for (; i0 + 16 <= n_in; i0 += 16) {
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
      for (int d = 0; d < hd; ++d) {
        const int64_t at = kb + static_cast<int64_t>(d) * bs + i0;
        const __m256 qd = _mm256_set1_ps(q[d]);
        acc0 = _mm256_fmadd_ps(qd, kv8<KV>(a.k_cache, at), acc0);
        acc1 = _mm256_fmadd_ps(qd, kv8<KV>(a.k_cache, at + 8), acc1);
      }
      _mm256_storeu_ps(sc + i0, _mm256_mul_ps(acc0, _mm256_set1_ps(scale)));
      _mm256_storeu_ps(sc + i0 + 8, _mm256_mul_ps(acc1, _mm256_set1_ps(scale)));
    }
    for (; i0 + 8 <= n_in; i0 += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int d = 0; d < hd; ++d)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(q[d]),
                              kv8<KV>(a.k_cache, kb + static_cast<int64_t>(d) * bs + i0), acc);
      _mm256_storeu_ps(sc + i0, _mm256_mul_ps(acc, _mm256_set1_ps(scale)));
    }
#endif
    for (int i = i0; i < n_in; ++i) {
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d)
        dot = std::fma(q[d], kv_at<KV>(a.k_cache, kb + static_cast<int64_t>(d) * bs + i), dot);
      sc[i] = dot * scale;
    }
  }
  add_alibi(a, h, scores, j0, ctx);
  if (a.softcap > 0.0f) {
    const float cap = a.softcap;
    for (int j = j0; j < ctx; ++j) scores[j] = cap * std::tanh(scores[j] / cap);
  }
  float max_score = sink_max(a, h, -INFINITY);
  bool finite = true;
  for (int j = j0; j < ctx; ++j) {
    max_score = std::fmax(max_score, scores[j]);
    finite = finite && std::fabs(scores[j]) <= FLT_MAX;
  }
  float* out = a.out + t * a.ldo + static_cast<int64_t>(h) * a.head_dim;
  if (!finite) {
    // A NaN or infinite score (damaged weights or cache) makes the output NaN, as in the twin, so
    // that the sampler refuses the row instead of fmax and exp quietly turning it into numbers.
    for (int d = 0; d < a.head_dim; ++d) out[d] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  for (int d = 0; d < a.head_dim; ++d) out[d] = 0.0f;
  float sum = 0.0f;
  for (int j = j0; j < ctx; ++j) {
    const float p = std::exp(scores[j] - max_score);
    sum += p;
    const int64_t v = v_row(a, table, j, kv_dim, kvh);
    int d = 0;
#if defined(OSSA_ATTN_AVX2)
    // 8 dimensions per vector: each out[d] gets the same fma as in the scalar loop.
    const __m256 pv = _mm256_set1_ps(p);
    for (; d + 8 <= a.head_dim; d += 8)
      _mm256_storeu_ps(out + d,
                       _mm256_fmadd_ps(pv, kv8<KV>(a.v_cache, v + d), _mm256_loadu_ps(out + d)));
#endif
    for (; d < a.head_dim; ++d) out[d] = std::fma(p, kv_at<KV>(a.v_cache, v + d), out[d]);
  }
  const float inv = 1.0f / (sum + sink_term(a, h, max_score));
  for (int d = 0; d < a.head_dim; ++d) out[d] *= inv;
}

#if defined(OSSA_ATTN_AVX2) || defined(__AVX512F__)
// Decode at large batch streams the cache from memory: blocks are requested this many ahead of use.
constexpr int k_prefetch_blocks = 4;

// One cache line into L2 (into L1 measured no faster). An asm statement rather than _mm_prefetch:
// GCC 12 dropped the builtin prefetches from attend_heads' loops (none in the object code). The
// address is a register operand: a memory operand would tell GCC the asm reads memory there.
inline void prefetch_line(const char* p) { asm volatile("prefetcht1 (%0)" : : "r"(p)); }

// One head's K slab of cache block `block` ([dim][position], contiguous), line by line.
inline void prefetch_k_slab(const AttentionArgs& a, int32_t block, int64_t kv_off, int64_t kv_dim) {
  const int64_t elem = static_cast<int64_t>(kv_type_bytes(a.kv_type)), bs = a.block_size;
  const char* p = static_cast<const char*>(a.k_cache) +
                  (static_cast<int64_t>(block) * bs * kv_dim + kv_off * bs) * elem;
  for (int64_t l = 0; l < static_cast<int64_t>(a.head_dim) * bs * elem; l += 64)
    prefetch_line(p + l);
}

// One head's V rows of cache block table[blk] (the positions of the block below ctx, rows strided
// by kv_dim), line by line.
inline void prefetch_v_rows(const AttentionArgs& a, const int32_t* table, int blk, int ctx,
                            int64_t kv_off, int64_t kv_dim) {
  const int64_t elem = static_cast<int64_t>(kv_type_bytes(a.kv_type)), bs = a.block_size;
  const char* p = static_cast<const char*>(a.v_cache) +
                  (static_cast<int64_t>(table[blk]) * bs * kv_dim + kv_off) * elem;
  const int n_in = std::min(a.block_size, ctx - blk * a.block_size);
  for (int i = 0; i < n_in; ++i)
    for (int64_t l = 0; l < static_cast<int64_t>(a.head_dim) * elem; l += 64)
      prefetch_line(p + i * kv_dim * elem + l);
}

// A single token's scores loop over its context's blocks blk0 .. n_blocks - 1: before the loop, the
// first k_prefetch_blocks blocks' K (prefetch_first_k); at block blk, the K k_prefetch_blocks
// ahead, and past the last K the first V blocks in turn (the V sum's own loop asks for the rest).
inline void prefetch_first_k(const AttentionArgs& a, const int32_t* table, int blk0, int n_blocks,
                             int64_t kv_off, int64_t kv_dim) {
  for (int b = blk0; b < std::min(n_blocks, blk0 + k_prefetch_blocks); ++b)
    prefetch_k_slab(a, table[b], kv_off, kv_dim);
}
inline void prefetch_scores_ahead(const AttentionArgs& a, const int32_t* table, int blk, int blk0,
                                  int n_blocks, int ctx, int64_t kv_off, int64_t kv_dim) {
  if (blk + k_prefetch_blocks < n_blocks)
    prefetch_k_slab(a, table[blk + k_prefetch_blocks], kv_off, kv_dim);
  else if (blk + k_prefetch_blocks - n_blocks + blk0 < n_blocks)
    prefetch_v_rows(a, table, blk + k_prefetch_blocks - n_blocks + blk0, ctx, kv_off, kv_dim);
}

#endif

#if defined(OSSA_ATTN_AVX2) && !defined(__AVX512F__) && \
    (defined(__FMA__) || defined(OSSA_FMA_EMULATED))
#define OSSA_ATTN_AVX2_HEADS 1
// AVX2 without AVX-512: attend_heads' scheme on 8-lane vectors, for GH heads of one KV group at
// once (they share every K and V row loaded). Scores 8 positions at a time from the transposed K
// blocks, two partial sums over d mod 2, (s0 + s1) * scale; exp8 over positions; the softmax sum in
// 8 lanes by position (from j0) mod 8; the weighted V sum in registers, one 8-wide column chunk at
// a time, positions in order. Each head's arithmetic is what it would be alone, so a token's output
// does not depend on its batch. Needs head_dim and block_size multiples of 8 (else
// attend_generic).
inline __m256 lane_mask(int lo, int hi) {  // lanes lo <= k < hi all ones
  const __m256i k = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_castsi256_ps(_mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(hi), k),
                                              _mm256_cmpgt_epi32(k, _mm256_set1_epi32(lo - 1))));
}

// attend_heads8's V sum over n consecutive positions of one cache block (V row i at v + i kv_dim,
// from the first of B 8-wide column chunks; probabilities p[g][j + i]): o[g B + k] += p[g][j + i]
// V[i][8 k ..], positions in order. Accumulators copied in and out (constant indices: registers).
template <KvType KV, int GH, int B>
inline void v_block8(__m256* o, const void* v_cache, int64_t v, int64_t kv_dim, float* const* p,
                     int j, int n) {
  __m256 acc[GH * B];
  for (int i = 0; i < GH * B; ++i) acc[i] = o[i];
  for (int i = 0; i < n; ++i, v += kv_dim) {
    __m256 w[GH];
    for (int g = 0; g < GH; ++g) w[g] = _mm256_set1_ps(p[g][j + i]);
    for (int k = 0; k < B; ++k) {
      const __m256 vc = kv8<KV>(v_cache, v + 8 * k);
      for (int g = 0; g < GH; ++g) acc[g * B + k] = _mm256_fmadd_ps(w[g], vc, acc[g * B + k]);
    }
  }
  for (int i = 0; i < GH * B; ++i) o[i] = acc[i];
}

template <KvType KV, int GH>
void attend_heads8(const AttentionArgs& a, int t, int h0, int thread, int group, int64_t kv_dim,
                   float scale) {
  const int hd = a.head_dim, bs = a.block_size;
  const int64_t kv_off = static_cast<int64_t>(h0 / group) * hd;
  const int64_t head_stride = a.scratch_stride / k_heads_per_item;
  float* scores[GH];
  const float* q[GH];
  for (int g = 0; g < GH; ++g) {
    scores[g] = a.scratch + a.scratch_stride * thread + head_stride * g;
    q[g] = a.q + t * a.ldq + static_cast<int64_t>(h0 + g) * hd;
  }
  const int32_t* table = a.block_tables + a.block_table_start[a.token_seq[t]];
  const int ctx = a.positions[t] + 1, j0 = first_position(a, ctx), blk0 = j0 / bs;
  __m256 vmax[GH], bad[GH];
  for (int g = 0; g < GH; ++g) {
    vmax[g] = _mm256_set1_ps(-INFINITY);
    bad[g] = _mm256_setzero_ps();
  }
  const __m256 vinf = _mm256_set1_ps(INFINITY);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  // K and V prefetched k_prefetch_blocks ahead, as attend_heads does (a decode step's weight stream
  // leaves them cold).
  const int n_blocks = (ctx + bs - 1) / bs;
  prefetch_first_k(a, table, blk0, n_blocks, kv_off, kv_dim);
  for (int blk = blk0; blk * bs < ctx; ++blk) {
    const int64_t kb = static_cast<int64_t>(table[blk]) * bs * kv_dim + kv_off * bs;
    const int n_in = std::min(bs, ctx - blk * bs);
    const int lo = std::max(0, j0 - blk * bs);  // the block's first position inside the window
    prefetch_scores_ahead(a, table, blk, blk0, n_blocks, ctx, kv_off, kv_dim);
    for (int i0 = lo / 8 * 8; i0 < n_in; i0 += 8) {
      // (a whole vector of the block's slab is read; lanes outside [lo, n_in) are masked off)
      const __m256 m = lane_mask(lo - i0, n_in - i0);
      const int64_t kc = kb + i0;
      __m256 acc[GH][2];
      for (int g = 0; g < GH; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
      int d = 0;
      for (; d + 2 <= hd; d += 2)
        for (int r = 0; r < 2; ++r) {
          const __m256 k = kv8<KV>(a.k_cache, kc + static_cast<int64_t>(d + r) * bs);
          for (int g = 0; g < GH; ++g)
            acc[g][r] = _mm256_fmadd_ps(_mm256_set1_ps(q[g][d + r]), k, acc[g][r]);
        }
      for (int g = 0; g < GH; ++g) {
        const __m256 sc = _mm256_mul_ps(_mm256_add_ps(acc[g][0], acc[g][1]), _mm256_set1_ps(scale));
        _mm256_maskstore_ps(scores[g] + blk * bs + i0, _mm256_castps_si256(m), sc);
        vmax[g] = _mm256_max_ps(vmax[g], _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), sc, m));
        bad[g] = _mm256_or_ps(bad[g], _mm256_and_ps(m, _mm256_cmp_ps(_mm256_and_ps(sc, abs_mask),
                                                                     vinf, _CMP_NLT_UQ)));
      }
    }
  }
  // Softmax numerators in place; the sum in 8 lanes by position (from j0) mod 8.
  float inv[GH];
  bool is_bad[GH];
  for (int g = 0; g < GH; ++g) {
    is_bad[g] = _mm256_movemask_ps(bad[g]) != 0;
    const float mx_s = sink_max(a, h0 + g, hmax8(vmax[g]));
    const __m256 mx = _mm256_set1_ps(mx_s);
    __m256 vsum = _mm256_setzero_ps();
    for (int j = j0; j < ctx; j += 8) {
      const __m256 m = lane_mask(0, ctx - j);
      const __m256i mi = _mm256_castps_si256(m);
      const __m256 p = exp8(_mm256_sub_ps(_mm256_maskload_ps(scores[g] + j, mi), mx));
      _mm256_maskstore_ps(scores[g] + j, mi, p);
      vsum = _mm256_add_ps(vsum, _mm256_and_ps(m, p));
    }
    inv[g] = 1.0f / (hsum8(vsum) + sink_term(a, h0 + g, mx_s));
  }
  // Weighted sum of V rows in position order, CB 8-wide column chunks of the GH heads at a time
  // (v_block8: as many as the 16 registers hold), so each pass over the positions reads CB chunks
  // of a row; each accumulator takes the same FMAs in the same order as one chunk at a time would.
  constexpr int CB = GH == 1 ? 8 : GH == 2 ? 4 : 2;
  const int nch = hd / 8;
  auto pass = [&]<int B>(int c0) {
    __m256 o[GH * B];
    for (int i = 0; i < GH * B; ++i) o[i] = _mm256_setzero_ps();
    for (int blk = blk0, j = j0; j < ctx; ++blk) {
      if (c0 == 0 && blk + k_prefetch_blocks < n_blocks)
        prefetch_v_rows(a, table, blk + k_prefetch_blocks, ctx, kv_off, kv_dim);
      const int i0 = j % bs, n_in = std::min(bs - i0, ctx - j);
      const int64_t v = (static_cast<int64_t>(table[blk]) * bs + i0) * kv_dim + kv_off + 8 * c0;
      v_block8<KV, GH, B>(o, a.v_cache, v, kv_dim, scores, j, n_in);
      j += n_in;
    }
    for (int g = 0; g < GH; ++g) {
      float* out = a.out + t * a.ldo + static_cast<int64_t>(h0 + g) * hd + 8 * c0;
      for (int k = 0; k < B; ++k)
        _mm256_storeu_ps(out + 8 * k, is_bad[g]
                                          ? _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN())
                                          : _mm256_mul_ps(o[g * B + k], _mm256_set1_ps(inv[g])));
    }
  };
  int c0 = 0;
  for (; c0 + CB <= nch; c0 += CB) pass.template operator()<CB>(c0);
  for (; c0 < nch; ++c0) pass.template operator()<1>(c0);
}
#endif

#if defined(__AVX512F__)

// 0, 1, ..., 15.
inline __m512i lane_iota() {
  return _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
}

// 16 K/V elements from p (masked), as f32.
template <KvType KV>
inline __m512 load_kv(__mmask16 m, const void* p, int64_t i) {
  if constexpr (KV == KvType::F16)
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i));
  else
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
}

// The sum of v's 16 lanes in a fixed tree (what GCC's _mm512_reduce_add_ps computes, written out
// so that no compiler's choice of order can part it from sum_tree16): halves, quarters, then
// ((q0 + q2) + (q1 + q3)).
inline float reduce_add16(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)),
                                 _mm512_castps512_ps256(v));
  const __m128 q = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
  const __m128 p = _mm_add_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(_mm_add_ss(p, _mm_shuffle_ps(p, p, 1)));
}

// Lane-wise reduce_add16: lane c of the result is reduce_add16 of the vector whose lane l is lane c
// of v[l], in the same tree, so that a chain summed in 16 vectors (one a lane of the 16 partial
// sums) gets the bits of the same 16 partial sums reduced in one vector.
inline __m512 sum_tree16(const __m512* v) {
  __m512 h[8], q[4];
  for (int i = 0; i < 8; ++i) h[i] = _mm512_add_ps(v[i + 8], v[i]);
  for (int i = 0; i < 4; ++i) q[i] = _mm512_add_ps(h[i + 4], h[i]);
  return _mm512_add_ps(_mm512_add_ps(q[0], q[2]), _mm512_add_ps(q[1], q[3]));
}

// attend_heads' V sum over n consecutive positions of one cache block (V row i at v + i kv_dim,
// probabilities p[g][j + i]): o[g NC + c] += p[g][j + i] V[i][16 c ..] in position order. The
// accumulators are copied in and out, with constant indices only, so that GCC keeps them in
// registers (held across attend_heads' loops, it stored them at every position).
template <KvType KV, int NC, int GH>
inline void v_block_heads(__m512* o, const void* v_cache, int64_t v, int64_t kv_dim, __mmask16 tail,
                          float* const* p, int j, int n) {
  __m512 acc[GH * NC];
  for (int i = 0; i < GH * NC; ++i) acc[i] = o[i];
  for (int i = 0; i < n; ++i, v += kv_dim) {
    __m512 w[GH];
    for (int g = 0; g < GH; ++g) w[g] = _mm512_set1_ps(p[g][j + i]);
    for (int c = 0; c < NC; ++c) {
      const __m512 vc =
          load_kv<KV>(c == NC - 1 ? tail : static_cast<__mmask16>(0xFFFF), v_cache, v + 16 * c);
      for (int g = 0; g < GH; ++g) acc[g * NC + c] = _mm512_fmadd_ps(w[g], vc, acc[g * NC + c]);
    }
  }
  for (int i = 0; i < GH * NC; ++i) o[i] = acc[i];
}

// The same contract as attend_generic, for GH heads of one KV group at once (they share every K and
// V row loaded), with 16-lane vectors: scores 16 positions at a time from the transposed K blocks
// (no horizontal sums), exp vectorised over positions, outputs accumulated in registers. Each
// head's arithmetic is exactly what it would be alone. NC = ceil(head_dim / 16); GH * NC <= 16.
template <KvType KV, int NC, int GH>
void attend_heads(const AttentionArgs& a, int t, int h0, int thread, int group, int64_t kv_dim,
                  float scale) {
  const int hd = a.head_dim, bs = a.block_size;
  const int64_t kv_off = static_cast<int64_t>(h0 / group) * hd;
  const int64_t head_stride = a.scratch_stride / k_heads_per_item;
  float* scores[GH];
  const float* q[GH];
  for (int g = 0; g < GH; ++g) {
    scores[g] = a.scratch + a.scratch_stride * thread + head_stride * g;
    q[g] = a.q + t * a.ldq + static_cast<int64_t>(h0 + g) * hd;
  }
  const int32_t* table = a.block_tables + a.block_table_start[a.token_seq[t]];
  const int ctx = a.positions[t] + 1, j0 = first_position(a, ctx), blk0 = j0 / bs;
  // Scores: q[d] broadcast times a row of 16 positions ([dim][position] in the block), four partial
  // sums over d mod 4, then ((s0 + s1) + (s2 + s3)) * scale.
  __m512 vmax[GH];
  __mmask16
      bad[GH];  // lanes that met a NaN or infinite score: the head's output is NaN (see above)
  for (int g = 0; g < GH; ++g) {
    vmax[g] = _mm512_set1_ps(-INFINITY);
    bad[g] = 0;
  }
  const __m512 vinf = _mm512_set1_ps(INFINITY);
  // A single token's K / V are cold whatever the cache's size: a decode step streams the weights
  // (mostly far more than L3) between two visits of a layer. So each block's K (one head's
  // [dim][position] slab, contiguous) and V rows (strided by kv_dim) are requested
  // k_prefetch_blocks ahead of their use; the last K blocks request the first V blocks. (Requested
  // only above 1 MB of cache before: attention of a decode step 0.51-0.58 -> 0.32-0.34 ms on the
  // default model, 0.68 -> 0.42-0.45 on the 1B shape, on the Zen 4 VM; docs/performance-kquant.md,
  // seventeenth pass.)
  const int n_blocks = (ctx + bs - 1) / bs;
  prefetch_first_k(a, table, blk0, n_blocks, kv_off, kv_dim);
  for (int blk = blk0; blk * bs < ctx; ++blk) {
    const int64_t kb = static_cast<int64_t>(table[blk]) * bs * kv_dim + kv_off * bs;
    const int n_in = std::min(bs, ctx - blk * bs);
    const int lo = std::max(0, j0 - blk * bs);  // the block's first position inside the window
    prefetch_scores_ahead(a, table, blk, blk0, n_blocks, ctx, kv_off, kv_dim);
    for (int i0 = lo / 16 * 16; i0 < n_in; i0 += 16) {
      __mmask16 m = static_cast<__mmask16>(n_in - i0 >= 16 ? 0xFFFF : (1u << (n_in - i0)) - 1);
      if (i0 < lo) m = static_cast<__mmask16>(m & ~((1u << (lo - i0)) - 1));
      const int64_t kc = kb + i0;
      __m512 acc[GH][4];
      for (int g = 0; g < GH; ++g)
        for (int r = 0; r < 4; ++r) acc[g][r] = _mm512_setzero_ps();
      int d = 0;
      for (; d + 4 <= hd; d += 4) {
        for (int r = 0; r < 4; ++r) {
          const __m512 k = load_kv<KV>(m, a.k_cache, kc + static_cast<int64_t>(d + r) * bs);
          for (int g = 0; g < GH; ++g)
            acc[g][r] = _mm512_fmadd_ps(_mm512_set1_ps(q[g][d + r]), k, acc[g][r]);
        }
      }
      for (; d < hd; ++d) {
        const __m512 k = load_kv<KV>(m, a.k_cache, kc + static_cast<int64_t>(d) * bs);
        for (int g = 0; g < GH; ++g)
          acc[g][0] = _mm512_fmadd_ps(_mm512_set1_ps(q[g][d]), k, acc[g][0]);
      }
      for (int g = 0; g < GH; ++g) {
        const __m512 sum =
            _mm512_add_ps(_mm512_add_ps(acc[g][0], acc[g][1]), _mm512_add_ps(acc[g][2], acc[g][3]));
        __m512 sc = _mm512_mul_ps(sum, _mm512_set1_ps(scale));
        if (a.alibi != nullptr)  // (alibi_bias of the 16 positions from blk * bs + i0)
          sc = _mm512_add_ps(
              sc, _mm512_mul_ps(_mm512_set1_ps(a.alibi[h0 + g]),
                                _mm512_cvtepi32_ps(_mm512_add_epi32(
                                    _mm512_set1_epi32(blk * bs + i0 - (ctx - 1)), lane_iota()))));
        if (a.softcap > 0.0f) sc = softcap16(sc, a.softcap);
        _mm512_mask_storeu_ps(scores[g] + blk * bs + i0, m, sc);
        vmax[g] = _mm512_mask_max_ps(vmax[g], m, vmax[g], sc);
        bad[g] |= _mm512_mask_cmp_ps_mask(m, _mm512_abs_ps(sc), vinf, _CMP_NLT_UQ);
      }
    }
  }
  // Softmax numerators in place; the sum in 16 lanes by position (from j0) mod 16.
  __m512 vsum[GH];
  float mx_s[GH];
  for (int g = 0; g < GH; ++g) {
    mx_s[g] = sink_max(a, h0 + g, _mm512_reduce_max_ps(vmax[g]));
    const __m512 mx = _mm512_set1_ps(mx_s[g]);
    vsum[g] = _mm512_setzero_ps();
    for (int j = j0; j < ctx; j += 16) {
      const __mmask16 m = static_cast<__mmask16>(ctx - j >= 16 ? 0xFFFF : (1u << (ctx - j)) - 1);
      const __m512 p = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores[g] + j), mx));
      _mm512_mask_storeu_ps(scores[g] + j, m, p);
      vsum[g] = _mm512_add_ps(vsum[g], _mm512_maskz_mov_ps(m, p));
    }
  }
  // Weighted sum of V rows in position order, one pass over the positions with all GH x NC (<= 16)
  // accumulators (v_block_heads, block by block), so that each V row is read once, whole, and the
  // NC column chunks are independent FMA chains. (Chunk by chunk, the order before, read every row
  // NC times, 64 bytes at a time at a stride of kv_dim, and left GH chains to hide the FMA latency:
  // 3B decode, head_dim 128 and one head an item, spent 5% of a step there.) Each accumulator
  // takes the same FMAs in the same order either way.
  const __mmask16 tail = static_cast<__mmask16>(hd % 16 == 0 ? 0xFFFF : (1u << (hd % 16)) - 1);
  __m512 o[GH * NC];
  for (int i = 0; i < GH * NC; ++i) o[i] = _mm512_setzero_ps();
  for (int blk = blk0, j = j0; j < ctx; ++blk) {
    if (blk + k_prefetch_blocks < n_blocks)
      prefetch_v_rows(a, table, blk + k_prefetch_blocks, ctx, kv_off, kv_dim);
    const int i0 = j % bs, n_in = std::min(bs - i0, ctx - j);
    const int64_t v = (static_cast<int64_t>(table[blk]) * bs + i0) * kv_dim + kv_off;
    v_block_heads<KV, NC, GH>(o, a.v_cache, v, kv_dim, tail, scores, j, n_in);
    j += n_in;
  }
  for (int g = 0; g < GH; ++g) {
    float* out = a.out + t * a.ldo + static_cast<int64_t>(h0 + g) * hd;
    const __m512 inv =
        _mm512_set1_ps(1.0f / (reduce_add16(vsum[g]) + sink_term(a, h0 + g, mx_s[g])));
    const __m512 nan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
    for (int c = 0; c < NC; ++c)
      _mm512_mask_storeu_ps(out + 16 * c, c == NC - 1 ? tail : static_cast<__mmask16>(0xFFFF),
                            bad[g] ? nan : _mm512_mul_ps(o[g * NC + c], inv));
  }
}

// attend_tokens' score chain r for 16 positions: out[i] = sum over d = r, r + 4, ... < d_end, then
// (chain 0) d_end .. d_tail - 1, of K[d][i] q[d] (the 16 chains' q in the lanes), by FMA in that
// order. (A function of its own, so that acc is registers: see v_rows.)
inline void score_chain(const float* qt, const float* kt, int r, int d_end, int d_tail,
                        float* out) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int d = r; d < d_end; d += 4) {
    const __m512 qv = _mm512_load_ps(qt + d * 16);
    for (int i = 0; i < 16; ++i)
      acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(kt[d * 16 + i]), qv, acc[i]);
  }
  for (int d = d_end; d < d_tail; ++d) {
    const __m512 qv = _mm512_load_ps(qt + d * 16);
    for (int i = 0; i < 16; ++i)
      acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(kt[d * 16 + i]), qv, acc[i]);
  }
  for (int i = 0; i < 16; ++i) _mm512_store_ps(out + i * 16, acc[i]);
}

// attend_tokens' V sum over positions [j_begin, j_end) of one cache block (row j at base + (j -
// j_row0) kv_dim): o[c] += p[j][c] V[j] for the C chains. From position tail0 on (tail0 >= 0), the
// chains before (j - tail0 + 1) gh do not attend to j: their probability is 0 and their V row is
// taken as 0 too (0 x 0 leaves o as it is, where 0 x a non-finite V would not). The accumulators
// are copied in and out: held across attend_tokens' loops, GCC kept them in memory and stored each
// one at every position.
template <KvType KV, int C>
inline void v_rows(__m512* o, const void* v_cache, int64_t base, int64_t kv_dim, __mmask16 mask,
                   const float* pt, int j_begin, int j_end, int j_row0, int tail0, int gh) {
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = o[c];
  if (tail0 < 0) {
    for (int j = j_begin; j < j_end; ++j) {
      const __m512 vc = load_kv<KV>(mask, v_cache, base + (j - j_row0) * kv_dim);
      const float* pj = pt + j * 16;
      for (int c = 0; c < C; ++c) acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(pj[c]), vc, acc[c]);
    }
  } else {
    for (int j = j_begin; j < j_end; ++j) {
      const __m512 vc = load_kv<KV>(mask, v_cache, base + (j - j_row0) * kv_dim);
      const float* pj = pt + j * 16;
      const int first = (j - tail0 + 1) * gh;
      for (int c = 0; c < C; ++c)
        acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(pj[c]),
                                 _mm512_maskz_mov_ps(c >= first ? 0xFFFF : 0, vc), acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) o[c] = acc[c];
}

// Prefill: a run of n <= T tokens of one sequence at consecutive positions, none of whose windows
// starts inside its context (each attends from position 0), and GH heads of one KV group: C = T x
// GH chains (token t, head g) in the 16 lanes of a vector, lane t GH + g. Each chain gets exactly
// attend_heads' arithmetic: the same four score chains over d mod 4 and their sum (here vectorised
// over chains, with K's element broadcast: the same products), the same exp16, the softmax sum in
// the same 16 partial sums by position mod 16 added in reduce_add16's tree (sum_tree16), the
// same V sum in position order. So a token's output does not depend on its run. But each K and V
// vector is loaded (and converted) once for C chains instead of GH, the scores and probabilities of
// a position are one vector (one base pointer for every broadcast: no pointer per chain), and the C
// independent accumulators hide the FMA latency that GH alone left exposed in the V sum. Lanes of a
// position past a token's context, and of missing tokens (n < T), are masked out (scores, maximum)
// or zero (probabilities), and the V sum skips them.
template <KvType KV, int GH>
void attend_tokens(const AttentionArgs& a, int t0, int n, int h0, int group, int64_t kv_dim,
                   float scale) {
  constexpr int T = 16 / GH, C = T * GH;
  const int hd = a.head_dim, bs = a.block_size, nc = (hd + 15) / 16;
  const int64_t kv_off = static_cast<int64_t>(h0 / group) * hd;
  const int32_t* table = a.block_tables + a.block_table_start[a.token_seq[t0]];
  const int ctx0 = a.positions[t0] + 1, ctx_max = ctx0 + n - 1;
  const int64_t n_pos = (ctx_max + 15) / 16 * 16;
  // Scratch: q by dimension [hd][16 chains], K of 16 positions as f32 [hd][16], the partial score
  // chains [4][16 positions][16], then scores / probabilities by position [n_pos][16].
  thread_local AlignedVector<float> buf;
  const size_t need = static_cast<size_t>(2 * hd * 16 + 4 * 256 + n_pos * 16);
  if (buf.size() < need) buf.resize(need);
  float* qt = buf.data();
  float* kt = qt + hd * 16;
  float* part = kt + hd * 16;
  float* pt = part + 4 * 256;
  const __mmask16 live =
      static_cast<__mmask16>((1u << (n * GH)) - 1);  // the chains of tokens in the run
  for (int d = 0; d < hd; ++d)
    for (int c = 0; c < 16; ++c)
      qt[d * 16 + c] = c < n * GH
                           ? a.q[(t0 + c / GH) * a.ldq + static_cast<int64_t>(h0 + c % GH) * hd + d]
                           : 0.0f;
  // Lanes whose chains attend to position j.
  auto lanes_at = [&](int j) {
    return j < ctx0 ? live : static_cast<__mmask16>(live & ~((1u << ((j - ctx0 + 1) * GH)) - 1));
  };
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  __mmask16 bad = 0;
  const __m512 vinf = _mm512_set1_ps(INFINITY), vscale = _mm512_set1_ps(scale);
  // ALiBi: chain c's slope (head h0 + c % GH) and its token's position (ctx0 - 1 + c / GH)
  alignas(64) float slope_c[16] = {};
  alignas(64) int32_t qpos_c[16] = {};
  for (int c = 0; c < 16; ++c) {
    slope_c[c] = a.alibi != nullptr ? a.alibi[h0 + c % GH] : 0.0f;
    qpos_c[c] = ctx0 - 1 + c / GH;
  }
  const __m512 slopes = _mm512_load_ps(slope_c);
  const __m512i qpos = _mm512_load_si512(qpos_c);
  const int d_end = hd / 4 * 4;
  for (int blk = 0; blk * bs < ctx_max; ++blk) {
    const int64_t kb = static_cast<int64_t>(table[blk]) * bs * kv_dim + kv_off * bs;
    const int n_in = std::min(bs, ctx_max - blk * bs);
    for (int i0 = 0; i0 < n_in; i0 += 16) {
      const int n16 = std::min(16, n_in - i0);
      const __mmask16 m = static_cast<__mmask16>(n16 == 16 ? 0xFFFF : (1u << n16) - 1);
      for (int d = 0; d < hd; ++d)
        _mm512_store_ps(kt + d * 16,
                        load_kv<KV>(m, a.k_cache, kb + i0 + static_cast<int64_t>(d) * bs));
      float* sc = pt + static_cast<int64_t>(blk * bs + i0) * 16;
      for (int r = 0; r < 4; ++r)
        score_chain(qt, kt, r, d_end, r == 0 ? hd : d_end, part + r * 256);
      for (int i = 0; i < n16; ++i) {
        const __m512 sum = _mm512_add_ps(
            _mm512_add_ps(_mm512_load_ps(part + i * 16), _mm512_load_ps(part + (16 + i) * 16)),
            _mm512_add_ps(_mm512_load_ps(part + (32 + i) * 16),
                          _mm512_load_ps(part + (48 + i) * 16)));
        __m512 v = _mm512_mul_ps(sum, vscale);
        if (a.alibi != nullptr)  // (alibi_bias: each chain's slope and distance to its token)
          v = _mm512_add_ps(
              v, _mm512_mul_ps(slopes, _mm512_cvtepi32_ps(_mm512_sub_epi32(
                                           _mm512_set1_epi32(blk * bs + i0 + i), qpos))));
        if (a.softcap > 0.0f) v = softcap16(v, a.softcap);  // as attend_heads
        _mm512_store_ps(sc + i * 16, v);
        const __mmask16 lanes = lanes_at(blk * bs + i0 + i);
        vmax = _mm512_mask_max_ps(vmax, lanes, vmax, v);
        bad |= _mm512_mask_cmp_ps_mask(lanes, _mm512_abs_ps(v), vinf, _CMP_NLT_UQ);
      }
    }
  }
  // Softmax numerators in place, lanes that do not attend to a position zero; the sum in 16 partial
  // sums by position mod 16, as attend_heads' lanes.
  alignas(64) float mx_s[16];
  _mm512_store_ps(mx_s, _mm512_maskz_mov_ps(live, vmax));
  for (int c = 0; c < 16; ++c) mx_s[c] = sink_max(a, h0 + c % GH, mx_s[c]);
  const __m512 mx = _mm512_load_ps(mx_s);
  __m512 part_sum[16];
  for (int l = 0; l < 16; ++l) part_sum[l] = _mm512_setzero_ps();
  for (int j0 = 0; j0 < ctx_max; j0 += 16) {
    const int n16 = std::min(16, ctx_max - j0);
    for (int l = 0; l < n16; ++l) {
      const int j = j0 + l;
      const __m512 p =
          _mm512_maskz_mov_ps(lanes_at(j), exp16(_mm512_sub_ps(_mm512_load_ps(pt + j * 16), mx)));
      _mm512_store_ps(pt + j * 16, p);
      part_sum[l] = _mm512_add_ps(part_sum[l], p);
    }
  }
  alignas(64) float inv[16];
  _mm512_store_ps(inv, sum_tree16(part_sum));
  for (int c = 0; c < 16; ++c) inv[c] += sink_term(a, h0 + c % GH, mx_s[c]);
  _mm512_store_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_load_ps(inv)));
  // Weighted sum of V rows in position order, one 16-wide column chunk at a time: the positions
  // every token attends to, then the later tokens' own.
  const __mmask16 tail = static_cast<__mmask16>(hd % 16 == 0 ? 0xFFFF : (1u << (hd % 16)) - 1);
  for (int cc = 0; cc < nc; ++cc) {
    const __mmask16 mask = cc == nc - 1 ? tail : static_cast<__mmask16>(0xFFFF);
    __m512 o[C];
    for (int c = 0; c < C; ++c) o[c] = _mm512_setzero_ps();
    for (int blk = 0; blk * bs < ctx_max; ++blk) {
      const int64_t base = static_cast<int64_t>(table[blk]) * bs * kv_dim + kv_off + 16 * cc;
      const int j_begin = blk * bs, j_end = std::min(ctx_max, j_begin + bs);
      v_rows<KV, C>(o, a.v_cache, base, kv_dim, mask, pt, j_begin, std::min(j_end, ctx0), j_begin,
                    -1, 0);
      if (j_end > ctx0)
        v_rows<KV, C>(o, a.v_cache, base, kv_dim, mask, pt, std::max(j_begin, ctx0), j_end, j_begin,
                      ctx0, GH);
    }
    for (int c = 0; c < C; ++c) {  // (a static index: o stays in registers)
      if (c >= n * GH) break;
      float* out = a.out + (t0 + c / GH) * a.ldo + static_cast<int64_t>(h0 + c % GH) * hd;
      const __m512 r = (bad >> c) & 1 ? _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN())
                                      : _mm512_mul_ps(o[c], _mm512_set1_ps(inv[c]));
      _mm512_mask_storeu_ps(out + 16 * cc, mask, r);
    }
  }
}

// The first K blocks of an item into L2, so the item after the current one starts warm.
void prefetch_item(const AttentionArgs& a, int t, int h0, int64_t kv_dim) {
  const int group = a.n_head / a.n_head_kv;
  const int32_t* table = a.block_tables + a.block_table_start[a.token_seq[t]];
  const int ctx = a.positions[t] + 1, blk0 = first_position(a, ctx) / a.block_size;
  const int n_blocks = (ctx + a.block_size - 1) / a.block_size;
  prefetch_first_k(a, table, blk0, n_blocks, static_cast<int64_t>(h0 / group) * a.head_dim, kv_dim);
}

template <KvType KV, int NC>
void attend_nc(const AttentionArgs& a, int t, int h0, int gh, int thread, int group, int64_t kv_dim,
               float scale) {
  if constexpr (4 * NC <= 16) {
    if (gh == 4) return attend_heads<KV, NC, 4>(a, t, h0, thread, group, kv_dim, scale);
  }
  if constexpr (3 * NC <= 16) {
    if (gh == 3) return attend_heads<KV, NC, 3>(a, t, h0, thread, group, kv_dim, scale);
  }
  if constexpr (2 * NC <= 16) {
    if (gh == 2) return attend_heads<KV, NC, 2>(a, t, h0, thread, group, kv_dim, scale);
  }
  for (int g = 0; g < gh; ++g) attend_heads<KV, NC, 1>(a, t, h0 + g, thread, group, kv_dim, scale);
}
#endif

// f.template operator()<GH>() for GH = gh (4, 3, 2; anything else 1): the kernels that take the
// heads of an item as a template parameter.
template <class F>
void with_heads(int gh, F&& f) {
  switch (gh) {
    case 4:
      return f.template operator()<4>();
    case 3:
      return f.template operator()<3>();
    case 2:
      return f.template operator()<2>();
    default:
      return f.template operator()<1>();
  }
}

#if defined(__AVX512F__)
// GH heads of one KV group whose head is too large for attend_heads' registers (over 128 dims,
// but 256: DeepSeek's latent attention, 576, one KV head shared by every query head), with
// attend_generic's arithmetic exactly, so the same bits: each score a chain of fmas over d in order
// times scale, the softmax in position order (std::exp, the sum in position order), each output
// element a chain of fmas over positions from 0, times 1 / sum. What changes is the data movement:
// every K and V element is loaded once for the GH heads, 16 positions (scores) or 16 dimensions
// (the V sum, 64 at a time) a vector, where attend_generic reads the cache once per head.
template <KvType KV, int GH>
void attend_wide(const AttentionArgs& a, int t, int h0, int thread, int group, int64_t kv_dim,
                 float scale) {
  const int bs = a.block_size, hd = a.head_dim, kvh = h0 / group;
  const int64_t head_stride = a.scratch_stride / k_heads_per_item;
  float* sc[GH];
  const float* q[GH];
  float* out[GH];
  for (int g = 0; g < GH; ++g) {
    sc[g] = a.scratch + a.scratch_stride * thread + head_stride * g;
    q[g] = a.q + t * a.ldq + static_cast<int64_t>(h0 + g) * hd;
    out[g] = a.out + t * a.ldo + static_cast<int64_t>(h0 + g) * hd;
  }
  const int32_t* table = a.block_tables + a.block_table_start[a.token_seq[t]];
  const int ctx = a.positions[t] + 1, j0 = first_position(a, ctx);
  const __m512 vscale = _mm512_set1_ps(scale);
  // k_rows: each position's row loaded once for the GH heads, 16 dimensions a vector, then the 16
  // partial sums in reduce_add16's fixed tree.
  for (int j = a.k_rows ? j0 : ctx; j < ctx; ++j) {
    const int64_t row = v_row(a, table, j, kv_dim, kvh);
    __m512 acc[GH];
    for (int g = 0; g < GH; ++g) acc[g] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 16) {
      const __mmask16 m = static_cast<__mmask16>((1u << std::min(16, hd - d)) - 1u);
      const __m512 k = load_kv<KV>(m, a.v_cache, row + d);
      for (int g = 0; g < GH; ++g)
        acc[g] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q[g] + d), k, acc[g]);
    }
    for (int g = 0; g < GH; ++g) sc[g][j] = reduce_add16(acc[g]) * scale;
  }
  for (int blk = j0 / bs; !a.k_rows && blk * bs < ctx; ++blk) {
    const int64_t kb =
        static_cast<int64_t>(table[blk]) * bs * kv_dim + static_cast<int64_t>(kvh) * hd * bs;
    const int n_in = std::min(bs, ctx - blk * bs);
    for (int i = std::max(0, j0 - blk * bs); i < n_in; i += 16) {
      const __mmask16 m = static_cast<__mmask16>((1u << std::min(16, n_in - i)) - 1u);
      __m512 acc[GH];
      for (int g = 0; g < GH; ++g) acc[g] = _mm512_setzero_ps();
      for (int d = 0; d < hd; ++d) {
        const __m512 k = load_kv<KV>(m, a.k_cache, kb + static_cast<int64_t>(d) * bs + i);
        for (int g = 0; g < GH; ++g) acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g][d]), k, acc[g]);
      }
      for (int g = 0; g < GH; ++g)
        _mm512_mask_storeu_ps(sc[g] + blk * bs + i, m, _mm512_mul_ps(acc[g], vscale));
    }
  }
  bool finite[GH];
  float inv[GH];
  for (int g = 0; g < GH; ++g) {
    float* s = sc[g];
    add_alibi(a, h0 + g, s, j0, ctx);
    if (a.softcap > 0.0f) {
      const float cap = a.softcap;
      for (int j = j0; j < ctx; ++j) s[j] = cap * std::tanh(s[j] / cap);
    }
    float max_score = sink_max(a, h0 + g, -INFINITY);
    finite[g] = true;
    for (int j = j0; j < ctx; ++j) {
      max_score = std::fmax(max_score, s[j]);
      finite[g] = finite[g] && std::fabs(s[j]) <= FLT_MAX;
    }
    if (!finite[g]) {  // (as attend_generic: NaN, for the sampler to refuse)
      for (int d = 0; d < hd; ++d) out[g][d] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    float sum = 0.0f;
    for (int j = j0; j < ctx; ++j) {
      s[j] = std::exp(s[j] - max_score);
      sum += s[j];
    }
    inv[g] = 1.0f / (sum + sink_term(a, h0 + g, max_score));
  }
  for (int c0 = 0; c0 < hd; c0 += 64) {
    __mmask16 m[4];
    for (int k = 0; k < 4; ++k) {
      const int lanes = std::clamp(hd - c0 - 16 * k, 0, 16);
      m[k] = static_cast<__mmask16>((1u << lanes) - 1u);
    }
    __m512 acc[GH][4];
    for (int g = 0; g < GH; ++g)
      for (int k = 0; k < 4; ++k) acc[g][k] = _mm512_setzero_ps();
    for (int j = j0; j < ctx; ++j) {
      const int64_t v = v_row(a, table, j, kv_dim, kvh) + c0;
      for (int k = 0; k < 4; ++k) {
        if (m[k] == 0) break;
        const __m512 vk = load_kv<KV>(m[k], a.v_cache, v + 16 * k);
        for (int g = 0; g < GH; ++g)
          acc[g][k] = _mm512_fmadd_ps(_mm512_set1_ps(sc[g][j]), vk, acc[g][k]);
      }
    }
    for (int g = 0; g < GH; ++g) {
      if (!finite[g]) continue;
      for (int k = 0; k < 4 && m[k] != 0; ++k)
        _mm512_mask_storeu_ps(out[g] + c0 + 16 * k, m[k],
                              _mm512_mul_ps(acc[g][k], _mm512_set1_ps(inv[g])));
    }
  }
}

// A run of n > 1 prefill tokens (see attend_tokens), gh heads from h0.
template <KvType KV>
void attend_run(const AttentionArgs& a, int t, int n, int h0, int gh, int group, int64_t kv_dim,
                float scale) {
  with_heads(gh, [&]<int GH>() { attend_tokens<KV, GH>(a, t, n, h0, group, kv_dim, scale); });
}
#endif

// Heads per work item: the largest divisor of the group size that is at most k_heads_per_item (and
// leaves the accumulators in registers).
int heads_per_item(int group, int head_dim, bool k_rows) {
  const int nc = (head_dim + 15) / 16;
  // (attend_wide, for the heads over 128 dims but 256 and for k_rows caches, keeps 64 dimensions in
  // registers at a time)
  const bool wide = k_rows || (nc > 8 && nc != 16);
  for (int gh = k_heads_per_item; gh > 1; --gh)
    if (group % gh == 0 && (wide || gh * nc <= 16)) return gh;
  return 1;
}

// One token's gh heads of one KV group, from head h0.
template <KvType KV>
void attend(const AttentionArgs& a, int t, int h0, int gh, int thread, int group, int64_t kv_dim,
            float scale) {
#if defined(__AVX512F__)
  if (a.k_rows)  // (K and V one row: any head size)
    return with_heads(
        gh, [&]<int GH>() { attend_wide<KV, GH>(a, t, h0, thread, group, kv_dim, scale); });
  switch ((a.head_dim + 15) / 16) {
    case 1:
      return attend_nc<KV, 1>(a, t, h0, gh, thread, group, kv_dim, scale);
    case 2:
      return attend_nc<KV, 2>(a, t, h0, gh, thread, group, kv_dim, scale);
    case 3:
      return attend_nc<KV, 3>(a, t, h0, gh, thread, group, kv_dim, scale);
    case 4:
      return attend_nc<KV, 4>(a, t, h0, gh, thread, group, kv_dim, scale);
    case 5:
      return attend_nc<KV, 5>(a, t, h0, gh, thread, group, kv_dim, scale);
    case 6:
      return attend_nc<KV, 6>(a, t, h0, gh, thread, group, kv_dim, scale);
    case 7:
      return attend_nc<KV, 7>(a, t, h0, gh, thread, group, kv_dim, scale);
    case 8:
      return attend_nc<KV, 8>(a, t, h0, gh, thread, group, kv_dim, scale);
    case 16:
      return attend_nc<KV, 16>(a, t, h0, gh, thread, group, kv_dim, scale);  // Gemma's 256
    default:  // other head_dim > 128: attend_generic's arithmetic, GH heads at once
      return with_heads(
          gh, [&]<int GH>() { attend_wide<KV, GH>(a, t, h0, thread, group, kv_dim, scale); });
  }
#else
#if defined(OSSA_ATTN_AVX2_HEADS)
  // (Soft-capped scores, ALiBi: the generic path, std::tanh on each score.)
  if (a.head_dim % 8 == 0 && a.block_size % 8 == 0 && a.softcap <= 0.0f && !a.k_rows &&
      a.alibi == nullptr) {
    return with_heads(
        gh, [&]<int GH>() { attend_heads8<KV, GH>(a, t, h0, thread, group, kv_dim, scale); });
  }
#endif
#endif
  for (int g = 0; g < gh; ++g)
    attend_generic<KV>(a, static_cast<int64_t>(t) * a.n_head + h0 + g, thread, group, kv_dim,
                       scale);
}

}  // namespace

void paged_attention(const AttentionArgs& a) {
  const int64_t kv_dim = static_cast<int64_t>(a.n_head_kv) * a.head_dim;
  const int group = a.n_head / a.n_head_kv;
  const float scale = a.scale > 0.0f
                          ? a.scale
                          : static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  const int gh = heads_per_item(group, a.head_dim, a.k_rows);
  const int per_token = a.n_head / gh;
  // Runs of tokens that attend_tokens takes together (prefill chunks: tokens of one sequence at
  // consecutive positions, attending from position 0); every other token is a run of its own.
  std::vector<int32_t> runs;  // first token of each run, then n_tokens
#if defined(__AVX512F__)
  // (Only where single tokens take attend_heads, whose arithmetic attend_tokens repeats: other
  // head sizes go to attend_generic.)
  const int nc = (a.head_dim + 15) / 16;
  const int max_run = (nc <= 8 || nc == 16) && !a.k_rows ? 16 / gh : 1;
#else
  const int max_run = 1;
#endif
  for (int t = 0; t < a.n_tokens; ++t) {
    const bool joins =
        !runs.empty() && t - runs.back() < max_run && a.token_seq[t] == a.token_seq[t - 1] &&
        a.positions[t] == a.positions[t - 1] + 1 && first_position(a, a.positions[t] + 1) == 0;
    if (!joins) runs.push_back(t);
  }
  const int64_t n_runs = static_cast<int64_t>(runs.size());
  runs.push_back(a.n_tokens);
  const int64_t n_items = n_runs * per_token;
  // Roughly 2 * ctx * head_dim FMAs a token and head; small jobs (short decode contexts) stay on
  // one thread.
  int64_t work = 0;
  auto span = [&](int t) { return a.positions[t] + 1 - first_position(a, a.positions[t] + 1); };
  for (int t = 0; t < a.n_tokens; ++t)
    work += static_cast<int64_t>(span(t)) * a.head_dim * a.n_head;
  const int threads = work < 32768 ? 1 : a.max_threads;
  // Several items a chunk (the result does not depend on the grain), so each can warm the next.
  const int64_t grain = std::max<int64_t>(1, n_items / (static_cast<int64_t>(threads) * 8));
  parallel_for(n_items, grain, threads, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / per_token;
      const int t = runs[static_cast<size_t>(r)];
      const int h0 = static_cast<int>(item % per_token) * gh;
#if defined(__AVX512F__)
      if (const int n = runs[static_cast<size_t>(r) + 1] - t; n > 1) {
        if (a.kv_type == KvType::F16)
          attend_run<KvType::F16>(a, t, n, h0, gh, group, kv_dim, scale);
        else
          attend_run<KvType::F32>(a, t, n, h0, gh, group, kv_dim, scale);
        continue;
      }
      if (item + 1 < end && !a.k_rows) {
        const int64_t r1 = (item + 1) / per_token;
        prefetch_item(a, runs[static_cast<size_t>(r1)],
                      static_cast<int>((item + 1) % per_token) * gh, kv_dim);
      }
#endif
      if (a.kv_type == KvType::F16)
        attend<KvType::F16>(a, t, h0, gh, thread, group, kv_dim, scale);
      else
        attend<KvType::F32>(a, t, h0, gh, thread, group, kv_dim, scale);
    }
  });
}

}  // namespace ossa
