"""The tool-call scanner (``ossa.server.tool_stream``): streamed deltas in OpenAI's order and
granularity that add up exactly to the non-streamed reply, however the text is cut into deltas, and
the filter that drops special-token texts other than the markers."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ossa.server.tool_stream import SpecialTextFilter, ToolStream, parse_tool_calls
from ossa.server.tools import forced_calls

DROP = ["<|im_end|>", "<|endoftext|>", "<|im_start|>"]
REPLIES = {
    "hermes": [
        'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Köln", "unit": "C"}}\n'
        '</tool_call>\n<tool_call>\n{"arguments": {"a": [1, {"b": "}{"}]}, "name": "add"}\n'
        "</tool_call><|im_end|>",
        '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>',
        "Just text, with <tool but no call.<|im_end|>",
    ],
    "mistral": [
        'One moment.[TOOL_CALLS][{"name": "a", "arguments": {"q": "x\\"y"}}, '
        '{"name": "b", "arguments": {}}]</s>',
        '[TOOL_CALLS] {"name": "a", "arguments": {"n": 1.5e3}}',
    ],
    "llama3_json": [
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}; '
        '{"name": "t", "parameters": {}}',
        '  {"name": "get_weather", "parameters": {"city": "Rome", "unit": "F"}}<|im_end|>',
        '{"answer": 42} is what a JSON reply looks like',
    ],
}
CASES = [(p, r) for p, rs in REPLIES.items() for r in rs]


def run(parser: str, mode: str, text: str, cuts: list[int]) -> tuple[str | None, list[dict[str, Any]], Any]:
    ts = ToolStream(parser, mode, DROP)
    content, deltas = "", []
    bounds = [0, *sorted({c % (len(text) + 1) for c in cuts}), len(text)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        c, d = ts.feed(text[a:b])
        content += c
        deltas += d
    c, d = ts.finish()
    return (content + c) or None, deltas + d, ts


def added_up(deltas: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    calls: dict[int, list[str]] = {}
    for d in deltas:
        slot = calls.setdefault(d["index"], ["", "", ""])
        slot[0] += d.get("id", "")
        slot[1] += d.get("function", {}).get("name", "")
        slot[2] += d.get("function", {}).get("arguments", "")
    return [tuple(calls[i]) for i in sorted(calls)]  # type: ignore[misc]


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=15))
def test_streams_add_up_to_the_whole_reply(cuts: list[int]) -> None:
    for parser, text in CASES:
        content, deltas, _ = run(parser, "auto", text, cuts)
        want_content, want = parse_tool_calls(parser, text, DROP)
        assert content == want_content, (parser, text)
        got = added_up(deltas)
        assert [g[1:] for g in got] == [(c.name, c.arguments) for c in want], (parser, text)
        assert all(g[0].startswith("call_") for g in got)


def test_whole_replies_parse_as_expected() -> None:
    content, calls = parse_tool_calls("hermes", REPLIES["hermes"][0], DROP)
    assert content == "Let me look."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Köln", "unit": "C"}),
        ("add", {"a": [1, {"b": "}{"}]}),
    ]
    assert calls[0].arguments == '{"city": "Köln", "unit": "C"}'  # the model's own text
    assert parse_tool_calls("hermes", REPLIES["hermes"][1])[1][0].arguments == '{"x": 1}'
    plain = REPLIES["hermes"][2]
    assert parse_tool_calls("hermes", plain, DROP) == (plain.replace("<|im_end|>", ""), [])
    assert [c.name for c in parse_tool_calls("mistral", REPLIES["mistral"][0], ["</s>"])[1]] == ["a", "b"]
    assert parse_tool_calls("mistral", REPLIES["mistral"][1])[1][0].arguments == '{"n": 1.5e3}'
    content, calls = parse_tool_calls("llama3_json", REPLIES["llama3_json"][1], DROP)
    assert content is None and calls[0].name == "get_weather"
    bare = REPLIES["llama3_json"][2]
    assert parse_tool_calls("llama3_json", bare) == (bare, [])
    cut = REPLIES["hermes"][0][:-40]  # the second call cut short: all content, as vLLM answers
    assert parse_tool_calls("hermes", cut, DROP) == (cut, [])


def test_openai_order_and_granularity() -> None:
    """One character at a time: content first and before the call is complete, then per call a
    header (id, type, name, empty arguments) and arguments in many pieces."""
    text = REPLIES["hermes"][0]
    ts = ToolStream("hermes", "auto", DROP)
    events: list[tuple[str, Any]] = []
    for ch in text:
        c, d = ts.feed(ch)
        events += [("content", c)] * bool(c) + [("call", x) for x in d]
    c, d = ts.finish()
    events += [("content", c)] * bool(c) + [("call", x) for x in d]
    kinds = [k for k, _ in events]
    first_call = kinds.index("call")
    assert "".join(v for k, v in events[:first_call]) == "Let me look."
    assert "content" not in kinds[first_call:]
    for i, name in enumerate(["get_weather", "add"]):
        mine = [v for k, v in events if k == "call" and v["index"] == i]
        # The first call's arguments come in many pieces after its header; the second's come before
        # its name, so they wait for it and go at once, in the header's entry.
        arguments = "" if i == 0 else '{"a": [1, {"b": "}{"}]}'
        header = {"index": i, "id": mine[0]["id"], "type": "function"}
        assert mine[0] == {**header, "function": {"name": name, "arguments": arguments}}
        assert mine[0]["id"].startswith("call_")
        assert all(set(m) == {"index", "function"} for m in mine[1:])
        assert len(mine) > 10 if i == 0 else len(mine) == 1
    assert json.loads(
        "".join(v["function"]["arguments"] for k, v in events if k == "call" and v["index"] == 1)
    )


def test_one_entry_per_call_index_in_a_chunk() -> None:
    """A chunk holds at most one tool_calls entry per index, as OpenAI streams them (a whole reply
    in one piece: a lagging consumer's merged output, or a speculative step's accepted run)."""
    text = '[{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]'
    _, deltas = ToolStream("hermes", "required", DROP).feed(text)
    assert [d["index"] for d in deltas] == [0, 1]
    assert [(d["function"]["name"], d["function"]["arguments"]) for d in deltas] == [
        ("f", '{"a": 1}'),
        ("g", "{}"),
    ]
    assert all(d["id"].startswith("call_") and d["type"] == "function" for d in deltas)
    ts = ToolStream("hermes", "f", DROP)  # a named function: header and arguments in one entry too
    assert ts.feed('{"a"')[1] == [
        {"index": 0, "id": ts.calls[0].id, "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
    ]


@settings(max_examples=30, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=10))
def test_required_calls_stream_their_arguments(cuts: list[int]) -> None:
    arr = '[{"name": "add", "parameters": {"a": 1, "b": 2}}, {"name": "w", "parameters": {"c": "]"}}]'
    _, deltas, ts = run("mistral", "required", arr, cuts)
    assert [(n, a) for _, n, a in added_up(deltas)] == [("add", '{"a": 1, "b": 2}'), ("w", '{"c": "]"}')]
    assert [(c.name, c.arguments) for c in forced_calls(arr, "required")] == [
        (c.name, c.arguments) for c in ts.done
    ]
    # Cut short (max_tokens): the complete calls count.
    assert [c.name for c in forced_calls(arr[:-10], "required")] == ["add"]


@settings(max_examples=60, deadline=None)
@given(
    pieces=st.lists(
        st.sampled_from(["a", "<", "|", "<|im_end|>", "<|im", "_end|>", "<tool_call>", " "]), max_size=20
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=100), max_size=8),
)
@example(pieces=["<|im", "<|im_end|>", "_end|>"], cuts=[14])  # what is left around a drop is kept
def test_special_text_filter(pieces: list[str], cuts: list[int]) -> None:
    text = "".join(pieces)
    f = SpecialTextFilter(["<|im_end|>", "<|endoftext|>"])
    out = ""
    bounds = [0, *sorted({c % (len(text) + 1) for c in cuts}), len(text)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        out += f.feed(text[a:b])
    out += f.feed("", final=True)
    assert out == SpecialTextFilter(["<|im_end|>", "<|endoftext|>"]).feed(
        text, final=True
    )  # cuts don't matter
    if "<|im" not in text.replace("<|im_end|>", ""):
        assert out == text.replace("<|im_end|>", "")


def test_special_text_filter_keeps_what_it_is_not_told_to_drop() -> None:
    f = SpecialTextFilter(DROP)
    assert f.feed("a<|im_") == "a"
    assert f.feed("end|><tool_call>{}<|im") == "<tool_call>{}"
    assert f.feed("", final=True) == "<|im"
