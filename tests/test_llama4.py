"""Llama 4 (text: ``llama4`` GGUF files, Llama4ForCausalLM folders and a Llama4ForConditionalGeneration
folder's language model) against Hugging Face transformers and the NumPy twin, on tiny random models built
by transformers, from safetensors and from GGUF files laid out as llama.cpp's converter writes them.

What Llama 4 adds to Llama, each on in at least one case: every 4th layer without RoPE (iRoPE) and with
full attention, the others attending within chunks (attention_chunk_size) with q / k normalised without a
weight after RoPE (use_qk_norm; off in Maverick), the queries of the NoPE layers scaled by the attention
temperature 1 + attn_scale ln(1 + floor((position + 1) / floor_scale)), RoPE on interleaved pairs (the
folder's rows as they are), experts routed by the top-k router logits each weighted by its sigmoid, that
weight multiplying the expert's input (not its output), beside an ungated shared expert, and dense layers
(intermediate_size_mlp) between the expert layers (interleave_moe_layer_step: Maverick). A GGUF file holds
none of the chunk size, the NoPE interval or the temperature's constants (llama.cpp hard-codes 8192, 4,
0.1 / 8192) and has q / k norms exactly when it has other than 128 experts; the small chunks and
temperature floor that tests can reach are folder-only cases.
"""

from __future__ import annotations

import json
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
    check_case,
    check_chunked_prefill,
    check_config_refusals,
    check_engine,
    greedy,
    hf_greedy,
    hf_to_gguf,
    make_hf_model,
)

from ossa import models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

_LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 16}  # fmt: skip
CASES: dict[str, dict[str, Any]] = {
    # Scout's layout with what a folder can say and a GGUF file cannot: chunks of 8 (the 40-token
    # prompts cross 4 chunk boundaries), the temperature's floor at 4, two experts a token (each
    # weighted on its input), llama3 RoPE scaling, odd sizes.
    "llama4-chunked": dict(
        arch="llama4", hidden_size=36, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=10,
        intermediate_size=20, intermediate_size_mlp=28, vocab_size=90, num_local_experts=5,
        num_experts_per_tok=2, attention_chunk_size=8, floor_scale=4, rope_theta=5e5, rope_scaling=_LLAMA3,
    ),
    # Scout's layout as released (chunks of 8192, the temperature over 8192): every layer's experts (one
    # a token) beside the shared one, q / k norms, untied.
    "llama4-scout": dict(
        arch="llama4", hidden_size=32, num_layers=4, num_heads=4, num_kv_heads=1, head_dim=8,
        intermediate_size=24, intermediate_size_mlp=40, vocab_size=100, num_local_experts=5,
        num_experts_per_tok=1, rope_theta=5e5,
    ),
    # Maverick's: 128 experts in every other layer, dense MLPs of intermediate_size_mlp between them,
    # no q / k norms, tied.
    "llama4-maverick": dict(
        arch="llama4", hidden_size=32, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=8,
        intermediate_size=16, intermediate_size_mlp=24, vocab_size=80, num_local_experts=128,
        num_experts_per_tok=1, interleave_moe_layer_step=2, use_qk_norm=False, rope_theta=5e5, tie=True,
    ),
}  # fmt: skip
FOLDER_ONLY = ("llama4-chunked",)
FORMATS = ["safetensors", "F32", "F16", "Q8_0"]
# F16 / Q8_0 files against transformers: the random models amplify their weights' rounding; the twin on
# the same rounded weights agrees with ossa to its usual tolerance. Maverick's Q8_0 file is held to the
# twin alone: among 128 experts with one chosen a token, its rounded weights move router choices (one
# other expert changes a logit by ~0.2 of the range; measured 0.21 against transformers, 5e-7 against the
# twin).
ROUNDED_TOL = {"F16": 1e-2, "Q8_0": 1e-1}
HF_EXEMPT = (("llama4-maverick", "Q8_0"),)


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("llama4"), CASES, seed=500, n_tokens=N_TOKENS)


@pytest.mark.parametrize(
    "name, fmt", [(n, f) for n in CASES for f in (["safetensors"] if n in FOLDER_ONLY else FORMATS)]
)
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model = check_case(hf_models, name, fmt, tmp_path_factory, ROUNDED_TOL, HF_EXEMPT)
    c = model.config
    assert c["arch"] == "llama4" and c["rope_style"] == "interleaved"
    assert c["layer_nope"] == [False, False, False, True] and c["moe"]["input_weighted"]
    assert c["attn_temp_nope"] and c["attn_temp_offset"] == 1 and c["attn_chunked"]
    assert c["layer_sliding"] == [True, True, True, False]
    if name == "llama4-chunked":
        assert c["sliding_window"] == 8 and c["attn_temp_length"] == 4 and c["qk_l2_norm"]
        assert c["moe"]["layers"] == [0, 1, 2, 3] and c["moe"]["n_expert_used"] == 2
        assert c["rope_scaling"]["type"] == "llama3"
    elif name == "llama4-scout":
        assert c["sliding_window"] == 8192 and c["attn_temp_length"] == 8192 and c["qk_l2_norm"]
        assert c["moe"]["n_ff_shared"] == 24 and c["n_ff"] == 40
    else:
        assert not c["qk_l2_norm"] and c["moe"]["layers"] == [1, 3] and c["moe"]["n_expert"] == 128
        assert c["n_ff"] == 24 and c["tied_embeddings"]


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens (5 attention chunks of the chunked model) through the paged runner:
    bitwise equal, equal to HF and to the twin's runner; 30 greedy tokens equal to transformers'."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


@pytest.mark.parametrize(
    "name, fmt, kv",
    [("llama4-chunked", "safetensors", "float32"), ("llama4-chunked", "safetensors", "float16"),
     ("llama4-maverick", "Q8_0", "float32")],
)  # fmt: skip
def test_batch_invariant(
    hf_models: dict[str, Any], name: str, fmt: str, kv: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Alone, among 7 others, chunked, 1 and 2 threads: bitwise the same logits (the experts group rows by
    expert, each row's input scaled by its own weight, whatever the batch)."""
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    check_invariance(core.load_model(path), CASES[name]["vocab_size"], seed=43, kv=kv)


def _write_folder(src: Path, dst: Path, cfg: dict[str, Any], prefix: str, head: str) -> str:
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(src / "model.safetensors"))
    renamed = {(k.replace("model.", prefix, 1) if k.startswith("model.") else head): v
               for k, v in tensors.items()}  # fmt: skip
    renamed["vision_model.class_embedding"] = np.zeros(8, np.float32)  # (a vision tower, skipped)
    dst.mkdir()
    save_file(renamed, str(dst / "model.safetensors"))
    (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


def test_released_configs_and_multimodal_folders(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """The Hub's first configs (no layer_types / moe_layers, an empty no_rope_layers, the temperature
    switch as a number) and Llama4ForConditionalGeneration folders (text_config; tensors under
    language_model.model. as the Hub's files hold them, or model.language_model. as transformers 5 writes
    them; a vision tower skipped) give the text model's logits bitwise, in both loaders."""
    src, _, ids = hf_models["llama4-chunked"]
    cfg = json.loads((Path(src) / "config.json").read_text())
    released = {k: v for k, v in cfg.items() if k not in ("layer_types", "moe_layers")}
    released.update(no_rope_layers=[], attn_temperature_tuning=4)
    want = core.model_logits(core.load_model(src), ids)
    twin_want = ref_model.forward(*ref_loader.load_weights(src), ids)
    folders = [_write_folder(Path(src), tmp_path / "released", released, "model.", "lm_head.weight")]
    wrapper = {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"]}
    wrapper["text_config"] = cfg
    folders.append(_write_folder(Path(src), tmp_path / "hub", wrapper, "language_model.model.",
                                 "language_model.lm_head.weight"))  # fmt: skip
    folders.append(_write_folder(Path(src), tmp_path / "tf5", wrapper, "model.language_model.",
                                 "lm_head.weight"))  # fmt: skip
    for folder in folders:
        np.testing.assert_array_equal(core.model_logits(core.load_model(folder), ids), want)
        twin = ref_model.forward(*ref_loader.load_weights(folder), ids)
        assert float(np.max(np.abs(twin - twin_want))) / float(np.max(np.abs(want))) < TWIN_TOL


def test_gguf_without_chunks(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """A config whose layers all attend fully and rotate (MobileLLM's layout; the converter writes
    sliding_window 0): RoPE and full attention everywhere, no temperature, from GGUF and the folder alike."""
    kw = dict(CASES["llama4-scout"], no_rope_layers=[1, 1, 1, 1], layer_types=["full_attention"] * 4)
    folder = make_hf_model(tmp_path / "hf", seed=9, **kw)
    path = hf_to_gguf(folder, tmp_path / "full.gguf")
    ids = hf_models["llama4-scout"][2]
    want = core.model_logits(core.load_model(folder), ids)
    model = core.load_model(path)
    c = model.config
    assert c["layer_nope"] == [] and c["sliding_window"] == 0 and not c["attn_chunked"]
    assert c["attn_temp_scale"] == 0.0 and c["qk_l2_norm"]
    got = core.model_logits(model, ids)
    assert float(np.max(np.abs(got - want))) / float(np.max(np.abs(want))) < 1e-5
    assert ref_loader.load_weights(path)[0] == c


def test_inspect_and_refusals(hf_models: dict[str, Any], tmp_path: Path) -> None:
    text = models.format_inspect(models.inspect(hf_models["llama4-chunked"][0]))
    assert "architecture  llama4" in text, text
    assert "none in 1 of 4 layers" in text, text
    assert "attention     chunks of 8 tokens in 3 of 4 layers" in text, text
    assert "1 + 0.1 ln(1 + floor((position + 1) / 4)) in the layers without RoPE" in text, text
    assert "q / k normalised (no weight) after RoPE" in text, text
    assert "sigmoid of the chosen logits scaling each expert's input" in text, text
    check_config_refusals(
        hf_models["llama4-chunked"][0],
        tmp_path,
        (
            ({"no_rope_layers": [1, 1, 2, 0]}, "no_rope_layers"),
            ({"no_rope_layers": [1, 0]}, "no_rope_layers"),
            ({"layer_types": ["sliding_attention"] * 4}, "layer_types"),
            ({"moe_layers": [0, 7]}, "moe_layers"),
            ({"intermediate_size_mlp": 0}, "intermediate_size_mlp"),
            ({"num_experts_per_tok": 6}, "experts"),
            ({"attn_scale": -1.0}, "attn_scale"),
        ),
    )  # fmt: skip


def test_engine(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Through LLM (the default model's vocabulary and tokenizer): batched = alone = the paged runner's
    greedy decode, prefix-cache hits the same, the Python twin engine the same tokens (and the same seeded
    forks), and preempted sequences (a cache of 10 blocks) recomputed to the same tokens."""
    root = tmp_path_factory.mktemp("llama4-engine")
    folder = make_hf_model(root / "hf", seed=7, **dict(CASES["llama4-maverick"], vocab_size=49152))
    path = hf_to_gguf(folder, root / "tiny-llama4.gguf", "F32", tokenizer_gguf=default_model_path)
    check_engine(path)
