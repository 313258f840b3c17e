#pragma once
// What the engine asks for (Request) and the scheduler's per-sequence state (Sequence).
//
// A request with n > 1 starts as one sequence (child 0) holding the prompt; the step that finishes
// its prefill samples n tokens from the same logits row, and the request forks into n children
// that share the prompt's blocks.
#include <cstdint>
#include <string>
#include <vector>

namespace ossa {

struct Request {
  int64_t id = 0;               // the engine's key; unique among live requests
  std::vector<int32_t> prompt;  // token ids, at least one
  int32_t max_tokens = 16;      // output tokens per child, >= 1
  int32_t min_tokens = 0;       // EOS / stop ids are ignored before this many outputs
  std::vector<int32_t> eos_token_ids;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t n = 1;            // children sampled from the same prompt
  int32_t priority = 0;     // policy priority: lower runs first, then arrival
  uint64_t cache_salt = 0;  // extra key of every block hash (isolates prefix caches)
};

enum class FinishReason : int8_t { None = 0, Stop = 1, Length = 2, Abort = 3 };
const char* finish_reason_name(FinishReason r);

struct FinishEvent {
  int64_t request_id = 0;
  int32_t child = 0;
  FinishReason reason = FinishReason::None;
  int32_t stop_token = -1;    // the EOS or stop id that ended the child, else -1
  bool request_done = false;  // this was the request's last unfinished child
};

enum class SeqStatus : int8_t { Waiting, Running, Finished };

struct Sequence {
  int32_t request = -1;  // slot in the scheduler's request table
  int32_t child = 0;
  uint32_t generation = 0;  // bumped whenever the slot is reused
  SeqStatus status = SeqStatus::Finished;
  bool pending_fork = false;    // n > 1 and the prompt's prefill has not produced samples yet
  std::vector<int32_t> tokens;  // prompt then outputs
  int32_t num_prompt_tokens = 0;
  int32_t num_computed = 0;  // tokens whose K/V is in the cache
  int32_t num_output = 0;
  // Speculative decoding: tokens proposed to follow `tokens` (the engine's proposer sets them after
  // each update); the next schedule() verifies them when the sequence is decoding, and drops them.
  std::vector<int32_t> draft;
  // Models with recurrent layers (SchedulerConfig::num_state_slots > 0): the state slot it holds
  // while running (-1 otherwise), and, until it forks, the slots taken for its n - 1 children.
  int32_t state_slot = -1;
  std::vector<int32_t> reserved_slots;

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
};

}  // namespace ossa
