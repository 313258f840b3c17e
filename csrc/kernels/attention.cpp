#include "kernels/attention.h"

#include "kernels/parallel.h"

#include <cmath>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace ossa {

float dot_f32(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float tail = 0.0f;
#if defined(__AVX2__)
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  const __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  const float head = _mm_cvtss_f32(s);
#else
  float lanes[8] = {};
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] = std::fma(a[i + l], b[i + l], lanes[l]);
  const float head = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
                     ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
#endif
  for (; i < n; ++i) tail = std::fma(a[i], b[i], tail);
  return head + tail;
}

namespace {

// out[d] = fma(p, v[d], out[d]) over a head.
void axpy(float p, const float* v, float* out, int n) {
  for (int d = 0; d < n; ++d) out[d] = std::fma(p, v[d], out[d]);
}

// One (token, head) pair: scores, softmax, weighted sum of V, all in position order.
void attend(const AttentionArgs& a, int64_t item, int thread, int group, int64_t kv_dim, float scale) {
  const int t = static_cast<int>(item / a.n_head), h = static_cast<int>(item % a.n_head);
  const int kvh = h / group;
  float* scores = a.scratch + a.scratch_stride * thread;
  const float* q = a.q + t * a.ldq + static_cast<int64_t>(h) * a.head_dim;
  const int32_t* table = a.block_tables + a.block_table_start[a.token_seq[t]];
  const int ctx = a.positions[t] + 1;
  float max_score = -INFINITY;
  for (int j = 0; j < ctx; ++j) {
    const int64_t slot = static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
    const float s = dot_f32(q, a.k_cache + slot * kv_dim + static_cast<int64_t>(kvh) * a.head_dim,
                            a.head_dim) * scale;
    scores[j] = s;
    max_score = std::fmax(max_score, s);
  }
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
