"""Engine outputs -> ``RequestOutput``s: the one place where that happens, for ``LLM`` and the server.

Either engine (C++ or its twin) reports, per step, what each request produced since its last output
(``EngineOutput``: text and token deltas per completion, logprob entries, finish reasons, timings).
A ``RequestState`` folds those into the request's cumulative ``RequestOutput`` and, in delta mode
(streaming, vLLM's ``RequestOutputKind.DELTA``), also returns a ``RequestOutput`` holding only the
new pieces. The server renders OpenAI JSON from these, so offline and online share one path.

Logprobs take vLLM's shape, ``{token id: Logprob}`` per position: the actual token first, then the
top alternatives not equal to it, each with its rank in the top list. ``top_logprobs`` recovers the
top list in its order from such a dict.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from .input_processor import EngineRequest, ProcessedPrompt
from .outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from .sampling_params import SamplingParams

DecodeToken = Callable[[int], str]


def logprob_dicts(entries: Iterable[Any], decode: DecodeToken) -> list[dict[int, Logprob]]:
    """The engine's logprob entries as vLLM's {token id: Logprob}: the actual token first (its rank
    in the raw distribution), then the top alternatives (their rank: the place in the top list)."""
    out: list[dict[int, Logprob]] = []
    for e in entries:
        d: dict[int, Logprob] = {int(e.token): Logprob(float(e.logprob), int(e.rank), decode(e.token))}
        for rank, (tok, lp) in enumerate(e.top, start=1):
            if tok not in d:
                d[int(tok)] = Logprob(float(lp), rank, decode(tok))
        out.append(d)
    return out


def top_logprobs(d: dict[int, Logprob], num_top: int, top_n: int | None = None) -> list[tuple[int, Logprob]]:
    """The top list of one position (``num_top`` long, as the engine computed it), first ``top_n``
    entries when given: the alternatives at their ranks, the actual token in the one place left."""
    items = list(d.items())
    slots: list[tuple[int, Logprob] | None] = [None] * num_top
    for tok, lp in items[1:]:
        assert lp.rank is not None and 1 <= lp.rank <= num_top
        slots[lp.rank - 1] = (tok, lp)
    if None in slots:  # the actual token is in the top list, at the place its alternatives leave
        slots[slots.index(None)] = items[0]
    top = [s for s in slots if s is not None]
    return top if top_n is None else top[:top_n]


def trim_logprobs(d: dict[int, Logprob], num_top: int, top_n: int) -> dict[int, Logprob]:
    """The dict the engine would have given with ``top_n`` alternatives instead of ``num_top``."""
    first = next(iter(d.items()))
    kept = dict(top_logprobs(d, num_top, top_n))
    return {first[0]: first[1], **{t: lp for t, lp in kept.items() if t != first[0]}}


class RequestState:
    """One request's progress: its cumulative ``RequestOutput`` (``output``)."""

    def __init__(
        self,
        request_id: str,
        prompt: ProcessedPrompt,
        params: SamplingParams,
        decode: DecodeToken,
        eos_token_id: int | None = None,
    ) -> None:
        self.params = params
        self.decode = decode
        # vLLM's stop_reason: the stop string or stop token id that ended a completion, None when
        # it ended on the tokenizer's EOS (the model's other end ids, e.g. Llama 3's <|eom_id|>,
        # are stop token ids there, so they are reported).
        self.eos_token_id = None if params.ignore_eos else eos_token_id
        self.want_logprobs = params.logprobs is not None
        want = self.want_logprobs
        self.output = RequestOutput(
            request_id=request_id,
            prompt=prompt.text,
            prompt_token_ids=prompt.token_ids,
            prompt_logprobs=None,
            outputs=[
                CompletionOutput(i, "", [], 0.0 if want else None, [] if want else None)
                for i in range(params.n)
            ],
            finished=False,
            metrics=RequestMetrics(arrival_time=time.time()),
        )

    @property
    def num_generated_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.output.outputs)

    def update(self, delta: Any) -> RequestOutput:
        """Applies one engine output; returns a ``RequestOutput`` with only what it brought (the
        completions it touched, their new text, tokens and logprobs). ``output`` is updated too."""
        out = self.output
        new = RequestOutput(
            request_id=out.request_id,
            prompt=out.prompt,
            prompt_token_ids=out.prompt_token_ids,
            prompt_logprobs=None,
            outputs=[],
            finished=False,
            metrics=out.metrics,
        )
        if delta.error:
            out.finished = True
            out.extra["error"] = new.extra["error"] = delta.error
            for c in out.outputs:
                if c.finish_reason is None:
                    c.finish_reason = "error"
        if delta.has_prompt_logprobs:
            out.prompt_logprobs = new.prompt_logprobs = [
                None,
                *logprob_dicts(delta.prompt_logprobs, self.decode),
            ]
        for d in delta.completions:
            c = out.outputs[d.index]
            piece = CompletionOutput(d.index, d.text, list(d.token_ids), None, None)
            c.token_ids.extend(piece.token_ids)
            c.text += d.text
            if c.logprobs is not None:
                piece.logprobs = logprob_dicts(d.logprobs, self.decode)
                piece.cumulative_logprob = c.cumulative_logprob = float(d.cumulative_logprob)
                c.logprobs.extend(piece.logprobs)
            if d.finish_reason:
                c.finish_reason = d.finish_reason
                if d.stop_str:
                    c.stop_reason = d.stop_str
                elif d.finish_reason == "stop" and d.stop_token >= 0 and d.stop_token != self.eos_token_id:
                    c.stop_reason = int(d.stop_token)
                piece.finish_reason, piece.stop_reason = c.finish_reason, c.stop_reason
            new.outputs.append(piece)
        out.num_cached_tokens = new.num_cached_tokens = int(delta.num_cached_tokens)
        m = out.metrics
        assert m is not None
        if delta.arrival_time:
            m.arrival_time = delta.arrival_time
        if delta.first_scheduled_time:
            m.first_scheduled_time = delta.first_scheduled_time
        if delta.first_token_time:
            m.first_token_time = delta.first_token_time
        m.spec_num_drafts = int(getattr(delta, "num_drafts", 0))
        m.spec_num_draft_tokens = int(getattr(delta, "num_draft_tokens", 0))
        m.spec_num_accepted_tokens = int(getattr(delta, "num_accepted_tokens", 0))
        if delta.finished:
            out.finished = True
            m.finished_time = delta.finished_time or time.time()
            m.last_token_time = m.finished_time
        else:
            m.last_token_time = time.time()
        new.finished = out.finished
        return new


def merge_delta(into: RequestOutput, later: RequestOutput) -> RequestOutput:
    """Folds the delta ``later`` into the earlier delta ``into`` of the same request (a consumer that
    fell behind gets one output for the steps it missed, as vLLM's collector merges them): each
    completion's text, tokens and logprobs appended, the later finish, counts and errors kept."""
    pieces = {c.index: c for c in into.outputs}
    for c in later.outputs:
        piece = pieces.get(c.index)
        if piece is None:
            into.outputs.append(c)
            pieces[c.index] = c
            continue
        piece.text += c.text
        piece.token_ids.extend(c.token_ids)
        if piece.logprobs is not None and c.logprobs is not None:
            piece.logprobs.extend(c.logprobs)
        elif c.logprobs is not None:
            piece.logprobs = c.logprobs
        if c.cumulative_logprob is not None:
            piece.cumulative_logprob = c.cumulative_logprob
        if c.finish_reason is not None:
            piece.finish_reason, piece.stop_reason = c.finish_reason, c.stop_reason
    if into.prompt_logprobs is None:
        into.prompt_logprobs = later.prompt_logprobs
    into.extra.update(later.extra)
    into.num_cached_tokens = later.num_cached_tokens
    into.finished = later.finished
    into.metrics = later.metrics
    return into


class OutputProcessor:
    """Routes engine outputs to their requests' states (the requests this caller added)."""

    def __init__(self, decode: DecodeToken, eos_token_id: int | None = None) -> None:
        self.decode = decode
        self.eos_token_id = eos_token_id  # reported as stop_reason None (vLLM's)
        self.states: dict[str, RequestState] = {}

    def add_request(self, request: EngineRequest) -> RequestState:
        state = RequestState(
            request.request_id, request.prompt, request.params, self.decode, self.eos_token_id
        )
        self.states[request.request_id] = state
        return state

    def process(self, engine_outputs: Iterable[Any]) -> list[tuple[RequestState, RequestOutput]]:
        """Each output of a known request -> (its state, the delta ``RequestOutput``); finished
        requests are forgotten (their state's ``output`` stays final)."""
        out = []
        for eo in engine_outputs:
            state = self.states.get(eo.request_id)
            if state is None:
                continue
            new = state.update(eo)
            if new.finished:
                del self.states[eo.request_id]
            out.append((state, new))
        return out

    def forget(self, request_id: str) -> None:
        self.states.pop(request_id, None)
