"""dtype "bfloat16" (vLLM-CPU's numerics: every matrix and its inputs rounded to bf16, f32
accumulation) against the Python twin, the float32 numerics, and its own batch invariance; and the
dtype option end to end (load_model, LLM, the CLI, bad names)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from test_batch_invariance import check_invariance
from tiny_models import hf_to_gguf, make_hf_model

from ossa import LLM, SamplingParams, models
from ossa._native import core
from ossa.reference import loader
from ossa.reference import model as ref_model


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Qwen2 (qkv bias, tied embeddings) as a safetensors folder."""
    return make_hf_model(
        tmp_path_factory.mktemp("dt") / "qwen2",
        arch="qwen2",
        hidden_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=256,
        vocab_size=160,
        tie=True,
    )


@pytest.fixture(scope="module")
def tiny_q4(tiny_hf: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    return hf_to_gguf(tiny_hf, tmp_path_factory.mktemp("dtg") / "m.gguf", "Q4_1")


def logits(path: str, dtype: str, ids: list[int], amx: bool = True) -> np.ndarray:
    return np.asarray(models.load_model(path, dtype, amx=amx).logits(ids), dtype=np.float64)


def test_dtype_names() -> None:
    assert models.dtype_of("auto") == models.dtype_of("float32") == models.dtype_of("float") == "float32"
    assert models.dtype_of("bfloat16") == models.dtype_of("bf16") == "bfloat16"
    for bad in ("float16", "half", "int8", ""):
        with pytest.raises(ValueError, match="dtype"):
            models.dtype_of(bad)


def test_bad_dtype_is_a_clear_error(tiny_q4: str) -> None:
    with pytest.raises(ValueError, match="dtype"):
        core.load_model(tiny_q4, "float16")
    with pytest.raises(ValueError, match="dtype"):
        LLM(tiny_q4, dtype="half", kv_cache_memory_bytes=8 << 20)
    assert models.load_model(tiny_q4).compute_dtype == "float32"
    assert models.load_model(tiny_q4, "bfloat16").compute_dtype == "bfloat16"


@pytest.mark.parametrize("fmt", ["gguf-q4_1", "safetensors-f32"])
@pytest.mark.parametrize("amx", [False, True] if core.amx_available() else [False])
def test_bf16_logits_match_the_twin(tiny_q4: str, tiny_hf: str, fmt: str, amx: bool) -> None:
    """The C++ bfloat16 forward (AMX tiles, or the f32 kernels on BF16 copies) is the twin's
    bf16 emulation up to f32 accumulation order: several times closer to it than to the float32
    numerics, which it is still near."""
    path = tiny_q4 if fmt.startswith("gguf") else tiny_hf
    ids = np.random.default_rng(3).integers(0, 160, 40).tolist()
    got = logits(path, "bfloat16", ids, amx=amx)
    config, weights = loader.load_weights(path)
    twin = ref_model.forward(config, ref_model.bf16_matrices(config, weights), ids, bf16_compute=True)
    exact = ref_model.forward(config, weights, ids)
    to_twin = np.max(np.abs(got - twin))
    to_exact = np.max(np.abs(got - exact))
    assert to_twin < 0.25 * to_exact, (to_twin, to_exact)
    assert to_exact < 0.05 * np.max(np.abs(exact))


def test_bf16_tiny_model_is_batch_invariant(tiny_q4: str) -> None:
    check_invariance(core.load_model(tiny_q4, "bfloat16"), 160, seed=5, kv="float16")


def test_bf16_default_model_is_batch_invariant(default_model_path: str) -> None:
    check_invariance(core.load_model(default_model_path, "bfloat16"), 49152, seed=6, kv="float16")


@pytest.fixture(scope="module")
def llm_bf16(default_model_path: str) -> LLM:
    return LLM(default_model_path, dtype="bfloat16", kv_cache_memory_bytes=64 << 20)


def test_bf16_generation_is_deterministic_and_batch_invariant(llm_bf16: LLM) -> None:
    prompts = [
        "The capital of France is",
        "Write a haiku about the sea.",
        "1, 2, 3, 4,",
        "The largest planet in the solar system is",
    ]
    sp = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    together = [o.outputs[0].token_ids for o in llm_bf16.generate(prompts, sp, use_tqdm=False)]
    alone = [llm_bf16.generate(p, sp, use_tqdm=False)[0].outputs[0].token_ids for p in prompts]
    assert together == alone
    # Sampled, seeded: the same again.
    sps = SamplingParams(temperature=0.8, top_p=0.9, seed=7, max_tokens=16)
    a = llm_bf16.generate(prompts, sps, use_tqdm=False)
    b = llm_bf16.generate(prompts, sps, use_tqdm=False)
    assert [o.outputs[0].text for o in a] == [o.outputs[0].text for o in b]
    first = llm_bf16.generate(prompts[0], SamplingParams(temperature=0.0, max_tokens=4), use_tqdm=False)
    assert "Paris" in first[0].outputs[0].text


def test_bf16_runner_matches_the_twin_runner(tiny_q4: str) -> None:
    """The C++ runner and its Python twin (ossa.reference.runner, which the python backend uses)
    with dtype bfloat16 on the same paged step: equal up to f32 accumulation order, which tips some
    bf16 roundings of the next layer's inputs the other way. (VDPBF16PS, the kernel of CPUs with
    AVX512_BF16 and no AMX, adds its two products per lane with its own rounding: 5.4e-8 of
    sum |x w| per product against the FMA kernels' 1.5e-8, and 0.35 of the bf16 rounding's effect
    on this step's logits, where the FMA kernels measured below 0.25.)"""
    from ossa.reference.runner import ModelRunner as RefRunner

    config, weights = loader.load_weights(tiny_q4)
    prompt = [5, 17, 99, 3, 140, 12, 7, 64, 1, 150, 33, 20, 9, 77, 101, 2, 45, 88]
    n = len(prompt)
    table = [1, 0]
    slots = [table[p // 16] * 16 + p % 16 for p in range(n)]
    args = (prompt, list(range(n)), slots, [0, n], [n], [0, 2], table, list(range(n)))
    cpp = core.ModelRunner(core.load_model(tiny_q4, "bfloat16"), 2, 16, 64, "float32").forward(*args)
    twin = RefRunner(config, weights, 2, 16, compute_dtype="bfloat16").forward(*args)
    exact = RefRunner(config, weights, 2, 16).forward(*args)
    cpp, twin = np.asarray(cpp, np.float64), np.asarray(twin, np.float64)
    assert np.max(np.abs(cpp - twin)) < 0.5 * np.max(np.abs(cpp - exact))
    with pytest.raises(ValueError, match="compute_dtype"):
        RefRunner(config, weights, 2, 16, compute_dtype="float16")


def test_cli_generate_with_dtype(llm_bf16: LLM) -> None:
    prompt = "The capital of France is"
    r = subprocess.run(
        [sys.executable, "-m", "ossa.cli", "generate", prompt, "--max-tokens", "8", "--dtype", "bfloat16"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert r.returncode == 0, r.stderr
    expect = llm_bf16.generate(prompt, SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)[0]
    assert r.stdout == prompt + expect.outputs[0].text + "\n"
    bad = subprocess.run(
        [sys.executable, "-m", "ossa.cli", "generate", prompt, "--dtype", "float16"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "dtype" in bad.stderr


def test_bf16_server_concurrent_streams_equal_solo_runs(default_model_path: str) -> None:
    """The OpenAI server on a bfloat16 engine: 16 concurrent seeded streams equal their solo runs,
    and the KV cache is empty afterwards."""
    import openai
    from server_thread import ServerThread, concurrent_streams, wait_idle

    from ossa.async_engine import AsyncEngine
    from ossa.server.app import create_app

    engine = AsyncEngine.from_model(
        default_model_path, dtype="bfloat16", kv_cache_memory_bytes=32 << 20, max_num_batched_tokens=512
    )
    with ServerThread(create_app(engine, served_model_name="smol")) as server:
        with openai.OpenAI(
            base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120
        ) as client:
            prompts = [f"Story {i}: once upon a time" for i in range(16)]
            kw: dict[str, object] = dict(model="smol", max_tokens=8, temperature=0.9)
            solo = [
                client.completions.create(prompt=p, seed=i, **kw).choices[0].text
                for i, p in enumerate(prompts)
            ]
        assert concurrent_streams(server, prompts, **kw) == solo
        assert wait_idle(server)["ossa:kv_cache_usage_perc"] == 0.0
