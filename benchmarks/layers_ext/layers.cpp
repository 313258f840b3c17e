#include "layers.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention.h"
#include "util/error.h"

namespace ossa {

void bench_affine_serial(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 2.0 * x[i] + 1.0;
}

void bench_affine_parallel(const double* x, double* y, int64_t n, int threads) {
  const int t = threads > 0 ? threads : omp_get_num_procs();
#pragma omp parallel for schedule(static) num_threads(t)
  for (int64_t i = 0; i < n; ++i) y[i] = 2.0 * x[i] + 1.0;
}

__attribute__((noinline)) void bench_empty() {
  // An empty asm keeps the compiler from proving the call away at the call site.
  asm volatile("");
}

void bench_naive_attention(const double* q, const double* k, const double* v, int64_t seq,
                           int64_t d, double* out) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> scores(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i) {
    double max_score = -INFINITY;
    for (int64_t j = 0; j < seq; ++j) {
      double s = 0.0;
      for (int64_t c = 0; c < d; ++c) s += q[i * d + c] * k[j * d + c];
      scores[j] = s * scale;
      max_score = std::max(max_score, scores[j]);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < seq; ++j) {
      scores[j] = std::exp(scores[j] - max_score);
      sum += scores[j];
    }
    for (int64_t c = 0; c < d; ++c) {
      double acc = 0.0;
      for (int64_t j = 0; j < seq; ++j) acc += scores[j] * v[j * d + c];
      out[i * d + c] = acc / sum;
    }
  }
}

void bench_paged_attention(const float* q, const float* k, const float* v, int64_t seq, int64_t d,
                           int threads, float* out) {
  if (seq < 1 || d < 1) throw InputError("attention needs seq >= 1 and d >= 1");
  constexpr int block_size = 16;
  const int64_t n_blocks = (seq + block_size - 1) / block_size;
  // One sequence whose blocks are 0..n_blocks-1 in order, so slot j holds position j.
  std::vector<float> k_cache(static_cast<size_t>(n_blocks * block_size * d), 0.0f);
  std::vector<float> v_cache(k_cache.size(), 0.0f);
  for (int64_t j = 0; j < seq; ++j)
    store_k(k_cache.data(), KvType::F32, j, block_size, d, k + j * d);
  std::copy(v, v + seq * d, v_cache.begin());
  std::vector<int32_t> block_tables(static_cast<size_t>(n_blocks));
  for (int64_t b = 0; b < n_blocks; ++b)
    block_tables[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  const int32_t block_table_start[2] = {0, static_cast<int32_t>(n_blocks)};
  // Every query sits at the last position, so each one sees all seq keys: full (non-causal)
  // attention.
  std::vector<int32_t> positions(static_cast<size_t>(seq), static_cast<int32_t>(seq - 1));
  std::vector<int32_t> token_seq(static_cast<size_t>(seq), 0);
  const int t = threads > 0 ? threads : omp_get_num_procs();
  std::vector<float> scratch(static_cast<size_t>(t * k_heads_per_item * seq));

  AttentionArgs a;
  a.q = q;
  a.ldq = d;
  a.k_cache = k_cache.data();
  a.v_cache = v_cache.data();
  a.n_tokens = static_cast<int>(seq);
  a.n_head = 1;
  a.n_head_kv = 1;
  a.head_dim = static_cast<int>(d);
  a.block_size = block_size;
  a.positions = positions.data();
  a.token_seq = token_seq.data();
  a.block_tables = block_tables.data();
  a.block_table_start = block_table_start;
  a.scratch = scratch.data();
  a.scratch_stride = k_heads_per_item * seq;
  a.max_threads = t;
  a.out = out;
  a.ldo = d;
  paged_attention(a);
}

}  // namespace ossa
