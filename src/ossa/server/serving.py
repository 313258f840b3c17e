"""Completions and chat completions: request -> engine requests -> OpenAI-shaped JSON or SSE chunks.

Python's per-delta work is only what the wire format needs: wrap the engine's text delta in a JSON
chunk. Logprob entries are decoded only when the client asked for them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from ..async_engine import AsyncEngine
from ..engine_io import generation_params, logprob_dicts
from ..sampling_params import SamplingParams
from .protocol import ChatCompletionRequest, CompletionRequest, random_id


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


@dataclass
class EnginePrompt:
    text: str | None
    token_ids: list[int]


@dataclass
class PreparedRequest:
    """Everything validated up front: engine params per prompt, so a bad field fails before any work."""

    request_id: str
    model: str
    prompts: list[EnginePrompt]
    params: SamplingParams
    engine_params: list[Any]
    n: int
    logprobs: int | None
    stream: bool
    include_usage: bool
    echo: bool = False
    prompt_logprobs: int | None = None  # vLLM's field, as asked
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def echo_logprobs(self) -> bool:
        # OpenAI's echo with logprobs: the prompt's tokens lead each choice's logprobs.
        return self.echo and self.logprobs is not None


def sampling_params(
    req: CompletionRequest | ChatCompletionRequest,
    max_tokens: int | None,
    logprobs: int | None,
    prompt_logprobs: int | None = None,
) -> SamplingParams:
    """The request's ``SamplingParams``; raises APIError(400) naming the bad field."""
    top_k = -1 if req.top_k in (None, 0) else req.top_k
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
            repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            top_k=top_k,
            min_p=req.min_p or 0.0,
            seed=req.seed,
            stop=req.stop,
            stop_token_ids=req.stop_token_ids,
            ignore_eos=req.ignore_eos,
            max_tokens=max_tokens,
            min_tokens=req.min_tokens,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            skip_special_tokens=req.skip_special_tokens,
            logit_bias=bias,
            include_stop_str_in_output=req.include_stop_str_in_output,
        )
    except (ValueError, TypeError) as e:
        raise bad_request(str(e)) from None


def engine_params(
    engine: AsyncEngine, prompt: EnginePrompt, sp: SamplingParams, priority: int, explicit_max: bool = False
) -> Any:
    """``explicit_max``: the client set max_tokens, so prompt + max_tokens past the context is its
    error (vLLM's 400); a default max_tokens is cut to what the context has room for."""
    n_prompt = len(prompt.token_ids)
    if n_prompt + 1 > engine.max_model_len:
        raise bad_request(
            f"This model's maximum context length is {engine.max_model_len} tokens; the prompt has "
            f"{n_prompt} tokens, which leaves no room for output (at most {engine.max_model_len - 1} "
            f"prompt tokens).",
            param="messages" if prompt.text is None else "prompt",
        )
    if explicit_max and sp.max_tokens is not None and n_prompt + sp.max_tokens > engine.max_model_len:
        raise bad_request(
            f"This model's maximum context length is {engine.max_model_len} tokens. However, you "
            f"requested {n_prompt + sp.max_tokens} tokens ({n_prompt} in the prompt, {sp.max_tokens} "
            f"in the completion). Please reduce the length of the prompt or the completion.",
            param="max_tokens",
        )
    try:
        return generation_params(
            sp,
            prompt_len=n_prompt,
            max_model_len=engine.max_model_len,
            eos_token_ids=engine.eos_token_ids,
            vocab_size=engine.vocab_size,
            backend="cpp",
            priority=priority,
        )
    except (ValueError, TypeError) as e:
        raise bad_request(str(e)) from None


def check_ids(engine: AsyncEngine, ids: list[int], param: str) -> list[int]:
    if not ids:
        raise bad_request("the prompt is empty: give at least one token", param=param)
    for t in ids:
        if not 0 <= t < engine.vocab_size:
            raise bad_request(f"token id {t} is outside the vocabulary [0, {engine.vocab_size})", param=param)
    return ids


def encode(engine: AsyncEngine, text: str, add_special_tokens: bool, param: str) -> list[int]:
    try:
        ids = engine.tokenizer.encode(text, add_special_tokens=add_special_tokens)
    except (ValueError, UnicodeError) as e:
        raise bad_request(f"cannot tokenize the {param}: {e}", param=param) from None
    return check_ids(engine, list(ids), param)


def completion_prompts(engine: AsyncEngine, prompt: Any) -> list[EnginePrompt]:
    if isinstance(prompt, str):
        return [EnginePrompt(prompt, encode(engine, prompt, True, "prompt"))]
    if not prompt:
        raise bad_request("prompt must not be empty", param="prompt")
    if all(isinstance(p, int) for p in prompt):
        return [EnginePrompt(None, check_ids(engine, list(prompt), "prompt"))]
    out = []
    for p in prompt:
        if isinstance(p, str):
            out.append(EnginePrompt(p, encode(engine, p, True, "prompt")))
        else:
            out.append(EnginePrompt(None, check_ids(engine, list(p), "prompt")))
    return out


def message_dicts(messages: list[Any]) -> list[dict[str, Any]]:
    """Messages for the chat template: content parts of type text are joined into one string."""
    out = []
    for i, m in enumerate(messages):
        d = m.model_dump(exclude_none=True)
        content = m.content
        if isinstance(content, list):
            texts = []
            for part in content:
                if part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise bad_request("only text content parts are supported", param=f"messages[{i}].content")
                texts.append(part["text"])
            d["content"] = "\n".join(texts)
        elif content is None:
            d["content"] = ""
        out.append(d)
    return out


def chat_prompt(
    engine: AsyncEngine,
    messages: list[Any],
    add_generation_prompt: bool,
    kwargs: dict[str, Any] | None,
    rendered: str | None = None,
) -> EnginePrompt:
    """The prompt of a chat: rendered with the server's template, or given already ``rendered`` (a
    request's own template, rendered in the template sandbox)."""
    if rendered is not None:
        return EnginePrompt(rendered, encode(engine, rendered, False, "messages"))
    try:
        text = engine.tokenizer.apply_chat_template(
            message_dicts(messages),
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **(kwargs or {}),
        )
    except APIError:
        raise
    except Exception as e:  # template errors (raise_exception, bad roles, jinja) are the caller's input
        raise bad_request(f"cannot apply the chat template: {e}", param="messages") from None
    # The template writes its own special tokens: no BOS on top.
    return EnginePrompt(text, encode(engine, text, False, "messages"))


def check_n(engine: AsyncEngine, n: int, prompts: int) -> None:
    if n * prompts > engine.max_num_seqs:
        raise bad_request(
            f"n * number of prompts is {n * prompts}; this server runs at most "
            f"{engine.max_num_seqs} sequences at once",
            param="n",
        )


def prepare_completion(engine: AsyncEngine, req: CompletionRequest, model: str) -> PreparedRequest:
    if req.suffix:
        raise bad_request("suffix is not supported", param="suffix")
    if req.best_of is not None and req.best_of != req.n:
        raise bad_request("best_of is not supported (it must equal n)", param="best_of")
    prompts = completion_prompts(engine, req.prompt)
    check_n(engine, req.n, len(prompts))
    # The engine computes one set of prompt logprobs per prompt, wide enough for both uses.
    wanted = [k for k in (req.prompt_logprobs, req.logprobs if req.echo else None) if k is not None]
    sp = sampling_params(req, req.max_tokens, req.logprobs, max(wanted) if wanted else None)
    explicit = "max_tokens" in req.model_fields_set and req.max_tokens is not None
    params = [engine_params(engine, p, sp, req.priority, explicit) for p in prompts]
    return PreparedRequest(
        random_id("cmpl"),
        model,
        prompts,
        sp,
        params,
        req.n,
        req.logprobs,
        bool(req.stream),
        bool(req.stream_options and req.stream_options.include_usage),
        echo=bool(req.echo),
        prompt_logprobs=req.prompt_logprobs,
    )


def prepare_chat(
    engine: AsyncEngine, req: ChatCompletionRequest, model: str, rendered: str | None = None
) -> PreparedRequest:
    prompt = chat_prompt(engine, req.messages, req.add_generation_prompt, req.chat_template_kwargs, rendered)
    check_n(engine, req.n, 1)
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    if req.top_logprobs and not req.logprobs:
        raise bad_request("top_logprobs needs logprobs=true", param="top_logprobs")
    sp = sampling_params(req, max_tokens, logprobs)
    explicit = req.max_completion_tokens is not None or req.max_tokens is not None
    params = [engine_params(engine, prompt, sp, req.priority, explicit)]
    return PreparedRequest(
        random_id("chatcmpl"),
        model,
        [prompt],
        sp,
        params,
        req.n,
        logprobs,
        bool(req.stream),
        bool(req.stream_options and req.stream_options.include_usage),
    )


# -- running ---------------------------------------------------------------------------------------


async def merged_outputs(engine: AsyncEngine, prep: PreparedRequest) -> AsyncIterator[tuple[int, Any]]:
    """Yields (prompt index, engine delta) for all prompts of a request as they arrive."""
    if len(prep.prompts) == 1:
        async for out in engine.generate(prep.request_id, prep.prompts[0].token_ids, prep.engine_params[0]):
            yield 0, out
        return
    gens = [
        engine.generate(f"{prep.request_id}-{i}", p.token_ids, g)
        for i, (p, g) in enumerate(zip(prep.prompts, prep.engine_params, strict=True))
    ]
    queue: asyncio.Queue[tuple[int, Any] | BaseException | None] = asyncio.Queue()

    async def pump(i: int, gen: AsyncIterator[Any]) -> None:
        try:
            async for out in gen:
                queue.put_nowait((i, out))
            queue.put_nowait(None)
        except Exception as e:
            queue.put_nowait(e)

    tasks = [asyncio.ensure_future(pump(i, g)) for i, g in enumerate(gens)]
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


def engine_error(out: Any) -> APIError:
    # Rejected by the scheduler before running (e.g. too big for the cache) is the caller's input;
    # anything that failed inside the loop is ours.
    if not out.first_scheduled_time:
        return bad_request(out.error)
    return APIError(500, f"generation failed: {out.error}", type_="server_error")


@dataclass
class Choice:
    text: str = ""
    token_ids: int = 0
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    logprobs: list[Any] = field(default_factory=list)


def decode_token(engine: AsyncEngine, token: int) -> str:
    return engine.tokenizer.decode([int(token)], skip_special_tokens=False)


@dataclass
class FirstToken:
    """The prompt's first token in echoed logprobs: nothing precedes it, so no logprob (OpenAI: null)."""

    token: int


def completion_logprobs(
    engine: AsyncEngine, entries: list[Any], offset: int, top_n: int | None = None
) -> dict[str, Any]:
    """OpenAI's legacy completions logprobs. ``top_n`` trims top lists (prompt entries may carry more
    alternatives than the request's ``logprobs`` when ``prompt_logprobs`` asked for more)."""
    tokens: list[str] = []
    token_lps: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    for e in entries:
        s = decode_token(engine, e.token)
        tokens.append(s)
        offsets.append(offset)
        offset += len(s)
        if isinstance(e, FirstToken):
            token_lps.append(None)
            tops.append(None)
            continue
        token_lps.append(float(e.logprob))
        top = e.top if top_n is None else list(e.top)[:top_n]
        tops.append({decode_token(engine, t): float(lp) for t, lp in top})
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}


def prompt_logprob_dicts(engine: AsyncEngine, entries: list[Any], top_n: int) -> list[Any]:
    """vLLM's ``prompt_logprobs``: None for the first token, then {token id: {logprob, rank,
    decoded_token}} holding the prompt's token and the top ``top_n`` (as ``LLM.generate`` gives them)."""
    dicts = logprob_dicts(entries, partial(decode_token, engine), top_n)
    return [None, *({str(t): asdict(lp) for t, lp in d.items()} for d in dicts)]


def echo_text(engine: AsyncEngine, p: EnginePrompt) -> str:
    """The prompt as echoed: its text, or the decoded ids of a token-id prompt."""
    return p.text if p.text is not None else engine.tokenizer.decode(p.token_ids)


def chat_logprobs(engine: AsyncEngine, entries: list[Any]) -> dict[str, Any]:
    content = []
    for e in entries:
        s = decode_token(engine, e.token)
        top = []
        for t, lp in e.top:
            ts = decode_token(engine, t)
            top.append({"token": ts, "logprob": float(lp), "bytes": list(ts.encode())})
        content.append(
            {"token": s, "logprob": float(e.logprob), "bytes": list(s.encode()), "top_logprobs": top}
        )
    return {"content": content}


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage; ``cached_tokens``: prompt tokens the prefix cache served (as OpenAI and vLLM
    report prompt caching)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


async def full_response(engine: AsyncEngine, prep: PreparedRequest, chat: bool) -> dict[str, Any]:
    choices = [Choice() for _ in range(prep.n * len(prep.prompts))]
    for i, p in enumerate(prep.prompts):
        if prep.echo:
            text = echo_text(engine, p)
            for j in range(prep.n):
                choices[i * prep.n + j].text = text
    prompt_lps: list[list[Any]] = [[] for _ in prep.prompts]
    cached = [0] * len(prep.prompts)
    async for i, out in merged_outputs(engine, prep):
        if out.error:
            raise engine_error(out)
        cached[i] = max(cached[i], out.num_cached_tokens)
        if out.has_prompt_logprobs:
            prompt_lps[i] = list(out.prompt_logprobs)
        for d in out.completions:
            c = choices[i * prep.n + d.index]
            c.text += d.text
            c.token_ids += len(d.token_ids)
            if prep.logprobs is not None:
                c.logprobs.extend(d.logprobs)
            if d.finish_reason:
                c.finish_reason = d.finish_reason
                c.stop_reason = d.stop_str or (d.stop_token if d.stop_token >= 0 else None)
    n_prompt = sum(len(p.token_ids) for p in prep.prompts)
    n_out = sum(c.token_ids for c in choices)
    body: dict[str, Any] = {
        "id": prep.request_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": prep.created,
        "model": prep.model,
        "choices": [],
    }
    for k, c in enumerate(choices):
        if chat:
            lp = chat_logprobs(engine, c.logprobs) if prep.logprobs is not None else None
            body["choices"].append(
                {
                    "index": k,
                    "message": {"role": "assistant", "content": c.text},
                    "logprobs": lp,
                    "finish_reason": c.finish_reason,
                    "stop_reason": c.stop_reason,
                }
            )
        else:
            i = k // prep.n
            lp = None
            if prep.logprobs is not None:
                entries = c.logprobs
                if prep.echo_logprobs:
                    entries = [FirstToken(prep.prompts[i].token_ids[0]), *prompt_lps[i], *c.logprobs]
                lp = completion_logprobs(engine, entries, 0, prep.logprobs)
            choice: dict[str, Any] = {
                "index": k,
                "text": c.text,
                "logprobs": lp,
                "finish_reason": c.finish_reason,
                "stop_reason": c.stop_reason,
            }
            if prep.prompt_logprobs is not None:
                choice["prompt_logprobs"] = prompt_logprob_dicts(engine, prompt_lps[i], prep.prompt_logprobs)
            body["choices"].append(choice)
    body["usage"] = usage(n_prompt, n_out, sum(cached))
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
    offsets = [0] * (prep.n * len(prep.prompts))

    def chunk(choice: dict[str, Any]) -> bytes:
        return sse({**head, "choices": [choice], **usage_field})

    try:
        if chat:
            for k in range(prep.n):
                yield chunk(
                    {
                        "index": k,
                        "delta": {"role": "assistant", "content": ""},
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
        opened = [not opening] * len(prep.prompts)
        cached = [0] * len(prep.prompts)
        async for i, out in merged_outputs(engine, prep):
            if out.error and not out.first_scheduled_time:
                raise engine_error(out)  # refused before it ran: nothing to end
            cached[i] = max(cached[i], out.num_cached_tokens)
            if not opened[i]:
                opened[i] = True
                p = prep.prompts[i]
                plps = list(out.prompt_logprobs) if out.has_prompt_logprobs else []
                text = ""
                if prep.echo:
                    text = echo_text(engine, p)
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
                            engine, [FirstToken(p.token_ids[0]), *plps], 0, prep.logprobs
                        )
                        first["logprobs"] = head_lp
                        offsets[k] = sum(len(s) for s in head_lp["tokens"])
                    if prep.prompt_logprobs is not None:
                        first["prompt_logprobs"] = prompt_logprob_dicts(engine, plps, prep.prompt_logprobs)
                    yield chunk(first)
            for d in out.completions:
                k = i * prep.n + d.index
                n_out += len(d.token_ids)
                if not d.text and not d.finish_reason and not d.logprobs:
                    continue
                finish = d.finish_reason or None
                stop_reason = (
                    (d.stop_str or (d.stop_token if d.stop_token >= 0 else None)) if finish else None
                )
                if chat:
                    lp = chat_logprobs(engine, list(d.logprobs)) if prep.logprobs is not None else None
                    delta = {"content": d.text} if d.text else {}
                    yield chunk(
                        {
                            "index": k,
                            "delta": delta,
                            "logprobs": lp,
                            "finish_reason": finish,
                            "stop_reason": stop_reason,
                        }
                    )
                else:
                    lp = None
                    if prep.logprobs is not None:
                        lp = completion_logprobs(engine, list(d.logprobs), offsets[k])
                    offsets[k] += len(d.text)
                    yield chunk(
                        {
                            "index": k,
                            "text": d.text,
                            "logprobs": lp,
                            "finish_reason": finish,
                            "stop_reason": stop_reason,
                        }
                    )
            if out.error:  # failed while running: its choices ended with finish_reason "error" above
                raise engine_error(out)
        if prep.include_usage:
            n_prompt = sum(len(p.token_ids) for p in prep.prompts)
            yield sse({**head, "choices": [], "usage": usage(n_prompt, n_out, sum(cached))})
    except APIError as e:
        yield sse(e.body())
    except Exception as e:  # e.g. the engine stopping under a live stream
        yield sse({"error": {"message": str(e), "type": "server_error", "param": None, "code": None}})
    yield b"data: [DONE]\n\n"
