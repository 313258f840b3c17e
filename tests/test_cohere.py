"""Cohere (``command-r`` / ``cohere2`` GGUF files; CohereForCausalLM / Cohere2ForCausalLM folders: Command R,
R+, Aya 23 / Expanse, Command R7B, Command A) against Hugging Face transformers and the NumPy twin, on tiny
random models built by transformers, from safetensors and from GGUF files laid out as llama.cpp's converter
writes them.

What Cohere adds to Llama, each on in at least one case: LayerNorm without a bias (mean removed) wherever
Llama RMS-normalises, attention and MLP in parallel from one norm (x + attn + mlp), RoPE on interleaved
pairs (the folder's rows as they are), the logits times logit_scale, tied embeddings; Command R+'s q / k
LayerNorms with a weight row per head (use_qk_norm); cohere2's window over 3 of every 4 layers, which alone
rotate (the full layers attend without RoPE). Prompts run 5x the window. The tiny GGUF files load in
llama.cpp (llama-cpp-python 0.3.36), whose logits are within 4.3e-7 / 4.7e-7 of transformers' (command-r,
cohere2), as ossa's; llama.cpp takes q / k norms only at 64 layers (Command R+), so the per-head norms'
file has no llama.cpp reading here (ossa takes them where the file has them).
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
    check_case,
    check_chunked_prefill,
    check_config_refusals,
    greedy,
    hf_greedy,
)

from ossa import models
from ossa._native import core

CASES: dict[str, dict[str, Any]] = {
    # Command R / Aya Expanse's layout, odd sizes, logit scale 0.125.
    "cohere": dict(
        arch="cohere", hidden_size=40, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=56,
        vocab_size=110, tie=True, logit_scale=0.125, rope_theta=8e6,
    ),
    # Command R+'s: q / k LayerNorms per head.
    "cohere-qk": dict(
        arch="cohere", hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=48,
        vocab_size=100, tie=True, use_qk_norm=True, logit_scale=0.25,
    ),
    # Command R7B's: a window of 8 over 3 of every 4 layers (RoPE there alone).
    "cohere2": dict(
        arch="cohere2", hidden_size=48, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=64,
        vocab_size=120, tie=True, sliding_window=8, logit_scale=0.25, rope_theta=5e4,
    ),
}  # fmt: skip
FORMATS = ["safetensors", "F32", "F16", "Q8_0"]
ROUNDED_TOL = {"F16": 1e-2, "Q8_0": 1e-1}


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("cohere"), CASES, seed=700, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in FORMATS])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model = check_case(hf_models, name, fmt, tmp_path_factory, ROUNDED_TOL)
    c = model.config
    assert c["layer_norm"] and c["parallel_block"] and c["rope_style"] == "interleaved"
    assert c["logit_scale"] == 1 / CASES[name]["logit_scale"]
    assert c["qk_norm"] == c["qk_norm_heads"] == (name == "cohere-qk")
    if name == "cohere2":
        assert c["sliding_window"] == 8 and c["layer_sliding"] == [True, True, True, False]
        assert c["layer_nope"] == [False, False, False, True]
    else:
        assert c["sliding_window"] == 0 and c["layer_nope"] == []


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


@pytest.mark.parametrize("name, kv", [("cohere2", "float32"), ("cohere-qk", "float16")])
def test_batch_invariant(
    hf_models: dict[str, Any], name: str, kv: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(path), CASES[name]["vocab_size"], seed=47, kv=kv)


def test_inspect_and_refusals(hf_models: dict[str, Any], tmp_path: Any) -> None:
    text = models.format_inspect(models.inspect(hf_models["cohere2"][0]))
    assert "architecture  cohere2" in text and "in parallel with the MLP" in text, text
    assert "sliding window of 8 tokens in 3 of 4 layers" in text, text
    check_config_refusals(
        hf_models["cohere"][0],
        tmp_path,
        (({"logit_scale": -1.0}, "logit_scale"), ({"attention_bias": True}, "attention_bias")),
    )
