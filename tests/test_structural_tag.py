"""Structural tags (vLLM's ``structural_tag``: free text in which each trigger opens a tag whose
JSON must follow its schema and whose end is forced), with text triggers and with triggers that are
special tokens of the model's tokenizer, offline and as ``response_format`` through the server; and
the tokenizer glue that lets a grammar force the text of a special token."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from marker_model import make_marker_model

from ossa import LLM, SamplingParams
from ossa.structured import StructuredOutputsParams

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["city", "n"],
    "additionalProperties": False,
}


def tag(begin: str, end: str, trigger: str) -> dict[str, Any]:
    return {"structures": [{"begin": begin, "schema": SCHEMA, "end": end}], "triggers": [trigger]}


@pytest.fixture(scope="module")
def llm(tmp_models_dir: str, default_model_path: str) -> LLM:
    path = make_marker_model(os.path.join(tmp_models_dir, "tool_markers"), default_model_path)
    return LLM(path, kv_cache_memory_bytes=16 << 20)


def segments(text: str, begin: str, end: str) -> list[str]:
    """The JSON of each complete tag in text."""
    return re.findall(re.escape(begin) + "(.*?)" + re.escape(end), text, re.S)


@pytest.mark.parametrize(
    ("begin", "end", "trigger", "bias"),
    [
        ("<tool_call>", "</tool_call>", "<tool_call>", ["<tool_call>"]),  # special tokens both
        ("<tool_call>", "END", "<tool_call>", ["<tool_call>"]),  # a special trigger, a text end
        ("<function=get>", "</function>", "<function=", ["<", "function", "="]),  # text: a lazy trigger
    ],
)
def test_every_tag_follows_its_schema(llm: LLM, begin: str, end: str, trigger: str, bias: list[str]) -> None:
    tok = llm.tokenizer
    so = StructuredOutputsParams(structural_tag=tag(begin, end, trigger), disable_any_whitespace=True)
    # A random model rarely writes a trigger by itself: the bias makes it (the grammar still decides).
    ids = [i for piece in bias for i in tok.encode(piece, add_special_tokens=False)]
    found = 0
    for seed in range(4):
        sp = SamplingParams(
            seed=seed,
            temperature=1.0,
            max_tokens=80,
            structured_outputs=so,
            logit_bias={i: 12.0 for i in ids},
            skip_special_tokens=False,
        )
        text = llm.generate("Hello", sp, use_tqdm=False)[0].outputs[0].text
        for seg in segments(text, begin, end):
            jsonschema.validate(json.loads(seg), SCHEMA)
            found += 1
        # Every opened tag is followed by valid JSON: the unfinished last one is a prefix of it.
        assert text.count(begin) - len(segments(text, begin, end)) <= 1, text
    assert found >= 2  # seeded: the same every run; the test is not vacuous
    special = tok.encode("<tool_call>", add_special_tokens=False)
    assert len(special) == 1 and tok.decode(special, skip_special_tokens=True) == ""


def test_a_grammar_can_force_the_text_of_a_special_token(llm: LLM) -> None:
    """Forced text is tokenized as text: the marker's characters, not the special token (which the
    grammar would then refuse)."""
    so = StructuredOutputsParams(grammar='start: "a" "</tool_call>"')
    out = llm.generate(
        "Hi", SamplingParams(max_tokens=20, structured_outputs=so, skip_special_tokens=False), use_tqdm=False
    )[0].outputs[0]
    (special,) = llm.tokenizer.encode("</tool_call>", add_special_tokens=False)
    eos = llm.tokenizer.eos_token or ""  # decoded too, with special tokens kept
    assert out.text.removesuffix(eos) == "a</tool_call>" and out.finish_reason == "stop"
    assert special not in out.token_ids


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"structures": [{"begin": "<f>", "schema": SCHEMA, "end": "</f>"}]}, "triggers must be"),
        ({"structures": [], "triggers": ["<f"]}, "structures must be a non-empty list"),
        (
            {"structures": [{"begin": "<g>", "end": "</g>"}], "triggers": ["<f"]},
            "starts with none of the triggers",
        ),
        ({"structures": [{"begin": "<f>", "schema": 3, "end": ""}], "triggers": ["<f"]}, "schema must be"),
        (
            {"structures": [{"begin": "<f>", "schema": {"type": "nope"}, "end": ""}], "triggers": ["<f"]},
            "compile",
        ),
        ({"type": "structural_tag", "format": {"type": "triggered_tags"}}, "'format' form"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_structural_tags_are_value_errors(spec: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        StructuredOutputsParams(structural_tag=spec)


@pytest.fixture(scope="module")
def server(default_model_path: str) -> Iterator[Any]:
    from server_thread import ServerThread

    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app

    engine = AsyncEngine.from_model(default_model_path, kv_cache_memory_bytes=16 << 20, max_num_seqs=8)
    with ServerThread(create_app(engine, served_model_name="smol")) as s:
        yield s


def test_response_format_structural_tag(server: Any) -> None:
    body: dict[str, Any] = {
        "model": "smol",
        "messages": [{"role": "user", "content": "Call get with a city and a number: <function=get>"}],
        "max_tokens": 60,
        "temperature": 0.8,
        "seed": 1,
    }
    good = {"type": "structural_tag", **tag("<function=get>", "</function>", "<function=")}
    r = httpx.post(server.url + "/v1/chat/completions", json={**body, "response_format": good}, timeout=120)
    assert r.status_code == 200, r.text
    text = r.json()["choices"][0]["message"]["content"]
    for seg in segments(text, "<function=get>", "</function>"):
        jsonschema.validate(json.loads(seg), SCHEMA)
    bad = {"type": "structural_tag", "structures": [{"begin": "<g>", "end": "</g>"}], "triggers": ["<f"]}
    r = httpx.post(
        server.url + "/v1/completions", json={**body, "prompt": "x", "response_format": bad}, timeout=60
    )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "response_format" and "starts with none of the triggers" in err["message"]
    so = {"structural_tag": json.dumps(tag("<f>", "</f>", "<f"))}  # vLLM's structured_outputs, a JSON text
    r = httpx.post(server.url + "/v1/chat/completions", json={**body, "structured_outputs": so}, timeout=120)
    assert r.status_code == 200, r.text
