"""OLMoE (``olmoe`` GGUF files, OlmoeForCausalLM folders: AllenAI's OLMoE-1B-7B) against Hugging Face
transformers (torch CPU, float32) and the NumPy twin, on tiny random models built by transformers, from
safetensors folders and from GGUF files laid out as llama.cpp's converter writes them.

OLMoE is the Llama forward pass (pre-norms) with q / k RMS-normalised over the whole projection (all
heads at once, as OLMo 2), q / k / v optionally clipped to [-clip_qkv, clip_qkv] after the norms, and
every layer a mixture of experts of ``intermediate_size`` rows routed by a softmax over all experts,
top-k, renormalised only where ``norm_topk_prob`` says so (llama.cpp: ``expert_weights_norm``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from test_deepseek import check_moe_logits
from test_more_archs import both_refuse, copy_with, moved_as_twin_predicts
from tiny_models import N_TOKENS, build_hf_cases, case_file, check_chunked_prefill, greedy, hf_greedy

from ossa import models
from ossa._native import core

ALL = ["safetensors", "F32", "F16", "Q8_0"]
CASES: dict[str, dict[str, Any]] = {
    # OLMoE-1B-7B's layout: MHA, untied, every layer 8 experts (of 64 there), top 3, not renormalised.
    "olmoe": dict(
        arch="olmoe", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=32,
        vocab_size=150, num_experts=8, num_experts_per_tok=3, norm_topk_prob=False, rope_theta=10000.0,
    ),
    # clip_qkv set, renormalised, GQA 2, tied (transformers sizes the q norm by hidden_size, so
    # head_dim is always hidden / heads).
    "olmoe-clip": dict(
        arch="olmoe", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=24, vocab_size=130, num_experts=6, num_experts_per_tok=2, norm_topk_prob=True,
        clip_qkv=0.8, tie=True,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("olmoe"), CASES, seed=210, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf, ids = hf_models[name]
    c = check_moe_logits(path, fmt, hf, ids).config
    kw = CASES[name]
    assert c["qk_norm"] and c["clamp_qkv"] == pytest.approx(kw.get("clip_qkv") or 0.0)
    assert c["moe"]["n_ff_expert"] == kw["intermediate_size"] and c["moe"]["layers"] == list(
        range(kw["num_layers"])
    )
    assert c["moe"]["norm_topk_prob"] == kw["norm_topk_prob"]


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal, equal to HF and to the
    twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_batch_invariant_inspect_and_features(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Batch invariance (alone, among 7 others, chunked, 1 and 2 threads); inspect names the clip;
    the clip and the whole-projection q norm are each applied (changing one moves the logits as the
    twin predicts); a negative clip is refused."""
    path = case_file(hf_models, "olmoe-clip", "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(path), CASES["olmoe-clip"]["vocab_size"], seed=5)
    text = models.format_inspect(models.inspect(path))
    assert "architecture  olmoe" in text and "q, k, v clipped to +-0.8" in text
    assert "experts       6 of 24 rows, 2 used per token, in 2 of 2 layers" in text
    src, _, ids = hf_models["olmoe-clip"]
    want = core.model_logits(core.load_model(src), ids)
    moved_as_twin_predicts(copy_with(src, tmp_path / "clip", clip_qkv=0.5), ids, want)
    norm = "model.layers.0.self_attn.q_norm.weight"
    moved_as_twin_predicts(copy_with(src, tmp_path / "qnorm", {norm: lambda w: w[::-1].copy()}), ids, want)
    both_refuse(copy_with(src, tmp_path / "negative", clip_qkv=-1.0), "clamp", "clip_qkv")
