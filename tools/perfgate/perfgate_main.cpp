// ossa_perfgate: runs workloads of the callgrind regression gate (tools/perfgate/perfgate.py).
//
//   ossa_perfgate <model.gguf> <workload>...
//   workloads: encode_1mb sampler_b64 scheduler_256 prefill_128 decode_1 engine_step_b16 (gated),
//              bf16_model (not); decode_1b_q4km (gated) takes the perf gate's K-quant model as
//              <model.gguf>, in a process of its own
//
// Setup (loading the model, building inputs, warm-up calls that size scratch buffers) runs outside
// the measured regions. Each region is bracketed by callgrind client requests: with `valgrind
// --tool=callgrind --instr-atstart=no` only its instructions are counted, and it ends with a dump
// named after the workload, so one process can measure several workloads (prefill_128 and decode_1
// share the model load and the prefill). Without valgrind the requests are no-ops and the driver is
// an ordinary program.
//
// Every input is fixed (a counter-based generator, fixed seeds), and the gate runs the driver with
// OMP_THREAD_LIMIT=1 and one CPU in its affinity mask (so the forward's own pool has no workers),
// so each count is a function of the binary alone. The driver prints a checksum of each workload's
// result, which the gate records next to the count: a workload that silently stopped doing its work
// would show up there.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/runner.h"
#include "model/weights.h"
#include "sampling/sampler.h"
#include "scheduler/scheduler.h"
#include "tokenizer/tokenizer.h"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
constexpr int k_client_requests = 1;
#else
// No valgrind headers: the driver still runs (as a smoke test) but the gate refuses to count.
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#define CALLGRIND_DUMP_STATS_AT(name)
constexpr int k_client_requests = 0;
#endif

namespace {

using namespace ossa;

// splitmix64: a fixed stream of inputs, the same on every run and machine.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

// The measured region: its instructions are dumped under `name` ("Client Request: <name>").
void measured_region(const char* name, const std::function<void()>& work) {
  CALLGRIND_START_INSTRUMENTATION;
  CALLGRIND_ZERO_STATS;
  work();
  CALLGRIND_DUMP_STATS_AT(name);
  CALLGRIND_STOP_INSTRUMENTATION;
}

// About 1 MB of English-like text: words drawn from a fixed list with punctuation, numbers, line
// breaks and some non-ASCII words, so the pretokenizer and BPE see a realistic mix (and the word
// cache sees repeats, as it would on real text).
std::string make_text(size_t n_bytes) {
  static const char* const words[] = {"the",          "of",
                                      "and",          "to",
                                      "in",           "a",
                                      "is",           "that",
                                      "for",          "it",
                                      "as",           "was",
                                      "with",         "be",
                                      "by",           "on",
                                      "not",          "he",
                                      "this",         "are",
                                      "or",           "his",
                                      "from",         "at",
                                      "which",        "but",
                                      "have",         "an",
                                      "had",          "they",
                                      "you",          "were",
                                      "their",        "one",
                                      "all",          "we",
                                      "can",          "her",
                                      "has",          "there",
                                      "been",         "if",
                                      "more",         "when",
                                      "will",         "would",
                                      "who",          "so",
                                      "no",           "inference",
                                      "engine",       "scheduler",
                                      "tokenizer",    "attention",
                                      "probability",  "continuous",
                                      "batching",     "kernel",
                                      "instruction",  "regression",
                                      "Python",       "C++",
                                      "CMake",        "naïve",
                                      "café",         "résumé",
                                      "Zürich",       "東京",
                                      "данные",       "λόγος",
                                      "🙂",           "don't",
                                      "it's",         "we'll",
                                      "I'm",          "they've",
                                      "x86-64",       "2024",
                                      "3.14159",      "1,000,000",
                                      "e-mail",       "https://example.com/path?q=1",
                                      "snake_case",   "CamelCase",
                                      "    indented", "\ttabbed"};
  constexpr size_t n_words = sizeof(words) / sizeof(words[0]);
  static const char* const punct[] = {" ",  " ",  " ",  " ",  " ",  " ",   ", ",  ". ", "; ",
                                      ": ", "! ", "? ", " (", ") ", " \"", "\" ", "\n", "\n\n"};
  constexpr size_t n_punct = sizeof(punct) / sizeof(punct[0]);
  Rng rng{12345};
  std::string text;
  text.reserve(n_bytes + 64);
  while (text.size() < n_bytes) {
    text += words[rng.next() % n_words];
    text += punct[rng.next() % n_punct];
  }
  // Cut at a character boundary (every word is valid UTF-8; never end mid-sequence).
  size_t cut = n_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return text;
}

int run_encode(const std::string& model_path, uint64_t& checksum) {
  std::shared_ptr<Tokenizer> tok = Tokenizer::from_gguf(model_path);
  const std::string text = make_text(1 << 20);
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  measured_region("encode_1mb", [&] { tok->encode_into(text, false, ids); });
  for (int32_t id : ids) checksum = checksum * 31 + static_cast<uint64_t>(id);
  return static_cast<int>(ids.size());
}

// One sampler step at batch 64 over the default model's vocabulary: every row runs the full chain
// (repetition penalty over a 64-token prompt and 32 outputs, temperature, top-k, top-p, min-p,
// draw).
int run_sampler(uint64_t& checksum) {
  constexpr int n_rows = 64, vocab = 49152, prompt_len = 64, n_out = 32;
  Rng rng{777};
  std::vector<float> logits(static_cast<size_t>(n_rows) * vocab);
  for (float& x : logits) x = static_cast<float>(rng.uniform() * 20.0 - 10.0);
  SamplingParams params;
  params.temperature = 0.8;
  params.top_k = 50;
  params.top_p = 0.95;
  params.min_p = 0.02;
  params.repetition_penalty = 1.1;
  params.seed = 1234;
  std::vector<std::vector<int32_t>> prompts(n_rows), outputs(n_rows);
  std::vector<RowInput> rows(n_rows);
  for (int r = 0; r < n_rows; ++r) {
    for (int i = 0; i < prompt_len; ++i)
      prompts[r].push_back(static_cast<int32_t>(rng.next() % vocab));
    for (int i = 0; i < n_out; ++i) outputs[r].push_back(static_cast<int32_t>(rng.next() % vocab));
    rows[r].params = &params;
    rows[r].prompt_token_ids = prompts[r];
    rows[r].output_token_ids = outputs[r];
    rows[r].seed = 1234;
    rows[r].stream = static_cast<uint64_t>(r);
    rows[r].step = n_out;
  }
  Sampler sampler;
  std::vector<SampleResult> out(n_rows);
  sampler.sample(logits.data(), n_rows, vocab, rows, out);  // warm-up: sizes the scratch
  for (RowInput& row : rows) row.step += 1;
  measured_region("sampler_b64", [&] { sampler.sample(logits.data(), n_rows, vocab, rows, out); });
  for (const SampleResult& s : out) checksum = checksum * 31 + static_cast<uint64_t>(s.token);
  return n_rows;
}

// One schedule() + update() step with 256 running (decoding) requests, prefix caching on: the
// setup mirrors benchmarks/scheduler.py (64-token distinct prompts, prefilled until all decode).
int run_scheduler(uint64_t& checksum) {
  constexpr int n_running = 256, prompt_len = 64, block_size = 16, steps_left = 64;
  SchedulerConfig config;
  config.block_size = block_size;
  config.max_model_len = prompt_len + steps_left + 8;
  config.num_blocks = n_running * ((config.max_model_len + block_size - 1) / block_size) + 64;
  config.max_num_batched_tokens = 2048;
  config.max_num_seqs = n_running;
  Scheduler sched(config);
  for (int i = 0; i < n_running; ++i) {
    Request r;
    r.id = i;
    for (int j = 0; j < prompt_len; ++j) r.prompt.push_back((i * 7919 + j * 31) % 30000 + 2);
    r.max_tokens = steps_left;
    r.eos_token_ids = {1};
    sched.add_request(r);
  }
  std::vector<int32_t> sampled;
  auto step = [&] {
    const SchedulerOutput& out = sched.schedule();
    sampled.assign(static_cast<size_t>(out.num_samples), 5);
    sched.update(sampled);
  };
  // Prefill, then a few decode steps so every buffer has reached its steady size.
  for (int i = 0; i < 16 && sched.stats().num_running < n_running; ++i) step();
  for (int i = 0; i < 4; ++i) step();
  int n_tokens = 0;
  measured_region("scheduler_256", [&] {
    step();
    n_tokens = static_cast<int>(sampled.size());
  });
  checksum =
      static_cast<uint64_t>(n_tokens) * 1000003u + static_cast<uint64_t>(sched.stats().num_running);
  return n_tokens;
}

// One engine step decoding 16 requests (8-token prompts, prefilled and decoding beforehand): what a
// server's step runs, schedule + forward + sample + detokenize + stop strings + outputs, so a
// regression in the engine's own bookkeeping shows up beside the kernels'.
int run_engine_step(const std::string& model_path, uint64_t& checksum) {
  constexpr int n_requests = 16, prompt_len = 8;
  std::shared_ptr<Model> model = load_model(model_path);
  std::shared_ptr<const Tokenizer> tok = Tokenizer::from_gguf(model_path);
  const int vocab = model->config.n_vocab;
  EngineConfig config;
  config.scheduler.num_blocks = n_requests * 4 + 8;
  config.scheduler.block_size = 16;
  config.scheduler.max_num_batched_tokens = 256;
  config.scheduler.max_num_seqs = n_requests;
  config.scheduler.max_model_len = 64;
  config.kv_type = KvType::F16;  // the engine's default (kv_cache_dtype "auto")
  Engine engine(model, tok, config);
  for (int r = 0; r < n_requests; ++r) {
    std::vector<int32_t> prompt;
    for (int j = 0; j < prompt_len; ++j)
      prompt.push_back(static_cast<int32_t>((r * 7919 + j * 31 + 13) % vocab));
    GenerationParams params;
    params.max_tokens = 32;
    params.sampling.temperature = 0.8;
    params.sampling.top_p = 0.95;
    params.sampling.seed = 1000 + r;
    params.sampling.ignore_eos = true;
    params.stop = {"\n\n"};
    engine.add_request("r" + std::to_string(r), prompt, params);
  }
  // The prefill (128 tokens, one step), then two decode steps so every buffer has its steady size.
  for (int i = 0; i < 3; ++i) engine.step();
  std::vector<EngineOutput> outputs;
  measured_region("engine_step_b16", [&] { outputs = engine.step(); });
  int n_tokens = 0;
  for (const EngineOutput& o : outputs)
    for (const CompletionDelta& d : o.completions)
      for (int32_t t : d.token_ids) {
        checksum = checksum * 31 + static_cast<uint64_t>(t);
        ++n_tokens;
      }
  return n_tokens;
}

// A single sequence of n tokens at positions start.. in blocks 0, 1, ... of block_size slots.
Batch make_batch(const std::vector<int32_t>& tokens, int start, int context, int block_size) {
  Batch b;
  b.clear();
  const int n_blocks = (context + block_size - 1) / block_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int pos = start + static_cast<int>(i);
    b.token_ids.push_back(tokens[i]);
    b.positions.push_back(pos);
    b.slot_mapping.push_back(pos);  // block p / block_size is block id p / block_size
  }
  b.seq_start.push_back(static_cast<int32_t>(tokens.size()));
  b.context_len.push_back(context);
  for (int i = 0; i < n_blocks; ++i) b.block_tables.push_back(i);
  b.block_table_start.push_back(n_blocks);
  b.logits_rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
  return b;
}

// prefill_128: the first forward of a fresh runner over a 128-token prompt; decode_1: the next
// token (context 129). Either or both; the prefill runs (unmeasured) when only decode_1 is asked
// for. bf16: the same two steps on the model loaded with dtype "bfloat16" (workload bf16_model: not
// gated, for the sanitizer run; its lines report the two argmaxes).
void run_model(const std::string& model_path, bool prefill, bool decode,
               std::vector<std::string>& lines, bool bf16 = false) {
  constexpr int prompt_len = 128, block_size = 16;
  std::shared_ptr<Model> model =
      load_model(model_path, LoadOptions{.dtype = bf16 ? "bfloat16" : "auto"});
  const int vocab = model->config.n_vocab;
  ModelRunner runner(model, 16, block_size, prompt_len);
  std::vector<int32_t> prompt;
  for (int i = 0; i < prompt_len; ++i)
    prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % vocab));
  std::vector<float> logits(static_cast<size_t>(vocab));
  auto argmax = [&] {
    int best = 0;
    for (int i = 1; i < vocab; ++i)
      if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)]) best = i;
    return best;
  };
  const Batch first = make_batch(prompt, 0, prompt_len, block_size);
  if (bf16) {
    runner.forward(first, logits.data());
    const int a = argmax();
    runner.forward(make_batch({42}, prompt_len, prompt_len + 1, block_size), logits.data());
    lines.push_back("workload=bf16_model result=" + std::to_string(a) + "," +
                    std::to_string(argmax()));
    return;
  }
  if (prefill) {
    measured_region("prefill_128", [&] { runner.forward(first, logits.data()); });
    lines.push_back("workload=prefill_128 result=" + std::to_string(argmax()));
  } else {
    runner.forward(first, logits.data());
  }
  if (decode) {
    const Batch step = make_batch({42}, prompt_len, prompt_len + 1, block_size);
    measured_region("decode_1", [&] { runner.forward(step, logits.data()); });
    lines.push_back("workload=decode_1 result=" + std::to_string(argmax()));
  }
}

// decode_1b_q4km, on the K-quant model (scripts/make_bench_models.py --perfgate: 2 layers of the
// Llama-3.2-1B shape, random Q4_K / Q6_K blocks, the tied 49152 x 2048 Q6_K output matrix): one
// decode step after an 8-token prompt, which is nearly all Q4_K and Q6_K single-row matmuls.
void run_kquant_decode(const std::string& model_path, std::vector<std::string>& lines) {
  constexpr int prompt_len = 8, block_size = 16;
  std::shared_ptr<Model> model = load_model(model_path);
  const int vocab = model->config.n_vocab;
  ModelRunner runner(model, 2, block_size, prompt_len);
  std::vector<int32_t> prompt;
  for (int i = 0; i < prompt_len; ++i)
    prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % vocab));
  std::vector<float> logits(static_cast<size_t>(vocab));
  runner.forward(make_batch(prompt, 0, prompt_len, block_size), logits.data());
  const Batch step = make_batch({42}, prompt_len, prompt_len + 1, block_size);
  measured_region("decode_1b_q4km", [&] { runner.forward(step, logits.data()); });
  int best = 0;
  for (int i = 1; i < vocab; ++i)
    if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)]) best = i;
  lines.push_back("workload=decode_1b_q4km result=" + std::to_string(best));
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> known = {"encode_1mb",  "sampler_b64",   "scheduler_256",
                                          "prefill_128", "decode_1",      "engine_step_b16",
                                          "bf16_model",  "decode_1b_q4km"};
  if (argc < 3) {
    std::fprintf(stderr, "usage: ossa_perfgate <model.gguf> <workload>...\nworkloads:");
    for (const std::string& w : known) std::fprintf(stderr, " %s", w.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  const std::string model_path = argv[1];
  std::vector<std::string> workloads(argv + 2, argv + argc);
  for (const std::string& w : workloads) {
    if (std::find(known.begin(), known.end(), w) == known.end()) {
      std::fprintf(stderr, "ossa_perfgate: unknown workload '%s'\n", w.c_str());
      return 2;
    }
  }
  auto wants = [&](const char* w) {
    return std::find(workloads.begin(), workloads.end(), w) != workloads.end();
  };
  omp_set_num_threads(1);
  // The gate requires thread_limit=1 and num_procs=1 (the forward's pool is sized by num_procs).
  std::printf("thread_limit=%d num_procs=%d client_requests=%d\n", omp_get_thread_limit(),
              omp_get_num_procs(), k_client_requests);
  std::vector<std::string> lines;
  try {
    for (const std::string& w : workloads) {
      uint64_t checksum = 0;
      int result = 0;
      if (w == "encode_1mb") {
        result = run_encode(model_path, checksum);
      } else if (w == "sampler_b64") {
        result = run_sampler(checksum);
      } else if (w == "scheduler_256") {
        result = run_scheduler(checksum);
      } else if (w == "engine_step_b16") {
        result = run_engine_step(model_path, checksum);
      } else {
        continue;  // the model workloads run below
      }
      lines.push_back("workload=" + w + " result=" + std::to_string(result) +
                      " checksum=" + std::to_string(checksum));
    }
    if (wants("prefill_128") || wants("decode_1"))
      run_model(model_path, wants("prefill_128"), wants("decode_1"), lines);
    if (wants("bf16_model")) run_model(model_path, true, true, lines, true);
    if (wants("decode_1b_q4km")) run_kquant_decode(model_path, lines);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ossa_perfgate: %s\n", e.what());
    return 1;
  }
  for (const std::string& line : lines) std::printf("%s\n", line.c_str());
  return 0;
}
