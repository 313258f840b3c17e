"""``ossa bench serve``: drive a running OpenAI-compatible server and measure it, like vLLM's serving
benchmark: throughput, time to first token (TTFT), time per output token (TPOT) and inter-token
latency (ITL), each as mean / p50 / p99.

Requests are streamed ``/v1/completions`` calls with ``ignore_eos`` (servers that do not know it may
stop early; the table counts the tokens each server reports in its usage, or its chunks). Arrivals
follow a Poisson process at ``--request-rate`` (``inf``: all at once), capped at ``--concurrency``
requests in flight.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

_WORDS = (
    "the of and to in is was for on that with as by at from his it an were are which this be or has had "
    "not but first one their its new after who they have her she two been other when there all during "
    "into school time may years more most only over city some world would where later up such used many "
    "can state about national out known university united then made"
).split()


@dataclass
class RequestResult:
    ok: bool = False
    ttft: float = 0.0
    e2e: float = 0.0
    output_tokens: int = 0
    itl: list[float] = field(default_factory=list)
    error: str = ""


@dataclass
class ServeBenchResult:
    num_requests: int
    num_failed: int
    duration_s: float
    output_tokens: int
    input_tokens: int
    ttft: list[float]
    tpot: list[float]
    itl: list[float]

    @property
    def request_throughput(self) -> float:
        return (self.num_requests - self.num_failed) / self.duration_s

    @property
    def output_throughput(self) -> float:
        return self.output_tokens / self.duration_s


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default); NaN for no values."""
    if not values:
        return math.nan
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def make_prompts(num_prompts: int, input_len: int, model: str | None, seed: int = 0) -> tuple[list[str], int]:
    """Random-word prompts of input_len tokens by the model's tokenizer (a word per token if the
    tokenizer cannot be loaded); returns the prompts and their total token count."""
    rng = random.Random(seed)
    tok = None
    try:
        from . import models
        from .tokenizer import Tokenizer

        tok = Tokenizer.from_file(models.resolve(model))
    except Exception:
        tok = None
    prompts, total = [], 0
    for _ in range(num_prompts):
        words = " ".join(rng.choice(_WORDS) for _ in range(input_len + 8))
        if tok is None:
            prompts.append(" ".join(words.split()[:input_len]))
            total += input_len
            continue
        ids = tok.encode(words, add_special_tokens=False)[:input_len]
        prompts.append(tok.decode(ids))
        total += len(ids)
    return prompts, total


async def _one(client: Any, url: str, model: str, prompt: str, output_len: int) -> RequestResult:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": output_len,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    res = RequestResult()
    start = time.perf_counter()
    last = start
    chunks = 0
    usage_tokens = None
    try:
        async with client.stream("POST", url, json=body) as r:
            if r.status_code != 200:
                res.error = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
                return res
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                obj = json.loads(data)
                if obj.get("usage"):
                    usage_tokens = obj["usage"].get("completion_tokens")
                choices = obj.get("choices") or []
                if not any(c.get("text") for c in choices):
                    continue
                now = time.perf_counter()
                if chunks == 0:
                    res.ttft = now - start
                else:
                    res.itl.append(now - last)
                last = now
                chunks += 1
    except Exception as e:  # a failed request is counted, not fatal
        res.error = f"{type(e).__name__}: {e}"
        return res
    res.e2e = time.perf_counter() - start
    res.output_tokens = int(usage_tokens) if usage_tokens else chunks
    res.ok = chunks > 0
    if not res.ok:
        res.error = "no tokens"
    return res


async def bench_serve_async(
    base_url: str,
    prompts: list[str],
    output_len: int,
    concurrency: int | None,
    request_rate: float,
    model: str | None = None,
    seed: int = 0,
) -> ServeBenchResult:
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=httpx.Timeout(None), limits=limits) as client:
        if model is None:
            model = (await client.get(base_url.rstrip("/") + "/v1/models")).json()["data"][0]["id"]
        url = base_url.rstrip("/") + "/v1/completions"
        sem = asyncio.Semaphore(concurrency) if concurrency else None
        rng = random.Random(seed)

        async def limited(p: str) -> RequestResult:
            if sem is None:
                return await _one(client, url, model, p, output_len)
            async with sem:
                return await _one(client, url, model, p, output_len)

        start = time.perf_counter()
        tasks = []
        for p in prompts:
            tasks.append(asyncio.ensure_future(limited(p)))
            if math.isfinite(request_rate) and request_rate > 0:
                await asyncio.sleep(rng.expovariate(request_rate))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
    ok = [r for r in results if r.ok]
    return ServeBenchResult(
        num_requests=len(results),
        num_failed=len(results) - len(ok),
        duration_s=duration,
        output_tokens=sum(r.output_tokens for r in ok),
        input_tokens=0,
        ttft=[r.ttft for r in ok],
        tpot=[(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1],
        itl=[x for r in ok for x in r.itl],
    )


def format_result(res: ServeBenchResult, title: str = "Serving benchmark") -> str:
    lines = [
        f"============ {title} ============",
        f"{'Successful requests:':<36}{res.num_requests - res.num_failed}",
        f"{'Failed requests:':<36}{res.num_failed}",
        f"{'Benchmark duration (s):':<36}{res.duration_s:.2f}",
        f"{'Total input tokens:':<36}{res.input_tokens}",
        f"{'Total generated tokens:':<36}{res.output_tokens}",
        f"{'Request throughput (req/s):':<36}{res.request_throughput:.2f}",
        f"{'Output token throughput (tok/s):':<36}{res.output_throughput:.2f}",
    ]
    for name, values in [("TTFT", res.ttft), ("TPOT", res.tpot), ("ITL", res.itl)]:
        ms = [v * 1000 for v in values]
        mean = sum(ms) / len(ms) if ms else math.nan
        lines.append(f"{'Mean ' + name + ' (ms):':<36}{mean:.2f}")
        lines.append(f"{'Median ' + name + ' (ms):':<36}{percentile(ms, 50):.2f}")
        lines.append(f"{'P99 ' + name + ' (ms):':<36}{percentile(ms, 99):.2f}")
    return "\n".join(lines)


def run_serve_bench(args: Any) -> int:
    """``ossa bench serve``: args.base_url, concurrency, request_rate, num_prompts, input_len,
    output_len, model (the tokenizer used to size prompts; the served name is read from /v1/models)."""
    for name in ("num_prompts", "input_len", "output_len"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.concurrency is not None and args.concurrency < 1:
        raise ValueError(f"--concurrency must be >= 1, got {args.concurrency}")
    prompts, n_in = make_prompts(args.num_prompts, args.input_len, args.model)
    res = asyncio.run(
        bench_serve_async(args.base_url, prompts, args.output_len, args.concurrency, args.request_rate)
    )
    res.input_tokens = n_in
    print(format_result(res))
    return 0 if res.num_failed == 0 else 1
