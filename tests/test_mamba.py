"""Mamba-1 (``mamba`` GGUF files, MambaForCausalLM and FalconMambaForCausalLM folders: state-spaces'
mamba-130m ... 2.8b-hf, Falcon-Mamba-7B) against Hugging Face transformers and the NumPy twin, on tiny
random models built by transformers, from safetensors folders and from GGUF files laid out as llama.cpp's
converter writes them.

Every layer is a Mamba-1 mixer after its RMSNorm, added to the residual (no attention, no feed-forward, no
KV cache): in_proj gives [x | z], x runs through a causal depthwise convolution and SiLU, x_proj gives
[dt_low | B | C] (Falcon-Mamba RMS-normalises each without weights), dt = softplus(dt_proj dt_low + bias),
and each channel's state of d_state values is scanned with its own decay exp(dt A) (``ossa.reference.
delta_net.mamba1``). llama.cpp's files carry no epsilon for Falcon-Mamba's three norms and llama.cpp uses
the model's norm epsilon (1e-5 where transformers uses mixer_rms_eps, 1e-6): ossa follows the file's
reader for GGUF and transformers for folders, so a Falcon-Mamba GGUF file is ~1e-4 off transformers in
both engines (llama.cpp measured the same on these files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from test_qwen35 import check_state_slots
from tiny_models import (
    HF_TOL,
    N_TOKENS,
    TWIN_TOL,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    check_config_refusals,
    golden,
    greedy,
    hf_greedy,
    hf_to_gguf,
    make_hf_model,
    twin_tol,
)

from ossa import LLM, SamplingParams, models
from ossa._native import core

ALL = ["safetensors", "F32", "F16", "Q8_0"]
_ATTN = dict(num_heads=1, num_kv_heads=1, intermediate_size=None)  # (make_hf_model's, unused here)
CASES: dict[str, dict[str, Any]] = {
    # mamba-*-hf's layout, small: the convolution's bias, an explicit dt rank, tied.
    "mamba": dict(
        arch="mamba", hidden_size=48, num_layers=3, vocab_size=140, state_size=12, conv_kernel=4, expand=2,
        time_step_rank=5, layer_norm_epsilon=1e-5, tie=True, **_ATTN,
    ),
    # Falcon-Mamba's: dt / B / C normalised, "auto" dt rank (ceil(hidden / 16)), 3 taps without the
    # convolution's bias, untied.
    "falcon-mamba": dict(
        arch="falcon_mamba", hidden_size=40, num_layers=2, vocab_size=130, state_size=16, conv_kernel=3,
        expand=2, use_conv_bias=False, layer_norm_epsilon=1e-5, mixer_rms_eps=1e-6, **_ATTN,
    ),
}  # fmt: skip
# F16 / Q8_0 files against transformers (random models amplify their weights' rounding through the scan;
# measured max F16 1.1e-2, Q8_0 < 0.1); Falcon-Mamba's GGUF files: llama.cpp's norm epsilon, see above
# (measured 1.2e-4 against transformers, ossa within 6e-6 of llama.cpp).
ROUNDED_TOL = {"F16": 2e-2, "Q8_0": 0.1}
FALCON_GGUF_TOL = 5e-4


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("mamba1"), CASES, seed=530, n_tokens=N_TOKENS)


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf, ids = hf_models[name]
    model, config, err_hf, err_twin, twin_hf = golden(path, ids, hf)
    assert config == model.config  # the twin reads the same hyper-parameters
    falcon_gguf = name == "falcon-mamba" and fmt != "safetensors"
    bound = ROUNDED_TOL.get(fmt, FALCON_GGUF_TOL if falcon_gguf else HF_TOL[fmt])
    assert err_hf < bound and twin_hf < bound, (err_hf, twin_hf)
    assert err_twin < (twin_tol(model) if fmt in ROUNDED_TOL else TWIN_TOL)
    kw, c = CASES[name], model.config
    m = c["mamba1"]
    assert c["arch"] == "mamba" and m["layers"] == list(range(kw["num_layers"])) and c["n_kv_layers"] == 0
    rank = kw.get("time_step_rank", -(-kw["hidden_size"] // 16))
    assert (m["d_inner"], m["d_state"]) == (kw["expand"] * kw["hidden_size"], kw["state_size"])
    assert m["dt_rank"] == rank
    assert m["conv_kernel"] == kw["conv_kernel"] and m["conv_bias"] == kw.get("use_conv_bias", True)
    assert m["dt_b_c_rms"] == (name == "falcon-mamba")
    # (GGUF: the model's norm epsilon, as llama.cpp; a folder: mixer_rms_eps, FalconMambaConfig's key)
    assert m["bc_eps"] == np.float32(1e-5 if fmt != "safetensors" else kw.get("mixer_rms_eps", 1e-6))
    per_layer = (m["conv_kernel"] - 1) * m["d_inner"] + m["d_inner"] * m["d_state"]
    assert c["state_bytes"] == 4 * kw["num_layers"] * per_layer


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal (the convolution's inputs and
    the channels' states carried across chunks), equal to HF and to the twin's runner; 30 greedy tokens
    equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_batch_invariance_inspect_and_errors(
    hf_models: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Batch invariance (alone, among 7 others each in its own state slot, chunked, 1 and 2 threads);
    state slots and fork copies; inspect; unsupported options and bad sizes refused by both loaders."""
    path = case_file(hf_models, "falcon-mamba", "Q8_0", tmp_path_factory)
    model = core.load_model(path)
    check_invariance(model, CASES["falcon-mamba"]["vocab_size"], seed=23)
    check_state_slots(model, CASES["falcon-mamba"]["vocab_size"])
    text = models.format_inspect(models.inspect(path))
    want = "mamba-1       2 of 2 layers (state space, no KV cache): 80 channels, state size 16, dt rank 3"
    assert want in text and "dt / B / C RMS-normalised" in text, text
    src = hf_models["mamba"][0]
    check_config_refusals(
        src,
        tmp_path,
        (
            ({"use_bias": True}, "use_bias"),
            ({"intermediate_size": 50}, "intermediate_size"),
            ({"time_step_rank": "big"}, "time_step_rank"),
            ({"time_step_rank": 500}, "time step rank"),
            ({"hidden_act": "gelu"}, "hidden_act"),
        ),
    )


def test_engine(default_model_path: str, tmp_path: Path) -> None:
    """Through LLM (no KV cache; the default model's vocabulary and tokenizer): batched = alone, two state
    slots taking turns, n=3 forks equal between the C++ engine and its twin."""
    kw = dict(CASES["mamba"], vocab_size=49152)
    folder = make_hf_model(tmp_path / "hf", seed=9, **kw)
    path = hf_to_gguf(folder, tmp_path / "tiny-mamba.gguf", "F32", tokenizer_gguf=default_model_path)
    prompts = ["The capital of France is", "Once upon a time", "def add(a, b):", "1, 2, 3,"]
    greedy_sp = SamplingParams(max_tokens=16, temperature=0, ignore_eos=True)
    llm = LLM(path, kv_cache_memory_bytes=16 << 20)
    batched = [o.outputs[0].token_ids for o in llm.generate(prompts, greedy_sp)]
    assert batched == [llm.generate([p], greedy_sp)[0].outputs[0].token_ids for p in prompts]
    two = LLM(path, kv_cache_memory_bytes=16 << 20, max_num_seqs=2)
    assert [o.outputs[0].token_ids for o in two.generate(prompts, greedy_sp)] == batched
    sampled = SamplingParams(max_tokens=10, temperature=1.0, n=3, seed=5)
    py = LLM(path, kv_cache_memory_bytes=16 << 20, backend="python")
    outs = [[c.token_ids for c in o.outputs] for o in llm.generate(prompts[:2], sampled)]
    assert outs == [[c.token_ids for c in o.outputs] for o in py.generate(prompts[:2], sampled)]
