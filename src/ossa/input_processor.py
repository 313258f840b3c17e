"""Prompts, token ids and chat messages -> validated engine requests: the one place that validates.

``LLM``, the async engine, the server and the CLI all hand their inputs to an ``InputProcessor``,
which tokenizes (or renders the chat template and tokenizes), checks every token id against the
vocabulary, truncates the prompt if asked (``SamplingParams.truncate_prompt_tokens``), checks that
prompt plus one output token fit ``max_model_len``, and builds the engine's per-request parameters.
Anything out of range raises ``InputError`` (a ValueError) naming the problem and, for the server's
400 answers, the request field (``param``). The engine (C++ and twin) keeps only cheap checks of its contract,
which raise a ValueError starting "internal contract:" if a caller skips this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .sampling_params import SamplingParams

if TYPE_CHECKING:
    from .backend import Backend
    from .tokenizer import Tokenizer

PromptType = str | list[int] | dict[str, Any]


class InputError(ValueError):
    """Invalid input; ``param`` names the request field it came from (for OpenAI-style 400s)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class ProcessedPrompt:
    """A prompt as the engine takes it: its token ids, and its text when it came as text."""

    text: str | None
    token_ids: list[int]


@dataclass
class EngineRequest:
    """One validated request: ``engine.add_request(request_id, prompt.token_ids, engine_params)``."""

    request_id: str
    prompt: ProcessedPrompt
    params: SamplingParams
    engine_params: Any


def _is_token_ids(x: Any) -> bool:
    return isinstance(x, Sequence) and not isinstance(x, str) and all(_is_id(t) for t in x)


def _is_id(t: Any) -> bool:
    return isinstance(t, int) and not isinstance(t, bool)


def normalize_prompts(prompts: Any) -> list[PromptType]:
    """One prompt or a list of them -> a non-empty list of prompts."""
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if isinstance(prompts, Sequence) and prompts and _is_token_ids(prompts):
        return [list(prompts)]
    if isinstance(prompts, Sequence):
        if not prompts:
            raise InputError("no prompts given", param="prompt")
        return list(prompts)
    raise InputError(
        f"prompts must be a string, a list of token ids, or a list of those; got {type(prompts)}",
        param="prompt",
    )


def chat_messages(messages: Sequence[Any], param: str = "messages") -> list[dict[str, Any]]:
    """Messages for a chat template: dicts with a role; content parts of type text are joined with
    newlines and a missing content is "" (OpenAI's shapes)."""
    out = []
    for i, m in enumerate(messages):
        d = m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else m
        if not isinstance(d, dict) or not isinstance(d.get("role"), str):
            raise InputError("each message must be a {'role': ..., 'content': ...} dict", param=param)
        d = dict(d)
        content = d.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                if (
                    not isinstance(part, dict)
                    or part.get("type") != "text"
                    or not isinstance(part.get("text"), str)
                ):
                    raise InputError("only text content parts are supported", param=f"{param}[{i}].content")
                texts.append(part["text"])
            d["content"] = "\n".join(texts)
        elif content is None:
            d["content"] = ""
        out.append(d)
    return out


class InputProcessor:
    """Turns user inputs into ``EngineRequest``s for one engine (its tokenizer, vocabulary, limits)."""

    def __init__(
        self,
        tokenizer: Tokenizer | None,
        backend: Backend,
        *,
        max_model_len: int,
        vocab_size: int,
        max_num_seqs: int,
        eos_token_ids: Sequence[int] | None = None,
        constraints: Any = None,
    ) -> None:
        self._tokenizer = tokenizer
        self.constraints = constraints  # the engine's ossa.structured.ConstraintHost, if it takes grammars
        self.backend = backend
        self.max_model_len = int(max_model_len)
        self.vocab_size = int(vocab_size)
        self.max_num_seqs = int(max_num_seqs)
        if eos_token_ids is None:
            eos_token_ids = [] if tokenizer is None else tokenizer.eos_token_ids
        self.eos_token_ids = [int(i) for i in eos_token_ids]

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            raise InputError("this input processor has no tokenizer: give token ids")
        return self._tokenizer

    # -- prompts ----------------------------------------------------------------------------------

    def token_ids(self, ids: Any, param: str = "prompt") -> list[int]:
        """A checked copy of a token-id prompt: a non-empty list of ids inside the vocabulary."""
        if not isinstance(ids, Sequence) or isinstance(ids, str) or not ids:
            raise InputError("the prompt is empty: prompt_token_ids must be a non-empty list of ints", param)
        for t in ids:
            if not _is_id(t) or not 0 <= t < self.vocab_size:
                raise InputError(
                    f"prompt token id {t!r} is outside the vocabulary [0, {self.vocab_size})", param
                )
        return [int(t) for t in ids]

    def encode(self, text: str, add_special_tokens: bool = True, param: str = "prompt") -> list[int]:
        """The token ids of a text prompt (checked like any token-id prompt)."""
        try:
            ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        except (ValueError, UnicodeError) as e:
            raise InputError(f"cannot tokenize the {param}: {e}", param) from None
        return self.token_ids(list(ids), param)

    def prompt(self, p: Any, param: str = "prompt") -> ProcessedPrompt:
        """A string, a list of token ids, or ``{"prompt": str}`` / ``{"prompt_token_ids": [...]}``."""
        if isinstance(p, str):
            return ProcessedPrompt(p, self.encode(p, True, param))
        if isinstance(p, dict):
            if "prompt_token_ids" in p:
                return ProcessedPrompt(p.get("prompt"), self.token_ids(p["prompt_token_ids"], param))
            if isinstance(p.get("prompt"), str):
                return ProcessedPrompt(p["prompt"], self.encode(p["prompt"], True, param))
            raise InputError("a prompt dict needs 'prompt' (a string) or 'prompt_token_ids'", param)
        if isinstance(p, Sequence):
            return ProcessedPrompt(None, self.token_ids(p, param))
        raise InputError(f"a prompt must be a string, a list of token ids or a dict; got {type(p)}", param)

    def prompts(self, prompts: Any, param: str = "prompt") -> list[ProcessedPrompt]:
        """One prompt or a list of them, each processed."""
        return [self.prompt(p, param) for p in normalize_prompts(prompts)]

    def chat(
        self,
        messages: Sequence[Any],
        add_generation_prompt: bool = True,
        chat_template: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        param: str = "messages",
        continue_final_message: bool = False,
        tools: list[dict[str, Any]] | None = None,
    ) -> ProcessedPrompt:
        """One conversation rendered with the chat template (the model's unless given) and tokenized.
        ``tools`` (OpenAI function definitions) reach the template as its ``tools`` variable;
        ``continue_final_message`` ends the prompt inside the last message so the model continues it."""
        if not messages:
            raise InputError("messages is empty", param)
        dicts = chat_messages(messages, param)
        try:
            text = self.tokenizer.apply_chat_template(
                dicts,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                chat_template=chat_template,
                continue_final_message=continue_final_message,
                tools=tools,
                **(chat_template_kwargs or {}),
            )
        except Exception as e:  # template errors (raise_exception, bad roles, jinja) are the caller's input
            raise InputError(f"cannot apply the chat template: {e}", param) from None
        assert isinstance(text, str)
        # The template writes its own special tokens: no BOS on top.
        return ProcessedPrompt(text, self.encode(text, False, param))

    # -- requests ---------------------------------------------------------------------------------

    def check_n(self, n: int, num_prompts: int) -> None:
        """n completions of each of num_prompts prompts must fit the engine's sequences at once."""
        if n * num_prompts > self.max_num_seqs:
            raise InputError(
                f"n * number of prompts is {n * num_prompts}; this engine runs at most "
                f"{self.max_num_seqs} sequences at once",
                param="n",
            )

    def truncate(self, prompt: ProcessedPrompt, params: SamplingParams) -> ProcessedPrompt:
        """vLLM's ``truncate_prompt_tokens``: keep the last k tokens (-1: as many as leave room for one
        output token)."""
        k = params.truncate_prompt_tokens
        if k is None:
            return prompt
        if k == -1:
            k = self.max_model_len - 1
        if len(prompt.token_ids) <= k:
            return prompt
        ids = prompt.token_ids[-k:]
        return ProcessedPrompt(self.tokenizer.decode(ids) if prompt.text is not None else None, ids)

    def check_length(self, prompt: ProcessedPrompt, param: str = "prompt") -> None:
        n = len(prompt.token_ids)
        if n + 1 > self.max_model_len:
            raise InputError(
                f"This model's maximum context length (max_model_len) is {self.max_model_len} tokens; "
                f"the prompt has {n} tokens, which leaves no room for output (at most "
                f"{self.max_model_len - 1} prompt tokens).",
                param,
            )

    def engine_params(self, params: SamplingParams, prompt_len: int, priority: int = 0) -> Any:
        """The engine's per-request parameters; InputError for anything out of range. A request with
        ``structured_outputs`` registers its grammar with the constraint host: the engine releases it
        once it has the request; if the request never reaches the engine, call ``release``."""
        try:
            params.check_vocab(self.vocab_size)
        except ValueError as e:
            raise InputError(str(e)) from None
        if (
            isinstance(priority, bool)
            or not isinstance(priority, int)
            or not -(1 << 31) <= priority < 1 << 31
        ):
            raise InputError(
                f"priority must be an integer in [-2**31, 2**31-1], got {priority!r}", "priority"
            )
        room = self.max_model_len - prompt_len
        g = self.backend.new_generation_params()
        g.sampling = self.backend.sampler_params(
            params, self.eos_token_ids, self.bad_words_ids(params.bad_words or [])
        )
        g.max_tokens = room if params.max_tokens is None else min(int(params.max_tokens), room)
        if params.min_tokens > g.max_tokens:
            raise InputError(
                f"min_tokens is {params.min_tokens}, but this prompt leaves room for at most "
                f"{g.max_tokens} output tokens within max_model_len={self.max_model_len}",
                "min_tokens",
            )
        g.n = int(params.n)
        g.priority = int(priority)
        g.stop = list(params.stop_strings)
        g.include_stop_str_in_output = bool(params.include_stop_str_in_output)
        g.skip_special_tokens = bool(params.skip_special_tokens)
        g.prompt_logprobs = -1 if params.prompt_logprobs is None else int(params.prompt_logprobs)
        if params.structured_outputs is not None:
            if self.constraints is None:
                raise InputError("this engine takes no structured_outputs (no constraint host)")
            try:
                g.constraint = self.constraints.register(params.structured_outputs, int(params.n))
            except ValueError as e:
                raise InputError(str(e), "structured_outputs") from None
        return g

    def bad_words_ids(self, words: Sequence[str]) -> list[list[int]]:
        """``bad_words`` as token sequences, vLLM's rule: each word (leading spaces stripped) alone,
        and after a space where that spells it with as many tokens, starting with another one (the
        word inside a text); InputError naming an id past the model's vocabulary."""
        seqs: list[list[int]] = []
        for word in (w.lstrip() for w in words):
            alone = list(self.tokenizer.encode(word, add_special_tokens=False))
            spaced = list(self.tokenizer.encode(" " + word, add_special_tokens=False))
            seqs.append(alone)
            if spaced and alone and spaced[0] != alone[0] and len(spaced) == len(alone):
                seqs.append(spaced)
        bad = sorted({i for seq in seqs for i in seq if not 0 <= i < self.vocab_size})
        if bad:
            raise InputError(
                f"bad_words: the model's vocabulary has {self.vocab_size} tokens, but these bad word "
                f"tokens are past it: {bad}",
                "bad_words",
            )
        return [seq for seq in seqs if seq]

    def release(self, requests: Sequence[EngineRequest]) -> None:
        """Releases the grammars of requests that did not reach the engine."""
        for r in requests:
            g = r.engine_params
            if getattr(g, "constraint", -1) >= 0:
                self.constraints.release(g.constraint)
                g.constraint = -1

    def process(
        self,
        request_id: str,
        prompt: ProcessedPrompt,
        params: SamplingParams,
        priority: int = 0,
        param: str = "prompt",
        explicit_max_tokens: bool = False,
    ) -> EngineRequest:
        """A processed prompt and its parameters -> a request the engine accepts. ``explicit_max_tokens``:
        the caller set max_tokens, so prompt + max_tokens past the context is its error (vLLM's 400);
        otherwise max_tokens is cut to the room the context leaves."""
        if not isinstance(params, SamplingParams):
            raise InputError(f"sampling params must be a SamplingParams, got {type(params)}")
        prompt = self.truncate(prompt, params)
        self.check_length(prompt, param)
        n = len(prompt.token_ids)
        if (
            explicit_max_tokens
            and params.max_tokens is not None
            and n + params.max_tokens > self.max_model_len
        ):
            raise InputError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                f"requested {n + params.max_tokens} tokens ({n} in the prompt, {params.max_tokens} in the "
                f"completion). Please reduce the length of the prompt or the completion.",
                "max_tokens",
            )
        return EngineRequest(
            request_id, prompt, params, self.engine_params(params, len(prompt.token_ids), priority)
        )


def generation_params(
    params: SamplingParams,
    *,
    prompt_len: int,
    max_model_len: int,
    eos_token_ids: Sequence[int],
    vocab_size: int,
    backend: str,
    priority: int = 0,
) -> Any:
    """The engine's per-request parameters for one prompt length, without a tokenizer at hand (tests
    and benchmarks that drive ``core.Engine`` directly)."""
    from .backend import get_backend

    proc = InputProcessor(
        None,
        get_backend(backend),
        max_model_len=max_model_len,
        vocab_size=vocab_size,
        max_num_seqs=1,
        eos_token_ids=eos_token_ids,
    )
    proc.check_length(ProcessedPrompt(None, [0] * prompt_len))
    return proc.engine_params(params, prompt_len, priority)
