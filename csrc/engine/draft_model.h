#pragma once
// Draft-model speculation: a second model that shares the target's vocabulary (usually a much
// smaller one) proposes each decoding child's next k tokens greedily, the argmax of its logits
// (lowest id on ties, NaN never chosen). The target verifies them with the rule of
// engine/speculative.h, so the draft changes only how many tokens a step appends, never which.
//
// The draft runs on the same engine thread with its own ModelRunner (its own K/V pool, as many
// blocks as the target's cache, no prefix caching) and its own KVCacheManager. Each child has a
// draft sequence holding the tokens whose draft K/V is written. At a proposal the draft keeps the
// longest common prefix of those tokens and the child's current ones (prompt + outputs), trims
// its blocks to it, and feeds the rest: after a verification that is the bonus or corrected token
// (and the accepted drafts the draft had not fed yet), on a child's first proposal its whole
// prompt (chunked by the token budget), after steps without drafts whatever came since. Then k - 1
// one-token forwards, batched over every proposing child, give d2..dk. Preemption of the target
// changes nothing here (a child's tokens stay what they were).
//
// Memory: when a child's blocks do not fit, the draft sequences of children that are not proposing
// this step are freed, least recently used first (ties: request key, then child); when that is not
// enough the child gets no draft this step. All of it is deterministic and the twin
// (src/ossa/reference/draft_model.py) follows it exactly; batch-invariant kernels make a child's
// draft the same alone or among others.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "model/batch.h"
#include "model/runner.h"

namespace ossa {

class DraftModel {
 public:
  DraftModel(std::shared_ptr<const Model> model, int32_t num_blocks, int32_t block_size,
             int32_t max_num_batched_tokens, KvType kv_type);

  // One step's proposals: clear(), add() each child (its tokens must stay valid until run()),
  // run(), then draft(i) of the i-th added child (empty when its K/V did not fit).
  void clear() { props_.clear(); }
  void add(int64_t request, int32_t child, std::span<const int32_t> tokens, int32_t k);
  void run();
  size_t size() const { return props_.size(); }
  int64_t request(size_t i) const { return props_[i].request; }
  int32_t child(size_t i) const { return props_[i].child; }
  std::span<const int32_t> draft(size_t i) const;

  // A request ended: its children's draft sequences are freed.
  void release(int64_t request);
  int32_t n_vocab() const { return runner_.model().config.n_vocab; }
  int32_t num_free_blocks() const { return kv_.stats().num_free_blocks; }

 private:
  struct Seq {
    int32_t slot = 0;             // the KVCacheManager's sequence
    std::vector<int32_t> tokens;  // fed so far: their K/V is in the draft cache
    int64_t last_used = 0;        // step of its last proposal
  };
  struct Proposal {
    int64_t request = 0;
    int32_t child = 0;
    std::span<const int32_t> tokens;
    int32_t k = 0;
    Seq* seq = nullptr;  // null: no room, no draft
    int32_t n_draft = 0;
  };
  // A piece of one proposal's input: tokens [pos, pos + len) of its sequence; want: a logits row
  // at its last token (argmax to the proposal's next draft token).
  struct Piece {
    size_t prop = 0;
    int32_t pos = 0, len = 0;
    bool want = false;
  };

  bool make_room(Proposal& p, int32_t num_computed, int32_t num_new);
  // Runs the pieces in order, chunked by the token budget (a piece's tokens are its sequence's,
  // already in Seq::tokens); each wanted row's argmax is appended to its proposal's draft.
  void feed();
  void forward_chunk();

  ModelRunner runner_;
  KVCacheManager kv_;
  int32_t block_size_ = 0, max_tokens_ = 0;
  std::map<std::pair<int64_t, int32_t>, Seq> seqs_;  // ordered: eviction ties break by key
  std::vector<int32_t> free_slots_;
  int32_t next_slot_ = 0;
  int64_t step_ = 0;
  std::vector<Proposal> props_;
  std::vector<int32_t> drafts_;  // props_[i]'s draft at [i * stride_, ...)
  size_t stride_ = 0;
  std::vector<Piece> pieces_, chunk_;
  std::vector<std::pair<int32_t, int32_t>> copies_;  // stays empty: no draft block is shared
  Batch batch_;
  std::vector<float> logits_;
};

// The proposer of speculative_config method "draft_model", its cache as many blocks as the
// target's: InputError when there is no draft or its vocabulary size differs from the target's.
std::unique_ptr<DraftModel> make_draft_model(std::shared_ptr<const Model> draft,
                                             const Model& target, int32_t num_blocks,
                                             int32_t block_size, int32_t max_num_batched_tokens,
                                             KvType kv_type);

}  // namespace ossa
