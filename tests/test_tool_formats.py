"""The block tool-call formats (``ossa.server.tool_formats``): Qwen3-Coder / Qwen3.5's XML, GLM-4.5's,
Gemma 4's and FunctionGemma's, DeepSeek V3's, Kimi K2's and Llama 4's pythonic list. Each reply as the
model writes it parses to the expected calls (values typed by the functions' schemas where the format
writes text), streams in any cuts to exactly the same calls and content, a broken or cut-short block is
all content, and the chat template names the parser."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ossa.server.tool_stream import ToolStream, parse_tool_calls
from ossa.server.tools import marker_decoding, parser_for_template

SCHEMAS = {
    "get_weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "metric": {"type": "boolean"},
        },
    },
    "search": {"type": "object", "properties": {"query": {"type": "string"}, "filters": {"type": "object"}}},
}
# (parser, reply, expected content, expected calls)
REPLIES: list[tuple[str, str, str | None, list[tuple[str, dict[str, Any]]]]] = [
    (
        "qwen3_coder",
        "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n"
        '<parameter=query>\n"quoted" text\nover two lines\n</parameter>\n<parameter=filters>\n'
        '{"lang": "en"}\n'
        "</parameter>\n</function>\n</tool_call><|im_end|>",
        "Let me check.",
        [("get_weather", {"city": "San Francisco", "days": 3}),
         ("search", {"query": '"quoted" text\nover two lines', "filters": {"lang": "en"}})],
    ),
    (  # the model stopped before the end tag: the block parses at the end of the reply
        "qwen3_coder",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\n12\n</parameter>\n</function>",
        None,
        [("get_weather", {"city": "12"})],
    ),
    (
        "glm45",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>days"
        "</arg_key>\n<arg_value>2</arg_value>\n</tool_call><tool_call>other\n<arg_key>xs</arg_key>\n"
        "<arg_value>[1, 2]</arg_value>\n</tool_call>",
        None,
        [("get_weather", {"city": "Beijing", "days": 2}), ("other", {"xs": [1, 2]})],
    ),
    (
        "gemma4",
        'Checking.<|tool_call>call:get_weather{city:<|"|>Paris, "FR"<|"|>,days:3,metric:true}<tool_call|>'
        '<|tool_call>call:search{query:<|"|>a{b}:c<|"|>,filters:{tags:[<|"|>x<|"|>,1.5],n:null}}<tool_call|>',
        "Checking.",
        [("get_weather", {"city": 'Paris, "FR"', "days": 3, "metric": True}),
         ("search", {"query": "a{b}:c", "filters": {"tags": ["x", 1.5], "n": None}})],
    ),
    (
        "functiongemma",
        "<start_function_call>call:get_weather{city:<escape>Oslo<escape>}<end_function_call>",
        None,
        [("get_weather", {"city": "Oslo"})],
    ),
    (
        "deepseek_v3",
        "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Tokyo\"}"
        "<｜tool▁call▁end｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": \"x\"}<｜tool▁call▁end｜>"
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>",
        "Sure.",
        [("get_weather", {"city": "Tokyo"}), ("search", {"query": "x"})],
    ),
    (  # V3 / R1: function<sep>NAME and the arguments fenced as json
        "deepseek_v3",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        "{\"city\": \"Rome\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        None,
        [("get_weather", {"city": "Rome"})],
    ),
    (
        "kimi_k2",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        "{\"city\": \"Lima\"}<|tool_call_end|><|tool_call_begin|>functions.search:1"
        "<|tool_call_argument_begin|>"
        "{}<|tool_call_end|><|tool_calls_section_end|>",
        None,
        [("get_weather", {"city": "Lima"}), ("search", {})],
    ),
    (
        "minimax_m2",
        'Let me see.\n<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="city">Sapporo</parameter>\n'
        '<parameter name="days">2</parameter>\n</invoke>\n<invoke name="search">\n<parameter name="filters">'
        '{"a": 1}</parameter>\n</invoke>\n</minimax:tool_call>',
        "Let me see.",
        [("get_weather", {"city": "Sapporo", "days": 2}), ("search", {"filters": {"a": 1}})],
    ),
    (  # Seed-OSS: qwen3_coder's XML in its own blocks, one per call
        "seed_oss",
        "Let me check.\n<seed:tool_call>\n<function=get_weather>\n<parameter=city>\nSeoul\n</parameter>\n"
        "<parameter=days>\n4\n</parameter>\n</function>\n</seed:tool_call>\n<seed:tool_call>\n"
        "<function=search>\n<parameter=filters>\n{\"k\": [2]}\n</parameter>\n</function>\n</seed:tool_call>",
        "Let me check.",
        [("get_weather", {"city": "Seoul", "days": 4}), ("search", {"filters": {"k": [2]}})],
    ),
    (
        "command_r7b",
        'I will look.<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": '
        '{"city": "Cork"}},\n    {"tool_call_id": "1", "tool_name": "search",'
        ' "parameters": {"query": "q"}}\n]'
        "<|END_ACTION|><|END_OF_TURN_TOKEN|>",
        "I will look.",
        [("get_weather", {"city": "Cork"}), ("search", {"query": "q"})],
    ),
    (
        "pythonic",
        '[get_weather(city="San Francisco", days=3), search(query=\'a "b"\', filters={"k": [1, None]})]',
        None,
        [("get_weather", {"city": "San Francisco", "days": 3}),
         ("search", {"query": 'a "b"', "filters": {"k": [1, None]}})],
    ),
    ("pythonic", "<|python_start|>[get_weather(city='Oslo')]<|python_end|>", None,
     [("get_weather", {"city": "Oslo"})]),
    # Not calls: all content.
    ("pythonic", "[1] is a citation, not a call.", "[1] is a citation, not a call.", []),
    ("pythonic", "No tools needed [here].", "No tools needed [here].", []),
    ("gemma4", 'A call:<|tool_call>call:f{x:<|"|>unterminated<tool_call|>',
     'A call:<|tool_call>call:f{x:<|"|>unterminated<tool_call|>', []),
    ("glm45", "Plain text with <tool no call.", "Plain text with <tool no call.", []),
    ("qwen3_coder", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
     "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", []),
    ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>[1]"
     "<|tool_call_end|><|tool_calls_section_end|>",
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>[1]"
     "<|tool_call_end|><|tool_calls_section_end|>", []),
]  # fmt: skip
DROP = ["<|im_end|>", "<｜end▁of▁sentence｜>", "<|END_OF_TURN_TOKEN|>"]


@pytest.mark.parametrize("parser, reply, content, calls", REPLIES)
def test_whole_replies(parser: str, reply: str, content: str | None, calls: list[Any]) -> None:
    got_content, got = parse_tool_calls(parser, reply, DROP, SCHEMAS)
    assert got_content == content
    assert [(c.name, json.loads(c.arguments)) for c in got] == calls


def test_values_without_a_schema() -> None:
    """XML values the schema does not type stay text (Qwen3-Coder, as vLLM), or are read as JSON where
    they parse (GLM-4.5, as vLLM)."""
    _, calls = parse_tool_calls("qwen3_coder", REPLIES[0][1], DROP)
    assert json.loads(calls[0].arguments) == {"city": "San Francisco", "days": "3"}
    _, calls = parse_tool_calls("glm45", REPLIES[2][1], DROP)
    assert json.loads(calls[0].arguments) == {"city": "Beijing", "days": 2}


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=15))
def test_streams_add_up_to_the_whole_reply(cuts: list[int]) -> None:
    for parser, reply, _, _ in REPLIES:
        ts = ToolStream(parser, "auto", DROP, SCHEMAS)
        content, deltas = "", []
        bounds = [0, *sorted({c % (len(reply) + 1) for c in cuts}), len(reply)]
        for a, b in zip(bounds, bounds[1:], strict=False):
            c, d = ts.feed(reply[a:b])
            content += c
            deltas += d
        c, d = ts.finish()
        content += c
        deltas += d
        want_content, want = parse_tool_calls(parser, reply, DROP, SCHEMAS)
        assert (content or None) == want_content, (parser, reply)
        got: dict[int, list[str]] = {}
        for x in deltas:
            slot = got.setdefault(x["index"], ["", ""])
            slot[0] += x.get("function", {}).get("name", "")
            slot[1] += x.get("function", {}).get("arguments", "")
        assert [tuple(got[i]) for i in sorted(got)] == [(c.name, c.arguments) for c in want], (parser, reply)


@pytest.mark.parametrize(
    "snippet, parser",
    [
        ('{{ "<|tool_call>call:" + name }}', "gemma4"),
        ("<start_function_call>", "functiongemma"),
        ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>", "deepseek_v3"),
        ("<|tool_calls_section_begin|>", "kimi_k2"),
        ("<|START_ACTION|>[{{ tool_call }}]<|END_ACTION|>", "command_r7b"),
        ("<minimax:tool_call>\n<invoke name=", "minimax_m2"),
        ("<seed:tool_call>\n<function={{ name }}>\n<parameter={{ k }}>", "seed_oss"),
        ("<tool_call>{{ name }}\n<arg_key>{{ k }}</arg_key>", "glm45"),
        ("<tool_call>\n<function={{ name }}>\n<parameter={{ k }}>", "qwen3_coder"),
        ("format of [func_name1(params_name1=params_value1, ...)]", "pythonic"),
        ("<|python_start|>", "pythonic"),
        ("<|python_tag|>", "llama3_json"),
        ('<tool_call>\n{"name": ...}', "hermes"),
    ],
)
def test_templates_name_their_parser(snippet: str, parser: str) -> None:
    assert parser_for_template("{% for m in messages %}" + snippet + "{% endfor %}") == parser


class _Tok:
    """A tokenizer whose special tokens are these texts."""

    def __init__(self, specials: list[str]) -> None:
        self.specials = specials

    def token_table(self) -> tuple[list[str], list[bool]]:
        return self.specials, [True] * len(self.specials)

    def decode(self, ids: list[int]) -> str:
        return self.specials[ids[0]]


def test_special_markers_are_kept() -> None:
    """A format whose markers are special tokens (Gemma 4's <|tool_call>, <tool_call|> and <|"|>) has the
    reply decoded with special tokens and every other special token's text dropped."""
    tok = _Tok(["<bos>", "<|tool_call>", "<tool_call|>", '<|"|>', "<turn|>"])
    assert marker_decoding(tok, "gemma4") == ["<bos>", "<turn|>"]
    assert marker_decoding(_Tok(["<bos>"]), "gemma4") is None


# -- through the server ------------------------------------------------------------------------------

SERVER_MARKERS = ["<|tool_call>", "<tool_call|>", '<|"|>', "<tool_call>", "</tool_call>"]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
}


@pytest.fixture(scope="module")
def block_model(tmp_models_dir: str, default_model_path: str) -> str:
    import os

    from marker_model import make_marker_model

    return make_marker_model(
        os.path.join(tmp_models_dir, "block_markers"), default_model_path, SERVER_MARKERS
    )


@pytest.mark.timeout(600)
@pytest.mark.parametrize("parser", ["gemma4", "qwen3_coder"])
def test_block_calls_through_the_server(block_model: str, parser: str) -> None:
    """A tiny model made (by a grammar) to write Gemma 4's or Qwen3-Coder's call with special-token
    markers: the OpenAI client gets content and a call whose integer parameter is typed by the tool's
    schema, the same streamed (accumulated by hand) as not."""
    pytest.importorskip("llguidance")
    import openai
    from server_thread import ServerThread

    from ossa import Tokenizer
    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app

    tok = Tokenizer.from_file(block_model)
    t = {m: f"<[{tok.encode(m, add_special_tokens=False)[0]}]>" for m in SERVER_MARKERS}
    city, q = "/[A-Z][a-z]{2,8}/", t[SERVER_MARKERS[2]]
    xml = '"\\n</parameter>\\n<parameter=days>\\n3\\n</parameter>\\n</function>\\n"'
    grammar = {
        "gemma4": f'start: "Checking." {t["<|tool_call>"]} "call:get_weather{{city:" {q} {city} {q} '
        f'",days:3}}" {t["<tool_call|>"]}',
        "qwen3_coder": f'start: "Checking." {t["<tool_call>"]} "\\n<function=get_weather>\\n" '
        f'"<parameter=city>\\n" {city} {xml} {t["</tool_call>"]}',
    }[parser]
    engine = AsyncEngine.from_model(block_model, kv_cache_memory_bytes=16 << 20, max_num_seqs=4)
    app = create_app(engine, served_model_name="tiny", tool_call_parser=parser)
    body: dict[str, Any] = dict(
        model="tiny", messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER_TOOL], max_tokens=80,
        temperature=0.9, seed=5, extra_body={"structured_outputs": {"grammar": grammar}},
    )  # fmt: skip
    with ServerThread(app) as s, openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0) as client:
        done = client.chat.completions.create(**body).choices[0]
        assert done.finish_reason == "tool_calls" and done.message.content == "Checking."
        (call,) = done.message.tool_calls or []
        args = json.loads(call.function.arguments)
        assert call.function.name == "get_weather" and args["days"] == 3 and args["city"].isalpha()
        content, calls = "", {}
        for chunk in client.chat.completions.create(stream=True, **body):
            for ch in chunk.choices:
                content += ch.delta.content or ""
                for tc in ch.delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, ["", ""])
                    slot[0] += (tc.function.name or "") if tc.function else ""
                    slot[1] += (tc.function.arguments or "") if tc.function else ""
        assert content == "Checking." and list(calls.values()) == [
            [call.function.name, call.function.arguments]
        ]
