"""ERNIE 4.5 dense (Baidu's ERNIE-4.5-0.3B) against Hugging Face transformers (torch CPU, float32) and the
NumPy twin, on tiny random models built by transformers: from safetensors folders (Ernie4_5ForCausalLM)
and from GGUF files laid out as llama.cpp's converter writes them (ernie4_5: q/k rows as they are).

ERNIE 4.5 is the Llama layout with RoPE on interleaved pairs of dimensions (0 and 1, 2 and 3, ...:
transformers' Ernie4_5 rotate_half), which ossa's interleaved RoPE computes on the rows as stored, and a
head_dim of 128 unless the config sets another. Biased projections (use_bias) are refused by name.

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
    # ERNIE-4.5-0.3B's layout: tied output, GQA 2, a large RoPE base; head_dim 16 set in the config.
    "ernie4_5": dict(
        arch="ernie4_5", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96, vocab_size=150, tie=True, rope_theta=500000.0,
    ),
    # Untied, MHA, and head_dim left to Ernie4_5Config's default (128, not hidden / heads = 12).
    "ernie4_5-wide-heads": dict(
        arch="ernie4_5", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4,
        intermediate_size=80, vocab_size=130, tie=False,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    out = build_hf_cases(tmp_path_factory.mktemp("ernie4_5"), CASES, seed=170, n_tokens=N_TOKENS)
    cfg = Path(out["ernie4_5-wide-heads"][0]) / "config.json"  # the file as a release leaves it
    c = json.loads(cfg.read_text())
    assert c.pop("head_dim") == 128
    cfg.write_text(json.dumps(c))
    return out


@pytest.mark.parametrize("fmt", ["safetensors", "F32", "F16", "Q8_0"])
@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    model = check_golden(path, ids, hf_logits, fmt)
    c = model.config
    assert c["arch"] == "ernie4_5" and c["rope_style"] == "interleaved"
    assert c["head_dim"] == (16 if name == "ernie4_5" else 128)


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal, equal to HF and to the
    twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_batch_invariant_and_biases_refused(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, "ernie4_5", "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(path), CASES["ernie4_5"]["vocab_size"], seed=17)
    assert "architecture  ernie4_5" in models.format_inspect(models.inspect(path))
    dst = tmp_path / "biased"
    shutil.copytree(hf_models["ernie4_5"][0], dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["use_bias"] = True
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(core.ModelError, match="use_bias"):
        core.load_model(str(dst))
    with pytest.raises(ValueError, match="use_bias"):
        ref_loader.load_weights(str(dst))
