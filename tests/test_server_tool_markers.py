"""Tool calls in the model's own format ("auto") when the format's markers are special tokens
(Hermes-2-Pro's ``<tool_call>``, Llama 3's ``<|python_tag|>``, Mistral's ``[TOOL_CALLS]``): with
special tokens skipped the markers would vanish before the parser sees them.

The model is a tiny random Llama whose tokenizer is SmolLM2's plus those markers as special added
tokens; a grammar (``structured_outputs``, which "auto" leaves free) makes it write content, the
marker token and a call, so the reply is known in shape but not in its city. Driven by the official
``openai`` client: the non-streamed reply, ``chat.completions.create(stream=True)`` accumulated by
hand, and the client's own ``chat.completions.stream`` helper all agree."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from marker_model import MARKERS, make_marker_model
from server_thread import ServerThread, wait_idle

pytest.importorskip("llguidance")
pytestmark = pytest.mark.timeout(600)

MODEL = "tiny"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CITY = r'"\"" /[A-Z][a-z]{2,8}/ "\""'
CALL = r'"{\"name\": \"get_weather\", \"arguments\": {\"city\": " ' + CITY + r' ", \"unit\": \"C\"}}"'
LLAMA_CALL = r'"{\"name\": \"get_weather\", \"parameters\": {\"city\": " ' + CITY + r' ", \"unit\": \"F\"}}"'
# What each format's reply looks like (the grammar's special-token syntax: <name>, or <[id]> for
# [TOOL_CALLS], whose brackets Lark would misread; the id is filled in below).
GRAMMARS = {
    "hermes": f'start: "Let me check." <tool_call> "\\n" {CALL} "\\n" </tool_call> "\\n" '
    f"<tool_call> {CALL} </tool_call>",
    "llama3_json": f"start: <|python_tag|> {LLAMA_CALL}",
    "mistral": f'start: "One moment." TOOL_CALLS "[" {CALL} ", " {CALL} "]"',
}
N_CALLS = {"hermes": 2, "llama3_json": 1, "mistral": 2}
CONTENT = {"hermes": "Let me check.", "llama3_json": None, "mistral": "One moment."}


@pytest.fixture(scope="module")
def marker_model(tmp_models_dir: str, default_model_path: str) -> str:
    return make_marker_model(os.path.join(tmp_models_dir, "tool_markers"), default_model_path)


@pytest.fixture(scope="module", params=list(GRAMMARS))
def server(request: pytest.FixtureRequest, marker_model: str) -> Iterator[tuple[ServerThread, str]]:
    from ossa import Tokenizer
    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app

    (tc,) = Tokenizer.from_file(marker_model).encode("[TOOL_CALLS]", add_special_tokens=False)
    GRAMMARS["mistral"] = GRAMMARS["mistral"].replace("TOOL_CALLS", f"<[{tc}]>")
    engine = AsyncEngine.from_model(marker_model, kv_cache_memory_bytes=16 << 20, max_num_seqs=8)
    app = create_app(engine, served_model_name=MODEL, tool_call_parser=request.param)
    with ServerThread(app) as s:
        yield s, request.param


def body(parser: str, **kw: Any) -> dict[str, Any]:
    return dict(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in two cities?"}],
        tools=[WEATHER],
        max_tokens=100,
        temperature=0.9,
        seed=kw.pop("seed", 3),
        extra_body={"structured_outputs": {"grammar": GRAMMARS[parser]}},
        **kw,
    )


def test_special_token_markers_become_tool_calls(server: tuple[ServerThread, str]) -> None:
    s, parser = server
    with openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0) as client:
        check_replies(client, parser)
    assert wait_idle(s)["ossa:kv_cache_usage_perc"] == 0.0


def check_replies(client: openai.OpenAI, parser: str) -> None:
    for seed in range(3):
        done = client.chat.completions.create(**body(parser, seed=seed))
        c = done.choices[0]
        assert c.finish_reason == "tool_calls", c.message
        assert c.message.content == CONTENT[parser]  # no marker, no end-of-turn token text
        calls = c.message.tool_calls or []
        assert len(calls) == N_CALLS[parser]
        for call in calls:
            assert call.type == "function" and call.id.startswith("call_")
            assert call.function.name == "get_weather"
            args = json.loads(call.function.arguments)
            assert set(args) == {"city", "unit"} and args["city"].isalpha()
    # Without tools the same tokens are plain text with the special tokens skipped, as before.
    plain = body(parser)
    del plain["tools"]
    text = client.chat.completions.create(**plain).choices[0].message.content or ""
    assert not any(m in text for m in MARKERS) and "get_weather" in text
    # tool_choice "none": nothing is parsed, the reply is content.
    none = client.chat.completions.create(**body(parser, tool_choice="none")).choices[0]
    assert none.message.tool_calls is None and none.finish_reason == "stop"


def accumulate(stream: Any) -> tuple[str | None, list[dict[str, str]], str | None, list[Any]]:
    """content, tool calls and finish_reason as a client adds up chat.completions chunks; and the
    tool-call deltas themselves."""
    content: str | None = None
    calls: dict[int, dict[str, str]] = {}
    finish, deltas = None, []
    for chunk in stream:
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        finish = ch.finish_reason or finish
        if ch.delta.content:
            content = (content or "") + ch.delta.content
        for tc in ch.delta.tool_calls or []:
            deltas.append(tc)
            slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] += tc.id or ""
            if tc.function:
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
    return content, [calls[i] for i in sorted(calls)], finish, deltas


def test_streamed_calls_add_up_to_the_non_streamed_reply(server: tuple[ServerThread, str]) -> None:
    s, parser = server
    with openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0) as client:
        check_streams(client, parser)


def check_streams(client: openai.OpenAI, parser: str) -> None:
    full = client.chat.completions.create(**body(parser)).choices[0]
    want = [(t.function.name, t.function.arguments) for t in full.message.tool_calls or []]
    assert len(want) == N_CALLS[parser]

    content, calls, finish, deltas = accumulate(client.chat.completions.create(stream=True, **body(parser)))
    assert (content, finish) == (full.message.content, "tool_calls")
    assert [(c["name"], c["arguments"]) for c in calls] == want  # the same text, not only the same JSON
    assert all(c["id"].startswith("call_") for c in calls)
    # OpenAI's granularity: each call opens with id, type and name, then its arguments in pieces.
    for i in range(len(want)):
        mine = [d for d in deltas if d.index == i]
        assert mine[0].id and mine[0].type == "function" and mine[0].function.name == "get_weather"
        assert all(d.id is None and not d.function.name for d in mine[1:])
        assert len(mine) > 2, "arguments arrive as they are generated, not in one piece"

    with client.chat.completions.stream(**body(parser)) as st:
        for _ in st:
            pass
        final = st.get_final_completion().choices[0]
    assert final.finish_reason == "tool_calls" and final.message.content == full.message.content
    got = [(t.function.name, t.function.arguments) for t in final.message.tool_calls or []]
    assert got == want
    for t in final.message.tool_calls or []:  # the helper parses strict tools' arguments
        assert t.function.parsed_arguments == json.loads(t.function.arguments)


def test_the_marker_tokens_are_special(marker_model: str) -> None:
    """The premise: these markers are special tokens, skipped when special tokens are."""
    from ossa import Tokenizer

    tok = Tokenizer.from_file(marker_model)
    for m in MARKERS:
        (i,) = tok.encode(m, add_special_tokens=False)
        assert tok.decode([i], skip_special_tokens=True) == ""
    assert Path(marker_model, "tokenizer.json").exists()
