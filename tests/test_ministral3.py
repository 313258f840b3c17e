"""Ministral 3 (``mistral3`` GGUF files, Ministral3ForCausalLM folders: Ministral-3 3B / 8B / 14B, the
language model of Devstral Small 2) against Hugging Face transformers (torch CPU, float32) and the
NumPy twin, on tiny random models built by transformers, from safetensors folders and from GGUF files
laid out as llama.cpp's converter writes them (q / k rows permuted for its RoPE on pairs).

Ministral 3 is Mistral with YaRN (mscale = mscale_all_dim: no cos/sin factor; llama.cpp's mistral3
graph divides YaRN's factor out) and Llama 4's attention temperature: each query, after RoPE, times
1 + beta * ln(1 + floor(position / original_max_position_embeddings)) (``llama_4_scaling_beta``;
GGUF ``attention.temperature_scale`` / ``temperature_length``). The tiny models' original context is
8 positions, so the 40-token prompts cross several temperature steps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from test_more_archs import both_refuse, copy_with, moved_as_twin_predicts
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

ALL = ["safetensors", "F32", "F16", "Q8_0"]
# Ministral 3's rope_parameters, scaled down: YaRN factor 4 over 8 positions, beta 0.1.
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8, "beta_fast": 32.0,
        "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1}  # fmt: skip
CASES: dict[str, dict[str, Any]] = {
    # Ministral-3's layout: GQA, head_dim set (24, not hidden / heads), untied, YaRN and the temperature.
    "ministral3": dict(
        arch="ministral3", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=24,
        intermediate_size=96, vocab_size=150, rope_scaling=YARN, max_position_embeddings=32,
    ),
    # A steeper temperature (beta 0.5 over 6 positions) without YaRN, MHA, tied.
    "ministral3-steep": dict(
        arch="ministral3", hidden_size=48, num_layers=2, num_heads=3, num_kv_heads=3, intermediate_size=80,
        vocab_size=130, tie=True, max_position_embeddings=64,
        rope_scaling={"rope_type": "default", "llama_4_scaling_beta": 0.5,
                      "original_max_position_embeddings": 6},
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("ministral3"), CASES, seed=250, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf, ids = hf_models[name]
    c = check_golden(path, ids, hf, fmt).config
    rope = CASES[name]["rope_scaling"]
    assert c["arch"] == "mistral3"
    assert (c["attn_temp_scale"], c["attn_temp_length"]) == pytest.approx(
        (rope["llama_4_scaling_beta"], rope["original_max_position_embeddings"])
    )
    if rope["rope_type"] == "yarn":  # (no cos/sin factor, from either source)
        assert c["rope_scaling"]["type"] == "yarn" and c["rope_scaling"]["attn_factor"] == 1.0


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner (the temperature by each token's own
    position): bitwise equal, equal to HF and to the twin's runner; 30 greedy tokens equal to
    transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_batch_invariant_temperature_matters_and_bad_configs(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Batch invariance on a Q8_0 file; inspect shows the temperature; the temperature is applied
    (another beta moves the logits as the twin predicts, positions below the length untouched); a beta
    without its length is refused by name."""
    path = case_file(hf_models, "ministral3", "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(path), CASES["ministral3"]["vocab_size"], seed=3)
    text = models.format_inspect(models.inspect(path))
    assert (
        "architecture  mistral3" in text and "queries scaled by 1 + 0.1 ln(1 + floor(position / 8))" in text
    )
    src, _, ids = hf_models["ministral3"]
    want = core.model_logits(core.load_model(src), ids)
    rope = json.loads((Path(src) / "config.json").read_text())["rope_parameters"]
    hotter = copy_with(src, tmp_path / "hotter", rope_parameters=dict(rope, llama_4_scaling_beta=0.4))
    moved_as_twin_predicts(hotter, ids, want)
    np.testing.assert_array_equal(core.model_logits(core.load_model(hotter), ids)[:8], want[:8])
    no_length = {k: v for k, v in rope.items() if k != "original_max_position_embeddings"}
    no_length.update(rope_type="default", factor=None)
    both_refuse(
        copy_with(src, tmp_path / "nolength", rope_parameters=no_length), "original_max", "original_max"
    )


@pytest.mark.parametrize("style", ["transformers-5", "transformers-4"])
def test_vision_language_folder(hf_models: dict[str, Any], style: str, tmp_path: Path) -> None:
    """The Hub's Ministral 3 folders are Mistral3ForConditionalGeneration (a vision tower beside the
    language model): ossa runs the language model alone from its text_config, its tensors under
    model.language_model. (transformers 4.52 on; lm_head at the top) or language_model.model. (before;
    language_model.lm_head), the vision tensors never read: the logits are the text model's (what
    transformers computes for a prompt without images), bitwise, and the twin reads it alike."""
    from safetensors.numpy import load_file, save_file

    from ossa.reference import loader as ref_loader

    src, hf, ids = hf_models["ministral3"]
    want = core.model_logits(core.load_model(src), ids)
    text = json.loads((Path(src) / "config.json").read_text())
    dst = tmp_path / style
    dst.mkdir()
    new = style == "transformers-5"
    stored = load_file(str(Path(src) / "model.safetensors"))
    out = {}
    for name, w in stored.items():
        if name == "lm_head.weight":
            out["lm_head.weight" if new else "language_model.lm_head.weight"] = w
        else:
            out[("model.language_model." if new else "language_model.model.") + name[len("model.") :]] = w
    out["model.vision_tower.patch_conv.weight" if new else "vision_tower.patch_conv.weight"] = np.ones(
        (8, 3, 2, 2), np.float32
    )
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})
    wrapper = {"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
               "text_config": text, "vision_config": {"model_type": "pixtral", "hidden_size": 8}}  # fmt: skip
    (dst / "config.json").write_text(json.dumps(wrapper))
    m = core.load_model(str(dst))
    np.testing.assert_array_equal(core.model_logits(m, ids), want)
    config, _ = ref_loader.load_weights(str(dst))
    assert config == m.config and config["arch"] == "mistral3"
    (dst / "config.json").write_text(json.dumps({k: v for k, v in wrapper.items() if k != "text_config"}))
    both_refuse(str(dst), "text_config", "text_config")
