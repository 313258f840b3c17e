"""Turning requests into engine calls and engine deltas into ``RequestOutput``s (shared by ``LLM``,
the async engine and the server)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from .sampling_params import SamplingParams


def generation_params(
    params: SamplingParams,
    *,
    prompt_len: int,
    max_model_len: int,
    eos_token_ids: Sequence[int],
    vocab_size: int,
    backend: str,
    priority: int = 0,
    constraints: Any = None,
) -> Any:
    """Builds the engine's per-request parameters; raises ValueError for anything out of range.
    A request with ``structured_outputs`` registers its grammar with ``constraints`` (the engine's
    ``ossa.structured.ConstraintHost``); whoever fails to add the request releases ``g.constraint``."""
    params.check_vocab(vocab_size)
    if isinstance(priority, bool) or not isinstance(priority, int) or not -(1 << 31) <= priority < 1 << 31:
        raise ValueError(f"priority must be an integer in [-2**31, 2**31-1], got {priority!r}")
    if prompt_len + 1 > max_model_len:
        raise ValueError(
            f"the prompt has {prompt_len} tokens; with at least one output token that exceeds "
            f"max_model_len={max_model_len}"
        )
    room = max_model_len - prompt_len
    max_tokens = room if params.max_tokens is None else min(int(params.max_tokens), room)
    if backend == "cpp":
        from ._native import core

        g = core.GenerationParams()
        g.sampling = params.to_core(eos_token_ids=eos_token_ids)
    else:
        from .reference.engine import GenerationParams

        g = GenerationParams()
        g.sampling = params.to_reference(eos_token_ids=eos_token_ids)
    g.max_tokens = max_tokens
    g.n = int(params.n)
    g.priority = int(priority)
    g.stop = list(params.stop_strings)
    g.include_stop_str_in_output = bool(params.include_stop_str_in_output)
    g.skip_special_tokens = bool(params.skip_special_tokens)
    g.prompt_logprobs = -1 if params.prompt_logprobs is None else int(params.prompt_logprobs)
    if params.structured_outputs is not None:
        if constraints is None:
            raise ValueError("this engine takes no structured_outputs (no constraint host)")
        g.constraint = constraints.register(params.structured_outputs, int(params.n))
    return g


def logprob_dicts(entries: Any, decode: Any, top_n: int | None = None) -> list[dict[int, Logprob]]:
    """The engine's logprob entries as vLLM's {token id: Logprob}: the actual token first, then the top
    alternatives (the first ``top_n`` of them, when given)."""
    out: list[dict[int, Logprob]] = []
    for e in entries:
        d: dict[int, Logprob] = {int(e.token): Logprob(float(e.logprob), int(e.rank), decode(e.token))}
        top = e.top if top_n is None else list(e.top)[:top_n]
        for rank, (tok, lp) in enumerate(top, start=1):
            if tok not in d:
                d[int(tok)] = Logprob(float(lp), rank, decode(tok))
        out.append(d)
    return out


@dataclass
class RequestTracker:
    """Accumulates an engine's deltas for one request into a ``RequestOutput``."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    decode_token: Any
    output: RequestOutput = field(init=False)

    def __post_init__(self) -> None:
        n = self.params.n
        want_lp = self.params.logprobs is not None
        self.output = RequestOutput(
            request_id=self.request_id,
            prompt=self.prompt,
            prompt_token_ids=self.prompt_token_ids,
            prompt_logprobs=None,
            outputs=[
                CompletionOutput(i, "", [], 0.0 if want_lp else None, [] if want_lp else None)
                for i in range(n)
            ],
            finished=False,
            metrics=RequestMetrics(arrival_time=time.time()),
        )

    def update(self, delta: Any) -> RequestOutput:
        """Applies one engine output; returns the (mutated) cumulative ``RequestOutput``."""
        out = self.output
        if delta.error:
            out.finished = True
            out.extra["error"] = delta.error
            for c in out.outputs:
                if c.finish_reason is None:
                    c.finish_reason = "error"
        if delta.has_prompt_logprobs:
            out.prompt_logprobs = [None, *logprob_dicts(delta.prompt_logprobs, self.decode_token)]
        for d in delta.completions:
            c = out.outputs[d.index]
            c.token_ids.extend(d.token_ids)
            c.text += d.text
            if c.logprobs is not None:
                c.logprobs.extend(logprob_dicts(d.logprobs, self.decode_token))
                c.cumulative_logprob = float(d.cumulative_logprob)
            if d.finish_reason:
                c.finish_reason = d.finish_reason
                if d.stop_str:
                    c.stop_reason = d.stop_str
                elif d.finish_reason == "stop" and d.stop_token >= 0:
                    c.stop_reason = int(d.stop_token)
        out.num_cached_tokens = int(delta.num_cached_tokens)
        m = out.metrics
        assert m is not None
        if delta.arrival_time:
            m.arrival_time = delta.arrival_time
        if delta.first_scheduled_time:
            m.first_scheduled_time = delta.first_scheduled_time
        if delta.first_token_time:
            m.first_token_time = delta.first_token_time
        if delta.finished:
            out.finished = True
            m.finished_time = delta.finished_time or time.time()
            m.last_token_time = m.finished_time
        else:
            m.last_token_time = time.time()
        return out
