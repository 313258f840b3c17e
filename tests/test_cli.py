"""The ``ossa`` command in a subprocess: ``generate`` (plain and --chat), ``chat`` with piped stdin
(/reset, EOF), ``inspect``, and a clean error for bad arguments. Expected text comes from
``ossa.LLM`` in this process (same model, greedy)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ossa import LLM, SamplingParams

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def llm(default_model_path: str) -> LLM:
    return LLM(default_model_path, kv_cache_memory_bytes=64 << 20)


def ossa(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ossa.cli", *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )


def greedy(llm: LLM, prompt: str, max_tokens: int) -> str:
    return (
        llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=max_tokens), use_tqdm=False)[0]
        .outputs[0]
        .text
    )


def chat_reply(llm: LLM, history: list[dict[str, str]], max_tokens: int) -> str:
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    return llm.chat(history, sp, use_tqdm=False)[0].outputs[0].text


def test_generate_prints_prompt_and_completion(llm: LLM) -> None:
    r = ossa("generate", PROMPT, "--max-tokens", "8", "--kv-cache-memory-bytes", str(64 << 20))
    assert r.returncode == 0, r.stderr
    assert r.stdout == PROMPT + greedy(llm, PROMPT, 8) + "\n"
    assert "Paris" in r.stdout


def test_generate_chat_flag(llm: LLM) -> None:
    q = "What is the capital of France?"
    r = ossa("generate", q, "--chat", "--max-tokens", "12")
    assert r.returncode == 0, r.stderr
    assert r.stdout == chat_reply(llm, [{"role": "user", "content": q}], 12) + "\n"


def test_chat_with_piped_stdin_reset_and_eof(llm: LLM) -> None:
    q1, q2 = "What is the capital of France?", "Say hi."
    r = ossa("chat", "--max-tokens", "10", stdin=f"{q1}\n\n/reset\n{q2}\n")
    assert r.returncode == 0, r.stderr
    a1 = chat_reply(llm, [{"role": "user", "content": q1}], 10)
    a2 = chat_reply(llm, [{"role": "user", "content": q2}], 10)  # /reset: no earlier turns
    assert r.stdout == f"{a1}\n{a2}\n"
    assert "history cleared" in r.stderr


def test_inspect() -> None:
    r = ossa("inspect")
    assert r.returncode == 0, r.stderr
    assert "llama" in r.stdout and "n_layer=30" in r.stdout and "KV cache" in r.stdout
    # The tokenizer line: SmolLM2's byte-level vocabulary ends on <|im_end|> and, as in llama.cpp,
    # <|endoftext|>.
    line = next(x for x in r.stdout.splitlines() if x.startswith("tokenizer"))
    assert "byte-level BPE, GPT-2 split, 49152 tokens" in line
    assert "ends on <|im_end|> (2), <|endoftext|> (0)" in line and "chat template: yes" in line


def test_bad_arguments_are_clean_errors() -> None:
    r = ossa("generate", PROMPT, "--temperature", "-1")
    assert r.returncode == 2
    assert "temperature" in r.stderr and "Traceback" not in r.stderr


def test_bench_throughput_batch_sweep(default_model_path: str) -> None:
    r = ossa(
        "bench", "throughput", "--model", default_model_path, "--batch-sizes", "1,3",
        "--input-len", "8", "--output-len", "4", "--kv-cache-memory-bytes", str(32 << 20),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["batch", "requests/s", "output"])
    rows = [line.split() for line in lines[header + 1 : header + 3]]
    assert [row[0] for row in rows] == ["1", "3"]
    for row in rows:
        requests_per_s, tok_per_s = float(row[1]), float(row[2])
        assert abs(tok_per_s - 4 * requests_per_s) <= 0.1  # 4 output tokens a request (printed rounded)
    bars = [line for line in lines if line.lstrip().startswith(("1 |", "3 |"))]
    assert len(bars) == 2 and max(b.count("#") for b in bars) == 40
    bad = ossa("bench", "throughput", "--batch-sizes", "1,x")
    assert bad.returncode == 2 and "--batch-sizes" in bad.stderr


def test_model_given_the_vllm_way_or_as_a_flag() -> None:
    """Every command takes the model as vLLM's `serve MODEL` does and as `--model MODEL`; the old
    forms keep working (`generate PROMPT` alone uses the default model)."""
    from ossa.cli import _fold_model_args, build_parser

    def parsed(*argv: str) -> tuple[str | None, str | None]:
        args = build_parser().parse_args(list(argv))
        _fold_model_args(args)
        return args.model, getattr(args, "prompt", None)

    assert parsed("generate", "m.gguf", "hi there") == ("m.gguf", "hi there")
    assert parsed("generate", "--model", "m.gguf", "hi") == ("m.gguf", "hi")
    assert parsed("generate", "hi", "--model", "m.gguf") == ("m.gguf", "hi")
    assert parsed("generate", "hi") == (None, "hi")
    assert parsed("serve", "m.gguf") == parsed("serve", "--model", "m.gguf") == ("m.gguf", None)
    assert parsed("serve") == (None, None)
    assert parsed("chat", "m.gguf") == parsed("chat", "--model", "m.gguf") == ("m.gguf", None)
    assert parsed("serve", "m.gguf", "--model", "m.gguf") == ("m.gguf", None)
    for argv in (["generate", "a.gguf", "hi", "--model", "b.gguf"], ["serve", "a", "--model", "b"]):
        with pytest.raises(ValueError, match="given twice"):
            parsed(*argv)
    with pytest.raises(ValueError, match="quote"):
        parsed("generate", "m.gguf", "hello", "world")
    # vLLM's flags that change nothing here are taken (hidden), so command lines port.
    vllm_flags = ["--trust-remote-code", "--enable-chunked-prefill", "--swap-space", "4", "--enforce-eager"]
    assert parsed("serve", "m.gguf", *vllm_flags) == ("m.gguf", None)
    from ossa.config import EngineArgs

    args = build_parser().parse_args(["serve", "m.gguf", *vllm_flags, "--max-model-len", "64"])
    assert EngineArgs.from_cli_args(args).max_model_len == 64


def test_bench_prints_the_speculative_acceptance(
    default_model_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ossa bench latency --speculative-config ...` ends with the acceptance rate and mean accepted
    length of its timed requests (their RequestOutput.metrics added up)."""
    from ossa.bench import spec_line
    from ossa.cli import main

    spec = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 2, "prompt_lookup_min": 1}'
    argv = ["bench", "latency", "--model", default_model_path, "--input-len", "8", "--output-len", "48"]
    argv += ["--num-iters", "1", "--kv-cache-memory-bytes", str(16 << 20), "--speculative-config", spec]
    assert main(argv) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.lstrip().startswith("speculative:")]
    assert len(line) == 1 and "acceptance rate" in line[0] and " drafts, " in line[0], (
        line
    )  # (greedy: drafts)
    assert spec_line((0, 0, 0)).endswith("no drafts made")
    assert spec_line((4, 12, 6)).split(":", 1)[1].strip() == (
        "acceptance rate 50.0%, mean accepted length 2.50 (4 drafts, 6/12 draft tokens accepted)"
    )
