#include "model/runner.h"

#include <cstring>
#include <string>

#include "model/gemma3.h"
#include "model/gemma4.h"
#include "util/error.h"

namespace ossa {

ModelRunner::ModelRunner(std::shared_ptr<const Model> model, int num_blocks, int block_size,
                         int max_num_batched_tokens, KvType kv_type, int num_state_slots)
    : model_(std::move(model)),
      num_blocks_(num_blocks),
      block_size_(block_size),
      max_tokens_(max_num_batched_tokens) {
  if (!model_) throw InputError("ModelRunner: no model");
  if (num_blocks < 1 || block_size < 1 || max_num_batched_tokens < 1)
    throw InputError("ModelRunner: num_blocks, block_size and max_num_batched_tokens must be >= 1");
  const size_t n_slots = static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size);
  const size_t bytes = n_slots * kv_bytes_per_token(model_->config, kv_type);
  try {
    kv_ = LargeBuffer(bytes);
  } catch (const std::bad_alloc&) {
    throw InputError("ModelRunner: cannot allocate a KV cache of " + std::to_string(bytes) +
                     " bytes; lower kv_cache_memory_bytes");
  }
  state_.plan(*model_, num_blocks, block_size, max_num_batched_tokens, kv_.data(), kv_type);
  const int64_t state_floats = model_->config.state_floats();
  if (state_floats > 0) {
    if (num_state_slots < 1) throw InputError("ModelRunner: num_state_slots must be >= 1");
    try {  // (anonymous memory: zero, populated in the background as the K/V pool)
      states_ = LargeBuffer(static_cast<size_t>(state_floats) * num_state_slots * sizeof(float));
    } catch (const std::bad_alloc&) {
      throw InputError("ModelRunner: cannot allocate " + std::to_string(num_state_slots) +
                       " recurrent state slots of " + std::to_string(state_floats * 4) + " bytes");
    }
    identity_.resize(static_cast<size_t>(num_state_slots));
    slot_used_.assign(static_cast<size_t>(num_state_slots), 0);
    for (int i = 0; i < num_state_slots; ++i) identity_[static_cast<size_t>(i)] = i;
    state_.states = reinterpret_cast<float*>(states_.data());
    state_.n_state_slots = num_state_slots;
  }
}

size_t ModelRunner::state_bytes(const ModelConfig& c) {
  return static_cast<size_t>(c.state_floats()) * sizeof(float);
}

void ModelRunner::copy_state(int src, int dst) {
  if (state_.n_state_slots == 0) return;
  if (src < 0 || src >= state_.n_state_slots || dst < 0 || dst >= state_.n_state_slots)
    throw InputError("copy_state: state slot out of range");
  if (src == dst) return;
  const size_t n = static_cast<size_t>(model_->config.state_floats());
  float* states = reinterpret_cast<float*>(states_.data());
  std::memcpy(states + static_cast<size_t>(dst) * n, states + static_cast<size_t>(src) * n,
              n * sizeof(float));
}

size_t ModelRunner::kv_bytes_per_token(const ModelConfig& c, KvType kv_type) {
  return static_cast<size_t>(c.kv_elems_per_token()) * kv_type_bytes(kv_type);
}

void ModelRunner::copy_block(int src, int dst) {
  if (src < 0 || src >= num_blocks_ || dst < 0 || dst >= num_blocks_)
    throw InputError("copy_block: block id out of range");
  if (src == dst) return;
  const ModelConfig& c = model_->config;
  for (int l = 0; l < c.n_layer; ++l) {
    if (!c.has_kv(l))
      continue;  // (no K/V: a recurrent layer, a feed-forward alone, a layer
                 // reading another's)
    const size_t n = static_cast<size_t>(block_size_) * static_cast<size_t>(c.kv_dim(l)) *
                     kv_type_bytes(state_.kv_type);  // bytes a block
    for (void* layer : {state_.k_cache(l), state_.v_cache(l)}) {
      if (c.kv_shared() && layer == state_.k_cache(l) && state_.k_cache(l) == state_.v_cache(l))
        continue;  // (one region: copied as V)
      uint8_t* base = static_cast<uint8_t*>(layer);
      std::memcpy(base + static_cast<size_t>(dst) * n, base + static_cast<size_t>(src) * n, n);
    }
  }
}

void ModelRunner::validate(const Batch& b) const {
  auto fail = [](const std::string& what) { throw InputError("ModelRunner.forward: " + what); };
  const int n = b.n_tokens(), n_seqs = b.n_seqs();
  if (n < 1) fail("empty batch");
  if (n > max_tokens_)
    fail(std::to_string(n) + " tokens exceed max_num_batched_tokens " +
         std::to_string(max_tokens_));
  if (b.positions.size() != static_cast<size_t>(n) ||
      b.slot_mapping.size() != static_cast<size_t>(n))
    fail("positions and slot_mapping need one entry per token");
  if (n_seqs < 1 || b.seq_start.size() != static_cast<size_t>(n_seqs) + 1 ||
      b.block_table_start.size() != static_cast<size_t>(n_seqs) + 1)
    fail("seq_start and block_table_start need n_seqs + 1 entries");
  if (b.seq_start[0] != 0 || b.seq_start[n_seqs] != n)
    fail("seq_start must run from 0 to n_tokens");
  if (b.block_table_start[0] != 0 ||
      b.block_table_start[n_seqs] != static_cast<int>(b.block_tables.size()))
    fail("block_table_start must run from 0 to len(block_tables)");
  const int n_vocab = model_->config.n_vocab;
  const int64_t n_slots = static_cast<int64_t>(num_blocks_) * block_size_;
  for (int id : b.token_ids)
    if (id < 0 || id >= n_vocab) fail("token id " + std::to_string(id) + " out of range");
  for (int id : b.block_tables)
    if (id < 0 || id >= num_blocks_) fail("block id " + std::to_string(id) + " out of range");
  for (int s = 0; s < n_seqs; ++s) {
    if (b.seq_start[s + 1] < b.seq_start[s] || b.block_table_start[s + 1] < b.block_table_start[s])
      fail("seq_start and block_table_start must be non-decreasing");
    const int64_t capacity =
        static_cast<int64_t>(b.block_table_start[s + 1] - b.block_table_start[s]) * block_size_;
    if (b.context_len[s] < 0 || b.context_len[s] > capacity)
      fail("context_len of sequence " + std::to_string(s) + " exceeds its block table");
    for (int t = b.seq_start[s]; t < b.seq_start[s + 1]; ++t) {
      if (b.positions[t] < 0 || b.positions[t] >= b.context_len[s] || b.positions[t] >= n_slots)
        fail("position " + std::to_string(b.positions[t]) + " outside the sequence's context");
      if (b.slot_mapping[t] < 0 || b.slot_mapping[t] >= n_slots)
        fail("slot " + std::to_string(b.slot_mapping[t]) + " out of range");
    }
  }
  if (state_.n_state_slots > 0) {  // distinct slots in range (empty: slot s for sequence s)
    if (b.state_slots.empty()) {
      if (n_seqs > state_.n_state_slots)
        fail(std::to_string(n_seqs) + " sequences but " + std::to_string(state_.n_state_slots) +
             " recurrent state slots");
    } else {
      if (b.state_slots.size() != static_cast<size_t>(n_seqs))
        fail("state_slots needs one entry per sequence");
      bool ok = true;
      for (int slot : b.state_slots) {
        if (slot < 0 || slot >= state_.n_state_slots || slot_used_[static_cast<size_t>(slot)]) {
          ok = false;
          break;
        }
        slot_used_[static_cast<size_t>(slot)] = 1;
      }
      for (int slot : b.state_slots)
        if (slot >= 0 && slot < state_.n_state_slots) slot_used_[static_cast<size_t>(slot)] = 0;
      if (!ok) fail("a state slot out of range or used twice");
    }
  }
  int prev = -1;
  for (int r : b.logits_rows) {
    if (r <= prev || r >= n) fail("logits_rows must be ascending token indices");
    prev = r;
  }
}

void ModelRunner::forward(const Batch& batch, float* logits) {
  validate(batch);
  state_.state_slots = batch.state_slots.empty() ? identity_.data() : batch.state_slots.data();
  if (model_->config.gemma())
    gemma3_forward(state_, batch, logits);
  else if (model_->config.gemma4())
    gemma4_forward(state_, batch, logits);
  else
    llama_forward(state_, batch, logits);
}

}  // namespace ossa
