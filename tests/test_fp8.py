"""FP8 folders (quantization_config quant_method "fp8": transformers' FineGrainedFP8, the layout of
Qwen3-*-FP8, DeepSeek V3 / R1 and other FP8 releases) against Hugging Face transformers (torch CPU, float32:
on a CPU transformers dequantizes each matrix to E4M3 value x scale, rounded once) and the NumPy twin, on
tiny random models built by transformers and quantized as those releases are (tiny_models.pack_fp8):
E4M3 matrices with one scale per 128 x 128 block (or per matrix, or per other blocks of 128k columns),
f32 / bf16 / E8M0 scales, dense and mixture-of-experts layers.

ossa repacks each matrix into rows of 128-value blocks (its f32 scale, then the 128 codes) and multiplies
with f32 activations (kernels/matmul_fp8.cpp): every weight is exactly transformers' dequantized float32
value, so the models agree to float32 summation order (the tests' usual 1e-5 of the logits' range).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from tiny_models import (
    TWIN_TOL,
    build_quantized_cases,
    check_chunked,
    check_config_refusals,
    check_engine_gpt2,
    check_file_refusals,
    golden,
    greedy,
    hf_greedy,
    make_hf_model,
    pack_fp8,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model
from ossa.reference.quants import dequantize_fp8, e4m3_values

HF_TOL = 1e-5
FP8 = 1001  # (DType::FP8: kernel_matmul's id for the repacked rows)

QWEN3 = dict(arch="qwen3", hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=64,
             intermediate_size=384, vocab_size=200)  # fmt: skip
# name -> (make_hf_model keywords, pack_fp8 keywords, whether transformers is the oracle)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], bool]] = {
    # Qwen3-*-FP8's layout: 128 x 128 blocks, f32 scales (k / v projections of 128 rows: one block row).
    "qwen3": (QWEN3, {}, True),
    # One scale per matrix (bf16), tied embeddings.
    "llama-tensor": (
        dict(
            arch="llama",
            hidden_size=128,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            intermediate_size=256,
            vocab_size=160,
            tie=True,
        ),
        dict(block=None, scale_dtype="bfloat16"),
        True,
    ),  # fmt: skip
    # Blocks of 32 rows x 256 columns.
    "llama-blocks": (
        dict(
            arch="llama",
            hidden_size=256,
            num_layers=2,
            num_heads=2,
            num_kv_heads=1,
            intermediate_size=512,
            vocab_size=170,
        ),
        dict(block=(32, 256)),
        True,
    ),  # fmt: skip
    # Power-of-two scales stored as E8M0 (scale_fmt ue8m0).
    "qwen3-e8m0": (QWEN3, dict(e8m0=True), True),
    # Experts (each its own FP8 matrices and scales; the router stays float), q / k norms, a dense layer.
    "qwen3_moe": (
        dict(
            arch="qwen3_moe",
            hidden_size=128,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            head_dim=32,
            intermediate_size=256,
            vocab_size=150,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=128,
            norm_topk_prob=True,
            mlp_only_layers=[1],
        ),
        {},
        True,
    ),  # fmt: skip
    # DeepSeek V3's MLA and experts (its FP8 release's layout; blocks of 16 rows here: kv_a_proj_with_mqa's
    # 144 rows, kv_lora_rank + the rope dims, are a multiple of those, as transformers' oracle needs).
    "deepseek_v3": (
        dict(
            arch="deepseek_v3",
            hidden_size=128,
            num_layers=2,
            num_heads=2,
            num_kv_heads=2,
            intermediate_size=256,
            vocab_size=150,
            q_lora_rank=128,
            kv_lora_rank=128,
            qk_nope_head_dim=32,
            qk_rope_head_dim=16,
            v_head_dim=64,
            n_routed_experts=4,
            n_shared_experts=1,
            num_experts_per_tok=2,
            moe_intermediate_size=128,
            n_group=2,
            topk_group=1,
            first_k_dense_replace=1,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
        ),
        dict(block=(16, 128)),
        True,
    ),  # fmt: skip
    # Blocks of 96 rows over matrices of 128 / 256 rows: the last block row partial. transformers' CPU
    # dequantization takes rows / grid rows as its block (and refuses 256 rows over 3 block rows), where the
    # blocks are 96 rows as the config says (the kernels that write and read such files): the twin alone.
    "llama-ragged": (
        dict(
            arch="llama",
            hidden_size=256,
            num_layers=1,
            num_heads=2,
            num_kv_heads=1,
            intermediate_size=256,
            vocab_size=120,
        ),
        dict(block=(96, 128)),
        False,
    ),  # fmt: skip
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str, Any, list[int]]]:
    """name -> (quantized folder, its float folder, transformers' float32 logits or None, token ids)."""
    return build_quantized_cases(tmp_path_factory.mktemp("fp8"), CASES, pack_fp8, 50)


def test_e4m3_values_are_torchs() -> None:
    """The twin's E4M3 decoding is torch's float8_e4m3fn, bitwise, for all 256 codes (NaN where torch's)."""
    import torch

    codes = np.arange(256, dtype=np.uint8)
    want = torch.from_numpy(codes.copy()).view(torch.float8_e4m3fn).to(torch.float32).numpy()
    got = e4m3_values(codes)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and int(np.isnan(got).sum()) == 2
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


def repack(codes: np.ndarray, scales: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    """The loader's DType::FP8 rows of a matrix: per 128 columns, the block's f32 scale then the codes."""
    rows, cols = codes.shape
    out = np.zeros((rows, cols // 128, 132), np.uint8)
    for r in range(rows):
        for k in range(cols // 128):
            s = np.float32(scales[r // block[0], 128 * k // block[1]])
            out[r, k, :4] = np.frombuffer(s.tobytes(), np.uint8)
            out[r, k, 4:] = codes[r, 128 * k : 128 * k + 128]
    return out.reshape(-1)


@pytest.mark.parametrize("n_rows", [1, 2, 5, 8, 17])
def test_kernel_matches_the_twin_and_torch(n_rows: int) -> None:
    """The kernel on every E4M3 code (subnormals, -0, the largest 448) and scales from 2^-20 to 2^6 and 0:
    within float32 summation of the twin's dequantized matrix (which is torch's product of the float8
    tensor and its scales, bitwise) and batch invariant (each row of an n-row product bitwise its product
    alone); dtype bfloat16 within bf16 rounding of it."""
    import torch

    rng = np.random.default_rng(n_rows)
    rows, cols, block = 200, 512, (128, 128)
    codes = rng.integers(0, 256, (rows, cols), dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x7E
    codes[0, :256] = np.arange(256, dtype=np.uint8)
    codes[0, :256][(codes[0, :256] & 0x7F) == 0x7F] = 0x01
    scales = np.exp2(rng.uniform(-20, 6, (2, 4))).astype(np.float32)
    scales[1, 3] = 0.0
    w = dequantize_fp8(codes, scales, block)
    full = torch.from_numpy(np.repeat(np.repeat(scales, 128, 0)[:rows], 128, 1))
    want_w = (torch.from_numpy(codes).view(torch.float8_e4m3fn).float() * full).numpy()
    assert np.array_equal(w.view(np.uint32), want_w.view(np.uint32))
    x = rng.standard_normal((n_rows, cols)).astype(np.float32)
    packed = repack(codes, scales, block)
    got = core.kernel_matmul(packed, FP8, rows, cols, x)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    assert float(np.max(np.abs(got - ref))) <= 1e-6 * float(np.max(np.abs(x) @ np.abs(w).T))
    for r in range(n_rows):
        assert np.array_equal(core.kernel_matmul(packed, FP8, rows, cols, x[r : r + 1])[0], got[r])
    bf = core.kernel_matmul(packed, FP8, rows, cols, x, dtype="bfloat16")
    assert float(np.max(np.abs(bf - ref))) <= 1e-2 * float(np.max(np.abs(x) @ np.abs(w).T))


@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_hf_and_twin(cases: dict[str, Any], name: str) -> None:
    """ossa and the twin within 1e-5 of transformers (the FP8 weights' float32 values the same: only the
    summation order differs); the quantization is used (the float folder's logits are far)."""
    path, float_dir, hf, ids = cases[name]
    oracle = hf if hf is not None else ref_model.forward(*ref_loader.load_weights(path), ids)
    g = golden(path, ids, oracle)
    assert g.err_twin < TWIN_TOL, g.err_twin
    assert g.err_hf < HF_TOL and g.twin_hf < HF_TOL, (g.err_hf, g.twin_hf)
    assert g.config == g.model.config
    float_logits = core.model_logits(core.load_model(float_dir), ids)
    assert float(np.max(np.abs(float_logits - oracle))) > 1e-3 * float(np.max(np.abs(oracle)))
    kinds = {t[1] for t in g.model.tensors()}
    assert "F8_E4M3" in kinds


@pytest.mark.parametrize("name", ["qwen3", "qwen3_moe", "deepseek_v3"])
def test_chunked_prefill_and_greedy(cases: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner bitwise equal (and within 1e-5 of
    transformers); 20 greedy tokens equal to transformers' generate."""
    path, _, hf, ids = cases[name]
    model = core.load_model(path)
    whole = check_chunked(model, ids)
    assert float(np.max(np.abs(whole - hf))) < HF_TOL * float(np.max(np.abs(hf)))
    assert greedy(model, ids[:10], 20, block=4) == hf_greedy(path, ids[:10], 20)


@pytest.mark.parametrize("name", ["qwen3", "qwen3_moe"])
def test_batch_invariant(cases: dict[str, Any], name: str) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits."""
    check_invariance(core.load_model(cases[name][0]), CASES[name][0]["vocab_size"], seed=5)


def test_other_modes(cases: dict[str, Any]) -> None:
    """8-bit activations leave FP8 matrices on their f32 path (only the GGUF integer types take int8
    activations); dtype bfloat16 rounds the dequantized weights to bf16 (transformers' own CPU default
    for FP8 folders: each weight E4M3 x scale in float32, then bf16) and the activations: both as the
    twin does (bfloat16: most tokens within float32 rounding of the twin's bf16 emulation, the rest, where a
    value on a bf16 rounding boundary landed apart and moved the tokens after it, well under the distance to
    the float32 numerics)."""
    path, _, hf, ids = cases["qwen3"]
    config, weights = ref_loader.load_weights(path)
    scale = float(np.max(np.abs(hf)))
    model = core.load_model(path, quantized_activations=True)
    twin = ref_model.forward(config, weights, ids, quantized_activations=True,
                             int8_matrices=model.int8_matrices)  # fmt: skip
    assert float(np.max(np.abs(core.model_logits(model, ids) - twin))) < TWIN_TOL * scale
    got = core.model_logits(core.load_model(path, dtype="bfloat16"), ids)
    twin = ref_model.forward(config, ref_model.bf16_matrices(config, weights), ids, bf16_compute=True)
    per_token, to_exact = np.max(np.abs(got - twin), axis=-1), np.max(np.abs(got - hf))
    assert np.mean(per_token < TWIN_TOL * scale) >= 0.5, per_token
    assert per_token.max() < 0.5 * to_exact and to_exact < 0.05 * scale, (per_token.max(), to_exact)


def test_refusals_and_malformed_files(cases: dict[str, Any], tmp_path: Path) -> None:
    """Options ossa does not run (E5M2, FP4 experts, blocks narrower than 128 columns, malformed block
    sizes) are refused by name by both loaders; a NaN code, a missing, misshapen or invalid scale, an FP8
    matrix of a width not a multiple of 128 and an E5M2 tensor are ModelErrors, never a crash."""
    import torch
    from safetensors.torch import load_file

    src = cases["qwen3"][0]
    q = json.loads((Path(src) / "config.json").read_text())["quantization_config"]
    (tmp_path / "cfg").mkdir()
    check_config_refusals(src, tmp_path / "cfg", [
        ({"quantization_config": {**q, "fmt": "e5m2"}}, "fmt 'e5m2'"),
        ({"quantization_config": {**q, "expert_dtype": "fp4"}}, "expert_dtype 'fp4'"),
        ({"quantization_config": {**q, "weight_block_size": [128, 64]}}, "multiple of 128 columns"),
        ({"quantization_config": {**q, "weight_block_size": [128]}}, "two positive integers"),
        ({"quantization_config": {**q, "scale_fmt": "int"}}, "scale_fmt 'int'"),
        ({"quantization_config": {**q, "weight_block_size": None}}, "must hold 1 x 1 scales"),
    ])  # fmt: skip
    stored = load_file(str(Path(src) / "model.safetensors"))
    name = "model.layers.1.mlp.up_proj.weight"
    nan = dict(stored)
    nan[name] = stored[name].clone()
    nan[name].view(torch.uint8)[3, 5] = 0xFF
    no_scale = {k: v for k, v in stored.items() if k != name + "_scale_inv"}
    bad_shape = dict(stored, **{name + "_scale_inv": stored[name + "_scale_inv"][:, :1].contiguous()})
    scale = stored[name + "_scale_inv"]
    inf_scale = dict(stored, **{name + "_scale_inv": torch.full_like(scale, float("inf"))})
    narrow = dict(
        stored, **{name: stored[name][:, :64].contiguous(), name + "_scale_inv": scale[:, :1].contiguous()}
    )
    e5m2 = dict(stored, **{name: stored[name].float().to(torch.float8_e5m2)})
    cube = dict(stored, **{name: stored[name].reshape(3, 128, 256).contiguous()})
    check_file_refusals(src, tmp_path, [
        (nan, "NaN"), (no_scale, "_scale_inv"), (bad_shape, "must hold 3 x 2 scales"),
        (inf_scale, "invalid scale"), (narrow, "multiple of 128"), (e5m2, "E5M2"), (cube, "3 dimensions"),
    ])  # fmt: skip


def test_inspect(cases: dict[str, Any]) -> None:
    text = models.format_inspect(models.inspect(cases["qwen3"][0]))
    assert "FP8 E4M3 x14" in text and "FP8 scales x14" in text, text
    assert "quantized     FP8 E4M3 weights, blocks of 128 x 128 (quant_method fp8)" in text, text


def test_engine(default_model_path: str, tmp_path: Path) -> None:
    """An FP8 Qwen3 model with GPT-2's tokenizer through LLM: batched = alone = the paged runner's greedy
    decode, prefix-cache hits the same, the twin engine the same tokens (and seeded forks), and preempted
    sequences recomputed to the same tokens."""
    folder = make_hf_model(tmp_path / "float", seed=9, **dict(QWEN3, vocab_size=50257, bos_token_id=None,
                                                              eos_token_id=50256))  # fmt: skip
    check_engine_gpt2(pack_fp8(folder, tmp_path / "packed"), default_model_path)
