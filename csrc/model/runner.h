#pragma once
// ModelRunner: a model, its paged K/V pool and the work buffers of one step, all allocated up front.
//
// K/V pool (f32 or f16 elements: KvType), one allocation; slot = block_id * block_size + offset:
//
//   layer 0: K | slot 0: [n_head_kv * head_dim] | slot 1 | ... | slot n_slots-1 |
//            V | slot 0: [n_head_kv * head_dim] | slot 1 | ... | slot n_slots-1 |
//   layer 1: K | ...                                                            |
//            V | ...                                                            |
//
// A block is block_size consecutive slots in every layer's K and V; copy_block copies those.
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
  ModelRunner(std::shared_ptr<const Model> model, int num_blocks, int block_size,
              int max_num_batched_tokens, KvType kv_type = KvType::F32);

  // Runs one step. logits: [batch.logits_rows.size(), n_vocab]. Throws InputError for a malformed
  // batch (token ids, slots, block ids, positions or table bounds out of range).
  void forward(const Batch& batch, float* logits);

  // Copy-on-write for forked sequences: block dst gets block src's K/V in every layer.
  void copy_block(int src, int dst);

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
  // Zero pages mapped on first touch: constructing a runner with a GiB-sized cache costs nothing until
  // the cache is used (util/mmap.h).
  LargeBuffer kv_;
  ForwardState state_;
};

}  // namespace ossa
