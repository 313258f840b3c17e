"""A thinking model's <think> block as ``reasoning_content`` (``ossa.server.reasoning``): whole replies,
streams in any cuts adding up to them, and through the server with the openai client (content and tool
calls parsed from what follows the block; a template that opens the block in the prompt)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ossa.server.reasoning import ReasoningStream, reasoning_for_template, split_reasoning

REPLIES = [  # (reply, prompt ends with <think>, reasoning, content)
    ("<think>\nLet me think.\n</think>\n\nThe answer is 4.", False, "\nLet me think.\n", "The answer is 4."),
    ("  <think>a</think>b", False, "a", "b"),
    ("Okay, so 2 + 2.\n</think>\n\n4", True, "Okay, so 2 + 2.\n", "4"),
    ("<think>cut short before the end", False, "cut short before the end", ""),
    ("still thinking when it stopped", True, "still thinking when it stopped", ""),
    ("No block: <think> later</think>.", False, None, "No block: <think> later</think>."),
    ("<thin", False, None, "<thin"),
    ("", False, None, ""),
    ("<think></think>Answer", False, None, "Answer"),
]  # fmt: skip


@pytest.mark.parametrize("reply, inside, reasoning, content", REPLIES)
def test_whole_replies(reply: str, inside: bool, reasoning: str | None, content: str) -> None:
    assert split_reasoning(reply, inside) == (reasoning, content)


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=12))
def test_streams_add_up_to_the_whole_reply(cuts: list[int]) -> None:
    for reply, inside, reasoning, content in REPLIES:
        rs = ReasoningStream(inside, ["<|im_end|>"])
        got_r = got_c = ""
        bounds = [0, *sorted({c % (len(reply) + 1) for c in cuts}), len(reply)]
        for a, b in zip(bounds, bounds[1:], strict=False):
            r, c = rs.feed(reply[a:b])
            got_r, got_c = got_r + r, got_c + c
        r, c = rs.finish()
        assert ((got_r + r) or None, got_c + c) == (reasoning, content), reply


def test_special_texts_dropped() -> None:
    assert split_reasoning("<think>x<|im_end|>y</think>z<|im_end|>", False, ["<|im_end|>"]) == ("xy", "z")


def test_templates() -> None:
    assert reasoning_for_template("{% if thinking %}<think>\n{{ r }}\n</think>{% endif %}") == "think"
    assert reasoning_for_template("{{ '<|channel>' + 'thought' }}{{ r }}<channel|>") == "gemma4"
    assert reasoning_for_template("[THINK]{{ r }}[/THINK]") == "mistral"
    assert reasoning_for_template("<seed:think>{{ r }}</seed:think>") == "seed"
    assert reasoning_for_template("{{ messages }}") is None and reasoning_for_template(None) is None


@pytest.mark.parametrize(
    "fmt, reply, reasoning, content",
    [
        ("gemma4", "<|channel>thought\nSteps.<channel|>The answer.", "\nSteps.", "The answer."),
        ("gemma4", "Just the answer.", None, "Just the answer."),
        ("mistral", "[THINK]Hmm.[/THINK]\n\nYes.", "Hmm.", "Yes."),
        ("command", "<|START_THINKING|>Plan.<|END_THINKING|>Done.", "Plan.", "Done."),
        ("seed", "<seed:think>Budget first.</seed:think>Answer.", "Budget first.", "Answer."),
    ],
)
def test_other_formats(fmt: str, reply: str, reasoning: str | None, content: str) -> None:
    assert split_reasoning(reply, False, (), fmt) == (reasoning, content)
    rs = ReasoningStream(False, (), fmt)
    parts = [rs.feed(ch) for ch in reply] + [rs.finish()]
    assert ("".join(p[0] for p in parts) or None, "".join(p[1] for p in parts)) == (reasoning, content)


# -- through the server ------------------------------------------------------------------------------

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if open_think %}<think>\n{% endif %}{% endif %}"
    "{# a thinking model's template: <think> ... </think> #}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def think_model(tmp_models_dir: str, default_model_path: str) -> str:
    from marker_model import make_marker_model

    return make_marker_model(
        os.path.join(tmp_models_dir, "think"), default_model_path, ["<tool_call>", "</tool_call>"], TEMPLATE
    )


def _stream(client: Any, body: dict[str, Any]) -> tuple[str, str, dict[int, list[str]]]:
    reasoning = content = ""
    calls: dict[int, list[str]] = {}
    for chunk in client.chat.completions.create(stream=True, **body):
        for ch in chunk.choices:
            extra = ch.delta.model_extra or {}
            reasoning += extra.get("reasoning_content") or ""
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, ["", ""])
                slot[0] += (tc.function.name or "") if tc.function else ""
                slot[1] += (tc.function.arguments or "") if tc.function else ""
    return reasoning, content, calls


@pytest.mark.timeout(600)
def test_reasoning_through_the_server(think_model: str) -> None:
    """A tiny model made (by grammars) to think then answer, or think then call a tool, or (its prompt
    opening the block) to write its thoughts straight away: reasoning_content and content (or the call)
    come apart, streamed as not; with --reasoning-parser none the reply is as written."""
    pytest.importorskip("llguidance")
    import openai
    from server_thread import ServerThread

    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app

    word = "/[a-z]{3,8}/"
    grammars = {
        "answer": f'start: "<think>\\nI think " {word} ".\\n</think>\\n\\nIt is " {word} "."',
        "call": f'start: "<think>\\nA tool: " {word} "\\n</think>\\n\\n" <[TC]> '
        f'"{{\\"name\\": \\"get_weather\\", \\"arguments\\": {{\\"city\\": \\"" {word} "\\"}}}}" <[TCE]>',
        "inside": f'start: "So " {word} ".\\n</think>\\n\\nDone " {word} "."',
    }
    from ossa import Tokenizer

    tok = Tokenizer.from_file(think_model)
    tc, tce = (tok.encode(m, add_special_tokens=False)[0] for m in ("<tool_call>", "</tool_call>"))
    grammars["call"] = grammars["call"].replace("<[TC]>", f"<[{tc}]>").replace("<[TCE]>", f"<[{tce}]>")
    for parser in ("auto", "none"):
        engine = AsyncEngine.from_model(think_model, kv_cache_memory_bytes=16 << 20, max_num_seqs=4)
        app = create_app(engine, served_model_name="tiny", reasoning_parser=parser)
        with (
            ServerThread(app) as s,
            openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0) as client,
        ):
            for case, grammar in grammars.items():
                body: dict[str, Any] = dict(
                    model="tiny", messages=[{"role": "user", "content": "2 + 2?"}], max_tokens=60, seed=1,
                    temperature=0.9, extra_body={"structured_outputs": {"grammar": grammar}},
                )  # fmt: skip
                if case == "call":
                    body["tools"] = [WEATHER]
                if case == "inside":
                    body["extra_body"]["chat_template_kwargs"] = {"open_think": True}
                done = client.chat.completions.create(**body).choices[0]
                extra = done.message.model_extra or {}
                if parser == "none":
                    assert extra.get("reasoning_content") is None
                    assert "</think>" in (done.message.content or "") or done.message.tool_calls
                    continue
                thought = extra.get("reasoning_content") or ""
                assert thought.strip() and "think>" not in thought, done.message
                streamed = _stream(client, body)
                assert streamed[0] == thought
                if case == "call":
                    (call,) = done.message.tool_calls or []
                    assert done.finish_reason == "tool_calls" and not done.message.content
                    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"]
                    assert list(streamed[2].values()) == [[call.function.name, call.function.arguments]]
                else:
                    content = done.message.content or ""
                    assert content.startswith(("It is ", "Done ")) and content.endswith(".")
                    assert streamed[1] == content
