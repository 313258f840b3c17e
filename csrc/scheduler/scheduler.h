#pragma once
// Continuous batching by token counts. There are no prefill and decode phases: every running
// sequence has num_computed tokens catching up to its num_tokens, and each step fills a token
// budget (max_num_batched_tokens) and a sequence cap (max_num_seqs), running sequences first in
// policy order, then waiting ones; a long prompt is split across steps (chunked prefill).
//
// Order: fcfs sorts by (arrival, child); priority by (priority, arrival, child). Both the running
// and the waiting lists are kept in that order, so the sequence to preempt when blocks run out is
// the last running one (lowest priority, latest arrival) and a preempted sequence goes back ahead
// of every later-ordered waiting one. Preemption is by recompute: it drops all its blocks.
//
// The step protocol: out = schedule(); the engine performs out.block_copies, builds the model's
// Batch from out (engine/batch_builder.h), runs the forward over it, then samples out.num_samples
// tokens, each sequence's num_samples in order; update(tokens). A sequence that forks this step
// samples n tokens (one per child) from the logits of its last token.
//
// Speculative decoding: a decoding sequence (all but its last token computed) with a draft d1..dk
// (set_draft) is scheduled as the k + 1 positions [last token, d1..dk] with a logits row at each;
// k shrinks to fit the token budget and max_model_len, and to 0 when its blocks would not fit
// without preempting. update() reads the k + 1 sampled tokens as a run: it appends row i's token,
// checks the stop conditions, and goes on to row i + 1 only while row i's token equals d(i+1). So
// the tokens appended are exactly those plain decoding would have sampled one step at a time, and
// num_computed advances only over the positions whose input token was right (the slots written
// for rejected drafts are overwritten later and never reach the prefix cache).
//
// Recurrent state (num_state_slots > 0: models with delta-net layers, whose per-sequence state
// cannot be rolled back or shared by prefix): a sequence holds one of num_state_slots slots while
// running, taken when it is admitted (with n - 1 more for the children it will fork) and given
// back when it finishes, is aborted or preempted. A waiting sequence is admitted only when its
// slots are free. A fork's children take the reserved slots, and the next schedule() lists
// (parent slot, child slot) in state_copies for the engine to copy before the forward. Prefix
// caching and drafts are not allowed with such state.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "scheduler/request.h"

namespace ossa {

enum class SchedulePolicy : int8_t { Fcfs, Priority };

struct SchedulerConfig {
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 256;
  int32_t max_model_len = 2048;
  SchedulePolicy policy = SchedulePolicy::Fcfs;
  bool enable_prefix_caching = true;
  double watermark =
      k_default_watermark;      // fraction of blocks kept free when admitting waiting sequences
  int32_t num_state_slots = 0;  // recurrent state slots (0: a model without recurrent layers)
};

struct ScheduledSeq {
  int64_t request_id = 0;
  int32_t child = 0;
  int32_t seq = 0;  // scheduler-internal sequence slot
  uint32_t generation = 0;
  int32_t num_computed = 0;  // before this step
  int32_t num_tokens = 0;    // scheduled this step: positions [num_computed, + num_tokens)
  int32_t num_samples = 0;   // tokens it samples: 0 (mid-prefill), 1, n when it forks, k + 1
                             // when it verifies k draft tokens
  int32_t num_draft = 0;     // draft tokens verified this step (its last num_draft positions)
  int32_t num_appended = 0;  // set by update(): tokens it appended (a run, when it verified drafts)
  int32_t draft_start = 0;   // its draft is SchedulerOutput::draft_tokens[draft_start, + num_draft)
  int32_t state_slot = -1;   // its recurrent state slot (num_state_slots > 0), else -1
  // The sequence's tokens (prompt then outputs; the draft follows them); valid until update().
  std::span<const int32_t> tokens;
};

// What one step runs, per sequence (what vLLM's SchedulerOutput carries): which positions, the
// tokens and draft they read, the block table, how many tokens it samples. The engine turns it into
// the model's Batch (engine/batch_builder.h).
struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;
  std::vector<int32_t> block_table_start;  // [n_seqs + 1]: sequence s's table is
  std::vector<int32_t> block_tables;       // block_tables[block_table_start[s], [s + 1])
  std::vector<int32_t> draft_tokens;       // the drafts being verified, back to back
  int32_t num_tokens = 0;                  // positions scheduled, all sequences
  int32_t num_samples = 0;                 // tokens update() expects, all sequences
  std::vector<std::pair<int32_t, int32_t>> block_copies;  // (src, dst) to copy before the forward
  std::vector<std::pair<int32_t, int32_t>> state_copies;  // (src, dst) state slots, the same
  std::vector<std::pair<int64_t, int32_t>> preempted;     // (request, child) sent back to waiting
  std::vector<int64_t> finished_requests;  // all children done since the last schedule

  std::span<const int32_t> block_table(size_t s) const {
    return std::span<const int32_t>(block_tables)
        .subspan(block_table_start[s], block_table_start[s + 1] - block_table_start[s]);
  }
  std::span<const int32_t> draft(size_t s) const {
    return std::span<const int32_t>(draft_tokens).subspan(seqs[s].draft_start, seqs[s].num_draft);
  }
  void clear() {
    seqs.clear();
    block_table_start.assign(1, 0);
    block_tables.clear();
    draft_tokens.clear();
    num_tokens = 0;
    num_samples = 0;
    block_copies.clear();
    state_copies.clear();
    preempted.clear();
    finished_requests.clear();
  }
};

struct SchedulerStats {
  int32_t num_running = 0;  // sequences
  int32_t num_waiting = 0;  // sequences
  double kv_usage_percent = 0;
  int64_t prefix_queries = 0;
  int64_t prefix_hits = 0;
  int64_t num_preemptions = 0;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  // Queues a request: a fresh id and check_request's contract, or ContractError.
  void add_request(const Request& request);
  // add_request's contract for a request's shape (ContractError naming what is broken): a
  // non-empty prompt of ids >= 0 leaving room for one output token within max_model_len,
  // max_tokens >= 1, min_tokens in [0, max_tokens], n >= 1. Reads only the config, so any thread
  // may call it (the engine does when a request is queued).
  void check_request(std::span<const int32_t> prompt, int32_t max_tokens, int32_t min_tokens,
                     int32_t n) const;
  // Drops a request in any state; false when it is unknown (finished already, never added).
  bool abort(int64_t request_id);
  // Ends one child (a stop string found by the detokenizer); false when unknown or already done.
  bool finish(int64_t request_id, int32_t child);
  // Speculative decoding: the tokens proposed to follow a live child's current tokens, verified at
  // its next decoding step (replacing any earlier draft). False when the child is unknown.
  bool set_draft(int64_t request_id, int32_t child, std::span<const int32_t> draft);

  const SchedulerOutput& schedule();
  // The last schedule()'s num_samples tokens, sequence by sequence, also for sequences of requests
  // aborted or finished since (their tokens are dropped); returns the children that finished.
  // Each ScheduledSeq's num_appended tells how many tokens it appended.
  const std::vector<FinishEvent>& update(std::span<const int32_t> sampled_tokens);

  bool has_unfinished() const { return !request_index_.empty(); }
  SchedulerStats stats() const;
  const SchedulerConfig& config() const { return config_; }
  const KVCacheManager& kv() const { return kv_; }
  // Block table of a live child (empty when waiting); InputError when unknown.
  const std::vector<int32_t>& block_table(int64_t request_id, int32_t child) const;
  // Live (request, child) pairs: running ones in running order; waiting ones in waiting order.
  std::vector<std::pair<int64_t, int32_t>> running() const;
  std::vector<std::pair<int64_t, int32_t>> waiting() const;
  // Tokens of a live child (prompt then outputs).
  const std::vector<int32_t>& tokens(int64_t request_id, int32_t child) const;

 private:
  struct RequestState {
    Request params;
    int64_t arrival = 0;
    int32_t num_live = 0;            // children not yet finished
    std::vector<int32_t> child_seq;  // seq slot per child, -1 when finished or not yet forked
  };

  bool before(int32_t a, int32_t b) const;  // policy order of two sequences
  void insert_sorted(std::vector<int32_t>& list, int32_t seq);
  int32_t new_seq(int32_t request, int32_t child);
  void preempt(int32_t seq);
  // Frees a sequence's blocks and slot; returns true when it was its request's last live child.
  bool retire(int32_t seq);
  void retire_request(int32_t request);
  FinishReason check_stop(const Sequence& s, const Request& r, int32_t token) const;
  int32_t find_seq(int64_t request_id, int32_t child) const;

  SchedulerConfig config_;
  KVCacheManager kv_;
  std::vector<RequestState> requests_;
  std::vector<int32_t> free_requests_;
  std::unordered_map<int64_t, int32_t> request_index_;
  std::vector<Sequence> seqs_;
  std::vector<int32_t> free_seqs_;
  std::vector<int32_t> running_;
  std::vector<int32_t> waiting_;
  int64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
  bool update_pending_ = false;
  SchedulerOutput out_;
  std::vector<FinishEvent> events_;
  std::vector<int64_t> finished_since_schedule_;
  std::vector<int32_t> hits_;
  std::vector<int32_t> forked_;
  std::vector<int32_t> free_state_slots_;                          // taken from the back
  std::vector<std::pair<int32_t, int32_t>> pending_state_copies_;  // forks since the last schedule
  void release_state(Sequence& s);
};

}  // namespace ossa
