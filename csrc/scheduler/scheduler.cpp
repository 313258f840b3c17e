#include "scheduler/scheduler.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace ossa {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

const SchedulerConfig& validated(const SchedulerConfig& c) {
  if (c.block_size < 1) throw InputError("block_size must be >= 1, got " + str(c.block_size));
  if (c.num_blocks < 1) throw InputError("num_blocks must be >= 1, got " + str(c.num_blocks));
  if (c.max_num_batched_tokens < 1)
    throw InputError("max_num_batched_tokens must be >= 1, got " + str(c.max_num_batched_tokens));
  if (c.max_num_seqs < 1) throw InputError("max_num_seqs must be >= 1, got " + str(c.max_num_seqs));
  if (c.max_model_len < 2)
    throw InputError("max_model_len must be >= 2, got " + str(c.max_model_len));
  if (!(c.watermark >= 0.0 && c.watermark < 1.0))
    throw InputError("watermark must be in [0, 1), got " + std::to_string(c.watermark));
  if (c.num_state_slots < 0)
    throw InputError("num_state_slots must be >= 0, got " + str(c.num_state_slots));
  if (c.num_state_slots > 0 && c.enable_prefix_caching)
    throw InputError("prefix caching is not supported with recurrent state (num_state_slots > 0)");
  // A lone sequence must always fit, or a long one could wait or thrash forever.
  const int32_t wm = watermark_blocks_for(c.watermark, c.num_blocks);
  const int64_t need = (static_cast<int64_t>(c.max_model_len) + c.block_size - 1) / c.block_size;
  if (need + wm > c.num_blocks)
    throw InputError(
        "the KV cache (" + str(c.num_blocks) + " blocks of " + str(c.block_size) + " tokens, " +
        str(wm) + " kept free) cannot hold one sequence of max_model_len=" + str(c.max_model_len) +
        " tokens; lower max_model_len or give the cache more memory");
  return c;
}

// An index into items to reuse: the last freed one, else a new element at the end.
template <typename T>
int32_t take_slot(std::vector<T>& items, std::vector<int32_t>& free) {
  if (free.empty()) {
    items.emplace_back();
    return static_cast<int32_t>(items.size() - 1);
  }
  const int32_t i = free.back();
  free.pop_back();
  return i;
}

bool contains(const std::vector<int32_t>& v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(validated(config)),
      kv_(config.num_blocks, config.block_size, config.enable_prefix_caching, config.watermark) {
  for (int32_t i = config_.num_state_slots - 1; i >= 0; --i) free_state_slots_.push_back(i);
}

void Scheduler::release_state(Sequence& s) {
  if (s.state_slot >= 0) free_state_slots_.push_back(s.state_slot);
  for (int32_t slot : s.reserved_slots) free_state_slots_.push_back(slot);
  s.state_slot = -1;
  s.reserved_slots.clear();
}

bool Scheduler::before(int32_t a, int32_t b) const {
  const Sequence& x = seqs_[a];
  const Sequence& y = seqs_[b];
  if (config_.policy == SchedulePolicy::Priority) {
    int32_t px = requests_[x.request].params.priority, py = requests_[y.request].params.priority;
    if (px != py) return px < py;
  }
  int64_t ax = requests_[x.request].arrival, ay = requests_[y.request].arrival;
  if (ax != ay) return ax < ay;
  return x.child < y.child;
}

void Scheduler::insert_sorted(std::vector<int32_t>& list, int32_t seq) {
  auto it = std::upper_bound(list.begin(), list.end(), seq,
                             [this](int32_t a, int32_t b) { return before(a, b); });
  list.insert(it, seq);
}

int32_t Scheduler::new_seq(int32_t request, int32_t child) {
  const int32_t sid = take_slot(seqs_, free_seqs_);
  Sequence& s = seqs_[sid];
  s.request = request;
  s.child = child;
  ++s.generation;
  s.status = SeqStatus::Waiting;
  s.pending_fork = false;
  s.tokens.clear();
  s.num_prompt_tokens = 0;
  s.num_computed = 0;
  s.num_output = 0;
  s.draft.clear();
  s.state_slot = -1;
  s.reserved_slots.clear();
  return sid;
}

void Scheduler::check_request(std::span<const int32_t> prompt, int32_t max_tokens,
                              int32_t min_tokens, int32_t n) const {
  OSSA_CHECK(!prompt.empty(), "the prompt must hold at least one token");
  for (int32_t t : prompt) OSSA_CHECK(t >= 0, "prompt token ids must be >= 0, got " + str(t));
  OSSA_CHECK(max_tokens >= 1, "max_tokens must be >= 1, got " + str(max_tokens));
  OSSA_CHECK(
      min_tokens >= 0 && min_tokens <= max_tokens,
      "min_tokens must be in [0, max_tokens=" + str(max_tokens) + "], got " + str(min_tokens));
  OSSA_CHECK(n >= 1, "n must be >= 1, got " + str(n));
  OSSA_CHECK(config_.num_state_slots == 0 || n <= config_.num_state_slots,
             "n=" + str(n) + " exceeds the " + str(config_.num_state_slots) +
                 " sequences this model's recurrent state slots let run at once");
  // The constructor made sure one max_model_len sequence fits the cache beside the watermark, so
  // a prompt that leaves room for one output token fits it too.
  OSSA_CHECK(static_cast<int64_t>(prompt.size()) + 1 <= config_.max_model_len,
             "the prompt has " + str(static_cast<int64_t>(prompt.size())) +
                 " tokens, which leaves no room to generate within max_model_len=" +
                 str(config_.max_model_len));
}

void Scheduler::add_request(const Request& r) {
  OSSA_CHECK(request_index_.count(r.id) == 0, "request id " + str(r.id) + " is already in use");
  check_request(r.prompt, r.max_tokens, r.min_tokens, r.n);

  const int32_t rid = take_slot(requests_, free_requests_);
  RequestState& st = requests_[rid];
  st.params = r;
  st.arrival = next_arrival_++;
  st.num_live = 1;
  st.child_seq.assign(r.n, -1);
  int32_t sid = new_seq(rid, 0);
  Sequence& s = seqs_[sid];
  s.tokens.assign(r.prompt.begin(), r.prompt.end());
  s.num_prompt_tokens = static_cast<int32_t>(r.prompt.size());
  s.pending_fork = r.n > 1;
  st.child_seq[0] = sid;
  request_index_.emplace(r.id, rid);
  insert_sorted(waiting_, sid);
}

void Scheduler::preempt(int32_t sid) {
  Sequence& s = seqs_[sid];
  kv_.free(sid);
  release_state(s);
  s.num_computed = 0;
  s.draft.clear();
  s.status = SeqStatus::Waiting;
  insert_sorted(waiting_, sid);
  out_.preempted.emplace_back(requests_[s.request].params.id, s.child);
  ++num_preemptions_;
}

bool Scheduler::retire(int32_t sid) {
  Sequence& s = seqs_[sid];
  OSSA_ASSERT(s.status != SeqStatus::Finished);
  s.status = SeqStatus::Finished;
  kv_.free(sid);
  release_state(s);
  RequestState& r = requests_[s.request];
  r.child_seq[s.child] = -1;
  return --r.num_live == 0;
}

void Scheduler::retire_request(int32_t rid) {
  RequestState& r = requests_[rid];
  request_index_.erase(r.params.id);
  finished_since_schedule_.push_back(r.params.id);
  free_requests_.push_back(rid);
}

int32_t Scheduler::find_seq(int64_t request_id, int32_t child) const {
  auto it = request_index_.find(request_id);
  if (it == request_index_.end()) return -1;
  const RequestState& r = requests_[it->second];
  if (child < 0 || child >= static_cast<int32_t>(r.child_seq.size())) return -1;
  return r.child_seq[child];
}

static void erase_value(std::vector<int32_t>& v, int32_t x) {
  auto it = std::find(v.begin(), v.end(), x);
  if (it != v.end()) v.erase(it);
}

bool Scheduler::abort(int64_t request_id) {
  auto it = request_index_.find(request_id);
  if (it == request_index_.end()) return false;
  int32_t rid = it->second;
  for (int32_t sid : std::vector<int32_t>(requests_[rid].child_seq)) {
    if (sid < 0) continue;
    erase_value(seqs_[sid].status == SeqStatus::Running ? running_ : waiting_, sid);
    retire(sid);
    free_seqs_.push_back(sid);
  }
  retire_request(rid);
  return true;
}

bool Scheduler::finish(int64_t request_id, int32_t child) {
  int32_t sid = find_seq(request_id, child);
  if (sid < 0) return false;
  int32_t rid = seqs_[sid].request;
  erase_value(seqs_[sid].status == SeqStatus::Running ? running_ : waiting_, sid);
  bool done = retire(sid);
  free_seqs_.push_back(sid);
  if (done) retire_request(rid);
  return true;
}

bool Scheduler::set_draft(int64_t request_id, int32_t child, std::span<const int32_t> draft) {
  if (config_.num_state_slots > 0 && !draft.empty())
    throw InputError("speculative decoding is not supported with recurrent state");
  const int32_t sid = find_seq(request_id, child);
  if (sid < 0) return false;
  seqs_[sid].draft.assign(draft.begin(), draft.end());
  return true;
}

const SchedulerOutput& Scheduler::schedule() {
  if (update_pending_)
    throw InputError("schedule() called again before update() for the previous step");
  out_.clear();
  out_.finished_requests.swap(finished_since_schedule_);
  out_.state_copies.swap(pending_state_copies_);
  const int32_t bs = config_.block_size;
  int32_t budget = config_.max_num_batched_tokens;

  // num_draft > 0: the last num_draft of the num_new positions hold the sequence's draft.
  auto emit = [&](int32_t sid, int32_t num_new, int32_t num_draft) {
    Sequence& s = seqs_[sid];
    const std::vector<int32_t>& table = kv_.block_table(sid);
    OSSA_ASSERT(static_cast<int64_t>(table.size()) * bs >= s.num_computed + num_new);
    out_.block_tables.insert(out_.block_tables.end(), table.begin(), table.end());
    out_.block_table_start.push_back(static_cast<int32_t>(out_.block_tables.size()));
    const int32_t draft_start = static_cast<int32_t>(out_.draft_tokens.size());
    out_.draft_tokens.insert(out_.draft_tokens.end(), s.draft.begin(), s.draft.begin() + num_draft);
    const RequestState& r = requests_[s.request];
    int32_t samples = 0;
    if (num_draft > 0)
      samples = num_draft + 1;
    else if (s.num_computed + num_new == s.num_tokens())
      samples = s.pending_fork ? r.params.n : 1;
    out_.seqs.push_back({r.params.id, s.child, sid, s.generation, s.num_computed, num_new, samples,
                         num_draft, 0, draft_start, s.state_slot,
                         std::span<const int32_t>(s.tokens)});
    out_.num_tokens += num_new;
    out_.num_samples += samples;
    budget -= num_new;
    s.draft.clear();  // used or stale
  };

  // Running sequences first, in policy order; when blocks run out the last one is preempted.
  bool preempted_any = false;
  size_t i = 0;
  while (i < running_.size() && budget > 0 &&
         static_cast<int32_t>(out_.seqs.size()) < config_.max_num_seqs) {
    const int32_t sid = running_[i];
    const Sequence& s = seqs_[sid];
    const int32_t num_new = std::min(s.num_tokens() - s.num_computed, budget);
    OSSA_ASSERT(num_new > 0);
    // A draft is verified only by a decoding sequence, within the budget and max_model_len, and
    // only where its blocks fit without preempting anyone.
    if (!s.draft.empty() && s.num_computed + 1 == s.num_tokens()) {
      const int32_t num_draft = std::min({static_cast<int32_t>(s.draft.size()), budget - 1,
                                          config_.max_model_len - s.num_tokens()});
      if (num_draft > 0 &&
          kv_.allocate_slots(sid, s.num_computed, 1 + num_draft, {}, false, out_.block_copies)) {
        emit(sid, 1 + num_draft, num_draft);
        ++i;
        continue;
      }
    }
    bool ok = false;
    while (!(ok = kv_.allocate_slots(sid, s.num_computed, num_new, {}, false, out_.block_copies))) {
      const int32_t victim = running_.back();
      running_.pop_back();
      preempt(victim);
      preempted_any = true;
      if (victim == sid) break;
    }
    if (!ok) break;
    emit(sid, num_new, 0);
    ++i;
  }

  // Then waiting ones, in order, without skipping; not in a step that had to preempt.
  while (!preempted_any && !waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    const int32_t sid = waiting_.front();
    Sequence& s = seqs_[sid];
    // (recurrent state: its slot, and its children's, must be free)
    const int32_t slots = config_.num_state_slots == 0 ? 0
                          : s.pending_fork             ? requests_[s.request].params.n
                                                       : 1;
    if (static_cast<int32_t>(free_state_slots_.size()) < slots) break;
    hits_.clear();
    const int32_t num_hit =
        kv_.get_computed_blocks(sid, s.tokens, requests_[s.request].params.cache_salt, hits_);
    const int32_t num_new = std::min(s.num_tokens() - num_hit, budget);
    if (!kv_.allocate_slots(sid, num_hit, num_new, hits_, true, out_.block_copies)) break;
    waiting_.erase(waiting_.begin());
    for (int32_t k = 0; k < slots; ++k) {
      const int32_t slot = free_state_slots_.back();
      free_state_slots_.pop_back();
      if (k == 0)
        s.state_slot = slot;
      else
        s.reserved_slots.push_back(slot);
    }
    s.num_computed = num_hit;
    s.status = SeqStatus::Running;
    insert_sorted(running_, sid);
    emit(sid, num_new, 0);
  }
  update_pending_ = !out_.seqs.empty();
  return out_;
}

FinishReason Scheduler::check_stop(const Sequence& s, const Request& r, int32_t token) const {
  if (s.num_output >= r.min_tokens) {
    if (!r.ignore_eos && contains(r.eos_token_ids, token)) return FinishReason::Stop;
    if (contains(r.stop_token_ids, token)) return FinishReason::Stop;
  }
  if (s.num_output >= r.max_tokens || s.num_tokens() >= config_.max_model_len)
    return FinishReason::Length;
  return FinishReason::None;
}

const std::vector<FinishEvent>& Scheduler::update(std::span<const int32_t> sampled) {
  if (!update_pending_) throw InputError("update() called without a scheduled step to update");
  if (sampled.size() != static_cast<size_t>(out_.num_samples))
    throw InputError("update() expects " + str(out_.num_samples) +
                     " sampled tokens (one per logits row), got " + str(sampled.size()));
  for (int32_t t : sampled)
    if (t < 0) throw InputError("sampled token ids must be >= 0, got " + str(t));
  update_pending_ = false;
  events_.clear();
  forked_.clear();
  std::vector<int32_t>& retired =
      hits_;  // reused scratch: slots freed once the lists are compacted
  retired.clear();
  bool any_finished = false;

  size_t row = 0;
  for (size_t si = 0; si < out_.seqs.size(); ++si) {
    ScheduledSeq& ss = out_.seqs[si];
    const size_t first_row = row;
    row += ss.num_samples;
    const int32_t sid = ss.seq;
    // Aborted or finished (stop string) between schedule() and update(): drop its tokens.
    if (seqs_[sid].generation != ss.generation || seqs_[sid].status != SeqStatus::Running) continue;
    const int32_t rid = seqs_[sid].request;
    if (ss.num_draft > 0) {
      // Verification: the run of tokens plain decoding would have appended one step at a time.
      Sequence& s = seqs_[sid];
      const Request& params = requests_[rid].params;
      const std::span<const int32_t> draft = out_.draft(si);
      FinishReason reason = FinishReason::None;
      int32_t token = -1, appended = 0;
      for (int32_t j = 0; j <= ss.num_draft; ++j) {
        token = sampled[first_row + j];
        s.tokens.push_back(token);
        ++s.num_output;
        ++appended;
        reason = check_stop(s, params, token);
        if (reason != FinishReason::None || (j < ss.num_draft && token != draft[j])) break;
      }
      ss.num_appended = appended;
      s.num_computed += appended;  // the last token and the accepted drafts
      kv_.cache_full_blocks(sid, s.tokens, s.num_computed, params.cache_salt);
      kv_.trim(sid, s.num_computed);  // blocks that held only rejected drafts
      if (reason != FinishReason::None) {
        FinishEvent ev{params.id, s.child, reason, reason == FinishReason::Stop ? token : -1,
                       false};
        ev.request_done = retire(sid);
        if (ev.request_done) retire_request(rid);
        retired.push_back(sid);
        events_.push_back(ev);
        any_finished = true;
      }
      continue;
    }
    seqs_[sid].num_computed += ss.num_tokens;
    kv_.cache_full_blocks(sid, seqs_[sid].tokens, seqs_[sid].num_computed,
                          requests_[rid].params.cache_salt);
    if (ss.num_samples == 0) continue;
    if (seqs_[sid].pending_fork) {
      seqs_[sid].pending_fork = false;
      for (int32_t k = 1; k < ss.num_samples; ++k) {
        const int32_t cid = new_seq(rid, k);  // may grow seqs_: index, don't hold references
        Sequence& c = seqs_[cid];
        const Sequence& p = seqs_[sid];
        c.tokens.assign(p.tokens.begin(), p.tokens.end());
        c.num_prompt_tokens = p.num_prompt_tokens;
        c.num_computed = p.num_computed;
        c.status = SeqStatus::Running;
        kv_.fork(sid, cid);
        if (!seqs_[sid].reserved_slots.empty()) {  // (recurrent state: a copy of the parent's)
          c.state_slot = seqs_[sid].reserved_slots.back();
          seqs_[sid].reserved_slots.pop_back();
          pending_state_copies_.emplace_back(seqs_[sid].state_slot, c.state_slot);
        }
        requests_[rid].child_seq[k] = cid;
        ++requests_[rid].num_live;
        forked_.push_back(cid);
      }
    }
    for (int32_t k = 0; k < ss.num_samples; ++k) {
      const int32_t cid = k == 0 ? sid : requests_[rid].child_seq[k];
      Sequence& c = seqs_[cid];
      const int32_t token = sampled[first_row + k];
      c.tokens.push_back(token);
      ++c.num_output;
      const FinishReason reason = check_stop(c, requests_[rid].params, token);
      if (reason == FinishReason::None) continue;
      FinishEvent ev{requests_[rid].params.id, c.child, reason,
                     reason == FinishReason::Stop ? token : -1, false};
      ev.request_done = retire(cid);
      if (ev.request_done) retire_request(rid);
      retired.push_back(cid);
      events_.push_back(ev);
      any_finished = true;
    }
  }
  if (any_finished)
    running_.erase(
        std::remove_if(running_.begin(), running_.end(),
                       [this](int32_t sid) { return seqs_[sid].status != SeqStatus::Running; }),
        running_.end());
  for (int32_t cid : forked_)
    if (seqs_[cid].status == SeqStatus::Running) insert_sorted(running_, cid);
  for (int32_t sid : retired) free_seqs_.push_back(sid);
  return events_;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats st;
  st.num_running = static_cast<int32_t>(running_.size());
  st.num_waiting = static_cast<int32_t>(waiting_.size());
  CacheStats c = kv_.stats();
  st.kv_usage_percent = c.usage_percent;
  st.prefix_queries = c.prefix_queries;
  st.prefix_hits = c.prefix_hits;
  st.num_preemptions = num_preemptions_;
  return st;
}

const std::vector<int32_t>& Scheduler::block_table(int64_t request_id, int32_t child) const {
  int32_t sid = find_seq(request_id, child);
  if (sid < 0) throw InputError("no live child " + str(child) + " of request " + str(request_id));
  return kv_.block_table(sid);
}

const std::vector<int32_t>& Scheduler::tokens(int64_t request_id, int32_t child) const {
  int32_t sid = find_seq(request_id, child);
  if (sid < 0) throw InputError("no live child " + str(child) + " of request " + str(request_id));
  return seqs_[sid].tokens;
}

std::vector<std::pair<int64_t, int32_t>> Scheduler::running() const {
  std::vector<std::pair<int64_t, int32_t>> out;
  for (int32_t sid : running_)
    out.emplace_back(requests_[seqs_[sid].request].params.id, seqs_[sid].child);
  return out;
}

std::vector<std::pair<int64_t, int32_t>> Scheduler::waiting() const {
  std::vector<std::pair<int64_t, int32_t>> out;
  for (int32_t sid : waiting_)
    out.emplace_back(requests_[seqs_[sid].request].params.id, seqs_[sid].child);
  return out;
}

}  // namespace ossa
