"""LFM2 (``lfm2`` GGUF files, Lfm2ForCausalLM folders: Liquid AI's LFM2 / LFM2.5, 350M to 2.6B) and
LFM2-MoE (``lfm2moe``, Lfm2MoeForCausalLM: LFM2-8B-A1B; DeepSeek V3's routing in one group)
against Hugging Face transformers and the NumPy twin, on tiny random models built by transformers, from
safetensors folders and from GGUF files laid out as llama.cpp's converter writes them.

Most layers are gated short convolutions (``ossa.reference.delta_net.short_conv``: [B | C | x] from one
projection, B * x through a causal depthwise convolution of ``conv_L_cache`` taps whose last inputs are
a sequence's state, times C), the others GQA attention with q / k RMSNorm per head; the final norm is
``embedding_norm`` (GGUF ``token_embd_norm``) and the feed-forward's size is Lfm2MLP's adjusted one. The
engine gives each running sequence a state slot, as for Qwen3.5 (test_qwen35.check_recurrent_engine).
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
CASES: dict[str, dict[str, Any]] = {
    # LFM2-350M's layout, small: convolutions of 3 taps with attention at two depths, GQA, tied, the
    # feed-forward's size adjusted as the releases' (2/3, rounded up to a multiple of 256).
    "lfm2": dict(
        arch="lfm2", hidden_size=64, num_layers=5, num_heads=4, num_kv_heads=2, intermediate_size=96,
        vocab_size=150, layer_types=["conv", "full_attention", "conv", "conv", "full_attention"],
        conv_L_cache=3, tie=True,
    ),
    # 4 taps, MHA, untied, a multiplier and a smaller rounding (block_multiple_of 32), head_dim 24.
    "lfm2-wide": dict(
        arch="lfm2", hidden_size=48, num_layers=4, num_heads=2, num_kv_heads=2, head_dim=24,
        intermediate_size=120, vocab_size=130, layer_types=["conv", "conv", "full_attention", "conv"],
        conv_L_cache=4, block_ffn_dim_multiplier=1.5, block_multiple_of=32,
    ),
    # LFM2-8B-A1B's layout (lfm2moe): a dense lead layer of intermediate_size rows, then 6 experts of
    # 32 rows, 2 used per token, chosen by sigmoid score plus the expert bias, renormalised.
    "lfm2-moe": dict(
        arch="lfm2_moe", hidden_size=48, num_layers=4, num_heads=2, num_kv_heads=1, intermediate_size=80,
        vocab_size=130, layer_types=["conv", "full_attention", "conv", "conv"], conv_L_cache=3,
        num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32, num_dense_layers=1,
    ),
}  # fmt: skip
# F16 / Q8_0 files against transformers: B * x * C multiplies three rounded projections, which these
# random models amplify past the Llama family's bounds (measured max: F16 1.5e-3, Q8_0 3.1e-2); the twin
# on the same rounded weights agrees with ossa to its usual tolerance.
ROUNDED_TOL = {"F16": 3e-3, "Q8_0": 6e-2}


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("lfm2"), CASES, seed=420, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model = check_case(hf_models, name, fmt, tmp_path_factory, ROUNDED_TOL)
    kw, c = CASES[name], model.config
    assert c["conv"]["kernel"] == kw["conv_L_cache"]
    assert c["conv"]["layers"] == [i for i, t in enumerate(kw["layer_types"]) if t == "conv"]
    assert c["n_kv_layers"] == kw["layer_types"].count("full_attention") and c["qk_norm"]
    assert c["state_bytes"] == 4 * len(c["conv"]["layers"]) * (kw["conv_L_cache"] - 1) * kw["hidden_size"]
    if kw["arch"] == "lfm2_moe":  # (its dense layers: intermediate_size; experts from num_dense_layers on)
        assert c["n_ff"] == kw["intermediate_size"] and c["moe"]["layers"] == list(range(1, kw["num_layers"]))
        assert c["moe"]["sigmoid_gating"] and c["moe"]["selection_bias"] and c["moe"]["norm_topk_prob"]
        return
    # Lfm2MLP's size: 2/3 of intermediate_size, times the multiplier, rounded up to block_multiple_of.
    of = kw.get("block_multiple_of", 256)
    ff = int(kw.get("block_ffn_dim_multiplier", 1.0) * int(2 * kw["intermediate_size"] / 3))
    assert c["n_ff"] == of * -(-ff // of)


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal (the convolution's state
    carried across chunks), equal to HF and to the twin's runner; 30 greedy tokens equal to
    transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_batch_invariance_inspect_and_errors(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Batch invariance (alone, among 7 others each in its own state slot, chunked, 1 and 2 threads);
    state slots and fork copies (a model whose last layer is a convolution);
    inspect names the convolutions; bad sizes, layer types and conv_bias are refused by both loaders; a
    GGUF file without the per-layer KV head counts fails naming the attention tensor it lacks."""
    path = case_file(hf_models, "lfm2", "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(path), CASES["lfm2"]["vocab_size"], seed=13)
    # (lfm2-wide ends on a convolution layer: copy_block must skip it, the pool holding attention only)
    wide = case_file(hf_models, "lfm2-wide", "F32", tmp_path_factory)
    check_state_slots(core.load_model(wide), CASES["lfm2-wide"]["vocab_size"])
    text = models.format_inspect(models.inspect(path))
    assert "short conv    3 of 5 layers (gated convolution of 3 taps" in text, text
    src = hf_models["lfm2"][0]
    check_config_refusals(
        src,
        tmp_path,
        (
            ({"conv_L_cache": 1}, "conv_L_cache"),
            ({"conv_bias": True}, "conv_bias"),
            ({"layer_types": ["conv"] * 2}, "layer_types"),
        ),
    )
    from tiny_models import gguf_without

    f32 = case_file(hf_models, "lfm2", "F32", tmp_path_factory)
    odd = gguf_without(f32, tmp_path / "odd.gguf", keys=["lfm2.attention.head_count_kv"])
    import gguf

    reader = gguf.GGUFReader(odd)  # (without the per-layer counts every layer reads as attention)
    assert "lfm2.attention.head_count_kv" not in reader.fields
    with pytest.raises(core.ModelError, match="missing tensor"):
        core.load_model(odd)


@pytest.fixture(scope="module")
def engine_model(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny LFM2 GGUF with the default model's vocabulary and tokenizer, for the engine."""
    root = tmp_path_factory.mktemp("lfm2-engine")
    folder = make_hf_model(root / "hf", seed=6, **dict(CASES["lfm2"], vocab_size=49152))
    return hf_to_gguf(folder, root / "tiny-lfm2.gguf", "F32", tokenizer_gguf=default_model_path)


def test_engine_state_slots(engine_model: str) -> None:
    check_recurrent_engine(engine_model)


def test_vl_folder(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """LFM2-VL's language model: a Lfm2VlForConditionalGeneration folder (text_config; tensors under
    model.language_model., the vision tower and projector beside them skipped) gives the text model's
    logits bitwise, in both loaders."""
    import json

    from safetensors.numpy import load_file, save_file

    from ossa.reference import loader as ref_loader
    from ossa.reference import model as ref_model

    src, _, ids = hf_models["lfm2"]
    cfg = json.loads((Path(src) / "config.json").read_text())
    tensors = load_file(str(Path(src) / "model.safetensors"))
    renamed = {k.replace("model.", "model.language_model.", 1): v for k, v in tensors.items()}
    renamed["model.vision_tower.embeddings.patch_embedding.weight"] = np.zeros((4, 3), np.float32)
    renamed["model.multi_modal_projector.linear_1.weight"] = np.zeros((4, 4), np.float32)
    dst = tmp_path / "vl"
    dst.mkdir()
    save_file(renamed, str(dst / "model.safetensors"))
    wrapper = {
        "model_type": "lfm2_vl",
        "architectures": ["Lfm2VlForConditionalGeneration"],
        "text_config": cfg,
    }
    (dst / "config.json").write_text(json.dumps(wrapper))
    want = core.model_logits(core.load_model(src), ids)
    np.testing.assert_array_equal(core.model_logits(core.load_model(str(dst)), ids), want)
    twin = ref_model.forward(*ref_loader.load_weights(str(dst)), ids)
    np.testing.assert_allclose(twin, ref_model.forward(*ref_loader.load_weights(src), ids), rtol=0, atol=0)
