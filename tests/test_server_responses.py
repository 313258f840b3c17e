"""OpenAI's Responses API (``/v1/responses``) driven by the official ``openai`` client: text, streaming
events, function tools (forced and returned results), JSON output, and the fields it refuses. Texts are
compared with the chat endpoint's for the same greedy request (the Responses path is the chat path)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from server_thread import ServerThread, wait_idle

pytest.importorskip("llguidance")
pytestmark = pytest.mark.timeout(600)

MODEL = "smol"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@pytest.fixture(scope="module")
def server(default_model_path: str) -> Iterator[ServerThread]:
    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app

    engine = AsyncEngine.from_model(default_model_path, kv_cache_memory_bytes=32 << 20, max_num_seqs=16)
    with ServerThread(create_app(engine, served_model_name=MODEL)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300
    ) as c:  # (closed: no socket left for the GC)
        yield c


def chat_text(client: openai.OpenAI, messages: list[dict[str, Any]], max_tokens: int) -> str:
    r = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        temperature=0.0,
        max_tokens=max_tokens,  # type: ignore[arg-type]
    )
    return r.choices[0].message.content or ""


def test_text_matches_the_chat_endpoint(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model=MODEL,
        instructions="Answer briefly.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Name a French city."}]}],
        temperature=0.0,
        max_output_tokens=12,
    )
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Name a French city."},
    ]
    assert r.output_text == chat_text(client, messages, 12) and r.output_text
    assert r.status in ("completed", "incomplete") and r.object == "response" and r.id.startswith("resp_")
    assert r.usage is not None and 0 < r.usage.output_tokens <= 12 and r.usage.input_tokens > 0
    if r.status == "incomplete":
        assert r.incomplete_details is not None and r.incomplete_details.reason == "max_output_tokens"


def test_streamed_events_add_up_to_the_response(client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {"model": MODEL, "input": "Tell me about Paris.", "temperature": 0.0}
    whole = client.responses.create(max_output_tokens=16, **kwargs)
    events = list(client.responses.create(max_output_tokens=16, stream=True, **kwargs))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text == events[-1].response.output_text
    assert "response.output_text.done" in kinds and "response.output_item.done" in kinds


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_function_call(client: openai.OpenAI, stream: bool) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "input": "What is the weather in Paris?",
        "tools": [WEATHER],
        "tool_choice": "required",
        "max_output_tokens": 80,
    }
    if stream:
        events = list(client.responses.create(stream=True, **kwargs))
        args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        final = events[-1].response
        (call,) = [o for o in final.output if o.type == "function_call"]
        assert call.arguments == args
    else:
        final = client.responses.create(**kwargs)
        (call,) = [o for o in final.output if o.type == "function_call"]
    assert call.name == "get_weather" and call.call_id
    assert isinstance(json.loads(call.arguments)["city"], str)


def test_function_results_go_back_in(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model=MODEL,
        tools=[WEATHER],
        input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"},
        ],
        max_output_tokens=16,
    )
    assert r.status in ("completed", "incomplete") and r.output


def test_store_is_taken_and_not_kept(client: openai.OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="Hi", store=True, max_output_tokens=2)
    assert r.store is False and r.output_text


def test_json_schema_output(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "country": {"type": "string", "maxLength": 20},
        },
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    r = client.responses.create(
        model=MODEL,
        input="Give a city and its country as JSON.",
        text={"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}},
        max_output_tokens=200,
        temperature=0.0,
    )
    assert r.status == "completed", r.output_text
    assert set(json.loads(r.output_text)) == {"city", "country"}


@pytest.mark.parametrize(
    "body, param",
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"input": [{"type": "input_image", "image_url": "http://x/y.png"}]}, "input"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input"),
        ({"text": {"format": {"type": "yaml"}}}, "text"),
    ],
)
def test_what_it_refuses_is_a_400_naming_the_field(
    server: ServerThread, body: dict[str, Any], param: str
) -> None:
    r = httpx.post(server.url + "/v1/responses", json={"model": MODEL, "input": "Hi", **body}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert wait_idle(server)["ossa:kv_cache_usage_perc"] == 0.0
