"""ossa on Ray on one machine: what Ray costs, and what replicas and actors give.

(a) Ray Serve, 1 replica x 2 threads, vs plain ``ossa serve --num-threads 2``, at 16 concurrent
    streaming clients (``ossa.bench_serve``: greedy, ignore_eos): Ray's overhead in output tok/s.
(b) Ray Serve, 2 replicas x 1 thread, vs 1 replica x 2 threads, at 16 clients.
(c) Ray Data (2 actors x 1 thread, and 1 actor x 2 threads) vs one in-process ``LLM.generate``
    (2 threads) on the same prompts (``--num-prompts``, default 512).
(d) Prefix-cache hit rate over 2 replicas, with and without prefix-affinity routing: conversations
    that share a system prompt, 4 clients (hit rate = cached prompt tokens / prompt tokens).

Everything runs one after the other (a server is stopped before the next starts), each side with
its best settings for 2 cores; each serving figure is the best of ``--rounds`` runs. Ray runs as a
local one-machine cluster started here (``ray.init(num_cpus=2)``).

    python benchmarks/ray_scale.py              # all parts, 512 prompts for (c)
    python benchmarks/ray_scale.py --quick      # shorter runs (fewer requests and prompts)
    python benchmarks/ray_scale.py --parts a,b  # a subset
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ossa.bench_serve import ServeBenchResult, bench_serve_async, make_prompts  # noqa: E402

KV_BYTES = 256 << 20


def load() -> str:
    return open("/proc/loadavg").read().split(" ", 3)[:3].__str__()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, timeout_s: float = 300, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not become ready")


def measure(url: str, prompts: list[str], output_len: int, clients: int, rounds: int) -> ServeBenchResult:
    """Best of ``rounds`` runs of the prompts at ``clients`` concurrency (after one warm-up)."""
    asyncio.run(bench_serve_async(url, prompts[:2], 4, 2, float("inf")))
    best = None
    for _ in range(rounds):
        r = asyncio.run(bench_serve_async(url, prompts, output_len, clients, float("inf")))
        if r.num_failed:
            raise RuntimeError(f"{r.num_failed} requests failed")
        if best is None or r.output_throughput > best.output_throughput:
            best = r
    assert best is not None
    return best


def plain_server(
    model: str, prompts: list[str], output_len: int, clients: int, rounds: int
) -> ServeBenchResult:
    port = free_port()
    cmd = [sys.executable, "-m", "ossa.cli", "serve", model, "--port", str(port), "--num-threads", "2"]
    cmd += ["--kv-cache-memory-bytes", str(KV_BYTES)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with open("/tmp/ray_scale_plain.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_ready(f"http://127.0.0.1:{port}", proc=proc)
            return measure(f"http://127.0.0.1:{port}", prompts, output_len, clients, rounds)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def deploy(model: str, replicas: int, threads: int, prefix_routing: bool = False) -> None:
    from ray import serve

    from ossa.ray.serve import build_app

    serve.delete("ossa")
    app = build_app(
        model=model,
        num_replicas=replicas,
        num_threads=threads,
        kv_cache_memory_bytes=KV_BYTES,
        prefix_routing=prefix_routing,
    )
    serve.run(app, name="ossa")


def conversations(n_systems: int, turns: int) -> list[list[dict[str, str]]]:
    """n_systems long system prompts, each followed by ``turns`` different user questions."""
    out = []
    for t in range(turns):
        for k in range(n_systems):
            system = (
                f"You are assistant {k} of the support desk. "
                + "Follow the policy: be brief and exact. " * 10
            )
            out.append([{"role": "system", "content": system}, {"role": "user", "content": f"Question {t}?"}])
    return out


async def hit_rate(url: str, convs: list[list[dict[str, str]]], clients: int) -> float:
    sem = asyncio.Semaphore(clients)
    cached = prompt = 0
    async with httpx.AsyncClient(timeout=300) as client:

        async def one(messages: list[dict[str, str]]) -> None:
            nonlocal cached, prompt
            async with sem:
                r = await client.post(
                    url + "/v1/chat/completions",
                    json={"messages": messages, "max_tokens": 4, "temperature": 0},
                )
                usage = r.json()["usage"]
                cached += usage["prompt_tokens_details"]["cached_tokens"]
                prompt += usage["prompt_tokens"]

        await asyncio.gather(*[one(m) for m in convs])
    return cached / max(prompt, 1)


def ray_data_vs_llm(model: str, prompts: list[str], output_len: int) -> dict[str, float]:
    import ray

    from ossa import LLM, SamplingParams
    from ossa.ray.data import ProcessorConfig, build_processor

    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True)
    out: dict[str, float] = {}
    llm = LLM(model, num_threads=2, kv_cache_memory_bytes=KV_BYTES)
    llm.generate(prompts[:4], params, use_tqdm=False)
    start = time.perf_counter()
    res = llm.generate(prompts, params, use_tqdm=False)
    out["LLM.generate, 2 threads"] = sum(len(r.outputs[0].token_ids) for r in res) / (
        time.perf_counter() - start
    )
    del llm
    sampling = {"max_tokens": output_len, "temperature": 0.0, "ignore_eos": True}
    rows = [{"prompt": p, "sampling_params": sampling} for p in prompts]
    for actors, threads in ((2, 1), (1, 2)):
        config = ProcessorConfig(
            model=model,
            engine_kwargs={"kv_cache_memory_bytes": KV_BYTES},
            concurrency=actors,
            num_threads=threads,
            batch_size=max(1, len(prompts) // (4 * actors)),
        )
        processor = build_processor(config)
        processor.run(ray.data.from_items(rows))
        t = processor.last_throughput
        assert t is not None
        out[f"Ray Data, {actors} actor(s) x {threads} thread(s)"] = t.generated_tokens / t.seconds
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--parts", default="a,b,c,d")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests-per-client", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--num-prompts", type=int, default=512, help="(c): prompts for Ray Data and LLM.generate")
    ap.add_argument("--rounds", type=int, default=2, help="serving: best of this many runs")
    ap.add_argument("--quick", action="store_true", help="2 requests per client, 128 prompts, 1 round")
    args = ap.parse_args()
    if args.quick:
        args.requests_per_client, args.num_prompts, args.rounds = 2, 128, 1
    parts = set(args.parts.split(","))
    from ossa import models

    model = models.resolve(args.model)
    prompts, _ = make_prompts(args.clients * args.requests_per_client, args.input_len, model, seed=1)
    print(f"model {os.path.basename(model)}, {args.input_len} in / {args.output_len} out, load {load()}")
    results: dict[str, float] = {}
    if "a" in parts:
        r = plain_server(model, prompts, args.output_len, args.clients, args.rounds)
        results["ossa serve, 2 threads"] = r.output_throughput
        print(f"[a] plain ossa serve: {r.output_throughput:.1f} out tok/s (load {load()})", flush=True)

    import ray
    from ray import serve

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        url = f"http://127.0.0.1:{port}"
        for replicas, threads in ((1, 2), (2, 1)):
            if "a" not in parts and "b" not in parts or (replicas == 2 and "b" not in parts):
                continue
            deploy(model, replicas, threads)
            r = measure(url, prompts, args.output_len, args.clients, args.rounds)
            name = f"Ray Serve, {replicas} replica(s) x {threads} thread(s)"
            results[name] = r.output_throughput
            print(f"[ab] {name}: {r.output_throughput:.1f} out tok/s (load {load()})", flush=True)
        if "d" in parts:
            convs = conversations(8, 6)
            for routing in (False, True):
                deploy(model, 2, 1, prefix_routing=routing)
                rate = asyncio.run(hit_rate(url, convs, 4))
                print(f"[d] prefix routing {'on' if routing else 'off'}: hit rate {rate:.1%}", flush=True)
                results[f"prefix-cache hit rate, routing {'on' if routing else 'off'}"] = rate
        serve.delete("ossa")
        if "c" in parts:
            data_prompts, _ = make_prompts(args.num_prompts, args.input_len, model, seed=2)
            for name, value in ray_data_vs_llm(model, data_prompts, args.output_len).items():
                results[name] = value
                print(f"[c] {name}: {value:.1f} out tok/s (load {load()})", flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()

    print(f"\n== results (load {load()}) ==")
    for name, value in results.items():
        print(f"{name:<48} {value:>10.1%}" if "hit rate" in name else f"{name:<48} {value:>10.1f} tok/s")
    plain = results.get("ossa serve, 2 threads")
    one = results.get("Ray Serve, 1 replica(s) x 2 thread(s)")
    two = results.get("Ray Serve, 2 replica(s) x 1 thread(s)")
    if plain and one:
        print(f"(a) Ray Serve 1x2 / ossa serve: {one / plain:.3f} (overhead {1 - one / plain:+.1%})")
    if one and two:
        print(f"(b) Ray Serve 2x1 / 1x2: {two / one:.3f}")
    llm = results.get("LLM.generate, 2 threads")
    for name, value in results.items():
        if llm and name.startswith("Ray Data"):
            print(f"(c) {name} / LLM.generate: {value / llm:.3f}")


if __name__ == "__main__":
    main()
