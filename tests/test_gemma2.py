"""Gemma 2 against Hugging Face transformers (torch CPU, float32, eager attention: the one with
soft-capped scores) and the NumPy twin, on tiny random models built by transformers: from
safetensors folders (Gemma2ForCausalLM) and from GGUF files laid out as llama.cpp's converter writes
them (norms stored as 1 + w, both soft-caps as keys, every other layer sliding unless the file says
otherwise).

Gemma 2 is Gemma 3's layout without the q/k norms, with one RoPE base for every layer and attention
scores soft-capped (cap * tanh(scores / cap)) before the softmax. Every optional feature is on in at
least one case: attention and final soft-caps small enough to change the result, a null final cap,
layer_types that are not the default pattern, GQA, query_pre_attn_scalar != head_dim, untied output.
Prompts run 5x the window, also prefilled in chunks, and greedy decoding runs past it.

Tolerances as in test_gemma3.py (max |error| / max |HF logit|).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
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

CASES: dict[str, dict[str, Any]] = {
    # 4 layers in the default pattern (sliding, global, sliding, global), window 8, GQA 2, head_dim
    # 16 != 48/4, scores capped at 2 and logits at 10 (the 50 / 30 of the real models barely bite on
    # a tiny random model), tied output.
    "gemma2": dict(
        arch="gemma2", hidden_size=48, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=80, vocab_size=150, tie=True, rope_theta=10000.0, sliding_window=8,
        query_pre_attn_scalar=16, attn_logit_softcapping=2.0, final_logit_softcapping=10.0,
    ),
    # Explicit layer types (global first), window 6, RoPE base 500, scores scaled by 20^-1/2 and
    # capped at 1.5, no final cap (null), untied output, MHA.
    "gemma2-nocap": dict(
        arch="gemma2", hidden_size=40, num_layers=3, num_heads=2, num_kv_heads=2, head_dim=24,
        intermediate_size=72, vocab_size=130, tie=False, rope_theta=500.0, sliding_window=6,
        layer_types=["full_attention", "sliding_attention", "full_attention"],
        query_pre_attn_scalar=20, attn_logit_softcapping=1.5, final_logit_softcapping=None,
    ),
    # head_dim 136: the attention kernel's generic path (std::tanh on each score) even where the
    # AVX-512 kernels take the other cases (their soft-cap is vectorised: vec_math.h softcap16).
    "gemma2-generic": dict(
        arch="gemma2", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=136,
        intermediate_size=48, vocab_size=120, tie=True, sliding_window=5, query_pre_attn_scalar=136,
        attn_logit_softcapping=0.75, final_logit_softcapping=30.0,
    ),
}  # fmt: skip
WINDOW = {"gemma2": 8, "gemma2-nocap": 6, "gemma2-generic": 5}


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("gemma2"), CASES, seed=30, n_tokens=N_TOKENS)


@pytest.mark.parametrize("fmt", ["safetensors", "F32", "F16", "Q8_0"])
@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    model = check_golden(path, ids, hf_logits, fmt)
    assert model.config["arch"] == "gemma2"
    assert model.config["sliding_window"] == WINDOW[name]
    assert model.config["attn_softcap"] == CASES[name]["attn_logit_softcapping"]
    assert model.config["final_softcap"] == (CASES[name]["final_logit_softcapping"] or 0.0)
    assert not model.config["qk_norm"] and model.config["rope_theta_swa"] == 0.0


def test_soft_capping_changes_the_scores(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """The same weights without the attention cap give other logits (the cap is applied, and the
    oracle above checks where)."""
    src = Path(hf_models["gemma2"][0])
    dst = tmp_path / "uncapped"
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["attn_logit_softcapping"] = None
    (dst / "config.json").write_text(json.dumps(cfg))
    ids = hf_models["gemma2"][2]
    capped = core.model_logits(core.load_model(str(src)), ids)
    uncapped = core.model_logits(core.load_model(str(dst)), ids)
    assert core.load_model(str(dst)).config["attn_softcap"] == 0.0
    assert float(np.max(np.abs(capped - uncapped))) / float(np.max(np.abs(capped))) > 1e-2


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_past_the_window(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner (blocks of 4): bitwise equal to one
    another, equal to HF, and to the twin's runner."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_matches_transformers(hf_models: dict[str, Any], name: str) -> None:
    """A 10-token prompt and 30 greedy tokens (past 3x the window), one decode step at a time."""
    path, _, ids = hf_models[name]
    prompt, n_new = ids[:10], 30
    assert greedy(core.load_model(path), prompt, n_new, block=4) == hf_greedy(path, prompt, n_new)


@pytest.mark.parametrize("fmt", ["F32", "Q8_0"])
@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_batch_invariant(
    hf_models: dict[str, Any], fmt: str, kv: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits."""
    for name in ("gemma2", "gemma2-generic"):
        path = case_file(hf_models, name, fmt, tmp_path_factory)
        check_invariance(core.load_model(path), CASES[name]["vocab_size"], seed=7, kv=kv)


def test_inspect_describes_capping(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    info = models.inspect(hf_models["gemma2"][0])
    assert info["arch"] == "gemma2" and info["attn_softcap"] == 2.0 and info["n_sliding_layers"] == 2
    text = models.format_inspect(info)
    assert "sliding window of 8 tokens in 2 of 4 layers; scores soft-capped at 2" in text
    assert "logits soft-capped at 10" in text
    gguf = case_file(hf_models, "gemma2-nocap", "F32", tmp_path_factory)
    text = models.format_inspect(models.inspect(gguf))
    assert "in 1 of 3 layers; scores soft-capped at 1.5" in text and "logits soft-capped" not in text


def test_gguf_defaults_are_llama_cpps(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A GGUF file with only the keys llama.cpp's converter writes: every other layer sliding from
    the first (no pattern key), scores scaled by head_dim^-1/2 (no scale key), both caps read."""
    path = case_file(hf_models, "gemma2", "F32", tmp_path_factory)
    md = core.gguf_metadata(path)
    assert "gemma2.attention.sliding_window_pattern" not in md and "gemma2.attention.scale" not in md
    assert md["gemma2.attn_logit_softcapping"] == 2.0
    cfg = core.load_model(path).config
    assert cfg["layer_sliding"] == [True, False, True, False]
    assert cfg["attn_scale"] == pytest.approx(16**-0.5)


def test_bad_gemma2_configs_fail_clearly(hf_models: dict[str, Any], tmp_path: Path) -> None:
    src = Path(hf_models["gemma2-nocap"][0])
    for key, value, match in [
        ("hidden_activation", "relu", "hidden_activation"),
        ("layer_types", ["full_attention"], "layer_types"),
        ("attn_logit_softcapping", -1.0, "soft-capping"),
        ("attn_logit_softcapping", "big", "attn_logit_softcapping"),
    ]:
        dst = tmp_path / f"{key}-{value}"
        shutil.copytree(src, dst)
        cfg = json.loads((dst / "config.json").read_text())
        cfg[key] = value
        (dst / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(core.ModelError, match=match):
            core.load_model(str(dst))
