"""``ossa.SamplingParams``: how to pick each next token, with vLLM's names and defaults."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .structured import StructuredOutputsParams

MAX_LOGPROBS = 20  # the C++ sampler's k_max_logprobs
_F32_MAX = 3.4028234663852886e38  # float32's largest finite value and smallest normal one
_F32_MIN_NORMAL = 1.1754943508222875e-38
_U64 = 1 << 64
_I32_MAX = (1 << 31) - 1  # the C++ engine's int32 fields


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if math.isnan(value):
        raise ValueError(f"{name} must not be NaN")
    return float(value)


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return value


def _token_ids(name: str, value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must be a list of token ids, got {value!r}")
    ids = [_integer(f"{name}[{i}]", v) for i, v in enumerate(value)]
    for i, v in enumerate(ids):
        if v < 0:
            raise ValueError(f"{name}[{i}] must be a token id >= 0, got {v}")
    return ids


class RequestOutputKind(enum.IntEnum):
    """What ``AsyncLLM.generate`` yields (vLLM's): the whole output so far at every step, only what
    each step added, or only the final output. ``LLM.generate`` returns final outputs either way."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@dataclass
class SamplingParams:
    """Sampling parameters for one request (vLLM's names and defaults).

    The sampler applies them in this order: ``allowed_token_ids`` and ``logit_bias`` ->
    ``min_tokens`` (EOS and ``stop_token_ids`` masked until reached) -> ``repetition_penalty``
    (prompt and output tokens) -> ``frequency_penalty`` and ``presence_penalty`` (output tokens)
    -> greedy if ``temperature`` is 0 (below 1e-5) -> ``temperature`` -> ``top_k`` -> ``top_p``
    -> ``min_p`` -> a draw from a Philox stream keyed by (``seed``, request, step). Ties go to the
    lowest token id.

    ``structured_outputs`` (a ``StructuredOutputsParams``) constrains the output to a JSON schema,
    a regex, a choice list or a grammar; its mask comes before every stage above.

    ``bad_words`` (vLLM's): words that must not be generated, each tokenized alone and after a
    space; a word's last token is masked whenever the output ends with its other tokens.

    ``truncate_prompt_tokens`` (vLLM's) keeps only the prompt's last k tokens; -1 keeps as many as
    leave room for one output token.

    ``logprobs`` / ``prompt_logprobs`` report raw logprobs (vLLM's default): log_softmax of the
    model's logits before any of the transforms above, plus the top N alternatives (N <= 20).
    Out-of-range values raise ValueError naming the field and its range.
    """

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    include_stop_str_in_output: bool = False
    structured_outputs: StructuredOutputsParams | None = None
    truncate_prompt_tokens: int | None = None  # keep the prompt's last k tokens (-1: all that fit)
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE  # what AsyncLLM.generate yields
    stop_strings: list[str] = field(init=False, repr=False, default_factory=list)

    def __post_init__(self) -> None:
        if _integer("n", self.n) < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        for name, lo, hi in [("presence_penalty", -2.0, 2.0), ("frequency_penalty", -2.0, 2.0)]:
            v = _number(name, getattr(self, name))
            if not lo <= v <= hi:
                raise ValueError(f"{name} must be in [{lo}, {hi}], got {v}")
        rp = _number("repetition_penalty", self.repetition_penalty)
        if not _F32_MIN_NORMAL <= rp <= _F32_MAX:  # the sampler applies it in float32
            raise ValueError(
                f"repetition_penalty must be in [1.18e-38, 3.4e38] (a normal float32 > 0), got {rp}"
            )
        t = _number("temperature", self.temperature)
        if not 0.0 <= t < math.inf:
            raise ValueError(f"temperature must be finite and >= 0, got {t}")
        tp = _number("top_p", self.top_p)
        if not 0.0 < tp <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {tp}")
        if not -1 <= _integer("top_k", self.top_k) <= _I32_MAX or self.top_k == 0:
            raise ValueError(f"top_k must be -1 (disabled) or >= 1 and <= 2**31-1, got {self.top_k}")
        mp = _number("min_p", self.min_p)
        if not 0.0 <= mp <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {mp}")
        if self.seed is not None and not -(1 << 63) <= _integer("seed", self.seed) < _U64:
            raise ValueError(f"seed must be in [-2**63, 2**64), got {self.seed}")
        if self.stop is None:
            self.stop_strings = []
        elif isinstance(self.stop, str):
            self.stop_strings = [self.stop]
        elif isinstance(self.stop, Sequence) and all(isinstance(s, str) for s in self.stop):
            self.stop_strings = list(self.stop)
        else:
            raise ValueError(f"stop must be a string or a list of strings, got {self.stop!r}")
        for i, s in enumerate(self.stop_strings):
            if s == "":
                raise ValueError("stop must not contain empty strings")
            try:
                s.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(
                    f"stop[{i}] is not valid Unicode text ({e.reason} at index {e.start})"
                ) from None
        self.stop_token_ids = _token_ids("stop_token_ids", self.stop_token_ids)
        if self.max_tokens is not None and _integer("max_tokens", self.max_tokens) < 1:
            raise ValueError(f"max_tokens must be >= 1 (or None), got {self.max_tokens}")
        if not 0 <= _integer("min_tokens", self.min_tokens) <= _I32_MAX:
            raise ValueError(f"min_tokens must be >= 0 and <= 2**31-1, got {self.min_tokens}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens must be <= max_tokens ({self.max_tokens}), got {self.min_tokens}")
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None and not 0 <= _integer(name, v) <= MAX_LOGPROBS:
                raise ValueError(f"{name} must be None or in [0, {MAX_LOGPROBS}], got {v}")
        for name in ("ignore_eos", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, dict):
                raise ValueError(f"logit_bias must be a dict of token id -> bias, got {self.logit_bias!r}")
            bias: dict[int, float] = {}
            for k, v in self.logit_bias.items():
                key = int(k) if isinstance(k, str) and k.lstrip("-").isdigit() else k  # JSON keys
                if _integer("logit_bias key", key) < 0:
                    raise ValueError(f"logit_bias keys must be token ids >= 0, got {key}")
                b = _number(f"logit_bias[{key}]", v)
                if not -100.0 <= b <= 100.0:
                    raise ValueError(f"logit_bias[{key}] must be in [-100, 100], got {b}")
                bias[key] = b
            self.logit_bias = bias
        so = self.structured_outputs
        if so is not None and not isinstance(so, StructuredOutputsParams):
            if not isinstance(so, dict):
                raise ValueError(f"structured_outputs must be a StructuredOutputsParams, got {so!r}")
            try:
                self.structured_outputs = StructuredOutputsParams(**so)
            except TypeError as e:
                raise ValueError(f"structured_outputs: {e}") from None
        if self.truncate_prompt_tokens is not None:
            t = _integer("truncate_prompt_tokens", self.truncate_prompt_tokens)
            if t < 1 and t != -1:
                raise ValueError(f"truncate_prompt_tokens must be None, -1 or >= 1, got {t}")
        try:
            self.output_kind = RequestOutputKind(self.output_kind)
        except ValueError:
            raise ValueError(
                f"output_kind must be a RequestOutputKind (0, 1 or 2), got {self.output_kind!r}"
            ) from None
        if self.bad_words is not None:
            if isinstance(self.bad_words, str) or not isinstance(self.bad_words, Sequence):
                raise ValueError(f"bad_words must be a list of strings, got {self.bad_words!r}")
            for w in self.bad_words:
                if not isinstance(w, str) or not w.strip():
                    raise ValueError(f"bad_words must hold non-empty strings, got {w!r}")
            self.bad_words = list(self.bad_words)
        if self.allowed_token_ids is not None:
            self.allowed_token_ids = _token_ids("allowed_token_ids", self.allowed_token_ids)
            if not self.allowed_token_ids:
                raise ValueError("allowed_token_ids must not be empty (use None to allow all)")

    @property
    def greedy(self) -> bool:
        """True when the sampler picks the most likely token (temperature below 1e-5)."""
        return self.temperature < 1e-5

    def check_vocab(self, vocab_size: int) -> None:
        """Raise ValueError if a token id named here is outside ``[0, vocab_size)``."""
        lists = [
            ("stop_token_ids", self.stop_token_ids or []),
            ("logit_bias", list(self.logit_bias or {})),
            ("allowed_token_ids", self.allowed_token_ids or []),
        ]
        for name, ids in lists:
            for i in ids:
                if not 0 <= i < vocab_size:
                    raise ValueError(f"{name} holds token id {i}, outside the vocabulary [0, {vocab_size})")

    def sampler_fields(
        self, eos_token_ids: Sequence[int] = (), bad_words_ids: Sequence[Sequence[int]] = ()
    ) -> dict[str, Any]:
        """The per-request fields of the C++ ``ossa::SamplingParams`` (and the twin's SamplerParams);
        ``bad_words_ids``: ``bad_words`` tokenized (``InputProcessor.bad_words_ids``)."""
        return {
            "bad_words": [[int(i) for i in w] for w in bad_words_ids],
            "temperature": float(self.temperature),
            "top_k": int(self.top_k),
            "top_p": float(self.top_p),
            "min_p": float(self.min_p),
            "repetition_penalty": float(self.repetition_penalty),
            "frequency_penalty": float(self.frequency_penalty),
            "presence_penalty": float(self.presence_penalty),
            "seed": None if self.seed is None else self.seed % _U64,
            "logit_bias": sorted((self.logit_bias or {}).items()),
            "allowed_token_ids": list(self.allowed_token_ids or []),
            "min_tokens": int(self.min_tokens),
            "stop_token_ids": list(self.stop_token_ids or []),
            "eos_token_ids": [int(i) for i in eos_token_ids],
            "ignore_eos": bool(self.ignore_eos),
            "logprobs": -1 if self.logprobs is None else int(self.logprobs),
        }

    def to_core(
        self,
        eos_token_ids: Sequence[int] = (),
        vocab_size: int | None = None,
        bad_words_ids: Sequence[Sequence[int]] = (),
    ) -> Any:
        """The C++ sampler's ``_core.SamplingParams`` for this request (vocabulary-checked if given)."""
        from ossa._native import core

        if vocab_size is not None:
            self.check_vocab(vocab_size)
        params = core.SamplingParams()
        for name, value in self.sampler_fields(eos_token_ids, bad_words_ids).items():
            setattr(params, name, value)
        return params

    def to_reference(
        self, eos_token_ids: Sequence[int] = (), bad_words_ids: Sequence[Sequence[int]] = ()
    ) -> Any:
        """The same parameters for ``ossa.reference.sampler`` (the NumPy twin)."""
        from ossa.reference.sampler import SamplerParams

        return SamplerParams(**self.sampler_fields(eos_token_ids, bad_words_ids))
