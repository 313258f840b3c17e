"""ossa on Ray on one machine: what Ray costs, and what replicas and actors give.

(a) Ray Serve, 1 replica x 2 threads, vs plain ``ossa serve --num-threads 2``, at 16 concurrent
    streaming clients (``ossa.bench_serve``: greedy, ignore_eos): Ray's overhead in output tok/s.
(b) Ray Serve, 2 replicas x 1 thread, vs 1 replica x 2 threads, at 16 clients.
(c) Ray Data (2 actors x 1 thread, and 1 actor x 2 threads) vs one in-process ``LLM.generate``
    (2 threads) on the same prompts (``--num-prompts``, default 512).
(d) Prefix-cache hit rate over 2 replicas, with and without prefix-affinity routing: conversations
    that share a system prompt, 4 clients (hit rate = cached prompt tokens / prompt tokens).
(m) Serve's machinery alone (not in the default parts): a deployment with no engine streams
    ``--output-len`` chunks per request at one per ``--step-ms`` to the same clients; Ray's CPU
    seconds per 1000 chunks, by process, with Serve's default proxy transport and with ossa's
    (``PROXY_ENV``), interleaved. Cheap and little disturbed by other work on the machine.

Everything runs one after the other (a server, or the Ray cluster, is stopped before the next
starts), both sides with ossa's process settings (benchmarks/peer_env.py). (a) and (b) run
``--repeats`` times, interleaved, each run printed with the load average; the summary gives the best
and the median output tok/s of each, and the CPU seconds per 1000 output tokens its processes used
(the plain server's; for Ray every Ray process: raylet, GCS, agents, Serve's controller, proxy and
replicas), which other people's work on the machine disturbs less than tok/s. Ray runs as a local
one-machine cluster started here (``ray.init(num_cpus=2)``) with the proxy settings ``ossa serve --ray``
gives a cluster it starts (``ossa.ray.serve.PROXY_ENV``); ``--ray-env`` passes Serve's switches.

    python benchmarks/ray_scale.py              # all parts, 512 prompts for (c)
    python benchmarks/ray_scale.py --quick      # shorter runs (fewer requests and prompts)
    python benchmarks/ray_scale.py --parts a,b  # a subset
    python benchmarks/ray_scale.py --parts m    # Serve's costs per streamed message, no engine
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from peer_env import engine_env, free_port, ossa_serve_cmd, server_process  # noqa: E402

from ossa.bench_serve import ServeBenchResult, bench_serve_async, make_prompts  # noqa: E402

KV_BYTES = 256 << 20
# ossa's own process settings (benchmarks/peer_env.py), for the plain server and the Ray cluster alike.
OSSA_ENV = engine_env("ossa")


def load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def cpu_seconds(pid: int) -> float:
    """CPU time used so far by process ``pid`` and its children."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            if int(entry) == pid or int(stat[1]) == pid:  # the process or a child of it
                total += (int(stat[11]) + int(stat[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return total


_RAY_ROLES = (
    (b"ProxyActor", "proxy"),
    (b"ServeReplica", "replica"),
    (b"ServeController", "controller"),
    (b"raylet", "raylet"),
    (b"gcs_server", "gcs"),
)


def ray_cpu_by_role() -> dict[str, float]:
    """CPU seconds used so far by the processes of the Ray cluster this process started (its
    descendants: the GCS, the raylet and its workers; not another cluster on the machine), by role:
    proxy, replica(s), controller, raylet, gcs, other (the agents, log monitor and idle workers)."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stats[int(entry)] = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(int(stat[1]), []).append(pid)
    mine: set[int] = set()
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in mine:
                mine.add(child)
                todo.append(child)
    for pid in mine:
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if not any(
            m in cmd
            for m in (b"ray::", b"/ray/core/src/", b"/ray/_private/", b"/ray/dashboard/", b"/ray/autoscaler/")
        ):
            continue
        stat = stats[pid]
        role = next((name for marker, name in _RAY_ROLES if marker in cmd), "other")
        out[role] = out.get(role, 0.0) + (int(stat[11]) + int(stat[12])) / tick
    return out


def measure(
    url: str, prompts: list[str], output_len: int, clients: int, cpu: Callable[[], float]
) -> tuple[ServeBenchResult, float]:
    """One run of the prompts at ``clients`` concurrency after a warm-up: the result, and the serving
    side's CPU seconds per 1000 output tokens (for Ray, also printed per process role)."""
    asyncio.run(bench_serve_async(url, prompts[:4], 8, 4, float("inf")))
    before, roles = cpu(), ray_cpu_by_role()
    r = asyncio.run(bench_serve_async(url, prompts, output_len, clients, float("inf")))
    if r.num_failed:
        raise RuntimeError(f"{r.num_failed} requests failed")
    per_1k = 1000 / max(r.output_tokens, 1)
    after = ray_cpu_by_role()
    if after:
        parts = {k: (v - roles.get(k, 0.0)) * per_1k for k, v in sorted(after.items())}
        print("    CPU-s per 1k tokens by Ray process:", ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))
    return r, (cpu() - before) * per_1k


@contextmanager
def plain_server(model: str) -> Iterator[tuple[str, Callable[[], float]]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    flags = ["--num-threads", "2", "--kv-cache-memory-bytes", str(KV_BYTES)]
    with server_process(
        ossa_serve_cmd(model, port, *flags), OSSA_ENV, url, "/tmp/ray_scale_plain.log"
    ) as proc:
        yield url, lambda: cpu_seconds(pid=proc.pid)


@contextmanager
def ray_cluster(ray_env: dict[str, str]) -> Iterator[str]:
    """A one-machine Ray cluster with Serve's proxy on a free port, started with ossa's process
    settings (and ``ray_env``: Serve's own switches) in its environment; shut down at the end."""
    import ray
    from ray import serve

    from ossa.ray.serve import PROXY_ENV

    saved = dict(os.environ)
    os.environ.update(
        {k: v for k, v in OSSA_ENV.items() if k.startswith(("OMP_", "OSSA_"))} | PROXY_ENV | ray_env
    )
    try:
        # (address="local": a cluster of its own, never one another process started on this machine)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)


def deploy(
    model: str, replicas: int, threads: int, prefix_routing: bool = False, batching_ms: float | None = None
) -> None:
    from ray import serve

    from ossa.ray.serve import build_app

    serve.delete("ossa")
    app = build_app(
        model=model,
        num_replicas=replicas,
        num_threads=threads,
        kv_cache_memory_bytes=KV_BYTES,
        prefix_routing=prefix_routing,
        **({} if batching_ms is None else {"stream_batching_interval_ms": batching_ms}),
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


def serving(model: str, prompts: list[str], args: argparse.Namespace, parts: set[str]) -> dict[str, list]:
    """(a) and (b), ``--repeats`` times, interleaved (the machine is shared: each configuration sees
    the same spread of load). Per configuration, a list of (output tok/s, CPU-s per 1k tokens)."""
    runs: dict[str, list[tuple[float, float]]] = {}
    ray_env = dict(kv.split("=", 1) for kv in args.ray_env.split(",") if kv)

    def record(rep: int, name: str, r: ServeBenchResult, cpu: float) -> None:
        runs.setdefault(name, []).append((r.output_throughput, cpu))
        print(
            f"[{rep + 1}/{args.repeats}] {name}: {r.output_throughput:.1f} out tok/s, {cpu:.2f} CPU-s per "
            f"1k tokens (load {load()})",
            flush=True,
        )

    batchings = [float(b) for b in args.batching_ms.split(",")] if args.batching_ms else [None]
    configs = [(1, 2, b) for b in batchings] + ([(2, 1, batchings[-1])] if "b" in parts else [])
    for rep in range(args.repeats):
        if "a" in parts:
            with plain_server(model) as (url, cpu):
                record(
                    rep, "ossa serve, 2 threads", *measure(url, prompts, args.output_len, args.clients, cpu)
                )
        with ray_cluster(ray_env) as url:
            for replicas, threads, batching in configs:
                deploy(model, replicas, threads, batching_ms=batching)
                result = measure(
                    url, prompts, args.output_len, args.clients, lambda: sum(ray_cpu_by_role().values())
                )
                name = f"Ray Serve, {replicas} replica(s) x {threads} thread(s)"
                record(rep, name + ("" if len(batchings) == 1 else f", batching {batching:g} ms"), *result)
        if args.direct_ingress:
            # Serve's direct ingress: the replica serves HTTP on its own port, no proxy hop per chunk.
            port = free_port()
            env = {
                "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
                "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(port),
            }
            env["RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT"] = str(port + 50)
            with ray_cluster(ray_env | env):
                deploy(model, 1, 2)
                url = next(u for u in (f"http://127.0.0.1:{port + i}" for i in range(50)) if answers(u))
                result = measure(
                    url, prompts, args.output_len, args.clients, lambda: sum(ray_cpu_by_role().values())
                )
                record(rep, "Ray Serve 1x2, direct ingress", *result)
    return runs


def synthetic_app(tokens: int, step_s: float, batching_ms: float) -> object:
    """(m): a Serve deployment with no engine whose app streams ``tokens`` SSE chunks (one completion
    chunk's bytes each), one per ``step_s``, through ossa's ``BatchedStream``, as a replica streams
    its engine's tokens: Serve's own costs per request and per message, without the kernels'."""
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse
    from ray import serve

    from ossa.ray.serve import REPLICA_ENV
    from ossa.ray.stream_batching import BatchedStream

    app = FastAPI()
    chunk = (
        b'data: {"id":"cmpl-0","object":"text_completion","created":0,"model":"m","choices":'
        b'[{"index":0,"text":" word","logprobs":null,"finish_reason":null}]}\n\n'
    )

    @app.post("/v1/completions", response_model=None)  # (no response model to pickle for the replica)
    async def completions() -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(tokens):
                await asyncio.sleep(step_s)
                yield chunk
            yield b"data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    app.add_middleware(BatchedStream, interval_s=batching_ms / 1000)
    options = {"num_cpus": 0, "runtime_env": {"env_vars": dict(REPLICA_ENV)}}

    @serve.deployment(ray_actor_options=options, max_ongoing_requests=64)
    @serve.ingress(app)
    class Synthetic:
        pass

    return Synthetic.bind()  # type: ignore[attr-defined]


async def stream_chunks(url: str, requests: int, clients: int) -> int:
    """Streams ``requests`` completions from ``url`` at ``clients`` concurrency; the chunks read."""
    sem = asyncio.Semaphore(clients)
    count = 0
    async with httpx.AsyncClient(timeout=300) as client:

        async def one() -> None:
            nonlocal count
            async with sem, client.stream("POST", url + "/v1/completions", json={}) as r:
                async for line in r.aiter_lines():
                    count += line.startswith("data: {")

        await asyncio.gather(*[one() for _ in range(requests)])
    return count


def machinery(args: argparse.Namespace) -> None:
    """(m) ``--repeats`` times, interleaved: Ray's CPU per 1k streamed chunks with Serve's default
    proxy transport and with ``PROXY_ENV`` (``RAY_SERVE_PROXY_USE_GRPC=1``), by process."""
    from ray import serve

    configs = {"proxy over Ray calls": {"RAY_SERVE_PROXY_USE_GRPC": "0"}, "proxy over gRPC": {}}
    batching = float(args.batching_ms.split(",")[-1]) if args.batching_ms else 100.0
    runs: dict[str, list[float]] = {}
    for rep in range(args.repeats):
        for name, env in configs.items():
            with ray_cluster(env) as url:
                serve.run(synthetic_app(args.output_len, args.step_ms / 1000, batching), name="ossa")
                asyncio.run(stream_chunks(url, 4, 4))
                before = ray_cpu_by_role()
                n = asyncio.run(stream_chunks(url, args.clients * args.requests_per_client, args.clients))
                after = ray_cpu_by_role()
                parts = {k: (v - before.get(k, 0.0)) * 1000 / n for k, v in sorted(after.items())}
                runs.setdefault(name, []).append(sum(parts.values()))
                shown = ", ".join(f"{k} {v:.3f}" for k, v in parts.items())
                print(
                    f"[m {rep + 1}/{args.repeats}] {name}: {sum(parts.values()):.3f} CPU-s per 1k chunks "
                    f"({shown}; load {load()})",
                    flush=True,
                )
    for name, values in runs.items():
        print(f"(m) {name}: median {statistics.median(values):.3f} CPU-s per 1k chunks")


def answers(url: str) -> bool:
    try:
        return httpx.get(url + "/v1/models", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--parts", default="a,b,c,d")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests-per-client", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--num-prompts", type=int, default=512, help="(c): prompts for Ray Data and LLM.generate")
    ap.add_argument("--repeats", type=int, default=3, help="(a), (b): runs of each, interleaved")
    ap.add_argument(
        "--ray-env",
        default="",
        help="KEY=VALUE,... for the Ray cluster (Serve's switches, e.g. "
        "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0; ossa.ray.serve.PROXY_ENV, which `ossa serve --ray` "
        "sets, is the default: RAY_SERVE_PROXY_USE_GRPC=0 turns it off)",
    )
    ap.add_argument(
        "--direct-ingress", action="store_true", help="(a) also with Serve's direct ingress (no proxy hop)"
    )
    ap.add_argument(
        "--batching-ms",
        default="",
        help="(a), (b): Ray Serve with these stream_batching_interval_ms, e.g. 0,50 (default: build_app's)",
    )
    ap.add_argument("--step-ms", type=float, default=40.0, help="(m): ms between a stream's chunks")
    ap.add_argument("--quick", action="store_true", help="2 requests per client, 128 prompts, 1 repeat")
    args = ap.parse_args()
    if args.quick:
        args.requests_per_client, args.num_prompts, args.repeats = 2, 128, 1
    parts = set(args.parts.split(","))
    from ossa import models

    model = models.resolve(args.model)
    prompts, _ = make_prompts(args.clients * args.requests_per_client, args.input_len, model, seed=1)
    print(f"model {os.path.basename(model)}, {args.input_len} in / {args.output_len} out, load {load()}")
    if "m" in parts:
        machinery(args)
    runs = serving(model, prompts, args, parts) if parts & {"a", "b"} else {}
    results: dict[str, float] = {}
    if parts & {"c", "d"}:
        with ray_cluster({}) as url:
            if "d" in parts:
                convs = conversations(8, 6)
                for routing in (False, True):
                    deploy(model, 2, 1, prefix_routing=routing)
                    rate = asyncio.run(hit_rate(url, convs, 4))
                    print(f"[d] prefix routing {'on' if routing else 'off'}: hit rate {rate:.1%}", flush=True)
                    results[f"prefix-cache hit rate, routing {'on' if routing else 'off'}"] = rate
            from ray import serve

            serve.delete("ossa")
            if "c" in parts:
                data_prompts, _ = make_prompts(args.num_prompts, args.input_len, model, seed=2)
                for name, value in ray_data_vs_llm(model, data_prompts, args.output_len).items():
                    results[name] = value
                    print(f"[c] {name}: {value:.1f} out tok/s (load {load()})", flush=True)

    print(f"\n== results (load {load()}) ==")
    if runs:
        print(f"{f'serving, {args.clients} clients':<52} {'best tok/s':>10} {'median':>8} {'CPU-s/1k':>9}")
    summary = {}
    for name, values in runs.items():
        tps = [t for t, _ in values]
        summary[name] = (max(tps), statistics.median(tps), statistics.median(c for _, c in values))
        print(f"{name:<52} {summary[name][0]:>10.1f} {summary[name][1]:>8.1f} {summary[name][2]:>9.2f}")
    for name, value in results.items():
        print(f"{name:<48} {value:>10.1%}" if "hit rate" in name else f"{name:<48} {value:>10.1f} tok/s")
    plain = summary.get("ossa serve, 2 threads")
    ones = {k: v for k, v in summary.items() if k.startswith("Ray Serve, 1 replica(s) x 2 thread(s)")}
    two = next((v for k, v in summary.items() if k.startswith("Ray Serve, 2 replica(s)")), None)
    direct = summary.get("Ray Serve 1x2, direct ingress")
    if plain and direct:
        print(
            f"(a) direct ingress / ossa serve: best {direct[0] / plain[0]:.3f}, "
            f"median {direct[1] / plain[1]:.3f}; "
            f"CPU per token {direct[2] / plain[2]:.3f}x"
        )
    for name, one in ones.items():
        if plain:
            print(
                f"(a) Ray Serve 1x2{name.removeprefix('Ray Serve, 1 replica(s) x 2 thread(s)')} / "
                f"ossa serve: best {one[0] / plain[0]:.3f} (overhead {1 - one[0] / plain[0]:+.1%}), "
                f"median {one[1] / plain[1]:.3f}; CPU per token {one[2] / plain[2]:.3f}x"
            )
    one = list(ones.values())[-1] if ones else None
    if one and two:
        print(f"(b) Ray Serve 2x1 / 1x2: best {two[0] / one[0]:.3f}, median {two[1] / one[1]:.3f}")
    llm = results.get("LLM.generate, 2 threads")
    for name, value in results.items():
        if llm and name.startswith("Ray Data"):
            print(f"(c) {name} / LLM.generate: {value / llm:.3f}")


if __name__ == "__main__":
    main()
