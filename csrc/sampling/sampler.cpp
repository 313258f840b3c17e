// Bitwise equality with ossa.reference.sampler needs every float64 operation rounded on its own:
// GCC's default (-ffp-contract=fast) would fuse a * b + c into an FMA, so switch that off for
// this file, before any include, so every function here is compiled alike.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "sampling/sampler.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "util/error.h"
#include "util/philox.h"

namespace ossa {
namespace {

constexpr float k_inf = std::numeric_limits<float>::infinity();
constexpr int k_chunk = 1024;  // ids per chunk of a vocabulary-wide sum
constexpr int k_lanes = 8;     // lanes per chunk: lane = id % 8
constexpr double k_greedy_temperature = 1e-5;
constexpr int k_buffer_select_max = 256;  // above this, selection uses nth_element

// exp(z) for z <= 0: z = k ln2 + r (Cody-Waite), Taylor polynomial of degree 8 on
// |r| <= ln2 / 2 (relative error < 3e-10, far below the float32 results), times 2^k built from its bits. Plain IEEE
// float64 operations only, in this order, so NumPy reproduces it exactly.
inline double exp_one(double z) {
  constexpr double k_log2e = 1.4426950408889634;
  constexpr double k_shifter = 6755399441055744.0;  // 1.5 * 2^52: rounds to an integer
  constexpr double k_ln2_hi = 6.93147180369123816490e-01;  // 32 bits: k * hi is exact
  constexpr double k_ln2_lo = 1.90821492927058770002e-10;
  constexpr double c[9] = {1.0,
                            1.0,
                            1.0 / 2.0,
                            1.0 / 6.0,
                            1.0 / 24.0,
                            1.0 / 120.0,
                            1.0 / 720.0,
                            1.0 / 5040.0,
                            1.0 / 40320.0};
  const double zc = z < -708.0 ? -708.0 : z;
  const double t = zc * k_log2e;
  const double k = (t + k_shifter) - k_shifter;
  const double r = (zc - k * k_ln2_hi) - k * k_ln2_lo;
  double p = c[8];
  for (int j = 7; j >= 0; --j) p = p * r + c[j];
  const double scale = std::bit_cast<double>(uint64_t(int64_t(k) + 1023) << 52);
  return z < -708.0 ? 0.0 : p * scale;
}

// Sum in the documented chunk/lane order; chunk_sums[c] receives each chunk's sum.
double chunked_sum(const double* w, int n, double* chunk_sums) {
  double total = 0.0;
  const int n_chunks = (n + k_chunk - 1) / k_chunk;
  for (int c = 0; c < n_chunks; ++c) {
    const int begin = c * k_chunk, end = std::min(begin + k_chunk, n);
    double lanes[k_lanes] = {};
    int i = begin;
    for (; i + k_lanes <= end; i += k_lanes)
      for (int j = 0; j < k_lanes; ++j) lanes[j] += w[i + j];
    for (int j = 0; i + j < end; ++j) lanes[j] += w[i + j];
    double s = lanes[0];
    for (int j = 1; j < k_lanes; ++j) s += lanes[j];
    chunk_sums[c] = s;
    total += s;
  }
  return total;
}

// Inverse CDF over the whole vocabulary, in the order chunked_sum used.
int32_t draw_chunked(const double* w, int n, const double* chunk_sums, double total, double u) {
  const double target = u * total;
  const int n_chunks = (n + k_chunk - 1) / k_chunk;
  double before = 0.0;
  int pick = -1;
  for (int c = 0; c < n_chunks; ++c) {
    const double next = before + chunk_sums[c];
    if (next > target) {
      pick = c;
      break;
    }
    before = next;
  }
  if (pick < 0) {  // u * total rounded up to total: the last chunk with mass
    for (int c = n_chunks - 1; c >= 0 && pick < 0; --c)
      if (chunk_sums[c] > 0.0) pick = c;
    before = 0.0;
    for (int c = 0; c < pick; ++c) before += chunk_sums[c];
  }
  const int begin = pick * k_chunk, end = std::min(begin + k_chunk, n);
  double acc = before;
  for (int i = begin; i < end; ++i) {
    acc += w[i];
    if (acc > target) return i;
  }
  for (int i = end - 1; i >= begin; --i)
    if (w[i] > 0.0) return i;
  OSSA_ASSERT(false);
  return -1;
}

// Sequential inverse CDF over a candidate list.
int32_t draw_list(const int32_t* ids, const double* w, int n, double u) {
  double total = 0.0;
  for (int j = 0; j < n; ++j) total += w[j];
  const double target = u * total;
  double acc = 0.0;
  for (int j = 0; j < n; ++j) {
    acc += w[j];
    if (acc > target) return ids[j];
  }
  for (int j = n - 1; j >= 0; --j)
    if (w[j] > 0.0) return ids[j];
  OSSA_ASSERT(false);
  return -1;
}

// ids[0..k) = the k largest values by (value desc, id asc), in that order. 1 <= k <= n.
void select_top(const float* v, int n, int k, int32_t* ids, std::vector<std::pair<float, int32_t>>& pairs) {
  if (k <= k_buffer_select_max) {
    // Ids arrive ascending, so a newcomer ranks below any equal value already kept.
    int size = 0;
    float threshold = -k_inf;
    for (int i = 0; i < n; ++i) {
      const float x = v[i];
      if (size == k && !(x > threshold)) continue;
      int j = size < k ? size : k - 1;
      while (j > 0 && v[ids[j - 1]] < x) {
        ids[j] = ids[j - 1];
        --j;
      }
      ids[j] = i;
      if (size < k) ++size;
      if (size == k) threshold = v[ids[k - 1]];
    }
    return;
  }
  pairs.resize(n);
  for (int i = 0; i < n; ++i) pairs[i] = {v[i], i};
  auto before = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (k < n) std::nth_element(pairs.begin(), pairs.begin() + k, pairs.end(), before);
  std::sort(pairs.begin(), pairs.begin() + k, before);
  for (int j = 0; j < k; ++j) ids[j] = pairs[j].second;
}

// Max over 16 lanes with GCC/Clang vector types: a running scalar max is a serial chain the
// compiler may not reorder (no -ffast-math), so it would not vectorise. `bad` collects lanes that
// saw NaN or +inf (!(v < inf)). Max is exact, so the lane split cannot change the result.
using F32x16 = float __attribute__((vector_size(64)));
using I32x16 = int32_t __attribute__((vector_size(64)));

float lane_max(const float* x, int n, bool* bad = nullptr) {
  const F32x16 inf = F32x16{} + k_inf;
  F32x16 acc = -inf;
  I32x16 flags = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    F32x16 v;
    std::memcpy(&v, x + i, sizeof(v));
    acc = v > acc ? v : acc;
    flags |= ~(v < inf);
  }
  float m = -k_inf;
  int tail_bad = 0;
  for (; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    tail_bad |= !(x[i] < k_inf);
  }
  for (int j = 0; j < 16; ++j) {
    m = acc[j] > m ? acc[j] : m;
    tail_bad |= flags[j];
  }
  if (bad != nullptr) *bad = tail_bad != 0;
  return m;
}

[[noreturn]] void row_error(int row, const std::string& what) {
  throw InputError("sampler: row " + std::to_string(row) + ": " + what);
}

void check_id(int row, const char* field, int32_t id, int vocab) {
  if (id < 0 || id >= vocab)
    row_error(row, std::string(field) + " holds token id " + std::to_string(id) + ", outside [0, " +
                       std::to_string(vocab) + ")");
}

// Max of a raw row; NaN or +inf is an input error.
float checked_max(int row, const float* x, int n) {
  bool bad = false;
  const float m = lane_max(x, n, &bad);
  if (bad) {
    for (int b = 0; b < n; ++b)
      if (std::isnan(x[b]) || x[b] == k_inf)
        row_error(row, std::string("logit of token ") + std::to_string(b) + " is " +
                           (std::isnan(x[b]) ? "NaN" : "+inf") + "; logits must be finite or -inf");
  }
  if (m == -k_inf) row_error(row, "every logit is -inf");
  return m;
}

float raw_logprob(float x, double max, double log_z) { return float((double(x) - max) - log_z); }

// Raw logprob of `token` and the top_n alternatives, into out.
void fill_logprobs(int row, const float* raw, int vocab, float raw_max, int32_t token, int top_n,
                   SamplerScratch& s, SampleResult& out) {
  double* w = s.weights.data();
  const double m = raw_max;
  for (int i = 0; i < vocab; ++i) w[i] = exp_one(double(raw[i]) - m);
  const double log_z = std::log(chunked_sum(w, vocab, s.chunk_sums.data()));
  out.logprob = raw_logprob(raw[token], m, log_z);
  const int n = std::min(top_n, vocab);
  out.n_top = n;
  if (n > 0) {
    select_top(raw, vocab, n, out.top_ids.data(), s.pairs);
    for (int j = 0; j < n; ++j) out.top_logprobs[j] = raw_logprob(raw[out.top_ids[j]], m, log_z);
  }
}

// Top-p over the whole vocabulary without sorting it: a histogram of (max - x) / temperature in
// 1/8-nat buckets finds a value bound above which the mass passes the threshold; only the tokens
// above it (a prefix of the (x desc, id asc) order, ties included) are sorted and walked. The walk
// is the same as over the fully sorted vocabulary; -1 if it ran off the end of the prefix.
int top_p_prefix(const float* x, const double* w, int vocab, double m, double temperature, double threshold,
                 int32_t* ids, SamplerScratch& s) {
  constexpr int k_buckets = 512;
  double hist[k_buckets] = {};
  auto bucket = [&](float v) {
    const double b = (m - double(v)) / temperature * 8.0;
    return b < double(k_buckets - 1) ? int(b) : k_buckets - 1;
  };
  for (int i = 0; i < vocab; ++i) hist[bucket(x[i])] += w[i];
  double mass = 0.0;
  int cut = k_buckets - 1;
  for (int b = 0; b < k_buckets; ++b) {
    mass += hist[b];
    if (mass >= threshold * (1.0 + 1e-9)) {
      cut = b;
      break;
    }
  }
  s.pairs.clear();
  for (int i = 0; i < vocab; ++i)
    if (bucket(x[i]) <= cut) s.pairs.push_back({x[i], i});
  std::sort(s.pairs.begin(), s.pairs.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  const int size = int(s.pairs.size());
  double before = 0.0;
  int kept = 0;
  while (kept < size && before < threshold) {
    ids[kept] = s.pairs[kept].second;
    before += w[ids[kept++]];
  }
  return kept < size || size == vocab ? kept : -1;
}

void ensure_scratch(std::vector<SamplerScratch>& all, int vocab) {
  const int threads = std::max(1, omp_get_max_threads());
  if (int(all.size()) < threads) all.resize(threads);
  for (auto& s : all) {
    if (int(s.work.size()) >= vocab) continue;
    s.work.resize(vocab);
    s.weights.resize(vocab);
    s.chunk_sums.resize(vocab / k_chunk + 1);
    s.candidates.resize(vocab);
    s.candidate_weights.resize(vocab);
    s.pairs.reserve(vocab);
    s.counts.assign(vocab, 0);
    s.seen.assign(vocab, 0);
    s.stamp = 0;
  }
}

void sample_row(int row, const float* raw, int vocab, const RowInput& in, SamplerScratch& s,
                SampleResult& out) {
  if (in.params == nullptr) row_error(row, "no sampling parameters");
  const SamplingParams& p = *in.params;
  validate_sampling_params(p, vocab);
  const float raw_max = checked_max(row, raw, vocab);
  float* x = s.work.data();

  // 1. allowed ids, logit bias
  if (!p.allowed_token_ids.empty()) {
    std::fill(x, x + vocab, -k_inf);
    for (int32_t id : p.allowed_token_ids) x[id] = raw[id];
  } else {
    std::copy(raw, raw + vocab, x);
  }
  for (const auto& [id, bias] : p.logit_bias) x[id] = x[id] + bias;
  // 2. min_tokens
  if (int64_t(in.output_token_ids.size()) < p.min_tokens) {
    for (int32_t id : p.stop_token_ids) x[id] = -k_inf;
    if (!p.ignore_eos)
      for (int32_t id : p.eos_token_ids) x[id] = -k_inf;
  }
  // 3. penalties
  if (p.repetition_penalty != 1.0) {
    const float penalty = float(p.repetition_penalty);
    if (++s.stamp == 0) {  // wrapped: forget every old stamp
      std::fill(s.seen.begin(), s.seen.end(), 0u);
      s.stamp = 1;
    }
    for (auto ids : {in.prompt_token_ids, in.output_token_ids})
      for (int32_t id : ids) {
        check_id(row, "the token history", id, vocab);
        if (s.seen[id] == s.stamp) continue;
        s.seen[id] = s.stamp;
        x[id] = x[id] > 0.0f ? x[id] / penalty : x[id] * penalty;
      }
  }
  if (p.frequency_penalty != 0.0 || p.presence_penalty != 0.0) {
    const float frequency = float(p.frequency_penalty), presence = float(p.presence_penalty);
    s.touched.clear();
    for (int32_t id : in.output_token_ids) {
      check_id(row, "output_token_ids", id, vocab);
      if (s.counts[id]++ == 0) s.touched.push_back(id);
    }
    for (int32_t id : s.touched) {
      x[id] = x[id] - frequency * float(s.counts[id]);
      x[id] = x[id] - presence;
      s.counts[id] = 0;
    }
  }

  // 4. greedy
  const float x_max = lane_max(x, vocab);
  if (x_max == -k_inf) row_error(row, "every token is masked (allowed_token_ids, logit_bias, min_tokens)");
  int32_t token = -1;
  if (p.temperature < k_greedy_temperature) {
    for (int i = 0; i < vocab && token < 0; ++i)
      if (x[i] == x_max) token = i;
  } else {
    // 5. weights and truncation
    const double m = x_max, temperature = p.temperature;
    const double u = philox_uniform(in.seed, in.stream, in.step);
    int32_t* ids = s.candidates.data();
    double* cw = s.candidate_weights.data();
    double* w = s.weights.data();
    int n_list = -1;  // -1: the whole vocabulary is the candidate set
    if (p.top_k > 0 && p.top_k < vocab) {
      n_list = p.top_k;
      select_top(x, vocab, n_list, ids, s.pairs);
      for (int j = 0; j < n_list; ++j) cw[j] = exp_one((double(x[ids[j]]) - m) / temperature);
    } else {
      for (int i = 0; i < vocab; ++i) w[i] = exp_one((double(x[i]) - m) / temperature);
    }
    if (p.top_p < 1.0) {
      if (n_list >= 0) {
        double total = 0.0;
        for (int j = 0; j < n_list; ++j) total += cw[j];
        const double threshold = p.top_p * total;
        double before = 0.0;
        int kept = 0;
        while (kept < n_list && before < threshold) before += cw[kept++];
        n_list = kept;
      } else {
        const double threshold = p.top_p * chunked_sum(w, vocab, s.chunk_sums.data());
        n_list = top_p_prefix(x, w, vocab, m, temperature, threshold, ids, s);
        if (n_list < 0) {  // the cut was too tight (rounding): select progressively
          for (int size = 64;; size = std::min(vocab, size * 4)) {
            size = std::min(size, vocab);
            select_top(x, vocab, size, ids, s.pairs);
            double before = 0.0;
            int kept = 0;
            while (kept < size && before < threshold) before += w[ids[kept++]];
            if (kept < size || size == vocab) {
              n_list = kept;
              break;
            }
          }
        }
        for (int j = 0; j < n_list; ++j) cw[j] = w[ids[j]];
      }
    }
    if (p.min_p > 0.0) {
      const double min_p = p.min_p;
      if (n_list >= 0) {
        int kept = 0;
        for (int j = 0; j < n_list; ++j)
          if (cw[j] >= min_p) {
            ids[kept] = ids[j];
            cw[kept++] = cw[j];
          }
        n_list = kept;
      } else {
        for (int i = 0; i < vocab; ++i) w[i] = w[i] >= min_p ? w[i] : 0.0;
      }
    }
    // 6. draw
    if (n_list >= 0) {
      token = draw_list(ids, cw, n_list, u);
    } else {
      const double total = chunked_sum(w, vocab, s.chunk_sums.data());
      token = draw_chunked(w, vocab, s.chunk_sums.data(), total, u);
    }
  }
  out.token = token;
  out.n_top = 0;
  out.logprob = std::numeric_limits<float>::quiet_NaN();
  if (p.logprobs >= 0) fill_logprobs(row, raw, vocab, raw_max, token, p.logprobs, s, out);
}

template <typename RowFn>
void for_each_row(std::vector<SamplerScratch>& scratch, int n_rows, RowFn&& fn) {
  for (auto& s : scratch) {
    s.error = nullptr;
    s.error_row = -1;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int r = 0; r < n_rows; ++r) {
    SamplerScratch& s = scratch[omp_get_thread_num()];
    try {
      fn(r, s);
    } catch (...) {
      if (s.error_row < 0 || r < s.error_row) {
        s.error = std::current_exception();
        s.error_row = r;
      }
    }
  }
  // Report the first failing row, whichever thread met it.
  const SamplerScratch* first = nullptr;
  for (const auto& s : scratch)
    if (s.error_row >= 0 && (first == nullptr || s.error_row < first->error_row)) first = &s;
  if (first != nullptr) std::rethrow_exception(first->error);
}

void check_shape(int n_rows, int vocab, size_t n_in, size_t n_out) {
  if (n_rows < 0 || vocab < 1)
    throw InputError("sampler: logits must be [n_rows, vocab] with vocab >= 1");
  if (n_in != size_t(n_rows) || n_out != size_t(n_rows))
    throw InputError("sampler: " + std::to_string(n_rows) + " logits rows but " + std::to_string(n_in) +
                     " inputs and " + std::to_string(n_out) + " outputs");
}

}  // namespace

void exp_ref(const double* z, double* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = exp_one(z[i]);
}

void validate_sampling_params(const SamplingParams& p, int vocab) {
  auto fail = [](const std::string& field, const std::string& range, double value) {
    throw InputError("SamplingParams." + field + " must be " + range + ", got " + std::to_string(value));
  };
  if (!(p.temperature >= 0.0) || std::isinf(p.temperature)) fail("temperature", "finite and >= 0", p.temperature);
  if (p.top_k < -1 || p.top_k == 0) fail("top_k", "-1 (off) or >= 1", p.top_k);
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) fail("top_p", "in (0, 1]", p.top_p);
  if (!(p.min_p >= 0.0 && p.min_p <= 1.0)) fail("min_p", "in [0, 1]", p.min_p);
  if (!(p.repetition_penalty > 0.0) || std::isinf(p.repetition_penalty))
    fail("repetition_penalty", "finite and > 0", p.repetition_penalty);
  if (!(p.frequency_penalty >= -2.0 && p.frequency_penalty <= 2.0))
    fail("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  if (!(p.presence_penalty >= -2.0 && p.presence_penalty <= 2.0))
    fail("presence_penalty", "in [-2, 2]", p.presence_penalty);
  if (p.min_tokens < 0) fail("min_tokens", ">= 0", p.min_tokens);
  if (p.logprobs < -1 || p.logprobs > k_max_logprobs)
    fail("logprobs", "None or in [0, " + std::to_string(k_max_logprobs) + "]", p.logprobs);
  auto ids_in_range = [vocab](const char* field, int32_t id) {
    if (id < 0 || id >= vocab)
      throw InputError(std::string("SamplingParams.") + field + " holds token id " + std::to_string(id) +
                       ", outside [0, " + std::to_string(vocab) + ")");
  };
  for (const auto& [id, bias] : p.logit_bias) {
    ids_in_range("logit_bias", id);
    if (!std::isfinite(bias)) fail("logit_bias values", "finite", bias);
  }
  for (int32_t id : p.allowed_token_ids) ids_in_range("allowed_token_ids", id);
  for (int32_t id : p.stop_token_ids) ids_in_range("stop_token_ids", id);
  for (int32_t id : p.eos_token_ids) ids_in_range("eos_token_ids", id);
}

void Sampler::sample(const float* logits, int n_rows, int vocab, std::span<const RowInput> rows,
                     std::span<SampleResult> out) {
  check_shape(n_rows, vocab, rows.size(), out.size());
  ensure_scratch(scratch, vocab);
  for_each_row(scratch, n_rows, [&](int r, SamplerScratch& s) {
    sample_row(r, logits + size_t(r) * vocab, vocab, rows[r], s, out[r]);
  });
}

void Sampler::logprobs(const float* logits, int n_rows, int vocab, std::span<const int32_t> token_ids,
                       int top_n, std::span<SampleResult> out) {
  check_shape(n_rows, vocab, token_ids.size(), out.size());
  if (top_n < 0 || top_n > k_max_logprobs)
    throw InputError("prompt_logprobs must be in [0, " + std::to_string(k_max_logprobs) + "], got " +
                     std::to_string(top_n));
  ensure_scratch(scratch, vocab);
  for_each_row(scratch, n_rows, [&](int r, SamplerScratch& s) {
    const float* raw = logits + size_t(r) * vocab;
    check_id(r, "token_ids", token_ids[r], vocab);
    const float raw_max = checked_max(r, raw, vocab);
    out[r].token = token_ids[r];
    fill_logprobs(r, raw, vocab, raw_max, token_ids[r], top_n, s, out[r]);
  });
}

}  // namespace ossa
