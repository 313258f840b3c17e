"""Where n-gram speculation stops paying as the batch grows (the default of disable_by_batch_size).

Plain and n-gram engines live in ONE process and run the same first B prompts of a workload in turn,
best of --repeats, so that a loaded machine disturbs both alike (separate processes at load ~10 differ
by tens of percent). Speculation runs with disable_by_batch_size None (never disabled). Prints, per
batch size, both times, the ratio, and whether the tokens were the same.

    OSSA_CORE_DIR=build/dev/csrc PYTHONPATH=src python3 benchmarks/speculative_batch_sizes.py --sizes 2,4,8,16
"""

from __future__ import annotations

import argparse
import os
import time

from speculative import COPY, FREE

from ossa import LLM, SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--sizes", default="2,4,8,16")
    ap.add_argument("--workload", choices=("free", "copy-heavy"), default="free")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    prompts = list(FREE if args.workload == "free" else COPY)
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    engines = {
        "plain": LLM(args.model, num_threads=args.threads),
        "n-gram": LLM(
            args.model, num_threads=args.threads, speculative_config={**ngram, "disable_by_batch_size": None}
        ),
    }
    sp = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    for llm in engines.values():
        llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)
    for b in (int(x) for x in args.sizes.split(",")):
        best = {name: float("inf") for name in engines}
        tokens: dict[str, list] = {}
        for _ in range(args.repeats):
            for name, llm in engines.items():
                t = time.perf_counter()
                outs = llm.generate(prompts[:b], sp, use_tqdm=False)
                best[name] = min(best[name], time.perf_counter() - t)
                tokens[name] = [o.outputs[0].token_ids for o in outs]
        n = sum(len(t) for t in tokens["plain"])
        print(
            f"batch {b:3d}: plain {best['plain']:.2f} s, n-gram {best['n-gram']:.2f} s, "
            f"speed-up {best['plain'] / best['n-gram']:.2f}x, {n} tokens, "
            f"same tokens {tokens['plain'] == tokens['n-gram']}, load {os.getloadavg()[0]:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
