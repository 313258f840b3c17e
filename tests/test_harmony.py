"""gpt-oss's harmony replies split into reasoning, content and tool calls (ossa.server.harmony): each
reply is built from known parts in the format's own syntax (the channels, recipients and markers of
OpenAI's harmony format), so the parts it must come back as are known by construction; the stream,
cut anywhere, adds up to the whole reply's parse and never lets a marker's text through."""

from __future__ import annotations

import json
import random

import pytest

from ossa.server.harmony import MARKERS, HarmonyStream, is_harmony_template, parse_harmony


def msg(header: str, body: str, end: str = "<|end|>", first: bool = False) -> str:
    return ("" if first else "<|start|>assistant") + header + "<|message|>" + body + end


THINK = "The user wants the weather in Oslo. <maybe> I should call get_weather (a<b)."
ANSWER = "It is 4 °C in Oslo — bring a coat.\n\n| a | b |\n|---|---|"
ARGS = '{"city": "Oslo", "unit": "C", "note": "<|not a marker"}'
PLAIN = "Just text, <b>bold</b> and <|odd|> bits."
CASES = {
    # name: (reply text, reasoning, content, [(call name, arguments)])
    "answer": (
        msg("<|channel|>analysis", THINK, first=True) + msg("<|channel|>final", ANSWER, ""), THINK, ANSWER, []
    ),
    "answer, return kept": (
        msg("<|channel|>analysis", THINK, first=True) + msg("<|channel|>final", ANSWER, "<|return|>"),
        THINK, ANSWER, [],
    ),
    "call, recipient after the channel": (
        msg("<|channel|>analysis", THINK, first=True)
        + msg("<|channel|>commentary to=functions.get_weather <|constrain|>json", ARGS, "<|call|>"),
        THINK, None, [("get_weather", ARGS)],
    ),
    "call, recipient in the role": (
        msg("<|channel|>analysis", THINK, first=True)
        + "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}",
        THINK, None, [("get_time", "{}")],
    ),
    "preamble, two calls": (
        msg("<|channel|>commentary", "Checking both.", first=True)
        + msg("<|channel|>commentary to=functions.a", '{"x": 1}', "<|call|>")
        + msg("<|channel|>commentary to=functions.b", '{"y": [2]}', "<|call|>"),
        None, "Checking both.", [("a", '{"x": 1}'), ("b", '{"y": [2]}')],
    ),
    "built-in tool": (
        msg("<|channel|>analysis to=browser.search", '{"query": "x"}', "<|call|>", first=True),
        '{"query": "x"}', None, [],
    ),
    "no channel": (msg("", ANSWER, "", first=True), None, ANSWER, []),
    "not harmony": (PLAIN, None, PLAIN, []),
    "header cut short": (
        msg("<|channel|>analysis", THINK, first=True) + "<|start|>assistant<|chan", THINK, None, []
    ),
    "body cut short": (msg("<|channel|>analysis", "Half a thou", "", first=True), "Half a thou", None, []),
}  # fmt: skip


def test_template_detection() -> None:
    assert is_harmony_template("{{ '<|start|>' + m.role + '<|channel|>' + c + '<|message|>' }}")
    assert not is_harmony_template("{{ '<|im_start|>' + m.role }}") and not is_harmony_template(None)


@pytest.mark.parametrize("name", list(CASES))
def test_whole_replies(name: str) -> None:
    text, reasoning, content, calls = CASES[name]
    got_reasoning, got_content, got_calls = parse_harmony(text)
    assert (got_reasoning, got_content) == (reasoning, content)
    assert [(c.name, c.arguments) for c in got_calls] == calls
    for c in got_calls:
        json.loads(c.arguments)
        assert c.id.startswith("call_")


def stream(
    text: str, cuts: list[int], drop: tuple[str, ...] = (), tools: bool = True
) -> tuple[str, str, dict]:
    hs = HarmonyStream(drop, tools)
    reasoning = content = ""
    calls: dict[int, dict[str, str]] = {}
    bounds = [0, *sorted(cuts), len(text)]
    pieces = [hs.feed(text[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)] + [hs.finish()]
    for r, c, deltas in pieces:
        for m in MARKERS:
            assert m not in r and m not in c
        reasoning, content = reasoning + r, content + c
        for d in deltas:
            slot = calls.setdefault(d["index"], {"id": "", "name": "", "arguments": ""})
            slot["id"] += d.get("id", "")
            slot["name"] += d["function"].get("name", "")
            slot["arguments"] += d["function"].get("arguments", "")
    return reasoning, content, calls


@pytest.mark.parametrize("name", list(CASES))
def test_streams_add_up_to_the_whole_reply(name: str) -> None:
    text, reasoning, content, calls = CASES[name]
    rng = random.Random(name)
    for trial in range(60):
        cuts = list(range(len(text))) if trial == 0 else rng.sample(range(len(text)), rng.randint(1, 12))
        r, c, streamed = stream(text, cuts)
        assert (r or None, c or None) == (reasoning, content), cuts
        assert [(s["name"], s["arguments"]) for s in streamed.values()] == calls, cuts
        assert all(s["id"].startswith("call_") for s in streamed.values())


def test_other_special_tokens_are_dropped_and_tools_off() -> None:
    text = CASES["call, recipient after the channel"][0].replace("Oslo.", "Oslo.<|endoftext|>", 1)
    reasoning, content, calls = parse_harmony(text, drop=("<|endoftext|>",))
    assert reasoning == THINK and calls and calls[0].arguments == ARGS
    for cut in range(len(text)):
        r, c, streamed = stream(text, [cut], drop=("<|endoftext|>",))
        assert r == THINK and [s["arguments"] for s in streamed.values()] == [ARGS]
    # tool_choice "none": a call's body is content, no calls.
    reasoning, content, calls = parse_harmony(text, drop=("<|endoftext|>",), tools=False)
    assert reasoning == THINK and content == ARGS and calls == []
