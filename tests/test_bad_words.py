"""vLLM's ``bad_words``: tokenized by vLLM's rule in the input processor, each word's last token
masked by the sampler (C++ and twin: tests/test_sampler_twin.py) where the output ends with its other
tokens."""

from __future__ import annotations

import pytest

from ossa import LLM, SamplingParams

PROMPT = "1, 2, 3, 4,"


@pytest.fixture(scope="module")
def llm(default_model_path: str) -> LLM:
    return LLM(default_model_path, kv_cache_memory_bytes=16 << 20)


def test_words_are_tokenized_alone_and_after_a_space(llm: LLM) -> None:
    tok = llm.get_tokenizer()
    ids = llm.input_processor.bad_words_ids(["5", "  Paris"])
    alone = tok.encode("Paris", add_special_tokens=False)
    spaced = tok.encode(" Paris", add_special_tokens=False)
    want = [tok.encode("5", add_special_tokens=False), alone]
    if spaced[0] != alone[0] and len(spaced) == len(alone):
        want.append(spaced)
    assert ids == want


def test_a_banned_word_is_not_generated(llm: LLM) -> None:
    greedy = SamplingParams(temperature=0.0, max_tokens=12)
    plain = llm.generate(PROMPT, greedy, use_tqdm=False)[0].outputs[0]
    assert "5" in plain.text
    banned = llm.generate(
        PROMPT, SamplingParams(temperature=0.0, max_tokens=12, bad_words=["5"]), use_tqdm=False
    )
    assert "5" not in banned[0].outputs[0].text


def test_a_multi_token_word_is_cut_at_its_last_token(llm: LLM) -> None:
    (seq,) = llm.input_processor.bad_words_ids(["5,"])
    assert len(seq) == 2  # "5" then ","

    def pairs(ids: list[int]) -> list[list[int]]:
        return [ids[i : i + 2] for i in range(len(ids) - 1)]

    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    plain = llm.generate(PROMPT, greedy, use_tqdm=False)[0].outputs[0].token_ids
    assert seq in pairs(plain)
    sp = SamplingParams(temperature=0.0, max_tokens=8, bad_words=["5,"])
    out = llm.generate(PROMPT, sp, use_tqdm=False)[0].outputs[0].token_ids
    assert seq not in pairs(out)
    assert seq[0] in out  # its first token alone is no bad word


@pytest.mark.parametrize("bad", ["5", [""], ["  "], [5]])
def test_bad_values_are_named(bad: object) -> None:
    with pytest.raises(ValueError, match="bad_words"):
        SamplingParams(bad_words=bad)  # type: ignore[arg-type]
