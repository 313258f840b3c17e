"""Granite (IBM Granite 3.x dense) against Hugging Face transformers (torch CPU, float32) and the
NumPy twin, on tiny random models built by transformers: from safetensors folders
(GraniteForCausalLM) and from GGUF files laid out as llama.cpp's converter writes them (Llama's
tensors with q/k rows permuted; granite.embedding_scale, residual_scale, attention.scale and
logit_scale keys).

Granite is the Llama layout with four multipliers: embeddings times ``embedding_multiplier``, each
sublayer's output times ``residual_multiplier`` before the residual add, attention scores times
``attention_multiplier`` (instead of head_dim^-1/2), logits divided by ``logits_scaling``. The cases
use values like the released models' (Granite 3.3 2B: 12, 0.22, 1/64, 8) and odd ones.

Tolerances as in test_forward_hf.py (max |error| / max |HF logit|).
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
from ossa.reference import loader as ref_loader

CASES: dict[str, dict[str, Any]] = {
    # Granite 3-like multipliers, GQA 2, tied output.
    "granite": dict(
        arch="granite", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
        intermediate_size=96, vocab_size=150, tie=True, rope_theta=1000.0,
        embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=1 / 16,
        logits_scaling=8.0,
    ),
    # Other values, MHA, untied output, head_dim 24 != 48/4.
    "granite-untied": dict(
        arch="granite", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, head_dim=24,
        intermediate_size=80, vocab_size=130, tie=False, embedding_multiplier=3.0,
        residual_multiplier=0.5, attention_multiplier=0.3, logits_scaling=2.5,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("granite"), CASES, seed=70, n_tokens=N_TOKENS)


@pytest.mark.parametrize("fmt", ["safetensors", "F32", "F16", "Q8_0"])
@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    model = check_golden(path, ids, hf_logits, fmt)
    case = CASES[name]
    assert model.config["arch"] == "granite"
    assert model.config["embd_scale"] == pytest.approx(case["embedding_multiplier"])
    assert model.config["residual_scale"] == pytest.approx(case["residual_multiplier"])
    assert model.config["attn_scale"] == pytest.approx(case["attention_multiplier"])
    assert model.config["logit_scale"] == pytest.approx(case["logits_scaling"])


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
    path = case_file(hf_models, "granite", fmt, tmp_path_factory)
    check_invariance(core.load_model(path), CASES["granite"]["vocab_size"], seed=11, kv="float16")


def test_multipliers_matter_and_bad_values_fail(hf_models: dict[str, Any], tmp_path: Path) -> None:
    src = Path(hf_models["granite"][0])
    ids = hf_models["granite"][2]
    want = core.model_logits(core.load_model(str(src)), ids)
    for key, value in [("residual_multiplier", 1.0), ("logits_scaling", 1.0), ("embedding_multiplier", 1.0),
                       ("attention_multiplier", 1.0)]:  # fmt: skip
        dst = tmp_path / key
        shutil.copytree(src, dst)
        cfg = json.loads((dst / "config.json").read_text())
        cfg[key] = value
        (dst / "config.json").write_text(json.dumps(cfg))
        got = core.model_logits(core.load_model(str(dst)), ids)
        assert float(np.max(np.abs(got - want))) > 1e-2 * float(np.max(np.abs(want))), key
        cfg[key] = -1.0 if key != "logits_scaling" else 0.0
        (dst / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(core.ModelError, match=key):
            core.load_model(str(dst))
        with pytest.raises(ValueError, match=key):
            ref_loader.load_weights(str(dst))
    text = models.format_inspect(models.inspect(str(src)))
    assert "architecture  granite" in text
    assert "multipliers   embeddings 12, residuals 0.22, scores 0.0625, logits / 8" in text


# GraniteSWA / GraniteMoeSWA (transformers' granite_swa / granitemoe_swa): Granite's multipliers with a
# window on the layers layer_types marks, a learnable sink per head (an extra logit in each softmax),
# and a RoPE base per layer (layer_rope_theta; 0: no RoPE). Windows of 6-7 over 40 tokens, sinks and
# bases of every kind: one base for the full layers and another for the sliding ones, NoPE layers of
# both types, the defaults (every 4th layer from 0 full, window 128 over the prompt).
SWA_CASES: dict[str, dict[str, Any]] = {
    "granite-swa": dict(
        arch="granite_swa", hidden_size=64, num_layers=4, num_heads=4, num_kv_heads=2,
        intermediate_size=96, vocab_size=150, tie=True, rope_theta=1000.0, embedding_multiplier=6.0,
        residual_multiplier=0.3, attention_multiplier=1 / 16, logits_scaling=4.0, sliding_window=6,
        layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
        layer_rope_theta=[5000.0, 300.0, 0, 0],
    ),
    "granite-swa-defaults": dict(
        arch="granite_swa", hidden_size=48, num_layers=5, num_heads=4, num_kv_heads=4,
        intermediate_size=64, vocab_size=130, tie=False, embedding_multiplier=3.0,
        residual_multiplier=0.5, attention_multiplier=0.2, logits_scaling=2.0,
    ),
    "granitemoe-swa": dict(
        arch="granitemoe_swa", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
        intermediate_size=48, vocab_size=140, tie=True, embedding_multiplier=8.0,
        residual_multiplier=0.25, attention_multiplier=1 / 12, logits_scaling=3.0, sliding_window=7,
        num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=40,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        layer_rope_theta=[0, 2000.0, 0],
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def swa_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("granite-swa"), SWA_CASES, seed=90, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name", list(SWA_CASES))
def test_swa_logits_chunks_greedy(swa_models: dict[str, Any], name: str) -> None:
    """Logits against transformers and the twin, chunked prefill bitwise, greedy = generate, and the
    config as read (window, sinks, NoPE layers, the sliding layers' own base)."""
    path, hf_logits, ids = swa_models[name]
    model = check_golden(path, ids, hf_logits, "safetensors")
    case = SWA_CASES[name]
    cfg = model.config
    assert cfg["arch"] == ("granitemoe" if case["arch"] == "granitemoe_swa" else "granite")
    assert cfg["attn_sinks"] and cfg["attn_scale"] == pytest.approx(case["attention_multiplier"])
    types = case.get("layer_types") or ["full_attention" if i % 4 == 0 else "sliding_attention"
                                        for i in range(case["num_layers"])]  # fmt: skip
    assert cfg["sliding_window"] == case.get("sliding_window", 128)
    assert list(cfg["layer_sliding"]) == [t == "sliding_attention" for t in types]
    thetas = case.get("layer_rope_theta")
    assert list(cfg["layer_nope"]) == ([t == 0 for t in thetas] if thetas and 0 in thetas else [])
    if name == "granite-swa":
        assert cfg["rope_theta"] == 5000.0 and cfg["rope_theta_swa"] == 300.0
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_swa_batch_invariant_and_refusals(swa_models: dict[str, Any], tmp_path: Path) -> None:
    path = swa_models["granite-swa"][0]
    check_invariance(core.load_model(path), SWA_CASES["granite-swa"]["vocab_size"], seed=12, kv="float16")
    cfg = json.loads((Path(path) / "config.json").read_text())
    bad_cases = {
        "two bases for the sliding layers": {"layer_rope_theta": [5000.0, 300.0, 400.0, 0]},
        "a base list of the wrong length": {"layer_rope_theta": [5000.0, 300.0]},
        "a negative base": {"layer_rope_theta": [5000.0, -1.0, 0, 0]},
        "the sliding layers' own base under rope scaling": {
            "rope_parameters": {**cfg["rope_parameters"], "rope_type": "linear", "factor": 2.0}
        },
    }
    for what, change in bad_cases.items():
        bad = tmp_path / what.replace(" ", "-").replace("'", "")
        shutil.copytree(path, bad)
        (bad / "config.json").write_text(json.dumps({**cfg, **change}))
        with pytest.raises(core.ModelError, match="layer_rope_theta"):
            core.load_model(str(bad))
        with pytest.raises(ValueError, match="layer_rope_theta"):
            ref_loader.load_weights(str(bad))
