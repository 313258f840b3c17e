"""Python twin of ``csrc/engine/output_processor``: what a sampled token becomes for the caller.

Per completion of a request: the incremental detokenizer and the decoded text (UTF-8 bytes, as C++
keeps it, so stop strings and their hold-back cut at the same byte offsets), stop strings looked for
in the only window the new text can complete, logprob entries, the finish reason, and the
``CompletionDelta`` a caller receives. ``reference.engine`` calls ``append_token`` once per sampled
token and ``take_delta`` once per output, as the C++ engine does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import sampler as ref_sampler
from .tokenizer import Detokenizer


@dataclass
class TokenLogprobs:
    token: int = -1
    logprob: float = 0.0
    rank: int = 0  # 1 + the number of tokens with a strictly larger raw logit
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class CompletionDelta:
    index: int = 0
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    cumulative_logprob: float = 0.0
    finish_reason: str = ""  # empty while running; "stop", "length", "abort" or "error" (failed in the loop)
    stop_str: str = ""
    stop_token: int = -1


@dataclass
class StopStrings:
    """A request's stop strings, as its completions check them."""

    strings: list[bytes] = field(default_factory=list)
    include_in_output: bool = False
    min_tokens: int = 0  # as vLLM: they count only once more tokens than this are out

    @property
    def max_len(self) -> int:
        return max((len(s) for s in self.strings), default=0)

    @classmethod
    def of(cls, stop: list[str], include: bool, min_tokens: int) -> StopStrings:
        return cls([s.encode("utf-8") for s in stop], include, min_tokens)


@dataclass
class CompletionState:
    detok: Detokenizer
    text: bytes = b""  # decoded text, truncated at a stop string
    emitted: int = 0  # bytes of text already reported
    new_tokens: list[int] = field(default_factory=list)
    new_logprobs: list[TokenLogprobs] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    cumulative_logprob: float = 0.0
    finished: bool = False
    reported_finish: bool = False
    dirty: bool = False  # something to report
    finish_reason: str = ""
    stop_str: bytes = b""
    stop_token: int = -1


def utf8_floor(s: bytes, limit: int) -> int:
    """Largest prefix length of s (<= limit) that ends on a UTF-8 character boundary."""
    if limit >= len(s):
        return len(s)
    while limit > 0 and (s[limit] & 0xC0) == 0x80:
        limit -= 1
    return limit


def append_token(c: CompletionState, stops: StopStrings, token: int, logprob: float | None) -> bool:
    """Appends a sampled token and detokenizes it; True when a stop string ended the completion."""
    c.new_tokens.append(token)
    c.output_tokens.append(token)
    c.dirty = True
    if logprob is not None:
        c.cumulative_logprob += float(np.float32(logprob))
    old_len = len(c.text)
    c.text += c.detok.push(token).encode("utf-8")
    max_len = stops.max_len
    if max_len == 0 or len(c.output_tokens) <= stops.min_tokens or len(c.text) == old_len:
        return False
    # A stop string can only newly appear in a window ending in the new text.
    start = old_len - (max_len - 1) if old_len >= max_len - 1 else 0
    best, best_stop = -1, b""
    for s in stops.strings:
        p = c.text.find(s, start)
        if p >= 0 and (best < 0 or p < best):
            best, best_stop = p, s
    if best < 0:
        return False
    c.stop_str = best_stop
    c.text = c.text[: best + len(best_stop) if stops.include_in_output else best]
    c.emitted = min(c.emitted, len(c.text))
    finish_completion(c, "stop")
    return True


def finish_completion(c: CompletionState, reason: str) -> None:
    """Ends a completion; the detokenizer's held bytes are flushed unless a stop string cut the text."""
    c.finished = True
    c.dirty = True
    c.finish_reason = reason
    if reason != "stop" or not c.stop_str:
        c.text += c.detok.flush().encode("utf-8")


def take_delta(c: CompletionState, stops: StopStrings, index: int) -> CompletionDelta:
    """The completion's delta since its last one (text that could still start a stop string held)."""
    d = CompletionDelta(index=index, token_ids=c.new_tokens, logprobs=c.new_logprobs)
    c.new_tokens, c.new_logprobs = [], []
    limit = len(c.text)
    hold = stops.max_len - 1
    if not c.finished and hold > 0:
        limit = utf8_floor(c.text, len(c.text) - hold if len(c.text) >= hold else 0)
    if limit > c.emitted:
        d.text = c.text[c.emitted : limit].decode("utf-8")
        c.emitted = limit
    d.cumulative_logprob = c.cumulative_logprob
    if c.finished and not c.reported_finish:
        d.finish_reason = c.finish_reason
        d.stop_str = c.stop_str.decode("utf-8")
        d.stop_token = c.stop_token
        c.reported_finish = True
    c.dirty = False
    return d


def token_logprobs(r: ref_sampler.SampleResult, token: int, row: np.ndarray) -> TokenLogprobs:
    """The logprob entry of ``token`` from its sampler result and its raw logits row."""
    rank = int(np.count_nonzero(row > row[token])) + 1
    return TokenLogprobs(token, r.logprob, rank, list(zip(r.top_ids, r.top_logprobs, strict=True)))
