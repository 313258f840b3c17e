#pragma once
// The sampler: one batch of logits rows in, one token per row out (plus logprobs on request).
//
// The chain, per row, in this order (float32 unless noted):
//   0. the row's token mask (structured output): every token whose bit is clear -> -inf
//   1. allowed_token_ids (all others -> -inf), then logit_bias (logit += bias), then bad_words
//      (the last token of each word whose earlier tokens end the output -> -inf)
//   2. min_tokens: while the output is shorter than min_tokens, stop_token_ids and (unless
//      ignore_eos) eos_token_ids -> -inf
//   3. repetition penalty on every distinct prompt and output token (Hugging Face / vLLM:
//      logit > 0 ? logit / p : logit * p), then frequency and presence penalties on output tokens
//      (OpenAI: logit -= frequency * count; logit -= presence)
//   4. temperature < 1e-5: greedy, the largest logit, lowest id on ties (vLLM's threshold)
//   5. otherwise weights w = exp_ref((logit - max) * (1 / temperature)) in float64 and truncation:
//      top-k (the k largest by (logit desc, id asc)), top-p (the shortest prefix of that order
//      whose mass before each kept token is < top_p * total), min-p (w >= min_p, i.e. probability
//      >= min_p * the largest probability)
//   6. draw u = philox_uniform(seed, stream, step) and walk the cumulative weights to u * total.
//
// Sums are taken in a fixed order that ossa.reference.sampler reproduces exactly: a candidate list
// sequentially in its order; the whole vocabulary in chunks of 1024 ids, each chunk over 8 lanes
// (lane = id % 8) combined lane 0..7, chunks combined in order. exp_ref is a polynomial in plain
// float64 arithmetic (no FMA contraction), so both sides compute bitwise the same weights.
//
// Logprobs are "raw" (vLLM's default): log_softmax of the logits as the model produced them,
// before bias, penalties, temperature and truncation. logprob(i) = float((x_i - max) - log(Z)),
// Z the chunked sum of exp_ref(x_i - max), log the C library's (the one Python's math.log calls).
#include <array>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace ossa {

constexpr int k_max_logprobs = 20;

// One request's sampling parameters, plain data. ossa.SamplingParams.to_core() builds it.
struct SamplingParams {
  double temperature = 1.0;
  int top_k = -1;  // -1: off; k >= vocab is also off
  double top_p = 1.0;
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  std::optional<uint64_t> seed;  // none: the engine supplies one (RowInput::seed)
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<int32_t> allowed_token_ids;  // empty: all tokens allowed
  // Token sequences that must not be generated (vLLM's bad_words, tokenized): the last token of
  // each is masked when the output ends with the ones before it (a one-token word: always).
  std::vector<std::vector<int32_t>> bad_words;
  int min_tokens = 0;
  std::vector<int32_t> stop_token_ids;
  std::vector<int32_t> eos_token_ids;  // set by the engine from the model
  bool ignore_eos = false;
  int logprobs = -1;  // -1: none; n >= 0: the chosen token's logprob and the top n
};

// Throws InputError naming the field and its valid range.
void validate_sampling_params(const SamplingParams& params, int vocab);

// One row of a batch: its parameters and the state the penalties and the RNG need.
struct RowInput {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_token_ids;
  std::span<const int32_t> output_token_ids;
  uint64_t seed = 0;    // params.seed, or one derived from the engine's seed
  uint64_t stream = 0;  // distinguishes requests sharing a seed (n > 1 children)
  uint64_t step = 0;    // the number of output tokens so far
  // Structured output: ceil(vocab / 32) words, token t allowed iff bit t % 32 of word t / 32 is set
  // (llguidance's layout). nullptr: no constraint.
  const uint32_t* token_mask = nullptr;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;  // raw logprob of token; NaN unless logprobs were asked for
  int32_t n_top = 0;     // valid entries of top_ids / top_logprobs, by (logprob desc, id asc)
  std::array<int32_t, k_max_logprobs> top_ids{};
  std::array<float, k_max_logprobs> top_logprobs{};
};

// Per-thread work buffers, sized for the largest vocabulary seen.
struct SamplerScratch {
  std::vector<float> work;                       // processed logits
  std::vector<double> weights;                   // exp_ref over the vocabulary
  std::vector<double> chunk_sums;                // per 1024-id chunk
  std::vector<int32_t> candidates;               // candidate ids, in the draw order
  std::vector<double> candidate_weights;         // their weights
  std::vector<std::pair<float, int32_t>> pairs;  // for nth_element on large selections
  std::vector<int32_t> found;                    // top-p: ids above a weight bound
  std::vector<uint64_t> keys;                    // top-p: (x desc, id asc) sort keys
  std::vector<int32_t> counts;                   // output token counts (kept all zero)
  std::vector<uint32_t> seen;                    // stamp per id for distinct tokens
  std::vector<int32_t> touched;                  // ids whose count is nonzero
  uint32_t stamp = 0;
  std::exception_ptr error;
  int error_row = -1;
};

// Holds the scratch; one per engine. Results do not depend on the number of OpenMP threads.
struct Sampler {
  // logits: [n_rows, vocab] row-major. Throws InputError for NaN or +inf logits, a row whose
  // every token is masked, or bad parameters (the first offending row).
  void sample(const float* logits, int n_rows, int vocab, std::span<const RowInput> rows,
              std::span<SampleResult> out);
  // Raw logprob of token_ids[r] in row r and the top_n alternatives (prompt_logprobs).
  void logprobs(const float* logits, int n_rows, int vocab, std::span<const int32_t> token_ids,
                int top_n, std::span<SampleResult> out);

  std::vector<SamplerScratch> scratch;
};

// exp for z <= 0 as the sampler computes it (exposed for the twin's tests): 0 below -708.
void exp_ref(const double* z, double* out, int n);

}  // namespace ossa
