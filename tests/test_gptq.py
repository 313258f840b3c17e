"""GPTQ, AWQ and AutoRound folders (quantization_config quant_method "gptq": AutoGPTQ's / GPTQModel's
releases, e.g. Qwen's *-GPTQ-Int4 / -Int8; "awq": AutoAWQ's GEMM checkpoints, e.g. Qwen's *-AWQ; "auto-round":
Intel's AutoRound, packed as either) on tiny random models built by transformers and packed by AutoRound's
own modules (tiny_models.pack_gptq: auto-round's torch QuantLinear for GPTQ's layout, its WQLinear_GEMM for
AWQ's), plus one folder written end to end by AutoRound itself.

The oracle: AutoRound's own reading of each matrix (its GPTQ module's dequantization, v1's zeros plus one; its
AWQ dequantize_gemm; tiny_models.gptq_dequantized), put into transformers' float32 model
(tiny_models.gptq_float_folder: transformers runs GPTQ / AWQ only through GPTQModel, which needs a newer
torch than this project's). ossa stores each matrix as the smallest GGUF block type holding q - zero exactly
(Q4_0, Q5_0, Q8_0; F32 where a value or a scale does not fit), so the weights are AutoRound's bitwise and the
logits agree to float32 summation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from tiny_models import (
    check_chunked,
    check_config_refusals,
    check_engine_gpt2,
    check_file_refusals,
    golden,
    gptq_act_order,
    gptq_dequantized,
    gptq_float_folder,
    greedy,
    hf_greedy,
    hf_logits,
    make_hf_model,
    pack_gptq,
    twin_tol,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader

HF_TOL = 1e-5
LLAMA = dict(arch="llama", hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256,
             vocab_size=160)  # fmt: skip
QWEN2 = dict(arch="qwen2", hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=384,
             vocab_size=150)  # fmt: skip
QWEN3 = dict(arch="qwen3", hidden_size=192, num_layers=2, num_heads=3, num_kv_heads=1, head_dim=64,
             intermediate_size=320, vocab_size=170, tie=True)  # fmt: skip
QWEN3_MOE = dict(arch="qwen3_moe", hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32,
                 intermediate_size=256, vocab_size=150, num_experts=4, num_experts_per_tok=2,
                 moe_intermediate_size=128, norm_topk_prob=True, mlp_only_layers=[1])  # fmt: skip
# name -> (make_hf_model keywords, pack_gptq keywords, the GGUF types ossa stores the matrices as)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], set[str]]] = {
    "gptq": (LLAMA, {}, {"Q4_0"}),  # (AutoGPTQ's default: 4 bits, groups of 128, symmetric)
    "gptq-asym-g32": (QWEN3, dict(group=32, symmetric=False), {"Q5_0"}),  # (tied embeddings)
    "gptq-int8": (QWEN2, dict(bits=8, group=None), {"Q8_0"}),  # (Qwen2's q / k / v biases)
    "gptq-int2": (LLAMA, dict(bits=2, group=32), {"Q4_0"}),
    "gptq-v2": (LLAMA, dict(kind="gptq_v2", group=64, symmetric=False), {"Q5_0"}),
    "gptq-int8-asym": (LLAMA, dict(bits=8, symmetric=False), {"F32"}),  # (q - zero beyond 8 bits)
    "gptq-f32-scales": (LLAMA, dict(scale_dtype="float32"), {"F32"}),  # (scales not f16 numbers)
    "gptq-bf16-scales": (LLAMA, dict(scale_dtype="bfloat16"), {"Q4_0"}),
    "gptq-lm-head": (LLAMA, dict(lm_head=True), {"Q4_0"}),
    "awq": (QWEN2, dict(kind="awq", symmetric=False), {"Q5_0"}),  # (AutoAWQ's default: zero points, g128)
    "awq-sym-g32": (LLAMA, dict(kind="awq", group=32), {"Q4_0"}),
    "auto-round": (LLAMA, dict(kind="auto_round:auto_gptq"), {"Q4_0"}),
    "auto-round-v2": (LLAMA, dict(kind="auto_round", symmetric=False), {"Q5_0"}),
    "auto-round-awq": (QWEN3, dict(kind="auto_round:auto_awq", symmetric=False, group=64), {"Q5_0"}),
    "gptq-moe": (QWEN3_MOE, {}, {"Q4_0"}),
    # Act-order (desc_act): each matrix stored with its columns sorted by group, its input gathered so;
    # q / k / v and gate / up sharing one order (as GPTQ gives them) or each its own (the per-matrix paths)
    "gptq-act-order": (QWEN2, dict(act_order="shared"), {"Q4_0"}),
    "gptq-act-order-own": (LLAMA, dict(act_order="own", group=32, symmetric=False), {"Q5_0"}),
    "gptq-act-order-moe": (QWEN3_MOE, dict(act_order="own"), {"Q4_0"}),
    "awq-moe": (QWEN3_MOE, dict(kind="awq", symmetric=False), {"Q5_0"}),
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str, np.ndarray, list[int]]]:
    """name -> (quantized folder, its float folder, transformers' float32 logits of AutoRound's reading of
    the quantized weights, token ids)."""
    root = tmp_path_factory.mktemp("gptq")
    out = {}
    for i, (name, (kw, pack_kw, _)) in enumerate(CASES.items()):
        float_dir = make_hf_model(root / f"{name}-float", seed=90 + i, **kw)
        act_order = pack_kw.get("act_order")
        path = pack_gptq(float_dir, root / (name + "-packed" if act_order else name),
                         **{k: v for k, v in pack_kw.items() if k != "act_order"})  # fmt: skip
        if act_order:
            path = gptq_act_order(path, root / name, shared=act_order == "shared", seed=i)
        ids = np.random.default_rng(i).integers(0, kw["vocab_size"], 40).tolist()
        out[name] = (path, float_dir, hf_logits(gptq_float_folder(path, root / f"{name}-dq"), ids), ids)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_weights_are_autorounds(cases: dict[str, Any], name: str) -> None:
    """Every quantized matrix as the twin holds it and as ossa stores it (dequantize_tensor under the twin's
    canonical name) equals AutoRound's own dequantization, bitwise; stored as the expected GGUF type."""
    path = cases[name][0]
    want = gptq_dequantized(path)
    _, weights = ref_loader.load_weights(path)
    model = core.load_model(path)
    found = 0
    for key, w in weights.items():
        if not isinstance(w, np.ndarray) or w.ndim != 2:
            continue
        if any(v.shape == w.shape and np.array_equal(v, w) for v in want.values()):
            found += 1
            assert np.array_equal(core.dequantize_tensor(model, key), w), key
            assert core.tensor_type(model, key) in CASES[name][2], (key, core.tensor_type(model, key))
    assert found == len(want), (found, len(want))


@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_hf_and_twin(cases: dict[str, Any], name: str) -> None:
    path, float_dir, hf, ids = cases[name]
    g = golden(path, ids, hf)
    assert g.err_twin < twin_tol(g.model), g.err_twin
    assert g.err_hf < max(HF_TOL, twin_tol(g.model)) and g.twin_hf < HF_TOL, (g.err_hf, g.twin_hf)
    assert g.config == g.model.config
    float_logits = core.model_logits(core.load_model(float_dir), ids)
    assert float(np.max(np.abs(float_logits - hf))) > 1e-3 * float(np.max(np.abs(hf)))


@pytest.mark.parametrize("name", ["gptq", "awq", "gptq-moe", "gptq-act-order", "gptq-act-order-own"])
def test_chunked_prefill_greedy_and_batch_invariance(cases: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens bitwise equal; 20 greedy tokens equal to transformers' generate on the
    dequantized weights; batch invariance."""
    path, _, _, ids = cases[name]
    model = core.load_model(path)
    check_chunked(model, ids)
    dq = str(Path(path).parent / f"{name}-dq")
    assert greedy(model, ids[:10], 20, block=4) == hf_greedy(dq, ids[:10], 20)
    check_invariance(model, CASES[name][0]["vocab_size"], seed=7)


def test_autoround_end_to_end(tmp_path: Path) -> None:
    """A folder written by AutoRound itself (its RTN mode, format "auto_round": the auto_round:auto_gptq
    packing, a bf16 model's f16 scales): loaded as AutoRound's own reading of it, logits as transformers'
    float32 model of those weights and as the twin's."""
    import transformers
    from auto_round import AutoRound
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    float_dir = make_hf_model(tmp_path / "float", seed=5, **LLAMA)
    vocab = {f"t{i}": i for i in range(LLAMA["vocab_size"])}
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")),
                                               unk_token="t0")  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_pretrained(float_dir)
    ar = AutoRound(model, tokenizer=tok, bits=4, group_size=32, sym=True, iters=0, disable_opt_rtn=True)
    ar.quantize_and_save(str(tmp_path / "ar"), format="auto_round")
    path = str(next(p.parent for p in (tmp_path / "ar").rglob("config.json")))
    q = json.loads((Path(path) / "config.json").read_text())["quantization_config"]
    assert q["quant_method"] == "auto-round" and q["packing_format"] == "auto_round:auto_gptq", q
    want = gptq_dequantized(path)
    m = core.load_model(path)
    _, weights = ref_loader.load_weights(path)
    assert sum(any(np.array_equal(v, w) for v in want.values()) for w in weights.values()
               if isinstance(w, np.ndarray) and w.ndim == 2) == len(want) == 14  # fmt: skip
    ids = np.random.default_rng(3).integers(0, LLAMA["vocab_size"], 30).tolist()
    g = golden(path, ids, hf_logits(gptq_float_folder(path, tmp_path / "dq"), ids))
    assert g.err_hf < max(HF_TOL, twin_tol(m)) and g.twin_hf < HF_TOL and g.err_twin < twin_tol(m)


def test_refusals_and_malformed_files(cases: dict[str, Any], tmp_path: Path) -> None:
    """Layouts ossa does not run (AWQ's GEMV packing, Marlin / other checkpoint formats, AutoRound's other
    packings and data types, activation quantization) are refused by name by both loaders; a g_idx out of
    range or of the wrong length, 3 bits, missing or misshapen zero points and scales, non-finite scales
    are ModelErrors, never a crash."""
    import torch
    from safetensors.torch import load_file

    src = cases["gptq"][0]
    q = json.loads((Path(src) / "config.json").read_text())["quantization_config"]
    (tmp_path / "cfg").mkdir()
    check_config_refusals(src, tmp_path / "cfg", [
        ({"quantization_config": {**q, "checkpoint_format": "marlin"}}, "checkpoint_format 'marlin'"),
        ({"quantization_config": {**q, "quant_method": "awq", "version": "gemv"}}, "version 'gemv'"),
        ({"quantization_config": {**q, "quant_method": "awq", "version": "GEMV_fast"}}, "'gemv_fast'"),
        ({"quantization_config": {**q, "quant_method": "auto-round", "packing_format": "auto_round:fp8"}},
         "packing_format 'auto_round:fp8'"),
        ({"quantization_config": {**q, "quant_method": "auto-round", "data_type": "nv_fp"}}, "data_type"),
        ({"quantization_config": {**q, "quant_method": "auto-round", "act_bits": 8}}, "act_bits 8"),
        ({"quantization_config": {**q, "quant_method": "bitsandbytes"}}, "quant_method 'bitsandbytes'"),
    ])  # fmt: skip
    stored = load_file(str(Path(src) / "model.safetensors"))
    base = "model.layers.1.mlp.down_proj."  # (256 columns: two groups of 128)
    cols = stored[base + "g_idx"].shape[0]
    out_of_range = dict(stored, **{base + "g_idx": torch.full((cols,), 2, dtype=torch.int32)})
    short_g_idx = dict(stored, **{base + "g_idx": stored[base + "g_idx"][:-1].contiguous()})
    no_zeros = {k: v for k, v in stored.items() if k != base + "qzeros"}
    no_scales = {k: v for k, v in stored.items() if k != base + "scales"}
    bad_zeros = dict(stored, **{base + "qzeros": stored[base + "qzeros"][:, :3].contiguous()})
    bad_scales = dict(stored, **{base + "scales": stored[base + "scales"][:1].contiguous()})
    inf_scales = dict(stored, **{base + "scales": torch.full_like(stored[base + "scales"], float("inf"))})
    three = dict(stored, **{base + "qzeros": torch.zeros(2, 128 * 3 // 32, dtype=torch.int32)})
    f32_words = dict(stored, **{base + "qweight": stored[base + "qweight"].float()})
    check_file_refusals(src, tmp_path, [
        (out_of_range, "holds group 2 of 2"), (short_g_idx, "g_idx' .* is malformed"), (no_zeros, "qzeros"),
        (no_scales, "scales"),
        (bad_zeros, "not 2, 4 or 8 bits"), (bad_scales, "do not fit"), (inf_scales, "invalid scale"),
        (three, "not 2, 4 or 8 bits"), (f32_words, "I32"),
    ])  # fmt: skip


def test_inspect(cases: dict[str, Any]) -> None:
    """`ossa inspect` says how each folder is quantized, and counts the weights of its packed words (32 /
    bits a word: the float model's parameters, plus the scales)."""
    for name, want in [
        ("gptq", "GPTQ int4 weights (groups of 128 columns, symmetric; GPTQ packing)"),
        ("gptq-int8", "GPTQ int8 weights (per row, symmetric; GPTQ packing)"),
        ("awq", "AWQ int4 weights (groups of 128 columns, zero points; AWQ packing)"),
        ("auto-round-awq", "AutoRound int4 weights (groups of 64 columns, zero points; AWQ packing)"),
    ]:
        info = models.inspect(cases[name][0])
        text = models.format_inspect(info)
        assert f"quantized     {want}" in text, text
        assert "packed int words" in text
        n_float = models.inspect(cases[name][1])["n_params"]
        assert n_float < info["n_params"] < 1.05 * n_float, (info["n_params"], n_float)


def test_engine(default_model_path: str, tmp_path: Path) -> None:
    """A GPTQ Llama with GPT-2's tokenizer through LLM: batched = alone = the paged runner's greedy decode,
    prefix-cache hits the same, the twin engine the same tokens, preemption recomputed to the same."""
    folder = make_hf_model(tmp_path / "float", seed=12, **dict(LLAMA, vocab_size=50257, bos_token_id=None,
                                                               eos_token_id=50256))  # fmt: skip
    check_engine_gpt2(pack_gptq(folder, tmp_path / "packed", kind="awq", symmetric=False), default_model_path)


def act_ordered(path: str) -> set[str]:
    """The twin's names of the matrices of GPTQ folder ``path`` whose g_idx is not contiguous groups."""
    from safetensors.numpy import load_file

    group = json.loads((Path(path) / "config.json").read_text())["quantization_config"]["group_size"]
    names = {"self_attn.q_proj": "wq", "self_attn.k_proj": "wk", "self_attn.v_proj": "wv",
             "self_attn.o_proj": "wo", "mlp.gate_proj": "w_gate", "mlp.up_proj": "w_up",
             "mlp.down_proj": "w_down"}  # fmt: skip
    out = set()
    for name, g in load_file(str(Path(path) / "model.safetensors")).items():
        if name.endswith(".g_idx") and not np.array_equal(g, np.arange(len(g)) // group):
            layer, rest = name.removeprefix("model.layers.").removesuffix(".g_idx").split(".", 1)
            out.add(f"layers.{layer}.{names[rest]}")
    return out


@pytest.mark.parametrize("name", ["gptq-act-order", "gptq-act-order-own"])
def test_act_order_other_modes(cases: dict[str, Any], name: str) -> None:
    """Act-order matrices keep float32 inputs under 8-bit activations (none is listed among the int8
    matrices: the twin rounds the inputs of those listed alone) and gather bf16-rounded inputs under
    dtype bfloat16 (no bf16 tiles handed over from the op before): both as the twin computes them, batch
    invariant. (bfloat16 is compared token by token, each token alone: in a sequence a value on a bf16
    rounding boundary in an early token's K / V lands apart in the two and moves every later token, ~5e-3
    of the logits, with or without act-order.)"""
    from ossa.reference import model as ref_model

    path, _, hf, ids = cases[name]
    config, weights = ref_loader.load_weights(path)
    scale = float(np.max(np.abs(hf)))
    model = core.load_model(path, quantized_activations=True)
    # (the matrices whose g_idx is not contiguous groups: a matrix of one group is ordered trivially, and
    # without AMX its Q4_0 / Q5_0 blocks take 8-bit inputs as any such matrix's do)
    ordered = act_ordered(path)
    assert ordered and not ordered & set(model.int8_matrices), model.int8_matrices
    twin = ref_model.forward(config, weights, ids, quantized_activations=True,
                             int8_matrices=model.int8_matrices)  # fmt: skip
    got = core.model_logits(model, ids)
    # (Where other matrices take 8-bit inputs, without AMX: exact on the first token, and over the
    # sequence close, as test_quant_types' quantized-activation models: a value on a rounding boundary
    # tips one way or the other with the two sides' summation orders.)
    assert float(np.max(np.abs(got[:1] - twin[:1]))) < twin_tol(model) * scale
    bound = 5e-2 if model.int8_matrices else twin_tol(model)
    assert float(np.max(np.abs(got - twin))) < bound * scale
    bf = core.load_model(path, dtype="bfloat16")
    bf16_weights = ref_model.bf16_matrices(config, weights)
    for t in ids[:8]:
        got = core.model_logits(bf, [t])
        twin = ref_model.forward(config, bf16_weights, [t], bf16_compute=True)
        assert float(np.max(np.abs(got - twin))) < twin_tol(bf) * scale
    assert float(np.max(np.abs(core.model_logits(bf, ids) - hf))) < 0.05 * scale
    check_invariance(bf, CASES[name][0]["vocab_size"], seed=3)


def test_settings_beside_config(cases: dict[str, Any], tmp_path: Path) -> None:
    """Older uploads keep the settings beside config.json (AutoGPTQ's quantize_config.json, AutoAWQ's
    quant_config.json with its own keys) and no quantization_config: read as if config.json had it, the
    same logits, the same inspect line."""
    import shutil

    for name, sidecar in [("gptq", "quantize_config.json"), ("awq", "quant_config.json")]:
        src = Path(cases[name][0])
        out = tmp_path / name
        shutil.copytree(src, out)
        cfg = json.loads((out / "config.json").read_text())
        q = cfg.pop("quantization_config")
        if name == "gptq":  # (AutoGPTQ's file: no quant_method, no checkpoint_format)
            q = {k: v for k, v in q.items() if k not in ("quant_method", "checkpoint_format")}
        else:  # (AutoAWQ's)
            q = {"zero_point": q["zero_point"], "q_group_size": q["group_size"], "w_bit": q["bits"],
                 "version": "GEMM"}  # fmt: skip
        (out / "config.json").write_text(json.dumps(cfg))
        (out / sidecar).write_text(json.dumps(q))
        ids = cases[name][3]
        want = core.model_logits(core.load_model(str(src)), ids)
        assert np.array_equal(core.model_logits(core.load_model(str(out)), ids), want)
        _, weights = ref_loader.load_weights(str(out))
        _, weights_src = ref_loader.load_weights(str(src))
        assert all(np.array_equal(weights[k], weights_src[k]) for k in weights_src)
        assert models.inspect(str(out))["quantization"] == models.inspect(str(src))["quantization"]
