"""What speculation costs when it makes no drafts: plain and n-gram LLMs in ONE process, alternating, on
the free-generation batch (16 story prompts, greedy, ignore_eos, so all 16 run every step and the default
disable_by_batch_size 8 keeps every request from drafting). Prints each run's wall time and the engine's
own accounting (forward, sampling, scheduling, detokenize + propose_drafts seconds, steps, drafts) and the
best-of ratio; the host-side columns are what speculation could add per step.

    OSSA_CORE_DIR=build/dev/csrc PYTHONPATH=src python benchmarks/speculative_overhead.py [--max-tokens 48]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speculative import FREE, NGRAM  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from ossa import LLM, SamplingParams

    llms = {
        "plain": LLM(args.model, num_threads=args.threads),
        "ngram": LLM(args.model, num_threads=args.threads, speculative_config=NGRAM),
    }
    sp = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    for llm in llms.values():
        llm.generate(FREE[:2], SamplingParams(max_tokens=4), use_tqdm=False)  # warm
    keys = ("time_forward", "time_sample", "time_schedule", "time_detokenize", "steps", "spec_num_drafts")
    walls: dict[str, list[float]] = {name: [] for name in llms}
    print(f"{'run':6} {'wall s':>7} {'forward':>8} {'sample':>7} {'sched':>6} {'detok':>6} {'steps':>5} "
          f"{'drafts':>6} {'load':>5}")  # fmt: skip
    for _ in range(args.repeats):
        for name, llm in llms.items():
            st0 = llm.stats()
            t = time.perf_counter()
            llm.generate(FREE, sp, use_tqdm=False)
            wall = time.perf_counter() - t
            st = llm.stats()
            d = {k: st[k] - st0[k] for k in keys}
            walls[name].append(wall)
            print(f"{name:6} {wall:7.2f} {d['time_forward']:8.3f} {d['time_sample']:7.3f} "
                  f"{d['time_schedule']:6.3f} {d['time_detokenize']:6.3f} {d['steps']:5d} "
                  f"{d['spec_num_drafts']:6d} {os.getloadavg()[0]:5.2f}", flush=True)  # fmt: skip
    print(f"best-of ratio n-gram / plain tok/s: {min(walls['plain']) / min(walls['ngram']):.3f}")


if __name__ == "__main__":
    main()
