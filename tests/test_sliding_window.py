"""Sliding-window attention of the Llama-family and MoE architectures (Mistral's `sliding_window`, the
Qwen families' `use_sliding_window` / `max_window_layers` / `layer_types`) against Hugging Face
transformers (torch CPU, float32) and the NumPy twin, on tiny random models built by transformers,
from safetensors folders and from GGUF files carrying `attention.sliding_window` (and a bool per layer
in `attention.sliding_window_pattern` where only some layers are windowed).

Prompts of 40 tokens (5-8x the windows), prefilled in one pass and in chunks, and 30 greedy tokens
after a 10-token prompt (past 3x the window), the same paths the Gemma 3 and Phi-3 windows take.
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
    HF_TOL,
    N_TOKENS,
    TWIN_TOL,
    build_hf_cases,
    case_file,
    golden,
    greedy,
    hf_greedy,
    hf_logits,
    runner_logits,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model
from ossa.reference.runner import ModelRunner as RefRunner

CASES: dict[str, dict[str, Any]] = {
    # Mistral 7B v0.1's shape of window (every layer), GQA 2, untied.
    "mistral": dict(
        arch="mistral", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=96, vocab_size=128, sliding_window=7,
    ),
    # Qwen2 with use_sliding_window: layer 0 full (max_window_layers 1), layers 1 and 2 windowed; qkv bias.
    "qwen2": dict(
        arch="qwen2", hidden_size=96, num_layers=3, num_heads=6, num_kv_heads=2,
        intermediate_size=160, vocab_size=160, use_sliding_window=True, sliding_window=6, max_window_layers=1,
    ),
    # Qwen3 with explicit layer_types (windowed, full, windowed), q/k norm, head_dim 32.
    "qwen3": dict(
        arch="qwen3", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, head_dim=32,
        intermediate_size=128, vocab_size=128, use_sliding_window=True, sliding_window=5,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    ),
    # Mixtral (the MoE forward) with a window on every layer.
    "mixtral": dict(
        arch="mixtral", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=96, vocab_size=150, num_local_experts=4, num_experts_per_tok=2, sliding_window=6,
    ),
}  # fmt: skip
LAYERS = {"mistral": [True, True], "qwen2": [False, True, True], "qwen3": [True, False, True],
          "mixtral": [True, True]}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("swa"), CASES, seed=40, n_tokens=N_TOKENS)


DROP = object()


def edited(src: str, dst: Path, **changes: Any) -> str:
    """A copy of folder `src` whose config.json gets `changes` (None: null; DROP deletes the key)."""
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    for key, value in changes.items():
        if value is DROP:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


@pytest.mark.parametrize("fmt", ["safetensors", "F32", "F16", "Q8_0"])
@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf, ids = hf_models[name]
    model, config, err_hf, err_twin, twin_hf = golden(path, ids, hf)
    assert config == model.config  # the twin reads the same hyper-parameters
    assert model.config["sliding_window"] == CASES[name]["sliding_window"]
    assert [bool(v) for v in model.config["layer_sliding"]] == LAYERS[name]
    assert err_hf < HF_TOL[fmt], f"{name}/{fmt}: max |ossa - HF| / max |HF| = {err_hf}"
    assert err_twin < TWIN_TOL, f"{name}/{fmt}: max |ossa - twin| / max |HF| = {err_twin}"
    if fmt in ("safetensors", "F32"):
        assert twin_hf < HF_TOL[fmt]


@pytest.mark.parametrize("name", list(CASES))
def test_the_window_changes_the_logits(hf_models: dict[str, Any], name: str, tmp_path: Path) -> None:
    """Without its window the same model gives other logits past the window (so the tests above see
    the window), and the same ones within it."""
    src, hf, ids = hf_models[name]
    # JSON null: no window (a missing key is MistralConfig's 4096); the Qwen ones also switch it off.
    off = edited(src, tmp_path / "full", sliding_window=None, use_sliding_window=False, layer_types=DROP)
    full = core.load_model(off)
    assert full.config["sliding_window"] == 0 and not full.config["layer_sliding"]
    logits = core.model_logits(full, ids)
    np.testing.assert_allclose(logits, hf_logits(off, ids), atol=1e-5 * float(np.max(np.abs(hf))))
    window = CASES[name]["sliding_window"]
    np.testing.assert_allclose(logits[:window], hf[:window], atol=1e-5 * float(np.max(np.abs(hf))))
    assert float(np.max(np.abs(logits[window:] - hf[window:]))) > 1e-2 * float(np.max(np.abs(hf)))


@pytest.mark.parametrize("fmt", ["safetensors", "Q8_0"])
@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy_past_the_window(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Chunks of 1 and 5 through the paged runner (blocks of 4: a window spans parts of 2-3 blocks)
    equal one pass bitwise, and the twin's paged runner (MoE: its forward); safetensors: equal to HF,
    and a 10-token prompt then 30 greedy tokens equal to transformers' generate()."""
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    src, hf, ids = hf_models[name]
    model = core.load_model(path)
    n_blocks = N_TOKENS // 4
    whole = runner_logits(core.ModelRunner(model, n_blocks, 4, N_TOKENS), ids, N_TOKENS)
    for chunk in (1, 5):
        got = runner_logits(core.ModelRunner(model, n_blocks, 4, N_TOKENS), ids, chunk)
        np.testing.assert_array_equal(got, whole, err_msg=f"chunk {chunk}")
    scale = float(np.max(np.abs(hf)))
    config, weights = ref_loader.load_weights(path)
    if config["moe"]["layers"]:  # the twin's paged runner is dense-only: its one-pass forward
        twin = ref_model.forward(config, weights, ids)
    else:
        twin = runner_logits(RefRunner(config, weights, n_blocks, 4), ids, 5)
    assert float(np.max(np.abs(twin - whole))) / scale < TWIN_TOL
    if fmt == "safetensors":
        assert float(np.max(np.abs(whole - hf))) / scale < HF_TOL[fmt]
        prompt = ids[:10]
        assert greedy(model, prompt, 30, block=4) == hf_greedy(src, prompt, 30)


@pytest.mark.parametrize("name", ["mistral", "qwen2"])
def test_batch_invariant(
    hf_models: dict[str, Any], name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits over 72
    tokens (10x the window), Q8_0 GGUF."""
    path = case_file(hf_models, name, "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(path), CASES[name]["vocab_size"], seed=7)


def test_config_rules(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """transformers' reading of the keys: a Qwen window needs use_sliding_window; max_window_layers
    picks the windowed layers where layer_types is absent (Qwen2-MoE: the even layers below it);
    Mistral without the key gets 4096. The twin reads the same."""
    qwen2, mistral = hf_models["qwen2"][0], hf_models["mistral"][0]
    checks = [
        (edited(qwen2, tmp_path / "off", use_sliding_window=False), 0, []),
        (edited(qwen2, tmp_path / "mwl", layer_types=DROP, max_window_layers=2), 6, [False, False, True]),
        (edited(qwen2, tmp_path / "none", layer_types=DROP, max_window_layers=3), 0, []),
        (edited(qwen2, tmp_path / "moe", model_type="qwen2_moe", architectures=["Qwen2MoeForCausalLM"],
                layer_types=DROP, max_window_layers=3, num_experts=2, num_experts_per_tok=1,
                moe_intermediate_size=32, shared_expert_intermediate_size=0, mlp_only_layers=[0, 1, 2]),
         6, [True, False, True]),
        (edited(mistral, tmp_path / "default", sliding_window=DROP), 4096, [True, True]),
    ]  # fmt: skip
    for path, window, layers in checks:
        c = core.load_model(path).config
        assert (c["sliding_window"], [bool(v) for v in c["layer_sliding"]]) == (window, layers), path
        config, _ = ref_loader.load_weights(path)
        assert config == c, path
    bad = edited(qwen2, tmp_path / "bad", layer_types=["full_attention", "sliding_attention"])
    with pytest.raises(core.ModelError, match="layer_types"):
        core.load_model(bad)
    with pytest.raises(ValueError, match="layer_types"):
        ref_loader.load_weights(bad)


def test_inspect_describes_the_window(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    text = models.format_inspect(models.inspect(hf_models["qwen2"][0]))
    assert "sliding window of 6 tokens in 2 of 3 layers" in text
    text = models.format_inspect(models.inspect(case_file(hf_models, "mistral", "F32", tmp_path_factory)))
    assert "sliding window of 7 tokens in 2 of 2 layers" in text
