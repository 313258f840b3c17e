"""Structured output and tool calling through the OpenAI-compatible server, driven by the official
``openai`` client (``chat.completions.parse`` with a Pydantic model), LangChain's ChatOpenAI
(``with_structured_output`` both ways, ``bind_tools``) and raw JSON for vLLM's extra fields."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel, Field
from server_thread import ServerThread, wait_idle

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")
pytestmark = pytest.mark.timeout(600)

MODEL = "smol"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


class City(BaseModel):
    name: str = Field(max_length=20)
    country: str = Field(max_length=20)
    population_millions: int = Field(ge=0, le=100)


@pytest.fixture(scope="module")
def server(default_model_path: str) -> Iterator[ServerThread]:
    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app

    engine = AsyncEngine.from_model(
        default_model_path, kv_cache_memory_bytes=32 << 20, max_num_seqs=32, max_num_batched_tokens=512
    )
    with ServerThread(create_app(engine, served_model_name=MODEL)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300
    ) as c:  # (closed: no socket left for the GC)
        yield c


def chat(server: ServerThread, **body: Any) -> httpx.Response:
    body.setdefault("model", MODEL)
    body.setdefault("messages", [{"role": "user", "content": "Tell me about Paris."}])
    return httpx.post(server.url + "/v1/chat/completions", json=body, timeout=300)


def test_openai_parse_returns_a_pydantic_object(client: openai.OpenAI) -> None:
    for seed in range(3):
        done = client.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": "Describe Paris as JSON (name, country, population)."}],
            response_format=City,
            seed=seed,
            temperature=0.7,
            max_tokens=120,
        )
        msg = done.choices[0].message
        assert done.choices[0].finish_reason == "stop", msg.content
        assert isinstance(msg.parsed, City)


@pytest.mark.parametrize(
    ("field", "value", "check"),
    [
        ("response_format", {"type": "json_object"}, lambda t: isinstance(json.loads(t), dict)),
        ("guided_choice", ["sunny", "rainy"], lambda t: t in ("sunny", "rainy")),
        ("guided_regex", r"[0-9]{2}\.[0-9]", lambda t: len(t) == 4 and t[2] == "."),
        ("structured_outputs", {"choice": ["yes", "no"]}, lambda t: t in ("yes", "no")),
        (
            "guided_json",
            {**City.model_json_schema(), "additionalProperties": False},
            lambda t: City.model_validate_json(t) is not None,
        ),
    ],
)
def test_vllm_and_openai_constraint_fields(server: ServerThread, field: str, value: Any, check: Any) -> None:
    for endpoint in ("chat", "completions"):
        body: dict[str, Any] = {
            "model": MODEL,
            field: value,
            "max_tokens": 120,
            "seed": 3,
            "temperature": 0.5,
        }
        if field == "response_format":
            body["messages" if endpoint == "chat" else "prompt"] = (
                [{"role": "user", "content": 'Copy: {"a": 1}'}]
                if endpoint == "chat"
                else 'JSON: {"a": 1}. Again:'
            )
        elif endpoint == "chat":
            body["messages"] = [{"role": "user", "content": "Answer."}]
        else:
            body["prompt"] = "Answer:"
        url = server.url + ("/v1/chat/completions" if endpoint == "chat" else "/v1/completions")
        r = httpx.post(url, json=body, timeout=300)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        text = choice["message"]["content"] if endpoint == "chat" else choice["text"]
        if field == "response_format" and choice["finish_reason"] == "length":
            continue  # free-form objects may nest on in a 135M model
        assert choice["finish_reason"] == "stop", text
        assert check(text), text


def test_named_and_required_tool_calls(client: openai.OpenAI) -> None:
    msgs: Any = [{"role": "user", "content": "What is the weather in Oslo?"}]
    named = client.chat.completions.create(
        model=MODEL,
        messages=msgs,
        tools=[WEATHER],
        seed=1,
        max_tokens=80,  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    required = client.chat.completions.create(
        model=MODEL,
        messages=msgs,
        tools=[WEATHER],
        tool_choice="required",
        seed=1,
        max_tokens=80,  # type: ignore[list-item]
        parallel_tool_calls=False,
    )
    for done in (named, required):
        c = done.choices[0]
        assert c.finish_reason == "tool_calls"
        assert c.message.tool_calls and len(c.message.tool_calls) == 1
        call = c.message.tool_calls[0]
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_streamed_tool_call_reassembles_to_the_non_streamed_one(
    client: openai.OpenAI, tool_choice: Any
) -> None:
    kw: Any = dict(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in Rome?"}],
        tools=[WEATHER],
        tool_choice=tool_choice,
        seed=5,
        temperature=0.8,
        max_tokens=80,
    )
    full = client.chat.completions.create(**kw).choices[0]
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        for tc in d.tool_calls or []:
            slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = tc.id or slot["id"]
            if tc.function:
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
    assert finish == full.finish_reason == "tool_calls"
    assert full.message.tool_calls
    want = [(c.function.name, json.loads(c.function.arguments)) for c in full.message.tool_calls]
    assert [(calls[i]["name"], json.loads(calls[i]["arguments"])) for i in sorted(calls)] == want
    assert all(calls[i]["id"].startswith("call_") for i in calls)


def test_tool_results_go_back_through_the_template(client: openai.OpenAI) -> None:
    msgs: Any = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "unit": "C"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 3}'},
    ]
    done = client.chat.completions.create(
        model=MODEL, messages=msgs, tools=[WEATHER], tool_choice="none", max_tokens=8, seed=0
    )
    assert done.choices[0].message.content
    assert done.choices[0].finish_reason in ("stop", "length")
    assert done.usage is not None and done.usage.prompt_tokens > 20  # the tool result reached the prompt


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "nope"}},
                }
            },
            "response_format",
            "does not compile",
        ),
        ({"guided_regex": "[a-"}, "guided_regex", "does not compile"),
        ({"guided_choice": []}, "guided_choice", "must not be empty"),
        ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools", "needs a name"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            "not in tools",
        ),
        *(
            (
                {
                    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}],
                    "tool_choice": choice,
                },
                "tools",
                "parameters schema does not compile",
            )
            for choice in ("required", {"type": "function", "function": {"name": "f"}})
        ),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio", "audio is not supported"),
        ({"functions": [{"name": "f"}]}, "functions", "use tools"),
        ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_*", "only one"),
    ],
)
def test_bad_structured_requests_are_400s_naming_the_problem(
    server: ServerThread, body: dict[str, Any], param: str, message: str
) -> None:
    r = chat(server, max_tokens=4, **body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert message in err["message"] and err["param"] == param
    assert wait_idle(server)["ossa:kv_cache_usage_perc"] == 0.0


def test_a_required_call_cut_short_keeps_its_text(server: ServerThread) -> None:
    # max_tokens ends the array before one call is whole: no tool_calls, and the text is not lost.
    r = chat(server, max_tokens=3, tools=[WEATHER], tool_choice="required")
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length" and not choice["message"].get("tool_calls")
    assert choice["message"]["content"] and choice["message"]["content"].lstrip().startswith("[")


def test_continue_final_message(server: ServerThread) -> None:
    msgs = [
        {"role": "user", "content": "Name a fruit."},
        {"role": "assistant", "content": "My favourite is the"},
    ]
    r = chat(
        server,
        messages=msgs,
        add_generation_prompt=False,
        continue_final_message=True,
        max_tokens=4,
        temperature=0,
    )
    assert r.status_code == 200, r.text
    r2 = chat(server, messages=msgs, continue_final_message=True, max_tokens=4)
    assert r2.status_code == 400 and "cannot both be set" in r2.json()["error"]["message"]


def test_langchain_structured_output_and_bind_tools(server: ServerThread) -> None:
    lc = pytest.importorskip("langchain_openai")
    llm = lc.ChatOpenAI(
        model=MODEL,
        base_url=server.url + "/v1",
        api_key="unused",
        temperature=0.5,
        seed=2,
        max_tokens=120,
        max_retries=0,
    )
    question = "Describe Paris: name, country, population in millions."
    try:
        for method in ("json_schema", "function_calling"):
            obj = llm.with_structured_output(City, method=method).invoke(question)
            assert isinstance(obj, City), method
        bound = llm.bind_tools([WEATHER], tool_choice="required")
        msg = bound.invoke("What is the weather in Oslo?")
    finally:
        llm.root_client.close()  # (its connections closed here, not by the GC during a later test)
    assert msg.tool_calls and msg.tool_calls[0]["name"] == "get_weather"
    jsonschema.validate(msg.tool_calls[0]["args"], WEATHER["function"]["parameters"])
