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
