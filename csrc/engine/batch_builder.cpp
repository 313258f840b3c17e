#include "engine/batch_builder.h"

#include "util/error.h"

namespace ossa {

void append_sequence(Batch& b, int32_t block_size, std::span<const int32_t> tokens,
                     std::span<const int32_t> draft, int32_t start, int32_t n,
                     std::span<const int32_t> block_table) {
  const int32_t n_tokens = static_cast<int32_t>(tokens.size());
  OSSA_ASSERT(start >= 0 && n > 0 && start + n <= n_tokens + static_cast<int32_t>(draft.size()));
  OSSA_ASSERT(static_cast<int64_t>(block_table.size()) * block_size >= start + n);
  for (int32_t pos = start; pos < start + n; ++pos) {
    b.token_ids.push_back(pos < n_tokens ? tokens[pos] : draft[pos - n_tokens]);
    b.positions.push_back(pos);
    b.slot_mapping.push_back(static_cast<int64_t>(block_table[pos / block_size]) * block_size +
                             pos % block_size);
  }
  b.seq_start.push_back(b.n_tokens());
  b.context_len.push_back(start + n);
  b.block_tables.insert(b.block_tables.end(), block_table.begin(), block_table.end());
  b.block_table_start.push_back(static_cast<int32_t>(b.block_tables.size()));
}

void build_batch(const SchedulerOutput& so, int32_t block_size, Batch& b) {
  b.clear();
  for (size_t si = 0; si < so.seqs.size(); ++si) {
    const ScheduledSeq& s = so.seqs[si];
    append_sequence(b, block_size, s.tokens, so.draft(si), s.num_computed, s.num_tokens,
                    so.block_table(si));
    if (s.state_slot >= 0) b.state_slots.push_back(s.state_slot);  // (recurrent models)
    const int32_t last = b.n_tokens() - 1;
    if (s.num_draft > 0) {
      for (int32_t k = s.num_draft; k >= 0; --k) b.logits_rows.push_back(last - k);
    } else {
      for (int32_t k = 0; k < s.num_samples; ++k) b.logits_rows.push_back(last);
    }
  }
}

}  // namespace ossa
