"""Python twin of ``csrc/scheduler/request``: what the engine asks for and the scheduler's
per-sequence state.

A request with n > 1 starts as one sequence (child 0) holding the prompt; the step that finishes its
prefill samples n tokens from the same logits row and the request forks into n children that share
the prompt's blocks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple


class ContractError(ValueError):
    """Twin of ``ossa::ContractError`` (``csrc/util/error.h``): a caller broke the engine's or the
    scheduler's contract (user input is validated once, by ``ossa.input_processor``)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"internal contract: {what}")


@dataclass
class Request:
    """A generation request as the scheduler sees it (token ids only)."""

    id: int
    prompt: list[int]
    max_tokens: int = 16
    min_tokens: int = 0
    eos_token_ids: list[int] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    n: int = 1
    priority: int = 0  # lower runs first under the priority policy
    cache_salt: int = 0  # extra key of every block hash


class FinishEvent(NamedTuple):
    """A child that finished in update(); equal to the C++ binding's tuple."""

    request_id: int
    child: int
    reason: str  # "stop" or "length"
    stop_token: int  # the EOS or stop id that ended it, else -1
    request_done: bool  # it was the request's last unfinished child


class SeqStatus(enum.Enum):
    WAITING = 0
    RUNNING = 1
    FINISHED = 2


@dataclass
class Sequence:
    """One child of a request: its tokens and how many of them have K/V in the cache."""

    request: int = -1  # slot in the scheduler's request table
    child: int = 0
    generation: int = 0  # bumped whenever the slot is reused
    status: SeqStatus = SeqStatus.FINISHED
    pending_fork: bool = False
    tokens: list[int] = field(default_factory=list)
    num_prompt_tokens: int = 0
    num_computed: int = 0
    num_output: int = 0
    # Speculative decoding: tokens proposed to follow ``tokens``, verified at the next decoding step.
    draft: list[int] = field(default_factory=list)
    # Recurrent state (num_state_slots > 0): the slot it holds while running (-1 otherwise), and, until
    # it forks, the slots taken for its n - 1 children.
    state_slot: int = -1
    reserved_slots: list[int] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)
