"""Helium (Kyutai's Helium-1) from its folders (HeliumForCausalLM) against Hugging Face transformers (torch
CPU, float32) and the NumPy twin, on tiny random models built by transformers: the Llama forward pass with
RoPE on interleaved pairs of dimensions (Helium's rotate_half pairs 2i and 2i + 1), read as Llama with that
RoPE style (docs/models.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from tiny_models import N_TOKENS, build_hf_cases, check_chunked_prefill, check_golden, greedy, hf_greedy

from ossa._native import core

CASES: dict[str, dict[str, Any]] = {
    # Helium-1's layout in small: GQA, untied; and MHA, tied, odd sizes.
    "helium": dict(arch="helium", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
                   intermediate_size=96, vocab_size=150, rope_theta=20000.0),
    "helium-tied": dict(arch="helium", hidden_size=48, num_layers=2, num_heads=3, num_kv_heads=3, head_dim=16,
                        intermediate_size=80, vocab_size=130, tie=True),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("helium"), CASES, seed=510, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name", list(CASES))
def test_logits_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Logits against transformers and the twin, chunked prefill bitwise, 20 greedy tokens equal to
    transformers' generate, batch invariance."""
    path, hf_logits, ids = hf_models[name]
    model = check_golden(path, ids, hf_logits, "safetensors")
    assert model.config["arch"] == "llama" and model.config["rope_style"] == "interleaved"
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 20, block=4) == hf_greedy(path, ids[:10], 20)
    check_invariance(model, CASES[name]["vocab_size"], seed=5)
