"""Python twin of ``csrc/engine/speculative``: speculative decoding that never changes a token.

A decoding child proposes up to k draft tokens; the scheduler runs [last token, d1..dk] as one chunk
with a logits row at each position, and row i is sampled exactly as plain decoding samples output
index ``num_output + i`` (the outputs plus d1..di for the penalties, the draw of that step). d(i+1) is
accepted only if it equals row i's draw, so every appended token is the one plain decoding appends.

Proposers: n-gram prompt lookup (the longest suffix of n in [prompt_lookup_min, prompt_lookup_max]
tokens that occurred earlier; the draft is what followed its most recent earlier occurrence), or a draft
model of the target's vocabulary (``ossa.reference.draft_model``).
``SpecControl``: how many drafts, from the child's own acceptance history (see the C++ header).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

METHODS = ("none", "ngram", "draft_model")
DEFAULT_DISABLE_BY_BATCH_SIZE = 8  # when not given (measured: docs/speculative.md)


@dataclass
class SpeculativeConfig:
    method: str = "none"
    num_speculative_tokens: int = 0
    prompt_lookup_min: int = 5
    prompt_lookup_max: int = 5
    disable_by_batch_size: int = DEFAULT_DISABLE_BY_BATCH_SIZE  # no drafts above this many running; 0: never
    draft_cost: float = 0.0  # method draft_model: a draft position's cost as a share of a target step

    @property
    def enabled(self) -> bool:
        return self.method != "none" and self.num_speculative_tokens > 0


def validate(c: SpeculativeConfig) -> None:
    """ValueError naming the field, as the C++ engine's InputError."""
    if c.method not in METHODS:
        raise ValueError(f"speculative_config method must be 'ngram' or 'draft_model', got '{c.method}'")
    if c.method == "none":
        return
    if not 1 <= c.num_speculative_tokens <= 64:
        raise ValueError(
            f"speculative_config num_speculative_tokens must be in [1, 64], got {c.num_speculative_tokens}"
        )
    if c.prompt_lookup_min < 1:
        raise ValueError(f"speculative_config prompt_lookup_min must be >= 1, got {c.prompt_lookup_min}")
    if c.prompt_lookup_max < c.prompt_lookup_min:
        raise ValueError(
            f"speculative_config prompt_lookup_max must be >= prompt_lookup_min ({c.prompt_lookup_min}), "
            f"got {c.prompt_lookup_max}"
        )
    if not 0.0 <= c.draft_cost <= 1.0:
        raise ValueError(f"speculative_config draft_cost must be in [0, 1], got {c.draft_cost}")
    if c.disable_by_batch_size != 0 and c.disable_by_batch_size < 2:
        raise ValueError(
            "speculative_config disable_by_batch_size must be >= 2 (or 0 / None: never), "
            f"got {c.disable_by_batch_size}"
        )


def ngram_propose(tokens: Sequence[int], min_n: int, max_n: int, k: int) -> list[int]:
    """Up to k tokens that followed the most recent earlier occurrence of the longest suffix of
    ``tokens`` of n in [min_n, max_n] tokens; [] when none matches."""
    length = len(tokens)
    if k < 1:
        return []
    toks = list(tokens)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        suffix = toks[length - n :]
        for i in range(length - n - 1, -1, -1):
            if toks[i : i + n] == suffix:
                return toks[i + n : min(i + n + k, length)]
    return []


SPEC_COST_RATIO = 12.0  # a step costs ~ a + b * tokens; a / b
SPEC_PROBE_INTERVAL = 16


@dataclass
class SpecControl:
    """One child's speculation length: the largest k <= k_max with alpha^k > B / (12 + B) + c, alpha
    its decayed acceptance (fixed point, 256 = one), B the step's decoding sequences, c a draft model's
    cost per position; k = 1 every 16th step while it is 0."""

    accepted: int = 0  # decayed accepted drafts
    rejected: int = 0  # decayed verifications that ended on a rejected draft
    idle: int = 0  # steps with k = 0 since the last probe

    def next(self, k_max: int, batch: int, draft_cost: float = 0.0) -> int:
        alpha = (float(self.accepted) + 256.0) / (float(self.accepted + self.rejected) + 384.0)
        worth = float(batch) / (SPEC_COST_RATIO + float(batch)) + draft_cost
        k = 0
        p = alpha
        while k < k_max and p > worth:
            k += 1
            p *= alpha
        if k == 0:
            self.idle += 1
            if self.idle >= SPEC_PROBE_INTERVAL:
                self.idle = 0
                k = 1
        return k

    def record(self, drafted: int, accepted: int) -> None:
        self.accepted += 256 * accepted - self.accepted // 8
        self.rejected += (256 if accepted < drafted else 0) - self.rejected // 8


@dataclass
class SpecStats:
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
