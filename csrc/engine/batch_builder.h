#pragma once
// The model's Batch, built on the engine's side from what the scheduler decided. The scheduler
// says, per sequence, which positions run this step (num_computed .. num_computed + num_tokens),
// which tokens those are (the sequence's tokens, then its draft), its block table and how many
// logits rows it samples; this file turns that into the flat arrays the forward pass reads (token
// ids, positions, slot mapping, sequence and block-table offsets, logits rows).
//
// append_sequence is the reusable piece: anything that runs a model over paged sequences (the
// target model here, a draft model for speculative decoding) calls it once per sequence into a
// Batch it keeps across steps, so the buffers keep their capacity and a step allocates nothing.
#include <cstdint>
#include <span>

#include "model/batch.h"
#include "scheduler/scheduler.h"

namespace ossa {

// Appends one sequence's chunk to b: positions [start, start + n), whose tokens are tokens[pos],
// or draft[pos - tokens.size()] past the end of tokens; its K/V goes to the blocks of
// block_table (block_size tokens each), which must cover start + n positions. Adds no logits
// rows: the caller pushes those (flat indices, ascending) into b.logits_rows.
void append_sequence(Batch& b, int32_t block_size, std::span<const int32_t> tokens,
                     std::span<const int32_t> draft, int32_t start, int32_t n,
                     std::span<const int32_t> block_table);

// The batch of one scheduled step, as the scheduler's step protocol reads it: every sequence of
// so in order, with one logits row per sampled token (a forking sequence's n rows are all its
// last token; a verifying sequence has a row at each of its k + 1 positions). b is cleared first.
void build_batch(const SchedulerOutput& so, int32_t block_size, Batch& b);

}  // namespace ossa
