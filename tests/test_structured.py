"""Structured output: StructuredOutputsParams, the llguidance tokenizer glue, the sampler's token mask
(C++ and twin), and constrained generation on the default model (every kind validates, the twin gives
the same tokens, a constrained request is batch invariant among 63 others)."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import numpy as np
import pytest

from ossa import LLM, SamplingParams
from ossa.reference import sampler as ref
from ossa.structured import ConstraintHost, StructuredOutputsParams, llg_tokenizer

llg = pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")
core = pytest.importorskip("ossa._native").core

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]{1,12}$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 16},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "contact": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"email": {"type": "string", "maxLength": 24}},
                    "required": ["email"],
                    "additionalProperties": False,
                },
                {"type": "null"},
            ]
        },
    },
    "required": ["name", "age", "role", "tags", "address", "contact"],
    "additionalProperties": False,
}
REGEX = r"(yes|no), because [a-z ]{1,24}\."
CHOICES = ["red", "green", "blue", "dark purple"]
LARK = 'start: "x = " NUM " + " NUM\nNUM: /[1-9][0-9]{0,2}/'


@pytest.fixture(scope="module")
def llm(default_model_path: str) -> LLM:
    return LLM(
        default_model_path,
        kv_cache_memory_bytes=96 << 20,
        max_num_batched_tokens=512,
        kv_cache_dtype="float32",
    )


def chat_prompt(llm: LLM, text: str) -> dict[str, Any]:
    tok = llm.get_tokenizer()
    rendered = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
    return {"prompt": rendered, "prompt_token_ids": tok.encode(rendered, add_special_tokens=False)}


# -- parameters -------------------------------------------------------------------------------------


def test_params_need_exactly_one_kind() -> None:
    with pytest.raises(
        ValueError, match="exactly one of json, regex, choice, grammar, json_object; got none"
    ):
        StructuredOutputsParams()
    with pytest.raises(ValueError, match="got json, regex"):
        StructuredOutputsParams(json={"type": "string"}, regex="a+")
    with pytest.raises(ValueError, match="choice must not be empty"):
        StructuredOutputsParams(choice=[])
    with pytest.raises(ValueError, match="choice must be a list of strings"):
        StructuredOutputsParams(choice=["a", 1])  # type: ignore[list-item]
    assert StructuredOutputsParams(json_object=True).kind == "json_object"


@pytest.mark.parametrize(
    ("kwargs", "quoted"),
    [
        ({"regex": "[a-z"}, "unclosed character class"),
        ({"json": {"type": "objectx"}}, "objectx"),
        ({"json": "{not json"}, "not valid JSON"),
        (
            {"json": {"type": "string", "minLength": 5, "maxLength": 2}},
            "structured_outputs.json does not compile",
        ),
        ({"grammar": "start: foo"}, "foo"),
    ],
)
def test_a_grammar_that_does_not_compile_quotes_llguidance(kwargs: dict[str, Any], quoted: str) -> None:
    kind = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"structured_outputs.{kind}") as e:
        StructuredOutputsParams(**kwargs)
    assert quoted in str(e.value)


def test_sampling_params_take_structured_outputs() -> None:
    sp = SamplingParams(structured_outputs={"choice": ["a", "b"]})  # type: ignore[arg-type]
    assert isinstance(sp.structured_outputs, StructuredOutputsParams)
    with pytest.raises(ValueError, match="unexpected keyword argument 'bogus'"):
        SamplingParams(structured_outputs={"bogus": "x"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="structural_tag is not valid JSON"):
        SamplingParams(structured_outputs={"structural_tag": "x"})  # type: ignore[arg-type]


def test_missing_llguidance_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llguidance", None)  # import fails as if not installed
    with pytest.raises(ValueError, match=re.escape("pip install 'ossa[structured]'")):
        StructuredOutputsParams(regex="a+")


# -- the tokenizer glue -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["smollm2", "mistral"])
def test_vocabulary_matches_llguidances_own_hugging_face_import(name: str, default_model_path: str) -> None:
    """Byte-level (SmolLM2) and SentencePiece (Mistral v1): every token's bytes and special flag from
    ossa's tokenizer equal what llguidance reads from the Hugging Face tokenizer.json itself."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from test_tokenizer import load_vocab

    v = load_vocab(name, default_model_path)
    n = v.cpp.vocab_size
    oracle = llg.LLTokenizer(v.hf.to_str(), n_vocab=n)
    for tok in (v.cpp, v.py):
        ours = llg_tokenizer(tok, n)
        assert ours.vocab_size == oracle.vocab_size == n
        assert ours.eos_token == tok.eos_token_id
        for i in range(n):
            special = oracle.is_special_token(i)
            assert ours.is_special_token(i) == special, (name, i)
            if not special:
                assert ours.decode_bytes([i]) == oracle.decode_bytes([i]), (name, i)
        assert llg_tokenizer(tok, n) is ours  # built once per tokenizer


# -- the sampler's mask -----------------------------------------------------------------------------


def test_sampler_mask_cpp_equals_twin_and_never_picks_a_masked_token() -> None:
    g = np.random.default_rng(7)
    vocab, n = 1000, 48
    words = (vocab + 31) // 32
    logits = g.normal(0, 3, (n, vocab)).astype(np.float32)
    masks = np.zeros((n, words), dtype=np.int32)
    for r in range(n):
        density = [0.002, 0.05, 0.5, 1.0][r % 4]
        allowed = g.random(vocab) < density
        allowed[g.integers(vocab)] = True
        bits = np.zeros(words * 32, dtype=np.uint8)
        bits[:vocab] = allowed
        masks[r] = np.packbits(bits, bitorder="little").view(np.int32)
    rows, params = [], []
    for r in range(n):
        sp = SamplingParams(
            temperature=[0.0, 0.7, 1.3][r % 3],
            top_k=[-1, 5][r % 2],
            seed=r,
            logprobs=2,
            logit_bias={3: 50.0} if r % 5 == 0 else None,
        )
        rows.append(
            ref.RowInput(sp.to_reference(), [1, 2], [3], seed=r, stream=0, step=1, token_mask=masks[r])
        )
        params.append(sp.to_core())
    got = core.Sampler().sample(
        logits, params, [[1, 2]] * n, [[3]] * n, list(range(n)), [0] * n, [1] * n, token_masks=masks
    )
    want = ref.sample(logits, rows)
    for r in range(n):
        assert int(got[0][r]) == want[r].token
        assert ref.token_mask_bits(masks[r], vocab)[want[r].token], r
        assert got[1][r] == np.float32(want[r].logprob)  # raw logprobs: before the mask
    with pytest.raises(ValueError, match="token_masks must be"):
        core.Sampler().sample(logits[:1], params[:1], [[1]], [[]], [0], [0], [0], token_masks=masks[:1, :3])


# -- generation -------------------------------------------------------------------------------------


def check(kind: str, text: str) -> None:
    if kind == "json":
        jsonschema.validate(json.loads(text), PERSON)
    elif kind == "json_object":
        assert isinstance(json.loads(text), dict)
    elif kind == "regex":
        assert re.fullmatch(REGEX, text), text
    elif kind == "choice":
        assert text in CHOICES
    else:
        assert re.fullmatch(r"x = [1-9][0-9]{0,2} \+ [1-9][0-9]{0,2}", text), text


SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "json": ("Describe a user as JSON.", {"json": PERSON, "whitespace_pattern": r"[ \n]{0,2}"}),
    "json_object": (
        'Copy this JSON: {"city": "Paris", "country": "France"}',
        {"json_object": True, "whitespace_pattern": r" ?"},
    ),
    "regex": ("Is the sky blue? Answer yes or no and say why.", {"regex": REGEX}),
    "choice": ("Name a colour.", {"choice": CHOICES}),
    "grammar": ("Write a sum.", {"grammar": LARK}),
}


@pytest.mark.parametrize("kind", list(SPECS))
def test_seeded_sampled_generations_all_validate(llm: LLM, kind: str) -> None:
    question, spec = SPECS[kind]
    so = StructuredOutputsParams(**spec)
    sps = [
        SamplingParams(temperature=0.8, top_p=0.95, seed=s, max_tokens=160, structured_outputs=so)
        for s in range(8)
    ]
    outs = llm.generate([chat_prompt(llm, question)] * 8, sps, use_tqdm=False)
    lltok = llg_tokenizer(llm.get_tokenizer(), llm.model.config.n_vocab)
    finished = 0
    for o in outs:
        c = o.outputs[0]
        # An independent matcher accepts every token (the mask held at every step).
        assert llg.LLMatcher(lltok, so.compiled).consume_tokens(c.token_ids), c.text
        if kind == "json_object" and c.finish_reason == "length":
            continue  # free-form objects can nest on and on in a 135M model; the prefix was checked
        assert c.finish_reason == "stop", (c.text, c.finish_reason)
        # The finished grammar allowed only EOS (stop_reason None: the tokenizer's EOS, as vLLM's).
        assert c.token_ids[-1] in llm.get_tokenizer().eos_token_ids
        assert c.stop_reason in (None, *llm.get_tokenizer().eos_token_ids)
        check(kind, c.text)
        finished += 1
    assert finished >= 4
    assert llm.constraints.num_live <= 8  # released on the next constrained step


def test_n_children_each_follow_the_grammar(llm: LLM) -> None:
    so = StructuredOutputsParams(regex=REGEX)
    out = llm.generate(
        [chat_prompt(llm, "Why?")],
        SamplingParams(n=3, seed=1, max_tokens=60, structured_outputs=so),
        use_tqdm=False,
    )[0]
    assert len({c.text for c in out.outputs}) > 1
    for c in out.outputs:
        check("regex", c.text)


def test_unconstrained_steps_do_not_call_the_host(llm: LLM) -> None:
    llm.generate("warm", SamplingParams(max_tokens=2), use_tqdm=False)  # flushes earlier releases
    before = llm.stats()
    llm.generate(["a", "b c"], SamplingParams(max_tokens=8, ignore_eos=True), use_tqdm=False)
    after = llm.stats()
    assert after["steps"] > before["steps"]
    assert after["constraint_calls"] == before["constraint_calls"]


def test_overlap_off_gives_the_same_tokens(llm: LLM) -> None:
    so = StructuredOutputsParams(json=PERSON, whitespace_pattern=r"[ \n]{0,2}")
    sps = [SamplingParams(seed=s, max_tokens=120, structured_outputs=so) for s in range(3)]
    prompts = [chat_prompt(llm, "A user as JSON.")] * 3
    a = [o.outputs[0].token_ids for o in llm.generate(prompts, sps, use_tqdm=False)]
    llm.engine.set_constraint_host(llm.constraints, overlap=False)
    try:
        b = [o.outputs[0].token_ids for o in llm.generate(prompts, sps, use_tqdm=False)]
    finally:
        llm.engine.set_constraint_host(llm.constraints, overlap=True)
    assert a == b


def test_constrained_request_is_batch_invariant_among_63_others(llm: LLM) -> None:
    so = StructuredOutputsParams(json=PERSON, whitespace_pattern=r"[ \n]{0,2}")
    target = (
        chat_prompt(llm, "A user as JSON."),
        SamplingParams(seed=11, max_tokens=100, structured_outputs=so),
    )
    alone = llm.generate([target[0]], target[1], use_tqdm=False)[0].outputs[0].token_ids
    others = []
    for i in range(63):
        kind = list(SPECS)[i % 6] if i % 6 < 5 else None
        spec = SPECS[kind][1] if kind else None
        sp = SamplingParams(
            seed=100 + i,
            max_tokens=24 + i % 7,
            structured_outputs=StructuredOutputsParams(**spec) if spec else None,
        )
        others.append((chat_prompt(llm, f"Request {i}: say something."), sp))
    batch = others[:20] + [target] + others[20:]
    outs = llm.generate([p for p, _ in batch], [s for _, s in batch], use_tqdm=False)
    assert outs[20].outputs[0].token_ids == alone
    check("json", outs[20].outputs[0].text)


def test_twin_engine_gives_the_same_tokens(llm: LLM, default_model_path: str) -> None:
    py = LLM(
        default_model_path,
        kv_cache_memory_bytes=32 << 20,
        max_num_batched_tokens=256,
        backend="python",
        kv_cache_dtype="float32",
    )
    cases = [
        (chat_prompt(llm, "Name a colour."), StructuredOutputsParams(choice=CHOICES), 0.0),
        (chat_prompt(llm, "Why?"), StructuredOutputsParams(regex=r"[a-z]{2,5}( [a-z]{2,5}){2}\."), 1.0),
    ]
    sps = [SamplingParams(temperature=t, seed=5, max_tokens=16, structured_outputs=so) for _, so, t in cases]
    prompts = [p for p, _, _ in cases]
    want = [o.outputs[0].token_ids for o in llm.generate(prompts, sps, use_tqdm=False)]
    got = [o.outputs[0].token_ids for o in py.generate(prompts, sps, use_tqdm=False)]
    assert got == want


def test_a_grammar_left_only_with_forbidden_tokens_fails_its_request_clearly(llm: LLM) -> None:
    so = StructuredOutputsParams(choice=["ok"])
    bad = SamplingParams(min_tokens=5, max_tokens=8, structured_outputs=so)  # EOS is masked until 5 tokens
    with pytest.raises(RuntimeError, match="the structured-output grammar allows only tokens that"):
        llm.generate([chat_prompt(llm, "Say ok.")], bad, use_tqdm=False)
    assert llm.stats()["kv_usage_percent"] == 0.0


class FailingHost(ConstraintHost):
    def compute(self, handles: Any, children: Any, *rest: Any) -> list[tuple[int, str]]:
        super().compute(handles, children, *rest)
        return [(i, "synthetic matcher failure") for i in range(len(handles))]


@pytest.mark.parametrize("backend", ["cpp", "python"])
def test_a_matcher_that_cannot_continue_ends_only_its_request(
    llm: LLM, default_model_path: str, backend: str
) -> None:
    other = (
        llm if backend == "cpp" else LLM(default_model_path, kv_cache_memory_bytes=16 << 20, backend="python")
    )
    host = FailingHost(other.get_tokenizer(), other.model.config.n_vocab)
    other.engine.set_constraint_host(host)
    other.constraints = host
    try:
        sps = [
            SamplingParams(max_tokens=4, structured_outputs=StructuredOutputsParams(regex="a+")),
            SamplingParams(max_tokens=4, seed=1),
        ]
        with pytest.raises(RuntimeError, match="structured output: synthetic matcher failure"):
            other.generate(["x", "y"], sps, use_tqdm=False)
        ok = other.generate(["y"], sps[1], use_tqdm=False)[0].outputs[0]
        assert len(ok.token_ids) == 4 or ok.finish_reason == "stop"
        assert other.stats()["kv_usage_percent"] == 0.0
    finally:
        if backend == "cpp":
            llm.constraints = ConstraintHost(llm.get_tokenizer(), llm.model.config.n_vocab)
            llm.engine.set_constraint_host(llm.constraints)


def test_chat_passes_tools_and_continues_the_final_message(llm: LLM) -> None:
    template = (
        "{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}\n{% endif %}"
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
        "{% if not loop.last or add_generation_prompt %}</>{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    tok = llm.get_tokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], chat_template=template, tools=tools)
    assert text == "TOOLS:get_weather;<user>hi</><assistant>"  # trim_blocks eats the newline
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "The answer is "}]
    cont = tok.apply_chat_template(
        msgs, chat_template=template, add_generation_prompt=False, continue_final_message=True
    )
    assert cont == "<user>hi</><assistant>The answer is "
    with pytest.raises(ValueError, match="cannot both be set"):
        tok.apply_chat_template(msgs, chat_template=template, continue_final_message=True)
    out = llm.chat(
        msgs,
        SamplingParams(max_tokens=2, temperature=0),
        add_generation_prompt=False,
        continue_final_message=True,
        chat_template=template,
        tools=tools,
        use_tqdm=False,
    )
    assert out[0].prompt == "TOOLS:get_weather;" + cont


def test_preempted_constrained_requests_stay_valid_and_reproducible(default_model_path: str) -> None:
    """A KV cache too small for the batch preempts requests; their matchers keep their state across
    the recompute, so every output still matches and equals its solo run."""
    small = LLM(default_model_path, kv_cache_memory_bytes=12 << 20, max_model_len=200)
    pattern = r"[a-z]{3,8}( [a-z]{3,8}){20,30}\."
    so = StructuredOutputsParams(regex=pattern)
    sps = [SamplingParams(seed=i, max_tokens=190, structured_outputs=so) for i in range(16)]
    outs = small.generate([f"Story {i}:" for i in range(16)], sps, use_tqdm=False)
    assert small.stats()["num_preemptions"] > 0
    for o in outs:
        assert o.outputs[0].finish_reason == "stop" and re.fullmatch(pattern, o.outputs[0].text)
    solo = small.generate(["Story 5:"], sps[5], use_tqdm=False)[0].outputs[0]
    assert solo.token_ids == outs[5].outputs[0].token_ids
