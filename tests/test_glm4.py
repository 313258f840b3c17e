"""GLM-4 dense (``glm4`` GGUF files, Glm4ForCausalLM folders: GLM-4-9B-0414, GLM-Z1, GLM-4-32B-0414)
against Hugging Face transformers (torch CPU, float32) and the NumPy twin, on tiny random models built
by transformers, from safetensors folders and GGUF files laid out as llama.cpp's converter writes them.

GLM-4 is the Llama forward pass with four norms per layer (the pre-norms, and RMSNorms on the
attention's and the MLP's outputs before the residual adds: ``post_self_attn_layernorm`` /
``post_mlp_layernorm``, llama.cpp's ``post_attention_norm`` / ``post_ffw_norm``), q / k / v biases,
RoPE on interleaved pairs of the first ``partial_rotary_factor`` (0.5) of each head, and gate / up
fused in one matrix (``gate_up_proj``, llama.cpp's ``ffn_up`` of twice the rows), split by rows in place.

GLM-4-9B-Chat / ChatGLM3 (``chatglm`` GGUF files, GlmForCausalLM folders: glm-4-9b-chat-hf) is the same
without the two output norms; llama.cpp's files of THUDM's own layout hold q / k / v (and their biases) fused
in ``attn_qkv``, viewed as three.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from test_more_archs import both_refuse, copy_with, moved_as_twin_predicts
from tiny_models import (
    N_TOKENS,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    check_golden,
    greedy,
    hf_greedy,
)

from ossa import models
from ossa._native import core

ALL = ["safetensors", "F32", "F16", "Q8_0"]
CASES: dict[str, dict[str, Any]] = {
    # GLM-4-9B-0414's layout: GQA, head_dim set (24 here, not hidden / heads), biases, RoPE on half.
    # (Its F16 file is 1.1e-3 off transformers, over HF_TOL's 1e-3: rounding through the output
    # norms, measured; F16 runs in the other case.)
    "glm4": dict(
        arch="glm4", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=24,
        intermediate_size=96, vocab_size=150, rope_theta=10000.0,
    ),
    # Every dimension rotated, no biases, MHA, tied, odd sizes.
    "glm4-full-rotary": dict(
        arch="glm4", hidden_size=48, num_layers=2, num_heads=3, num_kv_heads=3, head_dim=16,
        intermediate_size=80, vocab_size=130, attention_bias=False, tie=True,
        rope_scaling={"partial_rotary_factor": 1.0},
    ),
    # GLM-4-9B-Chat's layout (GlmForCausalLM): GQA, biases, RoPE on half, no output norms, untied.
    "glm": dict(
        arch="glm", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=96, vocab_size=150,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    """name -> (HF folder, HF float32 logits, token ids)."""
    return build_hf_cases(tmp_path_factory.mktemp("glm4"), CASES, seed=230, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL if (n, f) != ("glm4", "F16")])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf, ids = hf_models[name]
    c = check_golden(path, ids, hf, fmt).config
    kw = CASES[name]
    partial = (kw.get("rope_scaling") or {}).get("partial_rotary_factor", 0.5)
    assert c["rope_style"] == "interleaved" and c["rope_dim"] == (0 if partial == 1 else kw["head_dim"] // 2)
    assert c["qkv_bias"] == kw.get("attention_bias", True) and not c["qk_norm"]
    assert c["arch"] == ("chatglm" if kw["arch"] == "glm" else "glm4")


def test_chatglm_fused_qkv_file_reads_alike(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A chatglm file of THUDM's layout (q / k / v and their biases fused in attn_qkv, as llama.cpp's
    converter writes ChatGLM3 / GLM-4-9B-Chat) gives bitwise the logits of the split file; inspect names
    the architecture."""
    import gguf
    from tiny_models import _copy_metadata

    src = case_file(hf_models, "glm", "F32", tmp_path_factory)
    reader = gguf.GGUFReader(src)
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    out = gguf.GGUFWriter(str(tmp_path / "fused.gguf"), "chatglm")
    _copy_metadata(reader, out)
    for name, data in tensors.items():
        if ".attn_q." in name:
            stem = name.replace(".attn_q.", ".attn_qkv.")
            parts = [tensors[name.replace(".attn_q.", f".attn_{x}.")] for x in ("q", "k", "v")]
            out.add_tensor(stem, np.ascontiguousarray(np.concatenate(parts)))
        elif ".attn_k." not in name and ".attn_v." not in name:
            out.add_tensor(name, np.ascontiguousarray(data))
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()
    _, _, ids = hf_models["glm"]
    fused = core.load_model(str(tmp_path / "fused.gguf"))
    assert fused.config["qkv_bias"] and fused.config["arch"] == "chatglm"
    assert np.array_equal(core.model_logits(fused, ids), core.model_logits(core.load_model(src), ids))
    text = models.format_inspect(models.inspect(str(tmp_path / "fused.gguf")))
    assert "architecture  chatglm" in text and "rotated=8/16" in text, text


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal, equal to HF and to the
    twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_batch_invariant_norms_matter_and_bad_files(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Batch invariance on a Q8_0 file; inspect names the partial rotation; each of the two output
    norms and the fused gate / up halves are read where they belong (changing one moves the logits
    as the twin predicts); a gate_up of the wrong height is refused by name."""
    path = case_file(hf_models, "glm4", "Q8_0", tmp_path_factory)
    check_invariance(core.load_model(path), CASES["glm4"]["vocab_size"], seed=4)
    text = models.format_inspect(models.inspect(path))
    assert "architecture  glm4" in text and "style=interleaved" in text and "rotated=12/24" in text
    src, _, ids = hf_models["glm4"]
    want = core.model_logits(core.load_model(src), ids)
    for norm in ("post_self_attn_layernorm", "post_mlp_layernorm"):
        name = f"model.layers.1.{norm}.weight"
        moved_as_twin_predicts(copy_with(src, tmp_path / norm, {name: lambda w: w[::-1].copy()}), ids, want)
    gate_up = "model.layers.0.mlp.gate_up_proj.weight"
    swapped = copy_with(src, tmp_path / "swap", {gate_up: lambda w: np.concatenate([w[96:], w[:96]])})
    moved_as_twin_predicts(swapped, ids, want)
    short = copy_with(src, tmp_path / "short", {gate_up: lambda w: w[:-1]})
    both_refuse(short, "gate_up_proj", "gate_up_proj")
