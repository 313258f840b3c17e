"""Granite MoE (IBM Granite 3.x MoE: granite-3.1-1b-a400m, 3b-a800m) against Hugging Face transformers
(torch CPU, float32) and the NumPy twin, on tiny random models built by transformers: from
safetensors folders (GraniteMoeForCausalLM, the Hub's names: block_sparse_moe.router.layer,
input_linear [experts, 2 x ff, hidden] = gate rows then up rows, output_linear) and from GGUF files
laid out as llama.cpp's converter writes them (granitemoe: q/k rows permuted, input_linear split
into ffn_gate_exps / ffn_up_exps, the multipliers under granitemoe.*).

What it combines: Granite's four multipliers (embeddings, each sublayer's output before the
residual add, attention scores, logits), and experts routed by a softmax over the top-k router
logits alone (as gpt-oss routes), read in place from the 3-D stacks.

Tolerances as in test_moe.py: safetensors and GGUF F32 against transformers 1e-5; F16 and Q8_0 files
against the twin on the same stored weights.
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
    TWIN_TOL,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    check_golden,
    greedy,
    hf_greedy,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

CASES: dict[str, dict[str, Any]] = {
    # granite-3.1-1b-a400m's multipliers (12, 0.22, 1/64, 6), tied output, GQA 2, 5 experts of 40 rows,
    # 2 per token.
    "granitemoe": dict(
        arch="granitemoe", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
        intermediate_size=40, vocab_size=150, tie=True, rope_theta=1000.0, num_local_experts=5,
        num_experts_per_tok=2, embedding_multiplier=12.0, residual_multiplier=0.22,
        attention_multiplier=1 / 64, logits_scaling=6.0,
    ),
    # Odd values, MHA, untied output, 4 experts of 24 rows, 3 per token.
    "granitemoe-untied": dict(
        arch="granitemoe", hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=4,
        intermediate_size=24, vocab_size=130, tie=False, num_local_experts=4, num_experts_per_tok=3,
        embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.3, logits_scaling=2.5,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("granitemoe"), CASES, seed=110, n_tokens=N_TOKENS)


@pytest.mark.parametrize("fmt", ["safetensors", "F32", "F16", "Q8_0"])
@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf_logits, ids = hf_models[name]
    case = CASES[name]
    if fmt in ("safetensors", "F32"):
        model = check_golden(path, ids, hf_logits, fmt)
    else:  # rounded weights switch an expert now and then: against the twin on the same weights
        model = core.load_model(path)
        config, weights = ref_loader.load_weights(path)
        assert config == model.config
        twin = ref_model.forward(config, weights, ids, int8_matrices=model.int8_matrices)
        got = core.model_logits(model, ids)
        assert float(np.max(np.abs(got - twin))) / float(np.max(np.abs(hf_logits))) < TWIN_TOL
    c = model.config
    assert c["arch"] == "granitemoe"
    assert c["embd_scale"] == pytest.approx(case["embedding_multiplier"])
    assert c["residual_scale"] == pytest.approx(case["residual_multiplier"])
    assert c["attn_scale"] == pytest.approx(case["attention_multiplier"])
    assert c["logit_scale"] == pytest.approx(case["logits_scaling"])
    moe = c["moe"]
    assert (
        moe["n_expert"] == case["num_local_experts"] and moe["n_expert_used"] == case["num_experts_per_tok"]
    )
    assert moe["n_ff_expert"] == case["intermediate_size"] and moe["softmax_topk"]
    assert moe["layers"] == list(range(case["num_layers"]))


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal, equal to HF and to the
    twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


@pytest.mark.parametrize("fmt", ["safetensors", "Q8_0"])
def test_batch_invariant(
    hf_models: dict[str, Any], fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Alone, among 7 others, chunked (1, 7, 64), 1 and 2 threads: bitwise the same logits."""
    path = case_file(hf_models, "granitemoe", fmt, tmp_path_factory)
    check_invariance(core.load_model(path), CASES["granitemoe"]["vocab_size"], seed=14)


def test_residual_multiplier_scales_the_experts_and_bad_files_fail(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The residual multiplier scales the experts' sum too (a change moves the logits as the twin
    predicts); a stack of the wrong shape, or a GGUF file without its expert count, is refused by
    name; inspect describes the experts and multipliers."""
    import gguf
    from safetensors.numpy import load_file, save_file

    src, hf_logits, ids = hf_models["granitemoe"]
    dst = tmp_path / "residual"
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["residual_multiplier"] = 0.9
    (dst / "config.json").write_text(json.dumps(cfg))
    want = core.model_logits(core.load_model(src), ids)
    got = core.model_logits(core.load_model(str(dst)), ids)
    assert float(np.max(np.abs(got - want))) > 1e-2 * float(np.max(np.abs(want)))
    config, weights = ref_loader.load_weights(str(dst))
    assert float(np.max(np.abs(got - ref_model.forward(config, weights, ids)))) < TWIN_TOL * float(
        np.max(np.abs(want))
    )
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    tensors = load_file(str(bad / "model.safetensors"))
    name = "model.layers.1.block_sparse_moe.input_linear.weight"
    tensors[name] = tensors[name][:, :-1]
    save_file(tensors, str(bad / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(core.ModelError, match=name):
        core.load_model(str(bad))
    with pytest.raises(ValueError, match="shape mismatch"):
        ref_loader.load_weights(str(bad))
    path = case_file(hf_models, "granitemoe", "F32", tmp_path_factory)
    reader = gguf.GGUFReader(path)
    out = Path(path).with_name("no-experts.gguf")
    w = gguf.GGUFWriter(str(out), "granitemoe")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in (
            "general.architecture",
            "granitemoe.expert_count",
        ):
            continue
        w.add_key_value(
            field.name, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None
        )
    for t in reader.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_shape=list(reversed([int(v) for v in t.shape])))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(core.ModelError, match="expert_count"):
        core.load_model(str(out))
    with pytest.raises(ValueError, match="expert_count"):
        ref_loader.load_weights(str(out))
    text = models.format_inspect(models.inspect(path))
    assert "architecture  granitemoe" in text
    assert "multipliers   embeddings 12, residuals 0.22" in text
    assert "experts       5 of 40 rows, 2 used per token, in 3 of 3 layers" in text
