#pragma once
// The engine: the whole decode loop in C++. One step is
//
//   commands (add/abort) -> Scheduler.schedule -> block copies -> build_batch
//     -> ModelRunner.forward -> Sampler -> Scheduler.update -> Detokenizer + stop strings ->
//     outputs
//
// Two ways to drive it: step() / run_to_completion() from the caller's thread (offline), or
// start() a background thread and collect outputs with get_outputs() (servers). add_request and
// abort are thread-safe in both; they queue commands that the stepping thread applies.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/constraints.h"
#include "engine/draft_model.h"
#include "engine/logits_plan.h"
#include "engine/output_processor.h"
#include "engine/speculative.h"
#include "model/runner.h"
#include "sampling/sampler.h"
#include "scheduler/scheduler.h"
#include "tokenizer/detokenizer.h"

namespace ossa {

// The scheduler's config (blocks, budgets, max_model_len, policy, prefix caching, watermark) plus
// what only the engine uses. ossa.config builds it, validated, from the user's options.
struct EngineConfig {
  SchedulerConfig scheduler{.max_num_seqs = 64};
  uint64_t seed = 0;  // seeds requests that bring none
  KvType kv_type = KvType::F32;
  SpeculativeConfig speculative;  // off unless its method is set (engine/speculative.h)
};

// Everything about a request besides its prompt.
struct GenerationParams {
  SamplingParams sampling;  // eos_token_ids are filled in by the engine
  int32_t max_tokens = 16;
  int32_t n = 1;
  int32_t priority = 0;
  std::vector<std::string> stop;  // stop strings, matched on the detokenized text
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  int32_t prompt_logprobs = -1;  // -1: none; k >= 0: each prompt token's logprob and the top k
  int64_t constraint = -1;       // structured output: the ConstraintHost's handle; -1: none
};

struct EngineOutput {
  std::string request_id;
  std::vector<CompletionDelta> completions;
  bool finished = false;
  bool has_prompt_logprobs = false;
  std::vector<TokenLogprobs> prompt_logprobs;  // entry i is about prompt token i + 1
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;
  double arrival_time = 0, first_scheduled_time = 0, first_token_time = 0, finished_time = 0;
  std::string error;                // set when the request was rejected or failed inside the loop
  int64_t num_drafts = 0;           // speculative decoding so far: verification steps
  int64_t num_draft_tokens = 0;     // draft tokens verified
  int64_t num_accepted_tokens = 0;  // and of them accepted
};

struct EngineStats {
  SchedulerStats scheduler;
  int64_t num_blocks = 0;
  int64_t prompt_tokens = 0;      // computed prompt tokens (prefix-cache hits excluded)
  int64_t generation_tokens = 0;  // sampled tokens
  int64_t steps = 0;
  int64_t requests_finished = 0;
  double time_forward = 0, time_sample = 0, time_schedule = 0, time_detokenize = 0;  // seconds
  int64_t constraint_calls = 0;     // crossings into the ConstraintHost
  double time_constraint = 0;       // seconds the host spent computing masks (overlapped or not)
  double time_constraint_wait = 0;  // seconds the step waited for masks after the forward
  SpecStats spec;
};

class Engine {
 public:
  // draft_model: the proposer of speculative_config method "draft_model" (same vocabulary).
  Engine(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
         const EngineConfig& config, std::shared_ptr<const Model> draft_model = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Thread-safe. User input is validated once, by ossa.input_processor; a
  // request it would refuse throws ContractError here (check_request), a live id InputError.
  void add_request(const std::string& request_id, std::vector<int32_t> prompt,
                   const GenerationParams& params);
  // Queues an abort; the request ends with finish_reason "abort". Thread-safe. False if unknown.
  bool abort(const std::string& request_id);

  // One step in the caller's thread (not while the background loop runs).
  std::vector<EngineOutput> step();
  // Steps until no request is left; returns every output in order.
  std::vector<EngineOutput> run_to_completion();
  bool has_unfinished() const;

  void start();  // background loop
  void stop();   // ends the loop; requests still running are aborted
  bool running() const { return thread_.joinable(); }
  // Waits up to timeout_s for outputs of the background loop; returns all that are ready.
  std::vector<EngineOutput> get_outputs(double timeout_s);

  // Structured output: where constrained rows get their masks (set before start(); overlap: compute
  // them on a worker thread during the forward pass).
  void set_constraint_host(std::shared_ptr<ConstraintHost> host, bool overlap = true);

  EngineStats stats() const;
  const EngineConfig& config() const { return config_; }
  int32_t vocab_size() const { return n_vocab_; }

 private:
  struct ChildState : CompletionState {  // engine/output_processor.h
    size_t constraint_fed = 0;           // output tokens its matcher has consumed
    SpecControl spec;
    std::vector<int32_t> verify_tokens;  // outputs then the draft being verified
  };
  struct RequestState {
    std::string id;
    int64_t key = 0;
    GenerationParams params;
    std::vector<int32_t> prompt;
    uint64_t seed = 0;
    StopStrings stops;
    std::vector<ChildState> children;
    int32_t prompt_lp_next = 1;  // next prompt position whose logprob is owed
    std::vector<TokenLogprobs> prompt_logprobs;
    bool prompt_logprobs_sent = false;
    int32_t num_cached_tokens = 0;
    bool scheduled = false;
    int64_t num_drafts = 0, num_draft_tokens = 0, num_accepted_tokens = 0;
    double arrival_time = 0, first_scheduled_time = 0, first_token_time = 0;
  };
  struct Command {
    bool is_abort = false;
    std::string id;
    std::unique_ptr<RequestState> request;
  };

  // add_request's contract (cheap; ContractError naming what is broken): the scheduler's for the
  // request's shape, ids inside the vocabulary, logprob counts, non-empty stop strings, and the
  // sampler's for its parameters (sampling: params.sampling with the engine's EOS ids).
  void check_request(std::span<const int32_t> prompt, const GenerationParams& params,
                     const SamplingParams& sampling) const;
  void apply_commands(std::vector<EngineOutput>& outputs);
  // One step: commands, schedule, then the batch's pieces below, outputs (on the stepping thread,
  // which owns all it touches; the shared state it reads is behind mutex_). Every per-step buffer
  // is a member that keeps its capacity.
  void run_step(std::vector<EngineOutput>& outputs);
  // Block copies, first-schedule bookkeeping, the forward's Batch and its logits plan.
  void prepare_batch(const SchedulerOutput& so);
  // The forward pass into logits_ (constrained rows' masks computed meanwhile). False when it
  // failed, and with it the batch (fail_batch).
  bool forward_batch(const SchedulerOutput& so, std::vector<EngineOutput>& outputs);
  // Sampling rows, masks, samples, prompt logprobs. False when the batch failed.
  bool sample_batch(const SchedulerOutput& so, std::vector<EngineOutput>& outputs);
  // The samples go to the scheduler (update) and to their completions.
  void commit_samples(const SchedulerOutput& so);
  // Each used sample to its child's completion: logprobs, detokenized text, stop strings.
  void append_samples(const SchedulerOutput& so);
  // Children the scheduler ended this step (EOS, stop ids, length).
  void apply_finish_events(const std::vector<FinishEvent>& events);
  void step_guarded(std::vector<EngineOutput>& outputs);  // run_step; a failure ends its batch
  void collect_outputs(std::vector<EngineOutput>& outputs);
  void fail_batch(const std::string& message, std::vector<EngineOutput>& outputs);
  // Ends one request with an error (finish_reason "error") and forgets it.
  void fail_request(int64_t key, const std::string& message, std::vector<EngineOutput>& outputs);
  // Samples every row into results_; rows whose parameters make the sampler throw fail their
  // request.
  void sample_rows(const float* logits, size_t n_rows,
                   const std::vector<std::pair<int64_t, int32_t>>& row_child,
                   std::vector<EngineOutput>& outputs);
  // This step's sampling rows (rows_, row_child_), in the scheduler's order: a forking sequence
  // owns n consecutive rows, a verifying one k + 1 (verify_rows).
  void fill_sampling_rows(const SchedulerOutput& so);
  // The sampler's input for a row of r's child whose outputs so far are `outputs` (its step).
  static RowInput row_input(const RequestState& r, int32_t child,
                            std::span<const int32_t> outputs) {
    return {.params = &r.params.sampling,
            .prompt_token_ids = r.prompt,
            .output_token_ids = outputs,
            .seed = r.seed,
            .stream = static_cast<uint64_t>(child),
            .step = outputs.size()};
  }
  // Prompt logprobs from the plan's prompt rows among the forward's first n_rows logits rows.
  void record_prompt_logprobs(size_t n_rows);
  EngineOutput make_output(RequestState& r);
  // Structured output (engine/constraints.cpp): fills the constraint stage's batch for this step's
  // sampling rows; true if the host must be called.
  bool prepare_constraints(const SchedulerOutput& so);
  // Points the constrained rows of rows_ at their masks; rows whose matcher failed go to failed.
  void apply_constraints(std::vector<std::pair<int64_t, std::string>>& failed,
                         const std::vector<std::pair<int64_t, int32_t>>& row_child);
  // Speculative decoding (engine/speculative.cpp): the sampling rows of a sequence verifying its
  // draft, from row `next`; the run's tokens, once update() has told how many it appended; the
  // drafts of this step's decoding children for the next.
  void verify_rows(const SchedulerOutput& so, size_t si, size_t next);
  void record_verification(const ScheduledSeq& s, const int32_t* draft, const int32_t* sampled);
  void propose_drafts(const SchedulerOutput& so);
  void forget(RequestState& r);  // the request is gone: release what it held outside the engine
  void loop();

  std::shared_ptr<const Model> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  EngineConfig config_;
  int32_t n_vocab_ = 0;
  std::vector<int32_t> eos_ids_;

  // Owned by the stepping thread.
  Scheduler scheduler_;
  ModelRunner runner_;
  Sampler sampler_;
  std::unordered_map<int64_t, std::unique_ptr<RequestState>> requests_;
  std::unordered_map<std::string, int64_t> keys_;
  std::vector<int64_t> touched_;
  std::vector<float> logits_;
  Batch batch_;  // the forward's batch, rebuilt each step (engine/batch_builder.h)
  std::vector<int32_t> prompt_lp_len_;  // per scheduled sequence: its prompt's length if it wants
                                        // prompt logprobs, else 0
  LogitsPlan logits_plan_;              // the forward's logits rows and what each sample reads
  std::vector<RowInput> rows_;
  std::vector<std::pair<int64_t, int32_t>> row_child_;  // (request key, child) of each sampling row
  std::vector<SampleResult> results_;
  const float* sample_logits_ = nullptr;  // this step's sampling rows' logits (logits_plan_)
  std::vector<int32_t> sampled_;
  std::vector<int32_t> draft_;               // the n-gram proposer's output
  std::unique_ptr<DraftModel> draft_model_;  // method "draft_model"
  ConstraintStage constraints_;
  std::vector<size_t> constraint_rows_;  // the sampling row of each constraint batch row
  bool constrained_ = false;             // this step's batch has constrained rows
  std::vector<std::pair<int64_t, std::string>> constraint_failed_;  // (key, error) of this step
  int64_t next_key_ = 1;
  const SchedulerOutput* update_owed_ = nullptr;  // the scheduled batch until update() is called
  EngineStats stats_;

  // Shared with other threads.
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable output_cv_;
  std::deque<Command> commands_;
  std::unordered_map<std::string, bool> live_ids_;  // ids added and not yet finished
  std::vector<EngineOutput> pending_outputs_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> stepping_{false};  // a caller's thread is in step() or run_to_completion()
  std::thread thread_;
  mutable std::mutex stats_mutex_;
  EngineStats stats_snapshot_;
};

}  // namespace ossa
