"""DeepSeek V2 / V3 (``deepseek2`` GGUF files, DeepseekV2/V3ForCausalLM folders) against Hugging Face
transformers (torch CPU, float32) and the NumPy twin, on tiny random models built by transformers:
from safetensors folders (the Hub's names) and from GGUF files laid out as llama.cpp's converter
writes them (kv_b split into attn_k_b / attn_v_b, or the older fused attn_kv_b).

ossa computes multi-head latent attention in the latent space (model/mla.cpp, reference/mla.py):
one cached row of qk_rope + kv_lora_rank values per token and layer, each head's k_b absorbed into
its query and v_b applied to its output; transformers expands k and v per head. The two are the
same function, so the comparisons below hold to float32 rounding.

Every case: logits against transformers and the twin, chunked prefill bitwise equal to one pass and
to the twin's runner, 30 greedy tokens equal to transformers' generate; batch invariance. Then the
routing against transformers' routers, each feature shown to matter, and bad files refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from test_more_archs import both_refuse, copy_with, moved_as_twin_predicts
from tiny_models import (
    HF_TOL,
    N_TOKENS,
    TWIN_TOL,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    gguf_without,
    greedy,
    hf_greedy,
    hf_to_gguf,
    make_hf_model,
    twin_tol,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model
from ossa.reference import moe as ref_moe

ALL = ["safetensors", "F32", "F16", "Q8_0"]
# DeepSeek-V2's YaRN (mscale = mscale_all_dim = 0.707: the scores scaled by mscale^2).
YARN_V2 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 32,
           "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}  # fmt: skip
# DeepSeek-V3's (mscale = mscale_all_dim = 1).
YARN_V3 = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16, "beta_fast": 32,
           "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}  # fmt: skip
# name -> transformers config of the tiny model
CASES: dict[str, dict[str, Any]] = {
    # DeepSeek-V2-Lite's layout: q projected directly (no q_lora_rank), layer 0 dense, then 6 experts
    # of 24 rows, top 2 by softmax, 2 shared experts, not renormalised. A latent of 130: cached rows of
    # 138 values, over 128 as the releases' 576, so the attention runs its wide-head kernel
    # (kernels/attention.cpp's attend_wide), with partial vectors.
    "v2-lite": dict(
        arch="deepseek_v2", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=150, q_lora_rank=None, kv_lora_rank=130, qk_nope_head_dim=16, qk_rope_head_dim=8,
        v_head_dim=24, n_routed_experts=6, n_shared_experts=2, num_experts_per_tok=2,
        moe_intermediate_size=24, first_k_dense_replace=1, topk_method="greedy", norm_topk_prob=False,
    ),
    # DeepSeek-V2's: q through a rank-48 bottleneck, experts chosen within the best 2 of 4 groups (a
    # group's best score), routed_scaling 2, YaRN with its mscale, odd head sizes, 5 heads.
    "v2-groups": dict(
        arch="deepseek_v2", hidden_size=80, num_layers=3, num_heads=5, num_kv_heads=5, intermediate_size=112,
        vocab_size=130, q_lora_rank=48, kv_lora_rank=40, qk_nope_head_dim=12, qk_rope_head_dim=6,
        v_head_dim=20, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=3,
        moe_intermediate_size=16, first_k_dense_replace=1, topk_method="group_limited_greedy", n_group=4,
        topk_group=2, routed_scaling_factor=2.0, rope_scaling=YARN_V2, max_position_embeddings=128,
    ),
    # DeepSeek-V3's: sigmoid scores plus a per-expert selection bias, the best 2 of 4 groups (a group's
    # two best), renormalised and scaled by 2.5. Every matrix's rows a multiple of 32 (all Q8_0).
    "v3": dict(
        arch="deepseek_v3", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=150, q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=8,
        v_head_dim=32, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
        moe_intermediate_size=32, n_group=4, topk_group=2, first_k_dense_replace=1, routed_scaling_factor=2.5,
        norm_topk_prob=True,
    ),
    # Two groups (one kept), not renormalised, 2 shared experts, every layer sparse, RoPE on the
    # halves (rope_interleave false), V3's YaRN, tied embeddings.
    "v3-halves": dict(
        arch="deepseek_v3", hidden_size=48, num_layers=2, num_heads=3, num_kv_heads=3, intermediate_size=80,
        vocab_size=130, q_lora_rank=40, kv_lora_rank=24, qk_nope_head_dim=8, qk_rope_head_dim=12,
        v_head_dim=16, n_routed_experts=6, n_shared_experts=2, num_experts_per_tok=2,
        moe_intermediate_size=24, n_group=2, topk_group=1, first_k_dense_replace=0, routed_scaling_factor=1.5,
        norm_topk_prob=False, rope_interleave=False, rope_scaling=YARN_V3, max_position_embeddings=128,
        tie=True,
    ),
    # GLM-4.7-Flash's (glm4_moe_lite: DeepSeek V3's layers, its sparse ones in mlp_layer_types; llama.cpp
    # writes it as deepseek2): a q bottleneck, wide heads for k (24 + 8) and narrow ones for v, scale 1.8.
    "glm4.7-flash": dict(
        arch="glm4_moe_lite", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, intermediate_size=96,
        vocab_size=150, q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=24, qk_rope_head_dim=8,
        v_head_dim=16, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
        moe_intermediate_size=32, routed_scaling_factor=1.8, mlp_layer_types=["dense", "sparse", "sparse"],
    ),
    # Mistral 4's (mistral4 folders; its GGUF architecture is not read): V3's layers routed by softmax
    # scores without a bias, groups scored by their two best, YaRN with RoPE on half of head_dim, Llama
    # 4's attention temperature; transformers 5's fused expert stacks (gate_up_proj, down_proj).
    "mistral4": dict(
        arch="mistral4", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=4, head_dim=16,
        intermediate_size=96, vocab_size=150, q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=8,
        qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
        moe_intermediate_size=32, n_group=2, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=1.5,
        norm_topk_prob=True, max_position_embeddings=32,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8,
                      "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                      "llama_4_scaling_beta": 0.1, "partial_rotary_factor": 0.5},
    ),
}  # fmt: skip
# Rounded weights switch an expert now and then (one score moves past another): F16 and Q8_0 files
# are held to HF_TOL on most tokens, and to the twin (same stored weights) on every one.
TYPICAL = 0.75


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("deepseek"), CASES, seed=170, n_tokens=N_TOKENS)


def err(a: np.ndarray, b: np.ndarray, scale: np.ndarray) -> float:
    return float(np.max(np.abs(a - b))) / float(np.max(np.abs(scale)))


def check_moe_logits(path: str, fmt: str, hf: np.ndarray, ids: list[int]) -> Any:
    """ossa and the twin against transformers' logits ``hf`` for an MoE model file: from a folder and
    F32 files on every token, from F16 / Q8_0 files (rounded weights switch an expert now and then)
    on most tokens; ossa against the twin on every token (with the f32 kernels to TWIN_TOL, with the
    AMX kernels to AMX_TWIN_TOL). Returns the loaded ``core.Model``."""
    model = core.load_model(path)
    got = core.model_logits(model, ids)
    config, weights = ref_loader.load_weights(path)
    assert config == model.config  # the twin reads the same hyper-parameters
    twin = ref_model.forward(config, weights, ids)
    if fmt in ("F16", "Q8_0"):
        per_token = np.max(np.abs(got - hf), axis=1) / float(np.max(np.abs(hf)))
        assert np.mean(per_token < HF_TOL[fmt]) >= TYPICAL, per_token
        assert err(got, twin, hf) < twin_tol(model)  # (latent attention: five matmuls, AMX's sums)
        exact = core.load_model(path, amx=False)  # the f32 kernels: the twin's arithmetic
        assert err(core.model_logits(exact, ids), twin, hf) < TWIN_TOL
    else:
        assert err(got, hf, hf) < HF_TOL[fmt]
        assert err(got, twin, hf) < TWIN_TOL
        if fmt in ("safetensors", "F32"):
            assert err(twin, hf, hf) < HF_TOL[fmt]
    return model


# (Mistral 4 from its folder only: llama.cpp writes it as its own mistral4 architecture)
@pytest.mark.parametrize(
    "name, fmt", [(n, f) for n in CASES for f in ALL if n != "mistral4" or f == "safetensors"]
)
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf, ids = hf_models[name]
    model = check_moe_logits(path, fmt, hf, ids)
    mla = model.config["mla"]
    kw = CASES[name]
    assert (mla["kv_lora_rank"], mla["qk_nope"], mla["qk_rope"], mla["v_head_dim"]) == (
        kw["kv_lora_rank"], kw["qk_nope_head_dim"], kw["qk_rope_head_dim"], kw["v_head_dim"],
    )  # fmt: skip
    assert mla["q_lora_rank"] == (kw["q_lora_rank"] or 0)
    # One KV head whose row is the rotated key and the latent vector: all the cache holds.
    assert model.config["n_head_kv"] == 1
    assert model.config["head_dim"] == kw["qk_rope_head_dim"] + kw["kv_lora_rank"]


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal, equal to HF and to the
    twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


@pytest.mark.parametrize("name, fmt", [("v2-lite", "Q8_0"), ("v3", "safetensors"), ("v3-halves", "F16")])
def test_batch_invariant(hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: Any) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits (the
    latent attention's per-head matmuls and the routing included); inspect describes the model."""
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    check_invariance(core.load_model(path), CASES[name]["vocab_size"], seed=len(name))
    text = models.format_inspect(models.inspect(path))
    assert "architecture  deepseek2" in text
    kw = CASES[name]
    cached = kw["qk_rope_head_dim"] + kw["kv_lora_rank"]
    assert f"attention     latent (MLA): kv rank {kw['kv_lora_rank']}," in text
    assert f"cached {cached} values per token and layer" in text
    # (the row once: K and V are the same values)
    layers, e = kw["num_layers"], 2  # (float16 cache, the default)
    assert models.inspect(path)["kv_bytes_per_token"] == layers * cached * e
    assert "(float16 rows, each K and V)" in text
    if name == "v3":
        assert (
            "experts       8 of 32 rows, 2 used per token, in 2 of 3 layers, a shared expert of 32; "
            "sigmoid scores, chosen with a per-expert bias, within the best 2 of 4 groups, renormalised, "
            "scaled by 2.5"
        ) in text
    if name == "v2-lite":
        assert "q projected directly" in text
        assert "a shared expert of 48; softmax scores" in text


@pytest.mark.parametrize("name", ["v2-groups", "v3"])
def test_fused_kv_b_file_equals_split(
    hf_models: dict[str, Any], name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A GGUF file holding kv_b whole (llama.cpp's converter before it split it: key / value lengths
    of the heads over n_head KV heads) runs as the split one: bitwise at F32, within Q8_0's rounding
    (the two files round different rows) otherwise; the twin reads it too."""
    src, hf, ids = hf_models[name]
    out = tmp_path_factory.mktemp("fused")
    for fmt in ("F32", "Q8_0"):
        split = core.load_model(hf_to_gguf(src, out / f"split-{fmt}.gguf", fmt))
        fused_path = hf_to_gguf(src, out / f"fused-{fmt}.gguf", fmt, fused_kv_b=True)
        fused = core.load_model(fused_path)
        assert fused.config == split.config
        a, b = core.model_logits(split, ids), core.model_logits(fused, ids)
        if fmt == "F32":
            np.testing.assert_array_equal(a, b)
            assert err(b, hf, hf) < HF_TOL["F32"]
        config, weights = ref_loader.load_weights(fused_path)
        assert config == fused.config
        assert err(b, ref_model.forward(config, weights, ids), hf) < twin_tol(fused)


def _hf_router(arch: str, kw: dict[str, Any], seed: int) -> Any:
    import torch
    import transformers.models.deepseek_v2.modeling_deepseek_v2 as v2
    import transformers.models.deepseek_v3.modeling_deepseek_v3 as v3
    import transformers.models.mistral4.modeling_mistral4 as m4

    cls = transformers_config(arch)
    cfg = cls(hidden_size=32, **kw)
    router = {"deepseek_v2": v2.DeepseekV2TopkRouter, "deepseek_v3": v3.DeepseekV3TopkRouter,
              "mistral4": m4.Mistral4TopkRouter}[arch](cfg)  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        router.weight.copy_(torch.randn(router.weight.shape, generator=gen))
        if arch == "deepseek_v3":
            router.e_score_correction_bias.copy_(0.3 * torch.randn(router.weight.shape[0], generator=gen))
    return router


def transformers_config(arch: str) -> Any:
    import transformers

    return {"deepseek_v2": transformers.DeepseekV2Config, "deepseek_v3": transformers.DeepseekV3Config,
            "mistral4": transformers.Mistral4Config}[arch]  # fmt: skip


@pytest.mark.parametrize(
    "arch, kw",
    [
        ("deepseek_v2", dict(n_routed_experts=16, num_experts_per_tok=4, topk_method="greedy")),
        ("deepseek_v2", dict(n_routed_experts=16, num_experts_per_tok=3, topk_method="group_limited_greedy",
                             n_group=4, topk_group=2, routed_scaling_factor=16.0)),
        ("deepseek_v3", dict(n_routed_experts=32, num_experts_per_tok=8, n_group=8, topk_group=4,
                             norm_topk_prob=True, routed_scaling_factor=2.5)),
        ("deepseek_v3", dict(n_routed_experts=12, num_experts_per_tok=3, n_group=3, topk_group=1,
                             norm_topk_prob=False, routed_scaling_factor=1.0)),
        ("mistral4", dict(n_routed_experts=16, num_experts_per_tok=3, n_group=4, topk_group=2,
                          norm_topk_prob=True, routed_scaling_factor=1.5)),
    ],
)  # fmt: skip
def test_routing_matches_transformers(arch: str, kw: dict[str, Any]) -> None:
    """The twin's route_deepseek (the C++ route's twin: the logits above hold them to each other)
    picks the experts transformers' routers pick, with their weights, on 200 random tokens: real
    releases' group and top-k counts among them (V3: 8 of 256 in the best 4 of 8 groups, here 32)."""
    import torch

    router = _hf_router(arch, kw, seed=len(kw))
    x = torch.randn(200, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, weights, idx = router(x)
    v3 = arch == "deepseek_v3"
    m4 = arch == "mistral4"  # (softmax scores, no bias, groups by their two best)
    grouped = v3 or m4 or kw.get("topk_method") == "group_limited_greedy"
    moe = {
        "sigmoid_gating": v3,
        "group_top2": v3 or m4,
        "n_group": kw.get("n_group", 1) if grouped else 1,
        "topk_group": kw.get("topk_group", 1),
        "n_expert_used": kw["num_experts_per_tok"],
        "norm_topk_prob": bool(kw.get("norm_topk_prob")) and (v3 or m4),  # (transformers' V2 router never is)
        "routed_scale": kw.get("routed_scaling_factor", 1.0),
        "norm_eps": float(np.float32(1e-20)),  # (transformers' DeepSeek routers add 1e-20)
    }
    bias = router.e_score_correction_bias.numpy() if v3 else None
    for t in range(x.shape[0]):
        chosen, w = ref_moe.route_deepseek(moe, logits[t].numpy(), bias)
        order = np.argsort(idx[t].numpy())
        np.testing.assert_array_equal(chosen, idx[t].numpy()[order])
        np.testing.assert_allclose(w, weights[t].numpy()[order], rtol=2e-6, atol=1e-7)


def test_features_matter(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """Each of DeepSeek's pieces is read and applied: changing the selection bias, a shared expert, the
    routed scale, the YaRN mscale, the latent norm or the rope / nope split of kv_a moves the logits
    as the twin predicts."""
    src, _, ids = hf_models["v3"]
    want = core.model_logits(core.load_model(src), ids)
    bias = "model.layers.2.mlp.gate.e_score_correction_bias"
    moved_as_twin_predicts(copy_with(src, tmp_path / "bias", {bias: lambda b: b[::-1].copy()}), ids, want)
    shared = "model.layers.1.mlp.shared_experts.down_proj.weight"
    moved_as_twin_predicts(copy_with(src, tmp_path / "shared", {shared: lambda w: w * 2}), ids, want)
    moved_as_twin_predicts(copy_with(src, tmp_path / "scale", routed_scaling_factor=1.0), ids, want)
    norm = "model.layers.0.self_attn.kv_a_layernorm.weight"
    moved_as_twin_predicts(copy_with(src, tmp_path / "norm", {norm: lambda w: w[::-1].copy()}), ids, want)
    src2, _, ids2 = hf_models["v2-groups"]
    want2 = core.model_logits(core.load_model(src2), ids2)
    rope = dict(YARN_V2, mscale=1.0, mscale_all_dim=1.0, rope_theta=10000.0)
    moved_as_twin_predicts(copy_with(src2, tmp_path / "mscale", rope_parameters=rope), ids2, want2)
    groups = copy_with(src2, tmp_path / "groups", topk_method="greedy")
    moved_as_twin_predicts(groups, ids2, want2)


def test_bad_files_refused(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A missing latent tensor, a missing rank, groups that do not divide the experts, a k_b of the
    wrong shape: refused by name by the C++ loader and the twin, never a crash."""
    path = case_file(hf_models, "v3", "F32", tmp_path_factory)
    out = gguf_without(path, tmp_path / "no-norm.gguf", tensors=["blk.1.attn_kv_a_norm.weight"])
    both_refuse(out, "attn_kv_a_norm", "attn_kv_a_norm")
    out = gguf_without(path, tmp_path / "no-rank.gguf", keys=["deepseek2.attention.kv_lora_rank"])
    both_refuse(out, "kv_lora_rank", "kv_lora_rank")
    out = gguf_without(path, tmp_path / "no-kb.gguf", tensors=["blk.0.attn_k_b.weight"])
    both_refuse(out, "attn_k?v?_b", "attn_k?v?_b")
    src = hf_models["v3"][0]
    both_refuse(copy_with(src, tmp_path / "groups", n_group=3), "group count 3", "group count 3")
    kv_b = "model.layers.1.self_attn.kv_b_proj.weight"
    both_refuse(copy_with(src, tmp_path / "kv_b", {kv_b: lambda w: w[:-1]}), "kv_b_proj", "kv_b_proj")
    both_refuse(copy_with(src, tmp_path / "rank", kv_lora_rank=0), "kv_lora_rank", "kv_lora_rank")
    flash = hf_models["glm4.7-flash"][0]
    short = copy_with(flash, tmp_path / "types", mlp_layer_types=["dense", "sparse"])
    both_refuse(short, "mlp_layer_types", "mlp_layer_types")


def test_llama_cpp_file_variants(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """What llama.cpp's deepseek2 files may hold beyond the basics: GLM-4.7-Flash's appended MTP layer
    (nextn_predict_layers: skipped, the file runs bitwise as one without it); Mistral Large 3's
    attention temperature (attention.temperature_scale / _length: each query times 1 + scale *
    ln(1 + floor(position / length)), as the twin computes it, and it moves the logits); a file
    without expert_gating_func routes by softmax (llama.cpp's default), except GLM-4.7-Flash's shape (47 or
    48 layers and 154880 tokens) and a file with V3's selection bias, by sigmoid."""
    src, hf, ids = hf_models["glm4.7-flash"]
    plain_path = hf_to_gguf(src, tmp_path / "plain.gguf", "F32")
    plain = core.model_logits(core.load_model(plain_path), ids)
    mtp = core.load_model(hf_to_gguf(src, tmp_path / "mtp.gguf", "F32", nextn=True))
    assert mtp.config["n_layer"] == 3
    np.testing.assert_array_equal(core.model_logits(mtp, ids), plain)
    keys = {"deepseek2.attention.temperature_scale": 0.5, "deepseek2.attention.temperature_length": 8}
    warm = gguf_without(plain_path, tmp_path / "temp.gguf", add=keys)
    m = core.load_model(warm)
    assert (m.config["attn_temp_scale"], m.config["attn_temp_length"]) == (0.5, 8)
    got = core.model_logits(m, ids)
    assert err(got, plain, hf) > 1e-3  # (positions 8 on: 40 tokens)
    np.testing.assert_array_equal(got[:8], plain[:8])  # (factor 1 below the length)
    config, weights = ref_loader.load_weights(warm)
    assert config == m.config
    assert err(got, ref_model.forward(config, weights, ids), hf) < TWIN_TOL
    # The gating default: sigmoid for a deepseek2 file with V3's selection bias and no key (a config saved
    # by transformers 5 keeps no scoring_func for llama.cpp's converter to write)...
    keyless = gguf_without(plain_path, tmp_path / "keyless.gguf", keys=["deepseek2.expert_gating_func"])
    assert core.load_model(keyless).config["moe"]["sigmoid_gating"]
    np.testing.assert_array_equal(core.model_logits(core.load_model(keyless), ids), plain)
    assert ref_loader.load_weights(keyless)[0]["moe"]["sigmoid_gating"]
    # ... softmax for one without the bias (V2's, as llama.cpp reads them)...
    v2_path = hf_to_gguf(hf_models["v2-lite"][0], tmp_path / "v2.gguf", "F32")
    v2_keyless = gguf_without(v2_path, tmp_path / "v2-keyless.gguf", keys=["deepseek2.expert_gating_func"])
    assert not core.load_model(v2_keyless).config["moe"]["sigmoid_gating"]
    assert not ref_loader.load_weights(v2_keyless)[0]["moe"]["sigmoid_gating"]
    # ... sigmoid for GLM-4.7-Flash's shape.
    flash = make_hf_model(
        tmp_path / "flash", **dict(CASES["glm4.7-flash"], hidden_size=16, num_heads=2, num_kv_heads=2,
        intermediate_size=16, num_layers=47, vocab_size=154880, mlp_layer_types=["dense"] + ["sparse"] * 46,
        moe_intermediate_size=16, q_lora_rank=16, kv_lora_rank=16),
    )  # fmt: skip
    flash_gguf = gguf_without(
        hf_to_gguf(flash, tmp_path / "flash.gguf", "F16"),
        tmp_path / "flash-keyless.gguf",
        keys=["deepseek2.expert_gating_func"],
    )
    m = core.load_model(flash_gguf)
    assert m.config["moe"]["sigmoid_gating"] and m.config["n_vocab"] == 154880
    config, _ = ref_loader.load_weights(flash_gguf)
    assert config["moe"]["sigmoid_gating"]


def test_youtu(tmp_path: Path) -> None:
    """Youtu-LLM (YoutuForCausalLM, tencent/Youtu-LLM-2B): DeepSeek V3's latent attention (q / kv LoRA ranks,
    RoPE on interleaved pairs of the rope part) with a dense Llama MLP in every layer, tied embeddings; run as
    deepseek2 without experts: within 1e-5 of transformers and of the twin, chunked prefill bitwise, greedy
    equal to `generate`, batch invariance, inspect names the folder's type."""
    from tiny_models import golden, hf_logits

    kw = dict(arch="youtu", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=96,
              vocab_size=150, q_lora_rank=32, kv_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16,
              v_head_dim=16, tie=True)  # fmt: skip
    path = make_hf_model(tmp_path / "youtu", seed=31, **kw)
    ids = np.random.default_rng(8).integers(0, kw["vocab_size"], 40).tolist()
    hf = hf_logits(path, ids)
    g = golden(path, ids, hf)
    assert g.err_hf < 1e-5 and g.twin_hf < 1e-5 and g.err_twin < twin_tol(g.model), g
    c = g.model.config
    assert c["arch"] == "deepseek2" and not c["moe"]["layers"] and c["mla"]["kv_lora_rank"] == 24
    check_chunked_prefill(path, ids, hf)
    assert greedy(core.load_model(path), ids[:10], 20, block=4) == hf_greedy(path, ids[:10], 20)
    check_invariance(core.load_model(path), kw["vocab_size"], seed=2)
    assert "model_type youtu" in models.format_inspect(models.inspect(path))
