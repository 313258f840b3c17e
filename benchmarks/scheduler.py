"""One schedule() + update() step of the continuous-batching scheduler with 16, 64 and 256 running
(decoding) requests: the C++ core against its Python twin, side by side.

    OSSA_CORE_DIR=build/sched/csrc PYTHONPATH=src python benchmarks/scheduler.py

Columns: the C++ step driven from C++ (the engine's view: Scheduler.bench_steps loops in C++), the C++
step driven from Python through the bindings (one schedule() and one update(list) call a step), and
the twin. Each step includes the scheduler's per-token work: allocating a block every block_size steps
per request, hashing and caching the filled blocks (prefix caching on); the flat batch is built by the
engine (engine/batch_builder), not here.
Goal (issue 5): < 20 us a step at 256 requests for C++, and >= 20x the twin.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from ossa._native import core
from ossa.reference import scheduler as ref

PROMPT_LEN = 64
BLOCK_SIZE = 16


def make(kind: str, n_running: int, total_steps: int) -> Any:
    max_model_len = PROMPT_LEN + total_steps + 8
    blocks_per_seq = -(-max_model_len // BLOCK_SIZE)
    config = dict(
        num_blocks=n_running * blocks_per_seq + 64,
        block_size=BLOCK_SIZE,
        max_num_batched_tokens=max(2048, n_running),
        max_num_seqs=n_running,
        max_model_len=max_model_len,
        policy="fcfs",
        enable_prefix_caching=True,
        watermark=0.01,
    )
    if kind == "twin":
        sched, request_type = ref.Scheduler(ref.SchedulerConfig(**config)), ref.Request
    else:
        sched, request_type = core.Scheduler(core.SchedulerConfig(**config)), core.Request
    for i in range(n_running):
        # Distinct prompts (a shared system prefix would only make prefill cheaper).
        prompt = [(i * 7919 + j * 31) % 30000 + 2 for j in range(PROMPT_LEN)]
        sched.add_request(
            request_type(id=i, prompt=prompt, max_tokens=total_steps + 4, eos_token_ids=[1], ignore_eos=False)
        )
    # Prefill until every request is decoding.
    while True:
        out = sched.schedule()
        sched.update([5] * out.num_samples)
        if sched.stats().num_running == n_running and all(s[3] == 1 for s in out.seqs):
            break
    return sched


def python_steps(sched: Any, n_steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n_steps):
        out = sched.schedule()
        sched.update([5] * out.num_samples)
    return time.perf_counter() - t0


def per_step_us(kind: str, n_running: int, n_steps: int, repeats: int) -> tuple[float, float]:
    """(best, median) microseconds a step over ``repeats`` fresh runs."""
    times = []
    for _ in range(repeats):
        sched = make(kind, n_running, n_steps + 32)
        if kind == "cpp":
            elapsed = sched.bench_steps(n_steps, 5)
        else:
            elapsed = python_steps(sched, n_steps)
        times.append(elapsed / n_steps * 1e6)
    return min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=128, help="timed steps per run")
    parser.add_argument("--repeats", type=int, default=9, help="fresh runs per cell")
    args = parser.parse_args()
    print(
        f"schedule()+update() per step, decoding, block_size={BLOCK_SIZE}, prompt={PROMPT_LEN}, prefix cache"
    )
    print(f"{args.steps} steps a run, best (median) of {args.repeats} runs; ratios from the best times")
    header = (
        f"{'running':>8} {'C++ us':>16} {'C++ via py us':>16} {'twin us':>18} "
        f"{'twin/C++':>9} {'twin/C++py':>11}"
    )
    print(header)
    print("-" * len(header))
    for n in (16, 64, 256):
        cpp = per_step_us("cpp", n, args.steps, args.repeats)
        cpp_py = per_step_us("cpp_py", n, args.steps, args.repeats)
        twin = per_step_us("twin", n, args.steps, args.repeats)
        cells = [f"{best:.2f} ({median:.2f})" for best, median in (cpp, cpp_py)]
        print(
            f"{n:>8} {cells[0]:>16} {cells[1]:>16} {f'{twin[0]:.0f} ({twin[1]:.0f})':>18} "
            f"{twin[0] / cpp[0]:>8.0f}x {twin[0] / cpp_py[0]:>10.0f}x"
        )


if __name__ == "__main__":
    main()
