"""Phi-3 family (Phi-3-mini, Phi-3.5-mini, Phi-4-mini) against Hugging Face transformers (torch CPU,
float32) and the NumPy twin, on tiny random models built by transformers, from safetensors folders and
from GGUF files laid out as llama.cpp's converter writes them (fused attn_qkv and ffn_up = gate|up,
rope_factors_long / rope_factors_short tensors, rope.scaling.attn_factor, rope.dimension_count).

Features on in at least one case: a sliding window over every layer (Phi-3-mini's), GQA, partial
rotary (Phi-4-mini's 0.75), LongRoPE short/long factors with its attention factor, tied output.

LongRoPE in ossa picks the factors by position: short below original_max_position, long from it on.
transformers picks them per call from the longest position (and its generate() recomputes the cache
when a sequence crosses the boundary), so the two agree exactly on sequences within the original
context; past it, the long factors' rotation is checked on a model whose short and long factors are
equal, and the position rule against the twin.
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
    hf_to_gguf,
    runner_logits,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model
from ossa.reference.runner import ModelRunner as RefRunner

IDS = dict(pad_token_id=0, eos_token_id=1, bos_token_id=2)
SHORT = [1.0 + 0.2 * i for i in range(6)]
LONG = [2.0 + 0.5 * i for i in range(6)]
CASES: dict[str, dict[str, Any]] = {
    # Phi-3-mini: multi-head attention, a sliding window of 9 over every layer, untied output.
    "phi3-mini": dict(
        arch="phi3", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=128, max_position_embeddings=64, sliding_window=9, **IDS,
    ),
    # Phi-4-mini: GQA 2, 12 of 16 head dimensions rotated, LongRoPE (original context 48 of 64), tied.
    "phi4-mini": dict(
        arch="phi3", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=96,
        vocab_size=128, max_position_embeddings=64, original_max_position_embeddings=48,
        partial_rotary_factor=0.75, tie=True,
        rope_scaling={"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG}, **IDS,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("phi3"), CASES, seed=20, n_tokens=N_TOKENS)


def check_logits(path: str, ids: list[int], hf: np.ndarray, tol: float) -> None:
    model, config, err_hf, err_twin, _ = golden(path, ids, hf)
    assert err_hf < tol, f"{path}: max |ossa - HF| / max |HF| = {err_hf}"
    assert config == model.config  # the twin reads the same hyper-parameters
    assert err_twin < TWIN_TOL, f"{path}: max |ossa - twin| / max |HF| = {err_twin}"


@pytest.mark.parametrize("fmt", ["safetensors", "F32", "F16", "Q8_0"])
@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    c = core.load_model(path).config
    assert c["arch"] == "phi3"
    if name == "phi4-mini":
        assert c["rope_dim"] == 12 and c["rope_scaling"]["type"] == "longrope"
        assert c["rope_scaling"]["original_max_position"] == 48
        assert c["rope_scaling"]["attn_factor"] == pytest.approx(np.sqrt(1 + np.log(64 / 48) / np.log(48)))
    else:
        assert c["sliding_window"] == 9 and all(c["layer_sliding"])
    check_logits(path, hf_models[name][2], hf_models[name][1], HF_TOL[fmt])


def with_rope(src: str, dst: Path, **changes: Any) -> str:
    """A copy of folder `src` whose rope_parameters get `changes`."""
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    for key, value in changes.items():
        if key in cfg:  # the top-level key is the one transformers reads
            cfg[key] = value
        else:
            cfg["rope_parameters"][key] = value
    (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


@pytest.mark.parametrize("fmt", ["safetensors", "F32"])
def test_long_factors_past_the_original_context(
    hf_models: dict[str, Any], fmt: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """60 tokens with an original context of 16: with short = long factors transformers and ossa
    agree (the long table's rotation and attention factor); with distinct factors ossa (short below
    16, long from 16 on) agrees with the twin, in one pass and prefilled in chunks."""
    src = hf_models["phi4-mini"][0]
    ids = np.random.default_rng(9).integers(0, 128, 60).tolist()
    same = with_rope(src, tmp_path / "same", original_max_position_embeddings=16, short_factor=LONG)
    path = same if fmt == "safetensors" else hf_to_gguf(same, tmp_path / "same.gguf", fmt)
    check_logits(path, ids, hf_logits(same, ids), HF_TOL[fmt])

    mixed = with_rope(src, tmp_path / "mixed", original_max_position_embeddings=16)
    path = mixed if fmt == "safetensors" else hf_to_gguf(mixed, tmp_path / "mixed.gguf", fmt)
    model = core.load_model(path)
    logits = core.model_logits(model, ids)
    config, weights = ref_loader.load_weights(path)
    scale = float(np.max(np.abs(logits)))
    assert float(np.max(np.abs(logits - ref_model.forward(config, weights, ids)))) / scale < TWIN_TOL
    # The first 16 positions are the short-factor model's (transformers on the 16-token prefix).
    np.testing.assert_allclose(logits[:16], hf_logits(mixed, ids[:16]), atol=1e-5 * scale)
    chunked = runner_logits(core.ModelRunner(model, 15, 4, 60), ids, 7)
    np.testing.assert_array_equal(chunked, runner_logits(core.ModelRunner(model, 15, 4, 60), ids, 60))
    twin = runner_logits(RefRunner(config, weights, 15, 4), ids, 7)
    assert float(np.max(np.abs(twin - chunked))) / scale < TWIN_TOL


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy_match_transformers(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1 and 5 through the paged runner equal one pass bitwise and HF; then a 10-token
    prompt and 30 greedy tokens (past 3x the window) equal transformers' generate()."""
    path, hf, ids = hf_models[name]
    model = core.load_model(path)
    whole = runner_logits(core.ModelRunner(model, N_TOKENS // 4, 4, N_TOKENS), ids, N_TOKENS)
    for chunk in (1, 5):
        got = runner_logits(core.ModelRunner(model, N_TOKENS // 4, 4, N_TOKENS), ids, chunk)
        np.testing.assert_array_equal(got, whole, err_msg=f"chunk {chunk}")
    assert float(np.max(np.abs(whole - hf))) / float(np.max(np.abs(hf))) < 1e-5

    prompt, n_new = ids[:10], 30
    assert greedy(model, prompt, n_new, block=4) == hf_greedy(path, prompt, n_new)


@pytest.mark.parametrize("kv", ["float32", "float16"])
@pytest.mark.parametrize("name", list(CASES))
def test_batch_invariant(
    hf_models: dict[str, Any], name: str, kv: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits over 72
    tokens (8x the window; past the LongRoPE model's original context of 48), Q8_0 GGUF."""
    path = case_file(hf_models, name, "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(path), CASES[name]["vocab_size"], seed=6, kv=kv)


def test_inspect_and_listing(hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    text = models.format_inspect(models.inspect(hf_models["phi4-mini"][0]))
    assert "scaling=longrope" in text and "rotated=12/16" in text
    text = models.format_inspect(models.inspect(hf_models["phi3-mini"][0]))
    assert "sliding window of 9 tokens in 2 of 2 layers" in text
    # The fused tensors are listed as stored; their parts are views under the canonical names.
    m = core.load_model(case_file(hf_models, "phi4-mini", "F32", tmp_path_factory))
    names = [t[0] for t in m.tensors()]
    assert "blk.0.attn_qkv.weight" in names and "rope_factors_long.weight" in names
    qkv = core.dequantize_tensor(m, "blk.0.attn_qkv.weight")
    q, k, v = (core.dequantize_tensor(m, f"layers.0.{n}") for n in ("wq", "wk", "wv"))
    assert (q.shape, k.shape, v.shape) == ((64, 64), (32, 64), (32, 64))
    np.testing.assert_array_equal(np.concatenate([q, k, v]), qkv)


def test_bad_phi3_configs_fail_clearly(hf_models: dict[str, Any], tmp_path: Path) -> None:
    src = Path(hf_models["phi4-mini"][0])
    for i, (key, value, match) in enumerate([
        ("short_factor", [1.0] * 5, "LongRoPE factors"),
        ("long_factor", [1.0, -1.0, 1.0, 1.0, 1.0, 1.0], "LongRoPE factor"),
        ("partial_rotary_factor", 1.5, "partial_rotary_factor"),
    ]):  # fmt: skip
        dst = tmp_path / str(i)
        shutil.copytree(src, dst)
        cfg = json.loads((dst / "config.json").read_text())
        cfg.pop(key, None)
        cfg["rope_parameters"][key] = value
        (dst / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(core.ModelError, match=match):
            core.load_model(str(dst))
        with pytest.raises(ValueError, match=match):
            ref_loader.load_weights(str(dst))
