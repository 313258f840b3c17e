"""Falcon-H1 (``falcon-h1`` GGUF files, FalconH1ForCausalLM folders: TII's Falcon-H1 0.5B ... 34B,
Falcon-H1R) against Hugging Face transformers and the NumPy twin, on tiny random models built by
transformers, from safetensors folders and from GGUF files laid out as llama.cpp's converter writes them.

Every layer runs attention (GQA, NeoX RoPE) and a Mamba-2 mixer side by side on the same normalised
input, their outputs summed into the residual (the layer keeps K/V and a recurrent state), then a SwiGLU
MLP. A folder carries mu-P multipliers (embeddings, the attention's input and keys, its output, the
mixer's input and its projection's five segments, its output, the MLP's gate and output, lm_head) that
ossa applies at run time; llama.cpp's converter folds them into a GGUF file's weights (and names the MLP's
norm ``blk.{i}.ffn_norm`` without ``.weight``), so a file needs none. The mixer's gated norm is optional
(``mamba_rms_norm``; after the gate).
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
)

from ossa import models
from ossa._native import core

ALL = ["safetensors", "F32", "F16", "Q8_0"]
_MUP = dict(embedding_multiplier=1.7, lm_head_multiplier=0.6, attention_in_multiplier=0.8,
            attention_out_multiplier=1.3, key_multiplier=0.7, ssm_in_multiplier=1.2, ssm_out_multiplier=0.9,
            ssm_multipliers=[1.1, 0.9, 1.2, 0.8, 1.05], mlp_multipliers=[1.3, 0.75])  # fmt: skip
CASES: dict[str, dict[str, Any]] = {
    # Falcon-H1's layout, small: a mixer of d_ssm 64 (not expand x hidden) in 2 groups with an odd state
    # size, no mixer norm (the released models'), every multiplier away from 1, untied.
    "falcon-h1": dict(
        arch="falcon_h1", hidden_size=48, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=40, vocab_size=150, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16,
        mamba_n_groups=2, mamba_d_state=12, mamba_d_conv=4, mamba_rms_norm=False, **_MUP,
    ),
    # The mixer's gated norm (after the gate), one group, 3 taps without the convolution's bias, MHA,
    # tied, the multipliers at 1.
    "falcon-h1-norm": dict(
        arch="falcon_h1", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, head_dim=16,
        intermediate_size=48, vocab_size=130, mamba_d_ssm=32, mamba_n_heads=2, mamba_d_head=16,
        mamba_n_groups=1, mamba_d_state=16, mamba_d_conv=3, mamba_conv_bias=False, mamba_rms_norm=True,
        mamba_norm_before_gate=False, tie=True,
    ),
}  # fmt: skip
# F16 / Q8_0 files against transformers: the random models amplify their weights' rounding through the
# scan (measured max F16 1.3e-3 / 8.5e-3, Q8_0 1.0e-2 / 0.10 for the two cases); the twin on the same
# rounded weights agrees with ossa to its usual tolerance (measured up to 2.6e-5 with AMX).
ROUNDED_TOL = {"F16": 2e-2, "Q8_0": 0.2}


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("falcon-h1"), CASES, seed=550, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model = check_case(hf_models, name, fmt, tmp_path_factory, ROUNDED_TOL)
    kw, c = CASES[name], model.config
    n = kw["num_layers"]
    assert c["arch"] == "falcon-h1" and c["parallel_ssm"] and c["ssm"]["layers"] == list(range(n))
    assert c["n_kv_layers"] == n  # (every layer keeps K/V beside its state)
    assert c["ssm"]["d_inner"] == kw["mamba_d_ssm"] and c["ssm"]["gated_norm"] == kw["mamba_rms_norm"]
    mup = c["mup"]
    if fmt == "safetensors":  # (a GGUF file's weights carry the multipliers: none at run time)
        assert mup["active"] and mup["zxbcdt"] == pytest.approx(kw.get("ssm_multipliers", [1.0] * 5))
        assert mup["key"] == pytest.approx(kw.get("key_multiplier", 1.0))
    else:
        assert not mup["active"] and c["embd_scale"] == 0 and c["logit_scale"] == 0


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal (K/V and the state carried
    across chunks), equal to HF and to the twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_batch_invariance_inspect_and_errors(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Batch invariance (alone, among 7 others, chunked, 1 and 2 threads); state slots and fork copies
    (a layer's K/V block and its state both); inspect; unsupported options refused by both loaders."""
    path = case_file(hf_models, "falcon-h1", "Q8_0", tmp_path_factory)
    model = core.load_model(path)
    check_invariance(model, CASES["falcon-h1"]["vocab_size"], seed=31)
    check_state_slots(model, CASES["falcon-h1"]["vocab_size"])
    text = models.format_inspect(models.inspect(path))
    assert "mamba-2       3 of 3 layers (beside attention in each)" in text, text
    assert "architecture  falcon-h1" in text, text
    check_config_refusals(
        hf_models["falcon-h1"][0],
        tmp_path,
        (
            ({"mamba_proj_bias": True}, "mamba_proj_bias"),
            ({"projectors_bias": True}, "projectors_bias"),
            ({"mamba_rms_norm": True, "mamba_norm_before_gate": True}, "mamba_norm_before_gate"),
            ({"mamba_d_head": 5}, "mamba_d_head"),
            ({"ssm_multipliers": [1.0, 2.0]}, "ssm_multipliers"),
            ({"hidden_act": "gelu"}, "hidden_act"),
        ),
    )


def test_engine(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Through LLM (the default model's vocabulary and tokenizer): the recurrent engine's checks of
    test_qwen35 on a model whose every layer has K/V and a state (batched = alone, slots taking turns,
    preemption, forks = the twin engine, refusals)."""
    root = tmp_path_factory.mktemp("falcon-h1-engine")
    small = dict(vocab_size=49152, mamba_d_state=8, mamba_n_heads=2, mamba_d_ssm=32)
    folder = make_hf_model(root / "hf", seed=5, **dict(CASES["falcon-h1"], **small))
    path = hf_to_gguf(folder, root / "tiny-falcon-h1.gguf", "F32", tokenizer_gguf=default_model_path)
    check_recurrent_engine(path)
