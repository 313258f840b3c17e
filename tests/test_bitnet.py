"""BitNet b1.58 against Hugging Face transformers (torch CPU, float32) and the NumPy twin, on tiny random
models built by transformers and packed as transformers' BitLinear reads them (tiny_models.pack_bitnet):

- bitnet (microsoft/bitnet-b1.58-2B-4T's layout, BitNetForCausalLM): Llama's layers with an RMSNorm of the
  attention's output before o_proj (attn_sub_norm) and of the MLP's product before down_proj
  (ffn_sub_norm), a relu(gate)^2 * up MLP; its projections ternary (quantization_config quant_method
  "bitnet", packed uint8 four values a byte, a weight_scale each).
- bitnet-float: the same architecture with float weights and no quantization_config (the -bf16 master
  weights: transformers runs them as plain linear layers, and so does ossa).
- llama-bitnet: a Llama model packed the same way (Falcon3-1.58bit's kind: any architecture's nn.Linear
  layers become BitLinear; lm_head stays float).

Every BitLinear quantizes its input rows to int8 by their absolute maximum and sums integer products
(kernels/matmul_bitnet.cpp): the kernel is bitwise transformers' BitLinear (and the twin's) on the same
inputs, and batch invariant. Through a whole model, though, a value that float rounding upstream (an
attention's sum, a norm's mean: ~1e-7 apart between two implementations) leaves next to a boundary of the
int8 grid can land on the other side: that moves the matrix's output for that token by one int8 step (a
few 1e-3 of the logits' range). So the whole-model checks (check_rows) allow a few tokens such a step and
hold the rest to the usual 1e-5; a wrong kernel or layer moves every token.
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
    check_config_refusals,
    check_file_refusals,
    greedy,
    hf_greedy,
    hf_logits,
    make_hf_model,
    pack_bitnet,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model
from ossa.reference.quants import BitLinear

BITNET = dict(arch="bitnet", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=192,
              vocab_size=150, max_position_embeddings=256, rms_norm_eps=1e-5)  # fmt: skip
# A token whose logits moved by one int8 step somewhere (measured 2.8e-3 of the range: the twin on the
# bitnet-tied case, 4 of 40 tokens; ossa against transformers: 3.4e-7 on every case, every token).
STEP_TOL = 1e-2


def check_rows(got: np.ndarray, want: np.ndarray, scale: float, what: str) -> None:
    """At most a quarter of the tokens one int8 step off (STEP_TOL), every other within 1e-5."""
    err = np.max(np.abs(got - want), axis=-1) / scale
    assert float(err.max()) < STEP_TOL, (what, float(err.max()))
    assert int((err > 1e-5).sum()) <= len(err) // 4, (what, err)


# name -> (make_hf_model keywords, the packed class: transformers' BitLinear or AutoBitLinear, or None)
CASES: dict[str, tuple[dict[str, Any], str | None]] = {
    "bitnet": (BITNET, "bitlinear"),
    "bitnet-tied": (dict(BITNET, hidden_size=128, num_layers=2, num_heads=2, num_kv_heads=1,
                         intermediate_size=256, tie=True), "bitlinear"),
    # (AutoBitLinear, offline: x's dequantized int8 values q / s times the ternary weights, times the scale)
    "bitnet-auto": (BITNET, "autobitlinear"),
    "bitnet-float": (BITNET, None),
    "llama-bitnet": (dict(arch="llama", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4,
                          intermediate_size=128, vocab_size=130), "bitlinear"),
}  # fmt: skip


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (folder, transformers' float32 logits, token ids)."""
    root = tmp_path_factory.mktemp("bitnet")
    out = {}
    for i, (name, (kw, linear_class)) in enumerate(CASES.items()):
        path = make_hf_model(root / f"{name}-float", seed=30 + i, **kw)
        if linear_class is not None:
            path = pack_bitnet(path, root / name, linear_class)
        ids = np.random.default_rng(i).integers(0, kw["vocab_size"], N_TOKENS).tolist()
        out[name] = (path, hf_logits(path, ids), ids)
    return out


@pytest.mark.parametrize("rows", [1, 3, 4, 7, 33])
def test_kernel_is_transformers_bitlinear(rows: int) -> None:
    """The C++ kernel, the twin's BitLinear and transformers' BitLinear module (loaded with the same packed
    weights and scale) on the same inputs: bitwise equal, including values on the int8 grid's ties (round
    half to even), rows of zeros (the 1e-5 floor) and rows of one large value."""
    import torch
    from transformers.integrations.bitnet import BitLinear as HfBitLinear
    from transformers.integrations.bitnet import pack_weights

    rng = np.random.default_rng(rows)
    out_rows, cols = 96, 320
    ternary = rng.integers(-1, 2, (out_rows, cols)).astype(np.int8)
    scale = np.float32(0.37)
    x = rng.standard_normal((rows, cols)).astype(np.float32) * np.float32(3.0)
    x[0, :5] = np.float32(127.0 / 254.0) * np.float32([1, 3, 5, -3, -5])  # (x * s on .5 ties)
    x[0, 5] = np.float32(1.0)
    if rows > 2:
        x[1] = 0.0
        x[2, :] = 1e-3
        x[2, 7] = 1e4
    hf = HfBitLinear(cols, out_rows, bias=False, dtype=torch.float32)
    hf.weight.copy_(pack_weights(torch.from_numpy(ternary.copy())))
    hf.weight_scale.fill_(float(scale))
    with torch.no_grad():
        want = hf(torch.from_numpy(x)).numpy()
    got = core.kernel_bitnet_matmul(ternary, float(scale), x)
    twin = BitLinear(ternary, float(scale)).apply(x)
    assert np.array_equal(got, want) and np.array_equal(twin, want)
    for bad in (ternary.astype(np.int8) * 2, ternary[:, :100].copy()):
        with pytest.raises(ValueError):
            core.kernel_bitnet_matmul(np.ascontiguousarray(bad), float(scale), x[:, : bad.shape[1]].copy())


@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_hf_and_twin(cases: dict[str, Any], name: str) -> None:
    path, hf, ids = cases[name]
    model = core.load_model(path)
    got = core.model_logits(model, ids)
    config, weights = ref_loader.load_weights(path)
    assert config == model.config
    twin = ref_model.forward(config, weights, ids)
    scale = float(np.max(np.abs(hf)))
    check_rows(got, hf, scale, "ossa vs transformers")
    check_rows(got, twin, scale, "ossa vs the twin")
    check_rows(twin, hf, scale, "the twin vs transformers")
    if CASES[name][1] is None:  # (float weights: no steps at all)
        assert float(np.max(np.abs(got - hf))) < 1e-5 * scale
    c = model.config
    assert c["arch"] == CASES[name][0]["arch"]
    assert c["sub_norms"] == c["glu_relu2"] == (c["arch"] == "bitnet")
    kinds = {t[1] for t in model.tensors()}
    assert ("U8" in kinds) == (CASES[name][1] is not None)
    config, weights = ref_loader.load_weights(path)
    packed = [k for k, v in weights.items() if isinstance(v, BitLinear)]
    assert len(packed) == (7 * CASES[name][0]["num_layers"] if CASES[name][1] else 0)
    assert all(weights[k].scale_mul == (CASES[name][1] == "autobitlinear") for k in packed)
    assert "output" not in packed


@pytest.mark.parametrize("name", ["bitnet", "bitnet-auto", "llama-bitnet"])
def test_chunked_prefill_and_greedy(cases: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner bitwise equal (and close to transformers and
    to the twin's runner); 20 greedy tokens equal to transformers' generate."""
    from tiny_models import runner_logits

    from ossa.reference.runner import ModelRunner as RefRunner

    path, hf, ids = cases[name]
    model = core.load_model(path)
    n = len(ids)
    whole = runner_logits(core.ModelRunner(model, (n + 3) // 4, 4, n), ids, n)
    for chunk in (1, 5):
        np.testing.assert_array_equal(
            runner_logits(core.ModelRunner(model, (n + 3) // 4, 4, n), ids, chunk), whole
        )
    scale = float(np.max(np.abs(hf)))
    check_rows(whole, hf, scale, "runner vs transformers")
    config, weights = ref_loader.load_weights(path)
    twin = runner_logits(RefRunner(config, weights, (n + 3) // 4, 4), ids, 5)
    check_rows(whole, twin, scale, "runner vs the twin's runner")
    assert greedy(model, ids[:10], 20, block=4) == hf_greedy(path, ids[:10], 20)


@pytest.mark.parametrize("name", ["bitnet", "bitnet-tied"])
def test_batch_invariant(cases: dict[str, Any], name: str) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits (the int8
    rows of each token are its own; the integer sums exact)."""
    check_invariance(core.load_model(cases[name][0]), CASES[name][0]["vocab_size"], seed=3)


def test_quantization_is_used_and_other_modes_keep_it(cases: dict[str, Any]) -> None:
    """The packed model is not its float twin (the int8 activations and ternary weights are used); loaded
    with 8-bit activations or dtype bfloat16 the BitNet matrices keep their own int8 rows (only the float
    matrices' inputs change, as the twin rounds them)."""
    path, hf, ids = cases["bitnet"]
    got = core.model_logits(core.load_model(path), ids)
    float_logits = cases["bitnet-float"][1]
    scale = float(np.max(np.abs(hf)))
    assert float(np.max(np.abs(got - float_logits))) > 1e-2 * scale
    config, weights = ref_loader.load_weights(path)
    for kw in ({"quantized_activations": True}, {"dtype": "bfloat16"}):
        model = core.load_model(path, **kw)
        q = core.model_logits(model, ids)
        bf16 = kw.get("dtype") == "bfloat16"
        w = ref_model.bf16_matrices(config, weights) if bf16 else weights
        twin = ref_model.forward(config, w, ids, quantized_activations=bool(kw.get("quantized_activations")),
                                 bf16_compute=bf16, int8_matrices=model.int8_matrices)  # fmt: skip
        check_rows(q, twin, scale, str(kw))


def test_refusals_and_malformed_files(cases: dict[str, Any], tmp_path: Path) -> None:
    """transformers' other BitNet classes (autobitlinear, online quantization, an RMSNorm inside each
    BitLinear) are refused by name by both loaders; a packed value of 3, a missing or invalid scale and a
    matrix whose rows are not a multiple of 64 are ModelErrors, never a crash."""
    from safetensors.numpy import load_file, save_file

    src = cases["bitnet"][0]
    q = json.loads((Path(src) / "config.json").read_text())["quantization_config"]
    (tmp_path / "cfg").mkdir()
    check_config_refusals(src, tmp_path / "cfg", [
        ({"quantization_config": {**q, "linear_class": "hqqlinear"}}, "hqqlinear"),
        ({"quantization_config": {**q, "quantization_mode": "online"}}, "online"),
        ({"quantization_config": {**q, "use_rms_norm": True}}, "use_rms_norm"),
        ({"hidden_act": "silu"}, "silu"),
        ({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}, "'bitsandbytes'"),
        ({"quantization_config": {"quant_method": "hqq", "nbits": 4}}, "quant_method 'hqq'"),
    ])  # fmt: skip
    stored = load_file(str(Path(src) / "model.safetensors"))
    name = "model.layers.1.mlp.up_proj.weight"
    bad_code = dict(stored)
    bad_code[name] = stored[name].copy()
    bad_code[name][0, 0] = 0xFF
    no_scale = {k: v for k, v in stored.items() if k != name + "_scale"}
    zero_scale = dict(stored, **{name + "_scale": np.zeros(1, np.float32)})
    narrow = dict(stored, **{name: stored[name][:, :48].copy()})
    bad = [
        (bad_code, "outside -1, 0, 1"),
        (no_scale, "_scale"),
        (zero_scale, "scale"),
        (narrow, "multiple of 64"),
    ]
    check_file_refusals(src, tmp_path, bad, save=save_file)


def test_inspect(cases: dict[str, Any]) -> None:
    text = models.format_inspect(models.inspect(cases["bitnet"][0]))
    assert "BitNet ternary x21" in text, text
    assert "mlp           down(norm(relu(gate x)^2 * up x))" in text, text


def test_engine(default_model_path: str, tmp_path: Path) -> None:
    """A packed BitNet model with GPT-2's tokenizer through LLM: batched = alone = the paged runner's greedy
    decode, prefix-cache hits the same, the twin engine the same tokens (and seeded forks), and preempted
    sequences recomputed to the same tokens."""
    from test_tokenizer import load_vocab
    from tiny_models import check_engine

    folder = make_hf_model(tmp_path / "float", seed=7, **dict(BITNET, vocab_size=50257, bos_token_id=None,
                                                              eos_token_id=50256))  # fmt: skip
    packed = pack_bitnet(folder, tmp_path / "packed")
    shutil.copy(Path(load_vocab("gpt2", default_model_path).path) / "tokenizer.json", packed)
    check_engine(packed)
