"""Tool calling pieces without a server: tools / tool_choice validation, the grammar that forces a
call (generations on the default model parse and match the parameter schema), the parsers of the
models' own formats, and streamed deltas that reassemble to the parsed calls."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ossa.server.request_fields import FieldError, reject_unimplemented, requested_constraint
from ossa.server.tools import (
    PARSERS,
    ToolCall,
    ToolError,
    ToolStream,
    check_tools,
    forced_calls,
    forced_output,
    format_tool_calls,
    parse_tool_calls,
    parser_for_template,
)

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}


def test_tools_and_tool_choice_are_validated() -> None:
    assert check_tools([WEATHER], None)[1] == "auto"
    assert check_tools(None, None) == ([], None)
    assert check_tools([WEATHER, ADD], {"type": "function", "function": {"name": "add"}})[1] == "add"
    bad: list[tuple[Any, Any, str]] = [
        ([{"type": "function", "function": {"parameters": {}}}], None, "every tool needs a name"),
        ([{"type": "function", "function": {"name": ""}}], None, "every tool needs a name"),
        ([{"type": "retrieval"}], None, "tools\\[0\\] must be"),
        ([WEATHER, WEATHER], None, "given twice"),
        ([WEATHER], {"type": "function", "function": {"name": "nope"}}, "'nope', which is not in tools"),
        ([WEATHER], "sometimes", "tool_choice must be"),
        (None, "required", "needs tools"),
    ]
    for tools, choice, message in bad:
        with pytest.raises(ToolError, match=message):
            check_tools(tools, choice)


def test_request_fields_map_to_one_constraint() -> None:
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}, "strict": True}}
    assert requested_constraint(rf, {}).kind == "json"  # type: ignore[union-attr]
    assert requested_constraint({"type": "json_object"}, {}).kind == "json_object"  # type: ignore[union-attr]
    assert requested_constraint({"type": "text"}, {}) is None
    assert requested_constraint(None, {"guided_choice": ["a", "b"]}).kind == "choice"  # type: ignore[union-attr]
    assert requested_constraint(None, {"structured_outputs": {"regex": "a+"}}).kind == "regex"  # type: ignore[union-attr]
    cases: list[tuple[Any, dict[str, Any], str, str]] = [
        ({"type": "json_schema", "json_schema": {"name": "x"}}, {}, "response_format", "schema is missing"),
        ({"type": "xml"}, {}, "response_format", "'xml' is not supported"),
        (None, {"guided_regex": "[a-"}, "guided_regex", "does not compile"),
        (None, {"guided_choice": []}, "guided_choice", "must not be empty"),
        (None, {"guided_json": {"type": "nope"}}, "guided_json", "nope"),
        (None, {"structured_outputs": {"grammar": "start: x"}}, "structured_outputs", "does not compile"),
        (None, {"structured_outputs": {"foo": 1}}, "structured_outputs", "unexpected keyword argument 'foo'"),
        ({"type": "json_object"}, {"guided_regex": "a"}, "guided_*", "only one output constraint"),
        (
            None,
            {"guided_decoding_backend": "xgrammar", "guided_regex": "a"},
            "guided_decoding_backend",
            "xgrammar",
        ),
    ]
    for rf_, extra, param, message in cases:
        with pytest.raises(FieldError, match=message) as e:
            requested_constraint(rf_, extra)
        assert e.value.param == param


def test_unimplemented_openai_fields_are_named() -> None:
    reject_unimplemented(
        {"store": False, "service_tier": "auto", "some_vendor_field": 1, "modalities": ["text"]}
    )
    for name, value in [
        ("audio", {"voice": "x"}),
        ("functions", []),
        ("prediction", {"type": "content"}),
        ("reasoning_effort", "low"),
        ("modalities", ["audio"]),
        ("store", True),
        ("use_beam_search", True),
        ("return_tokens_as_token_ids", True),
    ]:
        with pytest.raises(FieldError, match=f"{name} is not supported") as e:
            reject_unimplemented({name: value})
        assert e.value.param == name


def test_template_picks_the_parser() -> None:
    assert parser_for_template("{{ '[TOOL_CALLS]' }}") == "mistral"
    assert parser_for_template("<|python_tag|>{{ x }}") == "llama3_json"
    assert parser_for_template("<tool_call>") == "hermes"
    assert parser_for_template(None) == "hermes"


# (the XML formats type their text values by the functions' schemas)
SCHEMAS = {f["function"]["name"]: f["function"]["parameters"] for f in (WEATHER, ADD)}
CALLS = [
    [ToolCall("get_weather", json.dumps({"city": "Paris", "unit": "C"}))],
    [
        ToolCall("add", json.dumps({"a": 1, "b": 2})),
        ToolCall("get_weather", json.dumps({"city": "Köln", "unit": "F"})),
    ],
]


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("calls", CALLS, ids=["one", "two"])
def test_parsers_read_their_format_back(parser: str, calls: list[ToolCall]) -> None:
    content = "" if parser in ("llama3_json", "pythonic") else "Let me check."
    text = format_tool_calls(parser, calls, content)
    got_content, got = parse_tool_calls(parser, text, (), SCHEMAS)
    assert [(c.name, json.loads(c.arguments)) for c in got] == [
        (c.name, json.loads(c.arguments)) for c in calls
    ]
    assert got_content == (content or None)
    plain = "The weather is fine, no tool needed."
    assert parse_tool_calls(parser, plain) == (plain, [])
    broken = text[: text.rfind('"name"') + 3]  # the last call's JSON cut short
    assert parse_tool_calls(parser, broken) == (broken, [])


def stream(
    parser: str, mode: str, text: str, cuts: list[int]
) -> tuple[str, list[dict[str, Any]], list[ToolCall]]:
    """Feeds text in pieces; returns the content and the tool calls reassembled as OpenAI clients do."""
    ts = ToolStream(parser, mode, (), SCHEMAS)
    content, deltas = "", []
    bounds = [0, *sorted(set(c % (len(text) + 1) for c in cuts)), len(text)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        c, d = ts.feed(text[a:b])
        content += c
        deltas += d
    c, d = ts.finish()
    content += c
    deltas += d
    calls: dict[int, dict[str, Any]] = {}
    for d in deltas:
        slot = calls.setdefault(d["index"], {"id": None, "name": None, "arguments": ""})
        slot["id"] = d.get("id", slot["id"])
        fn = d.get("function", {})
        slot["name"] = fn.get("name", slot["name"])
        slot["arguments"] += fn.get("arguments", "")
    return content, [calls[i] for i in sorted(calls)], ts.calls


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12), which=st.sampled_from([0, 1]))
def test_streamed_auto_calls_reassemble_to_the_parsed_ones(cuts: list[int], which: int) -> None:
    for parser in PARSERS:
        content = "" if parser in ("llama3_json", "pythonic") else "Sure."
        text = format_tool_calls(parser, CALLS[which], content)
        want_content, want = parse_tool_calls(parser, text, (), SCHEMAS)
        got_content, got, calls = stream(parser, "auto", text, cuts)
        assert [(c["name"], json.loads(c["arguments"])) for c in got] == [
            (c.name, json.loads(c.arguments)) for c in want
        ]
        assert all(c["id"] and c["id"].startswith("call_") for c in got)
        assert got_content.strip() == (want_content or "")
        plain = "No tools <tool but not quite [TOOL nor {json."
        assert stream(parser, "auto", plain, cuts)[0] == plain if parser != "llama3_json" else True


@settings(max_examples=30, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=10))
def test_streamed_forced_calls_reassemble(cuts: list[int]) -> None:
    args = json.dumps({"city": "Oslo", "unit": "C"})
    _, got, _ = stream("hermes", "get_weather", args, cuts)
    assert got == [{"id": got[0]["id"], "name": "get_weather", "arguments": args}]
    arr = json.dumps(
        [
            {"name": "add", "parameters": {"a": 1, "b": 2}},
            {"name": "get_weather", "parameters": {"city": "X", "unit": "F"}},
        ]
    )
    _, got, _ = stream("hermes", "required", arr, cuts)
    assert [(c["name"], json.loads(c["arguments"])) for c in got] == [
        (c.name, json.loads(c.arguments)) for c in forced_calls(arr, "required")
    ]


@pytest.fixture(scope="module")
def llm(default_model_path: str) -> Any:
    from ossa import LLM

    return LLM(default_model_path, kv_cache_memory_bytes=64 << 20)


@pytest.mark.parametrize("choice", ["required", "get_weather", "required-parallel"])
def test_forced_calls_on_the_default_model_match_the_schemas(llm: Any, choice: str) -> None:
    from ossa import SamplingParams

    functions, mode = check_tools(
        [WEATHER, ADD],
        "required" if choice.startswith("required") else {"type": "function", "function": {"name": choice}},
    )
    so = forced_output(functions, mode, parallel=choice.endswith("parallel"))
    msgs = [{"role": "user", "content": "What is the weather in Paris? And 2 + 3?"}]
    sps = [SamplingParams(seed=s, temperature=0.7, max_tokens=120, structured_outputs=so) for s in range(6)]
    for out in llm.chat([msgs] * 6, sps, use_tqdm=False):
        c = out.outputs[0]
        # A 135M model may go on listing parallel calls until max_tokens; its complete ones count.
        assert c.finish_reason == "stop" or choice.endswith("parallel"), c.text
        calls = forced_calls(c.text, mode)
        assert calls and (len(calls) == 1 or choice.endswith("parallel"))
        by_name = {f["name"]: f["parameters"] for f in functions}
        for call in calls:
            jsonschema.validate(json.loads(call.arguments), by_name[call.name])
