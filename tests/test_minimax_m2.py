"""MiniMax-M2 (``minimax-m2`` GGUF files, MiniMaxM2ForCausalLM folders) against Hugging Face transformers
and the NumPy twin, on tiny random models built by transformers, from safetensors and from GGUF files laid
out as llama.cpp's converter writes them: q and k RMS-normalised over all heads at once before RoPE, NeoX
RoPE on the first rotary_dim dimensions of each head, experts on every layer routed as DeepSeek V3 in one
group (sigmoid scores plus a per-expert selection bias, the chosen renormalised), Mixtral's per-expert
w1 / w2 / w3 tensors in folders and llama.cpp's 3-D stacks with exp_probs_b in GGUF files."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from tiny_models import (
    N_TOKENS,
    build_hf_cases,
    case_file,
    check_case,
    check_chunked_prefill,
    greedy,
    hf_greedy,
)

from ossa import models
from ossa._native import core

CASES: dict[str, dict[str, Any]] = {
    "minimax-m2": dict(
        arch="minimax_m2", hidden_size=40, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=12,
        intermediate_size=24, vocab_size=110, num_local_experts=6, num_experts_per_tok=2, rotary_dim=6,
        rope_theta=5e6,
    ),
}  # fmt: skip
FORMATS = ["safetensors", "F32", "F16", "Q8_0"]
# The Q8_0 file against the twin alone: its rounded weights move a few tokens' router choices (as Gemma 4's
# and Maverick's; the twin on the same weights agrees with ossa to its usual tolerance).
ROUNDED_TOL = {"F16": 1e-2, "Q8_0": 1e-1}
HF_EXEMPT = (("minimax-m2", "Q8_0"),)


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("minimax"), CASES, seed=800, n_tokens=N_TOKENS)


@pytest.mark.parametrize("fmt", FORMATS)
def test_logits_match_hf_and_twin(hf_models: dict[str, Any], fmt: str, tmp_path_factory: Any) -> None:
    model = check_case(hf_models, "minimax-m2", fmt, tmp_path_factory, ROUNDED_TOL, HF_EXEMPT)
    c = model.config
    assert c["arch"] == "minimax-m2" and c["qk_norm"] and c["rope_dim"] == 6 and c["rope_style"] == "neox"
    moe = c["moe"]
    assert moe["deepseek"] and moe["sigmoid_gating"] and moe["selection_bias"] and moe["norm_topk_prob"]
    assert moe["layers"] == [0, 1, 2] and moe["n_expert"] == 6 and moe["n_ff_expert"] == 24


def test_chunked_prefill_greedy_and_batch_invariance(
    hf_models: dict[str, Any], tmp_path_factory: Any
) -> None:
    path, hf_logits, ids = hf_models["minimax-m2"]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)
    q8 = case_file(hf_models, "minimax-m2", "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(q8), CASES["minimax-m2"]["vocab_size"], seed=53)
    text = models.format_inspect(models.inspect(path))
    assert "architecture  minimax-m2" in text and "rotated=6/12" in text, text
