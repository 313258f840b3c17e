#pragma once
// ModelRunner: a model, its paged K/V pool and the work buffers of one step, all allocated up
// front.
//
// K/V pool (f32 or f16 elements: KvType), one allocation; slot = block_id * block_size + offset.
// Each layer holds its K blocks, then its V blocks; K is transposed within a block so that
// attention scores vectorise over positions (kernels/attention.h), V is a row per slot:
//
//   layer 0: K | block 0: [kv head][dim][position in block] | block 1 | ... | block n_blocks-1 |
//            V | block 0: [position in block][kv head * dim] | block 1 | ... |                  |
//   layer 1: K | ...                                                                          |
//            V | ...                                                                          |
//
// A block is block_size * n_head_kv * head_dim elements of K and as many of V in every layer, the
// same bytes either way; copy_block copies those.
// forward() allocates nothing for batches of at most max_num_batched_tokens tokens.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <vector>

#include "model/batch.h"
#include "model/llama.h"
#include "model/weights.h"
#include "util/mmap.h"

namespace ossa {

class ModelRunner {
 public:
  // num_state_slots: the recurrent states a model with delta-net layers keeps (one per sequence
  // that runs at the same time; at least 1); ignored for other models.
  ModelRunner(std::shared_ptr<const Model> model, int num_blocks, int block_size,
              int max_num_batched_tokens, KvType kv_type = KvType::F32, int num_state_slots = 1);

  // Runs one step. logits: [batch.logits_rows.size(), n_vocab]. Throws InputError for a malformed
  // batch (token ids, slots, block ids, positions or table bounds out of range).
  void forward(const Batch& batch, float* logits);

  // Copy-on-write for forked sequences: block dst gets block src's K/V in every layer.
  void copy_block(int src, int dst);
  // A forked sequence's recurrent state: slot dst gets slot src's (delta-net models; else nothing).
  void copy_state(int src, int dst);
  int num_state_slots() const { return state_.n_state_slots; }
  // Bytes of one recurrent state slot (0 for a model without recurrent layers).
  static size_t state_bytes(const ModelConfig& config);

  static size_t kv_bytes_per_token(const ModelConfig& config, KvType kv_type = KvType::F32);
  KvType kv_type() const { return state_.kv_type; }

  const Model& model() const { return *model_; }
  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int max_num_batched_tokens() const { return max_tokens_; }

 private:
  void validate(const Batch& batch) const;

  std::shared_ptr<const Model> model_;
  int num_blocks_, block_size_, max_tokens_;
  // Anonymous memory populated by a background thread from construction on (util/mmap.h), so steps
  // do not take the page faults of first touches and construction does not wait for them.
  LargeBuffer kv_;
  LargeBuffer states_;  // recurrent states (delta_net.h has the layout): zero pages, as kv_
  std::vector<int32_t> identity_;           // slot s for sequence s, when a batch names none
  mutable std::vector<uint8_t> slot_used_;  // validate's scratch (all 0 between calls)
  ForwardState state_;
};

}  // namespace ossa
