"""OLMo 2 and 3 (AllenAI's OLMo-2 1B / 7B / 13B / 32B, Olmo-3 7B / 32B) against Hugging Face
transformers (torch CPU, float32) and the NumPy twin, on tiny random models built by transformers:
from safetensors folders (Olmo2ForCausalLM, Olmo3ForCausalLM) and from GGUF files laid out as
llama.cpp's converter writes them (olmo2: q/k rows as they are, NeoX RoPE; post_attention_norm /
post_ffw_norm; attn_q_norm / attn_k_norm of the whole projections' width).

What OLMo 2 changes in the Llama layout: no norm before the sublayers, an RMSNorm on each sublayer's
output before the residual add (x + norm(attn(x)), x + norm(mlp(x))), and q / k RMS-normalised over
all heads at once (weights of n_head x head_dim and n_kv_head x head_dim values), before RoPE.
OLMo 3 adds a sliding window on all but every 4th layer (layer_types) and RoPE per layer type: the
full layers' parameters (YaRN in the long-context releases) and the sliding layers' own unscaled
table; llama.cpp writes it as olmo2 with attention.sliding_window (one RoPE table).

Tolerances as in test_forward_hf.py (max |error| / max |HF logit|).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from tiny_models import (
    N_TOKENS,
    TWIN_TOL,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    check_golden,
    greedy,
    hf_greedy,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

CASES: dict[str, dict[str, Any]] = {
    # OLMo-2-1B-like: GQA 2, untied output, a large RoPE base.
    "olmo2": dict(
        arch="olmo2", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
        intermediate_size=96, vocab_size=150, rope_theta=500000.0,
    ),
    # MHA, head_dim 24 (!= 48 / 4: the norms' widths are heads x head_dim, not hidden), tied output.
    "olmo2-mha": dict(
        arch="olmo2", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, head_dim=24,
        intermediate_size=80, vocab_size=130, tie=True,
    ),
    # OLMo 3: window 6 on layers 0-2 and 4 (layer 3 full), YaRN on the full layer only (its own
    # attention factor), the sliding layers at another base: from its folder only (a GGUF file has
    # one RoPE table).
    "olmo3": dict(
        arch="olmo3", hidden_size=64, num_layers=5, num_heads=4, num_kv_heads=2, intermediate_size=96,
        vocab_size=150, sliding_window=6, rope_theta=500000.0, rope_local_base_freq=20000.0,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                      "attention_factor": 1.2},
        max_position_embeddings=128,
    ),
    # One RoPE table, a window on layers 0 and 2 only (layer_types): GGUF too.
    "olmo3-plain": dict(
        arch="olmo3", hidden_size=48, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=80,
        vocab_size=130, sliding_window=5, tie=True,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    ),
}  # fmt: skip
FORMATS = {"olmo2": ["safetensors", "F32", "F16", "Q8_0"], "olmo2-mha": ["safetensors", "F32", "F16", "Q8_0"],
           "olmo3": ["safetensors"], "olmo3-plain": ["safetensors", "F32", "Q8_0"]}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("olmo2"), CASES, seed=130, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in FORMATS[n]])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    model = check_golden(path, ids, hf_logits, fmt)
    c, case = model.config, CASES[name]
    assert c["arch"] == (case["arch"] if fmt == "safetensors" else "olmo2")
    assert c["qk_norm"] and c["rope_style"] == "neox"
    assert c["tied_embeddings"] == case.get("tie", False)
    if case["arch"] == "olmo3":  # a window (40 tokens: over 6x it), on the layers layer_types marks
        assert c["sliding_window"] == case["sliding_window"]
        n = case["num_layers"]
        want = case.get("layer_types") or [
            "full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(n)
        ]
        assert c["layer_sliding"] == [t == "sliding_attention" for t in want]
        assert c["rope_theta_swa"] == (20000.0 if name == "olmo3" else 0.0)


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal, equal to HF and to the
    twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


@pytest.mark.parametrize("fmt", ["F32", "Q8_0"])
def test_batch_invariant(
    hf_models: dict[str, Any], fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits."""
    path = case_file(hf_models, "olmo2", fmt, tmp_path_factory)
    check_invariance(core.load_model(path), CASES["olmo2"]["vocab_size"], seed=15)


def test_olmo3_gguf_with_unscaled_full_layers_only() -> None:
    """A GGUF file holds one RoPE table: an OLMo 3 whose sliding layers would differ is not written."""
    from ossa.reference import arch_config

    cfg = {"num_hidden_layers": 4, "sliding_window": 8, "rope_parameters": {
        "full_attention": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}  # fmt: skip
    out, full = arch_config.olmo3_hf(cfg, 4)
    assert out == {"sliding_window": 8, "layer_sliding": [True, True, True, False], "rope_theta_swa": 1e4}
    assert full == cfg["rope_parameters"]["full_attention"]  # type: ignore[index]


def test_norms_matter_and_bad_shapes_fail(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """Each of the four norms is read and applied (setting one to ones moves the logits as the twin
    predicts); a per-head q norm (Qwen3's width) in an OLMo 2 folder is refused by name; bfloat16
    runs; inspect names the architecture."""
    from safetensors.numpy import load_file, save_file

    src, hf_logits, ids = hf_models["olmo2"]
    want = core.model_logits(core.load_model(src), ids)
    scale = float(np.max(np.abs(want)))
    for stem in ("q_norm", "k_norm", "post_attention_layernorm", "post_feedforward_layernorm"):
        dst = tmp_path / stem
        shutil.copytree(src, dst)
        tensors = load_file(str(dst / "model.safetensors"))
        name = f"model.layers.1.{'self_attn.' if stem in ('q_norm', 'k_norm') else ''}{stem}.weight"
        tensors[name] = np.ones_like(tensors[name]) * 1.7
        save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
        got = core.model_logits(core.load_model(str(dst)), ids)
        assert float(np.max(np.abs(got - want))) > 1e-3 * scale, stem
        config, weights = ref_loader.load_weights(str(dst))
        assert float(np.max(np.abs(got - ref_model.forward(config, weights, ids)))) < TWIN_TOL * scale, stem
        if stem == "q_norm":  # a per-head width instead
            tensors[name] = np.ones(16, np.float32)
            save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
            with pytest.raises(core.ModelError, match=name):
                core.load_model(str(dst))
            with pytest.raises(ValueError, match="shape mismatch"):
                ref_loader.load_weights(str(dst))
    bf16 = core.model_logits(core.load_model(src, dtype="bfloat16"), ids)
    assert float(np.max(np.abs(bf16 - hf_logits))) < 0.05 * scale
    assert "architecture  olmo2" in models.format_inspect(models.inspect(src))
