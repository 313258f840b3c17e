#pragma once
// One step's work for the model runner, flattened: the engine builds it from the scheduler's output
// (engine/batch_builder.h), the forward pass reads it.
//
// Tokens of several sequences sit back to back; sequence s owns tokens [seq_start[s],
// seq_start[s+1]). Its K/V lives in the blocks block_tables[block_table_start[s] ..
// block_table_start[s+1]), and the token at flat index t writes its K/V into slot slot_mapping[t] =
// block_id * block_size + offset. After this step sequence s has context_len[s] tokens of K/V
// (cached ones plus this chunk), and the chunk's tokens attend causally to everything before them.
// A model with recurrent layers (Qwen3.5's delta-net) keeps sequence s's state in slot
// state_slots[s] (distinct within a step; empty: slot s), from zero when its chunk starts at
// position 0.
#include <cstdint>
#include <vector>

namespace ossa {

struct Batch {
  std::vector<int32_t> token_ids;          // [n_tokens]
  std::vector<int32_t> positions;          // [n_tokens]
  std::vector<int64_t> slot_mapping;       // [n_tokens]
  std::vector<int32_t> seq_start;          // [n_seqs + 1]
  std::vector<int32_t> context_len;        // [n_seqs]
  std::vector<int32_t> block_table_start;  // [n_seqs + 1]
  std::vector<int32_t> block_tables;       // concatenated block ids
  std::vector<int32_t> logits_rows;        // flat token indices whose logits are wanted, ascending
  std::vector<int32_t> state_slots;        // [n_seqs] or empty (recurrent models' state slots)

  int n_tokens() const { return static_cast<int>(token_ids.size()); }
  int n_seqs() const { return static_cast<int>(context_len.size()); }
  void clear() {
    token_ids.clear();
    positions.clear();
    slot_mapping.clear();
    seq_start.assign(1, 0);
    context_len.clear();
    block_table_start.assign(1, 0);
    block_tables.clear();
    logits_rows.clear();
    state_slots.clear();
  }
};

}  // namespace ossa
