"""gpt-oss's harmony replies through /v1/chat/completions: reasoning_content, content and tool_calls
from the reply's channels, as vLLM answers for gpt-oss, non-streamed and streamed alike.

The model is a tiny random Llama whose tokenizer is SmolLM2's plus harmony's markers as special added
tokens (``<|start|>``, ``<|channel|>``, ``<|message|>``, ``<|end|>``, ``<|return|>``, ``<|call|>``,
``<|constrain|>``) and a chat template of this project's that renders harmony (so the server knows
the format from the template, as it does for gpt-oss's own); a grammar (``structured_outputs``) makes
it write a harmony reply of known shape. Driven by the official ``openai`` client."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from server_thread import ServerThread, wait_idle

pytest.importorskip("llguidance")
pytestmark = pytest.mark.timeout(600)

MODEL = "tiny-harmony"
MARKERS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>"]
# A harmony chat template written for this test (developer message with the tools, each turn's
# channels, the generation prompt "<|start|>assistant").
TEMPLATE = (
    "{%- if reasoning_effort is defined %}<|start|>system<|message|>Reasoning: {{ reasoning_effort }}<|end|>"
    "{%- endif %}"
    "{%- if tools %}<|start|>developer<|message|># Tools\n{% for t in tools %}{{ t.function.name }}: "
    "{{ t.function.parameters | tojson }}\n{% endfor %}<|end|>{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}"
    "{%- if m.thinking %}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{%- endif %}"
    "{%- if m.tool_calls %}{%- for c in m.tool_calls %}<|start|>assistant to=functions.{{ c.function.name }}"
    "<|channel|>commentary json<|message|>{{ c.function.arguments | tojson }}<|call|>{%- endfor %}"
    "{%- else %}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>{%- endif %}"
    "{%- elif m.role == 'tool' %}<|start|>functions.x to=assistant<|channel|>commentary<|message|>"
    "{{ m.content }}<|end|>"
    "{%- else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|start|>assistant{%- endif %}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CITY = r'"\"" /[A-Z][a-z]{2,8}/ "\""'
THINK, NEED = "Thinking it over.", "Need the weather."
GRAMMARS = {
    "answer": f'start: <|channel|> "analysis" <|message|> "{THINK}" <|end|> <|start|> "assistant" '
    '<|channel|> "final" <|message|> "Hello " /[a-z]{2,8}/',
    "call": f'start: <|channel|> "analysis" <|message|> "{NEED}" <|end|> <|start|> "assistant" <|channel|> '
    r'"commentary to=functions.get_weather " <|constrain|> "json" <|message|> "{\"city\": " '
    + CITY
    + r' "}"',
}


@pytest.fixture(scope="module")
def harmony_model(tmp_models_dir: str, default_model_path: str) -> str:
    from marker_model import make_marker_model

    return make_marker_model(os.path.join(tmp_models_dir, "harmony"), default_model_path, MARKERS, TEMPLATE)


@pytest.fixture(scope="module")
def server(harmony_model: str) -> Iterator[ServerThread]:
    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app

    engine = AsyncEngine.from_model(harmony_model, kv_cache_memory_bytes=16 << 20, max_num_seqs=8)
    with ServerThread(create_app(engine, served_model_name=MODEL)) as s:
        yield s


def body(grammar: str, tools: bool, seed: int, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = dict(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in a city?"}],
        max_tokens=80,
        temperature=0.9,
        seed=seed,
        extra_body={"structured_outputs": {"grammar": GRAMMARS[grammar]}},
        **kw,
    )
    if tools:
        out["tools"] = [WEATHER]
    return out


def accumulate(stream: Any) -> tuple[str | None, str | None, list[dict[str, str]], str | None]:
    """reasoning_content, content, tool calls and finish_reason as a client adds up the chunks."""
    reasoning: str | None = None
    content: str | None = None
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        finish = ch.finish_reason or finish
        extra = (ch.delta.model_extra or {}).get("reasoning_content")
        if extra:
            reasoning = (reasoning or "") + extra
        if ch.delta.content:
            content = (content or "") + ch.delta.content
        for tc in ch.delta.tool_calls or []:
            slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] += tc.id or ""
            if tc.function:
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
    return reasoning, content, [calls[i] for i in sorted(calls)], finish


def test_channels_become_reasoning_content_and_tool_calls(server: ServerThread) -> None:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as client:
        for seed in range(2):
            # The answer: analysis -> reasoning_content, final -> content; no marker text anywhere.
            c = client.chat.completions.create(**body("answer", False, seed)).choices[0]
            extra = c.message.model_extra or {}
            assert extra.get("reasoning_content") == THINK and c.finish_reason == "stop"
            assert (c.message.content or "").startswith("Hello ") and c.message.tool_calls is None
            streamed = accumulate(client.chat.completions.create(**body("answer", False, seed), stream=True))
            assert streamed == (THINK, c.message.content, [], "stop")
            # A call: the commentary message to functions.get_weather -> tool_calls.
            c = client.chat.completions.create(**body("call", True, seed)).choices[0]
            assert c.finish_reason == "tool_calls" and c.message.content is None
            assert (c.message.model_extra or {}).get("reasoning_content") == NEED
            (call,) = c.message.tool_calls or []
            assert call.function.name == "get_weather" and call.id.startswith("call_")
            args = json.loads(call.function.arguments)
            assert set(args) == {"city"} and args["city"].isalpha()
            reasoning, content, calls, finish = accumulate(
                client.chat.completions.create(**body("call", True, seed), stream=True)
            )
            assert (reasoning, content, finish) == (NEED, None, "tool_calls")
            assert [(k["name"], k["arguments"]) for k in calls] == [("get_weather", call.function.arguments)]
            # tool_choice "none": no calls are parsed; the call's body is content.
            c = client.chat.completions.create(**body("call", True, seed, tool_choice="none")).choices[0]
            assert c.message.tool_calls is None and c.finish_reason == "stop"
            assert c.message.content == call.function.arguments
    assert wait_idle(server)["ossa:kv_cache_usage_perc"] == 0.0


def test_reasoning_effort_and_the_responses_api(server: ServerThread) -> None:
    """reasoning_effort reaches a template that reads it (a 400 for another value); the Responses API
    gives the analysis channel as a reasoning item (reasoning_text), streamed as reasoning_text
    events, its reasoning.effort as the chat's reasoning_effort."""
    import httpx

    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as client:
        plain = client.chat.completions.create(**body("answer", False, 0))
        high = client.chat.completions.create(**body("answer", False, 0, reasoning_effort="high"))
        assert plain.usage and high.usage and high.usage.prompt_tokens > plain.usage.prompt_tokens
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(**body("answer", False, 0, reasoning_effort="extreme"))
        assert e.value.body["param"] == "reasoning_effort"  # type: ignore[index]
        grammar = {"structured_outputs": {"grammar": GRAMMARS["answer"]}}
        r = client.responses.create(
            model=MODEL, input="Hi", max_output_tokens=80, reasoning={"effort": "low"}, extra_body=grammar
        )
        kinds = [item.type for item in r.output]
        assert kinds == ["reasoning", "message"], kinds
        assert r.output[0].content and r.output[0].content[0].text == THINK  # type: ignore[union-attr]
        assert r.output_text.startswith("Hello ")
        events = list(
            client.responses.create(
                model=MODEL, input="Hi", max_output_tokens=80, stream=True, extra_body=grammar
            )
        )
        deltas = "".join(ev.delta for ev in events if ev.type == "response.reasoning_text.delta")
        done = [ev for ev in events if ev.type == "response.completed"][0]
        assert deltas == THINK and [item.type for item in done.response.output] == ["reasoning", "message"]
    bad = {"model": MODEL, "input": "Hi", "reasoning": {"effort": "extreme"}}
    r2 = httpx.post(server.url + "/v1/responses", json=bad, timeout=60)
    assert r2.status_code == 400 and r2.json()["error"]["param"] == "reasoning"
    assert wait_idle(server)["ossa:kv_cache_usage_perc"] == 0.0


def test_earlier_reasoning_reaches_the_template() -> None:
    """An assistant turn's reasoning_content (as this server returned it) is rendered as harmony's
    analysis message: the template reads it as ``thinking``."""
    from ossa.server.protocol import ChatCompletionRequest
    from ossa.server.serving import chat_inputs

    req = ChatCompletionRequest.model_validate(
        {
            "model": MODEL,
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello", "reasoning_content": "Greet back."},
                {"role": "user", "content": "Bye"},
            ],
        }
    )
    messages = chat_inputs(req, TEMPLATE).messages
    assert messages[1]["thinking"] == "Greet back."
    assert "thinking" not in chat_inputs(req, "{{ messages }}").messages[1]  # other templates: as sent
