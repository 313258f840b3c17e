"""ossa.config: options validated before anything loads (parallel sizes refused, not ignored;
gpu_memory_utilization's range and CPU meaning), the derived values (KV blocks from the C++
num_blocks_for_memory agree with the runner's own per-token size; max_model_len; the watermark the
engine runs with), and the C++ engine's bound config."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ossa import LLM, models
from ossa.config import EngineArgs, available_memory


@pytest.fixture(scope="module")
def llm(default_model_path: str) -> LLM:
    return LLM(
        default_model_path, kv_cache_memory_bytes=48 << 20, max_num_seqs=24, max_num_batched_tokens=256
    )


@pytest.mark.parametrize("name", ["tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"])
def test_parallel_sizes_above_one_are_refused(name: str) -> None:
    # Refused before the model is resolved: a name that is no model must not be what fails.
    with pytest.raises(ValueError, match=rf"{name}=2: ossa runs one engine per process.*Ray"):
        LLM("no-such-model", **{name: 2})
    with pytest.raises(ValueError, match=name):
        LLM("no-such-model", **{name: 0})
    EngineArgs(**{name: 1}).validate()


@pytest.mark.parametrize("value", [0.0, -0.5, 1.5, float("nan"), "0.5", True])
def test_gpu_memory_utilization_out_of_range(value: object) -> None:
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        LLM("no-such-model", gpu_memory_utilization=value)


def test_unknown_option_is_a_type_error_and_vllm_options_are_accepted() -> None:
    with pytest.raises(TypeError, match="no_such_option"):
        EngineArgs.from_kwargs(None, {"no_such_option": 1})
    EngineArgs.from_kwargs(
        None, {"trust_remote_code": True, "enforce_eager": True, "tensor_parallel_size": 1}
    )
    EngineArgs.from_kwargs(None, {"swap_space": 4, "enable_chunked_prefill": True, "compilation_config": 3})


def test_kv_blocks_agree_with_the_runner(llm: LLM) -> None:
    for dtype in ("float16", "float32"):
        per_token = models.kv_bytes_per_token(llm.model, dtype)
        args = EngineArgs(kv_cache_memory_bytes=48 << 20, kv_cache_dtype=dtype)
        config = args.create_config(llm.model, llm.model_path)
        assert config.cache.num_blocks == (48 << 20) // (per_token * 16)
    assert llm.num_blocks == (48 << 20) // (models.kv_bytes_per_token(llm.model, "float16") * 16)


def test_engine_runs_the_derived_config(llm: LLM) -> None:
    c = llm.engine.config
    assert c.num_blocks == llm.num_blocks == llm.config.cache.num_blocks
    assert c.max_model_len == llm.max_model_len == llm.config.max_model_len
    assert c.max_num_seqs == 24 and c.max_num_batched_tokens == 256
    assert c.watermark == llm.config.cache.watermark
    assert c.kv_cache_dtype == "float16"
    # max_model_len: the model's context did not fit the 48 MiB cache, so what fits beside the watermark.
    usable = (c.num_blocks - int(c.watermark * c.num_blocks)) * c.block_size
    assert llm.max_model_len == min(usable, llm.model.config.n_ctx_train)


def test_gpu_memory_utilization_sizes_the_kv_cache(llm: LLM) -> None:
    avail = available_memory()
    assert avail is not None
    weights = os.path.getsize(llm.model_path)
    share = min(1.0, (weights + (64 << 20)) / avail)
    config = EngineArgs(gpu_memory_utilization=share).create_config(llm.model, llm.model_path)
    expected = int(share * available_memory()) - weights  # type: ignore[operator]
    # MemAvailable moves between the two reads; the budget follows it.
    assert abs(config.cache.kv_cache_memory_bytes - expected) < 32 << 20
    with pytest.raises(ValueError, match="leaves nothing for the KV cache"):
        EngineArgs(gpu_memory_utilization=weights / avail / 2).create_config(llm.model, llm.model_path)
    # An explicit budget wins.
    both = EngineArgs(gpu_memory_utilization=0.9, kv_cache_memory_bytes=16 << 20)
    assert both.create_config(llm.model, llm.model_path).cache.kv_cache_memory_bytes == 16 << 20


def test_cli_parallel_flags_are_clean_errors() -> None:
    for flag in ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size"):
        r = subprocess.run(
            [sys.executable, "-m", "ossa.cli", "generate", "hi", flag, "2"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 2, r.stderr
        assert "one engine per process" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("command", ["generate", "chat", "serve", "bench"])
def test_every_option_has_a_cli_flag_with_its_default(command: str) -> None:
    """The CLI's engine flags come from EngineArgs: one per option (``model`` is each command's own
    argument), with the option's default, and parsing no flags gives EngineArgs() itself."""
    import dataclasses

    from ossa.cli import build_parser

    parser = build_parser()
    argv = {
        "generate": ["generate", "hi"],
        "chat": ["chat"],
        "serve": ["serve"],
        "bench": ["bench", "latency"],
    }
    sub = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    by_dest = {a.dest: a for a in sub._actions}
    for f in dataclasses.fields(EngineArgs):
        dest = "engine_seed" if f.name == "seed" else f.name
        assert dest in by_dest, f"no flag for {f.name}"
        if f.name != "model":
            assert by_dest[dest].default == f.default, f.name
            assert by_dest[dest].help, f.name
    parsed = EngineArgs.from_cli_args(parser.parse_args(argv[command]))
    assert dataclasses.replace(parsed, model=None) == EngineArgs()


def test_cli_flags_reach_the_options() -> None:
    from ossa.cli import build_parser

    argv = ["serve", "m.gguf", "--max-num-seqs", "8", "--max-num-batched-tokens", "96", "--no-amx"]
    argv += ["--engine-seed", "7", "--dtype", "bfloat16", "--scheduling-policy", "priority"]
    args = EngineArgs.from_cli_args(build_parser().parse_args(argv + ["--no-prefix-caching"]))
    assert (args.model, args.max_num_seqs, args.max_num_batched_tokens) == ("m.gguf", 8, 96)
    assert (args.amx, args.seed, args.dtype, args.scheduling_policy) == (False, 7, "bfloat16", "priority")
    assert args.enable_prefix_caching is False
    args = EngineArgs.from_cli_args(build_parser().parse_args(argv + ["--no-enable-prefix-caching"]))
    assert args.enable_prefix_caching is False


def test_step_limits_by_usage(default_model_path: str) -> None:
    """Left unset, an offline engine gets OFFLINE_LIMITS and a server's (AsyncEngine.from_model)
    SERVER_LIMITS; a value given wins in both."""
    from ossa.async_engine import AsyncEngine
    from ossa.config import OFFLINE_LIMITS, SERVER_LIMITS

    small = {"kv_cache_memory_bytes": 16 << 20}
    offline = LLM(default_model_path, **small).config.scheduler
    server = AsyncEngine.from_model(default_model_path, **small).engine.config
    given = AsyncEngine.from_model(default_model_path, max_num_seqs=5, **small).engine.config
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        assert getattr(offline, name) == OFFLINE_LIMITS[name]
        assert getattr(server, name) == SERVER_LIMITS[name]
    assert given.max_num_seqs == 5 and given.max_num_batched_tokens == SERVER_LIMITS["max_num_batched_tokens"]
    assert OFFLINE_LIMITS != SERVER_LIMITS
