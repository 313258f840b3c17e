"""Mixture-of-experts models (Qwen3-MoE, Qwen2-MoE, Mixtral): golden tests of the C++ forward pass
against Hugging Face transformers and the NumPy twin (ossa.reference.moe) on tiny random models with
odd shapes, from safetensors folders and GGUF conversions (3-D expert stacks, or one tensor per
expert as older Mixtral files), greedy decoding against transformers, routing ties, batch
invariance, and clear errors for inconsistent files.

Every optional feature is on in some case: Qwen2-MoE's shared expert and its sigmoid gate,
norm_topk_prob on and off, decoder_sparse_step and mlp_only_layers (dense layers between MoE ones),
tied embeddings, qkv bias, q/k norm.

Stated tolerances: max |logit error| / max |HF logit|. Safetensors and GGUF F32 against transformers
1e-5 (measured ~5e-7). F16 and Q8_0 GGUFs only against the twin on the same dequantized weights,
1e-5: their weight rounding moves the router's logits enough to switch an expert now and then, a
discontinuous change no tolerance on logits describes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from quant_blocks import split_product_error
from test_batch_invariance import check_invariance
from tiny_models import (
    N_TOKENS,
    TWIN_TOL,
    build_hf_cases,
    case_file,
    golden,
    greedy,
    hf_greedy,
    hf_to_gguf,
    make_hf_model,
)

from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

CASES: dict[str, dict[str, Any]] = {
    # q/k norm, norm_topk_prob, a dense layer in the middle (mlp_only_layers), head_dim 24 != 64/4.
    "qwen3_moe": dict(
        arch="qwen3_moe", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=24,
        intermediate_size=80, vocab_size=150, num_experts=5, num_experts_per_tok=2,
        moe_intermediate_size=64, norm_topk_prob=True, mlp_only_layers=[1],
    ),
    # Weights not renormalised, every second layer sparse, tied embeddings, experts of 40 rows (not a
    # multiple of 32: the GGUF conversions keep those F16).
    "qwen3_moe_sparse": dict(
        arch="qwen3_moe", hidden_size=96, num_layers=2, num_heads=3, num_kv_heads=1, head_dim=32,
        intermediate_size=64, vocab_size=130, num_experts=7, num_experts_per_tok=3,
        moe_intermediate_size=40, norm_topk_prob=False, decoder_sparse_step=2, tie=True,
    ),
    # Shared expert (56 rows) with its gate, qkv bias, every second layer sparse, not renormalised.
    "qwen2_moe": dict(
        arch="qwen2_moe", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=96, vocab_size=140, num_experts=6, num_experts_per_tok=3,
        moe_intermediate_size=32, shared_expert_intermediate_size=56, norm_topk_prob=False,
        decoder_sparse_step=2,
    ),
    # Shared expert, renormalised, the first layer dense.
    "qwen2_moe_norm": dict(
        arch="qwen2_moe", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4,
        intermediate_size=96, vocab_size=140, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=64, shared_expert_intermediate_size=64, norm_topk_prob=True,
        mlp_only_layers=[0],
    ),
    # Mixtral: every layer sparse, always renormalised; GGUF as "llama" (interleaved RoPE).
    "mixtral": dict(
        arch="mixtral", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=96, vocab_size=150, num_local_experts=4, num_experts_per_tok=2,
    ),
}  # fmt: skip
HF_TOL = 1e-5  # against transformers, checked for safetensors and F32 (HF's float32 weights kept)


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("moe"), CASES, seed=10, n_tokens=N_TOKENS)


def model_path(hf_models: dict[str, Any], name: str, fmt: str, tmp: pytest.TempPathFactory) -> str:
    return case_file(hf_models, name, fmt, tmp, split_experts=name == "mixtral")


@pytest.mark.parametrize("fmt", ["safetensors", "F32", "F16", "Q8_0"])
@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = model_path(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    model, config, err_hf, err_twin, twin_hf = golden(path, ids, hf_logits)
    assert model.config == config
    assert config["moe"]["n_expert"] == CASES[name].get("num_experts", CASES[name].get("num_local_experts"))
    assert err_twin < TWIN_TOL, f"{name}/{fmt}: max |ossa - twin| / max |HF| = {err_twin}"
    if fmt in ("safetensors", "F32"):
        assert err_hf < HF_TOL, f"{name}/{fmt}: max |ossa - HF| / max |HF| = {err_hf}"
        assert twin_hf < HF_TOL


def test_moe_config_and_layers(hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    expect = {
        "qwen3_moe": ([0, 2], True, 0),
        "qwen3_moe_sparse": ([1], False, 0),
        "qwen2_moe": ([1], False, 56),
        "qwen2_moe_norm": ([1], True, 64),
        "mixtral": ([0, 1], True, 0),
    }
    for name, (layers, norm, shared) in expect.items():
        for fmt in ("safetensors", "F32"):
            moe = core.load_model(model_path(hf_models, name, fmt, tmp_path_factory)).config["moe"]
            assert (moe["layers"], moe["norm_topk_prob"], moe["n_ff_shared"]) == (layers, norm, shared), name


@pytest.mark.parametrize("name", ["qwen3_moe", "qwen2_moe", "mixtral"])
def test_greedy_matches_transformers(hf_models: dict[str, Any], name: str) -> None:
    """Prefill then one-token decode steps through the paged runner, against HF generate."""
    path, _, ids = hf_models[name]
    prompt = ids[:9]
    assert greedy(core.load_model(path), prompt, 16) == hf_greedy(path, prompt, 16)


def test_router_ties_pick_the_lowest_expert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Experts 0, 2 and 4 share a router row, so their logits tie exactly for every token; the top-2
    must then take the lowest indices among the tied ones, as the twin does (transformers' topk leaves
    ties unspecified). The tied experts differ, so the other choice moves the logits far."""
    from safetensors.numpy import load_file, save_file

    from ossa.reference import moe as ref_moe

    kw = dict(CASES["qwen3_moe"], num_layers=1, mlp_only_layers=[])
    path = make_hf_model(tmp_path / "tie", seed=3, **kw)
    tensors = load_file(f"{path}/model.safetensors")
    router = tensors["model.layers.0.mlp.gate.weight"]
    router[2] = router[4] = router[0]
    save_file(tensors, f"{path}/model.safetensors", metadata={"format": "pt"})
    ids = np.random.default_rng(5).integers(0, kw["vocab_size"], 24).tolist()
    config, weights = ref_loader.load_weights(path)
    got = core.model_logits(core.load_model(path), ids)
    twin = ref_model.forward(config, weights, ids)
    scale = float(np.max(np.abs(twin)))
    assert np.max(np.abs(got - twin)) / scale < TWIN_TOL

    route = ref_moe.route

    def highest_first(
        logits: np.ndarray, k: int, norm: bool, softmax_topk: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """The twin's routing with ties broken the other way: run it on the experts in reverse order."""
        n = len(logits)
        chosen_reversed, weight_reversed = route(logits[::-1].copy(), k, norm, softmax_topk)
        order = np.argsort(n - 1 - chosen_reversed)
        return (n - 1 - chosen_reversed)[order], weight_reversed[order]

    monkeypatch.setattr(ref_moe, "route", highest_first)
    other = ref_model.forward(config, weights, ids)
    assert np.max(np.abs(got - other)) / scale > 1e-3


@pytest.mark.parametrize("fmt", ["F32", "BF16", "Q4_1"])
@pytest.mark.parametrize("name", ["qwen2_moe_norm", "mixtral"])
def test_moe_is_batch_invariant(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Alone, in a batch of 8, chunked prefill (1, 7, 64), 1 and 2 threads: bitwise equal logits."""
    path = hf_to_gguf(hf_models[name][0], tmp_path_factory.mktemp("inv") / f"{name}-{fmt}.gguf", fmt)
    check_invariance(core.load_model(path), CASES[name]["vocab_size"], seed=7)


def test_moe_safetensors_is_batch_invariant(hf_models: dict[str, Any]) -> None:
    check_invariance(core.load_model(hf_models["qwen3_moe"][0]), CASES["qwen3_moe"]["vocab_size"], seed=8)


def _edit_config(src: str, dst: Path, **changes: Any) -> str:
    import shutil

    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(num_experts_per_tok=6), "experts used per token 6"),
        (dict(num_experts_per_tok=0), "experts used per token 0"),
        (dict(num_local_experts=6), r"tensor 'model.layers.0.mlp.gate.weight'.*expected 6 x 64"),
        (dict(moe_intermediate_size=48), "shape mismatch for tensor 'model.layers.0.mlp.experts.0"),
        (dict(decoder_sparse_step=0), "decoder_sparse_step"),
        (dict(mlp_only_layers="1"), "mlp_only_layers"),
    ],
)
def test_inconsistent_configs_raise(
    hf_models: dict[str, Any], tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    path = _edit_config(hf_models["qwen3_moe"][0], tmp_path / "m", **changes)
    with pytest.raises(core.ModelError, match=message):
        core.load_model(path)


def test_gguf_without_experts_raises(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """A qwen3moe GGUF without one layer's expert up matrices names the missing tensor."""
    import shutil

    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "cut"
    shutil.copytree(hf_models["qwen3_moe"][0], folder)
    tensors = load_file(folder / "model.safetensors")
    kept = {
        k: v
        for k, v in tensors.items()
        if not (k.startswith("model.layers.2.mlp.experts.") and "up_proj" in k)
    }
    save_file(kept, folder / "model.safetensors", metadata={"format": "pt"})
    path = hf_to_gguf(folder, tmp_path / "cut.gguf", "F32")
    with pytest.raises(core.ModelError, match="missing tensor 'blk.2.ffn_up_exps.weight'"):
        core.load_model(path)


def test_inspect_describes_experts(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    from ossa import models

    info = models.inspect(model_path(hf_models, "qwen2_moe", "F32", tmp_path_factory))
    assert (info["arch"], info["n_expert"], info["n_expert_used"], info["n_ff_expert"]) == (
        "qwen2moe",
        6,
        3,
        32,
    )
    assert (info["n_ff_shared"], info["moe_layers"]) == (56, 1)
    assert "experts       6 of 32 rows, 3 used per token, in 1 of 2 layers, a shared expert of 56" in (
        models.format_inspect(info)
    )
    assert models.inspect(hf_models["qwen3_moe"][0])["moe_layers"] == 2


def test_quantized_activations_match_twin(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """8-bit activation blocks (load option quantized_activations) reach the experts' and the shared
    expert's matmuls as the twin rounds them; the router keeps exact f32 inputs. Without repacking
    (amx=False) every Q8_0 matrix takes them (matmul_q8.cpp); with the build's repacked kernels, the
    matrices the model lists (the int8 kernels'; an AMX machine's bf16 tiles keep their inputs)."""
    name = "qwen2_moe_norm"  # every matrix quantizable (rows of 64 and 96)
    path = model_path(hf_models, name, "Q8_0", tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    config, weights = ref_loader.load_weights(path)
    scale = float(np.max(np.abs(hf_logits)))
    m = core.load_model(path, amx=False, quantized_activations=True)
    twin = ref_model.forward(config, weights, ids, quantized_activations=True)
    assert float(np.max(np.abs(core.model_logits(m, ids) - twin))) / scale < TWIN_TOL
    plain = ref_model.forward(config, weights, ids)
    assert float(np.max(np.abs(plain - twin))) / scale > 10 * TWIN_TOL  # the rounding is visible
    m = core.load_model(path, quantized_activations=True)
    twin = ref_model.forward(
        config,
        weights,
        ids,
        quantized_activations=True,
        int8_matrices=m.int8_matrices,
        amx_activations=bool(m.uses_amx),
    )
    assert float(np.max(np.abs(core.model_logits(m, ids) - twin))) / scale < TWIN_TOL


def test_int8_matrices_list_the_experts(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The experts' and the shared expert's matrices take the kernels the dense ones do: where a
    build splits Q8_0 inputs into int8 pieces (VNNI or AVX2 without AMX), ``Model.int8_matrices``
    lists every Q8_0 expert matrix by the twin's name, and the twin's rounding for that name is what
    the kernel multiplies (within f32 rounding, ~1e-7; the unrounded input is > 3e-6 off)."""
    import gguf

    name = "qwen2_moe_norm"
    path = model_path(hf_models, name, "Q8_0", tmp_path_factory)
    m = core.load_model(path)
    listed = m.int8_matrices
    config, weights = ref_loader.load_weights(path)
    assert set(listed) <= set(weights)
    stacks = {t.name: t for t in gguf.GGUFReader(path).tensors}
    experts = [n for n in listed if ".experts." in n or ".shared." in n]
    if "layers.0.wq" not in listed:  # Q8_0 on f32 or AMX bf16 kernels in this build
        assert experts == []
        pytest.skip("this build does not split Q8_0 inputs into int8 pieces")
    moe = config["moe"]
    want = {f"layers.{i}.experts.{e}.{w}" for i in moe["layers"] for e in range(moe["n_expert"])
            for w in ("w_gate", "w_up", "w_down")}  # fmt: skip
    want |= {f"layers.{i}.shared.{w}" for i in moe["layers"] for w in ("w_gate", "w_up", "w_down")}
    assert set(experts) == want and all(listed[n] == 32 for n in experts)
    rng = np.random.default_rng(4)
    i = moe["layers"][0]
    for twin_name, file_name, e in [
        (f"layers.{i}.experts.2.w_up", f"blk.{i}.ffn_up_exps.weight", 2),
        (f"layers.{i}.experts.3.w_down", f"blk.{i}.ffn_down_exps.weight", 3),
        (f"layers.{i}.shared.w_gate", f"blk.{i}.ffn_gate_shexp.weight", None),
    ]:
        t = stacks[file_name]
        raw = np.ascontiguousarray(t.data if e is None else t.data[e])
        w = weights[twin_name]
        x = rng.standard_normal((5, w.shape[1])).astype(np.float32)
        x[:, ::32] *= 30
        got = core.kernel_matmul(raw, int(t.tensor_type), w.shape[0], w.shape[1], x)
        exact, unrounded = (split_product_error(got, x, w, twin_name, i8) for i8 in (listed, {}))
        assert exact < 1e-6 < 3e-6 < unrounded, (twin_name, exact, unrounded)


@pytest.mark.parametrize("name", ["qwen2_moe_norm", "mixtral"])
def test_bfloat16_matches_the_twin(hf_models: dict[str, Any], name: str) -> None:
    """dtype bfloat16 rounds the experts (and the shared expert) like every other matrix, the router
    not: the twin's bf16 emulation is several times closer than the float32 numerics; and the bf16
    model stays batch invariant."""
    path, _, ids = hf_models[name]
    got = core.model_logits(core.load_model(path, "bfloat16"), ids)
    config, weights = ref_loader.load_weights(path)
    twin = ref_model.forward(config, ref_model.bf16_matrices(config, weights), ids, bf16_compute=True)
    exact = ref_model.forward(config, weights, ids)
    to_twin, to_exact = np.max(np.abs(got - twin)), np.max(np.abs(got - exact))
    assert to_twin < 0.25 * to_exact, (to_twin, to_exact)
    check_invariance(core.load_model(path, "bfloat16"), CASES[name]["vocab_size"], seed=9)


def test_fuzz_moe_gguf_and_config(tmp_path: Path) -> None:
    """Corrupt MoE files (as test_loader_fuzz does for dense ones): every header position of a tiny
    qwen3moe GGUF set to absurd values, random damage, truncations, and absurd MoE keys in a
    config.json: ModelError or a clean load, never a crash."""
    from collections import Counter

    from test_loader_fuzz import HUGE_U32, HUGE_U64, try_load

    hf = make_hf_model(
        tmp_path / "hf", "qwen3_moe", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
        intermediate_size=32, vocab_size=32, num_experts=3, num_experts_per_tok=2,
        moe_intermediate_size=32, mlp_only_layers=[0], seed=6,
    )  # fmt: skip
    seed = Path(hf_to_gguf(hf, tmp_path / "seed.gguf", "Q8_0"))
    import gguf

    data = seed.read_bytes()
    header_end = min(t.data_offset for t in gguf.GGUFReader(seed).tensors)
    target = str(tmp_path / "mut.gguf")
    rng = np.random.default_rng(77)
    outcomes: Counter[str] = Counter()

    def run(buf: bytes | bytearray) -> None:
        with open(target, "wb") as f:
            f.write(buf)
        try_load(target, outcomes, metadata=True)

    for pos in range(4, header_end - 4, 3):
        buf = bytearray(data)
        buf[pos : pos + 8] = struct.pack("<Q", HUGE_U64[int(rng.integers(3))])
        run(buf)
        buf = bytearray(data)
        buf[pos : pos + 4] = struct.pack("<I", HUGE_U32[int(rng.integers(len(HUGE_U32)))])
        run(buf)
    for _ in range(1000):
        buf = bytearray(data)
        for _ in range(int(rng.integers(1, 9))):
            buf[int(rng.integers(0, header_end))] = int(rng.integers(0, 256))
        run(buf)
    for cut in sorted(set(rng.integers(0, len(data), 100).tolist()) | {header_end}):
        run(data[:cut])
    cfg = json.loads((Path(hf) / "config.json").read_text())
    absurd = [("num_local_experts", 2**40), ("num_local_experts", -1), ("num_experts", 0),
              ("num_experts_per_tok", 2**40), ("moe_intermediate_size", 2**40), ("moe_intermediate_size", -5),
              ("decoder_sparse_step", 2**62), ("mlp_only_layers", [2**70]), ("mlp_only_layers", [0, 1]),
              ("norm_topk_prob", 3)]  # fmt: skip
    for key, value in absurd:
        c = dict(cfg, **{key: value})
        (Path(hf) / "config.json").write_text(json.dumps(c))
        try_load(hf, outcomes, metadata=False)
    print(dict(outcomes))
    assert outcomes["error"] > 300 and outcomes["loaded"] > 0, outcomes


def test_all_layers_dense(tmp_path: Path) -> None:
    """mlp_only_layers naming every layer leaves a dense model, as transformers builds it."""
    import torch
    import transformers

    kw = dict(CASES["qwen3_moe"], num_layers=2, mlp_only_layers=[0, 1])
    path = make_hf_model(tmp_path / "dense", seed=4, **kw)
    ids = np.random.default_rng(4).integers(0, kw["vocab_size"], 20).tolist()
    with torch.no_grad():
        hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)(torch.tensor([ids]))
    expect = hf.logits[0].numpy()
    model = core.load_model(path)
    assert model.config["moe"]["n_expert"] == 0 and ref_loader.load_weights(path)[0] == model.config
    got = core.model_logits(model, ids)
    assert np.max(np.abs(got - expect)) / np.max(np.abs(expect)) < HF_TOL


def test_expert_parallel_schedule_is_invariant(tmp_path: Path) -> None:
    """With few rows per expert and at least two active experts per thread (here decode steps: 4 of 8
    experts per token, 2 threads) the experts run side by side, each on one thread; long prefills run
    them one after another, each matmul over all threads. Both schedules give every row the same
    bits: one-token chunks equal the prefill alone and in a batch."""
    kw = dict(CASES["qwen3_moe"], num_experts=8, num_experts_per_tok=4, mlp_only_layers=[])
    path = make_hf_model(tmp_path / "wide", seed=8, **kw)
    check_invariance(
        core.load_model(hf_to_gguf(path, tmp_path / "wide.gguf", "Q8_0")), kw["vocab_size"], seed=3
    )
