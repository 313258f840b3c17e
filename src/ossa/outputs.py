"""Results of generation, shaped like vLLM's so that scripts port with only their import changed."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Logprob:
    """The log-probability of one token, with its rank in the raw model distribution (1 = most likely)."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


# For each generated (or prompt) position: token id -> Logprob, the sampled/actual token first.
SampleLogprobs = list[dict[int, Logprob]]
PromptLogprobs = list[dict[int, Logprob] | None]


@dataclass
class CompletionOutput:
    """One of the ``n`` completions of a request."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: SampleLogprobs | None
    finish_reason: str | None = None  # "stop", "length", "abort"
    stop_reason: int | str | None = None  # the stop string or stop token id that ended it

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    """Wall-clock times (``time.time()`` seconds) of a request's life, and what speculative decoding
    did for it (all its completions together)."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None
    spec_num_drafts: int = 0  # verification steps (one per completion step that had a draft)
    spec_num_draft_tokens: int = 0  # draft tokens verified
    spec_num_accepted_tokens: int = 0  # of which accepted

    @property
    def spec_acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens; None before any draft."""
        d = self.spec_num_draft_tokens
        return self.spec_num_accepted_tokens / d if d else None

    @property
    def spec_mean_accepted_length(self) -> float | None:
        """Tokens a verification step appended on average (1 + accepted drafts); None before any."""
        n = self.spec_num_drafts
        return 1.0 + self.spec_num_accepted_tokens / n if n else None


@dataclass
class RequestOutput:
    """The result (or, while streaming, the progress) of one request."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: PromptLogprobs | None
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics | None = None
    num_cached_tokens: int = 0
    extra: dict = field(default_factory=dict)
