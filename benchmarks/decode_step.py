"""Where one decode step's time goes: tok/s of single-sequence decode after a --context-token prompt,
and with --profile the wall time of each op a step (OSSA_PROFILE=1), ossa alone.

    OSSA_CORE_DIR=build/dev/csrc PYTHONPATH=src python benchmarks/decode_step.py MODEL.gguf \\
        [--context 128] [--steps 32] [--rounds 3] [--profile] [--dtype bfloat16] [--quantized-activations]

Decode: best of --rounds runs of --steps greedy steps over the same positions (benchmarks/forward.py's
loop). --profile runs the same in two child processes with OSSA_PROFILE=1, once with the prompt alone
and once with the decode rounds, and prints the difference per decode step for each op, so the
prompt's prefill is not counted. This is an internal before / after measurement (compare two builds
with OSSA_CORE_DIR, interleaved); benchmarks/forward.py puts ossa beside llama.cpp.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def decode(path: str, context: int, steps: int, rounds: int, dtype: str, q8: bool, threads: int) -> float:
    """Best decode tok/s over `rounds` runs of `steps` steps after a `context`-token prompt."""
    from forward import prompt_and_step

    from ossa._native import core

    core.set_num_threads(threads)
    model = core.load_model(path, dtype=dtype, quantized_activations=q8)
    ids, step = prompt_and_step(model, context, steps)
    logits = step(ids, 0)
    best = float("inf")
    for _ in range(rounds):
        tok = int(np.argmax(logits[0]))
        t0 = time.perf_counter()
        for i in range(steps):
            tok = int(np.argmax(step([tok], context + i)[0]))
        best = min(best, time.perf_counter() - t0)
    return steps / best if rounds else float("nan")


def op_times(args: argparse.Namespace, rounds: int) -> dict[str, float]:
    """ms per op from OSSA_PROFILE's forward profile of a child process running decode()."""
    call = (f"decode({args.model!r}, {args.context}, {args.steps}, {rounds}, {args.dtype!r}, "
            f"{args.quantized_activations}, {args.threads})")  # fmt: skip
    code = f"import decode_step; decode_step.{call}"
    env = dict(os.environ, OSSA_PROFILE="1", PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    ops = {}
    for line in (r.stdout + r.stderr).splitlines():
        m = re.match(r"\s+(\S.*?)\s+([\d.]+) ms\s+[\d.]+%$", line)
        if m:
            ops[m.group(1)] = float(m.group(2))
    return ops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--context", type=int, default=128, help="prompt tokens before the decode steps")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--quantized-activations", action="store_true")
    ap.add_argument("--profile", action="store_true", help="ms per op a decode step (OSSA_PROFILE=1)")
    args = ap.parse_args()
    print(f"model {args.model}; context {args.context}; threads {args.threads}; load {os.getloadavg()}")
    rate = decode(args.model, args.context, args.steps, args.rounds, args.dtype, args.quantized_activations,
                  args.threads)  # fmt: skip
    print(f"decode {rate:.2f} tok/s ({1e3 / rate:.2f} ms a step)")
    if args.profile:
        before, after = op_times(args, 0), op_times(args, args.rounds)
        n = args.steps * args.rounds
        per = {k: (after[k] - before.get(k, 0.0)) / n for k in after}
        for k, v in per.items():
            print(f"  {k:20s} {v:8.3f} ms a step")
        print(f"  {'total':20s} {sum(per.values()):8.3f} ms a step")
        print(json.dumps({"tok_s": rate, "ms_per_step": per}))


if __name__ == "__main__":
    main()
