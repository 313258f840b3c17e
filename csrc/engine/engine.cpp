#include "engine/engine.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>

#include "engine/batch_builder.h"
#include "util/error.h"

namespace ossa {

namespace {

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

double mono_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

Engine::Engine(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
               const EngineConfig& config, std::shared_ptr<const Model> draft_model)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      config_(config),
      n_vocab_(model_->config.n_vocab),
      scheduler_(config.scheduler),
      runner_(model_, config.scheduler.num_blocks, config.scheduler.block_size,
              config.scheduler.max_num_batched_tokens, config.kv_type,
              std::max(config.scheduler.num_state_slots, 1)) {
  if (model_->config.state_floats() > 0 && config.scheduler.num_state_slots < 1)
    throw InputError("a model with recurrent layers needs num_state_slots >= 1");
  if (model_->config.state_floats() > 0 && config.speculative.enabled())
    throw InputError(
        "speculative decoding is not supported for models with recurrent layers "
        "(Qwen3.5's delta-nets, LFM2's convolutions, Mamba-2): their state cannot take back "
        "rejected "
        "drafts");
  if (tokenizer_) {
    eos_ids_ = tokenizer_->eos_ids();
    if (eos_ids_.empty() && tokenizer_->eos_id() >= 0) eos_ids_.push_back(tokenizer_->eos_id());
  }
  std::erase_if(eos_ids_, [&](int32_t id) { return id < 0 || id >= n_vocab_; });
  validate_speculative_config(config.speculative);
  if (draft_model && draft_model->config.state_floats() > 0)
    throw InputError(
        "a draft model with recurrent layers (Qwen3.5's delta-nets, LFM2's convolutions, Mamba-2) "
        "is not supported");
  if (config.speculative.enabled() && config.speculative.method == SpecMethod::DraftModel)
    draft_model_ = make_draft_model(std::move(draft_model), *model_, config.scheduler.num_blocks,
                                    config.scheduler.block_size,
                                    config.scheduler.max_num_batched_tokens, config.kv_type);
  stats_.spec.accepted_per_pos.assign(
      config.speculative.enabled() ? config.speculative.num_speculative_tokens : 0, 0);
  stats_.num_blocks = config.scheduler.num_blocks;
  stats_snapshot_ = stats_;
}

Engine::~Engine() { stop(); }

void Engine::check_request(std::span<const int32_t> prompt, const GenerationParams& params,
                           const SamplingParams& sampling) const {
  scheduler_.check_request(prompt, params.max_tokens, params.sampling.min_tokens, params.n);
  for (int32_t t : prompt)
    OSSA_CHECK(t < n_vocab_, "prompt token id " + std::to_string(t) +
                                 " is outside the vocabulary [0, " + std::to_string(n_vocab_) +
                                 ")");
  OSSA_CHECK(params.prompt_logprobs <= k_max_logprobs,
             "prompt_logprobs must be <= " + std::to_string(k_max_logprobs));
  for (const std::string& s : params.stop) OSSA_CHECK(!s.empty(), "stop strings must not be empty");
  validate_sampling_params(sampling, n_vocab_);
}

void Engine::add_request(const std::string& request_id, std::vector<int32_t> prompt,
                         const GenerationParams& params) {
  SamplingParams sp = params.sampling;
  sp.eos_token_ids = eos_ids_;
  check_request(prompt, params, sp);

  auto r = std::make_unique<RequestState>();
  r->id = request_id;
  r->params = params;
  r->params.sampling = std::move(sp);
  r->prompt = std::move(prompt);
  r->stops =
      StopStrings(params.stop, params.include_stop_str_in_output, params.sampling.min_tokens);
  r->children.resize(params.n);
  for (ChildState& c : r->children)
    c.detok = std::make_unique<IncrementalDetokenizer>(tokenizer_, params.skip_special_tokens);
  r->arrival_time = now_seconds();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (live_ids_.count(request_id) != 0)
      throw InputError("request id '" + request_id + "' is already in use");
    live_ids_[request_id] = true;
    Command cmd;
    cmd.id = request_id;
    cmd.request = std::move(r);
    commands_.push_back(std::move(cmd));
  }
  work_cv_.notify_one();
}

bool Engine::abort(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (live_ids_.count(request_id) == 0) return false;
    Command cmd;
    cmd.is_abort = true;
    cmd.id = request_id;
    commands_.push_back(std::move(cmd));
  }
  work_cv_.notify_one();
  return true;
}

bool Engine::has_unfinished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !live_ids_.empty();
}

void Engine::apply_commands(std::vector<EngineOutput>& outputs) {
  std::deque<Command> commands;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    commands.swap(commands_);
  }
  for (Command& cmd : commands) {
    if (!cmd.is_abort) {
      RequestState& r = *cmd.request;
      r.key = next_key_++;
      r.seed = r.params.sampling.seed
                   ? *r.params.sampling.seed
                   : splitmix64(config_.seed ^ splitmix64(static_cast<uint64_t>(r.key)));
      Request req;
      req.id = r.key;
      req.prompt = r.prompt;
      req.max_tokens = r.params.max_tokens;
      req.min_tokens = r.params.sampling.min_tokens;
      req.eos_token_ids = eos_ids_;
      req.stop_token_ids = r.params.sampling.stop_token_ids;
      req.ignore_eos = r.params.sampling.ignore_eos;
      req.n = r.params.n;
      req.priority = r.params.priority;
      // Prompt logprobs need every prompt position computed, so such requests skip prefix hits.
      req.cache_salt =
          r.params.prompt_logprobs >= 0 ? splitmix64(static_cast<uint64_t>(r.key)) | 1 : 0;
      try {
        scheduler_.add_request(req);
      } catch (const std::exception& e) {
        EngineOutput out;
        out.request_id = r.id;
        out.finished = true;
        out.error = e.what();
        out.arrival_time = r.arrival_time;
        out.finished_time = now_seconds();
        outputs.push_back(std::move(out));
        forget(r);
        continue;
      }
      keys_[r.id] = r.key;
      requests_[r.key] = std::move(cmd.request);
    } else {
      auto it = keys_.find(cmd.id);
      if (it == keys_.end()) continue;  // finished before the abort arrived
      RequestState& r = *requests_.at(it->second);
      scheduler_.abort(r.key);
      for (ChildState& c : r.children)
        if (!c.finished) finish_completion(c, "abort");
      touched_.push_back(r.key);
    }
  }
}

void Engine::fail_request(int64_t key, const std::string& message,
                          std::vector<EngineOutput>& outputs) {
  auto it = requests_.find(key);
  if (it == requests_.end()) return;
  RequestState& r = *it->second;
  scheduler_.abort(key);
  for (ChildState& c : r.children)
    if (!c.finished) finish_completion(c, "error");
  EngineOutput out = make_output(r);
  out.finished = true;
  out.error = message;
  outputs.push_back(std::move(out));
  forget(r);
  keys_.erase(r.id);
  requests_.erase(it);
}

void Engine::forget(RequestState& r) {
  if (r.params.constraint >= 0) constraints_.release(r.params.constraint);
  if (draft_model_) draft_model_->release(r.key);
  std::lock_guard<std::mutex> lock(mutex_);
  live_ids_.erase(r.id);
}

void Engine::set_constraint_host(std::shared_ptr<ConstraintHost> host, bool overlap) {
  if (running())
    throw InputError("set_constraint_host() cannot be called while the background loop runs");
  constraints_.set_host(std::move(host), overlap);
}

void Engine::sample_rows(const float* logits, size_t n_rows,
                         const std::vector<std::pair<int64_t, int32_t>>& row_child,
                         std::vector<EngineOutput>& outputs) {
  try {
    sampler_.sample(logits, static_cast<int>(n_rows), n_vocab_, rows_, results_);
    return;
  } catch (const std::exception&) {
    // One bad row (e.g. every token masked by its parameters) must not fail its neighbours: sample
    // row by row (rows are independent, so the good ones get the same tokens) and end only the
    // requests whose rows throw. Their rows still get a token, which update() drops.
  }
  for (size_t i = 0; i < n_rows; ++i) {
    try {
      sampler_.sample(logits + i * static_cast<size_t>(n_vocab_), 1, n_vocab_,
                      std::span<const RowInput>(&rows_[i], 1),
                      std::span<SampleResult>(&results_[i], 1));
    } catch (const std::exception& e) {
      results_[i] = SampleResult{};
      results_[i].token = 0;
      fail_request(row_child[i].first, std::string("sampling failed: ") + e.what(), outputs);
    }
  }
}

void Engine::fill_sampling_rows(const SchedulerOutput& so) {
  const size_t n_samples = static_cast<size_t>(so.num_samples);
  rows_.resize(n_samples);
  results_.resize(n_samples);
  row_child_.resize(n_samples);
  size_t next = 0;
  for (size_t si = 0; si < so.seqs.size(); ++si) {
    const ScheduledSeq& s = so.seqs[si];
    if (s.num_draft > 0) {
      verify_rows(so, si, next);
      next += static_cast<size_t>(s.num_samples);
      continue;
    }
    RequestState& r = *requests_.at(s.request_id);
    for (int32_t k = 0; k < s.num_samples; ++k, ++next) {
      const int32_t child = s.num_samples > 1 ? k : s.child;
      rows_[next] = row_input(r, child, r.children[child].output_tokens);
      row_child_[next] = {s.request_id, child};
    }
  }
}

void Engine::record_prompt_logprobs(size_t n_rows) {
  const std::vector<std::pair<int64_t, int32_t>>& prompt_rows = logits_plan_.prompt_rows();
  for (size_t i = 0; i < n_rows; ++i) {
    auto [key, pos] = prompt_rows[i];
    auto it = key < 0 ? requests_.end() : requests_.find(key);
    if (it == requests_.end()) continue;  // a sampling row, or a request that failed in sampling
    RequestState& r = *it->second;
    if (pos < r.prompt_lp_next) continue;  // recomputed after a preemption
    const float* row = logits_.data() + i * n_vocab_;
    int32_t tok = r.prompt[pos];
    SampleResult lp;
    sampler_.logprobs(row, 1, n_vocab_, std::span<const int32_t>(&tok, 1), r.params.prompt_logprobs,
                      std::span<SampleResult>(&lp, 1));
    r.prompt_logprobs.push_back(token_logprobs(lp, tok, row, n_vocab_));
    r.prompt_lp_next = pos + 1;
    touched_.push_back(key);
  }
}

void Engine::fail_batch(const std::string& message, std::vector<EngineOutput>& outputs) {
  // Something inside the loop failed for this step's batch (e.g. non-finite logits): end the
  // requests in it with the error and keep serving the others. The scheduler still owes an update()
  // for the batch; the aborted requests' rows are dropped by it.
  std::vector<int64_t> keys;
  if (update_owed_ != nullptr)
    for (const ScheduledSeq& s : update_owed_->seqs) keys.push_back(s.request_id);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (int64_t key : keys) fail_request(key, message, outputs);
  if (update_owed_ != nullptr) {
    sampled_.assign(static_cast<size_t>(update_owed_->num_samples), 0);
    update_owed_ = nullptr;
    scheduler_.update(sampled_);
  }
}

void Engine::run_step(std::vector<EngineOutput>& outputs) {
  apply_commands(outputs);
  if (!scheduler_.has_unfinished()) return collect_outputs(outputs);
  const double t0 = mono_seconds();
  const SchedulerOutput& so = scheduler_.schedule();
  const double t1 = mono_seconds();
  stats_.time_schedule += t1 - t0;
  if (so.seqs.empty()) return collect_outputs(outputs);
  update_owed_ = &so;
  // A piece that fails ends the batch's requests (fail_batch) and the step, as before collecting.
  prepare_batch(so);
  if (!forward_batch(so, outputs)) return;
  const double t2 = mono_seconds();
  stats_.time_forward += t2 - t1;
  if (!sample_batch(so, outputs)) return;
  const double t3 = mono_seconds();
  stats_.time_sample += t3 - t2;
  commit_samples(so);
  if (config_.speculative.enabled()) propose_drafts(so);
  stats_.time_detokenize += mono_seconds() - t3;
  ++stats_.steps;
  collect_outputs(outputs);
}

void Engine::prepare_batch(const SchedulerOutput& so) {
  for (const auto& [src, dst] : so.block_copies) runner_.copy_block(src, dst);
  for (const auto& [src, dst] : so.state_copies) runner_.copy_state(src, dst);  // (forks)
  const double now = now_seconds();
  prompt_lp_len_.clear();
  for (const ScheduledSeq& s : so.seqs) {
    RequestState& r = *requests_.at(s.request_id);
    if (!r.scheduled) {
      r.scheduled = true;
      r.first_scheduled_time = now;
      r.num_cached_tokens = s.num_computed;
    }
    const int32_t prompt_len = static_cast<int32_t>(r.prompt.size());
    prompt_lp_len_.push_back(r.params.prompt_logprobs >= 0 ? prompt_len : 0);
    if (s.num_computed < prompt_len)
      stats_.prompt_tokens += std::min<int32_t>(s.num_tokens, prompt_len - s.num_computed);
  }
  build_batch(so, config_.scheduler.block_size, batch_);
  logits_plan_.plan(so, prompt_lp_len_, batch_);
  const size_t n_logits = batch_.logits_rows.size() * static_cast<size_t>(n_vocab_);
  if (logits_.size() < n_logits) logits_.resize(n_logits);
}

bool Engine::forward_batch(const SchedulerOutput& so, std::vector<EngineOutput>& outputs) {
  // Structured output: the constrained rows' masks are computed while the forward runs.
  constrained_ = prepare_constraints(so);
  if (constrained_) constraints_.launch();
  try {
    runner_.forward(batch_, logits_.data());
  } catch (const std::exception& e) {
    if (constrained_) {
      try {
        constraints_.wait();
      } catch (const std::exception&) {  // the batch fails anyway
      }
    }
    fail_batch(std::string("forward pass failed: ") + e.what(), outputs);
    return false;
  }
  return true;
}

bool Engine::sample_batch(const SchedulerOutput& so, std::vector<EngineOutput>& outputs) {
  fill_sampling_rows(so);
  sample_logits_ = logits_plan_.sample_logits(logits_.data(), n_vocab_);
  constraint_failed_.clear();
  if (constrained_) apply_constraints(constraint_failed_, row_child_);
  try {
    sample_rows(sample_logits_, static_cast<size_t>(so.num_samples), row_child_, outputs);
    for (const auto& [key, message] : constraint_failed_) fail_request(key, message, outputs);
    if (logits_plan_.has_prompt_rows()) record_prompt_logprobs(batch_.logits_rows.size());
  } catch (const std::exception& e) {
    fail_batch(std::string("sampling failed: ") + e.what(), outputs);
    return false;
  }
  return true;
}

void Engine::commit_samples(const SchedulerOutput& so) {
  const size_t n_samples = static_cast<size_t>(so.num_samples);
  sampled_.resize(n_samples);
  for (size_t i = 0; i < n_samples; ++i) sampled_[i] = results_[i].token;
  update_owed_ = nullptr;
  const std::vector<FinishEvent>& events = scheduler_.update(sampled_);
  stats_.generation_tokens += static_cast<int64_t>(n_samples);
  append_samples(so);
  apply_finish_events(events);
}

void Engine::append_samples(const SchedulerOutput& so) {
  const double tok_time = now_seconds();
  size_t i = 0;
  for (size_t si = 0; si < so.seqs.size(); ++si) {
    const ScheduledSeq& s = so.seqs[si];
    // A verifying sequence's rows after its run (update() appended num_appended) are dropped.
    const int32_t n_used = s.num_draft > 0 ? s.num_appended : s.num_samples;
    if (s.num_draft > 0) record_verification(s, so.draft(si).data(), sampled_.data() + i);
    for (int32_t k = 0; k < s.num_samples; ++k, ++i) {
      if (k >= n_used) {
        --stats_.generation_tokens;
        continue;
      }
      auto [key, child] = row_child_[i];
      auto it = requests_.find(key);
      if (it == requests_.end()) continue;  // failed in sampling; the scheduler drops its row
      RequestState& r = *it->second;
      if (r.first_token_time == 0) r.first_token_time = tok_time;
      ChildState& c = r.children[child];
      touched_.push_back(key);
      if (c.finished) continue;
      const SampleResult* lp = r.params.sampling.logprobs >= 0 ? &results_[i] : nullptr;
      if (lp != nullptr)
        c.new_logprobs.push_back(
            token_logprobs(*lp, lp->token, sample_logits_ + i * n_vocab_, n_vocab_));
      if (append_token(c, r.stops, sampled_[i], lp != nullptr ? &lp->logprob : nullptr))
        scheduler_.finish(r.key, child);
    }
  }
}

void Engine::apply_finish_events(const std::vector<FinishEvent>& events) {
  for (const FinishEvent& ev : events) {
    auto it = requests_.find(ev.request_id);
    if (it == requests_.end()) continue;
    RequestState& r = *it->second;
    ChildState& c = r.children[ev.child];
    if (c.finished) continue;  // already ended by a stop string this step
    c.stop_token = ev.stop_token;
    finish_completion(c, ev.reason == FinishReason::Length ? "length" : "stop");
    touched_.push_back(ev.request_id);
  }
}

EngineOutput Engine::make_output(RequestState& r) {
  EngineOutput out;
  out.request_id = r.id;
  out.num_prompt_tokens = static_cast<int32_t>(r.prompt.size());
  out.num_cached_tokens = r.num_cached_tokens;
  out.arrival_time = r.arrival_time;
  out.first_scheduled_time = r.first_scheduled_time;
  out.first_token_time = r.first_token_time;
  out.num_drafts = r.num_drafts;
  out.num_draft_tokens = r.num_draft_tokens;
  out.num_accepted_tokens = r.num_accepted_tokens;
  if (r.params.prompt_logprobs >= 0 && !r.prompt_logprobs_sent &&
      r.prompt_lp_next >= static_cast<int32_t>(r.prompt.size())) {
    out.has_prompt_logprobs = true;
    out.prompt_logprobs = std::move(r.prompt_logprobs);
    r.prompt_logprobs_sent = true;
  }
  bool all_finished = true;
  for (size_t i = 0; i < r.children.size(); ++i) {
    ChildState& c = r.children[i];
    all_finished = all_finished && c.finished;
    if (c.dirty) out.completions.push_back(take_delta(c, r.stops, static_cast<int32_t>(i)));
  }
  out.finished = all_finished;
  if (all_finished) out.finished_time = now_seconds();
  return out;
}

void Engine::collect_outputs(std::vector<EngineOutput>& outputs) {
  std::sort(touched_.begin(), touched_.end());
  touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
  for (int64_t key : touched_) {
    auto it = requests_.find(key);
    if (it == requests_.end()) continue;
    RequestState& r = *it->second;
    EngineOutput out = make_output(r);
    const bool done = out.finished;
    outputs.push_back(std::move(out));
    if (done) {
      ++stats_.requests_finished;
      forget(r);
      keys_.erase(r.id);
      requests_.erase(it);
    }
  }
  touched_.clear();
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_snapshot_ = stats_;
  stats_snapshot_.scheduler = scheduler_.stats();
}

void Engine::step_guarded(std::vector<EngineOutput>& outputs) {
  try {
    run_step(outputs);
  } catch (const std::exception& e) {
    try {
      fail_batch(std::string("engine step failed: ") + e.what(), outputs);
    } catch (const std::exception&) {
      // Nothing more can be done for that batch; the loop must not die with a thread exception.
    }
  }
}

namespace {

// Marks a thread stepping the engine from outside; a second one at the same time is refused instead
// of corrupting the scheduler (LLM shares an engine between threads through ossa.step_driver).
class SteppingGuard {
 public:
  SteppingGuard(std::atomic<bool>& flag, const char* what) : flag_(flag) {
    if (flag_.exchange(true))
      throw InputError(
          std::string(what) +
          " was called while another thread is stepping this engine; "
          "step an engine from one thread at a time (ossa.LLM may be shared between threads)");
  }
  ~SteppingGuard() { flag_ = false; }
  SteppingGuard(const SteppingGuard&) = delete;
  SteppingGuard& operator=(const SteppingGuard&) = delete;

 private:
  std::atomic<bool>& flag_;
};

}  // namespace

std::vector<EngineOutput> Engine::step() {
  if (running()) throw InputError("step() cannot be called while the background loop runs");
  SteppingGuard guard(stepping_, "step()");
  std::vector<EngineOutput> outputs;
  step_guarded(outputs);
  return outputs;
}

std::vector<EngineOutput> Engine::run_to_completion() {
  if (running())
    throw InputError("run_to_completion() cannot be called while the background loop runs");
  SteppingGuard guard(stepping_, "run_to_completion()");
  std::vector<EngineOutput> outputs;
  while (true) {
    step_guarded(outputs);
    if (!has_unfinished()) break;
  }
  return outputs;
}

void Engine::start() {
  if (running()) return;
  stop_ = false;
  // The kernels' thread count (omp nthreads-var) is per thread: carry the caller's setting
  // (core.set_num_threads / LLM(num_threads=...)) over to the loop thread.
  const int n_threads = omp_get_max_threads();
  thread_ = std::thread([this, n_threads] {
    omp_set_num_threads(n_threads);
    loop();
  });
}

void Engine::stop() {
  if (!running()) return;
  stop_ = true;
  work_cv_.notify_all();
  thread_.join();
  // Abort whatever is left so no caller waits forever.
  std::vector<EngineOutput> outputs;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, live] : live_ids_) {
      Command cmd;
      cmd.is_abort = true;
      cmd.id = id;
      commands_.push_back(std::move(cmd));
    }
  }
  apply_commands(outputs);
  collect_outputs(outputs);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (EngineOutput& o : outputs) pending_outputs_.push_back(std::move(o));
  }
  output_cv_.notify_all();
}

void Engine::loop() {
  // One step's outputs, moved on to pending_outputs_; the vector keeps its capacity.
  std::vector<EngineOutput> outputs;
  while (!stop_) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return stop_ || !commands_.empty() || !requests_.empty(); });
      if (stop_) break;
    }
    outputs.clear();
    step_guarded(outputs);
    if (!outputs.empty()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (EngineOutput& o : outputs) pending_outputs_.push_back(std::move(o));
      }
      output_cv_.notify_all();
    }
  }
}

std::vector<EngineOutput> Engine::get_outputs(double timeout_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (pending_outputs_.empty() && timeout_s > 0) {
    output_cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                        [&] { return !pending_outputs_.empty(); });
  }
  std::vector<EngineOutput> out;
  out.swap(pending_outputs_);
  return out;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_snapshot_;
}

}  // namespace ossa
