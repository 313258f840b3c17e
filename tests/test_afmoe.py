"""AFMoE (Arcee Trinity Nano / Mini / Large) against Hugging Face transformers (torch CPU, float32) and the
NumPy twin, on tiny random models built by transformers, from safetensors folders (the Hub's names) and from
GGUF files laid out as llama.cpp's converter writes them (docs/models.md):

- attention with per-head q / k RMSNorms, RoPE on the sliding layers alone (the global ones attend without
  positions), a window on the sliding layers, and the output gated by sigmoid of its own projection
  (gate_proj / attn_gate) before o_proj;
- four norms a layer (before and after the attention and the feed-forward);
- DeepSeek V3's routing in one group: sigmoid scores, the expert bias choosing, the chosen renormalised and
  scaled by route_scale, shared experts beside, dense lead layers;
- muP's embeddings times sqrt(hidden) (a folder's mup_enabled; llama.cpp's files always).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from tiny_models import (
    N_TOKENS,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    check_config_refusals,
    check_corrupt_sizes,
    check_golden,
    check_twin,
    greedy,
    hf_greedy,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

ALL = ["safetensors", "F32", "F16", "Q8_0"]
CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    # Trinity's layout: 3 sliding layers to 1 global, muP, one dense lead layer, a shared expert, scaled.
    "afmoe": (dict(
        arch="afmoe", hidden_size=64, num_layers=5, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96, moe_intermediate_size=24, num_experts=6, num_experts_per_tok=2,
        num_shared_experts=1, num_dense_layers=1, sliding_window=6, mup_enabled=True, route_scale=2.5,
        vocab_size=150,
    ), ALL),
    # Its own layer types (global first and third: a GGUF file holds them in ossa's pattern key), another
    # window, two shared experts, tied.
    "afmoe-types": (dict(
        arch="afmoe", hidden_size=48, num_layers=4, num_heads=4, num_kv_heads=4, head_dim=12,
        intermediate_size=80, moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
        num_shared_experts=2, num_dense_layers=2, sliding_window=9, tie=True, vocab_size=130,
        mup_enabled=True,
        layer_types=["full_attention", "sliding_attention", "full_attention", "sliding_attention"],
    ), ["safetensors", "F32"]),
    # Without muP (a folder: llama.cpp's files always scale the embeddings), route_scale 1, 1 expert a token.
    "afmoe-plain": (dict(
        arch="afmoe", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=12,
        intermediate_size=64, moe_intermediate_size=16, num_experts=4, num_experts_per_tok=1,
        num_shared_experts=1, num_dense_layers=1, sliding_window=5, vocab_size=130,
    ), ["safetensors"]),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    cases = {n: kw for n, (kw, _) in CASES.items()}
    return build_hf_cases(tmp_path_factory.mktemp("afmoe"), cases, seed=310, n_tokens=N_TOKENS)


def check_config(name: str, fmt: str, c: dict[str, Any]) -> None:
    case = CASES[name][0]
    n = case["num_layers"]
    types = case.get("layer_types") or [
        "full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(n)
    ]
    sliding = [t == "sliding_attention" for t in types]
    assert c["arch"] == "afmoe" and c["qk_norm"] and c["attn_gate"] and c["attn_gate_proj"]
    assert c["layer_nope"] == [not s for s in sliding]
    assert c["sliding_window"] == (case["sliding_window"] or 0)
    assert c["layer_sliding"] == (sliding if case["sliding_window"] else [])
    # (GGUF: llama.cpp's files always scale the embeddings; a folder where mup_enabled)
    scaled = case.get("mup_enabled") or fmt != "safetensors"
    assert c["embd_scale"] == pytest.approx(np.sqrt(case["hidden_size"]) if scaled else 0.0)
    moe = c["moe"]
    assert moe["deepseek"] and moe["sigmoid_gating"] and moe["selection_bias"] and moe["norm_topk_prob"]
    assert moe["n_expert"] == case["num_experts"] and moe["n_expert_used"] == case["num_experts_per_tok"]
    assert moe["n_ff_shared"] == case["num_shared_experts"] * case["moe_intermediate_size"]
    assert moe["routed_scale"] == pytest.approx(case.get("route_scale", 1.0))
    assert moe["layers"] == list(range(case["num_dense_layers"], n))


@pytest.mark.parametrize("name, fmt", [(n, f) for n, (_, fmts) in CASES.items() for f in fmts])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    # (rounded weights switch an expert now and then: the twin on the same weights)
    rounded = fmt in ("F16", "Q8_0")
    model = check_twin(path, ids, hf_logits) if rounded else check_golden(path, ids, hf_logits, fmt)
    check_config(name, fmt, model.config)


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens (over 6x the window): bitwise equal, equal to HF and the twin's runner;
    20 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 20, block=4) == hf_greedy(path, ids[:10], 20)


@pytest.mark.parametrize("fmt", ["safetensors", "Q8_0"])
def test_batch_invariant(hf_models: dict[str, Any], fmt: str, tmp_path_factory: Any) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits; inspect names
    the gate, the window and the experts."""
    path = case_file(hf_models, "afmoe", fmt, tmp_path_factory)
    check_invariance(core.load_model(path), CASES["afmoe"][0]["vocab_size"], seed=7)
    text = models.format_inspect(models.inspect(path))
    assert "architecture  afmoe" in text and "output gated per head (sigmoid)" in text, text
    assert "sliding window of 6 tokens in 4 of 5 layers" in text, text


def test_gate_and_post_norms_matter_and_refusals(hf_models: dict[str, Any], tmp_path: Any) -> None:
    """Without the attention's gate, or the MoE layers' post-norm, the logits move as the twin says; options
    transformers' Afmoe does not have are refused by name."""
    path, _, ids = hf_models["afmoe"]
    config, weights = ref_loader.load_weights(path)
    got = core.model_logits(core.load_model(path), ids)
    scale = float(np.max(np.abs(got)))
    assert float(np.max(np.abs(got - ref_model.forward(config, weights, ids)))) < 1e-5 * scale
    ungated = dict(config, attn_gate=False, attn_gate_proj=False)
    assert float(np.max(np.abs(got - ref_model.forward(ungated, weights, ids)))) > 1e-3 * scale
    plain = {k: (np.ones_like(v) if k.endswith("post_ffn_norm") else v) for k, v in weights.items()}
    assert float(np.max(np.abs(got - ref_model.forward(config, plain, ids)))) > 1e-3 * scale
    check_config_refusals(path, tmp_path, [
        ({"attention_bias": True}, "attention_bias"),
        ({"global_attn_every_n_layers": 0, "layer_types": None}, "global_attn_every_n_layers"),
        ({"hidden_act": "gelu"}, "hidden_act"),
    ])  # fmt: skip


def test_corrupt_sizes_are_refused_or_run(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Each scalar size key of the GGUF file set to 0, 1, 3, 7, 2^20, 2^31-1, 2^32-1: refused with a
    ModelError or loads and runs, never a crash."""
    src = case_file(hf_models, "afmoe", "F32", tmp_path_factory)
    check_corrupt_sizes(src, tmp_path_factory.mktemp("bad"), 8)


def test_engine(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Through LLM (the default model's vocabulary and tokenizer): batched = alone = the paged runner's
    greedy decode, prefix-cache hits the same, the Python twin engine the same tokens (and the same seeded
    forks), and preempted sequences recomputed to the same tokens."""
    from tiny_models import check_engine, hf_to_gguf, make_hf_model

    root = tmp_path_factory.mktemp("afmoe-engine")
    folder = make_hf_model(root / "hf", seed=9, **dict(CASES["afmoe"][0], vocab_size=49152))
    check_engine(hf_to_gguf(folder, root / "tiny-afmoe.gguf", "F32", tokenizer_gguf=default_model_path))
