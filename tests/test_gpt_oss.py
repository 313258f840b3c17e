"""gpt-oss (OpenAI's open-weight MoE models) against Hugging Face transformers (torch CPU, float32) and the
NumPy twin, on tiny random models built by transformers: from safetensors folders (GptOssForCausalLM,
unquantized experts, and the Hub's MXFP4 layout) and from GGUF files laid out as llama.cpp's converter
writes them (experts de-interleaved and transposed into ffn_*_exps stacks with bias stacks, attn_sinks,
post_attention_norm; experts in MXFP4 as the released files keep them).

What gpt-oss adds to the MoE family, each exercised here: a learned sink logit per head in every
attention softmax (all attention kernels: single tokens, prefill runs, the generic path for head_dim
24), q/k/v and output biases, the window on every other layer (prompts of 40 tokens, over 6x the
window), YaRN, router and expert biases, a softmax over the chosen experts' logits alone, and the
clamped SwiGLU (a case with swiglu_limit 0.3 so the clamps bite; GGUF files have no key for it,
llama.cpp hard-codes 7, so that case runs from its folder only).

Tolerances as in test_moe.py: safetensors and GGUF F32 against transformers 1e-5; F16, Q8_0 and MXFP4
files against the twin on the same dequantized weights (their rounding switches an expert now and
then, a discontinuous change no logit tolerance describes).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from tiny_models import (
    N_TOKENS,
    TWIN_TOL,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    check_golden,
    check_twin,
    gguf_without,
    greedy,
    hf_greedy,
    twin_tol,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

YARN = {"rope_type": "yarn", "factor": 4.0, "beta_fast": 8.0, "beta_slow": 1.0, "truncate": True,
        "original_max_position_embeddings": 32}  # fmt: skip
CASES: dict[str, dict[str, Any]] = {
    # The released layout at small size: GQA 2, head_dim 16 (< 64/4), window 6 on layers 0 and 2, YaRN
    # (truncated ramp: what llama.cpp computes for GGUF files), 5 experts, 2 per token.
    "gpt_oss": dict(
        arch="gpt_oss", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=64, vocab_size=120, num_local_experts=5, num_experts_per_tok=2,
        sliding_window=6, max_position_embeddings=128, rope_theta=1000.0, rope_scaling=YARN,
    ),
    # The clamps active (limit 0.3), another alpha, no attention biases, head_dim 24 (the generic
    # attention path), MQA, window on layers 1 and 2, 4 experts of 40 rows, 3 per token, YaRN as
    # transformers computes it (untruncated ramp).
    "gpt_oss_clamped": dict(
        arch="gpt_oss", hidden_size=48, num_layers=3, num_heads=3, num_kv_heads=1, head_dim=24,
        intermediate_size=40, vocab_size=100, num_local_experts=4, num_experts_per_tok=3,
        sliding_window=5, layer_types=["full_attention", "sliding_attention", "sliding_attention"],
        swiglu_limit=0.3, swiglu_alpha=1.0, attention_bias=False, max_position_embeddings=128,
        rope_scaling=dict(YARN, truncate=False),
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("gpt-oss"), CASES, seed=90, n_tokens=N_TOKENS)


@pytest.mark.parametrize(
    "name, fmt", [("gpt_oss", "safetensors"), ("gpt_oss", "F32"), ("gpt_oss_clamped", "safetensors")]
)
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    model = check_golden(path, ids, hf_logits, fmt)
    c, case = model.config, CASES[name]
    assert c["arch"] == "gpt-oss" and c["attn_sinks"]
    assert c["o_bias"] == c["qkv_bias"] == case.get("attention_bias", True)
    assert c["sliding_window"] == case["sliding_window"]
    want = case.get("layer_types") or ["sliding_attention", "full_attention", "sliding_attention"]
    assert c["layer_sliding"] == [t == "sliding_attention" for t in want]
    moe = c["moe"]
    assert moe["bias"] and moe["softmax_topk"] and moe["layers"] == [0, 1, 2]
    assert moe["swiglu_limit"] == pytest.approx(case.get("swiglu_limit", 7.0))
    assert moe["swiglu_alpha"] == pytest.approx(case.get("swiglu_alpha", 1.702))


@pytest.mark.parametrize("fmt", ["F16", "Q8_0", "MXFP4"])
def test_quantized_files_match_the_twin(
    hf_models: dict[str, Any], fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, "gpt_oss", fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models["gpt_oss"]
    model = check_twin(path, ids, hf_logits)
    types = {name: t for name, t, *_ in model.tensors()}
    if fmt == "MXFP4":  # experts MXFP4, their bias stacks and the sinks F32, as llama.cpp keeps them
        assert types["blk.0.ffn_gate_exps.weight"] == types["blk.2.ffn_down_exps.weight"] == "MXFP4"
        assert types["blk.0.ffn_gate_exps.bias"] == types["blk.1.attn_sinks.weight"] == "F32"


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner (past the window 6x over): bitwise equal,
    equal to HF and to the twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


@pytest.mark.parametrize("fmt", ["F32", "MXFP4"])
def test_batch_invariant(
    hf_models: dict[str, Any], fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits."""
    path = case_file(hf_models, "gpt_oss", fmt, tmp_path_factory)
    check_invariance(core.load_model(path), CASES["gpt_oss"]["vocab_size"], seed=12)


def test_clamped_case_batch_invariant(hf_models: dict[str, Any]) -> None:
    """The generic attention path (head_dim 24) with sinks, and the clamps, batched and chunked."""
    check_invariance(
        core.load_model(hf_models["gpt_oss_clamped"][0]), CASES["gpt_oss_clamped"]["vocab_size"], seed=13
    )


def test_sinks_and_biases_matter(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """Zeroing the sinks or the output biases changes the logits (both are read and applied), and the
    change is the twin's."""
    from safetensors.numpy import load_file, save_file

    src, _, ids = hf_models["gpt_oss"]
    want = core.model_logits(core.load_model(src), ids)
    for stem in ("self_attn.sinks", "self_attn.o_proj.bias", "mlp.router.bias", "experts.down_proj_bias"):
        dst = tmp_path / stem
        shutil.copytree(src, dst)
        tensors = load_file(str(dst / "model.safetensors"))
        for k in tensors:
            if k.endswith(stem):
                tensors[k] = np.zeros_like(tensors[k])
        save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
        got = core.model_logits(core.load_model(str(dst)), ids)
        assert float(np.max(np.abs(got - want))) > 1e-3 * float(np.max(np.abs(want))), stem
        config, weights = ref_loader.load_weights(str(dst))
        twin = ref_model.forward(config, weights, ids)
        assert float(np.max(np.abs(got - twin))) < TWIN_TOL * float(np.max(np.abs(want))), stem


def _hub_mxfp4_folder(src: str, dst: Path, seed: int) -> None:
    """``src`` with its experts replaced by random MXFP4 stacks laid out as the Hub's gpt-oss folders
    keep them (``*_blocks`` [n, rows, cols / 32, 16] U8, two E2M1 codes a byte, element 2i low;
    ``*_scales`` [n, rows, cols / 32] E8M0; rows not transposed, gate and up rows interleaved) and
    the quantization_config they carry."""
    import json

    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    rng = np.random.default_rng(seed)
    for k in [k for k in tensors if k.endswith("_proj") and ".experts." in k]:
        n, cols, rows = tensors.pop(k).shape  # transformers' [n, in, out]
        blocks = rng.integers(0, 256, size=(n, rows, cols // 32, 16), dtype=np.uint8)
        # E8M0 around 2^-5 (largest weight ~0.19), and two blocks of subnormal scales
        scales = rng.integers(119, 123, size=(n, rows, cols // 32), dtype=np.uint8)
        scales[0, 0, 0], scales[0, 1, 0] = 0, 1
        tensors[k + "_blocks"], tensors[k + "_scales"] = blocks, scales
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
    }  # fmt: skip
    (dst / "config.json").write_text(json.dumps(cfg))


def test_hub_mxfp4_folder_matches_hf(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """A GptOssForCausalLM folder with MXFP4 experts, as the Hub ships gpt-oss (transformers dequantizes
    it on a CPU without triton: the oracle reads the same bytes): ossa's f32 kernels and the twin
    within 1e-5 of transformers' float32 logits, the default (int8) kernels within the twin's bound
    of the twin on the kernels' split inputs; the experts are MXFP4 in memory (exact, at the file's
    size), not expanded. Bad stacks are refused by name."""
    from safetensors.numpy import load_file, save_file
    from tiny_models import hf_logits

    src, _, ids = hf_models["gpt_oss"]
    dst = tmp_path / "hub"
    _hub_mxfp4_folder(src, dst, seed=7)
    want = hf_logits(dst, ids)
    scale = float(np.max(np.abs(want)))
    exact = core.load_model(str(dst), amx=False)
    assert float(np.max(np.abs(core.model_logits(exact, ids) - want))) / scale < 1e-5
    config, weights = ref_loader.load_weights(str(dst))
    assert config == exact.config
    assert float(np.max(np.abs(ref_model.forward(config, weights, ids) - want))) / scale < 1e-5
    model = core.load_model(str(dst))
    twin = ref_model.forward(config, weights, ids, int8_matrices=model.int8_matrices)
    assert float(np.max(np.abs(core.model_logits(model, ids) - twin))) / scale < twin_tol(model)
    types = {name: t for name, t, *_ in model.tensors()}
    assert types["model.layers.0.mlp.experts.gate_up_proj_blocks"] == "U8"
    info = models.inspect(str(dst))
    assert info["tensor_types"]["MXFP4"] == info["tensor_types"]["E8M0 scales"] == 6
    ref = models.inspect(src)  # the same model with unquantized experts: the same parameter count
    assert info["n_params"] == ref["n_params"]
    # A stack of the wrong shape, or blocks stored as floats: refused naming the tensor.
    for name, bad in (
        ("model.layers.1.mlp.experts.down_proj_scales", np.zeros((5, 64, 3), np.uint8)),
        ("model.layers.2.mlp.experts.gate_up_proj_blocks", np.zeros((5, 128, 2, 16), np.float32)),
    ):
        broken = tmp_path / name
        shutil.copytree(dst, broken)
        tensors = load_file(str(broken / "model.safetensors"))
        tensors[name] = bad
        save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
        with pytest.raises(core.ModelError, match=name):
            core.load_model(str(broken))
        with pytest.raises(ValueError, match=name):
            ref_loader.load_weights(str(broken))


def test_gguf_without_sinks_or_experts_fails(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, "gpt_oss", "F32", tmp_path_factory)
    for drop in ("blk.1.attn_sinks.weight", "blk.0.ffn_up_exps.bias"):
        out = gguf_without(path, Path(path).with_name(f"no-{drop}.gguf"), tensors=[drop])
        with pytest.raises(core.ModelError, match=drop):
            core.load_model(out)
        with pytest.raises(ValueError, match=drop):
            ref_loader.load_weights(out)


def test_inspect_describes_gpt_oss(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    text = models.format_inspect(models.inspect(case_file(hf_models, "gpt_oss", "MXFP4", tmp_path_factory)))
    assert "architecture  gpt-oss" in text
    assert (
        "experts       5 of 64 rows, 2 used per token, in 3 of 3 layers, biases, softmax over the chosen"
        in text
    )
    assert "SwiGLU clamped at 7" in text
    assert "sliding window of 6 tokens in 2 of 3 layers; a learned sink per head in the softmax" in text
    assert "MXFP4 x" in text
