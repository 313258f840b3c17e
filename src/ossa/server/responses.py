"""OpenAI's Responses API (``POST /v1/responses``) on the chat path.

A request becomes a chat completion request (``input`` items -> messages, ``instructions`` -> a system
message first, function ``tools`` -> chat tools, ``text.format`` -> ``response_format``,
``max_output_tokens`` -> ``max_tokens``) and goes through ``prepare_chat`` like any chat request, so
templates, tool parsing, structured output, defaults and limits are the chat endpoint's. The result is
rendered as a ``response`` object: a ``message`` item with ``output_text`` and one ``function_call``
item per tool call. Streaming sends the Responses events (``response.created`` ...
``response.output_text.delta`` ... ``response.completed``), each with ``event:`` and ``data:`` lines
and a ``sequence_number``.

Not kept: responses are not stored (``store: true`` is taken and the response says ``store: false``,
as vLLM does without its store), so ``previous_response_id`` is a 400, as are the hosted tools (web or
file search, ...), reasoning settings, images and ``background``, each naming the field.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..async_engine import AsyncEngine
from .protocol import ChatCompletionRequest
from .serving import (
    APIError,
    PreparedRequest,
    bad_request,
    choice_body,
    engine_error,
    full_response,
    merged_outputs,
    prepare_chat,
    sse,
    usage,
)


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    stream: bool | None = False
    store: bool | None = None
    previous_response_id: str | None = None
    reasoning: dict[str, Any] | None = None
    background: bool | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None
    seed: int | None = None  # vLLM's extras, passed to the chat request
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    structured_outputs: dict[str, Any] | None = None  # vLLM's constraint field, as on chat requests


def _text_of(content: Any, where: str) -> str:
    """A message's content: a string, or text parts (input_text / output_text / text)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where}.content must be a string or a list of text parts", param="input")
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text") or not isinstance(part.get("text"), str):
            raise bad_request(f"{where}: only text parts are supported, got {kind!r}", param="input")
        texts.append(part["text"])
    return "".join(texts)


def chat_messages_of(req: ResponsesRequest) -> list[dict[str, Any]]:
    """The conversation as chat messages: instructions first, then the input items in order."""
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    items = [{"role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an object", param="input")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise bad_request(f"{where}.role must be user, assistant, system or developer", param="input")
            messages.append({"role": role, "content": _text_of(item.get("content"), where)})
        elif kind == "function_call":
            call = {
                "id": str(item.get("call_id") or item.get("id") or ""),
                "type": "function",
                "function": {"name": str(item.get("name", "")), "arguments": str(item.get("arguments", ""))},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
                last["tool_calls"].append(call)  # parallel calls: one assistant turn
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            if not isinstance(output, str):
                output = json.dumps(output)
            messages.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")), "content": output})
        else:
            raise bad_request(f"{where}: input items of type {kind!r} are not supported", param="input")
    return messages


def chat_request_of(req: ResponsesRequest) -> ChatCompletionRequest:
    """The chat completion request that does this response's work; 400s naming unsupported fields."""
    for name, value, asks in (
        ("previous_response_id", req.previous_response_id, req.previous_response_id is not None),
        ("background", req.background, bool(req.background)),
        (
            "reasoning",
            req.reasoning,
            bool(req.reasoning and any(v for k, v in req.reasoning.items() if k != "effort")),
        ),
    ):
        if asks:
            hint = " (responses are not stored here)" if name == "previous_response_id" else ""
            raise bad_request(f"{name}={value!r} is not supported by this server{hint}", param=name)
    tools = None
    if req.tools is not None:
        tools = []
        for t in req.tools:
            if not isinstance(t, dict) or t.get("type") != "function":
                kind = t.get("type") if isinstance(t, dict) else t
                raise bad_request(f"only function tools are supported, got {kind!r}", param="tools")
            fn = {k: t[k] for k in ("name", "description", "parameters") if t.get(k) is not None}
            tools.append({"type": "function", "function": fn})
    choice = req.tool_choice
    if isinstance(choice, dict) and choice.get("type") == "function" and "function" not in choice:
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    fmt = (req.text or {}).get("format")
    response_format = None
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
            raise bad_request("text.format.type must be text, json_object or json_schema", param="text")
        if fmt["type"] == "json_schema":
            schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
            response_format = {"type": "json_schema", "json_schema": schema}
        else:
            response_format = {"type": fmt["type"]}
    extras = {
        k: getattr(req, k)
        for k in ("seed", "top_k", "min_p", "repetition_penalty", "user", "structured_outputs")
        if getattr(req, k) is not None
    }
    if req.reasoning and req.reasoning.get("effort") is not None:  # for templates that read it (gpt-oss)
        extras["reasoning_effort"] = req.reasoning["effort"]
    body: dict[str, Any] = {
        "model": req.model,
        "messages": chat_messages_of(req),
        "max_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "tools": tools,
        "tool_choice": choice,
        "parallel_tool_calls": req.parallel_tool_calls,
        "response_format": response_format,
        "stream": bool(req.stream),
        **extras,
    }
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValueError as e:
        raise bad_request(str(e)) from None


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def response_object(
    req: ResponsesRequest, rid: str, model: str, created: int, status: str, output: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "model": model,
        "output": output,
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": req.temperature,
        "text": req.text or {"format": {"type": "text"}},
        "tool_choice": req.tool_choice or "auto",
        "tools": req.tools or [],
        "top_p": req.top_p,
        "truncation": "disabled",
        "metadata": req.metadata or {},
        "user": req.user,
    }


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content if status == "completed" else [],
    }


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    """A reasoning output item (gpt-oss's analysis channel), its text as reasoning_text content."""
    content = [{"type": "reasoning_text", "text": text}] if status == "completed" else []
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def response_usage(chat_usage: dict[str, Any]) -> dict[str, Any]:
    cached = (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {
        "input_tokens": chat_usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": chat_usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": chat_usage["total_tokens"],
    }


async def full_responses(engine: AsyncEngine, prep: PreparedRequest, req: ResponsesRequest) -> dict[str, Any]:
    """The whole response object, generated to the end."""
    body = await full_response(engine, prep, chat=True)
    choice = body["choices"][0]
    message = choice["message"]
    output: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        output.append(reasoning_item(_id("rs"), message["reasoning_content"]))
    if message.get("content"):
        output.append(message_item(_id("msg"), message["content"]))
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        output.append(call_item(_id("fc"), call["id"], fn["name"], fn["arguments"]))
    status = "incomplete" if choice["finish_reason"] == "length" else "completed"
    obj = response_object(req, _id("resp"), prep.model, prep.created, status, output)
    obj["usage"] = response_usage(body["usage"])
    return obj


def event(kind: str, seq: int, **fields: Any) -> bytes:
    """One Responses event: its ``event:`` line, then the chat stream's ``data:`` line."""
    return f"event: {kind}\n".encode() + sse({"type": kind, "sequence_number": seq, **fields})


async def stream_responses(
    engine: AsyncEngine, prep: PreparedRequest, req: ResponsesRequest
) -> AsyncIterator[bytes]:
    """The Responses streaming events, ending with ``response.completed`` (or ``.incomplete``, or
    ``response.failed`` with the error)."""
    rid = _id("resp")
    seq = 0

    def next_seq() -> int:
        nonlocal seq
        seq += 1
        return seq - 1

    def snapshot(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        return response_object(req, rid, prep.model, prep.created, status, output)

    yield event("response.created", next_seq(), response=snapshot("in_progress", []))
    yield event("response.in_progress", next_seq(), response=snapshot("in_progress", []))
    items: list[dict[str, Any]] = []  # the output items, as they end up
    text_at: int | None = None  # the message item's index, once text has come
    reason_at: int | None = None  # the reasoning item's, once reasoning has come
    at: dict[str, Any] = {}  # its place, as the text events name it
    calls_at: dict[int, int] = {}  # a chat delta's tool call index -> its item's index
    finish = None
    n_in = n_out = cached = 0
    try:
        async for _, out in merged_outputs(engine, prep, delta=True):
            error = engine_error(out)
            if error is not None and error.status == 400:
                raise error
            cached = max(cached, out.num_cached_tokens)
            for c in out.outputs:
                n_out += len(c.token_ids)
                if not c.text and not c.finish_reason:
                    continue
                delta = choice_body(engine, prep, True, 0, out, c, streaming=True)
                finish = delta["finish_reason"] or finish
                d = delta["delta"]
                if d.get("reasoning_content"):
                    if reason_at is None:
                        reason_at = len(items)
                        items.append(reasoning_item(_id("rs"), "", "in_progress"))
                        yield event(
                            "response.output_item.added",
                            next_seq(),
                            output_index=reason_at,
                            item=items[reason_at],
                        )
                    items[reason_at]["_text"] = items[reason_at].get("_text", "") + d["reasoning_content"]
                    yield event(
                        "response.reasoning_text.delta",
                        next_seq(),
                        item_id=items[reason_at]["id"],
                        output_index=reason_at,
                        content_index=0,
                        delta=d["reasoning_content"],
                    )
                if d.get("content"):
                    if text_at is None:
                        text_at = len(items)
                        items.append(message_item(_id("msg"), "", "in_progress"))
                        at = {"item_id": items[text_at]["id"], "output_index": text_at, "content_index": 0}
                        yield event(
                            "response.output_item.added",
                            next_seq(),
                            output_index=text_at,
                            item=items[text_at],
                        )
                        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                        yield event("response.content_part.added", next_seq(), **at, part=part)
                    items[text_at]["_text"] = items[text_at].get("_text", "") + d["content"]
                    yield event(
                        "response.output_text.delta", next_seq(), **at, delta=d["content"], logprobs=[]
                    )
                for tc in d.get("tool_calls") or []:
                    k = int(tc.get("index", 0))
                    fn = tc.get("function") or {}
                    if k not in calls_at:
                        calls_at[k] = len(items)
                        items.append(
                            call_item(
                                _id("fc"), str(tc.get("id") or ""), fn.get("name") or "", "", "in_progress"
                            )
                        )
                        yield event(
                            "response.output_item.added",
                            next_seq(),
                            output_index=calls_at[k],
                            item=dict(items[calls_at[k]]),
                        )
                    item = items[calls_at[k]]
                    if fn.get("arguments"):
                        item["arguments"] += fn["arguments"]
                        yield event(
                            "response.function_call_arguments.delta",
                            next_seq(),
                            item_id=item["id"],
                            output_index=calls_at[k],
                            delta=fn["arguments"],
                        )
            if error is not None:
                raise error
        n_in = sum(len(p.token_ids) for p in prep.prompts)
        for index, item in enumerate(items):
            if item["type"] == "reasoning":
                text = item.pop("_text", "")
                common = {"item_id": item["id"], "output_index": index, "content_index": 0}
                yield event("response.reasoning_text.done", next_seq(), **common, text=text)
                items[index] = reasoning_item(item["id"], text)
            elif item["type"] == "message":
                text = item.pop("_text", "")
                part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
                common = {"item_id": item["id"], "output_index": index, "content_index": 0}
                yield event("response.output_text.done", next_seq(), **common, text=text, logprobs=[])
                yield event("response.content_part.done", next_seq(), **common, part=part)
                items[index] = message_item(item["id"], text)
            else:
                yield event(
                    "response.function_call_arguments.done",
                    next_seq(),
                    item_id=item["id"],
                    output_index=index,
                    arguments=item["arguments"],
                )
                item["status"] = "completed"
            yield event("response.output_item.done", next_seq(), output_index=index, item=items[index])
        status = "incomplete" if finish == "length" else "completed"
        final = snapshot(status, items)
        final["usage"] = response_usage(usage(n_in, n_out, cached))
        yield event(f"response.{status}", next_seq(), response=final)
    except APIError as e:
        failed = snapshot("failed", [])
        failed["error"] = {"code": str(e.status), "message": e.body()["error"]["message"]}
        yield event("response.failed", next_seq(), response=failed)
    except Exception as e:  # e.g. the engine stopping under a live stream
        failed = snapshot("failed", [])
        failed["error"] = {"code": "server_error", "message": str(e)}
        yield event("response.failed", next_seq(), response=failed)


def responses_prep(
    engine: AsyncEngine,
    req: ResponsesRequest,
    model: str,
    tool_call_parser: str | None,
    reasoning_parser: str = "auto",
) -> PreparedRequest:
    chat = chat_request_of(req)
    try:
        return prepare_chat(engine, chat, model, None, tool_call_parser, None, reasoning_parser)
    except APIError as e:  # the chat request's reasoning_effort is this request's reasoning.effort
        if e.param == "reasoning_effort":
            e.param = "reasoning"
            e.message = e.message.replace("reasoning_effort", "reasoning.effort")
        raise
