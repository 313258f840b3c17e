"""Qwen3-Next (``qwen3next`` GGUF files, Qwen3NextForCausalLM folders: Qwen3-Next-80B-A3B, Qwen3-Coder-Next)
against Hugging Face transformers and the NumPy twin, on tiny random models built by transformers, from
safetensors folders and from GGUF files laid out as llama.cpp's converter writes them.

Qwen3-Next is Qwen3.5-MoE's predecessor with the same layers (gated delta-nets, gated attention with q / k
norms and a partial NeoX RoPE, 1 + w norms, experts with a gated shared expert): the differences are the
delta-net's projections, fused per key head in the folder (``in_proj_qkvz``: [q_g | k_g | v_g | z_g],
``in_proj_ba``: [b_g | a_g]) and in GGUF's ``ssm_ba`` (and the older files' ``ssm_in``), which both loaders
gather row by row into Qwen3.5's [q | k | v], z, b and a; the value heads grouped by key head in GGUF too
(llama.cpp's converter does not tile them for this architecture); the router's ``norm_topk_prob``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from test_qwen35 import check_recurrent_engine, check_state_slots
from tiny_models import (
    HF_TOL,
    N_TOKENS,
    TWIN_TOL,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    greedy,
    hf_greedy,
    hf_to_gguf,
    make_hf_model,
    twin_tol,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

ALL = ["safetensors", "F32", "F16", "Q8_0", "F32-legacy"]
CASES: dict[str, dict[str, Any]] = {
    # Qwen3-Next-80B-A3B's layout, small: two value heads per key head (value heads wider than the key
    # heads), three delta-nets then gated attention, experts (renormalised) beside a gated shared expert,
    # a quarter of each head rotated, untied.
    "qwen3-next": dict(
        arch="qwen3_next", hidden_size=48, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=64, vocab_size=150, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=12, linear_conv_kernel_dim=4, num_experts=6,
        num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=20,
        partial_rotary_factor=0.25,
    ),
    # Dense layers too (mlp_only_layers), the router not renormalised, one value head per key head,
    # attention every other layer, 3 taps, tied.
    "qwen3-next-mixed": dict(
        arch="qwen3_next", hidden_size=40, num_layers=4, num_heads=2, num_kv_heads=1, head_dim=20,
        intermediate_size=56, vocab_size=130, linear_num_key_heads=3, linear_num_value_heads=3,
        linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=3,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        num_experts=5, num_experts_per_tok=3, moe_intermediate_size=16, shared_expert_intermediate_size=28,
        mlp_only_layers=[2], norm_topk_prob=False, partial_rotary_factor=0.5, tie=True,
    ),
}  # fmt: skip
# F16 / Q8_0 files against transformers, as Qwen3.5's (test_qwen35.ROUNDED_TOL): the random models
# amplify the rounding of their weights; the twin on the same rounded weights agrees to its tolerance.
ROUNDED_TOL = {"F16": 2e-2, "Q8_0": 0.2}


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("qwen3next"), CASES, seed=370, n_tokens=N_TOKENS)


def err(a: np.ndarray, b: np.ndarray, hf: np.ndarray) -> float:
    return float(np.max(np.abs(a - b))) / float(np.max(np.abs(hf)))


def _file(hf_models: dict[str, Any], name: str, fmt: str, tmp: pytest.TempPathFactory) -> str:
    if fmt == "F32-legacy":  # (the fused ssm_in of llama.cpp's first Qwen3-Next conversions)
        return case_file(hf_models, name, "F32", tmp, legacy_ssm_in=True)
    return case_file(hf_models, name, fmt, tmp)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = _file(hf_models, name, fmt, tmp_path_factory)
    _, hf, ids = hf_models[name]
    model = core.load_model(path)
    got = core.model_logits(model, ids)
    config, weights = ref_loader.load_weights(path)
    assert config == model.config  # the twin reads the same hyper-parameters
    twin = ref_model.forward(config, weights, ids)
    if fmt in ROUNDED_TOL:
        assert err(got, hf, hf) < ROUNDED_TOL[fmt]
        exact = core.load_model(path, amx=False)  # the f32 kernels: the twin's arithmetic
        assert err(core.model_logits(exact, ids), twin, hf) < TWIN_TOL
        assert err(got, twin, hf) < 2 * twin_tol(model)
    else:
        assert err(got, hf, hf) < HF_TOL["F32" if fmt == "F32-legacy" else fmt]
        assert err(twin, hf, hf) < HF_TOL["F32" if fmt == "F32-legacy" else fmt]
        assert err(got, twin, hf) < TWIN_TOL
    kw, c = CASES[name], model.config
    d, moe = c["delta"], c["moe"]
    assert c["arch"] == "qwen3next" and not d["v_tiled"]  # (grouped in both formats)
    assert (d["n_k_heads"], d["n_v_heads"], d["k_dim"], d["v_dim"], d["conv_kernel"]) == (
        kw["linear_num_key_heads"], kw["linear_num_value_heads"], kw["linear_key_head_dim"],
        kw["linear_value_head_dim"], kw["linear_conv_kernel_dim"],
    )  # fmt: skip
    assert c["attn_gate"] and c["qk_norm"]
    assert c["rope_dim"] == int(kw["head_dim"] * kw["partial_rotary_factor"])
    assert moe["n_expert"] == kw["num_experts"]
    assert moe["n_ff_shared"] == kw["shared_expert_intermediate_size"]
    dense = kw.get("mlp_only_layers", [])
    assert moe["layers"] == [i for i in range(kw["num_layers"]) if i not in dense]
    # (GGUF: the released models renormalise, as llama.cpp always does for this architecture; the
    # mixed case's files carry expert_weights_norm false, which ossa honours)
    assert moe["norm_topk_prob"] == kw.get("norm_topk_prob", True)


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal (the state carried across
    chunks), equal to HF and to the twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_batch_invariance_state_slots_inspect(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Batch invariance (alone, among 7 others each in its own state slot, chunked, 1 and 2 threads) on
    a Q8_0 file; state slots and fork copies; inspect names the delta-net layers and the experts."""
    path = case_file(hf_models, "qwen3-next", "Q8_0", tmp_path_factory)
    model = core.load_model(path)
    check_invariance(model, CASES["qwen3-next"]["vocab_size"], seed=13)
    check_state_slots(model, CASES["qwen3-next"]["vocab_size"])
    text = models.format_inspect(models.inspect(path))
    assert "architecture  qwen3next" in text, text
    want = "delta-net     3 of 4 layers (linear attention, no KV cache): 4 value heads of 12 over 2 key"
    assert want in text, text
    assert "experts       6 of 24 rows, 2 used per token, in 4 of 4 layers, a shared expert of 20" in text


def test_engine(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Through LLM (the default model's vocabulary and tokenizer, the older fused ssm_in layout): the
    recurrent engine's checks of test_qwen35 (batched = alone, slots taking turns, preemption, forks = the
    twin engine, refusals)."""
    root = tmp_path_factory.mktemp("qwen3next-engine")
    folder = make_hf_model(root / "hf", seed=4, **dict(CASES["qwen3-next"], vocab_size=49152))
    path = hf_to_gguf(folder, root / "tiny-qwen3next.gguf", "F32", tokenizer_gguf=default_model_path,
                      legacy_ssm_in=True)  # fmt: skip
    check_recurrent_engine(path)
