"""Completions and chat completions: request -> engine requests -> OpenAI-shaped JSON or SSE chunks.

Inputs go through the engine's ``InputProcessor`` (the one place that validates; its errors become
400s naming the field) and outputs come back as ``RequestOutput``s from ``ossa.output_processor``,
as they do for ``LLM``; this module only renders them in OpenAI's wire format. Logprob entries are
decoded only when the client asked for them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

from ..async_engine import AsyncEngine
from ..input_processor import EngineRequest, InputError, ProcessedPrompt, chat_messages
from ..output_processor import top_logprobs, trim_logprobs
from ..outputs import CompletionOutput, Logprob, RequestOutput
from ..sampling_params import SamplingParams
from ..structured import StructuredOutputsParams
from .harmony import MARKERS as HARMONY_MARKERS
from .harmony import HarmonyStream, is_harmony_template, parse_harmony
from .protocol import ChatCompletionRequest, CompletionRequest, random_id
from .reasoning import FORMATS as REASONING_FORMATS
from .reasoning import ReasoningStream, reasoning_for_template, split_reasoning, tag_texts
from .request_fields import FieldError, reject_unimplemented, requested_constraint
from .tool_stream import MARKERS, coalesce_tool_deltas
from .tools import (
    ToolError,
    ToolStream,
    arguments_as_dicts,
    check_tools,
    forced_calls,
    forced_output,
    marker_decoding,
    parse_tool_calls,
    parser_for_template,
    special_texts,
    template_shows_tools,
    tools_system_message,
)

T = TypeVar("T")


class APIError(Exception):
    """An error answered as OpenAI-shaped JSON."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param=param)


def checked(f: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Calls the input processor; its InputError (or any ValueError) becomes a 400 naming the field."""
    try:
        return f(*args, **kwargs)
    except InputError as e:
        raise bad_request(str(e), param=e.param) from None
    except (ValueError, TypeError) as e:
        raise bad_request(str(e)) from None


@dataclass
class PreparedRequest:
    """Everything validated up front: one engine request per prompt, so a bad field fails before any work."""

    request_id: str
    model: str
    requests: list[EngineRequest]
    params: SamplingParams
    n: int
    logprobs: int | None
    stream: bool
    include_usage: bool
    echo: bool = False
    prompt_logprobs: int | None = None  # vLLM's field, as asked
    created: int = field(default_factory=lambda: int(time.time()))
    tool_mode: str | None = None  # None or "none": no parsing; "auto", "required" or a function name
    tool_parser: str = "hermes"
    tool_drop: list[str] = field(default_factory=list)  # special-token texts to drop (see tools.py)
    tool_schemas: dict[str, Any] = field(default_factory=dict)  # parameters schemas by function name
    reasoning: str | None = None  # the reply's reasoning block's format (see reasoning.py), or None
    reasoning_inside: bool = False  # the prompt ended with its opening tag: the reply starts in it
    reasoning_streams: dict[int, ReasoningStream] = field(default_factory=dict)
    tool_streams: dict[int, ToolStream] = field(default_factory=dict)  # per choice, when streaming
    harmony: bool = False  # gpt-oss's reply format: reasoning, content and tool calls (see harmony.py)
    harmony_streams: dict[int, HarmonyStream] = field(default_factory=dict)

    @property
    def prompts(self) -> list[ProcessedPrompt]:
        return [r.prompt for r in self.requests]

    @property
    def echo_logprobs(self) -> bool:
        # OpenAI's echo with logprobs: the prompt's tokens lead each choice's logprobs.
        return self.echo and self.logprobs is not None


def sampling_params(
    req: CompletionRequest | ChatCompletionRequest,
    max_tokens: int | None,
    logprobs: int | None,
    prompt_logprobs: int | None = None,
    structured: StructuredOutputsParams | None = None,
    decode_specials: bool = False,
    defaults: dict[str, Any] | None = None,
) -> SamplingParams:
    """The request's ``SamplingParams``; raises APIError(400) naming the bad field. ``defaults``:
    the model's generation-config sampling fields, for those the request leaves unset (vLLM's)."""
    d = defaults or {}

    def given(value: Any, name: str, neutral: Any) -> Any:
        return value if value is not None else d.get(name, neutral)

    top_k = given(req.top_k, "top_k", -1)
    top_k = -1 if top_k == 0 else top_k
    bias: dict[int, float] | None = None
    if req.logit_bias:
        bias = {}
        for key, value in req.logit_bias.items():
            if not key.strip().lstrip("-").isdigit():
                raise bad_request(f"logit_bias keys must be token ids, got {key!r}", param="logit_bias")
            bias[int(key)] = value
    try:
        return SamplingParams(
            n=req.n,
            presence_penalty=req.presence_penalty or 0.0,
            frequency_penalty=req.frequency_penalty or 0.0,
            repetition_penalty=given(req.repetition_penalty, "repetition_penalty", 1.0),
            temperature=given(req.temperature, "temperature", 1.0),
            top_p=given(req.top_p, "top_p", 1.0),
            top_k=top_k,
            min_p=given(req.min_p, "min_p", 0.0),
            seed=req.seed,
            stop=req.stop,
            stop_token_ids=req.stop_token_ids,
            bad_words=req.bad_words,
            allowed_token_ids=req.allowed_token_ids,
            ignore_eos=req.ignore_eos,
            max_tokens=given(max_tokens, "max_tokens", None),
            min_tokens=req.min_tokens,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            skip_special_tokens=req.skip_special_tokens and not decode_specials,
            logit_bias=bias,
            include_stop_str_in_output=req.include_stop_str_in_output,
            truncate_prompt_tokens=req.truncate_prompt_tokens,
            structured_outputs=structured,
        )
    except (ValueError, TypeError) as e:
        raise bad_request(str(e)) from None


def output_constraint(
    req: CompletionRequest | ChatCompletionRequest, forced: StructuredOutputsParams | None = None
) -> StructuredOutputsParams | None:
    """The constraint the request asks for (response_format, structured_outputs, guided_*, a forced
    tool call); a 400 naming the field for a bad one, and for OpenAI fields this server lacks."""
    try:
        reject_unimplemented(req.model_extra)
        if req.stream_options is not None and req.stream_options.continuous_usage_stats:
            raise FieldError(
                "stream_options.continuous_usage_stats is not supported by this server", "stream_options"
            )
        return requested_constraint(req.response_format, req.model_extra, forced)
    except FieldError as e:
        raise bad_request(str(e), param=e.param) from None


def process_all(engine: AsyncEngine, make: list[Callable[[], EngineRequest]]) -> list[EngineRequest]:
    """Engine requests built one by one; if one fails, the grammars of those built are released."""
    done: list[EngineRequest] = []
    try:
        for f in make:
            done.append(f())
    except BaseException:
        engine.input_processor.release(done)
        raise
    return done


def prepare_completion(engine: AsyncEngine, req: CompletionRequest, model: str) -> PreparedRequest:
    if req.suffix:
        raise bad_request("suffix is not supported", param="suffix")
    if req.best_of is not None and req.best_of != req.n:
        raise bad_request("best_of is not supported (it must equal n)", param="best_of")
    proc = engine.input_processor
    prompts = checked(proc.prompts, req.prompt)
    checked(proc.check_n, req.n, len(prompts))
    # The engine computes one set of prompt logprobs per prompt, wide enough for both uses.
    wanted = [k for k in (req.prompt_logprobs, req.logprobs if req.echo else None) if k is not None]
    structured = output_constraint(req)
    explicit = "max_tokens" in req.model_fields_set and req.max_tokens is not None
    defaults = engine.sampling_defaults
    # max_tokens left unset: the model's max_new_tokens where its generation config has one, else
    # the OpenAI default of 16.
    max_tokens = req.max_tokens if explicit or "max_tokens" not in defaults else None
    sp = sampling_params(
        req, max_tokens, req.logprobs, max(wanted) if wanted else None, structured, defaults=defaults
    )
    request_id = random_id("cmpl")
    ids = [request_id] if len(prompts) == 1 else [f"{request_id}-{i}" for i in range(len(prompts))]
    return PreparedRequest(
        request_id,
        model,
        process_all(
            engine,
            [
                partial(checked, proc.process, rid, p, sp, req.priority, explicit_max_tokens=explicit)
                for rid, p in zip(ids, prompts, strict=True)
            ],
        ),
        sp,
        req.n,
        req.logprobs,
        bool(req.stream),
        bool(req.stream_options and req.stream_options.include_usage),
        echo=bool(req.echo),
        prompt_logprobs=req.prompt_logprobs,
    )


def check_generation_prompt(add_generation_prompt: bool, continue_final_message: bool) -> None:
    """vLLM's rule: a prompt either opens a new assistant turn or continues the last message."""
    if continue_final_message and add_generation_prompt:
        raise bad_request(
            "continue_final_message and add_generation_prompt cannot both be set (pass "
            "add_generation_prompt=false to continue the last message)",
            param="continue_final_message",
        )


@dataclass
class ChatInputs:
    """A chat request's tools and the messages its template renders."""

    functions: list[dict[str, Any]]
    mode: str | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None  # the template's ``tools`` variable


REASONING_EFFORTS = ("low", "medium", "high")


def take_reasoning_effort(req: ChatCompletionRequest, template: str | None) -> None:
    """OpenAI's ``reasoning_effort``, for a chat template that reads it (gpt-oss's harmony template
    writes it into the system message): moved into ``chat_template_kwargs`` (as vLLM passes it; an
    explicit kwarg wins). A 400 for a template that has no such setting, or another value."""
    extra = req.model_extra or {}
    effort = extra.get("reasoning_effort")
    if effort is None:
        return
    if "reasoning_effort" not in (template or ""):
        raise bad_request(
            "reasoning_effort is not supported by this model (its chat template has no reasoning_effort)",
            param="reasoning_effort",
        )
    if effort not in REASONING_EFFORTS:
        raise bad_request(
            f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, got {effort!r}",
            param="reasoning_effort",
        )
    del extra["reasoning_effort"]
    req.chat_template_kwargs = {"reasoning_effort": effort, **(req.chat_template_kwargs or {})}


def chat_inputs(req: ChatCompletionRequest, template: str | None) -> ChatInputs:
    """Validates tools and the generation-prompt flags and prepares the messages for ``template``
    (the one that will render them); a 400 naming the field for anything wrong."""
    check_generation_prompt(req.add_generation_prompt, req.continue_final_message)
    take_reasoning_effort(req, template)
    try:
        functions, mode = check_tools(req.tools, req.tool_choice)
    except ToolError as e:
        raise bad_request(str(e), param=e.param) from None
    messages = checked(chat_messages, req.messages)
    arguments_as_dicts(messages)
    if is_harmony_template(template):  # an earlier turn's reasoning, as the harmony template reads it
        for i, m in enumerate(messages):
            if m.get("role") == "assistant" and m.get("reasoning_content") and not m.get("thinking"):
                messages[i] = {**m, "thinking": m["reasoning_content"]}
    if functions and mode != "none" and not template_shows_tools(template):
        # The template has no place for tools: describe them in the system message.
        note = tools_system_message(functions)
        if messages and messages[0].get("role") == "system":
            messages[0] = {**messages[0], "content": f"{messages[0].get('content') or ''}\n\n{note}"}
        else:
            messages.insert(0, {"role": "system", "content": note})
    tools = [{"type": "function", "function": f} for f in functions] or None
    return ChatInputs(functions, mode, messages, tools)


def prepare_chat(
    engine: AsyncEngine,
    req: ChatCompletionRequest,
    model: str,
    rendered: str | None = None,
    tool_call_parser: str | None = None,
    template: str | None = None,
    reasoning_parser: str = "auto",
) -> PreparedRequest:
    """``rendered``: the prompt already rendered from ``template`` (a request's own chat template,
    rendered in the template sandbox); else the server's template renders it. ``tool_call_parser``:
    the server's --tool-call-parser (default: recognised in the chat template)."""
    proc = engine.input_processor
    template = template if rendered is not None else engine.tokenizer.chat_template
    inputs = chat_inputs(req, template)
    functions, mode = inputs.functions, inputs.mode
    try:  # a function's parameters schema that does not compile: the client's error
        forced = forced_output(functions, mode, req.parallel_tool_calls is not False) if mode else None
    except ValueError as e:
        why = str(e).split("does not compile: ", 1)[-1]
        raise bad_request(f"a function's parameters schema does not compile: {why}", param="tools") from None
    structured = output_constraint(req, forced)
    if rendered is not None:
        prompt = ProcessedPrompt(rendered, checked(proc.encode, rendered, False, "messages"))
    else:
        prompt = checked(
            proc.chat,
            inputs.messages,
            req.add_generation_prompt,
            None,
            req.chat_template_kwargs,
            continue_final_message=req.continue_final_message,
            tools=inputs.tools,
        )
    checked(proc.check_n, req.n, 1)
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    if req.top_logprobs and not req.logprobs:
        raise bad_request("top_logprobs needs logprobs=true", param="top_logprobs")
    if req.prompt_logprobs is not None and req.stream:  # (vLLM's rule too)
        raise bad_request("prompt_logprobs are not available when stream=true", param="prompt_logprobs")
    parser = tool_call_parser or parser_for_template(template)
    # Markers that are special tokens only reach the parser when special tokens are decoded; the
    # other special tokens' texts are then dropped from the reply.
    drop = marker_decoding(engine.tokenizer, parser) if mode == "auto" and req.skip_special_tokens else None
    # gpt-oss (harmony): its reply's channels become reasoning, content and tool calls; their markers
    # are special tokens, so the reply is decoded with them and the other special tokens dropped. A
    # forced tool choice writes bare JSON instead (the grammar's), parsed as for any model.
    harmony = is_harmony_template(template) and mode in (None, "none", "auto")
    # A thinking model's <think> block (reasoning.py): as the server's --reasoning-parser says, or where
    # the template writes one; its tags, where they are special tokens, are decoded as tool markers are.
    reasoning = None if harmony or reasoning_parser == "none" else reasoning_parser
    if reasoning == "auto":
        reasoning = reasoning_for_template(template)
    if reasoning is not None and req.skip_special_tokens:
        specials = special_texts(engine.tokenizer)
        if tag_texts(reasoning) & set(specials):
            keep = tag_texts(reasoning) | set(MARKERS.get(parser, ()) if mode == "auto" else ())
            drop = [t for t in specials if t not in keep]
    if harmony:
        drop = (
            [t for t in special_texts(engine.tokenizer) if t not in HARMONY_MARKERS]
            if req.skip_special_tokens
            else None
        )
    sp = sampling_params(
        req,
        max_tokens,
        logprobs,
        req.prompt_logprobs,
        structured,
        decode_specials=drop is not None,
        defaults=engine.sampling_defaults,
    )
    request_id = random_id("chatcmpl")
    explicit = req.max_completion_tokens is not None or req.max_tokens is not None
    request = checked(
        proc.process, request_id, prompt, sp, req.priority, "messages", explicit_max_tokens=explicit
    )
    return PreparedRequest(
        request_id,
        model,
        [request],
        sp,
        req.n,
        logprobs,
        bool(req.stream),
        bool(req.stream_options and req.stream_options.include_usage),
        prompt_logprobs=req.prompt_logprobs,
        tool_mode=mode,
        tool_parser=parser,
        tool_drop=drop or [],
        tool_schemas={f["name"]: f.get("parameters") or {} for f in functions},
        reasoning=reasoning,
        reasoning_inside=reasoning is not None
        and (prompt.text or "").rstrip().endswith(REASONING_FORMATS[reasoning][0]),
        harmony=harmony,
    )


# -- running ---------------------------------------------------------------------------------------


async def merged_outputs(
    engine: AsyncEngine, prep: PreparedRequest, delta: bool
) -> AsyncIterator[tuple[int, RequestOutput]]:
    """Yields (prompt index, ``RequestOutput``) for all prompts of a request as they arrive."""
    if len(prep.requests) == 1:
        async for out in engine.generate(prep.requests[0], delta):
            yield 0, out
        return
    queue: asyncio.Queue[tuple[int, RequestOutput] | BaseException | None] = asyncio.Queue()

    async def pump(i: int, request: EngineRequest) -> None:
        try:
            async for out in engine.generate(request, delta):
                queue.put_nowait((i, out))
            queue.put_nowait(None)
        except Exception as e:
            queue.put_nowait(e)

    tasks = [asyncio.ensure_future(pump(i, r)) for i, r in enumerate(prep.requests)]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def engine_error(out: RequestOutput) -> APIError | None:
    """The error of a failed request, if it failed. Rejected by the scheduler before running (e.g. too
    big for the cache) is the caller's input; anything that failed inside the loop is ours."""
    error = out.extra.get("error")
    if not error:
        return None
    if out.metrics is None or not out.metrics.first_scheduled_time:
        return bad_request(error)
    return APIError(500, f"generation failed: {error}", type_="server_error")


# -- rendering -------------------------------------------------------------------------------------

# One position of a logprob list: its token id and its {token id: Logprob} (None: nothing precedes
# the prompt's first token, so it has no logprob; OpenAI: null).
Position = tuple[int, dict[int, Logprob] | None]


def positions(logprobs: list[dict[int, Logprob]] | None) -> list[Position]:
    return [(next(iter(d)), d) for d in logprobs or []]


def prompt_positions(out: RequestOutput) -> list[Position]:
    """The prompt's positions in echoed logprobs: its first token (no logprob), then the rest."""
    plps = out.prompt_logprobs or [None]
    return [(out.prompt_token_ids[0], None), *positions([d for d in plps[1:] if d is not None])]


def completion_logprobs(
    engine: AsyncEngine, entries: list[Position], offset: int, num_top: int, top_n: int | None = None
) -> dict[str, Any]:
    """OpenAI's legacy completions logprobs. ``num_top``: alternatives the engine computed per
    position; ``top_n`` trims them (prompt entries may carry more than the request's ``logprobs``
    when ``prompt_logprobs`` asked for more)."""
    tokens: list[str] = []
    token_lps: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    for token, d in entries:
        s = decode_token(engine, token) if d is None else str(d[token].decoded_token)
        tokens.append(s)
        offsets.append(offset)
        offset += len(s)
        if d is None:
            token_lps.append(None)
            tops.append(None)
            continue
        token_lps.append(d[token].logprob)
        tops.append({str(lp.decoded_token): lp.logprob for _, lp in top_logprobs(d, num_top, top_n)})
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}


def prompt_logprob_dicts(out: RequestOutput, num_top: int, top_n: int) -> list[Any]:
    """vLLM's ``prompt_logprobs``: None for the first token, then {token id: {logprob, rank,
    decoded_token}} holding the prompt's token and the top ``top_n`` (as ``LLM.generate`` gives them)."""
    plps = out.prompt_logprobs or [None]
    return [
        None,
        *(
            {str(t): asdict(lp) for t, lp in trim_logprobs(d, num_top, top_n).items()}
            for d in plps[1:]
            if d is not None
        ),
    ]


def chat_logprobs(entries: list[Position], num_top: int) -> dict[str, Any]:
    content = []
    for token, d in entries:
        assert d is not None
        s = str(d[token].decoded_token)
        top = []
        for _, lp in top_logprobs(d, num_top):
            ts = str(lp.decoded_token)
            top.append({"token": ts, "logprob": lp.logprob, "bytes": list(ts.encode())})
        content.append(
            {"token": s, "logprob": d[token].logprob, "bytes": list(s.encode()), "top_logprobs": top}
        )
    return {"content": content}


def decode_token(engine: AsyncEngine, token: int) -> str:
    return engine.tokenizer.decode([int(token)], skip_special_tokens=False)


def echo_text(engine: AsyncEngine, p: ProcessedPrompt) -> str:
    """The prompt as echoed: its text, or the decoded ids of a token-id prompt."""
    return p.text if p.text is not None else engine.tokenizer.decode(p.token_ids)


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage; ``cached_tokens``: prompt tokens the prefix cache served (as OpenAI and vLLM
    report prompt caching)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def harmony_body(
    prep: PreparedRequest, k: int, c: CompletionOutput, streaming: bool
) -> tuple[dict[str, Any], bool]:
    """A harmony reply's message (or delta): reasoning_content, content and tool calls; True if it
    made calls."""
    tools = prep.tool_mode == "auto"
    if streaming:
        hs = prep.harmony_streams.setdefault(k, HarmonyStream(prep.tool_drop, tools))
        reasoning, text, calls = hs.feed(c.text)
        if c.finish_reason:
            more = hs.finish()
            reasoning, text, calls = reasoning + more[0], text + more[1], calls + more[2]
        delta: dict[str, Any] = {}
        if reasoning:
            delta["reasoning_content"] = reasoning
        if text:
            delta["content"] = text
        if calls:
            delta["tool_calls"] = coalesce_tool_deltas(calls)
        return {"delta": delta}, bool(hs.calls)
    thought, content, found = parse_harmony(c.text, prep.tool_drop, tools)
    message: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": thought}
    if found:
        message["tool_calls"] = [call.to_openai() for call in found]
    return {"message": message}, bool(found)


def reasoning_body(
    prep: PreparedRequest, k: int, c: CompletionOutput, streaming: bool
) -> tuple[dict[str, Any], bool]:
    """A thinking model's message (or delta): its <think> block as reasoning_content, the rest as the
    content (tool calls parsed from it); True if it made calls."""
    drop = prep.tool_drop
    if streaming:
        rs = prep.reasoning_streams.setdefault(
            k, ReasoningStream(prep.reasoning_inside, drop, prep.reasoning or "think")
        )
        thought, text = rs.feed(c.text)
        if c.finish_reason:
            more = rs.finish()
            thought, text = thought + more[0], text + more[1]
    else:
        found, text = split_reasoning(c.text, prep.reasoning_inside, drop, prep.reasoning or "think")
        thought = found or ""
    rest = replace(c, text=text)
    called = False
    if prep.tool_mode not in (None, "none"):
        body, called = tool_call_body(prep, k, rest, streaming)
    elif streaming:
        body = {"delta": {"content": text} if text else {}}
    else:
        body = {"message": {"role": "assistant", "content": text}}
    if streaming:
        if thought:
            body["delta"] = {"reasoning_content": thought, **body["delta"]}
    else:
        body["message"]["reasoning_content"] = thought or None
    return body, called


def tool_call_body(
    prep: PreparedRequest, k: int, c: CompletionOutput, streaming: bool
) -> tuple[dict[str, Any], bool]:
    """A chat choice's message (or delta) with the tool calls of its text; True if it made calls."""
    mode = prep.tool_mode
    assert mode is not None
    if streaming:
        ts = prep.tool_streams.setdefault(
            k, ToolStream(prep.tool_parser, mode, prep.tool_drop, prep.tool_schemas)
        )
        text, calls = ts.feed(c.text)
        if c.finish_reason:
            more_text, more_calls = ts.finish()
            text, calls = text + more_text, coalesce_tool_deltas(calls + more_calls)
        delta: dict[str, Any] = {}
        if text:
            delta["content"] = text
        if calls:
            delta["tool_calls"] = calls
        return {"delta": delta}, bool(ts.calls)
    if mode == "auto":
        content, found = parse_tool_calls(prep.tool_parser, c.text, prep.tool_drop, prep.tool_schemas)
    else:
        found = forced_calls(c.text, mode)
        # Cut short before a whole call was written (finish_reason "length"): the text is kept as the
        # content rather than lost.
        content = None if found or not c.text else c.text
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if found:
        message["tool_calls"] = [call.to_openai() for call in found]
    return {"message": message}, bool(found)


def choice_body(
    engine: AsyncEngine,
    prep: PreparedRequest,
    chat: bool,
    k: int,
    out: RequestOutput,
    c: CompletionOutput,
    streaming: bool,
    offset: int = 0,
) -> dict[str, Any]:
    """One choice of a response (``streaming``: of a chunk, ``c`` holding only what is new)."""
    finish = c.finish_reason or None
    stop_reason = c.stop_reason if finish else None
    if chat:
        lp = chat_logprobs(positions(c.logprobs), prep.logprobs) if prep.logprobs is not None else None
        content: dict[str, Any]
        if prep.harmony:
            content, called = harmony_body(prep, k, c, streaming)
            if called and finish == "stop":
                finish = "tool_calls"
        elif prep.reasoning:
            content, called = reasoning_body(prep, k, c, streaming)
            if called and finish == "stop":
                finish = "tool_calls"
        elif prep.tool_mode not in (None, "none"):
            content, called = tool_call_body(prep, k, c, streaming)
            if called and finish == "stop":
                finish = "tool_calls"
        elif streaming:
            content = {"delta": {"content": c.text} if c.text else {}}
        else:
            content = {"message": {"role": "assistant", "content": c.text}}
        return {"index": k, **content, "logprobs": lp, "finish_reason": finish, "stop_reason": stop_reason}
    lp = None
    text = c.text
    if prep.logprobs is not None:
        entries = positions(c.logprobs)
        if prep.echo_logprobs and not streaming:
            head = completion_logprobs(
                engine, prompt_positions(out), 0, prep.params.prompt_logprobs or 0, prep.logprobs
            )
            tail = completion_logprobs(engine, entries, sum(len(s) for s in head["tokens"]), prep.logprobs)
            lp = {key: head[key] + tail[key] for key in head}
        else:
            lp = completion_logprobs(engine, entries, offset, prep.logprobs)
    if prep.echo and not streaming:
        text = echo_text(engine, prep.requests[k // prep.n].prompt) + text
    choice: dict[str, Any] = {
        "index": k,
        "text": text,
        "logprobs": lp,
        "finish_reason": finish,
        "stop_reason": stop_reason,
    }
    if prep.prompt_logprobs is not None and not streaming:
        choice["prompt_logprobs"] = prompt_logprob_dicts(
            out, prep.params.prompt_logprobs or 0, prep.prompt_logprobs
        )
    return choice


async def full_response(engine: AsyncEngine, prep: PreparedRequest, chat: bool) -> dict[str, Any]:
    finals: list[RequestOutput | None] = [None] * len(prep.requests)
    async for i, out in merged_outputs(engine, prep, delta=False):
        error = engine_error(out)
        if error is not None:
            raise error
        finals[i] = out
    choices = []
    for i, final in enumerate(finals):
        assert final is not None
        for c in final.outputs:
            choices.append(choice_body(engine, prep, chat, i * prep.n + c.index, final, c, streaming=False))
    n_prompt = sum(len(p.token_ids) for p in prep.prompts)
    n_out = sum(len(c.token_ids) for out in finals if out is not None for c in out.outputs)
    body = {
        "id": prep.request_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": prep.created,
        "model": prep.model,
        "choices": choices,
        "usage": usage(n_prompt, n_out, sum(f.num_cached_tokens for f in finals if f is not None)),
    }
    if chat and prep.prompt_logprobs is not None and finals[0] is not None:  # vLLM's: one prompt, top level
        body["prompt_logprobs"] = prompt_logprob_dicts(
            finals[0], prep.params.prompt_logprobs or 0, prep.prompt_logprobs
        )
    return body


def sse(obj: Any) -> bytes:
    try:
        data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:  # a lone surrogate (from the request) in an error message
        data = json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode()
    return b"data: " + data + b"\n\n"


async def stream_response(engine: AsyncEngine, prep: PreparedRequest, chat: bool) -> AsyncIterator[bytes]:
    """SSE chunks as OpenAI sends them, ending with ``data: [DONE]``. Errors after the first chunk
    are sent as a ``data: {"error": ...}`` event (the status line has already gone out)."""
    obj = "chat.completion.chunk" if chat else "text_completion"
    head = {"id": prep.request_id, "object": obj, "created": prep.created, "model": prep.model}
    usage_field = {"usage": None} if prep.include_usage else {}
    n_out = 0
    offsets = [0] * (prep.n * len(prep.requests))

    def chunk(choice: dict[str, Any]) -> bytes:
        return sse({**head, "choices": [choice], **usage_field})

    try:
        if chat:
            tools = prep.tool_mode not in (None, "none")
            for k in range(prep.n):
                yield chunk(
                    {
                        "index": k,
                        # With tools the reply may be calls only: content stays null until
                        # there is some (OpenAI's clients then add up to content=None, as sent
                        # whole).
                        "delta": {"role": "assistant", "content": None if tools else ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                )
        # The echoed prompt goes first; when it carries logprobs (or vLLM's prompt_logprobs were
        # asked for) it waits for the prompt's logprobs, which come with the prompt's first output.
        opening = prep.echo_logprobs or prep.prompt_logprobs is not None
        if prep.echo and not opening:
            for i, p in enumerate(prep.prompts):
                text = echo_text(engine, p)
                for j in range(prep.n):
                    yield chunk(
                        {"index": i * prep.n + j, "text": text, "logprobs": None, "finish_reason": None}
                    )
        opened = [not opening] * len(prep.requests)
        cached = [0] * len(prep.requests)
        async for i, out in merged_outputs(engine, prep, delta=True):
            cached[i] = max(cached[i], out.num_cached_tokens)
            error = engine_error(out)
            if error is not None and error.status == 400:
                raise error  # refused before it ran: nothing to end
            if not opened[i]:
                opened[i] = True
                text = echo_text(engine, prep.prompts[i]) if prep.echo else ""
                for j in range(prep.n):
                    k = i * prep.n + j
                    first: dict[str, Any] = {
                        "index": k,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": None,
                    }
                    if prep.echo_logprobs:
                        head_lp = completion_logprobs(
                            engine, prompt_positions(out), 0, prep.params.prompt_logprobs or 0, prep.logprobs
                        )
                        first["logprobs"] = head_lp
                        offsets[k] = sum(len(s) for s in head_lp["tokens"])
                    if prep.prompt_logprobs is not None:
                        first["prompt_logprobs"] = prompt_logprob_dicts(
                            out, prep.params.prompt_logprobs or 0, prep.prompt_logprobs
                        )
                    yield chunk(first)
            for c in out.outputs:
                k = i * prep.n + c.index
                n_out += len(c.token_ids)
                if not c.text and not c.finish_reason and not c.logprobs:
                    continue
                body = choice_body(engine, prep, chat, k, out, c, streaming=True, offset=offsets[k])
                if body.get("delta") == {} and not body["finish_reason"] and body["logprobs"] is None:
                    continue  # text a tool-call scanner holds back for now
                yield chunk(body)
                # text_offset counts the tokens' own strings, as the whole response does: text a
                # stop string holds back, or a character split across tokens, must not shift it.
                if not chat and body["logprobs"] is not None:
                    offsets[k] += sum(len(s) for s in body["logprobs"]["tokens"])
            if error is not None:  # failed while running: its choices ended with finish_reason "error"
                raise error
        if prep.include_usage:
            n_prompt = sum(len(p.token_ids) for p in prep.prompts)
            yield sse({**head, "choices": [], "usage": usage(n_prompt, n_out, sum(cached))})
    except APIError as e:
        yield sse(e.body())
    except Exception as e:  # e.g. the engine stopping under a live stream
        yield sse({"error": {"message": str(e), "type": "server_error", "param": None, "code": None}})
    yield b"data: [DONE]\n\n"
