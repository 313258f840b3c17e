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

#include "sampling/sampler_kernels.h"
#include "util/error.h"
#include "util/philox.h"

namespace ossa {
namespace {

using namespace sampler_kernels;

constexpr double k_greedy_temperature = 1e-5;
constexpr int k_buffer_select_max = 256;  // above this, selection uses nth_element

// Inverse CDF over the whole vocabulary, in the order weights_and_sum used.
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

// ids[0..k) = the k largest values by (value desc, id asc), in that order. 1 <= k <= n. v has no
// NaN.
void select_top(const float* v, int n, int k, int32_t* ids,
                std::vector<std::pair<float, int32_t>>& pairs) {
  if (k <= k_buffer_select_max) {
    // Ids arrive ascending, so a newcomer ranks below any equal value already kept. Once the
    // buffer is full, a block of 64 whose max does not beat the smallest kept value is skipped.
    constexpr int k_block = 64;
    int size = 0;
    float threshold = -k_inf;
    auto offer = [&](int i) {
      const float x = v[i];
      if (size == k && !(x > threshold)) return;
      int j = size < k ? size : k - 1;
      while (j > 0 && v[ids[j - 1]] < x) {
        ids[j] = ids[j - 1];
        --j;
      }
      ids[j] = i;
      if (size < k) ++size;
      if (size == k) threshold = v[ids[k - 1]];
    };
    int i = 0;
    for (; i + k_block <= n; i += k_block) {
      if (size == k) {
        F32v a, b;
        std::memcpy(&a, v + i, sizeof(a));
        for (int q = k_f32_width; q < k_block; q += k_f32_width) {
          std::memcpy(&b, v + i + q, sizeof(b));
          a = b > a ? b : a;
        }
        if (!(horizontal_max(a) > threshold)) continue;
      }
      for (int j = i; j < i + k_block; ++j) offer(j);
    }
    for (; i < n; ++i) offer(i);
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

[[noreturn]] void row_error(int row, const std::string& what) {
  throw InputError("sampler: row " + std::to_string(row) + ": " + what);
}

void check_id(int row, const char* field, int32_t id, int vocab) {
  if (id < 0 || id >= vocab)
    row_error(row, std::string(field) + " holds token id " + std::to_string(id) + ", outside [0, " +
                       std::to_string(vocab) + ")");
}

// Max of a raw row and its lowest id; NaN or +inf is an input error.
ArgMax checked_argmax(int row, const float* x, int n) {
  const ArgMax best = lane_argmax(x, n);
  if (best.bad) {
    for (int b = 0; b < n; ++b)
      if (std::isnan(x[b]) || x[b] == k_inf)
        row_error(row, std::string("logit of token ") + std::to_string(b) + " is " +
                           (std::isnan(x[b]) ? "NaN" : "+inf") + "; logits must be finite or -inf");
  }
  if (best.value == -k_inf) row_error(row, "every logit is -inf");
  return best;
}

float raw_logprob(float x, double max, double log_z) { return float((double(x) - max) - log_z); }

// Raw logprob of `token` and the top_n alternatives, into out.
void fill_logprobs(const float* raw, int vocab, float raw_max, int32_t token, int top_n,
                   SamplerScratch& s, SampleResult& out) {
  const double m = raw_max;
  const double log_z =
      std::log(weights_and_sum(raw, vocab, m, 1.0, 0.0, nullptr, s.chunk_sums.data()));
  out.logprob = raw_logprob(raw[token], m, log_z);
  const int n = std::min(top_n, vocab);
  out.n_top = n;
  if (n > 0) {
    select_top(raw, vocab, n, out.top_ids.data(), s.pairs);
    for (int j = 0; j < n; ++j) out.top_logprobs[j] = raw_logprob(raw[out.top_ids[j]], m, log_z);
  }
}

// A sort key for (x desc, id asc) as one ascending integer: the float's bits made monotone and
// inverted, then the id. -0.0 is folded into +0.0 first, since the two compare equal.
inline uint64_t order_key(float x, int32_t id) {
  const uint32_t bits = std::bit_cast<uint32_t>(x + 0.0f);
  const uint32_t ascending = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
  return (uint64_t(~ascending) << 32) | uint32_t(id);
}

// Sorts keys (order_key) ascending. They arrive in ascending id order, so a stable radix sort on
// the value half (4 passes of 8 bits; a pass whose digit is the same everywhere is skipped) gives
// the full order. tmp holds n keys.
void sort_keys(uint64_t* keys, uint64_t* tmp, int n) {
  if (n <= 64) {
    std::sort(keys, keys + n);
    return;
  }
  uint64_t *src = keys, *dst = tmp;
  for (int shift = 32; shift < 64; shift += 8) {
    int start[257] = {};
    for (int i = 0; i < n; ++i) ++start[((src[i] >> shift) & 255) + 1];
    if (start[((src[0] >> shift) & 255) + 1] == n) continue;
    for (int d = 0; d < 256; ++d) start[d + 1] += start[d];
    for (int i = 0; i < n; ++i) dst[start[(src[i] >> shift) & 255]++] = src[i];
    std::swap(src, dst);
  }
  if (src != keys) std::copy(src, src + n, keys);
}

// Top-p's fine search: a histogram of the candidates' weights by their float64 bits. The bits of
// positive doubles grow with the value, so (bits(1.0) - bits(w)) >> 50 is a quarter-octave bucket
// that falls as w grows.
constexpr int k_buckets = 512;
constexpr int64_t k_one_bits = 0x3FF0000000000000;  // bits of 1.0, the largest weight
constexpr int k_bucket_shift = 50;

inline int bucket_of(double w) {
  const int64_t b = (k_one_bits - std::bit_cast<int64_t>(w)) >> k_bucket_shift;
  return b < 0 ? 0 : (b > k_buckets - 1 ? k_buckets - 1 : int(b));
}

// Top-p over the whole vocabulary without sorting it. Weights grow with x, so every set
// {w >= bound} is a prefix of the (x desc, id asc) order, ties included. The coarse masses from
// weights_and_sum give a bound whose set holds the threshold's mass; its ids are collected (a
// vectorised test skips blocks of 16 below it), a histogram of just those finds a tighter cut, and
// only the tokens above the cut are sorted and walked. The walk is the same as over the fully
// sorted vocabulary; -1 if it ran off the end of the prefix (the estimates are rounded
// differently from the walk, hence the small margin).
int top_p_prefix(const float* x, const double* w, const double* mass_above, int vocab,
                 double threshold, int32_t* ids, SamplerScratch& s) {
  const double target = threshold * (1.0 + 1e-9);
  double lower = 0.0;  // 0: every id
  for (int b = 0; b < k_n_bounds; ++b)
    if (mass_above[b] >= target) {
      lower = k_bounds[b];
      break;
    }
  int32_t* found = s.found.data();
  int n_found = 0;
  if (lower == 0.0) {
    for (int i = 0; i < vocab; ++i) found[i] = i;
    n_found = vocab;
  } else {
    constexpr int k_block = 16;
    int i = 0;
    for (; i + k_block <= vocab; i += k_block) {
      F64v a, b;
      std::memcpy(&a, w + i, sizeof(a));
      for (int q = k_width; q < k_block; q += k_width) {
        std::memcpy(&b, w + i + q, sizeof(b));
        a = b > a ? b : a;
      }
      if (!any_at_least(a, lower)) continue;
      for (int j = i; j < i + k_block; ++j) {
        found[n_found] = j;
        n_found += w[j] >= lower;
      }
    }
    for (; i < vocab; ++i) {
      found[n_found] = i;
      n_found += w[i] >= lower;
    }
  }
  double hist[k_buckets] = {};
  for (int j = 0; j < n_found; ++j) hist[bucket_of(w[found[j]])] += w[found[j]];
  double mass = 0.0;
  int cut = k_buckets - 1;
  for (int b = 0; b < k_buckets; ++b) {
    mass += hist[b];
    if (mass >= target) {
      cut = b;
      break;
    }
  }
  uint64_t* keys = s.keys.data();
  int size = 0;
  for (int j = 0; j < n_found; ++j) {
    const int32_t id = found[j];
    keys[size] = order_key(x[id], id);
    size += bucket_of(w[id]) <= cut;
  }
  sort_keys(keys, keys + vocab, size);
  double before = 0.0;
  int kept = 0;
  while (kept < size && before < threshold) {
    ids[kept] = int32_t(uint32_t(keys[kept]));
    before += w[ids[kept++]];
  }
  return before >= threshold || size == vocab ? kept : -1;
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
    s.keys.resize(2 * size_t(vocab));  // the keys and the radix sort's buffer
    s.found.resize(vocab + 1);  // + 1: the branch-free compaction writes one past the last hit
    s.pairs.reserve(vocab);
    s.counts.assign(vocab, 0);
    s.seen.assign(vocab, 0);
    s.stamp = 0;
  }
}

// Tokens whose bit is clear -> -inf. Words are all-set or all-clear for most of a vocabulary.
void apply_token_mask(const uint32_t* mask, int vocab, float* work) {
  for (int w = 0; w * 32 < vocab; ++w) {
    const uint32_t bits = mask[w];
    if (bits == ~0u) continue;
    const int begin = w * 32, end = std::min(begin + 32, vocab);
    if (bits == 0u) {
      std::fill(work + begin, work + end, -k_inf);
      continue;
    }
    for (int t = begin; t < end; ++t)
      if (((bits >> (t - begin)) & 1u) == 0u) work[t] = -k_inf;
  }
}

void sample_row(int row, const float* raw, int vocab, const RowInput& in, SamplerScratch& s,
                SampleResult& out) {
  if (in.params == nullptr) row_error(row, "no sampling parameters");
  const SamplingParams& p = *in.params;
  validate_sampling_params(p, vocab);
  const ArgMax raw_best = checked_argmax(row, raw, vocab);

  // 1-3 write a processed copy only when some stage applies; otherwise x is the raw row.
  const bool min_tokens_mask = int64_t(in.output_token_ids.size()) < p.min_tokens;
  const bool penalise = p.frequency_penalty != 0.0 || p.presence_penalty != 0.0;
  const bool modified = in.token_mask != nullptr || !p.allowed_token_ids.empty() ||
                        !p.logit_bias.empty() || !p.bad_words.empty() || min_tokens_mask ||
                        p.repetition_penalty != 1.0 || penalise;
  const float* x = raw;
  ArgMax best = raw_best;
  if (modified) {
    float* work = s.work.data();
    // 1. allowed ids, logit bias
    if (!p.allowed_token_ids.empty()) {
      std::fill(work, work + vocab, -k_inf);
      for (int32_t id : p.allowed_token_ids) work[id] = raw[id];
    } else {
      std::copy(raw, raw + vocab, work);
    }
    // 0. the structured-output mask (applied after the copy: -inf stays -inf through every stage)
    if (in.token_mask != nullptr) apply_token_mask(in.token_mask, vocab, work);
    for (const auto& [id, bias] : p.logit_bias) work[id] = work[id] + bias;
    // bad words: a word's last token where the output ends with the tokens before it
    const auto out_ids = in.output_token_ids;
    for (const auto& word : p.bad_words) {
      const size_t before = word.size() - 1;
      if (before <= out_ids.size() &&
          std::equal(word.begin(), word.end() - 1, out_ids.end() - std::ptrdiff_t(before)))
        work[word.back()] = -k_inf;
    }
    // 2. min_tokens
    if (min_tokens_mask) {
      for (int32_t id : p.stop_token_ids) work[id] = -k_inf;
      if (!p.ignore_eos)
        for (int32_t id : p.eos_token_ids) work[id] = -k_inf;
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
          // Clamped to the finite range: a small penalty must not turn a logit into inf (whose
          // weights would be NaN); -inf (masked) stays -inf.
          const float v = work[id];
          work[id] = v > 0.0f ? std::min(v / penalty, k_max_logit)
                              : (v == -k_inf ? v : std::max(v * penalty, -k_max_logit));
        }
    }
    if (penalise) {
      const float frequency = float(p.frequency_penalty), presence = float(p.presence_penalty);
      s.touched.clear();
      for (int32_t id : in.output_token_ids) {
        check_id(row, "output_token_ids", id, vocab);
        if (s.counts[id]++ == 0) s.touched.push_back(id);
      }
      for (int32_t id : s.touched) {
        work[id] = work[id] - frequency * float(s.counts[id]);
        work[id] = work[id] - presence;
        s.counts[id] = 0;
      }
    }
    x = work;
    best = lane_argmax(x, vocab);
  }
  if (best.value == -k_inf)
    row_error(row,
              in.token_mask != nullptr
                  ? "every token is masked: the structured-output grammar allows only tokens that "
                    "allowed_token_ids, logit_bias or min_tokens (end of sequence) forbid"
                  : "every token is masked (allowed_token_ids, logit_bias, min_tokens)");

  int32_t token = -1;
  if (p.temperature < k_greedy_temperature) {
    token = best.index;  // 4. greedy: the largest logit, lowest id
  } else {
    // 5. weights and truncation
    const double m = best.value, inv_t = 1.0 / p.temperature;
    const double u = philox_uniform(in.seed, in.stream, in.step);
    int32_t* ids = s.candidates.data();
    double* cw = s.candidate_weights.data();
    double* w = s.weights.data();
    int n_list = -1;  // -1: the whole vocabulary is the candidate set
    if (p.top_k > 0 && p.top_k < vocab) {
      n_list = p.top_k;
      select_top(x, vocab, n_list, ids, s.pairs);
      for (int j = 0; j < n_list; ++j) cw[j] = exp_one((double(x[ids[j]]) - m) * inv_t);
      if (p.top_p < 1.0) {
        double total = 0.0;
        for (int j = 0; j < n_list; ++j) total += cw[j];
        const double threshold = p.top_p * total;
        double before = 0.0;
        int kept = 0;
        while (kept < n_list && before < threshold) before += cw[kept++];
        n_list = kept;
      }
    } else if (p.top_p < 1.0) {
      double mass_above[k_n_bounds];
      const double threshold = p.top_p * weights_and_sum<true>(x, vocab, m, inv_t, 0.0, w,
                                                               s.chunk_sums.data(), mass_above);
      n_list = top_p_prefix(x, w, mass_above, vocab, threshold, ids, s);
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
    // min-p, then 6. draw
    if (n_list >= 0) {
      if (p.min_p > 0.0) {
        int kept = 0;
        for (int j = 0; j < n_list; ++j)
          if (cw[j] >= p.min_p) {
            ids[kept] = ids[j];
            cw[kept++] = cw[j];
          }
        n_list = kept;
      }
      token = draw_list(ids, cw, n_list, u);
    } else {
      const double total = weights_and_sum(x, vocab, m, inv_t, p.min_p, w, s.chunk_sums.data());
      token = draw_chunked(w, vocab, s.chunk_sums.data(), total, u);
    }
  }
  out.token = token;
  out.n_top = 0;
  out.logprob = std::numeric_limits<float>::quiet_NaN();
  if (p.logprobs >= 0) fill_logprobs(raw, vocab, raw_best.value, token, p.logprobs, s, out);
}

template <typename RowFn>
void for_each_row(std::vector<SamplerScratch>& scratch, int n_rows, RowFn&& fn) {
  for (auto& s : scratch) {
    s.error = nullptr;
    s.error_row = -1;
  }
#pragma omp parallel for schedule(dynamic, 1) if (n_rows > 1)
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
    throw InputError("sampler: " + std::to_string(n_rows) + " logits rows but " +
                     std::to_string(n_in) + " inputs and " + std::to_string(n_out) + " outputs");
}

}  // namespace

void exp_ref(const double* z, double* out, int n) {
  int i = 0;
  for (; i + k_width <= n; i += k_width) {
    F64v v;
    std::memcpy(&v, z + i, sizeof(v));
    v = exp_v(v);
    std::memcpy(out + i, &v, sizeof(v));
  }
  for (; i < n; ++i) out[i] = exp_one(z[i]);
}

void validate_sampling_params(const SamplingParams& p, int vocab) {
  auto fail = [](const std::string& field, const std::string& range, double value) {
    throw InputError("SamplingParams." + field + " must be " + range + ", got " +
                     std::to_string(value));
  };
  if (!(p.temperature >= 0.0) || std::isinf(p.temperature))
    fail("temperature", "finite and >= 0", p.temperature);
  if (p.top_k < -1 || p.top_k == 0) fail("top_k", "-1 (off) or >= 1", p.top_k);
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) fail("top_p", "in (0, 1]", p.top_p);
  if (!(p.min_p >= 0.0 && p.min_p <= 1.0)) fail("min_p", "in [0, 1]", p.min_p);
  // Applied in float32: the value must be a normal float32 (a smaller one rounds to 0 or loses
  // precision, a larger one to inf).
  if (!(p.repetition_penalty >= double(std::numeric_limits<float>::min()) &&
        p.repetition_penalty <= double(k_max_logit)))
    fail("repetition_penalty", "in [1.18e-38, 3.4e38] (a normal float32 > 0)",
         p.repetition_penalty);
  if (!(p.frequency_penalty >= -2.0 && p.frequency_penalty <= 2.0))
    fail("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  if (!(p.presence_penalty >= -2.0 && p.presence_penalty <= 2.0))
    fail("presence_penalty", "in [-2, 2]", p.presence_penalty);
  if (p.min_tokens < 0) fail("min_tokens", ">= 0", p.min_tokens);
  if (p.logprobs < -1 || p.logprobs > k_max_logprobs)
    fail("logprobs", "None or in [0, " + std::to_string(k_max_logprobs) + "]", p.logprobs);
  auto ids_in_range = [vocab](const char* field, int32_t id) {
    if (id < 0 || id >= vocab)
      throw InputError(std::string("SamplingParams.") + field + " holds token id " +
                       std::to_string(id) + ", outside [0, " + std::to_string(vocab) + ")");
  };
  for (const auto& [id, bias] : p.logit_bias) {
    ids_in_range("logit_bias", id);
    if (!std::isfinite(bias)) fail("logit_bias values", "finite", bias);
  }
  for (int32_t id : p.allowed_token_ids) ids_in_range("allowed_token_ids", id);
  for (const auto& word : p.bad_words) {
    if (word.empty()) throw InputError("SamplingParams.bad_words holds an empty token sequence");
    for (int32_t id : word) ids_in_range("bad_words", id);
  }
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

void Sampler::logprobs(const float* logits, int n_rows, int vocab,
                       std::span<const int32_t> token_ids, int top_n, std::span<SampleResult> out) {
  check_shape(n_rows, vocab, token_ids.size(), out.size());
  if (top_n < 0 || top_n > k_max_logprobs)
    throw InputError("prompt_logprobs must be in [0, " + std::to_string(k_max_logprobs) +
                     "], got " + std::to_string(top_n));
  ensure_scratch(scratch, vocab);
  for_each_row(scratch, n_rows, [&](int r, SamplerScratch& s) {
    const float* raw = logits + size_t(r) * vocab;
    check_id(r, "token_ids", token_ids[r], vocab);
    const ArgMax raw_best = checked_argmax(r, raw, vocab);
    out[r].token = token_ids[r];
    fill_logprobs(raw, vocab, raw_best.value, token_ids[r], top_n, s, out[r]);
  });
}

}  // namespace ossa
