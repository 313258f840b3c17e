"""ossa.SamplingParams: vLLM's names and defaults, validation errors that name field and range."""

from __future__ import annotations

import math

import pytest

from ossa.sampling_params import SamplingParams


def test_defaults_match_vllm() -> None:
    sp = SamplingParams()
    assert (sp.n, sp.temperature, sp.top_p, sp.top_k, sp.min_p) == (1, 1.0, 1.0, -1, 0.0)
    assert (sp.repetition_penalty, sp.frequency_penalty, sp.presence_penalty) == (1.0, 0.0, 0.0)
    assert (sp.seed, sp.stop, sp.stop_token_ids, sp.ignore_eos) == (None, None, [], False)
    assert (sp.max_tokens, sp.min_tokens, sp.logprobs, sp.prompt_logprobs) == (16, 0, None, None)
    assert sp.skip_special_tokens is True and sp.logit_bias is None and not sp.greedy
    assert SamplingParams(temperature=0).greedy


@pytest.mark.parametrize(
    "kw,field,rng",
    [
        ({"temperature": -0.1}, "temperature", ">= 0"),
        ({"temperature": math.inf}, "temperature", ">= 0"),
        ({"top_p": 0.0}, "top_p", r"\(0, 1\]"),
        ({"top_p": 1.5}, "top_p", r"\(0, 1\]"),
        ({"top_k": 0}, "top_k", ">= 1"),
        ({"top_k": -2}, "top_k", ">= 1"),
        ({"min_p": 1.1}, "min_p", r"\[0, 1\]"),
        ({"n": 0}, "n", ">= 1"),
        ({"max_tokens": 0}, "max_tokens", ">= 1"),
        ({"min_tokens": -1}, "min_tokens", ">= 0"),
        ({"min_tokens": 5, "max_tokens": 4}, "min_tokens", "<= max_tokens"),
        ({"repetition_penalty": 0.0}, "repetition_penalty", "> 0"),
        ({"frequency_penalty": 2.5}, "frequency_penalty", r"\[-2.0, 2.0\]"),
        ({"presence_penalty": -3}, "presence_penalty", r"\[-2.0, 2.0\]"),
        ({"logprobs": 21}, "logprobs", r"\[0, 20\]"),
        ({"prompt_logprobs": -1}, "prompt_logprobs", r"\[0, 20\]"),
        ({"logit_bias": {5: 101.0}}, r"logit_bias\[5\]", r"\[-100, 100\]"),
        ({"logit_bias": {-1: 1.0}}, "logit_bias keys", ">= 0"),
        ({"stop_token_ids": [-3]}, r"stop_token_ids\[0\]", ">= 0"),
        ({"seed": 2**64}, "seed", "2\\*\\*64"),
        ({"allowed_token_ids": []}, "allowed_token_ids", "not be empty"),
        # past the C++ engine's int32 fields, or not encodable as UTF-8: named here, not by nanobind
        ({"top_k": 2**70}, "top_k", "2\\*\\*31-1"),
        ({"min_tokens": 2**70, "max_tokens": None}, "min_tokens", "2\\*\\*31-1"),
        ({"stop": ["ok", "\ud800"]}, r"stop\[1\]", "not valid Unicode"),
    ],
)
def test_out_of_range_names_field_and_range(kw: dict, field: str, rng: str) -> None:
    with pytest.raises(ValueError, match=f"{field}.*{rng}"):
        SamplingParams(**kw)


@pytest.mark.parametrize(
    "name", ["temperature", "top_p", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty"]
)
def test_nan_rejected_everywhere(name: str) -> None:
    with pytest.raises(ValueError, match=f"{name} must not be NaN"):
        SamplingParams(**{name: math.nan})
    with pytest.raises(ValueError, match="NaN"):
        SamplingParams(logit_bias={1: math.nan})


def test_types_and_normalisation() -> None:
    with pytest.raises(ValueError, match="n must be an integer"):
        SamplingParams(n=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k must be an integer"):
        SamplingParams(top_k=True)  # type: ignore[arg-type]
    assert SamplingParams(stop="###").stop_strings == ["###"]
    assert SamplingParams(stop=["a", "b"]).stop_strings == ["a", "b"]
    assert SamplingParams(logit_bias={"7": 2}).logit_bias == {7: 2.0}  # JSON object keys
    with pytest.raises(ValueError, match="stop must be"):
        SamplingParams(stop=[1])  # type: ignore[list-item]


def test_vocabulary_check_and_core_fields() -> None:
    sp = SamplingParams(logit_bias={49152: 1.0})
    with pytest.raises(
        ValueError, match=r"logit_bias holds token id 49152, outside the vocabulary \[0, 49152\)"
    ):
        sp.check_vocab(49152)
    SamplingParams(logit_bias={49151: 1.0}).check_vocab(49152)
    fields = SamplingParams(seed=-1, logprobs=3, logit_bias={9: -1.0, 2: 0.5}).sampler_fields(
        eos_token_ids=[2]
    )
    assert fields["seed"] == 2**64 - 1 and fields["logprobs"] == 3 and fields["eos_token_ids"] == [2]
    assert fields["logit_bias"] == [(2, 0.5), (9, -1.0)]
    assert SamplingParams().sampler_fields()["logprobs"] == -1


def test_to_core_round_trip() -> None:
    core = pytest.importorskip("ossa._native").core
    if not hasattr(core, "SamplingParams"):
        pytest.skip("core built without the sampling component")
    sp = SamplingParams(temperature=0.7, top_k=40, seed=5, logit_bias={3: 1.5}, min_tokens=2, logprobs=4)
    p = sp.to_core(eos_token_ids=[0], vocab_size=100)
    assert (p.temperature, p.top_k, p.seed, p.logit_bias, p.min_tokens) == (0.7, 40, 5, [(3, 1.5)], 2)
    assert (p.eos_token_ids, p.logprobs) == ([0], 4)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        sp.to_core(vocab_size=3)
