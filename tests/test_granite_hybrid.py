"""Granite 4.0-H (``granitehybrid`` GGUF files, GraniteMoeHybridForCausalLM folders: IBM's Granite 4.0
H-Micro, H-Tiny, H-Small) against Hugging Face transformers and the NumPy twin, on tiny random models
built by transformers, from safetensors folders and from GGUF files laid out as llama.cpp's converter
writes them.

Most layers are Mamba-2 mixers (``ossa.reference.delta_net.mamba2``: [z | x | B | C | dt] from one
projection, [x | B | C] through a causal depthwise convolution with a bias and SiLU, each head's
head_dim x d_state state updated by the selective scan, y * SiLU(z) RMS-normalised in groups), the
others attention without RoPE (Granite 4.0-H's NoPE; RoPE when the config asks for it); Granite's four
multipliers; the feed-forward a dense shared MLP, or experts (softmax over the chosen logits) beside it.
The engine gives each running sequence a state slot, as for Qwen3.5 (test_qwen35.check_recurrent_engine).
The GGUF layout was also checked against llama.cpp's own reading of such files
(benchmarks/hybrid.py --arch granitehybrid).
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
    greedy,
    hf_greedy,
    hf_to_gguf,
    make_hf_model,
    runner_logits,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader

ALL = ["safetensors", "F32", "F16", "Q8_0"]
_MULTIPLIERS = dict(embedding_multiplier=1.5, residual_multiplier=0.6, attention_multiplier=0.2,
                    logits_scaling=2.5)  # fmt: skip
CASES: dict[str, dict[str, Any]] = {
    # Granite 4.0-H-Tiny's layout, small: Mamba-2 layers in 2 groups with an odd state size (20, a
    # masked tail in C++), the convolution's bias, NoPE attention at one depth, 4 experts (2 used)
    # beside the shared MLP, untied, the Hub's "mamba" / "attention" layer names.
    "granite4-moe": dict(
        arch="granitemoehybrid", hidden_size=48, num_layers=4, num_heads=4, num_kv_heads=2,
        intermediate_size=40, vocab_size=150, layer_types=["mamba", "attention", "mamba", "mamba"],
        mamba_n_heads=6, mamba_d_state=20, mamba_n_groups=2, mamba_d_conv=4, mamba_expand=2,
        num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=56,
        position_embedding_type="nope", **_MULTIPLIERS,
    ),
    # Granite 4.0-H-Micro's (dense: the shared MLP alone), with RoPE, one group, 3 taps without the
    # convolution's bias, tied, transformers 5's layer names, ending on a Mamba-2 layer.
    "granite4-dense": dict(
        arch="granitemoehybrid", hidden_size=64, num_layers=5, num_heads=4, num_kv_heads=1,
        intermediate_size=72, vocab_size=130,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention",
                     "linear_attention"],
        mamba_n_heads=4, mamba_d_state=16, mamba_n_groups=1, mamba_d_conv=3, mamba_expand=1,
        mamba_conv_bias=False, num_local_experts=0, shared_intermediate_size=72,
        position_embedding_type="rope", tie=True, **_MULTIPLIERS,
    ),
}  # fmt: skip
# F16 / Q8_0 files against transformers: measured max F16 1.1e-3 (the Llama family's bound is 1e-3),
# Q8_0 1.4e-2; the twin on the same rounded weights agrees with ossa to its usual tolerance. (With seed
# 440 the MoE case's F16 file routes one token to another expert than HF's float32 weights do, 0.11 off:
# a tie in the router, not an error of the format.)
ROUNDED_TOL = {"F16": 2e-3, "Q8_0": 3e-2}


# Bamba (BambaForCausalLM folders; its GGUF files are granitehybrid ones): Granite 4.0-H's blocks without
# the multipliers, RoPE on half of each head, attention where attn_layer_indices says, a plain gated MLP.
BAMBA = dict(
    arch="bamba", hidden_size=48, num_layers=5, num_heads=4, num_kv_heads=2, intermediate_size=56,
    vocab_size=140, attn_layer_indices=[1, 3], mamba_n_heads=6, mamba_d_state=12, mamba_n_groups=2,
    mamba_d_conv=4, mamba_expand=2, partial_rotary_factor=0.5,
)  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("granite4"), CASES, seed=441, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model = check_case(hf_models, name, fmt, tmp_path_factory, ROUNDED_TOL)
    kw, c = CASES[name], model.config
    mamba = [i for i, t in enumerate(kw["layer_types"]) if t in ("mamba", "linear_attention")]
    m = c["ssm"]
    assert m["layers"] == mamba and m["d_state"] == kw["mamba_d_state"]
    assert m["n_groups"] == kw["mamba_n_groups"]
    assert m["d_inner"] == kw["mamba_expand"] * kw["hidden_size"] and m["n_heads"] == kw["mamba_n_heads"]
    assert m["conv_bias"] == kw.get("mamba_conv_bias", True) and m["conv_kernel"] == kw["mamba_d_conv"]
    assert c["n_kv_layers"] == kw["num_layers"] - len(mamba)
    conv_dim = m["d_inner"] + 2 * m["n_groups"] * m["d_state"]
    per_layer = (m["conv_kernel"] - 1) * conv_dim + m["d_inner"] * m["d_state"]
    assert c["state_bytes"] == 4 * len(mamba) * per_layer
    assert c["layer_nope"] == ([] if kw["position_embedding_type"] == "rope" else [True] * kw["num_layers"])
    assert c["residual_scale"] == np.float32(kw["residual_multiplier"])
    if kw["num_local_experts"]:  # the experts on every layer, the shared MLP beside them
        assert c["moe"]["layers"] == list(range(kw["num_layers"])) and c["moe"]["softmax_topk"]
        assert c["moe"]["n_ff_shared"] == kw["shared_intermediate_size"]
    else:
        assert c["moe"]["n_expert"] == 0 and c["n_ff"] == kw["shared_intermediate_size"]


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal (the convolution's inputs
    and the scan's state carried across chunks), equal to HF and to the twin's runner; 30 greedy tokens
    equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_bamba(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A Bamba folder: logits against transformers and the twin, its layout read as Granite 4.0-H's
    (Mamba-2 layers, RoPE on half of each head, no multipliers, a dense MLP), chunked prefill bitwise
    equal to the whole, 30 greedy tokens equal to transformers' generate."""
    cases = build_hf_cases(tmp_path_factory.mktemp("bamba"), {"bamba": BAMBA}, seed=442, n_tokens=N_TOKENS)
    model = check_case(cases, "bamba", "safetensors", tmp_path_factory, ROUNDED_TOL)
    c = model.config
    assert c["arch"] == "granitehybrid" and c["ssm"]["layers"] == [0, 2, 4] and c["n_kv_layers"] == 2
    assert c["rope_dim"] == 6 and c["layer_nope"] == [] and c["moe"]["n_expert"] == 0
    assert c["n_ff"] == BAMBA["intermediate_size"] and c["residual_scale"] == 0 and c["embd_scale"] == 0
    path, hf_logits, ids = cases["bamba"]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)
    text = models.format_inspect(models.inspect(path))
    assert "mamba-2       3 of 5 layers" in text and "multipliers" not in text, text


def test_all_mamba_layers(tmp_path: Path) -> None:
    """A model of Mamba-2 layers only (GraniteMoeHybridConfig without layer_types): no K/V at all; the
    runner's chunked prefill still equals the whole one and transformers."""
    kw = dict(CASES["granite4-dense"], num_layers=3)
    del kw["layer_types"]
    folder = make_hf_model(tmp_path / "all-mamba", seed=9, **kw)
    ids = np.random.default_rng(5).integers(0, kw["vocab_size"], 24).tolist()
    import torch
    import transformers

    # (transformers' cache needs an attention layer: the oracle runs without one, in float64)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64)
    with torch.no_grad():
        hf = hf_model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
    model = core.load_model(folder)
    assert model.config["n_kv_layers"] == 0 and model.config["ssm"]["layers"] == [0, 1, 2]
    whole = runner_logits(core.ModelRunner(model, 8, 4, 64), ids, chunk=len(ids))
    assert np.abs(whole - hf).max() / np.abs(hf).max() < 1e-5
    assert np.array_equal(runner_logits(core.ModelRunner(model, 8, 4, 64), ids, chunk=5), whole)


def test_batch_invariance_inspect_and_errors(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Batch invariance (alone, among 7 others each in its own state slot, chunked, 1 and 2 threads);
    state slots and fork copies (a model whose last layer is a Mamba-2 layer); inspect names the
    Mamba-2 layers and the multipliers; bad sizes, layer types and unsupported options are refused by
    both loaders; a GGUF file without the ssm.* sizes fails naming them."""
    path = case_file(hf_models, "granite4-moe", "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(path), CASES["granite4-moe"]["vocab_size"], seed=17)
    dense = case_file(hf_models, "granite4-dense", "F32", tmp_path_factory)
    check_state_slots(core.load_model(dense), CASES["granite4-dense"]["vocab_size"])
    text = models.format_inspect(models.inspect(path))
    want = "mamba-2       3 of 4 layers (state space, no KV cache): 6 heads of 16, state size 20, 2 groups"
    assert want in text, text
    assert "multipliers   embeddings 1.5, residuals 0.6, scores 0.2, logits / 2.5" in text, text
    assert "none in 4 of 4 layers" in text  # (NoPE)
    src = hf_models["granite4-moe"][0]
    check_config_refusals(
        src,
        tmp_path,
        (
            ({"mamba_d_head": 7}, "mamba_d_head"),
            ({"mamba_proj_bias": True}, "mamba_proj_bias"),
            ({"mamba_n_groups": 4}, "Mamba-2 head / group counts"),
            ({"layer_types": ["mamba", "conv", "mamba", "mamba"]}, "layer_types"),
            ({"hidden_act": "gelu"}, "hidden_act"),
            ({"attention_bias": True}, "attention_bias"),
        ),
    )
    from tiny_models import gguf_without

    f32 = case_file(hf_models, "granite4-moe", "F32", tmp_path_factory)
    odd = gguf_without(f32, tmp_path / "odd.gguf", keys=["granitehybrid.ssm.state_size"])
    with pytest.raises(core.ModelError, match="Mamba-2 state size"):
        core.load_model(odd)
    with pytest.raises(ValueError, match="Mamba-2 state size"):
        ref_loader.load_weights(odd)


@pytest.fixture(scope="module")
def engine_model(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny Granite 4.0-H GGUF with the default model's vocabulary and tokenizer, for the engine (its
    Mamba-2 states small beside the one attention layer's K/V, so that the preemption check's tight
    budget holds four of them)."""
    root = tmp_path_factory.mktemp("granite4-engine")
    small = dict(vocab_size=49152, mamba_d_state=8, mamba_expand=1, mamba_n_heads=2, mamba_n_groups=1)
    folder = make_hf_model(root / "hf", seed=6, **dict(CASES["granite4-moe"], **small))
    return hf_to_gguf(folder, root / "tiny-granite4.gguf", "F32", tokenizer_gguf=default_model_path)


def test_engine_state_slots(engine_model: str) -> None:
    check_recurrent_engine(engine_model)
