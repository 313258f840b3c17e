"""GLM-4.5 / 4.6 (``glm4moe`` GGUF files, Glm4MoeForCausalLM folders) against Hugging Face transformers
(torch CPU, float32) and the NumPy twin, on tiny random models built by transformers, from safetensors
folders and from GGUF files laid out as llama.cpp's converter writes them.

GLM-4.5 is the Llama forward pass with grouped-query attention whose q / k / v carry biases
(``attention_bias``), optional per-head q / k RMSNorms (``use_qk_norm``: GLM-4.5 and 4.6 yes, Air
no), NeoX RoPE on the first half of each head (``partial_rotary_factor`` 0.5), and DeepSeek V3's
experts (sigmoid scores plus a selection bias, optional groups, renormalised, scaled; shared experts;
leading dense layers: ``route_deepseek``). llama.cpp's files append the multi-token-prediction layer
as one more block (``nextn_predict_layers``); ossa skips it, as llama.cpp does, and the folders'
extra layer is never read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from test_deepseek import check_moe_logits, err
from test_more_archs import both_refuse, copy_with, moved_as_twin_predicts
from tiny_models import (
    HF_TOL,
    N_TOKENS,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    gguf_without,
    greedy,
    hf_greedy,
    hf_to_gguf,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

ALL = ["safetensors", "F32", "F16", "Q8_0"]
# name -> transformers config of the tiny model
CASES: dict[str, dict[str, Any]] = {
    # GLM-4.5's layout: q / k norms, q / k / v biases, RoPE on half of each head (12 of 24), GQA 2,
    # layer 0 dense, 8 experts top 2 plus a shared one, renormalised and scaled by 2.5.
    "glm4.5": dict(
        arch="glm4_moe", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=24,
        intermediate_size=96, vocab_size=150, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
        moe_intermediate_size=32, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
        attention_bias=True, use_qk_norm=True,
    ),
    # GLM-4.5-Air's: no q / k norms; odd sizes, MHA, two shared experts, tied embeddings.
    "glm4.5-air": dict(
        arch="glm4_moe", hidden_size=48, num_layers=3, num_heads=3, num_kv_heads=3, head_dim=20,
        intermediate_size=80, vocab_size=130, n_routed_experts=6, n_shared_experts=2, num_experts_per_tok=3,
        moe_intermediate_size=16, first_k_dense_replace=1, routed_scaling_factor=1.0, norm_topk_prob=True,
        attention_bias=True, use_qk_norm=False, tie=True,
    ),
    # Groups (the best 1 of 2), not renormalised, no biases, every layer sparse, RoPE on 3/4 of a head.
    "glm-groups": dict(
        arch="glm4_moe", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=1, head_dim=16,
        intermediate_size=96, vocab_size=140, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
        moe_intermediate_size=24, first_k_dense_replace=0, n_group=2, topk_group=1, norm_topk_prob=False,
        routed_scaling_factor=1.5, attention_bias=False, use_qk_norm=True,
        rope_scaling={"partial_rotary_factor": 0.75},
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("glm4moe"), CASES, seed=190, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf, ids = hf_models[name]
    model = check_moe_logits(path, fmt, hf, ids)
    kw, c = CASES[name], model.config
    partial = (kw.get("rope_scaling") or {}).get("partial_rotary_factor", 0.5)
    assert c["rope_dim"] == int(kw["head_dim"] * partial) and c["rope_style"] == "neox"
    assert (c["qkv_bias"], c["qk_norm"]) == (kw["attention_bias"], kw["use_qk_norm"])
    assert c["moe"]["deepseek"] and c["moe"]["sigmoid_gating"] and c["moe"]["selection_bias"]
    assert c["moe"]["layers"] == list(range(kw["first_k_dense_replace"], kw["num_layers"]))


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal, equal to HF and to the
    twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


@pytest.mark.parametrize("name, fmt", [("glm4.5", "Q8_0"), ("glm-groups", "safetensors")])
def test_batch_invariant(hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: Any) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits; inspect
    describes the model."""
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    check_invariance(core.load_model(path), CASES[name]["vocab_size"], seed=len(name))
    text = models.format_inspect(models.inspect(path))
    assert "architecture  glm4moe" in text
    if name == "glm4.5":
        assert "rotated=12/24" in text
        assert (
            "experts       8 of 32 rows, 2 used per token, in 2 of 3 layers, a shared expert of 32; "
            "sigmoid scores, chosen with a per-expert bias, renormalised, scaled by 2.5"
        ) in text


def test_mtp_layer_skipped(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """llama.cpp's files carry the multi-token-prediction layer as an extra block: the file runs
    bitwise as one without it (and the twin reads it alike); a folder's extra layer (the Hub's
    model.layers.N.*, N = num_hidden_layers) is not read; a count that leaves no layer is refused."""
    src, hf, ids = hf_models["glm4.5"]
    plain = core.load_model(hf_to_gguf(src, tmp_path / "plain.gguf", "F32"))
    path = hf_to_gguf(src, tmp_path / "mtp.gguf", "F32", nextn=True)
    with_mtp = core.load_model(path)
    assert with_mtp.config == plain.config and with_mtp.config["n_layer"] == 3
    np.testing.assert_array_equal(core.model_logits(with_mtp, ids), core.model_logits(plain, ids))
    config, weights = ref_loader.load_weights(path)
    assert config == with_mtp.config
    assert err(ref_model.forward(config, weights, ids), hf, hf) < HF_TOL["F32"]
    from safetensors.numpy import load_file, save_file

    folder = copy_with(src, tmp_path / "mtp-folder", num_nextn_predict_layers=1)
    stored = load_file(str(Path(folder) / "model.safetensors"))
    for name in [n for n in stored if n.startswith("model.layers.2.")]:  # (the last layer, doubled)
        stored["model.layers.3." + name[len("model.layers.2.") :]] = stored[name] * 2
    save_file(stored, str(Path(folder) / "model.safetensors"), metadata={"format": "pt"})
    np.testing.assert_array_equal(
        core.model_logits(core.load_model(folder), ids), core.model_logits(core.load_model(src), ids)
    )
    bad = gguf_without(path, tmp_path / "bad.gguf", add={"glm4moe.nextn_predict_layers": 4})
    both_refuse(bad, "nextn_predict_layers", "nextn_predict_layers")


def test_features_matter_and_bad_configs(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """The q / k / v biases, the q / k norms, the selection bias, the shared expert and the rotated
    fraction are each read and applied (changing one moves the logits as the twin predicts); a
    rotated fraction that gives an odd count is refused by name."""
    src, _, ids = hf_models["glm4.5"]
    want = core.model_logits(core.load_model(src), ids)
    changes = {
        "bias": {"model.layers.0.self_attn.k_proj.bias": lambda b: b + 0.5},
        "qnorm": {"model.layers.1.self_attn.q_norm.weight": lambda w: w[::-1].copy()},
        "selection": {"model.layers.2.mlp.gate.e_score_correction_bias": lambda b: b[::-1].copy()},
        "shared": {"model.layers.1.mlp.shared_experts.up_proj.weight": lambda w: w * 2},
    }
    for name, change in changes.items():
        moved_as_twin_predicts(copy_with(src, tmp_path / name, change), ids, want)
    rope = {"rope_theta": 10000.0, "rope_type": "default", "partial_rotary_factor": 1.0}
    moved_as_twin_predicts(copy_with(src, tmp_path / "full", rope_parameters=rope), ids, want)
    odd = dict(rope, partial_rotary_factor=0.375)  # 9 of 24 dimensions
    both_refuse(copy_with(src, tmp_path / "odd", rope_parameters=odd), "rotated dimensions 9", "rotated")


# Solar Open (SolarOpenForCausalLM, upstage/Solar-Open-100B): GLM-4.5's router and experts in every layer
# (no dense lead layer, one shared expert), Llama's attention (no q / k norms, no biases, RoPE on the whole
# head); groups of experts, renormalised and scaled.
SOLAR = dict(arch="solar_open", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=24,
             intermediate_size=None, vocab_size=150, n_routed_experts=8, num_experts_per_tok=2,
             moe_intermediate_size=32, routed_scaling_factor=2.5, norm_topk_prob=True, n_group=2,
             topk_group=1)  # fmt: skip


def test_solar_open(tmp_path: Path) -> None:
    """Solar Open folders run as glm4moe with Solar's defaults (every layer sparse, one shared expert, the
    whole head rotated): logits within 1e-5 of transformers and of the twin, chunked prefill bitwise,
    greedy decoding equal to transformers' generate, batch invariance, inspect names the folder's type."""
    from tiny_models import golden, make_hf_model, twin_tol
    from tiny_models import hf_logits as hf_logits_of

    path = make_hf_model(tmp_path / "solar", seed=23, **SOLAR)
    ids = np.random.default_rng(5).integers(0, SOLAR["vocab_size"], N_TOKENS).tolist()
    hf = hf_logits_of(path, ids)
    g = golden(path, ids, hf)
    assert g.err_hf < 1e-5 and g.twin_hf < 1e-5 and g.err_twin < twin_tol(g.model), g
    c = g.model.config
    assert c["arch"] == "glm4moe" and c["rope_dim"] == 0 and not c["qk_norm"]  # (0: the whole head)
    assert not c["qkv_bias"] and c["moe"]["layers"] == [0, 1, 2] and c["moe"]["n_ff_shared"] == 32
    assert (c["moe"]["n_group"], c["moe"]["topk_group"]) == (2, 1)
    check_chunked_prefill(path, ids, hf)
    assert greedy(core.load_model(path), ids[:10], 20, block=4) == hf_greedy(path, ids[:10], 20)
    check_invariance(core.load_model(path), SOLAR["vocab_size"], seed=4)
    assert "model_type solar_open" in models.format_inspect(models.inspect(path))


# Param2-MoE (model_type param2moe, BharatGen's Param2-17B-A2.4B): GLM-4.5's model under its own names
# (word_embeddings, attention.query_key_value / dense / query_layernorm / key_layernorm, gate.expert_bias),
# config defaults (the whole head rotated, two shared experts, scale 2.5, q / k norms, tied) and key aliases.
PARAM2 = dict(arch="param2moe", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
              intermediate_size=96, vocab_size=140, n_routed_experts=8, num_experts_per_tok=2,
              moe_intermediate_size=24)  # fmt: skip


@pytest.mark.parametrize("arch", ["param2moe", "sarvam_moe"])
def test_param2moe_sarvam(tmp_path: Path, arch: str) -> None:
    """Param2-MoE and Sarvam-MoE folders (as transformers saves them: the releases' names, q / k / v fused)
    run as glm4moe with their configs' defaults: within 1e-5 of transformers and of the twin, greedy equal
    to `generate`; a config written with the aliases (num_experts, use_qkv_bias) and without the
    defaulted keys gives the same logits and the same config."""
    import json

    from tiny_models import golden, make_hf_model, twin_tol
    from tiny_models import hf_logits as hf_logits_of

    path = make_hf_model(tmp_path / "param2", seed=29, **dict(PARAM2, arch=arch))
    ids = np.random.default_rng(6).integers(0, PARAM2["vocab_size"], N_TOKENS).tolist()
    hf = hf_logits_of(path, ids)
    g = golden(path, ids, hf)
    assert g.err_hf < 1e-5 and g.twin_hf < 1e-5 and g.err_twin < twin_tol(g.model), g
    c = g.model.config
    assert c["arch"] == "glm4moe" and c["rope_dim"] == 0 and c["qk_norm"]
    shared = 48 if arch == "param2moe" else 24  # (two shared experts by default, or one)
    assert (
        c["moe"]["layers"] == [1, 2] and c["moe"]["n_ff_shared"] == shared and c["moe"]["routed_scale"] == 2.5
    )
    assert greedy(core.load_model(path), ids[:10], 20, block=4) == hf_greedy(path, ids[:10], 20)
    cfg = json.loads((Path(path) / "config.json").read_text())
    defaulted = ("n_shared_experts", "routed_scaling_factor", "use_qk_norm", "partial_rotary_factor")
    hub = {k: v for k, v in cfg.items() if k not in defaulted}
    hub["rope_parameters"] = {k: v for k, v in cfg["rope_parameters"].items() if k != "partial_rotary_factor"}
    hub["num_experts"] = hub.pop("n_routed_experts")
    hub["use_qkv_bias"] = hub.pop("attention_bias")
    aliased = copy_with(path, tmp_path / "aliased")
    (Path(aliased) / "config.json").write_text(json.dumps(hub))
    np.testing.assert_array_equal(
        core.model_logits(core.load_model(aliased), ids), core.model_logits(g.model, ids)
    )
    config, _ = ref_loader.load_weights(aliased)
    assert config == g.config
