"""Python twin of ``csrc/engine/logits_plan``: which logits rows a step's forward computes.

``build_batch`` lays out one logits row per sampled token (a fork's n samples all name its last
token, a verifying sequence one row per position). The runner computes distinct, ascending rows, and
a request that asked for prompt logprobs also wants a row at each prompt position it computes this
step (prompt token p + 1's logprob is read at position p). The plan rewrites the batch's
``logits_rows`` into the forward's rows and keeps the mapping both ways.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .batch_builder import Batch
from .scheduler import SchedulerOutput


class LogitsPlan:
    def __init__(self) -> None:
        self.remapped = False
        self.has_prompt_rows = False
        # per forward row: (request key, prompt position its logprob is of), or (-1, -1): a sampling row
        self.prompt_rows: list[tuple[int, int]] = []
        self._sample_src: list[int] = []  # the forward row each sampling row reads

    def plan(self, so: SchedulerOutput, prompt_len: Sequence[int], b: Batch) -> None:
        """Rewrites ``b.logits_rows``; prompt_len[si] is the prompt length of sequence si's request
        when it wants prompt logprobs, else 0."""
        self.has_prompt_rows = any(seq[2] < n for seq, n in zip(so.seqs, prompt_len, strict=True))
        has_fork = any(seq[4] > 1 and nd == 0 for seq, nd in zip(so.seqs, so.num_draft, strict=True))
        self.remapped = self.has_prompt_rows or has_fork
        self.prompt_rows = []
        if not self.remapped:
            return
        sample_rows = b.logits_rows
        b.logits_rows = []
        self._sample_src = []
        next_sample = 0
        for si, (rid, _child, num_computed, num_tokens, num_samples) in enumerate(so.seqs):
            start = b.seq_start[si]
            for j in range(num_tokens):
                if num_computed + j + 1 >= prompt_len[si]:
                    break
                b.logits_rows.append(start + j)
                self.prompt_rows.append((rid, num_computed + j + 1))
            # Distinct forward rows: one shared by a fork's n samples, or one per verified position.
            verifying = so.num_draft[si] > 0
            for _ in range(num_samples if verifying else min(num_samples, 1)):
                b.logits_rows.append(sample_rows[next_sample])
                self.prompt_rows.append((-1, -1))
                for _ in range(1 if verifying else num_samples):
                    self._sample_src.append(len(b.logits_rows) - 1)
                    next_sample += 1

    def sample_logits(self, logits: np.ndarray) -> np.ndarray:
        """The sampling rows' logits, one per sampled token."""
        return logits[self._sample_src] if self.remapped else logits
