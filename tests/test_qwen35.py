"""Qwen3.5 (``qwen35`` / ``qwen35moe`` GGUF files, Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM and the
Hub's Qwen3_5ForConditionalGeneration folders) against Hugging Face transformers and the NumPy twin, on
tiny random models built by transformers, from safetensors folders and from GGUF files laid out as
llama.cpp's converter writes them (value heads tiled, A_log as -exp(A_log), norms as 1 + w).

Three of four layers are gated delta-nets (linear attention with a recurrent state per sequence:
``ossa.reference.delta_net``), the others gated attention (q / k norms, partial NeoX RoPE, the output
times sigmoid of a per-head gate). transformers' golden logits are computed in float64: its float32
delta rule (the chunked form) is itself ~3e-5 off the float64 result on these models, ossa's recurrent
float32 form within 1e-5. The engine gives each running sequence a state slot: batched = alone, chunked
prefill bitwise, preemption (recompute from a zero state), n > 1 forks (the state copied), and the
C++ engine equal to its twin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from tiny_models import (
    HF_TOL,
    N_TOKENS,
    TWIN_TOL,
    build_hf_cases,
    case_file,
    check_chunked_prefill,
    check_config_refusals,
    greedy,
    hf_greedy,
    hf_to_gguf,
    make_hf_model,
    twin_tol,
)

from ossa import LLM, SamplingParams, models
from ossa._native import core
from ossa.reference import loader as ref_loader
from ossa.reference import model as ref_model

ALL = ["safetensors", "F32", "F16", "Q8_0"]
CASES: dict[str, dict[str, Any]] = {
    # Qwen3.5-0.8B's layout, small: key heads shared by two value heads each (grouped in the folder,
    # tiled in GGUF), value heads wider than key heads, three delta-net layers then attention, GQA.
    "qwen35": dict(
        arch="qwen3_5", hidden_size=64, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=32,
        intermediate_size=96, vocab_size=150, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=24, linear_conv_kernel_dim=4, tie=True,
    ),
    # Qwen3.5-35B-A3B's: experts with a gated shared expert, attention every other layer, one value
    # head per key head, a convolution of 3 taps, half the head rotated, untied.
    "qwen35-moe": dict(
        arch="qwen3_5_moe", hidden_size=48, num_layers=4, num_heads=2, num_kv_heads=1, head_dim=24,
        intermediate_size=None, vocab_size=130, linear_num_key_heads=3, linear_num_value_heads=3,
        linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=3, full_attention_interval=2,
        num_experts=6, num_experts_per_tok=2, moe_intermediate_size=40, shared_expert_intermediate_size=24,
        partial_rotary_factor=0.5,
    ),
}  # fmt: skip
# F16 / Q8_0 files against transformers: these random models amplify the rounding of their weights
# (the same bound breaks with any one matrix kept exact; the twin, on the same rounded weights, agrees
# with ossa to its usual tolerance). Measured max over the tokens: F16 1.3e-2, Q8_0 1.3e-1.
ROUNDED_TOL = {"F16": 2e-2, "Q8_0": 0.2}


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray, list[int]]]:
    return build_hf_cases(tmp_path_factory.mktemp("qwen35"), CASES, seed=350, n_tokens=N_TOKENS)


def err(a: np.ndarray, b: np.ndarray, hf: np.ndarray) -> float:
    return float(np.max(np.abs(a - b))) / float(np.max(np.abs(hf)))


@pytest.mark.parametrize("name, fmt", [(n, f) for n in CASES for f in ALL])
def test_logits_match_hf_and_twin(
    hf_models: dict[str, Any], name: str, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = case_file(hf_models, name, fmt, tmp_path_factory)
    _, hf, ids = hf_models[name]
    model = core.load_model(path)
    got = core.model_logits(model, ids)
    config, weights = ref_loader.load_weights(path)
    assert config == model.config  # the twin reads the same hyper-parameters
    twin = ref_model.forward(config, weights, ids)
    if fmt in ROUNDED_TOL:
        assert err(got, hf, hf) < ROUNDED_TOL[fmt]
        exact = core.load_model(path, amx=False)  # the f32 kernels: the twin's arithmetic
        assert err(core.model_logits(exact, ids), twin, hf) < TWIN_TOL
        assert err(got, twin, hf) < 2 * twin_tol(model)  # (AMX's bf16 sums, carried by the state)
    else:
        assert err(got, hf, hf) < HF_TOL[fmt]
        assert err(twin, hf, hf) < HF_TOL[fmt]
        assert err(got, twin, hf) < TWIN_TOL
    kw, d = CASES[name], model.config["delta"]
    assert (d["n_k_heads"], d["n_v_heads"], d["k_dim"], d["v_dim"], d["conv_kernel"]) == (
        kw["linear_num_key_heads"], kw["linear_num_value_heads"], kw["linear_key_head_dim"],
        kw["linear_value_head_dim"], kw["linear_conv_kernel_dim"],
    )  # fmt: skip
    interval = kw.get("full_attention_interval", 4)
    assert d["layers"] == [i for i in range(kw["num_layers"]) if (i + 1) % interval]
    assert d["v_tiled"] == (fmt != "safetensors")  # (llama.cpp's converter tiles the value heads)
    assert model.config["n_kv_layers"] == kw["num_layers"] - len(d["layers"])
    assert model.config["attn_gate"] and model.config["qk_norm"]


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_prefill_and_greedy(hf_models: dict[str, Any], name: str) -> None:
    """Chunks of 1, 5 and 40 tokens through the paged runner: bitwise equal (the state carried across
    chunks), equal to HF and to the twin's runner; 30 greedy tokens equal to transformers' generate."""
    path, hf_logits, ids = hf_models[name]
    check_chunked_prefill(path, ids, hf_logits)
    assert greedy(core.load_model(path), ids[:10], 30, block=4) == hf_greedy(path, ids[:10], 30)


def test_batch_invariance_and_state_slots(
    hf_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A sequence's logits bitwise the same alone, among 7 others (each its own state slot), chunked, 1
    and 2 threads; the runner refuses slots used twice or out of range; copy_state copies a state."""
    path = case_file(hf_models, "qwen35", "Q8_0", tmp_path_factory)
    model = core.load_model(path)
    check_invariance(model, CASES["qwen35"]["vocab_size"], seed=11)
    check_state_slots(model, CASES["qwen35"]["vocab_size"])


def check_state_slots(model: Any, vocab: int) -> None:
    """The runner refuses state slots used twice or out of range; a fork (copy_state and copy_block
    of its partial block) continues bitwise as its parent does."""
    runner = core.ModelRunner(model, 8, 4, 16, num_state_slots=2)
    ids = [3, 9, 27, 81]
    args = (ids, [0, 1, 0, 1], [0, 1, 4, 5], [0, 2, 4], [2, 2], [0, 1, 2], [0, 1], [1, 3])
    runner.forward(*args, state_slots=[1, 0])
    with pytest.raises(ValueError, match="state slot"):
        runner.forward(*args, state_slots=[1, 1])
    with pytest.raises(ValueError, match="state slot"):
        runner.forward(*args, state_slots=[0, 2])
    first = runner.forward(ids[:2], [0, 1], [0, 1], [0, 2], [2], [0, 1], [0], [1], state_slots=[0])
    runner.copy_state(0, 1)  # slot 1 continues slot 0's sequence (on a copy of its blocks)
    runner.copy_block(0, 1)
    a = runner.forward([5], [2], [2], [0, 1], [3], [0, 1], [0], [0], state_slots=[0])
    b = runner.forward([5], [2], [6], [0, 1], [3], [0, 1], [1], [0], state_slots=[1])
    np.testing.assert_array_equal(a, b)
    assert first.shape == (1, vocab)


def test_inspect_and_errors(hf_models: dict[str, Any], tmp_path: Path) -> None:
    """inspect names the delta-net layers and the state; bad delta-net sizes and layer types are refused
    by name by both loaders; a wrapper folder (Qwen3_5ForConditionalGeneration) loads its language
    model."""
    src = hf_models["qwen35"][0]
    text = models.format_inspect(models.inspect(src))
    assert "delta-net     3 of 4 layers" in text, text
    check_config_refusals(
        src,
        tmp_path,
        (
            ({"linear_num_value_heads": 3}, "head counts"),
            ({"linear_conv_kernel_dim": 0}, "convolution"),
            ({"layer_types": ["linear_attention"] * 3}, "layer_types"),
        ),
    )
    cfg = json.loads((Path(src) / "config.json").read_text())
    # The Hub's layout: the text model's config under text_config, its tensors under
    # model.language_model. (transformers 5 writes the wrapper as a Qwen3_5ForConditionalGeneration).
    wrap = tmp_path / "wrapper"
    wrap.mkdir()
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(Path(src) / "model.safetensors"))
    save_file(
        {k.replace("model.", "model.language_model.", 1): v for k, v in tensors.items()},
        str(wrap / "model.safetensors"),
    )
    (wrap / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen3_5",
                "architectures": ["Qwen3_5ForConditionalGeneration"],
                "text_config": cfg,
            }
        )
    )
    ids = hf_models["qwen35"][2]
    want = core.model_logits(core.load_model(src), ids)
    np.testing.assert_array_equal(core.model_logits(core.load_model(str(wrap)), ids), want)
    assert ref_loader.load_weights(str(wrap))[0] == ref_loader.load_weights(src)[0]


@pytest.fixture(scope="module")
def engine_model(default_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny Qwen3.5 GGUF with the default model's vocabulary and tokenizer, for the engine."""
    root = tmp_path_factory.mktemp("qwen35-engine")
    kw = dict(CASES["qwen35"], vocab_size=49152)
    folder = make_hf_model(root / "hf", seed=5, **kw)
    return hf_to_gguf(folder, root / "tiny-qwen35.gguf", "F32", tokenizer_gguf=default_model_path)


PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "My favourite food is"]


def test_engine_state_slots(engine_model: str) -> None:
    check_recurrent_engine(engine_model)


def check_recurrent_engine(engine_model: str) -> None:
    """Through LLM, for a model with recurrent layers: batched = alone; with 2 state slots
    (max_num_seqs=2) four prompts take turns and give the same tokens; preempted sequences (a cache of
    few blocks) recompute from a zero state and give the same tokens; n=3 forks copy the prompt's state
    (seeded, equal to the twin engine); prefix caching is off; speculative decoding and n above the
    slots are refused with clear errors."""
    greedy_sp = SamplingParams(max_tokens=20, temperature=0)
    llm = LLM(engine_model, kv_cache_memory_bytes=32 << 20, kv_cache_dtype="float32")
    assert not llm.config.cache.enable_prefix_caching and llm.config.cache.num_state_slots >= 4
    batched = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, greedy_sp)]
    assert batched == [llm.generate([p], greedy_sp)[0].outputs[0].token_ids for p in PROMPTS]
    two = LLM(engine_model, kv_cache_memory_bytes=32 << 20, kv_cache_dtype="float32", max_num_seqs=2)
    assert two.config.cache.num_state_slots == 2
    assert [o.outputs[0].token_ids for o in two.generate(PROMPTS, greedy_sp)] == batched
    with pytest.raises(ValueError, match="state slots"):
        two.generate(PROMPTS[:1], SamplingParams(max_tokens=4, n=3))
    # 12 blocks of 16 tokens and 4 state slots: four sequences of ~65 tokens (5 blocks each) cannot all
    # fit, so some are preempted and recomputed.
    tight = LLM(engine_model, kv_cache_dtype="float32", block_size=16, max_model_len=80, max_num_seqs=4,
                kv_cache_memory_bytes=_kv_bytes(engine_model, blocks=12, slots=4))  # fmt: skip
    assert (tight.config.cache.num_blocks, tight.config.cache.num_state_slots) == (12, 4)
    long_sp = SamplingParams(max_tokens=60, temperature=0, ignore_eos=True)
    want = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, long_sp)]
    assert [o.outputs[0].token_ids for o in tight.generate(PROMPTS, long_sp)] == want
    assert tight.stats()["num_preemptions"] > 0
    sampled = SamplingParams(max_tokens=12, temperature=1.0, n=3, seed=7)
    py = LLM(engine_model, kv_cache_memory_bytes=32 << 20, kv_cache_dtype="float32", backend="python")
    outs = [[c.token_ids for c in o.outputs] for o in llm.generate(PROMPTS[:2], sampled)]
    assert outs == [[c.token_ids for c in o.outputs] for o in py.generate(PROMPTS[:2], sampled)]
    assert [o.outputs[0].token_ids for o in py.generate(PROMPTS, greedy_sp)] == batched
    with pytest.raises(ValueError, match="speculative"):
        LLM(engine_model, speculative_config={"method": "ngram", "num_speculative_tokens": 2})


def _kv_bytes(path: str, blocks: int, slots: int) -> int:
    """kv_cache_memory_bytes for ``blocks`` float32 KV blocks of 16 tokens beside ``slots`` state
    slots (the config gives the slots what half the budget holds, at most max_num_seqs)."""
    c = models.load_model(path).config
    block = c.n_kv_layers * 2 * c.n_head_kv * c.head_dim * 4 * 16
    assert (
        slots * c.state_bytes <= blocks * block
    )  # (half the budget holds the slots; max_num_seqs caps them)
    return blocks * block + slots * c.state_bytes
