"""Python twin of ``csrc/engine/batch_builder``: the model's flat batch, built on the engine's side.

The scheduler says, per sequence, which positions run this step, which tokens those are (the
sequence's tokens, then its draft), its block table and how many tokens it samples;
``append_sequence`` turns one sequence into the flat arrays the forward pass reads, and
``build_batch`` does it for a whole step with one logits row per sampled token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .scheduler import SchedulerOutput


@dataclass
class Batch:
    """One step's work for the runner (as ``ossa::Batch``): sequence s owns tokens
    [seq_start[s], seq_start[s + 1]) and the blocks block_tables[block_table_start[s] : [s + 1]]."""

    token_ids: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    slot_mapping: list[int] = field(default_factory=list)
    seq_start: list[int] = field(default_factory=lambda: [0])
    context_len: list[int] = field(default_factory=list)
    block_table_start: list[int] = field(default_factory=lambda: [0])
    block_tables: list[int] = field(default_factory=list)
    logits_rows: list[int] = field(default_factory=list)
    state_slots: list[int] = field(default_factory=list)  # recurrent models' state slot per sequence


def append_sequence(
    b: Batch,
    block_size: int,
    tokens: Sequence[int],
    draft: Sequence[int],
    start: int,
    n: int,
    block_table: Sequence[int],
) -> None:
    """Appends positions [start, start + n) of one sequence: tokens[pos], or draft[pos - len(tokens)]
    past the end of tokens, written to the slots of block_table. Adds no logits rows."""
    n_tokens = len(tokens)
    assert start >= 0 and n > 0 and start + n <= n_tokens + len(draft)
    assert len(block_table) * block_size >= start + n
    for pos in range(start, start + n):
        b.token_ids.append(tokens[pos] if pos < n_tokens else draft[pos - n_tokens])
        b.positions.append(pos)
        b.slot_mapping.append(block_table[pos // block_size] * block_size + pos % block_size)
    b.seq_start.append(len(b.token_ids))
    b.context_len.append(start + n)
    b.block_tables.extend(block_table)
    b.block_table_start.append(len(b.block_tables))


def build_batch(so: SchedulerOutput, block_size: int) -> Batch:
    """The batch of one scheduled step: a forking sequence's n logits rows are all its last token; a
    verifying sequence has one at each of its k + 1 positions."""
    b = Batch()
    for si, (_rid, _child, num_computed, num_tokens, num_samples) in enumerate(so.seqs):
        append_sequence(
            b, block_size, so.tokens[si], so.drafts[si], num_computed, num_tokens, so.block_table(si)
        )
        if so.state_slots[si] >= 0:  # (recurrent models)
            b.state_slots.append(so.state_slots[si])
        last = len(b.token_ids) - 1
        if so.num_draft[si] > 0:
            b.logits_rows.extend(range(last - so.num_draft[si], last + 1))
        else:
            b.logits_rows.extend([last] * num_samples)
    return b
