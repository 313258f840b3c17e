#include "kernels/attention.h"

#include "kernels/parallel.h"
#include "kernels/vec_math.h"

#include <algorithm>
#include <cmath>

#if defined(__AVX2__)
// GCC 12 flags the _mm512_undefined_* inside the intrinsic headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

namespace ossa {

namespace {

// out[d] = fma(p, v[d], out[d]) over a head.
void axpy(float p, const float* v, float* out, int n) {
  for (int d = 0; d < n; ++d) out[d] = std::fma(p, v[d], out[d]);
}

// One (token, head) pair: scores, softmax, weighted sum of V, all in position order.
void attend_generic(const AttentionArgs& a, int64_t item, int thread, int group, int64_t kv_dim,
                    float scale) {
  const int t = static_cast<int>(item / a.n_head), h = static_cast<int>(item % a.n_head);
  const int kvh = h / group;
  float* scores = a.scratch + a.scratch_stride * thread;
  const float* q = a.q + t * a.ldq + static_cast<int64_t>(h) * a.head_dim;
  const int32_t* table = a.block_tables + a.block_table_start[a.token_seq[t]];
  const int ctx = a.positions[t] + 1;
  // K is stored transposed within each block ([dim][position]); scores go a block at a time, each
  // position's dot product in dimension order.
  const int bs = a.block_size, hd = a.head_dim;
  for (int blk = 0; blk * bs < ctx; ++blk) {
    const float* kb = a.k_cache + static_cast<int64_t>(table[blk]) * bs * kv_dim + static_cast<int64_t>(kvh) * hd * bs;
    const int n_in = std::min(bs, ctx - blk * bs);
    float* sc = scores + blk * bs;
    int i0 = 0;
#if defined(__AVX2__)
    // 8 positions per vector; the same per-position order as the scalar loop below.
    for (; i0 + 8 <= n_in; i0 += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int d = 0; d < hd; ++d)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(q[d]), _mm256_loadu_ps(kb + static_cast<int64_t>(d) * bs + i0), acc);
      _mm256_storeu_ps(sc + i0, _mm256_mul_ps(acc, _mm256_set1_ps(scale)));
    }
#endif
    for (int i = i0; i < n_in; ++i) {
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot = std::fma(q[d], kb[static_cast<int64_t>(d) * bs + i], dot);
      sc[i] = dot * scale;
    }
  }
  float max_score = -INFINITY;
  for (int j = 0; j < ctx; ++j) max_score = std::fmax(max_score, scores[j]);
  float* out = a.out + t * a.ldo + static_cast<int64_t>(h) * a.head_dim;
  for (int d = 0; d < a.head_dim; ++d) out[d] = 0.0f;
  float sum = 0.0f;
  for (int j = 0; j < ctx; ++j) {
    const float p = std::exp(scores[j] - max_score);
    sum += p;
    const int64_t slot = static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
    axpy(p, a.v_cache + slot * kv_dim + static_cast<int64_t>(kvh) * a.head_dim, out, a.head_dim);
  }
  const float inv = 1.0f / sum;
  for (int d = 0; d < a.head_dim; ++d) out[d] *= inv;
}


#if defined(__AVX512F__)
constexpr int k_max_chunks = 16;  // head_dim <= 256 on this path

// The same contract as attend_generic with 16-lane vectors: scores are computed 16 positions at a
// time from the transposed K blocks (no horizontal sums), exp is vectorised over positions, and the
// output accumulates in registers.
void attend_avx512(const AttentionArgs& a, int64_t item, int thread, int group, int64_t kv_dim,
                   float scale) {
  const int t = static_cast<int>(item / a.n_head), h = static_cast<int>(item % a.n_head);
  const int64_t kv_off = static_cast<int64_t>(h / group) * a.head_dim;
  float* scores = a.scratch + a.scratch_stride * thread;
  const float* q = a.q + t * a.ldq + static_cast<int64_t>(h) * a.head_dim;
  const int32_t* table = a.block_tables + a.block_table_start[a.token_seq[t]];
  const int ctx = a.positions[t] + 1;
  const int hd = a.head_dim, nc = (hd + 15) / 16;
  const __mmask16 tail = static_cast<__mmask16>(hd % 16 == 0 ? 0xFFFF : (1u << (hd % 16)) - 1);
  auto chunk_mask = [&](int c) { return c == nc - 1 ? tail : static_cast<__mmask16>(0xFFFF); };
  auto slot_of = [&](int j) {
    return static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
  };
  // Scores 16 positions at a time from the transposed K block ([dim][position]): q[d] broadcast
  // times a row of positions, in four partial sums over d mod 4, then ((s0 + s1) + (s2 + s3)).
  const int bs = a.block_size;
  __m512 vmax_acc = _mm512_set1_ps(-INFINITY);
  for (int blk = 0; blk * bs < ctx; ++blk) {
    const float* kb = a.k_cache + static_cast<int64_t>(table[blk]) * bs * kv_dim + kv_off * bs;
    const int n_in = std::min(bs, ctx - blk * bs);
    for (int i0 = 0; i0 < n_in; i0 += 16) {
      const __mmask16 m = static_cast<__mmask16>(n_in - i0 >= 16 ? 0xFFFF : (1u << (n_in - i0)) - 1);
      const float* kc = kb + i0;
      __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      int d = 0;
      for (; d + 4 <= hd; d += 4) {
        s0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_maskz_loadu_ps(m, kc + static_cast<int64_t>(d) * bs), s0);
        s1 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 1]), _mm512_maskz_loadu_ps(m, kc + static_cast<int64_t>(d + 1) * bs), s1);
        s2 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 2]), _mm512_maskz_loadu_ps(m, kc + static_cast<int64_t>(d + 2) * bs), s2);
        s3 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 3]), _mm512_maskz_loadu_ps(m, kc + static_cast<int64_t>(d + 3) * bs), s3);
      }
      for (; d < hd; ++d)
        s0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_maskz_loadu_ps(m, kc + static_cast<int64_t>(d) * bs), s0);
      const __m512 sc = _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)), _mm512_set1_ps(scale));
      _mm512_mask_storeu_ps(scores + blk * bs + i0, m, sc);
      vmax_acc = _mm512_mask_max_ps(vmax_acc, m, vmax_acc, sc);
    }
  }
  const float max_score = _mm512_reduce_max_ps(vmax_acc);
  const __m512 vmax = _mm512_set1_ps(max_score);
  __m512 vsum = _mm512_setzero_ps();
  for (int j = 0; j < ctx; j += 16) {
    const __mmask16 m = static_cast<__mmask16>(ctx - j >= 16 ? 0xFFFF : (1u << (ctx - j)) - 1);
    const __m512 p = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + j), vmax));
    _mm512_mask_storeu_ps(scores + j, m, p);
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, p));
  }
  __m512 o[k_max_chunks];
  for (int c = 0; c < nc; ++c) o[c] = _mm512_setzero_ps();
  for (int j = 0; j < ctx; ++j) {
    const float* v = a.v_cache + slot_of(j) * kv_dim + kv_off;
    const __m512 p = _mm512_set1_ps(scores[j]);
    for (int c = 0; c < nc; ++c) o[c] = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(chunk_mask(c), v + 16 * c), o[c]);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  float* out = a.out + t * a.ldo + static_cast<int64_t>(h) * a.head_dim;
  for (int c = 0; c < nc; ++c) _mm512_mask_storeu_ps(out + 16 * c, chunk_mask(c), _mm512_mul_ps(o[c], inv));
}
#endif

void attend(const AttentionArgs& a, int64_t item, int thread, int group, int64_t kv_dim, float scale) {
#if defined(__AVX512F__)
  if (a.head_dim <= 16 * k_max_chunks) return attend_avx512(a, item, thread, group, kv_dim, scale);
#endif
  attend_generic(a, item, thread, group, kv_dim, scale);
}

}  // namespace

void paged_attention(const AttentionArgs& a) {
  const int64_t kv_dim = static_cast<int64_t>(a.n_head_kv) * a.head_dim;
  const int group = a.n_head / a.n_head_kv;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  const int64_t n_items = static_cast<int64_t>(a.n_tokens) * a.n_head;
  // Roughly 2 * ctx * head_dim FMAs an item; small jobs (short decode contexts) stay on one thread.
  int64_t work = 0;
  for (int t = 0; t < a.n_tokens; ++t)
    work += static_cast<int64_t>(a.positions[t] + 1) * a.head_dim * a.n_head;
  const int threads = work < 32768 ? 1 : a.max_threads;
  parallel_for(n_items, 1, threads, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t item = begin; item < end; ++item) attend(a, item, thread, group, kv_dim, scale);
  });
}

}  // namespace ossa
