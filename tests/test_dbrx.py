"""DBRX (Databricks' 132B-A36B) against Hugging Face transformers (torch CPU, float32) and the NumPy twin, on
tiny random models built by transformers, from safetensors folders (the Hub's names) and from GGUF files laid
out as llama.cpp's converter writes them (docs/models.md): LayerNorms without bias, a fused Wqkv with
grouped K/V heads clipped by clip_qkv, NeoX RoPE, and every layer's experts routed by a softmax over all
of them, the top k divided by their 1-norm (moe_normalize_expert_weights; null leaves them), read from the
folders' w1 / v1 / w2 stacks (w2's blocks transposed once at load) or llama.cpp's 3-D stacks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from tiny_models import (
    N_TOKENS,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    check_config_refusals,
    check_corrupt_sizes,
    check_golden,
    check_twin,
    greedy,
    hf_greedy,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader

ALL = ["safetensors", "F32", "F16", "Q8_0"]
CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    # DBRX's layout in small: grouped K/V heads, clip_qkv, 5 experts choose 2, untied.
    "dbrx": (dict(
        arch="dbrx", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=24,
        num_local_experts=5, num_experts_per_tok=2, clip_qkv=0.7, vocab_size=150, rope_theta=500000.0,
    ), ALL),
    # The chosen weights left as the softmax gave them (moe_normalize_expert_weights null: a folder's alone,
    # llama.cpp's files always renormalise), a loose clip (transformers' DBRX fails without one), MHA, 3 of 4.
    "dbrx-raw": (dict(
        arch="dbrx", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=20,
        num_local_experts=4, num_experts_per_tok=3, moe_normalize_expert_weights=None, clip_qkv=4.0,
        vocab_size=130,
    ), ["safetensors"]),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    cases = {n: kw for n, (kw, _) in CASES.items()}
    return build_hf_cases(tmp_path_factory.mktemp("dbrx"), cases, seed=410, n_tokens=N_TOKENS)


def check_config(name: str, c: dict[str, Any]) -> None:
    case = CASES[name][0]
    assert (
        c["arch"] == "dbrx" and c["layer_norm"] and not c["norm_bias"] and c["rms_eps"] == pytest.approx(1e-5)
    )
    assert c["n_head_kv"] == case["num_kv_heads"] and c["clamp_qkv"] == pytest.approx(case.get("clip_qkv", 0))
    assert c["rope_theta"] == case.get("rope_theta", 10000.0)
    moe = c["moe"]
    assert (
        moe["n_expert"] == case["num_local_experts"] and moe["n_expert_used"] == case["num_experts_per_tok"]
    )
    assert moe["n_ff_expert"] == case["intermediate_size"] and not moe["softmax_topk"]
    assert moe["norm_topk_prob"] == ("moe_normalize_expert_weights" not in case)
    assert moe["layers"] == list(range(case["num_layers"]))


@pytest.mark.parametrize("name, fmt", [(n, f) for n, (_, fmts) in CASES.items() for f in fmts])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    # (rounded weights switch an expert now and then: the twin on the same weights)
    rounded = fmt in ("F16", "Q8_0")
    model = check_twin(path, ids, hf_logits) if rounded else check_golden(path, ids, hf_logits, fmt)
    check_config(name, model.config)


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 20, block=4) == hf_greedy(path, ids[:10], 20)


@pytest.mark.parametrize("fmt", ["safetensors", "Q8_0"])
def test_batch_invariant(hf_models: dict[str, Any], fmt: str, tmp_path_factory: Any) -> None:
    path = case_file(hf_models, "dbrx", fmt, tmp_path_factory)
    check_invariance(core.load_model(path), CASES["dbrx"][0]["vocab_size"], seed=11)
    text = models.format_inspect(models.inspect(path))
    assert "architecture  dbrx" in text and "q, k, v clipped to +-0.7" in text, text


def test_refusals(hf_models: dict[str, Any], tmp_path: Any) -> None:
    """What transformers' DBRX does not run (another p-norm of the chosen weights, another activation) is
    refused by name by both loaders."""
    import json
    from pathlib import Path

    path = hf_models["dbrx"][0]
    ffn = json.loads((Path(path) / "config.json").read_text())["ffn_config"]
    check_config_refusals(path, tmp_path, [
        ({"ffn_config": {**ffn, "moe_normalize_expert_weights": 2.0}}, "moe_normalize_expert_weights"),
        ({"ffn_config": {**ffn, "ffn_act_fn": {"name": "gelu"}}}, "ffn_act_fn"),
    ])  # fmt: skip


def test_corrupt_sizes_are_refused_or_run(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Each scalar size key of the GGUF file set to 0, 1, 3, 7, 2^20, 2^31-1, 2^32-1: refused with a
    ModelError or loads and runs, never a crash."""
    src = case_file(hf_models, "dbrx", "F32", tmp_path_factory)
    check_corrupt_sizes(src, tmp_path_factory.mktemp("bad"), 6)


def test_hub_config_rope_base(hf_models: dict[str, Any], tmp_path: Any) -> None:
    """The Hub's DBRX configs hold the RoPE base in attn_config alone (500000); both loaders read it there,
    over a rope_parameters base beside it (transformers 5 writes its default 10000 there and runs that,
    which the released weights were not trained with; llama.cpp's converter reads attn_config's)."""
    import json
    import shutil
    from pathlib import Path

    src = hf_models["dbrx-raw"][0]
    default = {"rope_theta": 10000.0, "rope_type": "default"}
    for name, change in (("hub", {"rope_parameters": None}), ("both", {"rope_parameters": default})):
        dst = Path(tmp_path) / name
        shutil.copytree(src, dst)
        cfg = json.loads((dst / "config.json").read_text())
        cfg.update(change, attn_config={**cfg["attn_config"], "rope_theta": 500000.0})
        cfg = {k: v for k, v in cfg.items() if v is not None}
        (dst / "config.json").write_text(json.dumps(cfg))
        assert core.load_model(str(dst)).config["rope_theta"] == 500000.0
        assert ref_loader.load_weights(str(dst))[0]["rope_theta"] == 500000.0


def test_engine(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Through LLM (the default model's vocabulary and tokenizer), as the other families' engine tests."""
    from tiny_models import check_engine, hf_to_gguf, make_hf_model

    root = tmp_path_factory.mktemp("dbrx-engine")
    folder = make_hf_model(root / "hf", seed=9, **dict(CASES["dbrx"][0], vocab_size=49152))
    check_engine(hf_to_gguf(folder, root / "tiny-dbrx.gguf", "F32", tokenizer_gguf=default_model_path))
