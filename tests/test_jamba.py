"""Jamba (``jamba`` GGUF files, JambaForCausalLM folders: AI21's Jamba Reasoning 3B, Jamba 1.5 / 1.6 / 1.7
Mini) against Hugging Face transformers and the NumPy twin, on tiny random models built by transformers,
from safetensors folders and from GGUF files laid out as llama.cpp's converter writes them.

Most layers are Mamba-1 mixers (``ossa.reference.delta_net.mamba1``) whose dt, B and C are RMS-normalised
with weights (``dt_layernorm``, ``b_layernorm``, ``c_layernorm``; GGUF ``ssm_dt_norm`` ...); every
attn_layer_period-th layer from attn_layer_offset is GQA attention without RoPE; every layer has a
feed-forward after pre_ff_layernorm: dense, or (every expert_layer_period-th from expert_layer_offset)
experts routed by a softmax over all of them, top-k, the chosen weights not renormalised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from test_qwen35 import check_recurrent_engine, check_state_slots
from tiny_models import (
    N_TOKENS,
    build_hf_cases,
    case_file,
    check_case,
    check_chunked_prefill,
    check_config_refusals,
    golden,
    greedy,
    hf_greedy,
    hf_to_gguf,
    make_hf_model,
    twin_tol,
)

from ossa import models
from ossa._native import core

ALL = ["safetensors", "F32", "F16", "Q8_0"]
CASES: dict[str, dict[str, Any]] = {
    # Jamba Mini's layout, small: attention every other layer, experts on the others (3 of them, 2 used),
    # an explicit dt rank, the convolution's bias.
    "jamba": dict(
        arch="jamba", hidden_size=48, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=40,
        vocab_size=150, num_experts=3, num_experts_per_tok=2, attn_layer_period=2, attn_layer_offset=1,
        expert_layer_period=2, expert_layer_offset=0, mamba_d_state=8, mamba_dt_rank=5, mamba_d_conv=4,
        mamba_expand=2,
    ),
    # Dense (one expert: plain MLPs), attention at one depth of five, "auto" dt rank, 3 taps without the
    # convolution's bias, tied.
    "jamba-dense": dict(
        arch="jamba", hidden_size=32, num_layers=5, num_heads=2, num_kv_heads=1, intermediate_size=56,
        vocab_size=130, num_experts=1, num_experts_per_tok=1, attn_layer_period=5, attn_layer_offset=3,
        mamba_d_state=16, mamba_d_conv=3, mamba_expand=2, mamba_conv_bias=False, tie=True,
    ),
}  # fmt: skip
# F16 / Q8_0 files against transformers: these random models amplify the rounding of their weights through
# the scan (measured max F16 1.4e-3 / 9.4e-3, Q8_0 2.2e-2 for "jamba"; the dense model's Q8_0 file 0.24,
# exempt from the HF check); the twin on the same rounded weights agrees with ossa to twice its usual
# tolerance on AMX (the bf16 tiles' sums carried by the state, as for Qwen3.5: measured 7.4e-5).
ROUNDED_TOL = {"F16": 2e-2, "Q8_0": 0.1}
HF_EXEMPT = (("jamba-dense", "Q8_0"),)


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("jamba"), CASES, seed=540, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    if fmt in ROUNDED_TOL:
        _, hf, ids = hf_models[name]
        model, config, err_hf, err_twin, _ = golden(
            case_file(hf_models, name, fmt, tmp_path_factory), ids, hf
        )
        assert config == model.config
        assert err_twin < 2 * twin_tol(model), err_twin
        assert (name, fmt) in HF_EXEMPT or err_hf < ROUNDED_TOL[fmt], err_hf
    else:
        model = check_case(hf_models, name, fmt, tmp_path_factory, ROUNDED_TOL)
    kw, c = CASES[name], model.config
    m, n = c["mamba1"], kw["num_layers"]
    attn = [i for i in range(n) if i % kw["attn_layer_period"] == kw["attn_layer_offset"]]
    assert c["arch"] == "jamba" and m["layers"] == [i for i in range(n) if i not in attn]
    assert c["n_kv_layers"] == len(attn) and c["layer_nope"] == [True] * n
    assert m["dt_b_c_rms"] and m["dt_b_c_weights"] and m["bc_eps"] == np.float32(c["rms_eps"])
    rank = kw.get("mamba_dt_rank", -(-kw["hidden_size"] // 16))
    assert (m["d_inner"], m["d_state"], m["dt_rank"]) == (2 * kw["hidden_size"], kw["mamba_d_state"], rank)
    assert m["conv_kernel"] == kw["mamba_d_conv"] and m["conv_bias"] == kw.get("mamba_conv_bias", True)
    moe = c["moe"]
    if kw["num_experts"] > 1:
        period, offset = kw["expert_layer_period"], kw["expert_layer_offset"]
        assert moe["layers"] == [i for i in range(n) if i % period == offset]
        assert moe["n_expert"] == kw["num_experts"] and not moe["norm_topk_prob"]
    else:
        assert moe["layers"] == []


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal, equal to HF and to the twin's
    runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_batch_invariance_inspect_and_errors(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Batch invariance (alone, among 7 others each in its own state slot, chunked, 1 and 2 threads);
    state slots and fork copies; inspect; unsupported options and bad layouts refused by both loaders."""
    path = case_file(hf_models, "jamba", "Q8_0", tmp_path_factory)
    model = core.load_model(path)
    check_invariance(model, CASES["jamba"]["vocab_size"], seed=29)
    check_state_slots(model, CASES["jamba"]["vocab_size"])
    text = models.format_inspect(models.inspect(path))
    assert "mamba-1       2 of 4 layers" in text and "(with weights)" in text, text
    src = hf_models["jamba"][0]
    check_config_refusals(
        src,
        tmp_path,
        (
            ({"mamba_proj_bias": True}, "mamba_proj_bias"),
            ({"mamba_dt_rank": "x"}, "mamba_dt_rank"),
            ({"attn_layer_period": 0}, "attn_layer_period"),
            ({"expert_layer_period": 0}, "expert_layer_period"),
            ({"hidden_act": "gelu"}, "hidden_act"),
        ),
    )


def test_engine(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Through LLM (the default model's vocabulary and tokenizer): the recurrent engine's checks of
    test_qwen35 (batched = alone, slots taking turns, preemption, forks = the twin engine, refusals)."""
    root = tmp_path_factory.mktemp("jamba-engine")
    small = dict(vocab_size=49152, mamba_d_state=4, mamba_expand=1)
    folder = make_hf_model(root / "hf", seed=7, **dict(CASES["jamba"], **small))
    check_recurrent_engine(
        hf_to_gguf(folder, root / "tiny-jamba.gguf", "F32", tokenizer_gguf=default_model_path)
    )
