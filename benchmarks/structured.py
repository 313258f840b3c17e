"""Structured output cost: 16 concurrent requests under a JSON schema vs the same 16 unconstrained.

Both runs decode exactly --max-tokens tokens per request (the schema is an array long enough that it
never closes first, and the unconstrained run ignores EOS), on one engine, so the ratio is the cost
of the grammar: output tok/s constrained / unconstrained (goal >= 0.9). Also printed: the host's mask
time per step at batch 16 (feeding the sampled tokens to the llguidance matchers and computing the
16 masks, one call), how much of it the step waited for after the forward pass (the rest overlapped
it), and the same constrained run with the overlap off.

    OSSA_CORE_DIR=build/structured/csrc PYTHONPATH=src python benchmarks/structured.py [--repeats 3]

Best of --repeats runs each, interleaved, because the machine may be shared (check `uptime`).
`--vllm`: the same workload on vLLM-CPU beside it (the same prompt token ids, seeds, schema and
whitespace pattern through vLLM's structured outputs and its own backend choice, plain with
ignore_eos), in vLLM's own process and virtualenv with its own settings (benchmarks/peer_env.py), on
the GGUF's weights as a bf16 Hugging Face folder (benchmarks/peers.py:hf_folder); `--vllm-repeats`
runs each (default 1: vLLM takes minutes to start here). If vLLM cannot run it, the reason is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

SCHEMA = {
    "type": "array",
    "minItems": 64,
    "items": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 0, "maximum": 9999},
            "name": {"type": "string", "maxLength": 24},
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
        },
        "required": ["id", "name", "tags"],
        "additionalProperties": False,
    },
}
WHITESPACE = r"[ \n]?"
TEMPERATURE = 0.8


def run(llm: Any, prompts: list[Any], sps: list[Any]) -> tuple[float, int, dict[str, float]]:
    before = llm.stats()
    t0 = time.perf_counter()
    outs = llm.generate(prompts, sps, use_tqdm=False)
    elapsed = time.perf_counter() - t0
    after = llm.stats()
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    delta = {
        k: after[k] - before[k]
        for k in ("steps", "constraint_calls", "time_constraint", "time_constraint_wait")
    }
    return elapsed, tokens, delta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--vllm", action="store_true", help="also run the workload on vLLM-CPU (/root/vllm-venv)")
    ap.add_argument("--vllm-repeats", type=int, default=1)
    args = ap.parse_args()

    from ossa import LLM, SamplingParams
    from ossa.structured import StructuredOutputsParams

    llm = LLM(args.model, num_threads=args.threads, kv_cache_memory_bytes=256 << 20)
    tok = llm.get_tokenizer()
    question = "List many users as a JSON array of objects with id, name and tags."
    text = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True)
    ids = tok.encode(text, add_special_tokens=False)
    prompts = [{"prompt": text, "prompt_token_ids": ids}] * args.concurrency
    so = StructuredOutputsParams(json=SCHEMA, whitespace_pattern=WHITESPACE)
    common = {"max_tokens": args.max_tokens, "temperature": TEMPERATURE}
    plain = [SamplingParams(seed=i, ignore_eos=True, **common) for i in range(args.concurrency)]
    constrained = [SamplingParams(seed=i, structured_outputs=so, **common) for i in range(args.concurrency)]
    run(llm, prompts[:2], constrained[:2])  # warm up: matchers, the lexer, kernels' first touch

    best: dict[str, tuple[float, int, dict[str, float]]] = {}
    for _ in range(args.repeats):
        for name, sps, overlap in [
            ("plain", plain, True),
            ("json", constrained, True),
            ("json, no overlap", constrained, False),
        ]:
            llm.engine.set_constraint_host(llm.constraints, overlap=overlap)
            r = run(llm, prompts, sps)
            if name not in best or r[1] / r[0] > best[name][1] / best[name][0]:
                best[name] = r
    llm.engine.set_constraint_host(llm.constraints, overlap=True)

    load = os.getloadavg()[0]
    print(
        f"default model, {args.concurrency} concurrent requests x {args.max_tokens} tokens, "
        f"best of {args.repeats}, load {load:.1f}"
    )
    head = ["tokens", "seconds", "tok/s", "ratio", "mask ms/step", "waited ms/step", "mask calls/steps"]
    print(f"{'run':<18} " + " ".join(f"{h:>{max(8, len(h))}}" for h in head))
    base = best["plain"][1] / best["plain"][0]
    for name, (elapsed, tokens, d) in best.items():
        calls = max(1.0, d["constraint_calls"])
        mask = 1e3 * d["time_constraint"] / calls if d["constraint_calls"] else 0.0
        waited = 1e3 * d["time_constraint_wait"] / calls if d["constraint_calls"] else 0.0
        rate = tokens / elapsed
        cells = [f"{tokens:>8}", f"{elapsed:>8.2f}", f"{rate:>8.1f}", f"{rate / base:>8.2f}"]
        steps = f"{d['constraint_calls']:.0f}/{d['steps']:.0f}"
        print(f"{name:<18} " + " ".join(cells) + f" {mask:>12.2f} {waited:>14.2f} {steps:>16}")
    if args.vllm:
        ossa_rates = {k: best[k][1] / best[k][0] for k in ("plain", "json")}
        vllm_side(llm.model_path, ids, args, ossa_rates)


def vllm_side(model_path: str, ids: list[int], args: argparse.Namespace, ossa: dict[str, float]) -> None:
    """The workload on vLLM-CPU in its own process (peers.py's vLLM worker); prints its rows, or why
    it could not run."""
    from peer_env import VLLM_PYTHON, describe, engine_env, run_child
    from peers import hf_folder, vllm_best_dtype

    if not os.path.exists(VLLM_PYTHON):
        print(f"vLLM-CPU: not run, no vLLM virtualenv at {VLLM_PYTHON}")
        return
    job = {
        "workload": "structured",
        "hf_folder": hf_folder(model_path),
        "prompt_token_ids": ids,
        "schema": SCHEMA,
        "whitespace_pattern": WHITESPACE,
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "temperature": TEMPERATURE,
        "repeats": args.vllm_repeats,
        "vllm_dtype": vllm_best_dtype(),
    }
    threads = args.threads or 2
    print(f"vLLM-CPU (bf16 HF folder of the same weights, dtype {job['vllm_dtype']}), "
          f"env: {describe(engine_env('vllm', threads))}")  # fmt: skip
    try:
        out = run_child("vllm", job, threads, timeout_s=1500)
    except Exception as e:  # noqa: BLE001 - the reason is the output
        print(f"vLLM-CPU: structured outputs could not run: {e}")
        return
    rates = {k: r["output_tokens"] / r["wall_s"] for k, r in out["runs"].items()}
    backend = out["profile"].get("backend")
    print(f"vLLM's structured-output backend: {backend}; ready in {out['ready_s']:.0f} s")
    for name in ("plain", "json"):
        r = out["runs"][name]
        cells = [f"{r['output_tokens']:>8}", f"{r['wall_s']:>8.2f}", f"{rates[name]:>8.1f}"]
        print(f"{'vLLM ' + name:<18} " + " ".join(cells) + f" {rates[name] / rates['plain']:>8.2f}")
    print(
        f"ossa / vLLM-CPU: plain {ossa['plain'] / rates['plain']:.2f}x, "
        f"json {ossa['json'] / rates['json']:.2f}x (load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
